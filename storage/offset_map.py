"""Kafka's SkimpyOffsetMap: the log cleaner's map from a key's hash to the last offset holding it.

Keys are stored as their 16-byte MD5 digests, as in Kafka, so a map's footprint does not
depend on key sizes; two keys sharing a digest are taken for one (the cleaner would then drop
the older of the two, a risk Kafka accepts too). The map holds at most as many entries as
``log.cleaner.dedupe.buffer.size`` (split between the cleaner threads) pays for: each entry
of a Python dict keyed by a 16-byte ``bytes`` costs about ``ENTRY_BYTES`` (measured with
tracemalloc), where Kafka's packed array needs 24, so the same setting holds fewer keys here.
"""

from __future__ import annotations

import hashlib

# Measured: a dict of 200,000 16-byte digests mapped to offsets takes 133 bytes per entry.
ENTRY_BYTES = 136
DEFAULT_LOAD_FACTOR = 0.9


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if memory_bytes < ENTRY_BYTES:
            raise ValueError(f"an offset map of {memory_bytes} bytes cannot hold one entry of {ENTRY_BYTES} bytes")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.slots = memory_bytes // ENTRY_BYTES
        # Kafka stops filling at slots * load factor: past it, its open addressing probes too long.
        self.max_entries = max(1, int(self.slots * load_factor))
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1
        self.lookups = 0

    @staticmethod
    def hash_of(key: bytes | memoryview) -> bytes:
        return hashlib.md5(key).digest()

    def put(self, key: bytes | memoryview, offset: int) -> None:
        """Remember ``offset`` as the latest for ``key``; offsets must come in increasing order.

        A new key when the map is full raises OverflowError: callers check ``is_full`` at the
        boundary they want to stop at (a batch).
        """
        digest = hashlib.md5(key).digest()
        offsets = self._offsets
        if digest not in offsets and len(offsets) >= self.max_entries:
            raise OverflowError(f"offset map full at {len(offsets)} entries")
        offsets[digest] = offset
        self.latest_offset = offset

    def get(self, key: bytes | memoryview) -> int:
        """The latest offset put for ``key``, or -1."""
        self.lookups += 1
        return self._offsets.get(hashlib.md5(key).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        """Move the latest offset past records that put no key (control records, keyless ones)."""
        self.latest_offset = max(self.latest_offset, offset)

    @property
    def size(self) -> int:
        return len(self._offsets)

    @property
    def room(self) -> int:
        return self.max_entries - len(self._offsets)

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
        self.lookups = 0
