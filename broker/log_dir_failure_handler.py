"""Kafka's LogDirFailureHandler: what a node does once the LogDirFailureChannel takes a log dir offline.

Kafka (ReplicaManager.handleLogDirFailure, LogManager.handleLogDirFailure) stops the replicas of
the failed dir and tells the controller (BrokerHeartbeat's OfflineLogDirs, KIP-858), unless
that leaves it nothing to serve from: it halts the process when no live log dir is left ("Shutdown
broker because all log dirs in ... have failed") or when the failed dir holds the metadata log
("Shutdown broker because the metadata log dir ... has failed"). A halt is not a shutdown: no
controlled shutdown, no checkpoint, no clean-shutdown marker, so the next start recovers every
log of the dir and truncates a torn tail. The controller fences the node when its heartbeats
stop and elects new leaders from the ISR.

Otherwise the node goes on serving from its other log dirs: ``on_offline`` (the broker's
handle_log_dir_failure) stops the failed dir's replicas and has the next BrokerHeartbeat name the
dir in OfflineLogDirs, so that the controller moves their leadership and ISR membership elsewhere.
``decide`` is the sans-IO rule.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Callable

import structlog

from storage.log_dir_failure_channel import LogDirFailureChannel

log = structlog.get_logger(__name__)

HALT_EXIT_CODE = 1  # Kafka's Exit.halt(1)


def decide(failed_dir: Path, log_dirs: list[Path], offline: list[Path], metadata_dir: Path) -> str | None:
    """Why the process must halt after ``failed_dir`` went offline, None when it can go on serving."""
    # In Kafka's order: LogManager.handleLogDirFailure, then ReplicaManager's metadata log dir check.
    if not [d for d in log_dirs if d not in offline]:
        return f"Shutdown broker because all log dirs in {', '.join(str(d) for d in log_dirs)} have failed"
    if failed_dir == metadata_dir:
        return f"Shutdown broker because the metadata log dir {failed_dir} has failed"
    return None


def halt(reason: str) -> None:
    """Kafka's Exit.halt: no shutdown hooks, nothing more written to any log dir."""
    log.critical("node.halting", reason=reason, exit_code=HALT_EXIT_CODE)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(HALT_EXIT_CODE)


class LogDirFailureHandler:
    def __init__(
        self,
        channel: LogDirFailureChannel,
        loop: asyncio.AbstractEventLoop,
        *,
        log_dirs: list[Path],
        metadata_dir: Path,
        on_halt: Callable[[str], None] = halt,
    ) -> None:
        self._channel = channel
        self._loop = loop
        self._log_dirs = log_dirs
        self._metadata_dir = metadata_dir
        self._on_halt = on_halt
        # Set once the broker exists: a dir that fails while its logs load is simply not registered.
        self.on_offline: Callable[[Path], None] | None = None

    def install(self) -> None:
        # The channel is told on whichever thread hit the error (cleaner, to_thread fsyncs): the
        # decision runs on the loop. Requests in this loop turn still get KAFKA_STORAGE_ERROR.
        self._channel.listener = lambda failed: self._loop.call_soon_threadsafe(self.handle, failed)

    def handle(self, failed_dir: Path) -> None:
        reason = decide(failed_dir, self._log_dirs, self._channel.offline_log_dirs, self._metadata_dir)
        if reason is not None:
            self._on_halt(reason)
        elif self.on_offline is not None:
            self.on_offline(failed_dir)


__all__ = ["LogDirFailureHandler", "decide", "halt"]
