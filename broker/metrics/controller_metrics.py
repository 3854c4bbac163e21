"""kafka.controller KafkaController: the cluster as this controller's metadata image shows it (every
controller reports these in KRaft, from the image it has applied; only the active one counts 1 in
ActiveControllerCount). Read when Prometheus scrapes.

``kafka_controller_kafkacontroller_activecontrollercount``, ``..._offlinepartitionscount``,
``..._fencedbrokercount``, ``..._activebrokercount``, ``..._globaltopiccount``,
``..._globalpartitioncount``, ``..._preferredreplicaimbalancecount``. From the QuorumController:
``..._lastappliedrecordoffset``, ``..._lastappliedrecordtimestamp``, ``..._lastappliedrecordlagms``,
``..._lastcommittedrecordoffset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.controller.quorum_controller import QuorumController
    from broker.metadata.metadata_image import MetadataImage

NO_LEADER = -1


class ControllerCounts:
    __slots__ = ("topics", "partitions", "offline", "imbalanced", "fenced", "active")

    def __init__(self) -> None:
        self.topics = self.partitions = self.offline = self.imbalanced = self.fenced = self.active = 0


def controller_counts(image: MetadataImage) -> ControllerCounts:
    counts = ControllerCounts()
    for topic in image.topics.values():
        counts.topics += 1
        for registration in topic.partitions.values():
            counts.partitions += 1
            if registration.leader == NO_LEADER:
                counts.offline += 1
            elif registration.replicas and registration.leader != registration.replicas[0]:
                counts.imbalanced += 1
    for broker in image.brokers.values():
        if broker.fenced:
            counts.fenced += 1
        else:
            counts.active += 1
    return counts


class ControllerMetricsCollector:
    def __init__(self, image: Callable[[], MetadataImage], is_active: Callable[[], bool]) -> None:
        self._image = image
        self._is_active = is_active

    def collect(self) -> Iterator[Metric]:
        counts = controller_counts(self._image())
        prefix = "kafka_controller_kafkacontroller_"
        for name, kafka_name, value, doc in (
            ("activecontrollercount", "ActiveControllerCount", 1 if self._is_active() else 0, "1 on the active controller, else 0."),
            ("offlinepartitionscount", "OfflinePartitionsCount", counts.offline, "Partitions without a leader."),
            ("preferredreplicaimbalancecount", "PreferredReplicaImbalanceCount", counts.imbalanced, "Partitions led by another replica than their first."),
            ("fencedbrokercount", "FencedBrokerCount", counts.fenced, "Registered brokers that are fenced."),
            ("activebrokercount", "ActiveBrokerCount", counts.active, "Registered brokers that are not fenced."),
            ("globaltopiccount", "GlobalTopicCount", counts.topics, "Topics in the cluster."),
            ("globalpartitioncount", "GlobalPartitionCount", counts.partitions, "Partitions in the cluster."),
        ):
            yield GaugeMetricFamily(prefix + name, f"kafka.controller:type=KafkaController,name={kafka_name}: {doc}", value=value)


class QuorumControllerMetricsCollector:
    """Kafka's QuorumControllerMetrics record gauges: LastAppliedRecordLagMs is now minus the
    last applied record's timestamp, so a controller that stops following shows it growing."""

    def __init__(self, controller: Callable[[], QuorumController], now_ms: Callable[[], int]) -> None:
        self._controller = controller
        self._now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        controller = self._controller()
        timestamp = controller.last_applied_record_timestamp
        prefix = "kafka_controller_kafkacontroller_"
        for name, kafka_name, value, doc in (
            ("lastappliedrecordoffset", "LastAppliedRecordOffset", controller.last_applied_record_offset, "The offset of the last record applied (appended, on the active controller)."),
            ("lastcommittedrecordoffset", "LastCommittedRecordOffset", controller.last_committed_record_offset, "The offset of the last record committed."),
            ("lastappliedrecordtimestamp", "LastAppliedRecordTimestamp", timestamp, "The append time (ms) of the last record applied."),
            ("lastappliedrecordlagms", "LastAppliedRecordLagMs", self._now_ms() - timestamp, "Now minus the append time of the last record applied (ms)."),
        ):
            yield GaugeMetricFamily(prefix + name, f"kafka.controller:type=KafkaController,name={kafka_name}: {doc}", value=value)


__all__ = ["ControllerCounts", "ControllerMetricsCollector", "QuorumControllerMetricsCollector", "controller_counts"]
