"""Everything one ``__share_group_state`` partition coordinates, sans-IO: Kafka 4.4's
``ShareCoordinatorShard``.

It keeps the state of each share partition (group, topic id, partition) whose key hashes to the
partition: start offset, state and leader epochs, delivery-complete count and the state batches
of the records in flight. The shard is loaded by replaying the partition, and every operation
returns the records to append with its answer; memory changes only when those records are
replayed (the runtime replays its own writes at once, and ``revert``s them if the write fails, as
Kafka's snapshot timeline does). Each operation covers one share partition, as Kafka's
ShareCoordinatorService splits the requests before they reach the shard.

A write appends a ShareUpdate holding only the written batches, and a full ShareSnapshot once
``share.coordinator.snapshot.update.records.per.snapshot`` updates have followed the last one, so
a load replays at most that many updates per share partition after its snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from broker.share.persister import PersisterStateBatch
from broker.share_coordinator.config import ShareCoordinatorConfig
from broker.share_coordinator.offsets_manager import OffsetsSnapshot, ShareCoordinatorOffsetsManager
from broker.share_coordinator.records import (
    UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ShareCoordinatorRecord,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)
from broker.share_coordinator.share_group_offset import ShareGroupOffset, to_persister_batch, to_record_batch
from broker.share_coordinator.share_partition_key import SharePartitionKey
from broker.share_coordinator.state_batch_combiner import NO_START_OFFSET, combine_state_batches

T = TypeVar("T")
V = TypeVar("V")

# The topic's partition count in the current metadata image, None for an unknown topic.
PartitionCountLookup = Callable[[uuid.UUID], int | None]

NONE = 0
# Kafka's PartitionFactory: what a share partition with no state reads as.
UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
DEFAULT_LEADER_EPOCH = 0
DEFAULT_STATE_EPOCH = 0

# Kafka's messages, which its clients log.
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED_SHARE_PARTITION = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED_SHARE_PARTITION = "Read operation on uninitialized share partition not allowed."
_DEFAULT_MESSAGES: dict[int, str] = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.fenced_leader_epoch: "The leader epoch in the request is older than the epoch on the broker.",
    ErrorCode.fenced_state_epoch: "The coordinator rejected the request because the state epoch did not match.",
}


@dataclass(frozen=True, slots=True)
class ShareCoordinatorResult(Generic[T]):
    """Kafka's CoordinatorResult: the records to append, and the answer once they are replicated."""

    records: list[ShareCoordinatorRecord]
    response: T


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult:
    """The answer of InitializeShareGroupState, WriteShareGroupState or DeleteShareGroupState for one partition."""

    error_code: int = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStateResult:
    error_code: int = NONE
    error_message: str | None = None
    state_epoch: int = 0
    start_offset: int = 0
    state_batches: tuple[PersisterStateBatch, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStateSummaryResult:
    """``leader_epoch`` and ``delivery_complete_count`` are ReadShareGroupStateSummary v1's (Kafka 4.2)."""

    error_code: int = NONE
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = 0
    delivery_complete_count: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteStateData:
    """One partition of a WriteShareGroupState request (``delivery_complete_count``: v1, Kafka 4.2)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[PersisterStateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShardSnapshot:
    """The shard's memory for some share partitions before an operation's records (None: absent)."""

    states: dict[SharePartitionKey, ShareGroupOffset | None]
    leader_epochs: dict[SharePartitionKey, int | None]
    state_epochs: dict[SharePartitionKey, int | None]
    update_counts: dict[SharePartitionKey, int | None]
    offsets: OffsetsSnapshot


class ShareCoordinatorShard:
    def __init__(self, config: ShareCoordinatorConfig, time_ms: Callable[[], int]) -> None:
        self._config = config
        self._time_ms = time_ms
        self.share_states: dict[SharePartitionKey, ShareGroupOffset] = {}
        # The highest epochs any record of the key carried; writes below them are fenced.
        self.leader_epochs: dict[SharePartitionKey, int] = {}
        self.state_epochs: dict[SharePartitionKey, int] = {}
        # ShareUpdates since the count was last reset (see _replay_snapshot): at the limit, a write snapshots.
        self.snapshot_update_counts: dict[SharePartitionKey, int] = {}
        self.offsets = ShareCoordinatorOffsetsManager()
        # None until the runtime hands over a metadata image: every operation that checks the
        # topic answers UNKNOWN_TOPIC_OR_PARTITION meanwhile, as Kafka's shard does.
        self._partition_count: PartitionCountLookup | None = None

    # -- the runtime's side ---------------------------------------------------------------------------

    def on_loaded(self, partition_count: PartitionCountLookup) -> None:
        self._partition_count = partition_count

    def on_metadata_update(self, partition_count: PartitionCountLookup) -> None:
        self._partition_count = partition_count

    def replay(self, record: ShareCoordinatorRecord, record_offset: int) -> None:
        """A record of the partition's log, at ``record_offset``. Raises CoordinatorRecordError
        for a state batch whose delivery state Kafka does not define."""
        key = record.key
        mapped = SharePartitionKey(key.group_id, key.topic_id, key.partition)
        if isinstance(key, ShareSnapshotKey):
            assert record.value is None or isinstance(record.value, ShareSnapshotValue)
            self._replay_snapshot(mapped, record.value, record_offset)
        elif record.value is not None:
            # Kafka writes no ShareUpdate tombstone (its replay would fail on one): nothing to undo.
            assert isinstance(record.value, ShareUpdateValue)
            self._replay_update(mapped, record.value)

    def _replay_snapshot(self, key: SharePartitionKey, value: ShareSnapshotValue | None, record_offset: int) -> None:
        if value is None:
            self.share_states.pop(key, None)
            self.leader_epochs.pop(key, None)
            self.state_epochs.pop(key, None)
            self.snapshot_update_counts.pop(key, None)
        else:
            self._raise_epoch(self.leader_epochs, key, value.leader_epoch)
            self._raise_epoch(self.state_epochs, key, value.state_epoch)
            self.share_states[key] = ShareGroupOffset.from_snapshot(value)
            # As Kafka: only the snapshot a full run of updates forced resets the count; one written
            # by InitializeShareGroupState or a cold snapshot leaves it running.
            count = self.snapshot_update_counts.get(key)
            if count is not None and count >= self._config.snapshot_update_records_per_snapshot:
                self.snapshot_update_counts[key] = 0
        self.offsets.update_state(key, record_offset, value is None)

    def _replay_update(self, key: SharePartitionKey, value: ShareUpdateValue) -> None:
        self._raise_epoch(self.leader_epochs, key, value.leader_epoch)
        current = self.share_states.get(key)
        self.share_states[key] = ShareGroupOffset.from_update(value) if current is None else _merge(current, value)
        self.snapshot_update_counts[key] = self.snapshot_update_counts.get(key, 0) + 1

    @staticmethod
    def _raise_epoch(epochs: dict[SharePartitionKey, int], key: SharePartitionKey, epoch: int) -> None:
        if epoch > epochs.get(key, epoch - 1):
            epochs[key] = epoch

    def snapshot(self, keys: Iterable[SharePartitionKey]) -> ShardSnapshot:
        """The memory of ``keys`` as it is: what ``revert`` takes them back to if the records of the
        operation about them fail to be written."""
        wanted = set(keys)
        return ShardSnapshot(
            states={k: self.share_states.get(k) for k in wanted},
            leader_epochs={k: self.leader_epochs.get(k) for k in wanted},
            state_epochs={k: self.state_epochs.get(k) for k in wanted},
            update_counts={k: self.snapshot_update_counts.get(k) for k in wanted},
            offsets=self.offsets.snapshot(wanted),
        )

    def revert(self, saved: ShardSnapshot) -> None:
        _restore(self.share_states, saved.states)
        _restore(self.leader_epochs, saved.leader_epochs)
        _restore(self.state_epochs, saved.state_epochs)
        _restore(self.snapshot_update_counts, saved.update_counts)
        self.offsets.restore(saved.offsets)

    def last_redundant_offset(self) -> int | None:
        """The offset below which the partition's records may be deleted (DeleteRecords)."""
        return self.offsets.last_redundant_offset()

    # -- the operations ---------------------------------------------------------------------------------

    def write_state(self, key: SharePartitionKey, data: WriteStateData) -> ShareCoordinatorResult[PartitionResult]:
        """WriteShareGroupState: the written batches merge into the state; the leader epoch is not
        raised by a write (only a read by a newer leader raises it)."""
        error = self._write_error(key, data)
        if error is not None:
            return ShareCoordinatorResult([], error)
        return ShareCoordinatorResult([self._share_state_record(key, data, update_leader_epoch=False)], PartitionResult())

    def read_state_and_maybe_update_leader_epoch(self, key: SharePartitionKey, leader_epoch: int) -> ShareCoordinatorResult[ReadStateResult]:
        """ReadShareGroupState: a share partition's new leader reads its state, and its leader
        epoch is recorded (with a ShareUpdate or ShareSnapshot) so that the old leader is fenced."""
        error = self._read_error(key, leader_epoch)
        if error is not None:
            return ShareCoordinatorResult([], error)
        state = self.share_states[key]
        answer = ReadStateResult(state_epoch=state.state_epoch, start_offset=state.start_offset, state_batches=state.state_batches)
        if self.leader_epochs.get(key) == leader_epoch:
            return ShareCoordinatorResult([], answer)
        data = WriteStateData(
            state_epoch=state.state_epoch,
            leader_epoch=leader_epoch,
            start_offset=state.start_offset,
            delivery_complete_count=state.delivery_complete_count,
        )
        return ShareCoordinatorResult([self._share_state_record(key, data, update_leader_epoch=True)], answer)

    def read_state_summary(self, key: SharePartitionKey) -> ShareCoordinatorResult[ReadStateSummaryResult]:
        """ReadShareGroupStateSummary: no fencing, and a share partition with no state answers the
        uninitialized values rather than an error."""
        error = self._partition_error(key)
        if error is not None:
            return ShareCoordinatorResult([], ReadStateSummaryResult(error_code=error.error_code, error_message=error.error_message))
        state = self.share_states.get(key)
        if state is None:
            answer = ReadStateSummaryResult(
                start_offset=UNINITIALIZED_START_OFFSET,
                delivery_complete_count=UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
                leader_epoch=DEFAULT_LEADER_EPOCH,
                state_epoch=DEFAULT_STATE_EPOCH,
            )
        else:
            answer = ReadStateSummaryResult(
                start_offset=state.start_offset,
                delivery_complete_count=state.delivery_complete_count,
                leader_epoch=state.leader_epoch,
                state_epoch=state.state_epoch,
            )
        return ShareCoordinatorResult([], answer)

    def delete_state(self, key: SharePartitionKey) -> ShareCoordinatorResult[PartitionResult]:
        """DeleteShareGroupState: a ShareSnapshot tombstone; deleting no state succeeds with no record."""
        error = self._partition_error(key)
        if error is not None:
            return ShareCoordinatorResult([], error)
        if key not in self.share_states:
            return ShareCoordinatorResult([], PartitionResult())
        return ShareCoordinatorResult([_tombstone(key)], PartitionResult())

    def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ShareCoordinatorResult[PartitionResult]:
        """InitializeShareGroupState: a fresh snapshot (no batches, leader epoch 0) replaces any
        state the key had, in the next snapshot epoch."""
        error = self._initialize_error(key, state_epoch)
        if error is not None:
            return ShareCoordinatorResult([], error)
        current = self.share_states.get(key)
        now = self._time_ms()
        state = ShareGroupOffset(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=0,
            start_offset=start_offset,
            delivery_complete_count=UNINITIALIZED_DELIVERY_COMPLETE_COUNT if start_offset == UNINITIALIZED_START_OFFSET else 0,
            state_batches=(),
            create_timestamp=now,
            write_timestamp=now,
        )
        return ShareCoordinatorResult([_snapshot_record(key, state)], PartitionResult())

    def snapshot_cold_partitions(self) -> list[ShareCoordinatorRecord]:
        """Snapshots of the share partitions not snapshotted for
        ``share.coordinator.cold.partition.snapshot.interval.ms`` (Kafka's timer task), so that
        pruning is not held back by a share partition nobody writes. None when every state already
        comes from such a cold snapshot: the partition is quiet and rewriting them helps nothing."""
        cold = sum(1 for state in self.share_states.values() if state.create_timestamp != state.write_timestamp)
        if cold == len(self.share_states):
            return []
        now = self._time_ms()
        interval = self._config.cold_partition_snapshot_interval_ms
        return [
            _snapshot_record(key, replace(state, snapshot_epoch=state.snapshot_epoch + 1, write_timestamp=now))
            for key, state in self.share_states.items()
            if now - state.write_timestamp >= interval
        ]

    def maybe_cleanup_share_state(self, deleted_topic_ids: set[uuid.UUID]) -> list[ShareCoordinatorRecord]:
        """Tombstones for the share partitions of deleted topics."""
        return [_tombstone(key) for key in self.share_states if key.topic_id in deleted_topic_ids]

    # -- the records ------------------------------------------------------------------------------------

    def _share_state_record(self, key: SharePartitionKey, data: WriteStateData, *, update_leader_epoch: bool) -> ShareCoordinatorRecord:
        """A ShareSnapshot once enough updates followed the last one, else a ShareUpdate holding
        only the written batches. The key must have state: both callers checked."""
        current = self.share_states[key]
        leader_epoch = data.leader_epoch if update_leader_epoch else current.leader_epoch
        # The start offset never moves back; the delivery-complete count of an older start offset is stale.
        start_offset = max(data.start_offset, current.start_offset)
        delivery_complete_count = data.delivery_complete_count
        if data.start_offset == current.start_offset:
            delivery_complete_count = max(data.delivery_complete_count, current.delivery_complete_count)
        elif data.start_offset < current.start_offset:
            delivery_complete_count = current.delivery_complete_count
        if self.snapshot_update_counts.get(key, 0) >= self._config.snapshot_update_records_per_snapshot:
            now = self._time_ms()
            state = ShareGroupOffset(
                snapshot_epoch=current.snapshot_epoch + 1,
                state_epoch=current.state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                state_batches=tuple(combine_state_batches(current.state_batches, data.state_batches, start_offset)),
                create_timestamp=now,
                write_timestamp=now,
            )
            return _snapshot_record(key, state)
        update = ShareUpdateValue(
            snapshot_epoch=current.snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=delivery_complete_count,
            state_batches=tuple(to_record_batch(b) for b in combine_state_batches((), data.state_batches, start_offset)),
        )
        return ShareCoordinatorRecord(ShareUpdateKey(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition), update)

    # -- the checks, in Kafka's order -------------------------------------------------------------------

    def _write_error(self, key: SharePartitionKey, data: WriteStateData) -> PartitionResult | None:
        if key.partition < 0:
            return _invalid(NEGATIVE_PARTITION_ID)
        if data.leader_epoch < 0:
            return _invalid(NEGATIVE_LEADER_EPOCH)
        if data.state_epoch < 0:
            return _invalid(NEGATIVE_STATE_EPOCH)
        if key not in self.share_states:
            return _invalid(WRITE_UNINITIALIZED_SHARE_PARTITION)
        if self.leader_epochs.get(key, data.leader_epoch) > data.leader_epoch:
            return _error(ErrorCode.fenced_leader_epoch)
        if self.state_epochs.get(key, data.state_epoch) > data.state_epoch:
            return _error(ErrorCode.fenced_state_epoch)
        return self._topic_error(key)

    def _read_error(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult | None:
        error: PartitionResult | None
        if key.partition < 0:
            error = _invalid(NEGATIVE_PARTITION_ID)
        elif leader_epoch < 0:
            error = _invalid(NEGATIVE_LEADER_EPOCH)
        elif key not in self.share_states:
            error = _invalid(READ_UNINITIALIZED_SHARE_PARTITION)
        elif self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            error = _error(ErrorCode.fenced_leader_epoch)
        else:
            error = self._topic_error(key)
        return None if error is None else ReadStateResult(error_code=error.error_code, error_message=error.error_message)

    def _initialize_error(self, key: SharePartitionKey, state_epoch: int) -> PartitionResult | None:
        if key.partition < 0:
            return _invalid(NEGATIVE_PARTITION_ID)
        if state_epoch < 0:
            return _invalid(NEGATIVE_STATE_EPOCH)
        if self.state_epochs.get(key, state_epoch) > state_epoch:
            return _error(ErrorCode.fenced_state_epoch)
        return self._topic_error(key)

    def _partition_error(self, key: SharePartitionKey) -> PartitionResult | None:
        if key.partition < 0:
            return _invalid(NEGATIVE_PARTITION_ID)
        return self._topic_error(key)

    def _topic_error(self, key: SharePartitionKey) -> PartitionResult | None:
        count = None if self._partition_count is None else self._partition_count(key.topic_id)
        if count is None or count <= key.partition:
            return _error(ErrorCode.unknown_topic_or_partition)
        return None


def _merge(current: ShareGroupOffset, update: ShareUpdateValue) -> ShareGroupOffset:
    """An update applied to the state before it; -1 keeps the current start offset and leader epoch."""
    start_offset = current.start_offset if update.start_offset == NO_START_OFFSET else update.start_offset
    new_batches = [to_persister_batch(b) for b in update.state_batches]
    return replace(
        current,
        start_offset=start_offset,
        leader_epoch=current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch,
        delivery_complete_count=update.delivery_complete_count,
        state_batches=tuple(combine_state_batches(current.state_batches, new_batches, start_offset)),
    )


def _restore(registry: dict[SharePartitionKey, V], before: dict[SharePartitionKey, V | None]) -> None:
    for key, value in before.items():
        if value is None:
            registry.pop(key, None)
        else:
            registry[key] = value


def _snapshot_record(key: SharePartitionKey, state: ShareGroupOffset) -> ShareCoordinatorRecord:
    return ShareCoordinatorRecord(ShareSnapshotKey(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition), state.to_snapshot())


def _tombstone(key: SharePartitionKey) -> ShareCoordinatorRecord:
    return ShareCoordinatorRecord(ShareSnapshotKey(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition), None)


def _invalid(message: str) -> PartitionResult:
    return PartitionResult(error_code=ErrorCode.invalid_request, error_message=message)


def _error(code: int) -> PartitionResult:
    return PartitionResult(error_code=code, error_message=_DEFAULT_MESSAGES[code])
