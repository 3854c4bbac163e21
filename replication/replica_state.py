"""The leader's view of one follower: how far its log reaches and when it last caught up.

Kafka's Replica. Nothing here reads a clock or a log: the leader hands in the follower's fetch
offset, its own log end at that moment and the time, and asks whether the follower is caught up.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1
NO_BROKER_EPOCH = -1


@dataclass(slots=True)
class ReplicaState:
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    # The last time the follower's fetch reached the leader's log end as it stood at the fetch
    # before: what replica.lag.time.max.ms is measured against.
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int = NO_BROKER_EPOCH

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, leader_end_offset: int, fetch_time_ms: int, broker_epoch: int) -> None:
        """A fetch from ``fetch_offset`` says the follower holds everything below it.

        Kafka's rule: a fetch at or past the leader's current end catches the follower up now; one
        that reached where the leader's end stood at the previous fetch caught it up as of that
        previous fetch. So a follower that keeps up with a busy leader counts as caught up even
        though the leader's end moves on between its fetches.
        """
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms
        self.broker_epoch = broker_epoch

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return self.log_end_offset == leader_end_offset or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms

    def reset(self, now_ms: int, leader_end_offset: int, in_isr: bool) -> None:
        """A new leadership: nothing is known of the follower yet. An ISR member is given a full
        lag period from now (Kafka's resetReplicaState), so a new leader does not drop it before
        its first fetch arrives."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = now_ms if in_isr else 0
        self.last_fetch_leader_log_end_offset = leader_end_offset if in_isr else UNKNOWN_OFFSET
        self.last_fetch_time_ms = now_ms if in_isr else 0
        self.broker_epoch = NO_BROKER_EPOCH
