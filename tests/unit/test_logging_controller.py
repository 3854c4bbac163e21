"""LoggingController and RuntimeLoggerManager: run-time log levels (the broker-loggers resource),
with Kafka 4.4's checks and messages."""

from __future__ import annotations

import io
import types

import pytest
import structlog
from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from broker.logging_controller import LoggingController, kafka_level
from broker.runtime_logger_manager import RuntimeLoggerManager


@pytest.fixture
def controller() -> LoggingController:
    c = LoggingController("INFO", modules=lambda: {})
    c.register("broker.replica_manager")
    c.register("broker.group.consumer_group")
    return c


def test_a_logger_takes_its_nearest_ancestors_level_and_in_the_end_the_roots(controller: LoggingController) -> None:
    assert controller.loggers() == {
        "broker": "INFO",
        "broker.group": "INFO",
        "broker.group.consumer_group": "INFO",
        "broker.replica_manager": "INFO",
        "root": "INFO",
    }
    controller.set_level("broker", "DEBUG")
    controller.set_level("broker.group.consumer_group", "ERROR")
    assert controller.level_of("broker.replica_manager") == "DEBUG"
    assert controller.level_of("broker.group") == "DEBUG"
    assert controller.level_of("broker.group.consumer_group") == "ERROR"
    controller.unset_level("broker")
    assert controller.level_of("broker.replica_manager") == "INFO"
    controller.unset_level("root")
    assert controller.level_of("root") == "INFO"


def test_the_filter_drops_what_a_logger_is_below_and_follows_changes(controller: LoggingController) -> None:
    assert controller.enabled("broker.replica_manager", "info")
    assert not controller.enabled("broker.replica_manager", "debug")
    controller.set_level("broker.replica_manager", "TRACE")
    assert controller.enabled("broker.replica_manager", "debug")
    controller.set_level("broker", "FATAL")
    assert not controller.enabled("broker.group.consumer_group", "error")
    assert controller.enabled("broker.group.consumer_group", "critical")


def test_structlog_loggers_made_by_the_factory_are_named_registered_and_filtered() -> None:
    controller = LoggingController("WARNING", modules=lambda: {})
    out = io.StringIO()
    logger = structlog.wrap_logger(
        controller.logger_factory(out)("storage.log_segment"),
        processors=[controller.filter_by_level, structlog.processors.KeyValueRenderer(key_order=["event", "logger"])],
    )
    assert controller.exists("storage") and controller.exists("storage.log_segment")
    logger.info("quiet")
    logger.warning("loud")
    controller.set_level("storage", "DEBUG")
    logger.debug("now")
    assert out.getvalue().splitlines() == ["event='loud' logger='storage.log_segment'", "event='now' logger='storage.log_segment'"]


def test_a_loaded_modules_logger_exists_before_it_first_logs() -> None:
    module = types.ModuleType("broker.not_yet_logging")
    module.log = structlog.get_logger("broker.not_yet_logging")  # type: ignore[attr-defined]
    elsewhere = types.ModuleType("thirdparty.thing")
    elsewhere.log = structlog.get_logger("thirdparty.thing")  # type: ignore[attr-defined]
    controller = LoggingController("INFO", modules=lambda: {"broker.not_yet_logging": module, "thirdparty.thing": elsewhere})
    assert controller.exists("broker.not_yet_logging")
    assert not controller.exists("thirdparty.thing")
    assert list(controller.loggers()) == ["broker", "broker.not_yet_logging", "root"]


def test_configured_levels_may_be_spelt_as_python_spells_them() -> None:
    assert kafka_level("warning") == "WARN"
    assert kafka_level("critical") == "FATAL"
    with pytest.raises(ValueError):
        kafka_level("LOUD")


def test_kafkas_checks_of_an_alteration_in_its_order(controller: LoggingController) -> None:
    manager = RuntimeLoggerManager(1, controller)
    name = "broker.replica_manager"
    assert manager.apply("x", [(name, OP_SET, "DEBUG")], False) == (ErrorCode.invalid_request, "Node id must be an integer, but it is: x")
    assert manager.apply("2", [(name, OP_SET, "DEBUG")], False) == (ErrorCode.invalid_request, "Unexpected node id. Expected 1, but received 2")
    assert manager.apply("1", [("no.such", OP_SET, "DEBUG")], False) == (ErrorCode.invalid_config, "Logger no.such does not exist!")
    assert manager.apply("1", [("no.such", OP_DELETE, None)], False) == (ErrorCode.invalid_config, "Logger no.such does not exist!")
    assert manager.apply("1", [(name, OP_SET, "debug")], False) == (
        ErrorCode.invalid_config,
        f"Cannot set the log level of {name} to debug as it is not a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
    )
    assert manager.apply("1", [("root", OP_DELETE, None)], False) == (ErrorCode.invalid_request, "Removing the log level of the root logger is not allowed")
    assert manager.apply("1", [(name, OP_APPEND, "DEBUG")], False) == (ErrorCode.invalid_request, "APPEND operation is not allowed for the BROKER_LOGGER resource")
    assert manager.apply("1", [(name, OP_SUBTRACT, "DEBUG")], False) == (ErrorCode.invalid_request, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource")
    assert manager.apply("1", [(name, 7, "DEBUG")], False) == (ErrorCode.invalid_request, "Unknown operation type 7 is not allowed for the BROKER_LOGGER resource")
    assert controller.level_of(name) == "INFO"


def test_a_resource_applies_whole_or_not_at_all_and_validate_only_changes_nothing(controller: LoggingController) -> None:
    manager = RuntimeLoggerManager(1, controller)
    assert manager.apply("1", [("broker", OP_SET, "DEBUG"), ("no.such", OP_SET, "DEBUG")], False) is not None
    assert controller.level_of("broker") == "INFO"
    assert manager.apply("1", [("broker", OP_SET, "DEBUG")], True) is None
    assert controller.level_of("broker") == "INFO"
    assert manager.apply("1", [("broker", OP_SET, "DEBUG"), ("broker.group", OP_SET, "WARN")], False) is None
    assert (controller.level_of("broker.replica_manager"), controller.level_of("broker.group.consumer_group")) == ("DEBUG", "WARN")
    assert manager.apply("1", [("broker.group", OP_DELETE, None)], False) is None
    assert controller.level_of("broker.group.consumer_group") == "DEBUG"
