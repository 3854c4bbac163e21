"""A partition's log on a simulated disk: records with offsets and leader epochs, and a flushed prefix.

It is what broker/partition.py's Partition runs on in the simulation (it satisfies
broker.partition.PartitionLog), so it keeps the rules of storage's UnifiedLog that Partition
relies on: the high watermark stays between the log start and the log end, reads stay within
[log start, log end] or raise OFFSET_OUT_OF_RANGE, a follower's append starts at the log end,
a truncation at or past the log end still forgets an epoch marked there and never written in.
The leader epoch cache is storage's own LeaderEpochCache and the producer state storage's
ProducerStateManager, with their file writes taken away, so OffsetForLeaderEpoch answers
exactly as the real log's do, and an idempotent producer's batch (a run of ProducedRecords) is
checked, deduplicated or refused by the same ProducerStateManager.analyze_batch as UnifiedLog's
appends, from the header fields its records carry. As UnifiedLog does, a follower's append
updates the producer state, and a truncation rebuilds it from what the log kept.

A record is one unit of size: a read's ``max_length`` counts records, and the region it
returns stands for the records [position, position + length) of this log (the simulated
disk's file is the record list; ``records_in`` is its sendfile). As Kafka's, a read never ends
inside a batch.

What a crash leaves depends on the fault: a killed process keeps everything it wrote (the
page cache survives, as with ``kill -9``); a lost machine keeps only what was flushed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from protocol.control_records import build_control_batch
from protocol.record_batch import NO_TIMESTAMP, TRANSACTIONAL_MASK, BatchHeader, read_header
from storage.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from storage.fetch_data_info import FetchDataInfo, FileRegion
from storage.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.log_config import LogConfig
from storage.producer_state_manager import AppendOrigin, CompletedTxn, ProducerAppendInfo, ProducerStateManager, VerificationGuard
from storage.unified_log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LogAppendInfo

NOWHERE = Path("/nonexistent")

# A record as a fetch hands it to a follower: (offset, leader epoch, value).
ReplicatedRecord = tuple[int, int, Any]
DIGEST_MASK = (1 << 64) - 1
MAGIC = 2


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    """One record of an idempotent producer's batch, carrying the batch header's producer fields
    (the batch is the run of ``count`` records its first record starts)."""

    value: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    index: int  # its place in the batch
    count: int
    transactional: bool = False

    def header(self, base_offset: int, leader_epoch: int) -> BatchHeader:
        """The header of its batch, as the log would decode it, with ``base_offset`` assigned."""
        attributes = TRANSACTIONAL_MASK if self.transactional else 0
        return BatchHeader(
            0, base_offset, 0, leader_epoch, MAGIC, 0, attributes, self.count - 1, NO_TIMESTAMP, NO_TIMESTAMP, self.producer_id, self.producer_epoch, self.base_sequence, self.count
        )

    def __repr__(self) -> str:
        return f"{self.value}(p{self.producer_id}e{self.producer_epoch}s{self.base_sequence + self.index}{'t' if self.transactional else ''})"


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """A transaction marker: a control batch of one COMMIT or ABORT record, written by a
    transaction coordinator (through the partition's leader) to end a producer's transaction."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool

    def batch(self) -> bytes:
        """The marker's control batch as the broker builds it: storage reads the marker from it."""
        return build_control_batch(self.producer_id, self.producer_epoch, self.coordinator_epoch, self.commit, 0)

    def header(self, base_offset: int, leader_epoch: int) -> BatchHeader:
        return read_header(self.batch())._replace(base_offset=base_offset, partition_leader_epoch=leader_epoch)

    def __repr__(self) -> str:
        return f"{'COMMIT' if self.commit else 'ABORT'}(p{self.producer_id}e{self.producer_epoch}c{self.coordinator_epoch})"


def _no_bytes() -> bytes:
    raise AssertionError("a producer's data batch is never read for a marker")


class MemoryLeaderEpochCache(LeaderEpochCache):
    """Kafka's leader epoch cache without its checkpoint file: the simulated disk holds it."""

    def __init__(self) -> None:
        super().__init__(NOWHERE / "leader-epoch-checkpoint", created=True)

    def _write(self) -> None:
        self._dirty = False


class SimulatedPartitionLog:
    """One replica's log. Every value a producer writes is unique in a run (a marker may repeat:
    a coordinator that retries writes it again). Records carry no timestamps. A
    transaction's records are ProducedRecords marked transactional and its end a ControlMarker;
    the producer state tracks open transactions (the last stable offset) as UnifiedLog's does,
    but there is no transaction index: the simulation reads a log's read_committed view from the
    log itself (tests/simulation/invariants.py)."""

    def __init__(self, topic_partition: str, config: LogConfig) -> None:
        self.config = config
        self.log_start_offset = 0
        self._base = 0  # the offset of values[0]: the log start of an emptied log (truncate_fully_and_start_at)
        self.epochs: list[int] = []  # the leader epoch of each record
        self.values: list[Any] = []  # a producer's int, or a coordinator's (key, value) record
        # _sums[o - base]: the sum of the hashes of the records below offset o (each hashed with its
        # offset), so two logs compare over any range of offsets in O(1).
        self._sums: list[int] = [0]
        self.flushed = 0
        self.high_watermark = 0
        self.flushed_high_watermark = 0  # the replication-offset-checkpoint as last written
        self.leader_epoch_cache = MemoryLeaderEpochCache()
        self.producer_state = ProducerStateManager(topic_partition, NOWHERE, created=True)
        self.duplicates_answered = 0  # producer retries answered with where their batch already was

    @property
    def log_end_offset(self) -> int:
        return self._base + len(self.values)

    @property
    def size_in_bytes(self) -> int:
        return len(self.values)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def digest(self, start: int, end: int) -> int:
        """A digest of the records in [start, end), both within [the log's base, its end]."""
        return (self._sums[end - self._base] - self._sums[start - self._base]) & DIGEST_MASK

    # -- append --------------------------------------------------------------------------------------

    def _append(self, epoch: int, value: Any) -> None:
        self.epochs.append(epoch)
        self.values.append(value)
        self._sums.append((self._sums[-1] + hash((self.log_end_offset, epoch, value))) & DIGEST_MASK)

    def append_as_leader(self, records: Sequence[Any], leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT, verification_guard: VerificationGuard | None = None) -> LogAppendInfo:
        if not records:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        first = self.log_end_offset
        head = records[0]
        producers: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        if isinstance(head, ProducedRecord):
            duplicate = self.producer_state.analyze_batch(head.header(first, leader_epoch), _no_bytes, first, origin, producers, completed, verification_guard)
            if duplicate is not None:
                self.duplicates_answered += 1
                return LogAppendInfo(duplicate.first_offset, duplicate.last_offset, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        elif isinstance(head, ControlMarker):
            self.producer_state.analyze_batch(head.header(first, leader_epoch), head.batch, first, origin, producers, completed, verification_guard)
        for value in records:
            self._append(leader_epoch, value)
        for info in producers.values():
            self.producer_state.update(info)
        for txn in completed:
            self.producer_state.complete_txn(txn)
        self.producer_state.map_end_offset = self.log_end_offset
        self.leader_epoch_cache.assign(leader_epoch, first)
        return LogAppendInfo(first, self.log_end_offset - 1, NO_TIMESTAMP, -1, -1, self.log_start_offset, len(records), len(records))

    def append_as_follower(self, records: Sequence[ReplicatedRecord]) -> LogAppendInfo:
        if not records:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        first, last = records[0][0], records[-1][0]
        if first != self.log_end_offset:
            # UnifiedLog refuses a start below the log end; a simulated log has no compaction gaps either.
            raise UnexpectedAppendOffsetError(f"first offset {first} is not the log end {self.log_end_offset}", first, last)
        for offset, epoch, value in records:
            self.leader_epoch_cache.assign(epoch, offset)
            self._append(epoch, value)
        self._replay_producers(records)
        return LogAppendInfo(first, last, NO_TIMESTAMP, -1, -1, self.log_start_offset, len(records), len(records))

    def _replay_producers(self, records: Iterable[ReplicatedRecord]) -> None:
        """The producer state of a follower's append or a rebuild: each batch once its last record is in."""
        state = self.producer_state
        for offset, epoch, value in records:
            if isinstance(value, ProducedRecord) and value.index == value.count - 1:
                base = offset - value.index
                info = state.prepare_update(value.producer_id, AppendOrigin.REPLICATION)
                info.append(value.header(base, epoch), _no_bytes, base)
                state.update(info)
            elif isinstance(value, ControlMarker):
                info = state.prepare_update(value.producer_id, AppendOrigin.REPLICATION)
                txn = info.append(value.header(offset, epoch), value.batch, offset)
                state.update(info)
                if txn is not None:
                    state.complete_txn(txn)
        state.map_end_offset = self.log_end_offset

    def _rebuild_producer_state(self) -> None:
        """As UnifiedLog's truncation: the state of what the log kept (no snapshots here: replayed from its start)."""
        self.producer_state.truncate_and_reload(self.log_start_offset, self.log_end_offset)
        self._replay_producers(self.records_in(FileRegion(id(self), self._base, len(self.values))))
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    # -- read --------------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
        end = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > end:
            raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{self.log_start_offset}, {end}]")
        upper = end if max_offset is None else min(max_offset, end)
        count = min(max(upper - start_offset, 0), max_length)
        if count == 0 and min_one_message and upper > start_offset:
            count = 1
        if count:
            last = self.values[start_offset + count - 1 - self._base]
            if isinstance(last, ProducedRecord):
                count = min(count + last.count - 1 - last.index, upper - start_offset)
        return FetchDataInfo(start_offset, [FileRegion(id(self), start_offset, count)] if count else [])

    def records_in(self, region: FileRegion) -> tuple[ReplicatedRecord, ...]:
        """The records a region of this log stands for, as sendfile would copy them out."""
        start = region.position - self._base
        stop = start + region.length
        return tuple(zip(range(region.position, region.position + region.length), self.epochs[start:stop], self.values[start:stop]))

    def fetch_upper_bound(self, fetch_offset: int) -> int:
        return self.log_end_offset  # one segment

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        return []  # no transaction index: nobody in the simulation fetches read_committed

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> tuple[int, int, int] | None:
        """UnifiedLog's answers for the offsets ListOffsets names; no record has a timestamp to find."""
        cache = self.leader_epoch_cache
        if target_timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return NO_TIMESTAMP, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset)
        if target_timestamp == LATEST_TIMESTAMP:
            return NO_TIMESTAMP, self.log_end_offset, cache.latest_epoch
        return None

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)
        if offset == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return epoch, offset

    def entry(self, offset: int) -> tuple[int, Any] | None:
        """(leader epoch, value) at ``offset``; None past the log end or below an emptied log's start."""
        if not self._base <= offset < self.log_end_offset:
            return None
        return self.epochs[offset - self._base], self.values[offset - self._base]

    # -- offsets -----------------------------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return self.high_watermark

    def maybe_increment_log_start_offset(self, new_offset: int) -> None:
        if new_offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"cannot move the log start to {new_offset}, past the high watermark {self.high_watermark}")
        if new_offset > self.log_start_offset:
            self.log_start_offset = new_offset
            self.leader_epoch_cache.truncate_from_start(new_offset)

    def truncate_to(self, target_offset: int) -> bool:
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        end = self.log_end_offset
        if target_offset >= end:
            # An epoch this replica marked at its log end when it led, and never wrote in, goes.
            self.leader_epoch_cache.truncate_from_end(end)
            return False
        if target_offset < self._base:
            self.truncate_fully_and_start_at(target_offset)
            return True
        keep = target_offset - self._base
        del self.epochs[keep:], self.values[keep:], self._sums[keep + 1 :]
        self.leader_epoch_cache.truncate_from_end(target_offset)
        self.flushed = min(self.flushed, target_offset)
        self.high_watermark = min(self.high_watermark, target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        self._rebuild_producer_state()
        return True

    def values_from(self, offset: int) -> list[Any]:
        """The values at ``offset`` and past it."""
        return self.values[max(offset - self._base, 0) :]

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        self.epochs.clear()
        self.values.clear()
        self._sums = [0]
        self._base = self.log_start_offset = self.high_watermark = self.flushed = new_offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    # -- the disk ------------------------------------------------------------------------------------------

    def flush(self) -> None:
        self.flushed = self.log_end_offset
        self.flushed_high_watermark = self.high_watermark

    def crash(self, lose_unflushed: bool) -> None:
        """What a restarted replica finds: the flushed prefix only when the disk lost its unflushed writes."""
        # As LogLoader's recovery: the epoch cache never reaches past the log end found.
        self.truncate_to(self.flushed if lose_unflushed else self.log_end_offset)
        # Kafka restarts from the high watermark checkpoint, never past its log end.
        self.high_watermark = min(self.flushed_high_watermark, self.log_end_offset)
