"""Sparse time index: (timestamp int64, relative offset int32) entries, Kafka's `.timeindex`.

Timestamps in the index only grow: an entry is added when a batch raises the segment's
max timestamp, so a lookup finds the first batch that may hold a record at or after T.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

ENTRY = struct.Struct(">qi")


class TimeIndex:
    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._timestamps = array("q")
        self._offsets = array("q")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        usable = len(data) - len(data) % ENTRY.size
        for ts, rel in ENTRY.iter_unpack(data[:usable]):
            self._timestamps.append(ts)
            self._offsets.append(base_offset + rel)
        if usable != len(data):
            os.ftruncate(self._fd, usable)

    def __len__(self) -> int:
        return len(self._timestamps)

    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self._timestamps and (timestamp <= self._timestamps[-1] or offset <= self._offsets[-1]):
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        os.write(self._fd, ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """An offset to start scanning from for the first record with timestamp >= ``timestamp``."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset if i < 0 else self._offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        os.ftruncate(self._fd, keep * ENTRY.size)

    def reset(self) -> None:
        self.truncate_to_offset(-1)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
