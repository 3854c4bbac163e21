"""kafka.server raft-metrics: this node's view of the metadata quorum.

Read from the KafkaRaftManager when Prometheus scrapes, except the commit latency, which the
manager records as batches commit on the leader (``CommitLatency``). As the JMX exporter's KRaft
rules name them: ``kafka_server_raftmetrics_current_leader``, ``..._current_epoch``,
``..._current_vote``, ``..._high_watermark``, ``..._log_end_offset``, ``..._log_end_epoch``,
``..._commit_latency_avg``, ``..._commit_latency_max``, ``..._current_state{current_state="leader"}``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.raft_manager import KafkaRaftManager

# Kafka's metrics average over their samples: two windows of metrics.sample.window.ms (30 s).
WINDOW_S = 60.0

# QuorumState classes as Kafka's current-state names them.
STATES = {
    "LeaderState": "leader",
    "FollowerState": "follower",
    "CandidateState": "candidate",
    "ProspectiveState": "prospective",
    "UnattachedState": "unattached",
    "ResignedState": "resigned",
}


class CommitLatency:
    """commit-latency-avg / -max: from a batch's append on the leader to its commit, over the last minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque()

    def record(self, latency_ms: float) -> None:
        now = self._clock()
        self._samples.append((now, latency_ms))
        self._expire(now)

    def _expire(self, now: float) -> None:
        samples = self._samples
        while samples and samples[0][0] < now - WINDOW_S:
            samples.popleft()

    def avg_max(self) -> tuple[float, float]:
        """NaN when nothing committed in the window, as Kafka's Avg and Max show then."""
        self._expire(self._clock())
        if not self._samples:
            return float("nan"), float("nan")
        values = [v for _, v in self._samples]
        return sum(values) / len(values), max(values)


class RaftMetricsCollector:
    def __init__(self, raft: KafkaRaftManager) -> None:
        self._raft = raft

    def collect(self) -> Iterator[Metric]:
        raft = self._raft
        client = raft.client
        prefix = "kafka_server_raftmetrics_"

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(prefix + name, f"kafka.server:type=raft-metrics,{name.replace('_', '-')}: {doc}", value=value)

        leader, epoch = raft.leader
        yield gauge("current_leader", "The current quorum leader's id; -1 when unknown.", -1 if leader is None else leader)
        yield gauge("current_epoch", "The current quorum epoch.", epoch)
        if client is None:
            return
        state = client.quorum_state.state
        voted = getattr(state, "voted_id", None)
        if type(state).__name__ == "CandidateState":
            voted = raft.node_id
        yield gauge("current_vote", "The id of the voter this node voted for in this epoch; -1 if none.", -1 if voted is None else voted)
        name = STATES.get(type(state).__name__, type(state).__name__.lower())
        current = GaugeMetricFamily(prefix + "current_state", "kafka.server:type=raft-metrics,current-state: this node's state in the quorum.", labels=["current_state"])
        current.add_metric([name], 1.0)
        yield current
        hw = client.high_watermark
        yield gauge("high_watermark", "The high watermark of the metadata log; -1 when unknown.", -1 if hw is None else hw)
        log = raft.metadata_log
        if log is not None:
            yield gauge("log_end_offset", "The end offset of the metadata log.", log.end_offset())
        avg, mx = raft.commit_latency.avg_max()
        yield gauge("commit_latency_avg", "The average time (ms) from a batch's append on the leader to its commit.", avg)
        yield gauge("commit_latency_max", "The longest time (ms) from a batch's append on the leader to its commit.", mx)


__all__ = ["CommitLatency", "RaftMetricsCollector", "STATES"]
