"""Kafka's `.timeindex`: sparse (timestamp int64, relative offset int32) entries.

An entry (T, O) says the largest timestamp in the segment up to offset O is T, and it was
seen in the batch ending at O. Timestamps strictly grow from entry to entry. The last slot is
kept free so that rolling or closing a segment can always record its final max timestamp.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from storage.abstract_index import AbstractIndex, CorruptIndexError, IndexFullError, InvalidIndexEntryError

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qi")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._last_entry = self._read_last_entry()

    def _read_last_entry(self) -> TimestampOffset:
        return self.entry(self._entries - 1) if self._entries else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    @property
    def last_entry(self) -> TimestampOffset:
        """The newest entry, or (-1, base offset) for an empty index."""
        return self._last_entry

    def entry(self, slot: int) -> TimestampOffset:
        if not 0 <= slot < self._entries:
            raise IndexError(f"slot {slot} outside an index of {self._entries} entries")
        timestamp, relative = self.ENTRY.unpack(self._slot_bytes(slot))
        return TimestampOffset(timestamp, self.base_offset + relative)

    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if ``timestamp`` is larger than the last entry's."""
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"attempt to append to a full time index ({self._entries} entries) {self.path}")
        last = self._last_entry
        if self._entries and offset < last.offset:
            raise InvalidIndexEntryError(f"attempt to append offset {offset} below the last offset {last.offset} of {self.path}")
        if self._entries and timestamp < last.timestamp:
            raise InvalidIndexEntryError(f"attempt to append timestamp {timestamp} below the last timestamp {last.timestamp} of {self.path}")
        if timestamp > last.timestamp:
            relative = self.relative_offset(offset)
            self._append_entry(self.ENTRY.pack(timestamp, relative))
            self._last_entry = TimestampOffset(timestamp, offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Kafka's TimeIndex.lookup: the last entry whose timestamp is <= the target, else (-1, base offset).

        Every record before that entry's offset is older than the target, so a search for the
        first record with timestamp >= target may start scanning there.
        """
        slot = self._largest_slot_at_most(target_timestamp, 0, wide=True)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        relative = min(offset - self.base_offset, 2**31 - 1)
        slot = self._largest_slot_at_most(relative, 8, wide=False)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self._field_i32(slot, 8) == relative:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)
        self._last_entry = self._read_last_entry()

    def reset(self) -> None:
        super().reset()
        self._last_entry = TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def sanity_check(self) -> None:
        if not self.file_length_valid:
            raise CorruptIndexError(f"time index file {self.path} has a length that is not a multiple of {self.ENTRY.size}")
        if not self._entries:
            return
        first, last = self.entry(0), self._last_entry
        if last.offset < self.base_offset or (self._entries > 1 and (last.timestamp <= first.timestamp or last.offset < first.offset)):
            raise CorruptIndexError(f"corrupt time index {self.path}: first entry {first}, last entry {last} of {self._entries}")
