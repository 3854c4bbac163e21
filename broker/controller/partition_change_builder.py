"""Kafka's PartitionChangeBuilder: the PartitionChangeRecord that takes a partition to a target state.

The caller sets a target ISR (and replicas, leader recovery state) and an election kind;
build() elects the leader under Kafka's rules and returns the record, or None when nothing
changes. Rules, with eligible leader replicas (KIP-966) off:

- A leader must be acceptable (the caller's predicate: registered, unfenced, not in
  controlled shutdown, its directory online) and, for a clean election, in the target ISR.
- The current leader stays while it is still valid; otherwise the first valid replica in
  replica order (the preferred replica first) takes over.
- A PREFERRED election tries the preferred replica first, then keeps a valid current
  leader, then the other replicas in order.
- With no clean candidate, an UNCLEAN election takes the first acceptable replica,
  shrinks the ISR to it and marks the leader RECOVERING; otherwise the partition has no
  leader (-1).
- The ISR never becomes empty: a target ISR that would be empty leaves the ISR as it is,
  so its last member is remembered as the one replica known to hold every committed record.

Setting ``leader`` in the record (even to the same broker) is what bumps the leader epoch
when the record is applied; every record bumps the partition epoch.
"""

from __future__ import annotations

import enum
import uuid
from typing import Callable, Sequence

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
    ) -> None:
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._is_acceptable_leader = is_acceptable_leader
        self._default_dir = default_dir
        self._election = Election.ONLINE
        self._target_isr: tuple[int, ...] = partition.isr
        self._target_replicas: tuple[int, ...] = partition.replicas
        self._target_recovery_state = partition.leader_recovery_state
        self._target_dirs = dict(zip(partition.replicas, partition.directories))

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self._election = election
        return self

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self._target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self._target_replicas = tuple(replicas)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self._target_recovery_state = state
        return self

    def set_directory(self, broker_id: int, directory: uuid.UUID) -> PartitionChangeBuilder:
        self._target_dirs[broker_id] = directory
        return self

    def _is_valid_leader(self, replica: int) -> bool:
        return replica in self._target_isr and self._is_acceptable_leader(replica)

    def elect_leader(self) -> tuple[int, bool]:
        """(the leader, whether the election is unclean)."""
        current = self._partition.leader
        replicas = self._target_replicas
        if self._election is Election.PREFERRED:
            if replicas and self._is_valid_leader(replicas[0]):
                return replicas[0], False
            if self._is_valid_leader(current):
                return current, False
            return next((r for r in replicas[1:] if self._is_valid_leader(r)), NO_LEADER), False
        if self._is_valid_leader(current):
            return current, False
        clean = next((r for r in replicas if self._is_valid_leader(r)), None)
        if clean is not None:
            return clean, False
        if self._election is Election.UNCLEAN:
            unclean = next((r for r in replicas if self._is_acceptable_leader(r)), None)
            if unclean is not None:
                return unclean, True
        return NO_LEADER, False

    def build(self) -> PartitionChangeRecord | None:
        partition = self._partition
        leader, unclean = self.elect_leader()
        new_leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery_state = -1
        if leader != partition.leader:
            new_leader = leader
            if unclean:
                # Possible data loss: the new leader is the only replica known in sync.
                isr = (leader,)
                if partition.leader_recovery_state != RECOVERING:
                    recovery_state = RECOVERING
        elif not set(partition.replicas) <= set(self._target_replicas):
            new_leader = partition.leader  # a replica leaves: bump the leader epoch so it stops following
        if isr is None and self._target_isr and self._target_isr != partition.isr:
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
            # Eligible leader replicas are off: a stale list is cleared, as Kafka does.
            eligible_leader_replicas=() if partition.elr else None,
        )
        if record == PartitionChangeRecord(partition_id=self._partition_id, topic_id=self._topic_id):
            return None
        return record


__all__ = ["Election", "PartitionChangeBuilder", "RECOVERED", "RECOVERING", "directory_is_online"]
