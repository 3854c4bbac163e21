"""librdkafka's own account of each confluent-kafka client of the chaos bench, written beside its history."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

# A directory named here gets librdkafka's own account of each confluent-kafka client: its
# sequence numbers, epoch bumps, drains and retries, which the broker's logs cannot show.
CLIENT_LOGS_ENV = "KBROKER_CHAOS_CLIENT_LOGS"
LIBRDKAFKA_DEBUG = "eos,msg,topic,broker"
# A group member's: its rebalances, the committed offsets it fetched, where it reset a position and why.
LIBRDKAFKA_CONSUMER_DEBUG = "cgrp,topic,broker"


def librdkafka_debug(name: str, contexts: str = LIBRDKAFKA_DEBUG) -> dict[str, Any]:
    """The settings that send ``name``'s librdkafka debug log to ``$KBROKER_CHAOS_CLIENT_LOGS/<name>.librdkafka.log``
    (none when the variable is unset)."""
    directory = os.environ.get(CLIENT_LOGS_ENV)
    if not directory:
        return {}
    Path(directory).mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"librdkafka.{name}")
    for old in logger.handlers[:]:  # a client of an earlier campaign in this process
        logger.removeHandler(old)
        old.close()
    handler = logging.FileHandler(Path(directory) / f"{name}.librdkafka.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return {"debug": contexts, "log_level": 7, "logger": logger}
