"""MetadataImage: the cluster state built by replaying committed metadata records.

Kafka builds an immutable image per batch of deltas; here one mutable image is updated
in place, record by record, on the event loop, so readers (the Metadata request, the
replica manager) see plain dicts. Records between BeginTransactionRecord and
EndTransactionRecord are held back and applied together, or dropped on
AbortTransactionRecord, as Kafka's metadata loader does.

A record that contradicts the image (a partition of an unknown topic, a fence of an
unknown broker epoch...) raises MetadataImageError before anything changes: the log and
the image have diverged, which Kafka also treats as fatal.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field

from broker.metadata.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

NO_LEADER = -1
NO_LEADER_CHANGE = -2

# Kafka's DirectoryId constants.
MIGRATING_DIR = uuid.UUID(int=0)
UNASSIGNED_DIR = uuid.UUID(int=1)


class MetadataImageError(RuntimeError):
    """A record that cannot apply to the current image."""


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        replicas = tuple(record.replicas)
        return cls(
            replicas=replicas,
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
            leader_recovery_state=record.leader_recovery_state,
            directories=_directories(record.directories, len(replicas)),
            elr=tuple(record.eligible_leader_replicas or ()),
            last_known_elr=tuple(record.last_known_elr or ()),
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's PartitionRegistration.merge: a new leader bumps the leader epoch, any change the partition epoch."""
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        if change.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if change.isr is None else tuple(change.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas if change.removing_replicas is None else tuple(change.removing_replicas),
            adding_replicas=self.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas),
            leader_recovery_state=self.leader_recovery_state if change.leader_recovery_state == -1 else change.leader_recovery_state,
            directories=_directories(change.directories or self.directories, len(replicas)),
            elr=self.elr if change.eligible_leader_replicas is None else tuple(change.eligible_leader_replicas),
            last_known_elr=self.last_known_elr if change.last_known_elr is None else tuple(change.last_known_elr),
        )


def _directories(directories: tuple[uuid.UUID, ...] | None, replica_count: int) -> tuple[uuid.UUID, ...]:
    # Records from before directory assignment (KIP-858) carry none: Kafka reads that as
    # "every replica is in the directory it was in", MIGRATING.
    if not directories:
        return (MIGRATING_DIR,) * replica_count
    return tuple(directories)


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[BrokerEndpoint, ...]
    supported_features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    directories: tuple[uuid.UUID, ...]

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            broker_id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(record.end_points),
            supported_features=tuple(record.features),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            directories=tuple(record.log_dirs),
        )


