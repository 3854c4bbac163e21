"""The quorum-state store: the epoch, the leader and the vote, durable before they are acted on.

A voter that answers a Vote must never forget it after a crash, or it could vote twice in one
epoch; so the Raft core writes the new ElectionState here, and the write is durable, before the
answer leaves. Kafka keeps this in `__cluster_metadata-0/quorum-state`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None

    def has_leader(self) -> bool:
        return self.leader_id is not None

    def has_voted(self) -> bool:
        return self.voted_id is not None


class QuorumStateStore(Protocol):
    def read_election_state(self) -> ElectionState | None:
        """The last state written, or None for a node that never wrote one."""
        ...

    def write_election_state(self, state: ElectionState) -> None:
        """Replace the stored state; durable when this returns."""
        ...

    def clear(self) -> None: ...


class MemoryQuorumStateStore:
    """For the simulation: a write is durable at once, and survives a simulated crash."""

    def __init__(self) -> None:
        self._state: ElectionState | None = None

    def read_election_state(self) -> ElectionState | None:
        return self._state

    def write_election_state(self, state: ElectionState) -> None:
        self._state = state

    def clear(self) -> None:
        self._state = None


__all__ = ["ElectionState", "MemoryQuorumStateStore", "QuorumStateStore"]
