"""Kafka's FileLock: the `.lock` file by which one process owns a log directory while it runs.

Apache Kafka locks every log dir (LogManager.lockLogDirs) and a metadata log dir of its own
(KafkaRaftManager.lockDataDir) with FileChannel.tryLock on `<dir>/.lock`, refuses to start when
one is taken ("Failed to acquire lock on file .lock in <dir>. A Kafka instance in another
process or thread is using this directory."), and on a clean shutdown unlocks and deletes the
file (FileLock.destroy). On Linux tryLock is a POSIX record lock (fcntl F_SETLK, whole file), so
``fcntl.lockf`` here and Kafka's lock exclude each other: neither starts on a directory the
other runs on. The file is left behind by a crash and a halt; its content is never used.

POSIX record locks belong to the process, not to the descriptor: a second lock of the same file
in this process would succeed, and closing any descriptor of it would drop the lock. The JVM
refuses an overlapping lock in its own process (OverlappingFileLockException, which tryLock
answers as "not locked"); ``_HELD`` does the same here, by file identity.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

LOCK_FILE_NAME = ".lock"

# (st_dev, st_ino) of the lock files this process holds.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()


class DirLockError(Exception):
    """A directory's lock not taken, so the node does not start: Kafka's KafkaException (held elsewhere) or
    IOException (a disk error), in one line."""


def lock_failed_message(directory: Path) -> str:
    return f"Failed to acquire lock on file {LOCK_FILE_NAME} in {directory}. A Kafka instance in another process or thread is using this directory."


class FileLock:
    """A lock ``lock_dir`` took: held until ``destroy`` (a clean shutdown) or ``unlock_and_close``."""

    def __init__(self, path: Path, fd: int, key: tuple[int, int]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._key = key

    def unlock_and_close(self) -> None:
        """Let go of the file and leave it there (Kafka's unlockAndClose)."""
        self._release(delete=False)

    def destroy(self) -> None:
        """Kafka's FileLock.destroy, on a clean shutdown: unlock, delete the file, close it."""
        self._release(delete=True)

    def _release(self, *, delete: bool) -> None:
        if self._fd is None:
            return
        with _HELD_LOCK:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
            _HELD.discard(self._key)
            if delete:
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
        self._fd = None


def lock_dir(directory: Path) -> FileLock:
    """Kafka's FileLock.tryLock on ``directory``/.lock, the file created if need be. Raises
    DirLockError when another process or this one holds it, OSError when the file cannot
    be opened or locked (Kafka's "Disk error while locking directory")."""
    path = directory / LOCK_FILE_NAME
    with _HELD_LOCK:
        # Asked before opening: closing a second descriptor of a file this process holds would
        # release the lock it holds.
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            pass
        else:
            if (stat.st_dev, stat.st_ino) in _HELD:
                raise DirLockError(lock_failed_message(directory))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise DirLockError(lock_failed_message(directory)) from None
            raise
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        _HELD.add(key)
    return FileLock(path, fd, key)


__all__ = ["LOCK_FILE_NAME", "DirLockError", "FileLock", "lock_dir", "lock_failed_message"]
