"""RuntimeLoggerManager: IncrementalAlterConfigs on the broker-loggers resource (type 8).

Kafka's receiving broker answers these itself and never forwards them: the levels belong to its
own process and are not kept in the metadata log. The checks and their messages are Kafka's
RuntimeLoggerManager's, in its order; the whole resource is checked before any level changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from broker.logging_controller import LOG_LEVELS, ROOT_LOGGER, VALID_LOG_LEVELS, LoggingController

log = structlog.get_logger(__name__)

# (error code, message), or None when the resource was applied (or would be, validating only).
LoggerAnswer = tuple[ErrorCode, str] | None
# (logger name, operation, level) as IncrementalAlterConfigs carries them.
LoggerOp = tuple[str, int, str | None]


class LoggerConfigError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class RuntimeLoggerManager:
    def __init__(self, node_id: int, controller: LoggingController) -> None:
        self._node_id = node_id
        self._controller = controller

    def apply(self, resource_name: str, ops: Sequence[LoggerOp], validate_only: bool) -> LoggerAnswer:
        try:
            self._check_node_id(resource_name)
            for name, op, level in ops:
                self._check(name, op, level)
        except LoggerConfigError as e:
            return e.error_code, str(e)
        if not validate_only:
            for name, op, level in ops:
                if op == OP_SET:
                    assert level is not None
                    self._controller.set_level(name, level)
                    log.warning("logger.level_set", name=name, level=level)
                else:
                    self._controller.unset_level(name)
                    log.warning("logger.level_unset", name=name, level=self._controller.level_of(name))
        return None

    def _check_node_id(self, resource_name: str) -> None:
        try:
            requested = int(resource_name)
        except ValueError:
            raise LoggerConfigError(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {resource_name}") from None
        if requested != self._node_id:
            raise LoggerConfigError(ErrorCode.invalid_request, f"Unexpected node id. Expected {self._node_id}, but received {resource_name}")

    def _check(self, name: str, op: int, level: str | None) -> None:
        if op in (OP_SET, OP_DELETE) and not self._controller.exists(name):
            raise LoggerConfigError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
        if op == OP_SET:
            if level is None or level not in LOG_LEVELS:
                raise LoggerConfigError(
                    ErrorCode.invalid_config,
                    f"Cannot set the log level of {name} to {level} as it is not a supported log level. Valid log levels are {VALID_LOG_LEVELS}",
                )
        elif op == OP_DELETE:
            if name == ROOT_LOGGER:
                raise LoggerConfigError(ErrorCode.invalid_request, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
        elif op == OP_APPEND:
            raise LoggerConfigError(ErrorCode.invalid_request, "APPEND operation is not allowed for the BROKER_LOGGER resource")
        elif op == OP_SUBTRACT:
            raise LoggerConfigError(ErrorCode.invalid_request, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource")
        else:
            raise LoggerConfigError(ErrorCode.invalid_request, f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource")


__all__ = ["LoggerAnswer", "LoggerOp", "RuntimeLoggerManager"]
