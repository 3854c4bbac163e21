"""A partition's log on a simulated disk: records with offsets and leader epochs, and a flushed prefix.

What a crash leaves depends on the fault: a killed process keeps everything it wrote (the
page cache survives, as with ``kill -9``); a lost machine keeps only what was flushed. The
leader epoch cache is storage's own LeaderEpochCache with its file writes taken away, so
OffsetForLeaderEpoch answers exactly as the real log's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.leader_epoch_cache import LeaderEpochCache


class MemoryLeaderEpochCache(LeaderEpochCache):
    """Kafka's leader epoch cache without its checkpoint file: the simulated disk holds it."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent/leader-epoch-checkpoint"), created=True)

    def _write(self) -> None:
        self._dirty = False


class SimulatedPartitionLog:
    """One replica's log. Offsets are dense from 0 (no retention); every value is unique in a run."""

    def __init__(self) -> None:
        self.epochs: list[int] = []  # the leader epoch of the record at each offset
        self.values: list[Any] = []  # a producer's int, or a coordinator's (key, value) record
        # prefix[o]: a digest of the records below offset o, so two logs compare over a prefix in O(1).
        self.prefix: list[int] = [0]
        self.flushed = 0
        self.high_watermark = 0
        self.flushed_high_watermark = 0  # the replication-offset-checkpoint as last written
        self.epoch_cache = MemoryLeaderEpochCache()

    @property
    def end_offset(self) -> int:
        return len(self.values)

    @property
    def last_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else -1

    def _append(self, epoch: int, value: Any) -> None:
        offset = len(self.values)
        self.epoch_cache.assign(epoch, offset)
        self.epochs.append(epoch)
        self.values.append(value)
        self.prefix.append(hash((self.prefix[-1], epoch, value)))

    def append_as_leader(self, epoch: int, values: list[Any]) -> tuple[int, int]:
        base = self.end_offset
        for value in values:
            self._append(epoch, value)
        return base, self.end_offset - 1

    def append_as_follower(self, records: list[tuple[int, Any]]) -> None:
        for epoch, value in records:
            self._append(epoch, value)

    def read(self, offset: int, max_records: int) -> list[tuple[int, Any]]:
        end = min(self.end_offset, offset + max_records)
        return list(zip(self.epochs[offset:end], self.values[offset:end]))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for(epoch, self.end_offset)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        del self.epochs[offset:], self.values[offset:], self.prefix[offset + 1 :]
        self.epoch_cache.truncate_from_end(offset)
        self.flushed = min(self.flushed, offset)
        self.high_watermark = min(self.high_watermark, offset)

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset

    def flush(self) -> None:
        self.flushed = self.end_offset
        self.flushed_high_watermark = self.high_watermark

    def crash(self, lose_unflushed: bool) -> None:
        """What a restarted replica finds: the flushed prefix only when the disk lost its unflushed writes."""
        if lose_unflushed:
            self.truncate_to(self.flushed)
        # Kafka restarts from the high watermark checkpoint, never past its log end.
        self.high_watermark = min(self.flushed_high_watermark, self.end_offset)

    def entry(self, offset: int) -> tuple[int, Any] | None:
        if offset >= self.end_offset:
            return None
        return self.epochs[offset], self.values[offset]
