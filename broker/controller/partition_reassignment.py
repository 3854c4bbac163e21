"""A partition's reassignment (KIP-455) as the controller tracks it: Kafka's
PartitionReassignmentReplicas and PartitionReassignmentRevert.

A reassignment lives in the partition's registration. Starting one writes replicas = target
followed by the replicas being removed (the union), with adding_replicas and removing_replicas
set. It completes in the PartitionChangeRecord whose target ISR holds every replica of the
target: replicas become the target, the removed ones leave the ISR, and adding/removing are
cleared. Cancelling reverts to the original replicas: the union without the adding ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from broker.metadata.metadata_image import PartitionRegistration


@dataclass(frozen=True, slots=True)
class CompletedReassignment:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PartitionReassignmentReplicas:
    removing: tuple[int, ...]
    adding: tuple[int, ...]
    replicas: tuple[int, ...]

    @classmethod
    def of(cls, current: Sequence[int], target: Sequence[int]) -> PartitionReassignmentReplicas:
        """The registration that starts moving from ``current`` replicas to ``target``; the ones
        being removed stay at the end of the list until the move completes."""
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls(removing, adding, tuple(target) + removing)

    @classmethod
    def ongoing(cls, partition: PartitionRegistration) -> PartitionReassignmentReplicas:
        return cls(partition.removing_replicas, partition.adding_replicas, partition.replicas)

    @property
    def in_progress(self) -> bool:
        return bool(self.removing or self.adding)

    def maybe_complete(self, target_isr: Sequence[int]) -> CompletedReassignment | None:
        """The replicas and ISR once the reassignment is done, if ``target_isr`` lets it be done:
        every replica that stays is in it, and at least one of them."""
        if not self.in_progress:
            return None
        isr = tuple(target_isr)
        replicas = self.replicas
        if self.removing:
            isr = tuple(b for b in isr if b not in self.removing)
            replicas = tuple(b for b in replicas if b not in self.removing)
            if not isr or not replicas:
                return None
        if not set(replicas) <= set(isr):
            return None
        return CompletedReassignment(replicas, isr)

    def original_replicas(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.adding)


def is_reassignment_in_progress(partition: PartitionRegistration) -> bool:
    return bool(partition.removing_replicas or partition.adding_replicas)


@dataclass(frozen=True, slots=True)
class PartitionReassignmentRevert:
    """The replicas and ISR a cancelled reassignment leaves. ``unclean`` when every ISR member
    was a replica being added: the first original replica then becomes the ISR, which only an
    unclean election may accept."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool

    @classmethod
    def of(cls, partition: PartitionRegistration) -> PartitionReassignmentRevert:
        ongoing = PartitionReassignmentReplicas.ongoing(partition)
        replicas = ongoing.original_replicas()
        if not replicas:
            # Unreachable unless the partition had no replicas before the reassignment began.
            raise ValueError("Invalid replica assignment: addingReplicas contains all replicas.")
        isr = tuple(b for b in partition.isr if b not in ongoing.adding)
        if isr:
            return cls(replicas, isr, False)
        return cls(replicas, (replicas[0],), True)


__all__ = ["CompletedReassignment", "PartitionReassignmentReplicas", "PartitionReassignmentRevert", "is_reassignment_in_progress"]
