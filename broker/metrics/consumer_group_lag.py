"""Consumer group offsets and lag, as kafka-exporter (danielqsj/kafka_exporter) names them, so that
its dashboards work: computed when Prometheus scrapes, on the node that coordinates each group,
from the committed offsets its coordinator holds and the high watermark of each partition.

- ``kafka_consumergroup_current_offset{consumergroup,topic,partition}``: the committed offset;
- ``kafka_consumergroup_lag{consumergroup,topic,partition}``: high watermark - committed offset (>= 0);
- ``kafka_consumergroup_lag_sum{consumergroup,topic}``: their sum per topic.

The high watermark is the one of this node's replica of the partition (the leader's, or a
follower's, which trails it by at most one fetch); a partition with no replica here has no lag
series on this node. Only loaded coordinator partitions count: each group shows on one node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.group_coordinator import GroupCoordinator
    from broker.replica_manager import ReplicaManager


class ConsumerGroupLagCollector:
    def __init__(self, coordinator: GroupCoordinator, replica_manager: ReplicaManager) -> None:
        self._coordinator = coordinator
        self._rm = replica_manager

    def collect(self) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset of a consumer group in a partition.", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed offset of a consumer group in a partition.", labels=labels)
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag of a consumer group summed over a topic's partitions.", labels=["consumergroup", "topic"])
        partitions = self._rm.partitions
        for shard in list(self._coordinator.shards.values()):
            for group, offsets in sorted(shard.offsets.offsets.items()):
                sums: dict[str, int] = {}
                for (topic, index), committed in sorted(offsets.items()):
                    key = [group, topic, str(index)]
                    current.add_metric(key, committed.offset)
                    partition = partitions.get((topic, index))
                    if partition is None:
                        continue
                    behind = max(partition.high_watermark - committed.offset, 0)
                    lag.add_metric(key, behind)
                    sums[topic] = sums.get(topic, 0) + behind
                for topic, total in sorted(sums.items()):
                    lag_sum.add_metric([group, topic], total)
        yield current
        yield lag
        yield lag_sum


__all__ = ["ConsumerGroupLagCollector"]
