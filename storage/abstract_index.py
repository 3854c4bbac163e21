"""Kafka's AbstractIndex: a file of fixed-size entries, searched by binary search.

Kafka memory-maps index files. Here the entries live in a bytearray and the file is written
with plain syscalls, for three reasons measured on this broker: a first store into a fresh
page of a mapped sparse file made the kernel read ahead and zero large folios (40% of broker
CPU when producing to 64 partitions); CPython's mmap keeps a dup of the file descriptor, so
10,000 partitions held 30,000 fds; and an idle partition should cost no memory.

So, as Kafka's LazyIndex: nothing is read until the first lookup or append. Appends only
touch the bytearray; ``flush`` (a log flush) writes the new tail and fsyncs; rolling or
closing a segment writes the file to exactly its entries (``trim_to_valid_size``). Entries
appended after the last flush are lost in a crash, which is fine: recovery rebuilds the
indexes of every segment from the one holding the recovery point onward, and a flush is what
moves the recovery point.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import ClassVar


class CorruptIndexError(Exception):
    """The index file cannot be trusted; the segment is recovered from its log instead."""


class InvalidIndexEntryError(ValueError):
    """An append would break the index's ordering (Kafka's InvalidOffsetException)."""


class IndexFullError(ValueError):
    pass


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class AbstractIndex:
    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        size = self.ENTRY.size
        if max_index_size < size:
            raise ValueError(f"index size {max_index_size} is smaller than one {size}-byte entry")
        self.max_index_size = max_index_size - max_index_size % size
        self.max_entries = self.max_index_size // size
        # A new segment's index files are created when first written (a flush, a roll, a close):
        # creating files is the dearest part of making a partition (an inode each), and an empty
        # index needs none. A segment with data whose index files are missing is rebuilt at load.
        try:
            length = os.stat(path).st_size
            self._on_disk = True
        except FileNotFoundError:
            length = 0
            self._on_disk = False
        self.file_length_valid = length % size == 0
        self._entries = length // size
        # None until first needed; then the entries, whose first ``_synced`` bytes match the file.
        self._buf: bytearray | None = None
        self._synced = self._entries * size
        self._file_length = length

    # -- size -------------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    def __len__(self) -> int:
        return self._entries

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    # -- the buffer and the file ------------------------------------------------------------------

    def _loaded(self) -> bytearray:
        buf = self._buf
        if buf is None:
            wanted = self._entries * self.ENTRY.size
            if wanted == 0:
                buf = bytearray()
            else:
                with open(self.path, "rb") as f:
                    buf = bytearray(f.read(wanted))
            if len(buf) < wanted:  # the file shrank under us: trust what is there
                self._entries = len(buf) // self.ENTRY.size
                del buf[self._entries * self.ENTRY.size :]
                self._synced = len(buf)
            self._buf = buf
        return buf

    def _write_out(self, fsync: bool) -> None:
        """Make the file hold exactly the entries: write the unsynced tail, cut anything past it."""
        length = self._entries * self.ENTRY.size
        if self._synced == length == self._file_length and self._on_disk and not fsync:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._synced < length:
                tail = memoryview(self._loaded())[self._synced : length]
                written = 0
                while written < len(tail):
                    written += os.pwrite(fd, tail[written:], self._synced + written)
            if self._file_length != length:
                os.ftruncate(fd, length)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._on_disk = True
        self._synced = self._file_length = length

    def trim_to_valid_size(self) -> None:
        self._write_out(fsync=False)

    def _append_entry(self, entry: bytes) -> None:
        self._loaded().extend(entry)
        self._entries += 1

    # -- entries ----------------------------------------------------------------------------------

    def _slot_bytes(self, slot: int) -> bytes | bytearray:
        """One entry; read straight from the file while the index is not loaded (start-up checks)."""
        size = self.ENTRY.size
        if self._buf is not None:
            return self._buf[slot * size : (slot + 1) * size]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, size, slot * size)
        finally:
            os.close(fd)

    def _field_i32(self, slot: int, at: int) -> int:
        return _I32.unpack_from(self._loaded(), slot * self.ENTRY.size + at)[0]

    def _field_i64(self, slot: int, at: int) -> int:
        return _I64.unpack_from(self._loaded(), slot * self.ENTRY.size + at)[0]

    def _largest_slot_at_most(self, target: int, key_at: int, wide: bool) -> int:
        """Binary search: the last slot whose key (int32 or int64 at ``key_at``) is <= ``target``, or -1."""
        n = self._entries
        if n == 0:
            return -1
        key = self._field_i64 if wide else self._field_i32
        if key(0, key_at) > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key(mid, key_at) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_to_entries(self, entries: int) -> None:
        if entries >= self._entries:
            return
        buf = self._loaded()
        self._entries = entries
        del buf[entries * self.ENTRY.size :]
        self._synced = min(self._synced, len(buf))

    def reset(self) -> None:
        """Drop every entry (used before a rebuild)."""
        self._buf = bytearray()
        self._entries = 0
        self._synced = 0

    def relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if relative < 0 or relative > 2**31 - 1:
            raise InvalidIndexEntryError(f"offset {offset} cannot be stored relative to base offset {self.base_offset}")
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 2**31 - 1

    # -- lifecycle --------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the entries and fsync the file (part of a log flush)."""
        self._write_out(fsync=True)

    def close(self) -> None:
        """Write the file to exactly the entries (so a clean reopen knows the count) and let go of them."""
        self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        """Let go of the entries in memory without writing (a deleted segment, or a simulated crash)."""
        self._buf = None
        self._entries = self._synced // self.ENTRY.size

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def delete_if_exists(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)
