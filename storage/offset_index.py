"""Kafka's `.index`: sparse (relative offset int32, position int32) entries.

An entry (O, P) is written for a batch that starts at byte P and ends at offset O, so every
offset >= O lives at or after P: ``lookup`` gives the place to start scanning batch headers.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from storage.abstract_index import AbstractIndex, CorruptIndexError, IndexFullError, InvalidIndexEntryError


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._last_entry = self._read_last_entry()

    def _read_last_entry(self) -> OffsetPosition:
        return self.entry(self._entries - 1) if self._entries else OffsetPosition(self.base_offset, 0)

    @property
    def last_entry(self) -> OffsetPosition:
        """The newest entry, or (base offset, 0) for an empty index."""
        return self._last_entry

    @property
    def last_offset(self) -> int:
        return self._last_entry.offset

    def entry(self, slot: int) -> OffsetPosition:
        if not 0 <= slot < self._entries:
            raise IndexError(f"slot {slot} outside an index of {self._entries} entries")
        relative, position = self.ENTRY.unpack(self._slot_bytes(slot))
        return OffsetPosition(self.base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise IndexFullError(f"attempt to append to a full index ({self._entries} entries) {self.path}")
        if self._entries and offset <= self._last_entry.offset:
            raise InvalidIndexEntryError(
                f"attempt to append offset {offset} to position {self._entries} no larger than the last offset appended ({self._last_entry.offset}) to {self.path}"
            )
        relative = self.relative_offset(offset)
        self._append_entry(self.ENTRY.pack(relative, position))
        self._last_entry = OffsetPosition(offset, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The last entry whose offset is <= ``target_offset``, or (base offset, 0) when there is none."""
        relative = min(target_offset - self.base_offset, 2**31 - 1)
        slot = self._largest_slot_at_most(relative, 0, wide=False)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        relative = min(offset - self.base_offset, 2**31 - 1)
        slot = self._largest_slot_at_most(relative, 0, wide=False)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self._field_i32(slot, 0) == relative:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)
        self._last_entry = self._read_last_entry()

    def reset(self) -> None:
        super().reset()
        self._last_entry = OffsetPosition(self.base_offset, 0)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Cheap checks that catch a zero-filled (preallocated by Kafka, never trimmed) or torn index."""
        if not self.file_length_valid:
            raise CorruptIndexError(f"index file {self.path} has a length that is not a multiple of {self.ENTRY.size}")
        if not self._entries:
            return
        first, last = self.entry(0), self._last_entry
        if last.offset < self.base_offset or (self._entries > 1 and (last.offset <= first.offset or last.position <= first.position)):
            raise CorruptIndexError(f"corrupt index {self.path}: first entry {first}, last entry {last} of {self._entries}")
        if log_size is not None and last.position >= log_size:
            raise CorruptIndexError(f"corrupt index {self.path}: last entry {last} points past the log end {log_size}")
