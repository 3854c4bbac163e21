"""Kafka's LogDirFailureChannel: the one place a log dir's I/O error is reported, once.

Every piece of storage that writes or reads a log dir (UnifiedLog, the LogManager's checkpoint
files, the Raft metadata log) runs its I/O through ``maybe_handle_io_exception``: an ``OSError``
(ENOSPC, EIO, EROFS...) takes the whole dir offline, and the caller gets KafkaStorageError
(KAFKA_STORAGE_ERROR, 56) instead of an exception nobody expects. Once a dir is offline every
later operation on it fails fast with KafkaStorageError and touches no file: an append after
an ENOSPC could otherwise land behind a torn one, or an index disagree with its segment.

An offline dir stays offline until the process restarts (Kafka's rule). The channel only
records and tells; what to do about it (stop the replicas in that dir, halt when no log dir
is left) is the broker's LogDirFailureHandler, told through ``listener``.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterator

import structlog

from storage.errors import KafkaStorageError

log = structlog.get_logger(__name__)


class LogDirFailureChannel:
    def __init__(self) -> None:
        # Cleaner threads and to_thread fsyncs do I/O too: the first report of a dir must win once.
        self._lock = threading.Lock()
        self._offline: dict[Path, str] = {}
        # Called once per newly offline dir, on the thread that hit the error.
        self.listener: Callable[[Path], None] | None = None

    def has_offline_log_dir(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    @property
    def offline_log_dirs(self) -> list[Path]:
        return list(self._offline)

    def maybe_add_offline_log_dir(self, log_dir: Path, message: str, cause: OSError) -> bool:
        """Take ``log_dir`` offline; True the first time. Logged at error once, with the cause and
        no traceback: an I/O error is not a bug, and a full disk makes every writer fail at once."""
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = message
        log.error("log_dir.offline", dir=str(log_dir), error=message, cause=describe_os_error(cause))
        if self.listener is not None:
            self.listener(log_dir)
        return True

    def check_online(self, log_dir: Path) -> None:
        # On every append and read: the empty dict is tested before a Path is hashed.
        if self._offline and log_dir in self._offline:
            raise KafkaStorageError(f"The log dir {log_dir} is already offline due to a previous IO exception.")

    def io_failed(self, log_dir: Path, message: str, cause: OSError) -> KafkaStorageError:
        """Take ``log_dir`` offline for ``cause``; the KafkaStorageError the caller raises."""
        self.maybe_add_offline_log_dir(log_dir, message, cause)
        return KafkaStorageError(f"{message}: {describe_os_error(cause)}")


def describe_os_error(e: OSError) -> str:
    """ENOSPC: No space left on device (rather than a bare errno number)."""
    name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else type(e).__name__
    return f"{name}: {e.strerror or e}"


@contextmanager
def maybe_handle_io_exception(channel: LogDirFailureChannel, log_dir: Path, message: str) -> Iterator[None]:
    """Kafka's LocalLog.maybeHandleIOException: fail fast on an offline dir; turn an OSError into
    KafkaStorageError after taking the dir offline."""
    channel.check_online(log_dir)
    try:
        yield
    except OSError as e:
        raise channel.io_failed(log_dir, message, e) from e


__all__ = ["LogDirFailureChannel", "describe_os_error", "maybe_handle_io_exception"]
