"""One partition replica on this broker: its log, its role, and, when it leads, its ISR.

Kafka's Partition. The decisions (high watermark, ISR changes) are the sans-IO
PartitionLeaderState's; this shell applies them to the log and tells the caller what moved.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import PartitionRegistration
from replication.follower_fetch_state import EpochEndOffset, follower_high_watermark, offset_out_of_range_restart, truncation_for_diverging_epoch
from replication.partition_state import AlterPartitionIntent, PartitionLeaderState
from protocol.record_batch import NO_TIMESTAMP
from storage.errors import OffsetOutOfRangeError, StorageError, UnexpectedAppendOffsetError
from storage.fetch_data_info import FetchDataInfo
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log_config import LogConfig
from storage.producer_state_manager import SENTINEL_VERIFICATION_GUARD, AppendOrigin, ProducerStateEntry, ProducerStateManager, VerificationGuard
from storage.unified_log import LATEST_TIMESTAMP, LogAppendInfo, wall_clock_ms

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
NO_EPOCH = -1
ACKS_ALL = -1
HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"


@dataclass(slots=True)
class LogReadResult:
    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    # (producer id, first offset) of the aborted transactions in the range read; None unless read_committed.
    aborted_transactions: list[tuple[int, int]] | None = None
    # KIP-320: (epoch, end offset) where the follower's log left the leader's; None when it did not.
    diverging_epoch: tuple[int, int] | None = None
    # KIP-392: the replica the consumer should fetch from instead (-1: this one).
    preferred_read_replica: int = -1

    @property
    def size(self) -> int:
        return sum(r.length for r in self.info.regions)


@dataclass(frozen=True, slots=True)
class FollowerFetchOutcome:
    """What a follower's fetch changed on the leader."""

    high_watermark_moved: bool
    alter_isr: AlterPartitionIntent | None


# What a producer sends, as the log takes it (batch bytes for UnifiedLog), and what a follower
# appends, as the leader's log handed it out.
ProducedT = TypeVar("ProducedT")
ReplicatedT = TypeVar("ReplicatedT")
_Produced = TypeVar("_Produced", contravariant=True)
_Replicated = TypeVar("_Replicated", contravariant=True)


class PartitionLog(Protocol[_Produced, _Replicated]):
    """What a Partition needs of its log, and nothing more: storage's UnifiedLog on a broker, the
    in-memory SimulatedPartitionLog in the whole-cluster simulation (tests/simulation), so that the
    simulation runs this class itself. A Protocol is typing only: no cost on the produce path."""

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache: ...

    @property
    def producer_state(self) -> ProducerStateManager: ...

    def append_as_leader(self, records: _Produced, leader_epoch: int, origin: AppendOrigin, verification_guard: VerificationGuard | None) -> LogAppendInfo: ...

    def append_as_follower(self, records: _Replicated) -> LogAppendInfo: ...

    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo: ...

    def fetch_upper_bound(self, fetch_offset: int) -> int: ...

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]: ...

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> tuple[int, int, int] | None: ...

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]: ...

    def update_high_watermark(self, offset: int) -> int: ...

    def maybe_increment_log_start_offset(self, new_offset: int) -> None: ...

    def truncate_to(self, target_offset: int) -> bool: ...

    def truncate_fully_and_start_at(self, new_offset: int) -> None: ...


class NotLeaderOrFollowerError(StorageError):
    """A leader's operation on a replica this node only follows."""

    error_code = ErrorCode.not_leader_or_follower


class OffsetNotAvailableError(StorageError):
    """A new leader's high watermark is still below where its epoch began: the end offset it would
    answer may be below one a client was already shown (retriable)."""

    error_code = ErrorCode.offset_not_available


class UnknownTopicOrPartitionError(StorageError):
    """A partition the metadata does not have."""

    error_code = ErrorCode.unknown_topic_or_partition


class FencedLeaderEpochError(StorageError):
    error_code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(StorageError):
    error_code = ErrorCode.unknown_leader_epoch


class NotEnoughReplicasError(StorageError):
    error_code = ErrorCode.not_enough_replicas


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    node_id: int
    replica_lag_time_max_ms: int
    # The broker epoch this node registered with, sent in AlterPartition for itself.
    broker_epoch: Callable[[], int]
    # A registered broker that is neither fenced nor shutting down: only such may join an ISR.
    is_eligible: Callable[[int], bool]


