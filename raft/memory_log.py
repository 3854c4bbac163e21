"""MemoryLog: a ReplicatedLog held in memory, for unit tests and the deterministic simulation.

It follows KafkaMetadataLog's rules (offsets, the epoch cache, validation of a follower's
position, snapshots) so the core behaves the same on either. What makes it useful for fault
injection is the flush boundary: ``recover`` builds the log a restarted node would find, with
everything appended since the last ``flush`` gone, frozen snapshots kept, and the high
watermark forgotten (the Raft core learns it again from the quorum).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable

from protocol.record_batch import BASE_OFFSET, PARTITION_LEADER_EPOCH, iter_headers
from raft.replicated_log import LogAppendInfo, LogFetchInfo, OffsetAndEpoch, ValidationKind, ValidOffsetAndEpoch
from raft.snapshot_retention import MetadataRetention, maybe_clean

# A size limit of 0 bytes is always breached: the log is cut to the newest snapshot as soon as the
# Raft core lets it, so the simulation's lagging and restarted nodes load snapshots within seconds.
KEEP_NEWEST_SNAPSHOT_ONLY = MetadataRetention(max_bytes=0, max_ms=-1)


class OffsetOutOfRangeError(ValueError):
    pass


class UnexpectedAppendOffsetError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Batch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class MemorySnapshotReader:
    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshot_id = snapshot_id
        self._data = data

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    def size_in_bytes(self) -> int:
        return len(self._data)

    def read(self, position: int, max_bytes: int) -> bytes:
        return self._data[position : position + max_bytes]


class MemorySnapshotWriter:
    def __init__(self, snapshot_id: OffsetAndEpoch, on_freeze: Callable[[OffsetAndEpoch, bytes], None]) -> None:
        self._snapshot_id = snapshot_id
        self._buffer = bytearray()
        self._on_freeze = on_freeze
        self._done = False

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    def append(self, batches: bytes) -> None:
        if self._done:
            raise ValueError(f"snapshot {self._snapshot_id} is already frozen or closed")
        self._buffer += batches

    def freeze(self) -> None:
        if self._done:
            raise ValueError(f"snapshot {self._snapshot_id} is already frozen or closed")
        self._done = True
        self._on_freeze(self._snapshot_id, bytes(self._buffer))

    def close(self) -> None:
        self._done = True


class MemoryLog:
    def __init__(self, retention: MetadataRetention = KEEP_NEWEST_SNAPSHOT_ONLY) -> None:
        self.retention = retention
        self._batches: list[_Batch] = []
        self._base_offsets: list[int] = []
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), the leader epoch cache
        self._start = 0
        self._high_watermark = 0
        self._flushed = 0
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}

    # -- crash and recovery ----------------------------------------------------------------------------

    def recover(self) -> "MemoryLog":
        """The log a node finds after a crash: flushed batches and frozen snapshots only."""
        log = MemoryLog(self.retention)
        log._snapshots = dict(self._snapshots)
        log._start = self._start
        log._flushed = log._start
        for batch in self._batches:
            if batch.last_offset < self._flushed:
                log._add(batch)
        log._flushed = log.end_offset()
        log._high_watermark = log._start
        log.truncate_to_latest_snapshot()
        return log

    def _add(self, batch: _Batch) -> None:
        if not self._epochs or batch.epoch > self._epochs[-1][0]:
            self._epochs.append((batch.epoch, batch.base_offset))
        self._batches.append(batch)
        self._base_offsets.append(batch.base_offset)

    # -- append and read -------------------------------------------------------------------------------

    def append_as_leader(self, records: bytes, epoch: int) -> LogAppendInfo:
        data = bytearray(records)
        first = offset = self.end_offset()
        batches = []
        for header in iter_headers(data):
            data[header.position + BASE_OFFSET : header.position + BASE_OFFSET + 8] = offset.to_bytes(8, "big", signed=True)
            data[header.position + PARTITION_LEADER_EPOCH : header.position + PARTITION_LEADER_EPOCH + 4] = epoch.to_bytes(4, "big", signed=True)
            last = offset + header.last_offset_delta
            batches.append(_Batch(offset, last, epoch, bytes(data[header.position : header.position + header.size])))
            offset = last + 1
        if not batches:
            raise ValueError("append as leader of no whole batch")
        if self._epochs and epoch < self._epochs[-1][0]:
            raise ValueError(f"append in epoch {epoch} below the latest epoch {self._epochs[-1][0]}")
        for batch in batches:
            self._add(batch)
        return LogAppendInfo(first, offset - 1)

    def append_as_follower(self, records: bytes, epoch: int) -> LogAppendInfo:
        first = expected = self.end_offset()
        latest = self.last_fetched_epoch()
        batches = []
        for header in iter_headers(records):
            if header.base_offset != expected:
                raise UnexpectedAppendOffsetError(f"follower append at offset {header.base_offset}, log end {expected}")
            if not latest <= header.partition_leader_epoch <= epoch:
                raise ValueError(f"batch at offset {header.base_offset} has epoch {header.partition_leader_epoch}, outside [{latest}, {epoch}]")
            latest = header.partition_leader_epoch
            batches.append(_Batch(header.base_offset, header.last_offset, latest, bytes(records[header.position : header.position + header.size])))
            expected = header.last_offset + 1
        if not batches:
            raise ValueError("follower append of no whole batch")
        for batch in batches:
            self._add(batch)
        return LogAppendInfo(first, expected - 1)

    def read(self, start_offset: int, max_bytes: int) -> LogFetchInfo:
        if not self._start <= start_offset <= self.end_offset():
            raise OffsetOutOfRangeError(f"offset {start_offset} outside [{self._start}, {self.end_offset()}]")
        index = max(bisect.bisect_right(self._base_offsets, start_offset) - 1, 0)
        chunks: list[bytes] = []
        size = 0
        for batch in self._batches[index:]:
            if batch.last_offset < start_offset:
                continue
            if chunks and size + len(batch.data) > max_bytes:
                break
            chunks.append(batch.data)
            size += len(batch.data)
        return LogFetchInfo(b"".join(chunks), start_offset)

    # -- offsets and epochs ------------------------------------------------------------------------------

    def end_offset(self) -> int:
        return self._batches[-1].last_offset + 1 if self._batches else self._start

    def start_offset(self) -> int:
        return self._start

    def last_fetched_epoch(self) -> int:
        if self._epochs:
            return self._epochs[-1][0]
        snapshot_id = self.latest_snapshot_id()
        return 0 if snapshot_id is None else snapshot_id.epoch

    def _epoch_for_offset(self, offset: int) -> int | None:
        found = None
        for epoch, start in self._epochs:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found = self._cache_end_offset_for(epoch)
        if found is None:
            return OffsetAndEpoch(self.end_offset(), self.last_fetched_epoch())
        earliest = self.earliest_snapshot_id()
        if earliest is not None and found.offset == earliest.offset and found.epoch == epoch:
            return earliest
        return found

    def _cache_end_offset_for(self, epoch: int) -> OffsetAndEpoch | None:
        """LeaderEpochFileCache.endOffsetFor: None when the cache cannot say."""
        if not self._epochs:
            return None
        if epoch == self._epochs[-1][0]:
            return OffsetAndEpoch(self.end_offset(), epoch)
        higher = next(((e, s) for e, s in self._epochs if e > epoch), None)
        if higher is None:
            return None
        floor = None
        for e, s in self._epochs:
            if e <= epoch:
                floor = e
        return OffsetAndEpoch(higher[1], epoch if floor is None else floor)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        start = self._start
        if start == 0 and offset == 0:
            return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(0, 0))
        earliest = self.earliest_snapshot_id()
        if earliest is not None and (offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch):
            return ValidOffsetAndEpoch(ValidationKind.SNAPSHOT, max(self._snapshots))
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidOffsetAndEpoch(ValidationKind.DIVERGING, end)
        return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(offset, epoch))

    def initialize_leader_epoch(self, epoch: int) -> None:
        if not self._epochs or epoch > self._epochs[-1][0]:
            self._epochs.append((epoch, self.end_offset()))

    # -- truncation -------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self._high_watermark:
            raise ValueError(f"attempt to truncate to offset {offset}, below the high watermark {self._high_watermark}")
        while self._batches and self._batches[-1].last_offset >= offset:
            self._batches.pop()
            self._base_offsets.pop()
        end = self.end_offset()
        # As Kafka's truncateFromEnd: an epoch that starts at or past the cut goes, even with no record in it.
        cut = min(offset, end)
        self._epochs = [(e, s) for e, s in self._epochs if s < cut]
        self._flushed = min(self._flushed, end)

    def truncate_to_latest_snapshot(self) -> bool:
        snapshot_id = self.latest_snapshot_id()
        if snapshot_id is None or not self._snapshot_is_ahead(snapshot_id):
            return False
        self._batches.clear()
        self._base_offsets.clear()
        self._epochs.clear()
        self._start = self._flushed = self._high_watermark = snapshot_id.offset
        self._forget_snapshots_before(snapshot_id)
        return True

    def _snapshot_is_ahead(self, snapshot_id: OffsetAndEpoch) -> bool:
        if snapshot_id.offset > self.end_offset():
            return True
        latest_epoch = self._epochs[-1][0] if self._epochs else 0
        if snapshot_id.epoch > latest_epoch:
            return True
        if snapshot_id.offset > self._start:
            before = self._epoch_for_offset(snapshot_id.offset - 1)
            return before is not None and snapshot_id.epoch > before
        return False

    # -- high watermark and durability ---------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self._start), self.end_offset())

    def high_watermark(self) -> int:
        return self._high_watermark

    def flush(self) -> None:
        self._flushed = self.end_offset()

    def last_flushed_offset(self) -> int:
        return max(self._flushed, self._start)

    # -- snapshots --------------------------------------------------------------------------------------

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotWriter | None:
        if snapshot_id.offset < self._start:
            return None
        if snapshot_id.offset > self._high_watermark:
            raise ValueError(f"snapshot {snapshot_id} is past the high watermark {self._high_watermark}")
        validation = self.validate_offset_and_epoch(snapshot_id.offset, snapshot_id.epoch)
        if validation.kind is not ValidationKind.VALID:
            raise ValueError(f"snapshot id {snapshot_id} is not valid according to the log: {validation}")
        return self.create_new_snapshot_unchecked(snapshot_id)

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotWriter | None:
        if snapshot_id in self._snapshots:
            return None
        return MemorySnapshotWriter(snapshot_id, self._snapshots.__setitem__)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotReader | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else MemorySnapshotReader(snapshot_id, data)

    def latest_snapshot(self) -> MemorySnapshotReader | None:
        snapshot_id = self.latest_snapshot_id()
        return None if snapshot_id is None else self.read_snapshot(snapshot_id)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots, default=None)

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return min(self._snapshots, default=None)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        latest = self.latest_snapshot_id()
        if latest is None or snapshot_id not in self._snapshots or not self._start < snapshot_id.offset <= latest.offset:
            return False
        if snapshot_id.offset > self._high_watermark:
            raise OffsetOutOfRangeError(f"cannot move the log start to {snapshot_id.offset}, past the high watermark {self._high_watermark}")
        new_start = snapshot_id.offset
        keep = 0
        while keep < len(self._batches) and self._batches[keep].last_offset < new_start:
            keep += 1
        del self._batches[:keep]
        del self._base_offsets[:keep]
        while len(self._epochs) > 1 and self._epochs[1][1] <= new_start:
            self._epochs.pop(0)
        if self._epochs and self._epochs[0][1] < new_start:
            self._epochs[0] = (self._epochs[0][0], new_start)
        if not self._batches:
            self._epochs.clear()
        self._start = new_start
        self._forget_snapshots_before(snapshot_id)
        return True

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots)

    def size_in_bytes(self) -> int:
        return sum(len(batch.data) for batch in self._batches)

    def maybe_clean(self, now_ms: int, max_offset: int) -> bool:
        return maybe_clean(self, self.retention, now_ms, max_offset)

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"MemoryLog(start={self._start}, end={self.end_offset()}, hw={self._high_watermark}, flushed={self._flushed}, epochs={self._epochs}, snapshots={sorted(self._snapshots)})"


__all__ = ["MemoryLog", "MemorySnapshotReader", "MemorySnapshotWriter", "OffsetOutOfRangeError", "UnexpectedAppendOffsetError"]
