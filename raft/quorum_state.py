"""QuorumState: which role this node plays in which epoch, one class per state, durable before acted on.

The states are Kafka's (KIP-595 with KIP-996's Prospective): Unattached (no leader known; it
may have voted), Prospective (canvassing with PreVote, epoch unchanged, memory only), Candidate
(epoch bumped, voted for itself), Leader, Follower, Resigned (a leader stepping down). Every
transition that changes the epoch, the leader or the vote writes the ElectionState to the store
first, so a crash can never make a node forget a vote or an epoch. Timers are absolute virtual
times (ms); the client polls them.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from raft.kraft_version_upgrade import Empty, KRaftVersionUpgrade
from raft.quorum_state_store import ElectionState, QuorumStateStore
from raft.raft_config import RaftConfig
from raft.voter_set import VoterSet

if TYPE_CHECKING:
    from raft.batch_accumulator import BatchAccumulator
    from raft.replicated_log import RawSnapshotWriter

RETRY_BACKOFF_BASE_MS = 100


@dataclass(slots=True)
class UnattachedState:
    epoch: int
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None
    election_deadline_ms: int | None = None  # None for observers: they never stand

    @property
    def leader_id(self) -> int | None:
        return None

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_or_prospective_can_grant(self.voted_id, self.voted_directory_id, candidate_id, candidate_directory_id, log_up_to_date, pre_vote)


@dataclass(slots=True)
class ProspectiveState:
    epoch: int
    retries: int
    election_deadline_ms: int
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None
    known_leader_id: int | None = None  # the leader it followed before its fetch timeout, if any
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until_ms: int | None = None

    @property
    def leader_id(self) -> int | None:
        return None

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_or_prospective_can_grant(self.voted_id, self.voted_directory_id, candidate_id, candidate_directory_id, log_up_to_date, pre_vote)


@dataclass(slots=True)
class CandidateState:
    epoch: int
    retries: int
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    # Voters whose last Vote request got no answer (refused, reset, timed out). With the rejections
    # they can make a win impossible this epoch: the candidate then backs off at once instead of
    # waiting out the election timeout for a vote from a dead node, which after a split vote is
    # most of a failover. Only liveness rests on this; a late grant still counts.
    unanswered: set[int] = field(default_factory=set)
    backoff_until_ms: int | None = None

    @property
    def leader_id(self) -> int | None:
        return None

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        # It voted for itself in this epoch; a PreVote commits to nothing.
        return pre_vote and log_up_to_date


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one replica: its fetch position and when it last fetched."""

    replica_id: int
    directory_id: uuid.UUID | None = None
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_offset_at_last_fetch: int = -1  # to tell when it caught up with what it had been sent
    sent_high_watermark: int = -1  # the last high watermark a fetch answer told it

    def update_fetch(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        """Kafka's rule for "caught up": it reached the leader's end, or the end the leader had at its previous fetch."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.leader_end_offset_at_last_fetch > 0 and fetch_offset >= self.leader_end_offset_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.leader_end_offset_at_last_fetch = leader_end_offset
        self.last_fetch_ms = now_ms


@dataclass(slots=True)
class LeaderState:
    epoch: int
    local_id: int
    epoch_start_offset: int
    granting_voters: frozenset[int]
    accumulator: "BatchAccumulator[object]"
    check_quorum_deadline_ms: int
    voter_states: dict[int, ReplicaState] = field(default_factory=dict)
    observer_states: dict[int, ReplicaState] = field(default_factory=dict)
    fetched_voters: set[int] = field(default_factory=set)  # since the check-quorum timer last reset
    begin_epoch_acked: set[int] = field(default_factory=set)
    begin_epoch_resend_ms: int = 0
    resign_requested: bool = False
    kraft_version_upgrade: KRaftVersionUpgrade = field(default_factory=Empty)

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False


@dataclass(slots=True)
class FollowerState:
    epoch: int
    leader_id_: int
    leader_address: tuple[str, int] | None
    fetch_deadline_ms: int
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None
    has_fetched: bool = False
    snapshot_writer: "RawSnapshotWriter | None" = None
    snapshot_size: int = -1
    snapshot_position: int = 0
    # Kafka's updateVoterSetPeriod: a voter of a kraft.version 0 quorum tells each new leader its
    # directory id, endpoints and kraft.version range once, a fetch timeout after following it.
    update_voter_deadline_ms: int = 0
    has_updated_leader: bool = False

    @property
    def leader_id(self) -> int | None:
        return self.leader_id_

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        # KIP-996: while the leader answers it, a follower refuses to help unseat it.
        return pre_vote and not self.has_fetched and log_up_to_date


@dataclass(slots=True)
class ResignedState:
    epoch: int
    local_id: int
    election_deadline_ms: int
    preferred_successors: list[int]
    unacked_voters: set[int]

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: uuid.UUID | None, log_up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and log_up_to_date


EpochState = Union[UnattachedState, ProspectiveState, CandidateState, LeaderState, FollowerState, ResignedState]


def _unattached_or_prospective_can_grant(
    voted_id: int | None,
    voted_directory_id: uuid.UUID | None,
    candidate_id: int,
    candidate_directory_id: uuid.UUID | None,
    log_up_to_date: bool,
    pre_vote: bool,
) -> bool:
    if voted_id is not None and not pre_vote:
        # One vote per epoch, repeated to the same candidate (its request may have been retried).
        return voted_id == candidate_id and (voted_directory_id is None or candidate_directory_id in (None, voted_directory_id))
    return log_up_to_date


class QuorumState:
    """The current EpochState and the rules for moving between them."""

    def __init__(
        self,
        local_id: int,
        local_directory_id: uuid.UUID,
        voters: VoterSet,
        config: RaftConfig,
        store: QuorumStateStore,
        rng: random.Random,
    ) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.voters = voters
        self.config = config
        self.store = store
        self.random = rng
        self.state: EpochState = UnattachedState(0)

    # -- queries -------------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    def is_voter(self) -> bool:
        return self.voters.is_voter(self.local_id, self.local_directory_id)

    def is_observer(self) -> bool:
        return not self.is_voter()

    def voted_key(self) -> tuple[int | None, uuid.UUID | None]:
        state = self.state
        if isinstance(state, (UnattachedState, ProspectiveState, FollowerState)):
            return state.voted_id, state.voted_directory_id
        if isinstance(state, (CandidateState, LeaderState, ResignedState)):
            return self.local_id, self.local_directory_id
        return None, None

    def random_election_timeout_ms(self, now_ms: int) -> int:
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self.random.randrange(timeout)

    def election_backoff_ms(self, retries: int) -> int:
        """Kafka's binary exponential backoff after a lost election: random in 100 ms steps, capped."""
        return min(RETRY_BACKOFF_BASE_MS * self.random.randrange(2 << min(20, max(retries, 1) - 1)), self.config.election_backoff_max_ms)

    def end_epoch_backoff_ms(self, preferred_successors: list[int]) -> int:
        """How long a follower waits after EndQuorumEpoch: the first preferred successor not at all,
        later ones exponentially longer, the rest the maximum (Kafka's strictExponentialElectionBackoffMs)."""
        if self.local_id not in preferred_successors:
            return self.config.election_backoff_max_ms
        position = preferred_successors.index(self.local_id)
        if position == 0:
            return 0
        base = self.config.election_backoff_max_ms >> (len(preferred_successors) - position)
        return min(base + self.random.randrange(max(base, 1)), self.config.election_backoff_max_ms)

    # -- start ---------------------------------------------------------------------------------------

    def initialize(self, now_ms: int) -> None:
        """Resume from the store. A node that led before the crash resigns its epoch: it cannot know
        what it had appended and not flushed, so it must not go on leading it."""
        stored = self.store.read_election_state()
        if stored is None:
            self._set(UnattachedState(0, election_deadline_ms=self._election_deadline(now_ms)), persist=True)
            return
        epoch = stored.epoch
        if stored.leader_id == self.local_id:
            self.state = ResignedState(epoch, self.local_id, self.random_election_timeout_ms(now_ms), [], set())
        elif stored.leader_id is not None:
            # Unattached with the vote kept; the leader is learned again from its BeginQuorumEpoch or a Fetch answer.
            self.state = UnattachedState(epoch, stored.voted_id, stored.voted_directory_id, self._election_deadline(now_ms))
        else:
            self.state = UnattachedState(epoch, stored.voted_id, stored.voted_directory_id, self._election_deadline(now_ms))

    def _election_deadline(self, now_ms: int) -> int | None:
        return self.random_election_timeout_ms(now_ms) if self.is_voter() else None

    # -- transitions ---------------------------------------------------------------------------------

    def _set(self, state: EpochState, persist: bool) -> None:
        if persist:
            voted_id, voted_directory_id = (None, None)
            if isinstance(state, (UnattachedState, ProspectiveState, FollowerState)):
                voted_id, voted_directory_id = state.voted_id, state.voted_directory_id
            elif isinstance(state, (CandidateState, LeaderState)):
                voted_id, voted_directory_id = self.local_id, self.local_directory_id
            self.store.write_election_state(ElectionState(state.epoch, state.leader_id, voted_id, voted_directory_id))
        self.state = state

    def _kept_vote(self, epoch: int) -> tuple[int | None, uuid.UUID | None]:
        return self.voted_key() if epoch == self.epoch else (None, None)

    def transition_to_unattached(self, epoch: int, now_ms: int, election_deadline_ms: int | None = None) -> None:
        if epoch < self.epoch:
            raise ValueError(f"cannot go unattached in epoch {epoch} below the current {self.epoch}")
        voted_id, voted_directory_id = self._kept_vote(epoch)
        deadline = election_deadline_ms if election_deadline_ms is not None and self.is_voter() else self._election_deadline(now_ms)
        self._set(UnattachedState(epoch, voted_id, voted_directory_id, deadline), persist=True)

    def transition_to_unattached_voted(self, epoch: int, candidate_id: int, candidate_directory_id: uuid.UUID | None, now_ms: int) -> None:
        if epoch < self.epoch or (epoch == self.epoch and self.voted_key()[0] not in (None, candidate_id)):
            raise ValueError(f"cannot vote for {candidate_id} in epoch {epoch} (current {self.epoch}, voted {self.voted_key()})")
        self._set(UnattachedState(epoch, candidate_id, candidate_directory_id, self._election_deadline(now_ms)), persist=True)

    def transition_to_prospective(self, now_ms: int, retries: int = 1) -> None:
        if not self.is_voter():
            raise ValueError("an observer cannot stand for election")
        voted_id, voted_directory_id = self.voted_key()
        known_leader = self.state.leader_id if isinstance(self.state, FollowerState) else None
        self.state = ProspectiveState(self.epoch, retries, self.random_election_timeout_ms(now_ms), voted_id, voted_directory_id, known_leader, {self.local_id})

    def transition_to_candidate(self, now_ms: int) -> None:
        if not self.is_voter():
            raise ValueError("an observer cannot stand for election")
        retries = self.state.retries if isinstance(self.state, (ProspectiveState, CandidateState)) else 1
        self._set(CandidateState(self.epoch + 1, retries, self.random_election_timeout_ms(now_ms), {self.local_id}), persist=True)

    def transition_to_leader(self, epoch_start_offset: int, accumulator: "BatchAccumulator[object]", now_ms: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState):
            raise ValueError(f"only a candidate becomes leader, not {type(state).__name__}")
        leader = LeaderState(
            state.epoch,
            self.local_id,
            epoch_start_offset,
            frozenset(state.granted),
            accumulator,
            now_ms + self.config.check_quorum_timeout_ms,
        )
        for voter in self.voters:
            leader.voter_states[voter.voter_id] = ReplicaState(voter.voter_id, voter.directory_id)
        self._set(leader, persist=True)
        return leader

    def transition_to_follower(self, epoch: int, leader_id: int, leader_address: tuple[str, int] | None, now_ms: int) -> None:
        if epoch < self.epoch or leader_id == self.local_id:
            raise ValueError(f"cannot follow {leader_id} in epoch {epoch} (current {self.epoch})")
        voted_id, voted_directory_id = self._kept_vote(epoch)
        deadline = now_ms + self.config.fetch_timeout_ms
        follower = FollowerState(epoch, leader_id, leader_address, deadline, voted_id, voted_directory_id)
        follower.update_voter_deadline_ms = now_ms + self.config.fetch_timeout_ms
        self._set(follower, persist=True)

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            raise ValueError("only the leader resigns")
        others = {v.voter_id for v in self.voters if v.voter_id != self.local_id}
        self.state = ResignedState(state.epoch, self.local_id, self.random_election_timeout_ms(now_ms), preferred_successors, others)


__all__ = [
    "CandidateState",
    "EpochState",
    "FollowerState",
    "LeaderState",
    "ProspectiveState",
    "QuorumState",
    "ReplicaState",
    "ResignedState",
    "UnattachedState",
]
