"""LoggingController: the log levels of a process's named loggers, changeable at run time.

Kafka's broker-loggers resource (KIP-412): DescribeConfigs lists every logger with the level it
logs at, IncrementalAlterConfigs sets or unsets one. Loggers are the modules' structlog loggers,
named by module (``broker.replica_manager``) and arranged as log4j arranges them: a logger with no
level of its own takes its nearest ancestor's (``broker``), and in the end the root logger's.
Levels live in this process only and are back to the configured ones after a restart, as in Kafka.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, TextIO

import structlog

ROOT_LOGGER = "root"

# Kafka's LogLevelConfig.VALID_LOG_LEVELS, as numbers comparable with structlog's methods'.
LOG_LEVELS: Mapping[str, int] = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERROR": 40, "FATAL": 50}
VALID_LOG_LEVELS = ", ".join(sorted(LOG_LEVELS))

# A structlog method's level; "msg" and "log" are unconditional in structlog, so they log at INFO.
_METHOD_LEVELS: Mapping[str, int] = {
    "debug": 10,
    "info": 20,
    "msg": 20,
    "log": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
    "fatal": 50,
}

# The packages whose modules' loggers are listed before they first log.
PACKAGES = ("broker", "storage", "raft", "replication", "protocol")

# Python's names for the levels Kafka spells otherwise.
_PYTHON_NAMES: Mapping[str, str] = {"WARNING": "WARN", "CRITICAL": "FATAL", "NOTSET": "TRACE"}


def kafka_level(name: str) -> str:
    """A configured level (KBROKER_LOG_LEVEL) as Kafka spells it: "warning" is WARN."""
    level = _PYTHON_NAMES.get(name.upper(), name.upper())
    if level not in LOG_LEVELS:
        raise ValueError(f"{name} is not a supported log level. Valid log levels are {VALID_LOG_LEVELS}")
    return level


class LoggingController:
    """The known loggers, the levels set on them, and the structlog processor that drops what a
    logger's level is below. Sans-IO: loggers register themselves through ``logger_factory``."""

    def __init__(self, root_level: str = "INFO", modules: Callable[[], Mapping[str, ModuleType]] = lambda: sys.modules) -> None:
        self._levels: dict[str, str] = {ROOT_LOGGER: kafka_level(root_level)}
        self._known: set[str] = {ROOT_LOGGER}
        self._modules = modules
        # name -> number; cleared whenever a level changes, since a change moves every descendant.
        self._effective: dict[str, int] = {}

    def register(self, name: str) -> None:
        """A logger now exists, and so do its ancestors, as packages do."""
        parts = name.split(".")
        self._known.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    def discover(self) -> None:
        """Registers the loggers of every loaded module, as a Java class's static logger exists
        once the class is loaded: structlog makes a module's logger only when it first logs."""
        for module_name, module in list(self._modules().items()):
            if module is None or module_name.split(".", 1)[0] not in PACKAGES:
                continue
            # structlog keeps the name a lazy proxy was asked for only in this private attribute.
            for value in vars(module).values():
                if isinstance(value, structlog._config.BoundLoggerLazyProxy) and value._logger_factory_args:
                    self.register(str(value._logger_factory_args[0]))

    def exists(self, name: str) -> bool:
        self.discover()
        return name in self._known

    def level_of(self, name: str) -> str:
        """The level ``name`` logs at: its own, else its nearest ancestor's, else the root's."""
        while name not in self._levels:
            cut = name.rfind(".")
            name = name[:cut] if cut > 0 else ROOT_LOGGER
        return self._levels[name]

    def loggers(self) -> dict[str, str]:
        """Every known logger and the level it logs at, as Kafka's Log4jController.loggers."""
        self.discover()
        return {name: self.level_of(name) for name in sorted(self._known)}

    def set_root_level(self, level: str) -> None:
        self._levels[ROOT_LOGGER] = kafka_level(level)
        self._effective.clear()

    def set_level(self, name: str, level: str) -> None:
        """``level`` spelt exactly as Kafka spells it (IncrementalAlterConfigs is case-sensitive)."""
        if level not in LOG_LEVELS:
            raise ValueError(f"{level} is not one of {VALID_LOG_LEVELS}")
        self._levels[name] = level
        self._effective.clear()

    def unset_level(self, name: str) -> None:
        if name != ROOT_LOGGER:
            self._levels.pop(name, None)
            self._effective.clear()

    def enabled(self, name: str, method_name: str) -> bool:
        threshold = self._effective.get(name)
        if threshold is None:
            threshold = self._effective[name] = LOG_LEVELS[self.level_of(name)]
        return _METHOD_LEVELS.get(method_name, 20) >= threshold

    def filter_by_level(self, logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        """The first structlog processor: drops an event below its logger's level and names the
        logger in the ones it keeps, as Kafka's log lines name theirs."""
        name = getattr(logger, "name", None) or ROOT_LOGGER
        if not self.enabled(name, method_name):
            raise structlog.DropEvent
        if name != ROOT_LOGGER:
            event_dict.setdefault("logger", name)
        return event_dict

    def logger_factory(self, file: TextIO) -> "NamedPrintLoggerFactory":
        return NamedPrintLoggerFactory(self, file)


class NamedPrintLogger(structlog.PrintLogger):
    """structlog's PrintLogger with the name it was asked for, as a stdlib logger has one."""

    def __init__(self, file: TextIO, name: str | None) -> None:
        super().__init__(file)
        self.name = name


class NamedPrintLoggerFactory:
    """Makes the loggers ``structlog.get_logger(__name__)`` asks for, registering each name."""

    def __init__(self, controller: LoggingController, file: TextIO) -> None:
        self._controller = controller
        self._file = file

    def __call__(self, *args: Any) -> NamedPrintLogger:
        name = args[0] if args and isinstance(args[0], str) else None
        if name is not None:
            self._controller.register(name)
        return NamedPrintLogger(self._file, name)


# The process's one controller: structlog's configuration, like log4j's, is process-wide.
LOGGING_CONTROLLER = LoggingController()

__all__ = ["LOGGING_CONTROLLER", "LOG_LEVELS", "LoggingController", "NamedPrintLogger", "ROOT_LOGGER", "VALID_LOG_LEVELS", "kafka_level"]
