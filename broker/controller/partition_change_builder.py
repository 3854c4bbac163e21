"""Kafka's PartitionChangeBuilder: the PartitionChangeRecord that takes a partition to a target state.

The caller sets a target ISR (and replicas, leader recovery state) and an election kind;
build() elects the leader under Kafka's rules and returns the record, or None when nothing
changes. Rules:

- A leader must be acceptable (the caller's predicate: registered, unfenced, not in
  controlled shutdown, its directory online) and, for a clean election, in the target ISR,
  or, once the ISR is empty, among the eligible leader replicas (KIP-966's ELR).
- The current leader stays while it is still valid; otherwise the first valid replica in
  replica order (the preferred replica first) takes over.
- A PREFERRED election tries the preferred replica first, then keeps a valid current
  leader, then the other replicas in order.
- With eligible leader replicas on and both the ISR and the ELR empty, the last known
  leader (``last_known_elr``, remembered when the partition lost its leader) may lead
  again: it is the replica most likely to hold every committed record, but it restarted
  uncleanly, so the election counts as unclean.
- With no clean candidate, an UNCLEAN election takes the first acceptable replica,
  shrinks the ISR to it and marks the leader RECOVERING; otherwise the partition has no
  leader (-1).
- Eligible leader replicas off, the ISR never becomes empty: a target ISR that would be
  empty leaves the ISR as it is, so its last member is remembered as the one replica known
  to hold every committed record. On, the ISR may empty and the ELR remembers instead: while
  the target ISR is below the topic's min.insync.replicas (capped at the replication
  factor), the replicas leaving the ISR join the ELR (they hold every record the high
  watermark passed, since it stopped moving), minus those that restarted uncleanly. An ISR
  back at min.insync.replicas clears the ELR; an unclean election clears it too.
- A reassignment in progress completes as soon as the target ISR holds every replica that
  stays (Kafka's completeReassignmentIfNeeded): the removed replicas leave the replicas and
  the ISR, and a leader among them is replaced.

Setting ``leader`` in the record (even to the same broker) is what bumps the leader epoch
when the record is applied; every record bumps the partition epoch.
"""

from __future__ import annotations

import dataclasses

import enum
import uuid
from typing import Callable, Collection, Sequence

from broker.controller.partition_reassignment import PartitionReassignmentReplicas
from broker.metadata.metadata_image import MIGRATING_DIR, NO_LEADER, NO_LEADER_CHANGE, UNASSIGNED_DIR, PartitionRegistration
from broker.metadata.metadata_records import PartitionChangeRecord

