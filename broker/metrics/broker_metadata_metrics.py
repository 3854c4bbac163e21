"""kafka.server broker-metadata-metrics: the last metadata record this node applied (Kafka's
BrokerServerMetrics). With the active controller's NoOpRecord every metadata.max.idle.interval.ms,
``..._last_applied_record_lag_ms`` stays near that interval on a node that follows the log and
grows on one that does not. As the JMX exporter names them:
``kafka_server_brokermetadatametrics_last_applied_record_offset``, ``..._last_applied_record_timestamp``,
``..._last_applied_record_lag_ms``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.raft_manager import KafkaRaftManager


class BrokerMetadataMetricsCollector:
    def __init__(self, raft: KafkaRaftManager, now_ms: Callable[[], int]) -> None:
        self._raft = raft
        self._now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        offset, timestamp = self._raft.last_applied_record
        prefix = "kafka_server_brokermetadatametrics_"
        for name, value, doc in (
            ("last_applied_record_offset", offset, "The offset of the last record from the cluster metadata partition that was applied by the broker."),
            ("last_applied_record_timestamp", timestamp, "The timestamp of the last record from the cluster metadata partition that was applied by the broker."),
            ("last_applied_record_lag_ms", self._now_ms() - timestamp, "The difference between now and the timestamp of the last record from the cluster metadata partition that was applied by the broker."),
        ):
            yield GaugeMetricFamily(prefix + name, f"kafka.server:type=broker-metadata-metrics,{name.replace('_', '-')}: {doc}", value=value)


__all__ = ["BrokerMetadataMetricsCollector"]
