"""A replica of one partition on one broker: broker/partition.py's Partition over a simulated log.

The decisions are the sans-IO cores, unchanged: PartitionLeaderState (ISR, high watermark,
AlterPartition intents) on the leader, replication.follower_fetch_state (truncation on a
diverging epoch, the out-of-range restart, the follower's high watermark) on the follower,
and storage's leader epoch cache for OffsetForLeaderEpoch. What Partition adds around them
(become leader or follower from a registration, the divergence check of a follower's fetch,
the acks=all checks) is repeated here line for line over SimulatedPartitionLog, because
Partition itself sits on a UnifiedLog on a real disk and reads the wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import PartitionRegistration
from replication.follower_fetch_state import EpochEndOffset, follower_high_watermark, offset_out_of_range_restart, truncation_for_diverging_epoch
from replication.partition_state import AlterPartitionIntent, PartitionLeaderState
from tests.simulation.simulated_disk import SimulatedPartitionLog

NO_EPOCH = -1
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    tp: TopicPartition
    replica_id: int
    broker_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    records: tuple[tuple[int, Any], ...] = ()
    high_watermark: int = 0
    log_start_offset: int = 0
    diverging: EpochEndOffset | None = None
    # The digest of the leader's log below the fetch offset: the follower's must match it before it appends.
    prefix_digest: int = 0


class SimReplica:
    def __init__(self, tp: TopicPartition, node_id: int, log: SimulatedPartitionLog, replica_lag_time_max_ms: int) -> None:
        self.tp = tp
        self.node_id = node_id
        self.log = log
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.leader_id = -1
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader_state: PartitionLeaderState | None = None

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None

    # -- roles, from the metadata log (Partition.make_leader / make_follower) -----------------------

    def make_leader(self, registration: PartitionRegistration, broker_epoch: int, min_insync_replicas: int, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        state = self.leader_state
        new_epoch = state is None or self.leader_epoch != registration.leader_epoch
        if not new_epoch and state is not None and registration.partition_epoch <= state.partition_epoch:
            return False
        self._update(registration)
        leo = self.log.end_offset
        if new_epoch:
            if registration.leader_epoch >= self.log.epoch_cache.latest_epoch:
                self.log.epoch_cache.assign(registration.leader_epoch, leo)
            self.leader_state = PartitionLeaderState(
                self.node_id,
                broker_epoch,
                registration.replicas,
                registration.isr,
                registration.leader_epoch,
                registration.partition_epoch,
                leader_end_offset=leo,
                high_watermark=self.log.high_watermark,
                min_insync_replicas=min_insync_replicas,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                now_ms=now_ms,
                leader_recovery_state=registration.leader_recovery_state,
            )
        else:
            assert state is not None
            state.update_registration(registration.replicas, registration.isr, registration.partition_epoch, leo, now_ms)
        self.maybe_increment_high_watermark(now_ms, is_eligible)
        return new_epoch

    def make_follower(self, registration: PartitionRegistration) -> bool:
        changed = self.is_leader or self.leader_id != registration.leader or self.leader_epoch != registration.leader_epoch
        self.leader_state = None
        self._update(registration)
        return changed

    def _update(self, registration: PartitionRegistration) -> None:
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr = registration.isr

    # -- the leader ---------------------------------------------------------------------------------

    def maybe_increment_high_watermark(self, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        state = self.leader_state
        if state is None or not state.maybe_increment_high_watermark(self.log.end_offset, now_ms, is_eligible):
            return False
        self.log.update_high_watermark(state.high_watermark)
        return True

    def append_as_leader(self, values: list[Any], acks_all: bool, now_ms: int, is_eligible: Callable[[int], bool]) -> tuple[int, int, int]:
        """(error, base offset, last offset): Partition.append_records_to_leader."""
        state = self.leader_state
        if state is None:
            return int(ErrorCode.not_leader_or_follower), -1, -1
        if acks_all and state.is_under_min_isr:
            return int(ErrorCode.not_enough_replicas), -1, -1
        base, last = self.log.append_as_leader(self.leader_epoch, values)
        self.maybe_increment_high_watermark(now_ms, is_eligible)
        return 0, base, last

    def replicated_through(self, required_offset: int) -> int | None:
        """Partition.replicated_through: None while waiting, else the DelayedProduce's error code."""
        state = self.leader_state
        if state is None:
            return int(ErrorCode.not_leader_or_follower)
        if self.log.high_watermark < required_offset:
            return None
        if state.is_under_min_isr:
            return int(ErrorCode.not_enough_replicas_after_append)
        return 0

    def read_for_follower(self, request: FetchRequest, max_records: int, now_ms: int, is_eligible: Callable[[int], bool]) -> tuple[FetchResponse, AlterPartitionIntent | None]:
        """Partition.read_for_follower: KIP-320's divergence check, then the read and the follower's progress."""
        state = self.leader_state
        if state is None:
            return FetchResponse(int(ErrorCode.not_leader_or_follower)), None
        if request.current_leader_epoch != self.leader_epoch:
            code = ErrorCode.fenced_leader_epoch if request.current_leader_epoch < self.leader_epoch else ErrorCode.unknown_leader_epoch
            return FetchResponse(int(code)), None
        if request.replica_id not in state.remotes:
            return FetchResponse(int(ErrorCode.not_leader_or_follower)), None
        plog = self.log
        leo = plog.end_offset
        if request.last_fetched_epoch != NO_EPOCH:
            epoch, end_offset = plog.end_offset_for_epoch(request.last_fetched_epoch)
            if epoch < request.last_fetched_epoch or end_offset < request.fetch_offset:
                return FetchResponse(0, (), plog.high_watermark, 0, EpochEndOffset(epoch, end_offset)), None
        if request.fetch_offset > leo:
            return FetchResponse(int(ErrorCode.offset_out_of_range), (), plog.high_watermark, 0), None
        records = tuple(plog.read(request.fetch_offset, max_records))
        moved, intent = state.follower_fetched(request.replica_id, request.fetch_offset, 0, request.broker_epoch, leo, now_ms, is_eligible)
        if moved:
            plog.update_high_watermark(state.high_watermark)
        return FetchResponse(0, records, plog.high_watermark, 0, None, plog.prefix[request.fetch_offset]), intent

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionIntent | None:
        state = self.leader_state
        return None if state is None else state.maybe_shrink_isr(self.log.end_offset, now_ms)

    def alter_partition_succeeded(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        state = self.leader_state
        if state is None or not state.alter_partition_succeeded(isr, leader_epoch, partition_epoch, self.log.end_offset, now_ms, is_eligible):
            return False
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        self.log.update_high_watermark(state.high_watermark)
        return True

    def alter_partition_failed(self, error_code: int) -> None:
        if self.leader_state is not None:
            self.leader_state.alter_partition_failed(error_code)

    # -- the follower -------------------------------------------------------------------------------

    def fetch_request(self, broker_epoch: int) -> FetchRequest:
        return FetchRequest(self.tp, self.node_id, broker_epoch, self.log.end_offset, self.log.last_epoch, self.leader_epoch)

    def truncate_on_divergence(self, diverging: EpochEndOffset) -> int:
        plog = self.log
        epoch, end = plog.end_offset_for_epoch(diverging.epoch) if diverging.epoch != NO_EPOCH else (NO_EPOCH, -1)
        local = EpochEndOffset(epoch, end) if epoch != NO_EPOCH else None
        truncation = truncation_for_diverging_epoch(diverging, local, plog.end_offset, plog.high_watermark)
        plog.truncate_to(truncation.offset)
        return truncation.offset

    def restart_out_of_range(self, leader_high_watermark: int) -> int:
        offset, _ = offset_out_of_range_restart(0, leader_high_watermark, self.log.end_offset)
        self.log.truncate_to(offset)
        return offset

    def append_as_follower(self, records: tuple[tuple[int, Any], ...], leader_high_watermark: int) -> None:
        self.log.append_as_follower(list(records))
        self.log.update_high_watermark(follower_high_watermark(leader_high_watermark, self.log.end_offset))