RECOVERED = 0
RECOVERING = 1
LOST_DIR = uuid.UUID(int=2)


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def directory_is_online(directory: uuid.UUID, broker_directories: Sequence[uuid.UUID]) -> bool:
    """Kafka's DirectoryId.isOnline: the placeholders count as online, LOST never does."""
    if not broker_directories or directory in (MIGRATING_DIR, UNASSIGNED_DIR):
        return True
    if directory == LOST_DIR:
        return False
    return directory in broker_directories


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        default_dir: Callable[[int], uuid.UUID],
        *,
        min_isr: int = 1,
        eligible_leader_replicas_enabled: bool = False,
        record_version: int | None = None,
    ) -> None:
        """``record_version``: the PartitionChangeRecord version the finalized metadata.version implies."""
        self._record_version = record_version
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._is_acceptable_leader = is_acceptable_leader
        self._default_dir = default_dir
        self._election = Election.ONLINE
        self._target_isr: tuple[int, ...] = partition.isr
        self._target_replicas: tuple[int, ...] = partition.replicas
        self._target_removing: tuple[int, ...] = partition.removing_replicas
        self._target_adding: tuple[int, ...] = partition.adding_replicas
        self._target_recovery_state = partition.leader_recovery_state
        self._target_dirs = dict(zip(partition.replicas, partition.directories))
        self._min_isr = min_isr
        self._elr_enabled = eligible_leader_replicas_enabled
        self._target_elr: tuple[int, ...] = partition.elr
        self._unclean_shutdown_replicas: frozenset[int] = frozenset()

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self._election = election
        return self

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self._target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self._target_replicas = tuple(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self._target_removing = tuple(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self._target_adding = tuple(adding)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self._target_recovery_state = state
        return self

    def set_unclean_shutdown_replicas(self, replicas: Collection[int]) -> PartitionChangeBuilder:
        """Replicas that restarted without a clean shutdown: they may hold less than the high watermark, so they leave the ELR."""
        self._unclean_shutdown_replicas = frozenset(replicas)
        return self

    def set_directory(self, broker_id: int, directory: uuid.UUID) -> PartitionChangeBuilder:
        self._target_dirs[broker_id] = directory
        return self

    def _is_valid_leader(self, replica: int) -> bool:
        candidates = self._target_isr if self._target_isr else self._target_elr
        return replica in candidates and self._is_acceptable_leader(replica)

    def elect_leader(self) -> tuple[int, bool]:
        """(the leader, whether the election is unclean)."""
        current = self._partition.leader
        replicas = self._target_replicas
        if self._election is Election.PREFERRED:
            if replicas and self._is_valid_leader(replicas[0]):
                return replicas[0], False
            if self._is_valid_leader(current):
                return current, False
            clean = next((r for r in replicas[1:] if self._is_valid_leader(r)), None)
        else:
            if self._is_valid_leader(current):
                return current, False
            clean = next((r for r in replicas if self._is_valid_leader(r)), None)
        if clean is not None:
            return clean, False
        if self._can_elect_last_known_leader():
            return self._partition.last_known_elr[0], True
        if self._election is Election.UNCLEAN:
            unclean = next((r for r in replicas if self._is_acceptable_leader(r)), None)
            if unclean is not None:
                return unclean, True
        return NO_LEADER, False

    def _can_elect_last_known_leader(self) -> bool:
        """Kafka's canElectLastKnownLeader, with KAFKA-19522's fix: never a last known leader that may not lead."""
        last_known = self._partition.last_known_elr
        if not self._elr_enabled or self._target_isr or self._target_elr or len(last_known) != 1:
            return False
        return self._is_acceptable_leader(last_known[0])

    def _populate_target_elr(self) -> None:
        """Kafka's maybePopulateTargetElr: what the ELR becomes once the ISR is the target ISR."""
        if not self._elr_enabled:
            return
        if len(self._target_isr) >= self._min_isr:
            self._target_elr = ()
            return
        candidates = (set(self._target_elr) | set(self._partition.isr)) - set(self._target_isr) - self._unclean_shutdown_replicas
        # A replica a completed reassignment removes is no replica any more, let alone an eligible leader.
        self._target_elr = tuple(sorted(candidates & set(self._target_replicas)))

    def _elr_fields(self, unclean: bool) -> tuple[int, ...] | None:
        """The record's eligible_leader_replicas: None if unchanged. An unclean election, or the feature off, clears it."""
        target = () if unclean or not self._elr_enabled else self._target_elr
        return None if target == self._partition.elr else target

    def _last_known_leader(self, new_leader: int) -> tuple[int, ...] | None:
        """The record's last_known_elr (Kafka's maybeUpdateLastKnownLeader): the leader a partition loses
        when it goes leaderless, cleared once it has a leader again."""
        partition = self._partition
        if not self._elr_enabled:
            return None
        if new_leader == NO_LEADER and partition.leader != NO_LEADER and not partition.last_known_elr:
            return (partition.leader,)
        has_leader = new_leader >= 0 or (partition.leader != NO_LEADER and new_leader != NO_LEADER)
        if has_leader and partition.last_known_elr:
            return ()
        return None

    def _complete_reassignment_if_needed(self) -> None:
        ongoing = PartitionReassignmentReplicas(self._target_removing, self._target_adding, self._target_replicas)
        completed = ongoing.maybe_complete(self._target_isr)
        if completed is not None:
            self._target_isr, self._target_replicas = completed.isr, completed.replicas
            self._target_removing = self._target_adding = ()

    def build(self) -> PartitionChangeRecord | None:
        partition = self._partition
        self._complete_reassignment_if_needed()
        self._populate_target_elr()
        leader, unclean = self.elect_leader()
        new_leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery_state = -1
        if leader != partition.leader:
            new_leader = leader
            if leader in self._target_elr and not unclean:
                # Elected from the ELR: it is the ISR now, the one replica known to hold every committed record.
                self._target_isr = (leader,)
                self._target_elr = tuple(r for r in self._target_elr if r != leader)
                if len(self._target_isr) >= self._min_isr:
                    # With min.insync.replicas 1 the high watermark moves again at once and leaves the others
                    # behind; Kafka keeps them eligible until the next change, which could then elect one.
                    self._target_elr = ()
            if unclean:
                # Possible data loss: the new leader is the only replica known in sync.
                isr = (leader,)
                if partition.leader_recovery_state != RECOVERING:
                    recovery_state = RECOVERING
        elif not set(partition.replicas) <= set(self._target_replicas):
            new_leader = partition.leader  # a replica leaves: bump the leader epoch so it stops following
        elr = self._elr_fields(unclean)
        if isr is None and (self._target_isr or self._elr_enabled) and self._target_isr != partition.isr:
            isr = self._target_isr
        if recovery_state == -1 and self._target_recovery_state != partition.leader_recovery_state:
            recovery_state = self._target_recovery_state
        replicas: tuple[int, ...] | None = None
        directories: tuple[uuid.UUID, ...] | None = None
        if self._target_replicas:
            dirs = tuple(self._target_dirs[r] if r in self._target_dirs else self._default_dir(r) for r in self._target_replicas)
            if dirs != partition.directories:
                directories = dirs
            if self._target_replicas != partition.replicas:
                replicas = self._target_replicas
        record = PartitionChangeRecord(
            partition_id=self._partition_id,
            topic_id=self._topic_id,
            isr=isr,
            leader=new_leader,
            replicas=replicas,
            leader_recovery_state=recovery_state,
            directories=directories,
            removing_replicas=self._target_removing if self._target_removing != partition.removing_replicas else None,
            adding_replicas=self._target_adding if self._target_adding != partition.adding_replicas else None,
            eligible_leader_replicas=elr,
            last_known_elr=self._last_known_leader(new_leader),
        )
        if record == PartitionChangeRecord(partition_id=self._partition_id, topic_id=self._topic_id):
            return None
        return record if self._record_version is None else dataclasses.replace(record, record_version=self._record_version)

__all__ = ["Election", "PartitionChangeBuilder", "RECOVERED", "RECOVERING", "directory_is_online"]
