"""A partition as its leader runs it: the ISR, the followers' progress, the high watermark.

Kafka's Partition, leader half, sans-IO. The broker shell feeds it follower fetches, its own
appends, the time and the controller's answers; it returns whether the high watermark moved and
which AlterPartition to send. It never reads a log or a clock.

The ISR has a committed part (what the controller last said) and at most one change in flight
(Kafka's PendingExpandIsr / PendingShrinkIsr). While a change is in flight the high watermark is
held by the *maximal* ISR, the union of both, so it never passes a record that either the old
or the new ISR might lack; no second change is asked for until the first is answered.

The high watermark rule (KIP-966, strict): the smallest log end offset over the maximal ISR and
over caught-up replicas about to join it, and it moves only while the committed ISR has at
least min(min.insync.replicas, replication factor) members. So a record acknowledged with
acks=all is on min.insync.replicas replicas, and a consumer never reads a record that an
election could lose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from replication.replica_state import UNKNOWN_OFFSET, ReplicaState

RECOVERED = 0
# The errors with which the controller says it did not apply a change (Kafka's handleAlterPartitionError):
# OPERATION_NOT_ATTEMPTED and INELIGIBLE_REPLICA. Any other may answer a retry of a change that was applied.
NOT_APPLIED_ERRORS = frozenset({55, 107})


@dataclass(frozen=True, slots=True)
class AlterPartitionIntent:
    """The ISR the leader asks the controller for, with what it believes is current."""

    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch)
    leader_recovery_state: int

    @property
    def isr(self) -> tuple[int, ...]:
        return tuple(b for b, _ in self.new_isr)


@dataclass(frozen=True, slots=True)
class IsrState:
    committed: tuple[int, ...]
    # The ISR asked for and not yet answered, or None.
    pending: tuple[int, ...] | None = None

    @property
    def maximal(self) -> frozenset[int]:
        if self.pending is None:
            return frozenset(self.committed)
        return frozenset(self.committed) | frozenset(self.pending)

    @property
    def in_flight(self) -> bool:
        return self.pending is not None


class PartitionLeaderState:
    def __init__(
        self,
        local_id: int,
        local_broker_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        *,
        leader_end_offset: int,
        high_watermark: int,
        min_insync_replicas: int,
        replica_lag_time_max_ms: int,
        now_ms: int,
        leader_recovery_state: int = RECOVERED,
    ) -> None:
        self.local_id = local_id
        self.local_broker_epoch = local_broker_epoch
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        # Kafka's makeLeader marks the partition RECOVERED whatever ``leader_recovery_state`` the
        # registration had: after an unclean election (KIP-704) this leader's log is the
        # partition's from now on, and its first AlterPartition says so. Asking as RECOVERING,
        # the controller would refuse every ISR of more than the leader.
        self.leader_recovery_state = RECOVERED
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # The log end when this leadership began: a follower is in sync only once it holds the
        # whole previous epoch (Kafka's leaderEpochStartOffset).
        self.epoch_start_offset = leader_end_offset
        self.high_watermark = min(high_watermark, leader_end_offset)
        self.isr = IsrState(tuple(isr))
        self.remotes: dict[int, ReplicaState] = {}
        self.update_assignment(replicas, self.isr.committed, leader_end_offset, now_ms)

    # -- the metadata's word -------------------------------------------------------------------

    def update_registration(self, replicas: Iterable[int], isr: Iterable[int], partition_epoch: int, leader_end_offset: int, now_ms: int) -> bool:
        """A registration of this leader epoch from the metadata log; False (skipped) unless it is
        newer than the partition epoch this leader knows. An AlterPartition answer often arrives
        before the metadata log's record of the same change, and the leader may have asked for the
        next change since: the record, not newer than what it knows, must not settle that one, or
        the high watermark would pass a replica the controller is writing into the ISR."""
        if partition_epoch <= self.partition_epoch:
            return False
        self.partition_epoch = partition_epoch
        self.update_assignment(replicas, isr, leader_end_offset, now_ms)
        return True

    def update_assignment(self, replicas: Iterable[int], isr: Iterable[int], leader_end_offset: int, now_ms: int) -> None:
        """Take the replicas and ISR from a newer registration; a change in flight is settled by it."""
        self.replicas = tuple(replicas)
        self.isr = IsrState(tuple(isr))
        old = self.remotes
        self.remotes = {}
        for broker_id in self.replicas:
            if broker_id == self.local_id:
                continue
            state = old.get(broker_id)
            if state is None:
                state = ReplicaState(broker_id)
                state.reset(now_ms, leader_end_offset, broker_id in self.isr.committed)
            self.remotes[broker_id] = state

    @property
    def effective_min_isr(self) -> int:
        return min(self.min_insync_replicas, len(self.replicas) or 1)

    @property
    def is_under_min_isr(self) -> bool:
        return len(self.isr.committed) < self.effective_min_isr

    # -- follower progress -----------------------------------------------------------------------

    def follower_fetched(
        self,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int,
        broker_epoch: int,
        leader_end_offset: int,
        now_ms: int,
        is_eligible: Callable[[int], bool],
    ) -> tuple[bool, AlterPartitionIntent | None]:
        """A follower fetched from ``fetch_offset``: (the high watermark moved, an ISR expansion to ask for)."""
        state = self.remotes.get(replica_id)
        if state is None:
            raise KeyError(replica_id)
        state.update_fetch_state(fetch_offset, log_start_offset, leader_end_offset, now_ms, broker_epoch)
        intent = self._maybe_expand(state, leader_end_offset, now_ms, is_eligible)
        moved = self.maybe_increment_high_watermark(leader_end_offset, now_ms, is_eligible)
        return moved, intent

    def _maybe_expand(self, state: ReplicaState, leader_end_offset: int, now_ms: int, is_eligible: Callable[[int], bool]) -> AlterPartitionIntent | None:
        if self.isr.in_flight or state.broker_id in self.isr.committed:
            return None
        if not self._can_join(state, leader_end_offset, now_ms, is_eligible):
            return None
        return self._ask(self.isr.committed + (state.broker_id,))

    def _can_join(self, state: ReplicaState, leader_end_offset: int, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        """Kafka's isFollowerInSync plus eligibility: at the high watermark, past this epoch's start,
        and a live, registered broker."""
        return (
            state.log_end_offset != UNKNOWN_OFFSET
            and state.log_end_offset >= self.high_watermark
            and state.log_end_offset >= self.epoch_start_offset
            and is_eligible(state.broker_id)
        )

    def maybe_increment_high_watermark(self, leader_end_offset: int, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        if self.is_under_min_isr:
            return False
        new_hw = leader_end_offset
        maximal = self.isr.maximal
        for state in self.remotes.values():
            if state.log_end_offset >= new_hw:
                continue
            joining = state.log_end_offset != UNKNOWN_OFFSET and state.is_caught_up(leader_end_offset, now_ms, self.replica_lag_time_max_ms) and is_eligible(state.broker_id)
            if state.broker_id in maximal or joining:
                new_hw = state.log_end_offset
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # -- ISR shrink --------------------------------------------------------------------------------

    def out_of_sync_replicas(self, leader_end_offset: int, now_ms: int) -> list[int]:
        return [
            b
            for b in self.isr.committed
            if b != self.local_id and b in self.remotes and not self.remotes[b].is_caught_up(leader_end_offset, now_ms, self.replica_lag_time_max_ms)
        ]

    def maybe_shrink_isr(self, leader_end_offset: int, now_ms: int) -> AlterPartitionIntent | None:
        """Kafka's maybeShrinkIsr: drop the members that have not caught up for replica.lag.time.max.ms."""
        if self.isr.in_flight:
            return None
        lagging = self.out_of_sync_replicas(leader_end_offset, now_ms)
        if not lagging:
            return None
        return self._ask(tuple(b for b in self.isr.committed if b not in lagging))

    def _ask(self, isr: tuple[int, ...]) -> AlterPartitionIntent:
        self.isr = IsrState(self.isr.committed, isr)
        epochs = tuple((b, self.local_broker_epoch if b == self.local_id else self.remotes[b].broker_epoch) for b in isr)
        return AlterPartitionIntent(self.leader_epoch, self.partition_epoch, epochs, self.leader_recovery_state)

    # -- the controller's answer ---------------------------------------------------------------------

    def alter_partition_succeeded(self, isr: Iterable[int], leader_epoch: int, partition_epoch: int, leader_end_offset: int, now_ms: int, is_eligible: Callable[[int], bool]) -> bool:
        """Commit the ISR the controller wrote; False (ignored) if the answer is older than what is
        known already, or at the partition epoch known without being the change in flight (the
        controller had nothing to write): such an answer is to an earlier change, whose record
        came first, and taking it would drop the change asked since. The high watermark may move:
        a smaller ISR holds it back less."""
        isr = tuple(isr)
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return False
        if partition_epoch == self.partition_epoch and (self.isr.pending is None or set(isr) != set(self.isr.pending)):
            return False
        self.partition_epoch = partition_epoch
        self.isr = IsrState(isr)
        self.maybe_increment_high_watermark(leader_end_offset, now_ms, is_eligible)
        return True

    def alter_partition_failed(self, error_code: int) -> None:
        """The controller refused. Only when it says it did not apply the change (an ineligible
        replica, an operation not attempted) is the change forgotten, and a later fetch or shrink
        check asks again from the committed ISR. Any other refusal (INVALID_UPDATE_VERSION, a fenced
        leader epoch) may answer a retry of a change the controller did apply: the change stays in
        flight, holding the high watermark by the maximal ISR, until a newer registration from the
        metadata log settles it, as Kafka's Partition does."""
        if error_code in NOT_APPLIED_ERRORS:
            self.isr = IsrState(self.isr.committed)
