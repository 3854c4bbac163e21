"""Replication throttles, sans-IO: Kafka's ReplicationQuotaManager with the time as input.

A quota is a byte rate measured over `replication.quota.window.num` (11) windows of
`replication.quota.window.size.seconds` (1 s) each, as Kafka's SimpleRate does: the bytes of
the windows kept, over the time since the oldest began (at least one window). It is exceeded
while that rate is above the bound. Only replicas named in the topic's
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` ("*" or
"partition:broker,...", this broker's entries) count, and the leader and follower skip a
throttled partition only while the quota is exceeded and the follower is out of the ISR.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
# Kafka's QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT (Long.MAX_VALUE): no throttle.
UNLIMITED = 2**63 - 1
DEFAULT_SAMPLES = 11
DEFAULT_WINDOW_MS = 1000


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """One topic's throttled partitions on one broker: all of them, or those listed."""

    all: bool
    partitions: frozenset[int]

    def __contains__(self, partition: int) -> bool:
        return self.all or partition in self.partitions


NONE = ThrottledReplicas(False, frozenset())


def parse_throttled_replicas(value: str, broker_id: int) -> ThrottledReplicas:
    """Kafka's parseThrottledPartitions: ``*``, or the partitions of the ``partition:broker``
    entries that name ``broker_id``."""
    value = value.strip()
    if value == "*":
        return ThrottledReplicas(True, frozenset())
    partitions = set()
    for entry in filter(None, (e.strip() for e in value.split(","))):
        partition, _, broker = entry.partition(":")
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return ThrottledReplicas(False, frozenset(partitions))


class ReplicationQuota:
    """One direction's byte rate against its bound."""

    def __init__(self, bound: int = UNLIMITED, samples: int = DEFAULT_SAMPLES, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.bound = bound
        self._samples = samples
        self._window_ms = window_ms
        # [window start ms, bytes], the oldest first.
        self._windows: deque[list[int]] = deque()

    def record(self, size: int, now_ms: int) -> None:
        """Count ``size`` bytes, whether or not the quota was exceeded (Kafka records unchecked)."""
        if not self._windows or now_ms - self._windows[-1][0] >= self._window_ms:
            self._windows.append([now_ms, 0])
        self._windows[-1][1] += size
        self._purge(now_ms)

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the windows kept."""
        self._purge(now_ms)
        if not self._windows:
            return 0.0
        elapsed_ms = max(now_ms - self._windows[0][0], self._window_ms)
        return sum(w[1] for w in self._windows) * 1000 / elapsed_ms

    def is_exceeded(self, now_ms: int) -> bool:
        return self.bound < UNLIMITED and self.rate(now_ms) > self.bound

    def _purge(self, now_ms: int) -> None:
        horizon = self._samples * self._window_ms
        while self._windows and now_ms - self._windows[0][0] >= horizon:
            self._windows.popleft()