@dataclass(slots=True)
class MetadataImage:
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    next_producer_id: int = 0  # the first producer id of the next block to hand out
    provenance: int = -1  # offset of the last record applied
    _transaction: list[MetadataRecord] | None = field(default=None, repr=False, compare=False)

    def apply(self, record: MetadataRecord, offset: int = -1) -> None:
        if isinstance(record, BeginTransactionRecord):
            if self._transaction is not None:
                raise MetadataImageError("BeginTransactionRecord inside a metadata transaction")
            self._transaction = []
        elif isinstance(record, (EndTransactionRecord, AbortTransactionRecord)):
            pending = self._transaction
            if pending is None:
                raise MetadataImageError(f"{type(record).__name__} without a BeginTransactionRecord")
            self._transaction = None
            if isinstance(record, EndTransactionRecord):
                for held in pending:
                    self._apply(held)
        elif self._transaction is not None:
            self._transaction.append(record)
            return
        else:
            self._apply(record)
        if offset >= 0:
            self.provenance = offset

    @property
    def in_transaction(self) -> bool:
        return self._transaction is not None

    def _apply(self, record: MetadataRecord) -> None:
        if isinstance(record, PartitionRecord):
            topic = self._topic(record.topic_id, record)
            topic.partitions[record.partition_id] = PartitionRegistration.from_record(record)
        elif isinstance(record, PartitionChangeRecord):
            topic = self._topic(record.topic_id, record)
            current = topic.partitions.get(record.partition_id)
            if current is None:
                raise MetadataImageError(f"PartitionChangeRecord for unknown partition {topic.name}-{record.partition_id}")
            topic.partitions[record.partition_id] = current.merge(record)
        elif isinstance(record, TopicRecord):
            replaced = self.topics.get(record.name)
            if replaced is not None:
                self.topics_by_id.pop(replaced.topic_id, None)
            topic = TopicImage(record.name, record.topic_id)
            self.topics[record.name] = topic
            self.topics_by_id[record.topic_id] = topic
        elif isinstance(record, ConfigRecord):
            key = (record.resource_type, record.resource_name)
            if record.value is not None:
                self.configs.setdefault(key, {})[record.name] = record.value
            else:
                entries = self.configs.get(key)
                if entries is not None:
                    entries.pop(record.name, None)
                    if not entries:
                        del self.configs[key]
        elif isinstance(record, RemoveTopicRecord):
            removed = self._topic(record.topic_id, record)
            del self.topics_by_id[removed.topic_id]
            del self.topics[removed.name]
            self.configs.pop((TOPIC_RESOURCE, removed.name), None)
        elif isinstance(record, FeatureLevelRecord):
            if record.feature_level == 0:
                self.features.pop(record.name, None)
            else:
                self.features[record.name] = record.feature_level
        elif isinstance(record, ProducerIdsRecord):
            self.next_producer_id = record.next_producer_id
        elif isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = BrokerRegistration.from_record(record)
        elif isinstance(record, UnregisterBrokerRecord):
            self._broker(record.broker_id, record.broker_epoch, record)
            del self.brokers[record.broker_id]
        elif isinstance(record, (FenceBrokerRecord, UnfenceBrokerRecord)):
            broker = self._broker(record.id, record.epoch, record)
            self.brokers[record.id] = dataclasses.replace(broker, fenced=isinstance(record, FenceBrokerRecord))
        elif isinstance(record, BrokerRegistrationChangeRecord):
            self._change_broker(record)
        elif not isinstance(record, NoOpRecord):
            raise MetadataImageError(f"no image change defined for {type(record).__name__}")

    def _topic(self, topic_id: uuid.UUID, record: MetadataRecord) -> TopicImage:
        topic = self.topics_by_id.get(topic_id)
        if topic is None:
            raise MetadataImageError(f"{type(record).__name__} for unknown topic id {topic_id}")
        return topic

    def _broker(self, broker_id: int, epoch: int, record: MetadataRecord) -> BrokerRegistration:
        broker = self.brokers.get(broker_id)
        if broker is None or broker.epoch != epoch:
            raise MetadataImageError(f"{type(record).__name__} for broker {broker_id} epoch {epoch}, which is not registered")
        return broker

    def _change_broker(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, record)
        if record.fenced not in (-1, 0, 1) or record.in_controlled_shutdown not in (0, 1):
            raise MetadataImageError(f"invalid BrokerRegistrationChangeRecord {record}")
        self.brokers[record.broker_id] = dataclasses.replace(
            broker,
            fenced=broker.fenced if record.fenced == 0 else record.fenced == 1,
            in_controlled_shutdown=broker.in_controlled_shutdown or record.in_controlled_shutdown == 1,
            directories=tuple(record.log_dirs) or broker.directories,
        )

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and partition in t.partitions

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's overrides (a copy); the broker defaults fill the rest."""
        return dict(self.configs.get((TOPIC_RESOURCE, name), ()))


__all__ = [
    "BROKER_RESOURCE",
    "BrokerRegistration",
    "MIGRATING_DIR",
    "MetadataImage",
    "MetadataImageError",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "PartitionRegistration",
    "TOPIC_RESOURCE",
    "TopicImage",
    "UNASSIGNED_DIR",
]
