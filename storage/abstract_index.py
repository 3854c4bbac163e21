"""Kafka's AbstractIndex: a file of fixed-size entries, memory-mapped, searched by binary search.

While its segment is active the file is preallocated to ``segment.index.bytes`` (rounded
down to whole entries) so appends are plain stores into the map; it is trimmed to the
entries actually written when the segment rolls or closes. After a clean shutdown the file
length therefore says how many entries there are; after a crash the segments past the
recovery point are rebuilt from the log anyway (as in Kafka).
"""

from __future__ import annotations

import mmap
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
        self._mm: mmap.mmap | None = None
        newly_created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if newly_created:
                os.ftruncate(fd, self.max_index_size)
            length = os.fstat(fd).st_size
            self.file_length_valid = length % size == 0
            self._entries = 0 if newly_created else length // size
            if length:
                self._mm = mmap.mmap(fd, length - length % size)
        finally:
            os.close(fd)

    # -- size -------------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    def __len__(self) -> int:
        return self._entries

    @property
    def capacity(self) -> int:
        """Bytes mapped; the file length while the index is open."""
        return len(self._mm) if self._mm is not None else 0

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def resize(self, new_size: int) -> bool:
        """Grow or shrink the file and its map to ``new_size`` rounded down to whole entries."""
        rounded = new_size - new_size % self.ENTRY.size
        rounded = max(rounded, self._entries * self.ENTRY.size)
        if rounded == self.capacity:
            return False
        if self._mm is not None and rounded > 0:
            self._mm.resize(rounded)
        elif self._mm is not None:
            self._mm.close()
            self._mm = None
            os.truncate(self.path, 0)
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, rounded)
                self._mm = mmap.mmap(fd, rounded)
            finally:
                os.close(fd)
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.ENTRY.size)

    def _ensure_room_for_one(self) -> None:
        if self.capacity < (self._entries + 1) * self.ENTRY.size:
            self.resize(max(self.max_index_size, (self._entries + 1) * self.ENTRY.size))

    # -- entries ----------------------------------------------------------------------------------

    def _field_i32(self, slot: int, at: int) -> int:
        assert self._mm is not None
        return _I32.unpack_from(self._mm, slot * self.ENTRY.size + at)[0]

    def _field_i64(self, slot: int, at: int) -> int:
        assert self._mm is not None
        return _I64.unpack_from(self._mm, slot * self.ENTRY.size + at)[0]

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
        self._entries = min(self._entries, entries)

    def reset(self) -> None:
        """Drop every entry and make room for a full index again (used before a rebuild)."""
        self._entries = 0
        self.resize(self.max_index_size)

    def relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if relative < 0 or relative > 2**31 - 1:
            raise InvalidIndexEntryError(f"offset {offset} cannot be stored relative to base offset {self.base_offset}")
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 2**31 - 1

    # -- lifecycle --------------------------------------------------------------------------------

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        """Trim to the written entries (so a clean reopen knows the count) and unmap."""
        self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def delete_if_exists(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)
