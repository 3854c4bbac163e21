"""kafka.server BrokerTopicMetrics: what clients produced to and fetched from each topic, and in total.

The produce path (ReplicaManager.append_records) and the fetch path (FetchHandler) add to the
``TopicMetrics`` of a topic: plain integers, one dict lookup per partition of a request. A scrape
reads them; a topic gone from the metadata image has its counts folded into the totals (which
never go down) and is no longer shown, as Kafka removes a deleted topic's metrics.

Prometheus names, as the JMX exporter gives ``kafka.server<type=BrokerTopicMetrics, name=XPerSec, topic=T><>Count``:
``kafka_server_brokertopicmetrics_x_total{topic="T"}``, and without ``topic`` for all topics.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterator

from prometheus_client.core import Metric


class TopicMetrics:
    """One topic's counters (or the retired topics' sum)."""

    __slots__ = (
        "messages_in",
        "bytes_in",
        "bytes_out",
        "bytes_rejected",
        "total_produce_requests",
        "failed_produce_requests",
        "total_fetch_requests",
        "failed_fetch_requests",
        "replication_bytes_out",
        "total_share_fetch_requests",
        "failed_share_fetch_requests",
        "total_share_acknowledgement_requests",
        "failed_share_acknowledgement_requests",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def add(self, other: TopicMetrics) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


# (attribute, Kafka's meter name, help) in the order Kafka lists them.
METERS = (
    ("messages_in", "MessagesInPerSec", "Records appended by clients (Kafka counts messages; a batch of n records is n)."),
    ("bytes_in", "BytesInPerSec", "Bytes of record batches appended by clients."),
    ("bytes_out", "BytesOutPerSec", "Bytes of records sent to consumers (followers not included)."),
    ("bytes_rejected", "BytesRejectedPerSec", "Bytes of record batches the log refused."),
    ("total_produce_requests", "TotalProduceRequestsPerSec", "Partition appends asked by produce requests."),
    ("failed_produce_requests", "FailedProduceRequestsPerSec", "Partition appends the log refused."),
    ("total_fetch_requests", "TotalFetchRequestsPerSec", "Partition reads answered to fetch requests."),
    ("failed_fetch_requests", "FailedFetchRequestsPerSec", "Partition reads answered with a storage error."),
    ("replication_bytes_out", "ReplicationBytesOutPerSec", "Bytes of records sent to followers."),
)
# KIP-932's, counted by the share partition manager once per topic of a request; a topic shows
# them only once one moved, as Kafka makes a topic's share meters on first use.
SHARE_METERS = (
    ("total_share_fetch_requests", "TotalShareFetchRequestsPerSec", "ShareFetch requests that read the topic."),
    ("failed_share_fetch_requests", "FailedShareFetchRequestsPerSec", "ShareFetch requests that failed on one of the topic's partitions."),
    ("total_share_acknowledgement_requests", "TotalShareAcknowledgementRequestsPerSec", "Requests that acknowledged records of the topic."),
    ("failed_share_acknowledgement_requests", "FailedShareAcknowledgementRequestsPerSec", "Requests whose acknowledgement failed on one of the topic's partitions."),
)


def prometheus_name(meter: str) -> str:
    """The JMX exporter's name for a BrokerTopicMetrics meter (without ``_total``)."""
    return "kafka_server_brokertopicmetrics_" + meter.removesuffix("PerSec").lower()


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: the ``TopicMetrics`` of each topic, made on first use."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicMetrics] = {}
        self.retired = TopicMetrics()  # the counts of topics no longer shown

    def topic(self, name: str) -> TopicMetrics:
        metrics = self.topics.get(name)
        if metrics is None:
            metrics = self.topics[name] = TopicMetrics()
        return metrics

    def retire_all_but(self, alive: Collection[str]) -> None:
        """Stop showing the topics not in ``alive``; their counts stay in the totals."""
        for name in [n for n in self.topics if n not in alive]:
            self.retired.add(self.topics.pop(name))

    def total(self) -> TopicMetrics:
        total = TopicMetrics()
        total.add(self.retired)
        for metrics in self.topics.values():
            total.add(metrics)
        return total


class BrokerTopicMetricsCollector:
    """``alive_topics``: the topics of the metadata image now (None: show every topic seen)."""

    def __init__(self, stats: BrokerTopicStats, alive_topics: Callable[[], Collection[str]] | None = None) -> None:
        self._stats = stats
        self._alive = alive_topics

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        if self._alive is not None:
            stats.retire_all_but(self._alive())
        total = stats.total()
        topics = sorted(stats.topics.items())
        for meters, every_topic in ((METERS, True), (SHARE_METERS, False)):
            for attr, meter, doc in meters:
                family = Metric(prometheus_name(meter), f"kafka.server:type=BrokerTopicMetrics,name={meter}: {doc}", "counter")
                sample = family.name + "_total"
                family.add_sample(sample, {}, float(getattr(total, attr)))
                for name, metrics in topics:
                    value = getattr(metrics, attr)
                    if value or every_topic:
                        family.add_sample(sample, {"topic": name}, float(value))
                yield family


__all__ = ["METERS", "SHARE_METERS", "BrokerTopicMetricsCollector", "BrokerTopicStats", "TopicMetrics", "prometheus_name"]
