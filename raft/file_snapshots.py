"""Raft snapshots as files in the metadata log's folder, named and written as Kafka's.

A snapshot ``(end offset, epoch)`` lives in ``<20-digit offset>-<10-digit epoch>.checkpoint``.
A writer fills a ``<id>-<random>.checkpoint.part`` file; ``freeze`` checks that the file is
whole record batches with valid CRCs, fsyncs it, renames it to its final name and fsyncs the
folder, so after a crash a snapshot is either whole under its final name or a ``.part`` that
the next open deletes. Nothing here decodes records: the Raft core builds and reads the
snapshot's batches (header, records, footer); these files only keep and serve the bytes.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import structlog

from protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, InvalidBatch, is_crc_valid, read_header
from raft.replicated_log import OffsetAndEpoch
from storage.checkpoints import fsync_dir
from storage.errors import CorruptRecordError

log = structlog.get_logger(__name__)

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = SUFFIX + ".part"
DELETE_SUFFIX = SUFFIX + ".deleted"
_OFFSET_WIDTH = 20
_EPOCH_WIDTH = 10
# A final name, a writer's temp name (Kafka adds a random part after the id) or one marked for deletion.
_NAME = re.compile(r"^(\d{20})-(\d{10})(?:-[^.]*)?(\.checkpoint(?:\.part|\.deleted)?)$")
_BATCH_LENGTH = struct.Struct(">i")

IoGuard = Callable[[str], AbstractContextManager[None]]
"""Runs a writer's file I/O, told what it does: the metadata log's reports an OSError to the
LogDirFailureChannel, since a snapshot is a file of the metadata log dir."""


def _unguarded(_what: str) -> AbstractContextManager[None]:
    return nullcontext()


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    """``<20-digit end offset>-<10-digit epoch>``, Kafka's Snapshots.filenameFromSnapshotId."""
    return f"{snapshot_id.offset:0{_OFFSET_WIDTH}d}-{snapshot_id.epoch:0{_EPOCH_WIDTH}d}"


def snapshot_path(log_dir: Path, snapshot_id: OffsetAndEpoch) -> Path:
    return log_dir / (snapshot_file_name(snapshot_id) + SUFFIX)


@dataclass(frozen=True, slots=True)
class SnapshotPath:
    path: Path
    snapshot_id: OffsetAndEpoch
    partial: bool
    deleted: bool


def parse_snapshot_path(path: Path) -> SnapshotPath | None:
    """The snapshot a file in the log folder belongs to; None for every other file there."""
    match = _NAME.match(path.name)
    if match is None:
        return None
    suffix = match.group(3)
    return SnapshotPath(path, OffsetAndEpoch(int(match.group(1)), int(match.group(2))), suffix == PARTIAL_SUFFIX, suffix == DELETE_SUFFIX)


def list_snapshot_paths(log_dir: Path) -> list[SnapshotPath]:
    with os.scandir(log_dir) as entries:
        found = [parse_snapshot_path(Path(entry.path)) for entry in entries if entry.is_file()]
    return [p for p in found if p is not None]


def delete_snapshot(log_dir: Path, snapshot_id: OffsetAndEpoch) -> bool:
    """Remove a snapshot's file (and a leftover ``.deleted`` of it); True if one existed."""
    removed = False
    for path in (snapshot_path(log_dir, snapshot_id), log_dir / (snapshot_file_name(snapshot_id) + DELETE_SUFFIX)):
        try:
            path.unlink()
            removed = True
        except FileNotFoundError:
            pass
    return removed


