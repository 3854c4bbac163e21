"""kafka.server share-coordinator-metrics (Kafka 4.4's ShareCoordinatorMetrics), on the share
coordinator of this node:

- ``write-total`` and ``write-rate``: share-group state writes, counted as Kafka's shard counts
  them: every WriteShareGroupState partition a loaded shard took, and every ReadShareGroupState
  that recorded a new leader epoch;
- ``write-latency-avg`` and ``-max``: ms from a WriteShareGroupState partition reaching the
  coordinator to its answer (its records replicated), over the last minute;
- ``last-pruned-offset{topic="__share_group_state",partition}``: where each partition this node
  coordinates was last pruned to (gone when the node resigns it, as Kafka's);
- ``num-partitions{state="active"|"loading"|"failed"}``: the ``__share_group_state`` partitions
  this node leads, loaded, loading, or whose load failed (until the node resigns them).

The service counts (an integer addition and a windowed rate per write); the rest is read when
Prometheus scrapes. As the JMX exporter names them:
``kafka_server_share_coordinator_metrics_write_total``, ``..._write_rate``, ``..._write_latency_avg``,
``..._write_latency_max``, ``..._last_pruned_offset{topic,partition}``, ``..._num_partitions{state}``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.metrics.raft_metrics import CommitLatency
from broker.metrics.selector_stats import WindowedRate, monotonic_ms

if TYPE_CHECKING:
    from broker.share_coordinator.share_coordinator_service import ShareCoordinatorService

PREFIX = "kafka_server_share_coordinator_metrics_"
MBEAN = "kafka.server:type=share-coordinator-metrics"
STATE_TOPIC = "__share_group_state"


class ShareCoordinatorMetrics:
    def __init__(self, now_ms: Callable[[], int] = monotonic_ms) -> None:
        self.now_ms = now_ms
        self.writes = 0
        self.write_rate = WindowedRate(now_ms())
        # Kafka's Avg and Max of the latency samples of the last minute (NaN without any).
        self.write_latency = CommitLatency()
        self.last_pruned_offsets: dict[int, int] = {}

    def record_write(self) -> None:
        self.writes += 1
        self.write_rate.record(self.now_ms())

    def timed(self, answer: Any, started_s: float) -> Any:
        """``answer`` unchanged; its latency from ``started_s`` (time.monotonic) recorded when it is given."""
        if isinstance(answer, asyncio.Future):
            answer.add_done_callback(lambda _: self.write_latency.record((time.monotonic() - started_s) * 1000))
        else:
            self.write_latency.record((time.monotonic() - started_s) * 1000)
        return answer

    def pruned(self, index: int, offset: int) -> None:
        self.last_pruned_offsets[index] = offset

    def resigned(self, index: int) -> None:
        self.last_pruned_offsets.pop(index, None)


class ShareCoordinatorMetricsCollector:
    def __init__(self, service: ShareCoordinatorService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service
        metrics = service.metrics
        yield CounterMetricFamily(PREFIX + "write", f"{MBEAN} write-total: share-group state writes.", value=metrics.writes)
        yield GaugeMetricFamily(
            PREFIX + "write_rate", f"{MBEAN} write-rate: share-group state writes per second, over the last 30 to 60 s.", value=metrics.write_rate.rate(metrics.now_ms())
        )
        avg, mx = metrics.write_latency.avg_max()
        yield GaugeMetricFamily(PREFIX + "write_latency_avg", f"{MBEAN} write-latency-avg: ms a share-group state write took, on average over the last minute.", value=avg)
        yield GaugeMetricFamily(PREFIX + "write_latency_max", f"{MBEAN} write-latency-max: the longest share-group state write of the last minute, ms.", value=mx)
        pruned = GaugeMetricFamily(
            PREFIX + "last_pruned_offset", f"{MBEAN},topic=T,partition=P last-pruned-offset: the offset the partition was last pruned to.", labels=["topic", "partition"]
        )
        for index, offset in sorted(metrics.last_pruned_offsets.items()):
            pruned.add_metric([STATE_TOPIC, str(index)], offset)
        yield pruned
        partitions = GaugeMetricFamily(PREFIX + "num_partitions", f"{MBEAN},state=S num-partitions: {STATE_TOPIC} partitions in the state here.", labels=["state"])
        runtime = service.runtime
        loading = runtime._loading  # noqa: SLF001 - the runtime keeps no counts of its own
        partitions.add_metric(["active"], len(service.shards))
        partitions.add_metric(["loading"], len(loading))
        # Led here (a leader epoch taken) but neither loaded nor loading: its load failed.
        partitions.add_metric(["failed"], sum(1 for i in runtime._epochs if i not in service.shards and i not in loading))  # noqa: SLF001
        yield partitions


__all__ = ["ShareCoordinatorMetrics", "ShareCoordinatorMetricsCollector"]
