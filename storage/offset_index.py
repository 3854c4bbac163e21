"""Sparse offset index: (relative offset int32, position int32) entries, Kafka's `.index` format.

Entries live in memory (two arrays) and are appended to the file as they are made; the
file is only read back at start-up. An entry (offset O, position P) says the batch that
starts at P ends at offset O, so a lookup for any offset >= O may start scanning at P.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

ENTRY = struct.Struct(">ii")


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._offsets = array("q")
        self._positions = array("q")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        usable = len(data) - len(data) % ENTRY.size
        for rel, pos in ENTRY.iter_unpack(data[:usable]):
            self._offsets.append(base_offset + rel)
            self._positions.append(pos)
        if usable != len(data):
            os.ftruncate(self._fd, usable)

    def __len__(self) -> int:
        return len(self._offsets)

    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else self.base_offset

    def sane(self, segment_size: int) -> bool:
        offs, poss = self._offsets, self._positions
        return all(offs[i] < offs[i + 1] and poss[i] < poss[i + 1] for i in range(len(offs) - 1)) and (
            not poss or poss[-1] < segment_size
        )

    def append(self, offset: int, position: int) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            return
        self._offsets.append(offset)
        self._positions.append(position)
        os.write(self._fd, ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The last entry at or below ``target_offset``, or (base offset, 0)."""
        i = bisect.bisect_right(self._offsets, target_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or past ``position`` (the log was cut there)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        os.ftruncate(self._fd, keep * ENTRY.size)

    def reset(self) -> None:
        self.truncate_to_position(-1)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