class Partition(Generic[ProducedT, ReplicatedT]):
    """A replica hosted here, as the metadata image assigns it. Only a leader takes produce and
    consumer fetches; it also serves its followers' fetches and keeps their progress.

    ``clock`` (ms) dates what a produce moves; every other path is handed the time by its caller.
    A simulation gives it its virtual clock."""

    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        log: PartitionLog[ProducedT, ReplicatedT],
        settings: ReplicationSettings,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self._settings = settings
        self._clock = clock
        self.leader_epoch = NO_EPOCH
        self.leader_id = -1
        self.partition_epoch = -1
        # Kafka's leaderEpochStartOffsetOpt: the log end when this replica took its leader epoch.
        self.leader_epoch_start_offset: int | None = None
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader_state: PartitionLeaderState | None = None

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    # -- roles, from the metadata log ------------------------------------------------------------

    def make_leader(self, registration: PartitionRegistration, now_ms: int) -> bool:
        """Lead as ``registration`` says; True if this is a new leadership (a new leader epoch)."""
        state = self.leader_state
        new_epoch = state is None or self.leader_epoch != registration.leader_epoch
        if not new_epoch and state is not None and registration.partition_epoch <= state.partition_epoch:
            return False  # what this leader knows already, maybe from an AlterPartition answer: see update_registration
        self._update(registration)
        leo = self.log.log_end_offset
        if new_epoch:
            # The epoch starts here: a follower asking about the previous one learns where it ended.
            # Unless the log holds a later epoch: this is an old leadership replayed from the
            # metadata log on a restart, and marking it would drop the later epochs' boundaries.
            if registration.leader_epoch >= self.log.leader_epoch_cache.latest_epoch:
                self.log.leader_epoch_cache.assign(registration.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            self.leader_state = PartitionLeaderState(
                self._settings.node_id,
                self._settings.broker_epoch(),
                registration.replicas,
                registration.isr,
                registration.leader_epoch,
                registration.partition_epoch,
                leader_end_offset=leo,
                high_watermark=self.log.high_watermark,
                min_insync_replicas=self.log.config.min_insync_replicas,
                replica_lag_time_max_ms=self._settings.replica_lag_time_max_ms,
                now_ms=now_ms,
                leader_recovery_state=registration.leader_recovery_state,
            )
        else:
            assert state is not None
            state.update_registration(registration.replicas, registration.isr, registration.partition_epoch, leo, now_ms)
        self.maybe_increment_high_watermark(now_ms)
        return new_epoch

    def make_follower(self, registration: PartitionRegistration) -> bool:
        """Follow ``registration.leader``; True if the leader or its epoch changed."""
        changed = self.is_leader or self.leader_id != registration.leader or self.leader_epoch != registration.leader_epoch
        self.leader_state = None
        self.leader_epoch_start_offset = None
        self._update(registration)
        return changed

    def _update(self, registration: PartitionRegistration) -> None:
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr = registration.isr

    def update_min_insync_replicas(self) -> None:
        if self.leader_state is not None:
            self.leader_state.min_insync_replicas = self.log.config.min_insync_replicas

    # -- checks ----------------------------------------------------------------------------------

    def _leader(self) -> PartitionLeaderState:
        if self.leader_state is None:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index} is led by {self.leader_id}, not this node")
        return self.leader_state

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's checkCurrentLeaderEpoch: a client that knows an older leader epoch is fenced; one
        that knows a newer one is ahead of this node's metadata."""
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is older than {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is newer than {self.leader_epoch}")

    # -- what the leader answers from its log (ListOffsets, OffsetForLeaderEpoch, DeleteRecords, ...) ---

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None, current_leader_epoch: int) -> tuple[int, int, int] | None:
        """Kafka's fetchOffsetForTimestamp: (timestamp, offset, leader epoch), None when no record is
        that recent. ``isolation_level`` None: a replica asks (ListOffsets with a replica id), and
        the latest offset is the log end. For a client it is the high watermark (the last stable
        offset for read_committed): consumers are never told of offsets they may not read; and
        while a new leader's high watermark is below where its epoch began it is
        OFFSET_NOT_AVAILABLE, so that no client is told an end below one it was already shown."""
        self._leader()
        self.check_leader_epoch(current_leader_epoch)
        if timestamp == LATEST_TIMESTAMP:
            if isolation_level is None:
                return NO_TIMESTAMP, self.log.log_end_offset, self.leader_epoch
            start = self.leader_epoch_start_offset
            if start is not None and start > self.high_watermark:
                raise OffsetNotAvailableError(
                    f"the high watermark {self.high_watermark} of {self.topic}-{self.index} lags behind the start offset {start} of leader epoch {self.leader_epoch}"
                )
            return NO_TIMESTAMP, self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark, self.leader_epoch
        return self.log.fetch_offset_by_timestamp(timestamp)

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch on the leader: (epoch, end offset), (-1, -1) when unknown."""
        self._leader()
        self.check_leader_epoch(current_leader_epoch)
        return self.log.end_offset_for_epoch(leader_epoch)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (-1: the high watermark); returns the new
        low watermark. OFFSET_OUT_OF_RANGE past the high watermark."""
        self._leader()
        target = self.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"cannot delete the records of {self.topic}-{self.index} before offset {target}")
        self.log.maybe_increment_log_start_offset(target)
        return self.log.log_start_offset

    def active_producers(self) -> list[ProducerStateEntry]:
        """DescribeProducers: the producer state of this replica's log, leader or follower (a
        follower builds it from the batches it replicates, as Kafka's does)."""
        return self.log.producer_state.active_producers()

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    # -- the leader's high watermark -----------------------------------------------------------

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        state = self.leader_state
        if state is None or not state.maybe_increment_high_watermark(self.log.log_end_offset, now_ms, self._settings.is_eligible):
            return False
        self.log.update_high_watermark(state.high_watermark)
        return True

    def _sync_high_watermark(self) -> bool:
        state = self.leader_state
        if state is None or state.high_watermark == self.log.high_watermark:
            return False
        self.log.update_high_watermark(state.high_watermark)
        return True

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    # -- produce -----------------------------------------------------------------------------------

    def append_records_to_leader(
        self, records: ProducedT, origin: AppendOrigin = AppendOrigin.CLIENT, required_acks: int = 1, verification_guard: VerificationGuard | None = None
    ) -> LogAppendInfo:
        state = self._leader()
        if required_acks == ACKS_ALL and state.is_under_min_isr:
            raise NotEnoughReplicasError(
                f"the ISR of {self.topic}-{self.index} has {len(state.isr.committed)} replicas, fewer than min.insync.replicas {state.effective_min_isr}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin, verification_guard)
        self.maybe_increment_high_watermark(self._clock())
        return info

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int, epoch: int, now_ms: int) -> VerificationGuard:
        """KIP-890: the guard a transactional batch must carry, or the sentinel when the producer's
        transaction is already open here (its coordinator knows of this partition then)."""
        self._leader()
        state = self.log.producer_state
        if state.has_ongoing_transaction(producer_id, epoch):
            return SENTINEL_VERIFICATION_GUARD
        return state.maybe_create_verification_state_entry(producer_id, sequence, epoch, now_ms).guard

    def replicated_through(self, required_offset: int) -> int | None:
        """Kafka's checkEnoughReplicasReachOffset, for a DelayedProduce: None while the high
        watermark is below ``required_offset``, else the error code to answer with."""
        state = self.leader_state
        if state is None:
            return int(ErrorCode.not_leader_or_follower)
        if self.log.high_watermark < required_offset:
            return None
        if state.is_under_min_isr:
            return int(ErrorCode.not_enough_replicas_after_append)
        return 0

    # -- fetch ---------------------------------------------------------------------------------------

    def read_records(
        self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool, current_leader_epoch: int = NO_EPOCH, from_follower: bool = False
    ) -> LogReadResult:
        """A consumer's read: up to the high watermark, or the last stable offset for read_committed.
        Only the leader serves it, unless ``from_follower`` (KIP-392: a follower serves up to the
        high watermark its leader last told it)."""
        if not from_follower:
            self._leader()
        self.check_leader_epoch(current_leader_epoch)
        last_stable = self.last_stable_offset
        upper = last_stable if isolation_level == READ_COMMITTED else self.high_watermark
        info = self.log.read(fetch_offset, max_bytes, upper, min_one_message)
        aborted = None
        if isolation_level == READ_COMMITTED:
            # Kafka's bound: the end of the segment the read started in; the client only uses
            # the entries whose records it got.
            aborted = self.log.collect_aborted_transactions(fetch_offset, self.log.fetch_upper_bound(fetch_offset)) if info.regions else []
        return LogReadResult(info, self.high_watermark, last_stable, self.log.log_start_offset, self.log.log_end_offset, aborted)

    def preferred_read_replica(self, client_rack: str, fetch_offset: int, rack_of: Callable[[int], str | None]) -> int | None:
        """Kafka's RackAwareReplicaSelector on the leader: a replica in the client's rack that holds
        ``fetch_offset``, the most caught up first; None when the leader itself is the one (in that
        rack, or none is)."""
        state = self._leader()
        if rack_of(self._settings.node_id) == client_rack:
            return None
        candidates = [
            r
            for r in state.remotes.values()
            if r.broker_id in state.isr.committed and r.log_start_offset <= fetch_offset <= r.log_end_offset and rack_of(r.broker_id) == client_rack
        ]
        if not candidates:
            return None
        return max(candidates, key=lambda r: (r.log_end_offset, r.last_caught_up_time_ms)).broker_id

    def redirect(self, preferred_read_replica: int) -> LogReadResult:
        """An answer with no records that sends the consumer to another replica."""
        leo = self.log.log_end_offset
        empty = self.log.read(leo, 0, leo, False)
        return LogReadResult(empty, self.high_watermark, self.last_stable_offset, self.log.log_start_offset, leo, preferred_read_replica=preferred_read_replica)

    def read_for_follower(
        self,
        replica_id: int,
        broker_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        follower_log_start_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        now_ms: int,
        update_fetch_state: bool = True,
    ) -> tuple[LogReadResult, FollowerFetchOutcome]:
        """A follower's read: up to the log end, after KIP-320's divergence check. The fetch
        offset is the follower's log end, which may move the high watermark or let it join the ISR.
        A re-read of a fetch waiting in purgatory does not count as the follower fetching again
        (``update_fetch_state`` False, Kafka's fetchRecords from DelayedFetch): its offsets are as
        old as the request, and the ISR may have changed since."""
        state = self._leader()
        self.check_leader_epoch(current_leader_epoch)
        if replica_id not in state.remotes:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.topic}-{self.index}")
        leo = self.log.log_end_offset
        if last_fetched_epoch != NO_EPOCH:
            epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                empty = self.log.read(leo, 0, leo, False)
                read = LogReadResult(empty, self.high_watermark, self.last_stable_offset, self.log.log_start_offset, leo, None, (epoch, end_offset))
                return read, FollowerFetchOutcome(False, None)
        info = self.log.read(fetch_offset, max_bytes, None, True)
        if not update_fetch_state:
            return LogReadResult(info, self.high_watermark, self.last_stable_offset, self.log.log_start_offset, leo), FollowerFetchOutcome(False, None)
        moved, intent = state.follower_fetched(replica_id, fetch_offset, follower_log_start_offset, broker_epoch, leo, now_ms, self._settings.is_eligible)
        if moved:
            self.log.update_high_watermark(state.high_watermark)
        read = LogReadResult(info, self.high_watermark, self.last_stable_offset, self.log.log_start_offset, leo)
        return read, FollowerFetchOutcome(moved, intent)

    # -- ISR changes ---------------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionIntent | None:
        state = self.leader_state
        if state is None:
            return None
        return state.maybe_shrink_isr(self.log.log_end_offset, now_ms)

    def alter_partition_succeeded(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int, now_ms: int) -> bool:
        """Commit the controller's answer; True if the high watermark moved."""
        state = self.leader_state
        if state is None or not state.alter_partition_succeeded(isr, leader_epoch, partition_epoch, self.log.log_end_offset, now_ms, self._settings.is_eligible):
            return False
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        return self._sync_high_watermark()

    def alter_partition_failed(self, error_code: int) -> None:
        if self.leader_state is not None:
            self.leader_state.alter_partition_failed(error_code)

    # -- follower side ---------------------------------------------------------------------------------

    def append_records_as_follower(self, records: ReplicatedT, leader_high_watermark: int, leader_log_start_offset: int) -> LogAppendInfo:
        if self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index} is led by this node")
        try:
            info = self.log.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            plog = self.log
            end = plog.log_end_offset
            # An empty log started at a leader's log start that a DeleteRecords put inside a batch:
            # the batch comes whole, from below it. As Kafka's follower, start the log at the
            # batch; the leader's log start, taken next, moves the local one up again.
            if not (end == plog.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            plog.truncate_fully_and_start_at(e.first_offset)
            info = plog.append_as_follower(records)
        self.take_leader_offsets(leader_high_watermark, leader_log_start_offset)
        return info

    def truncate_on_divergence(self, diverging: EpochEndOffset) -> int:
        """The leader answered DivergingEpoch: cut the log back to where the two agree (KIP-320).
        Returns the offset truncated to; the next fetch asks again from there."""
        plog = self.log
        epoch, end = plog.end_offset_for_epoch(diverging.epoch) if diverging.epoch != NO_EPOCH else (NO_EPOCH, -1)
        local = EpochEndOffset(epoch, end) if epoch != NO_EPOCH else None
        truncation = truncation_for_diverging_epoch(diverging, local, plog.log_end_offset, plog.high_watermark)
        plog.truncate_to(truncation.offset)
        return truncation.offset

    def restart_out_of_range(self, leader_log_start_offset: int, leader_end_offset: int) -> int:
        """The leader answered OFFSET_OUT_OF_RANGE: empty the log and start at the leader's log
        start, or cut back to the leader's end. Returns where the next fetch starts."""
        offset, empty_first = offset_out_of_range_restart(leader_log_start_offset, leader_end_offset, self.log.log_end_offset)
        if empty_first:
            self.log.truncate_fully_and_start_at(offset)
        else:
            self.log.truncate_to(offset)
        return offset

    def take_leader_offsets(self, leader_high_watermark: int, leader_log_start_offset: int) -> None:
        self.log.update_high_watermark(follower_high_watermark(leader_high_watermark, self.log.log_end_offset))
        if leader_log_start_offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(min(leader_log_start_offset, self.log.high_watermark))
