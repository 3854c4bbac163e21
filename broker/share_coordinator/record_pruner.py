"""How far each ``__share_group_state`` partition is pruned next, sans-IO: the bookkeeping of Kafka
4.4's ShareCoordinatorService.performRecordPruning (its ``lastPrunedOffsets``).

Every ``share.coordinator.state.topic.prune.interval.ms`` the records of each partition this node
coordinates are deleted (DeleteRecords) below its shard's last redundant offset. Kafka reads that
offset with a write operation that writes nothing, so it is acted on only once the partition's
earlier writes are committed; the shell waits the same way, and an offset still above the high
watermark is left for a later round (the log refuses to delete uncommitted records). An offset
already pruned to is not sent again. A partition the node resigns is forgotten, so a later
leadership prunes it afresh.
"""

from __future__ import annotations


class RecordPruner:
    def __init__(self) -> None:
        self._last_pruned: dict[int, int] = {}

    def prune_offset(self, index: int, last_redundant_offset: int | None, high_watermark: int) -> int | None:
        """The offset to delete partition ``index``'s records below, or None to leave it be."""
        if last_redundant_offset is None or last_redundant_offset > high_watermark:
            return None
        if self._last_pruned.get(index) == last_redundant_offset:
            return None
        return last_redundant_offset

    def pruned(self, index: int, offset: int) -> None:
        self._last_pruned[index] = offset

    def forget(self, index: int) -> None:
        """Kafka's onResignation: the partition's last pruned offset goes with its leadership."""
        self._last_pruned.pop(index, None)