class FileRawSnapshotWriter:
    """Appends raw batch bytes to a ``.part`` file; ``freeze`` publishes it, ``close`` discards it unless frozen."""

    def __init__(self, path: Path, fd: int, snapshot_id: OffsetAndEpoch, on_frozen: Callable[[OffsetAndEpoch], None] | None, io: IoGuard = _unguarded) -> None:
        self._path = path
        self._fd: int | None = fd
        self._snapshot_id = snapshot_id
        self._on_frozen = on_frozen
        self._io = io
        self._size = 0
        self._frozen = False

    @classmethod
    def create(
        cls, log_dir: Path, snapshot_id: OffsetAndEpoch, on_frozen: Callable[[OffsetAndEpoch], None] | None = None, io: IoGuard = _unguarded
    ) -> "FileRawSnapshotWriter":
        """A writer on a new, uniquely named ``.part`` file (two writers of one id never share a file)."""
        with io(f"creating snapshot {snapshot_file_name(snapshot_id)} of {log_dir.name}"):
            log_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(suffix=PARTIAL_SUFFIX, prefix=snapshot_file_name(snapshot_id) + "-", dir=log_dir)
        return cls(Path(name), fd, snapshot_id, on_frozen, io)

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def path(self) -> Path:
        """The ``.part`` file until frozen, the final file after."""
        return self._path

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def size_in_bytes(self) -> int:
        return self._size

    def append(self, batches: bytes | bytearray | memoryview) -> None:
        """Add bytes as they come: whole batches, or a FetchSnapshot chunk that may end inside one."""
        fd = self._writable_fd("append to")
        view = memoryview(batches).cast("B")
        written = 0
        with self._io(f"writing snapshot {self._name}"):
            while written < view.nbytes:
                written += os.write(fd, view[written:])
        self._size += written

    def freeze(self) -> None:
        """Check the bytes are whole batches, then fsync, mark read-only, rename into place and fsync the folder."""
        fd = self._writable_fd("freeze")
        destination = snapshot_path(self._path.parent, self._snapshot_id)
        with self._io(f"freezing snapshot {self._name}"):
            _check_whole_batches(fd, self._size, self._path)
            os.fsync(fd)
            os.close(fd)
            self._fd = None
            os.chmod(self._path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            os.replace(self._path, destination)
            fsync_dir(self._path.parent)
        self._path = destination
        self._frozen = True
        log.info("raft.snapshot_frozen", snapshot=destination.name, bytes=self._size)
        if self._on_frozen is not None:
            self._on_frozen(self._snapshot_id)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._frozen:
            self._path.unlink(missing_ok=True)

    @property
    def _name(self) -> str:
        return f"{snapshot_file_name(self._snapshot_id)} of {self._path.parent.name}"

    def _writable_fd(self, operation: str) -> int:
        if self._frozen:
            raise RuntimeError(f"cannot {operation} snapshot {self._snapshot_id}: it is frozen")
        if self._fd is None:
            raise RuntimeError(f"cannot {operation} snapshot {self._snapshot_id}: its writer is closed")
        return self._fd

    def __repr__(self) -> str:
        return f"FileRawSnapshotWriter({self._path.name}, bytes={self._size}, frozen={self._frozen})"


class FileRawSnapshotReader:
    """A frozen snapshot's bytes by range, for loading it and for FetchSnapshot chunks."""

    def __init__(self, path: Path, fd: int, snapshot_id: OffsetAndEpoch) -> None:
        self._path = path
        self._fd: int | None = fd
        self._snapshot_id = snapshot_id
        self._size = os.fstat(fd).st_size

    @classmethod
    def open(cls, log_dir: Path, snapshot_id: OffsetAndEpoch) -> "FileRawSnapshotReader":
        """Raises FileNotFoundError when the snapshot has no frozen file."""
        path = snapshot_path(log_dir, snapshot_id)
        return cls(path, os.open(path, os.O_RDONLY), snapshot_id)

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    def size_in_bytes(self) -> int:
        return self._size

    def read(self, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from byte ``position``; a chunk may end inside a batch (the fetcher appends it raw)."""
        if self._fd is None:
            raise RuntimeError(f"snapshot reader {self._snapshot_id} is closed")
        if position < 0 or position > self._size:
            raise ValueError(f"position {position} is outside snapshot {self._snapshot_id} of {self._size} bytes")
        if max_bytes < 0:
            raise ValueError(f"negative max bytes {max_bytes}")
        length = min(max_bytes, self._size - position)
        chunks: list[bytes] = []
        while length > 0:
            chunk = os.pread(self._fd, length, position)
            if not chunk:
                raise CorruptRecordError(f"snapshot file {self._path} is shorter than the {self._size} bytes it had at open")
            chunks.append(chunk)
            position += len(chunk)
            length -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"FileRawSnapshotReader({self._path.name}, bytes={self._size})"


def _check_whole_batches(fd: int, size: int, path: Path) -> None:
    """One batch in memory at a time: a snapshot may be far larger than any batch."""
    position = 0
    while position < size:
        if size - position < HEADER_SIZE:
            raise CorruptRecordError(f"snapshot {path.name} ends with {size - position} bytes that are not a whole batch")
        (length,) = _BATCH_LENGTH.unpack(os.pread(fd, 4, position + 8))
        batch_size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or position + batch_size > size:
            raise CorruptRecordError(f"snapshot {path.name} has a partial or malformed batch at byte {position} (length {length})")
        batch = os.pread(fd, batch_size, position)
        try:
            header = read_header(batch)
        except InvalidBatch as e:
            raise CorruptRecordError(f"snapshot {path.name} has an invalid batch at byte {position}: {e}") from None
        if not is_crc_valid(batch, header):
            raise CorruptRecordError(f"snapshot {path.name} has a batch with a bad CRC at byte {position}")
        position += batch_size


__all__ = [
    "DELETE_SUFFIX",
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "IoGuard",
    "PARTIAL_SUFFIX",
    "SUFFIX",
    "SnapshotPath",
    "delete_snapshot",
    "list_snapshot_paths",
    "parse_snapshot_path",
    "snapshot_file_name",
    "snapshot_path",
]
