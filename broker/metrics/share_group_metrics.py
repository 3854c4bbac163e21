"""KIP-932's share-group metrics of a broker, in Kafka 4.4's names:

- kafka.server ShareGroupMetrics: records acknowledged by type (``RecordAcknowledgementsPerSec``,
  ``ackType`` Accept, Release, Reject, Renew), the time to load a share partition's state
  (``PartitionLoadTimeMs``), and per group the share of a ShareFetch's partitions it could read
  (``RequestTopicPartitionsFetchRatio``, percent) and the time to get them ready
  (``TopicPartitionsAcquireTimeMs``);
- kafka.server SharePartitionMetrics, per share partition this node leads (``group``, ``topic``,
  ``partition``): records whose acquisition lock timed out (``AcquisitionLockTimeoutPerSec``),
  records and batches in flight (``InFlightMessageCount``, ``InFlightBatchCount``);
- kafka.server ShareSessionCache: ``ShareSessionsCount``, ``SharePartitionsCount``;
- the share-group part of group-coordinator-metrics: ``share-group-count`` by ``state``,
  ``group-count{protocol="share"}``, ``share-group-rebalance-rate`` and ``-count``;
- BrokerTopicMetrics' share meters are kept with the other BrokerTopicMetrics
  (broker/metrics/broker_topic_metrics.py); ``ShareGroupMetrics`` adds to them.

The share partition manager and the ShareGroupHeartbeat handler count into ``ShareGroupMetrics``
(integer additions, a histogram slot); gauges are read from the manager, the share sessions and
the group coordinator when Prometheus scrapes. A share partition's series go when this node
stops holding it, as Kafka closes its SharePartitionMetrics.

Prometheus names as the JMX exporter gives them: ``kafka_server_sharegroupmetrics_recordacknowledgements_total{ackType="Accept"}``,
``kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total{group,topic,partition}``,
``kafka_server_group_coordinator_metrics_share_group_count{state="Stable"}`` and so on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.metrics.broker_topic_metrics import BrokerTopicStats
from broker.metrics.histogram import Histogram, add_summary
from broker.metrics.selector_stats import WindowedRate, monotonic_ms

if TYPE_CHECKING:
    from broker.group_coordinator import GroupCoordinator
    from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
    from broker.share.persister import PersisterStateBatch
    from broker.share.share_partition_manager import PartitionFetch, ShareFetchParams, SharePartitionManager
    from broker.share.share_session_cache import ShareSessionCache, TopicIdPartition
    from broker.share_coordinator.share_partition_key import SharePartitionKey

# AcknowledgeType ids and Kafka's ackType tag values (AcknowledgeType.toString, capitalized).
ACK_TYPES = ((1, "Accept"), (2, "Release"), (3, "Reject"), (4, "Renew"))
SHARE_GROUP_STATES = ("Empty", "Stable", "Dead")


class ShareGroupMetrics:
    """The counts the share paths make, and the BrokerTopicStats they add their share meters to."""

    def __init__(self, topic_stats: BrokerTopicStats | None = None, now_ms: Callable[[], int] = monotonic_ms) -> None:
        self.topic_stats = topic_stats if topic_stats is not None else BrokerTopicStats()
        self.now_ms = now_ms
        self.acknowledgements = [0] * 5  # records, by AcknowledgeType id (0, a gap, is not shown)
        self.partition_load_time_ms = Histogram()
        self.fetch_ratio: dict[str, Histogram] = {}
        self.acquire_time_ms: dict[str, Histogram] = {}
        # AcquisitionLockTimeoutPerSec of each share partition; the collector drops those gone.
        self.lock_timeouts: dict[SharePartitionKey, int] = {}
        self.share_group_rebalances = 0
        self.share_group_rebalance_rate = WindowedRate(now_ms())

    # -- SharePartitionManager ------------------------------------------------------------------------

    def partitions_acquired(self, group_id: str, ready: int, requested: int, started_s: float) -> None:
        """DelayedShareFetch: ``ready`` of the ``requested`` partitions could be read, after
        waiting since ``started_s`` (time.monotonic) for their state to load."""
        if not ready:
            return  # nothing to read: Kafka answers without a DelayedShareFetch
        ratio = self.fetch_ratio.get(group_id)
        if ratio is None:
            ratio = self.fetch_ratio[group_id] = Histogram()
        ratio.update(ready * 100 // requested)
        acquire = self.acquire_time_ms.get(group_id)
        if acquire is None:
            acquire = self.acquire_time_ms[group_id] = Histogram()
        acquire.update((time.monotonic() - started_s) * 1000)

    def share_fetched(self, partitions: Sequence[tuple[TopicIdPartition, str]], results: Mapping[TopicIdPartition, PartitionFetch], params: ShareFetchParams) -> None:
        """TotalShareFetchRequestsPerSec once per topic of a ShareFetch that asks for records (Kafka's
        processShareFetch); FailedShareFetchRequestsPerSec once per topic a partition of failed on."""
        if not partitions or not params.max_records or not params.max_bytes:
            return
        stats = self.topic_stats
        failed = set()
        for tip, topic in partitions:
            result = results.get(tip)
            if result is not None and result.error:
                failed.add(topic)
        for topic in {topic for _, topic in partitions}:
            stats.topic(topic).total_share_fetch_requests += 1
        for topic in failed:
            stats.topic(topic).failed_share_fetch_requests += 1

    def share_acknowledged(self, topics: Mapping[TopicIdPartition, str], errors: Mapping[TopicIdPartition, int]) -> None:
        """The acknowledgements of a request went to the share partition manager: Total...RequestsPerSec
        once per topic, Failed... once per topic a partition of answered an error."""
        stats = self.topic_stats
        for topic in set(topics.values()):
            stats.topic(topic).total_share_acknowledgement_requests += 1
        for topic in {topic for tip, topic in topics.items() if errors.get(tip)}:
            stats.topic(topic).failed_share_acknowledgement_requests += 1

    def records_acknowledged(self, batches: Iterable[ShareAcknowledgementBatch]) -> None:
        """A share partition took these acknowledgements (and persisted them): Kafka's
        recordAcknowledgement, the batch's length for one type, one per offset otherwise."""
        counts = self.acknowledgements
        for batch in batches:
            types = batch.acknowledge_types
            if len(types) == 1:
                if 0 <= types[0] < len(counts):
                    counts[types[0]] += batch.last_offset - batch.first_offset + 1
                continue
            for ack_type in types:
                if 0 <= ack_type < len(counts):
                    counts[ack_type] += 1

    def partition_loaded(self, started_s: float) -> None:
        """A share partition's state was read from the share coordinator, asked at ``started_s``."""
        self.partition_load_time_ms.update((time.monotonic() - started_s) * 1000)

    def locks_expired(self, key: SharePartitionKey, released: Iterable[PersisterStateBatch]) -> None:
        """Records whose acquisition lock timed out (the ranges the expiry changed)."""
        count = sum(b.last_offset - b.first_offset + 1 for b in released)
        if count:
            self.lock_timeouts[key] = self.lock_timeouts.get(key, 0) + count

    # -- the group coordinator ------------------------------------------------------------------------

    def share_group_rebalanced(self) -> None:
        """A ShareGroupHeartbeat bumped its group's epoch (Kafka's ShareGroupRebalances sensor)."""
        self.share_group_rebalances += 1
        self.share_group_rebalance_rate.record(self.now_ms())


