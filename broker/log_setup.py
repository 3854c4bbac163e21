"""structlog set-up: readable lines on a terminal, JSON lines when KBROKER_LOG_FORMAT=json.

Every event passes LOGGING_CONTROLLER's level filter first, so that a logger's level can change
while the broker runs (the broker-loggers config resource)."""

from __future__ import annotations

import logging
import os
import sys

import structlog

from broker.logging_controller import LOGGING_CONTROLLER


def setup_logging(level: str | None = None) -> None:
    LOGGING_CONTROLLER.set_root_level(level or os.environ.get("KBROKER_LOG_LEVEL", "INFO"))
    as_json = os.environ.get("KBROKER_LOG_FORMAT", "").lower() == "json"
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            LOGGING_CONTROLLER.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        # Loggers are cached on first use, so this filter cannot follow later level changes: it
        # lets every method through (structlog has nothing below debug), and the processor decides.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=LOGGING_CONTROLLER.logger_factory(sys.stderr),
        cache_logger_on_first_use=True,
    )
