"""The timeouts a chaos cluster and its clients run with, and so how long each fault is held.

A fault window costs about the time the cluster needs to notice it (the broker session, the Raft
fetch timeout, the replica lag limit, the group members' sessions) plus a restart. ``fast`` has
those in one or two seconds so that the CI campaign can run ten faults of every kind in about
three minutes; ``default`` keeps the slower timeouts the bench ran with first. Either way a pause
outlasts every session, and a kill or a partition is held past the broker session, so each fault
still gets nodes fenced and leaders moved.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    session_ms: int  # broker.session.timeout.ms: a silent broker is fenced after it
    heartbeat_ms: int  # broker.heartbeat.interval.ms
    replica_lag_ms: int  # replica.lag.time.max.ms: a follower that stopped fetching leaves the ISR after it
    replica_socket_timeout_ms: int  # a replica fetch lost in a cut link is retried after it
    quorum_fetch_timeout_ms: int  # controller.quorum.fetch.timeout.ms: a silent Raft leader is replaced after it
    quorum_election_timeout_ms: int
    member_session_ms: int  # the workloads' consumers' session.timeout.ms (and the cluster's group.min.session.timeout.ms)
    pause_ms: int  # how long a paused node stays stopped

    def __post_init__(self) -> None:
        if self.pause_ms <= max(self.session_ms, self.member_session_ms, self.quorum_fetch_timeout_ms):
            raise ValueError(f"profile {self.name}: a pause must outlast every session timeout")

    @property
    def session_s(self) -> float:
        return self.session_ms / 1000

    @property
    def pause_s(self) -> float:
        return self.pause_ms / 1000

    @property
    def member_heartbeat_ms(self) -> int:
        return self.member_session_ms // 6

    def overrides(self) -> dict[str, str]:
        """The brokers' properties for this profile."""
        return {
            "broker.session.timeout.ms": str(self.session_ms),
            "broker.heartbeat.interval.ms": str(self.heartbeat_ms),
            "replica.lag.time.max.ms": str(self.replica_lag_ms),
            "replica.socket.timeout.ms": str(self.replica_socket_timeout_ms),
            "controller.quorum.fetch.timeout.ms": str(self.quorum_fetch_timeout_ms),
            "controller.quorum.election.timeout.ms": str(self.quorum_election_timeout_ms),
            "controller.quorum.election.backoff.max.ms": str(self.quorum_election_timeout_ms),
            "group.min.session.timeout.ms": str(self.member_session_ms),
        }


PROFILES = {
    "fast": Profile(
        "fast",
        session_ms=1000,
        heartbeat_ms=150,
        replica_lag_ms=2000,
        replica_socket_timeout_ms=1500,
        quorum_fetch_timeout_ms=1000,
        # A restarted voter sits out one election timeout (random, up to twice this) before its
        # pre-vote finds the leader again: it is part of every restart.
        quorum_election_timeout_ms=300,
        member_session_ms=1500,
        pause_ms=2000,
    ),
    "default": Profile(
        "default",
        session_ms=2000,
        heartbeat_ms=250,
        replica_lag_ms=4000,
        replica_socket_timeout_ms=5000,
        quorum_fetch_timeout_ms=2000,
        quorum_election_timeout_ms=1000,
        member_session_ms=6000,
        pause_ms=7000,
    ),
}
