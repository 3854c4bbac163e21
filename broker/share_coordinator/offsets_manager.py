"""The offset below which ``__share_group_state`` may be pruned: Kafka's
``ShareCoordinatorOffsetsManager``.

A share partition's latest snapshot makes every older record of it redundant, so the records
below the oldest latest-snapshot across the partition's share partitions can go (DeleteRecords).
Updates are not tracked: they need the snapshot before them. A tombstone counts once, at its own
offset, and then its share partition stops holding the offset back.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.share_coordinator.share_partition_key import SharePartitionKey

_NO_OFFSET = 2**63 - 1  # Kafka's Long.MAX_VALUE, so that min() needs no special case


@dataclass(frozen=True, slots=True)
class OffsetsSnapshot:
    """What ``restore`` needs to undo the records of some keys (None: the key had no offset)."""

    offsets: dict[SharePartitionKey, int | None]
    last_redundant_offset: int


class ShareCoordinatorOffsetsManager:
    def __init__(self) -> None:
        self._offsets: dict[SharePartitionKey, int] = {}  # the offset of each key's latest snapshot
        self._last_redundant_offset = _NO_OFFSET

    def update_state(self, key: SharePartitionKey, offset: int, is_delete: bool) -> None:
        self._offsets[key] = offset
        # Kafka lowers the value to ``offset`` and then scans for the minimum, stopping early once
        # it meets the old value; records replay in offset order, so no key's offset is ever below
        # that old value and the scan's answer is the plain minimum.
        self._last_redundant_offset = min(self._offsets.values())
        if is_delete:
            del self._offsets[key]

    def last_redundant_offset(self) -> int | None:
        """The offset below which the partition's records are redundant (None: none yet)."""
        value = self._last_redundant_offset
        return None if value <= 0 or value == _NO_OFFSET else value

    def snapshot(self, keys: set[SharePartitionKey]) -> OffsetsSnapshot:
        return OffsetsSnapshot({key: self._offsets.get(key) for key in keys}, self._last_redundant_offset)

    def restore(self, saved: OffsetsSnapshot) -> None:
        for key, offset in saved.offsets.items():
            if offset is None:
                self._offsets.pop(key, None)
            else:
                self._offsets[key] = offset
        self._last_redundant_offset = saved.last_redundant_offset