class ShareGroupMetricsCollector:
    """``coordinator``: the group coordinator whose loaded shards hold the share groups."""

    def __init__(
        self, metrics: ShareGroupMetrics, manager: SharePartitionManager, sessions: ShareSessionCache, coordinator: GroupCoordinator | None = None
    ) -> None:
        self._metrics = metrics
        self._manager = manager
        self._sessions = sessions
        self._coordinator = coordinator

    def collect(self) -> Iterator[Metric]:
        yield from self._share_group_metrics()
        yield from self._share_partition_metrics()
        sessions = self._sessions
        mbean = "kafka.server:type=ShareSessionCache,name="
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharesessionscount", mbean + "ShareSessionsCount: share sessions in the cache.", value=len(sessions))
        yield GaugeMetricFamily(
            "kafka_server_sharesessioncache_sharepartitionscount", mbean + "SharePartitionsCount: partitions over every share session.", value=sessions.total_partitions()
        )
        if self._coordinator is not None:
            yield from self._group_coordinator_metrics(self._coordinator)

    def _share_group_metrics(self) -> Iterator[Metric]:
        metrics = self._metrics
        prefix, mbean = "kafka_server_sharegroupmetrics_", "kafka.server:type=ShareGroupMetrics,name="
        acks = CounterMetricFamily(prefix + "recordacknowledgements", mbean + "RecordAcknowledgementsPerSec: records acknowledged, by type.", labels=["ackType"])
        for ack_type, name in ACK_TYPES:
            acks.add_metric([name], metrics.acknowledgements[ack_type])
        yield acks
        load = Metric(prefix + "partitionloadtimems", mbean + "PartitionLoadTimeMs: ms to load a share partition's state from the share coordinator.", "summary")
        add_summary(load, {}, metrics.partition_load_time_ms)
        yield load
        for name, doc, by_group in (
            ("RequestTopicPartitionsFetchRatio", "percent of a ShareFetch's partitions that could be read", metrics.fetch_ratio),
            ("TopicPartitionsAcquireTimeMs", "ms until a ShareFetch's partitions were ready to be read", metrics.acquire_time_ms),
        ):
            family = Metric(prefix + name.lower(), f"{mbean}{name}: {doc}, per group.", "summary")
            for group, histogram in sorted(by_group.items()):
                add_summary(family, {"group": group}, histogram)
            yield family

    def _share_partition_metrics(self) -> Iterator[Metric]:
        prefix, mbean = "kafka_server_sharepartitionmetrics_", "kafka.server:type=SharePartitionMetrics,name="
        labels = ["group", "topic", "partition"]
        timeouts = CounterMetricFamily(prefix + "acquisitionlocktimeout", mbean + "AcquisitionLockTimeoutPerSec: records whose acquisition lock timed out.", labels=labels)
        messages = GaugeMetricFamily(prefix + "inflightmessagecount", mbean + "InFlightMessageCount: records in flight (start offset to end offset).", labels=labels)
        batches = GaugeMetricFamily(prefix + "inflightbatchcount", mbean + "InFlightBatchCount: batches in flight.", labels=labels)
        lock_timeouts = self._metrics.lock_timeouts
        held = set()
        for key, topic, share_partition in sorted(self._manager.share_partitions(), key=lambda p: (p[0].group_id, p[1], p[0].partition)):
            held.add(key)
            values = [key.group_id, topic, str(key.partition)]
            timeouts.add_metric(values, lock_timeouts.get(key, 0))
            messages.add_metric(values, share_partition.in_flight_record_count())
            batches.add_metric(values, sum(1 for _ in share_partition.in_flight_batches()))
        for key in [k for k in lock_timeouts if k not in held]:
            del lock_timeouts[key]
        yield timeouts
        yield messages
        yield batches

    def _group_coordinator_metrics(self, coordinator: GroupCoordinator) -> Iterator[Metric]:
        prefix, mbean = "kafka_server_group_coordinator_metrics_", "kafka.server:type=group-coordinator-metrics"
        counts = dict.fromkeys(SHARE_GROUP_STATES, 0)
        for shard in list(coordinator.shards.values()):
            for group in shard.share_groups.groups.values():
                counts[group.state.value] = counts.get(group.state.value, 0) + 1
        by_state = GaugeMetricFamily(prefix + "share_group_count", f"{mbean},state=S share-group-count: share groups in the state.", labels=["state"])
        for state, count in counts.items():
            by_state.add_metric([state], count)
        yield by_state
        groups = GaugeMetricFamily(prefix + "group_count", f"{mbean},protocol=P group-count: groups of the protocol (share groups only here).", labels=["protocol"])
        groups.add_metric(["share"], sum(counts.values()))
        yield groups
        metrics = self._metrics
        rebalances = Metric(prefix + "share_group_rebalance_count", f"{mbean} share-group-rebalance-count: share group rebalances.", "unknown")
        rebalances.add_sample(rebalances.name, {}, float(metrics.share_group_rebalances))
        yield rebalances
        yield GaugeMetricFamily(
            prefix + "share_group_rebalance_rate",
            f"{mbean} share-group-rebalance-rate: share group rebalances per second, over the last 30 to 60 s.",
            value=metrics.share_group_rebalance_rate.rate(metrics.now_ms()),
        )


__all__ = ["ACK_TYPES", "SHARE_GROUP_STATES", "ShareGroupMetrics", "ShareGroupMetricsCollector"]
