"""Member reconciliation of the consumer group protocol (KIP-848), sans-IO.

A member converges to its target assignment in steps the coordinator drives from its
heartbeats, so that a partition never has two owners:

1. partitions that are no longer in the target are revoked first; the member keeps its
   epoch (UNREVOKED_PARTITIONS) until a heartbeat no longer lists them as owned;
2. then it moves to the target epoch and receives the target partitions that no other
   member still owns; those still owned elsewhere are given later (UNRELEASED_PARTITIONS);
3. once it holds its whole target at the target epoch, it is STABLE.

Each partition the member holds also keeps the epoch at which it was given to the member
(Kafka 4.4, KIP-1251): a partition newly assigned takes the target epoch, one kept or being
revoked keeps its own. A commit from an older member epoch is accepted for the partitions the
member already held at that epoch.

This follows Kafka 4.0's CurrentAssignmentBuilder, with 4.4's assignment epochs.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Partitions = Mapping[uuid.UUID, frozenset[int]]
"""Topic id -> partitions; a topic with no partition is left out, so equal values compare equal."""

AssignmentEpochs = Mapping[uuid.UUID, Mapping[int, int]]
"""Topic id -> partition -> the epoch at which the member was given the partition."""

NO_EPOCH = -1
"""What ``current_partition_epoch`` answers for a partition that no member owns."""


class MemberState(enum.IntEnum):
    """The values are those of the State field of ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        # A state written by a newer coordinator is kept as UNKNOWN and reconciled from scratch.
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """A member's reconciliation state, as ConsumerGroupCurrentMemberAssignmentValue stores it."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Partitions = field(default_factory=dict)
    partitions_pending_revocation: Partitions = field(default_factory=dict)
    # Every partition of the two above; see ``assignment_epoch`` for one that has none.
    assignment_epochs: AssignmentEpochs = field(default_factory=dict)

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch at which the member got a partition it holds. A partition with no recorded
        epoch (a record written before Kafka 4.4) counts as given at the member's epoch, as Kafka's
        Utils.assignmentFromTopicPartitions assumes."""
        return self.assignment_epochs.get(topic_id, {}).get(partition, max(self.member_epoch, 0))

    def held_since(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """The assignment epoch of a partition assigned to the member or being revoked from it;
        None when it holds no such partition."""
        if partition in self.assigned_partitions.get(topic_id, ()) or partition in self.partitions_pending_revocation.get(topic_id, ()):
            return self.assignment_epoch(topic_id, partition)
        return None


class FencedMemberEpochError(Exception):
    """The member must give up all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def reconcile(
    member: CurrentAssignment,
    target_assignment_epoch: int,
    target_assignment: Partitions,
    owned_partitions: Partitions | None,
    current_partition_epoch: Callable[[uuid.UUID, int], int],
) -> CurrentAssignment:
    """The member's next state; ``member`` itself when it cannot move forward yet.

    ``owned_partitions`` is what the heartbeat reported (None when the field was not sent:
    the member is then assumed to still own everything it was asked to revoke).
    ``current_partition_epoch`` answers the epoch of a partition's current owner, or
    ``NO_EPOCH`` when the partition is free.
    """
    step = _Step(member, target_assignment_epoch, target_assignment, owned_partitions, current_partition_epoch)
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch != target_assignment_epoch:
                return step.next_assignment(member.member_epoch)
            return member
        case MemberState.UNREVOKED_PARTITIONS:
            if step.owns_any_of(member.partitions_pending_revocation):
                return member
            return step.next_assignment(member.member_epoch)
        case MemberState.UNRELEASED_PARTITIONS:
            return step.next_assignment(member.member_epoch)
        case _:
            # Only a coordinator downgrade leads here: start over from no partition.
            if owned_partitions is None or any(owned_partitions.values()):
                raise FencedMemberEpochError("The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin.")
            return step.next_assignment(target_assignment_epoch)


@dataclass(slots=True)
class _Step:
    member: CurrentAssignment
    target_epoch: int
    target: Partitions
    owned: Partitions | None
    current_partition_epoch: Callable[[uuid.UUID, int], int]

    def owns_any_of(self, partitions: Partitions) -> bool:
        if self.owned is None:
            return True
        return any(not owned.isdisjoint(partitions.get(topic_id, ())) for topic_id, owned in self.owned.items())

    def next_assignment(self, member_epoch: int) -> CurrentAssignment:
        member = self.member
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        pending_revocation: dict[uuid.UUID, frozenset[int]] = {}
        pending_assignment: dict[uuid.UUID, frozenset[int]] = {}
        has_unreleased = False
        for topic_id in self.target.keys() | member.assigned_partitions.keys():
            target = self.target.get(topic_id, frozenset())
            current = member.assigned_partitions.get(topic_id, frozenset())
            kept = current & target
            revoked = current - kept
            wanted = target - kept
            own_revoking = member.partitions_pending_revocation.get(topic_id, frozenset())
            # A partition this member is itself revoking counts as free: only one member owns a partition.
            unreleased = frozenset(p for p in wanted if p not in own_revoking and self.current_partition_epoch(topic_id, p) != NO_EPOCH)
            has_unreleased = has_unreleased or bool(unreleased)
            wanted -= unreleased
            if kept:
                assigned[topic_id] = kept
            if revoked:
                pending_revocation[topic_id] = revoked
            if wanted:
                pending_assignment[topic_id] = wanted

        if pending_revocation and self.owns_any_of(pending_revocation):
            # Revoke first and stay at the current epoch until the member confirms.
            epochs = _kept_epochs(member, assigned, pending_revocation)
            return CurrentAssignment(member_epoch, member.member_epoch, MemberState.UNREVOKED_PARTITIONS, assigned, pending_revocation, epochs)
        epochs = _kept_epochs(member, assigned)
        for topic_id, partitions in pending_assignment.items():
            assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
            epochs.setdefault(topic_id, {}).update(dict.fromkeys(partitions, self.target_epoch))
        state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        return CurrentAssignment(self.target_epoch, member.member_epoch, state, assigned, {}, epochs)


def _kept_epochs(member: CurrentAssignment, *held: Partitions) -> dict[uuid.UUID, dict[int, int]]:
    """The assignment epochs of the partitions the member keeps (assigned or still being revoked):
    a partition it already had keeps the epoch at which it got it."""
    epochs: dict[uuid.UUID, dict[int, int]] = {}
    for partitions in held:
        for topic_id, ps in partitions.items():
            epochs.setdefault(topic_id, {}).update((p, member.assignment_epoch(topic_id, p)) for p in ps)
    return epochs
