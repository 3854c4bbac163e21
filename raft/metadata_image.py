"""MetadataImage: the cluster state built by replaying committed metadata records."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from raft.metadata_records import (
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass(slots=True)
class MetadataImage:
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    brokers: dict[int, RegisterBrokerRecord] = field(default_factory=dict)
    provenance: int = -1

    def apply(self, record: MetadataRecord, offset: int = -1) -> None:
        if isinstance(record, TopicRecord):
            topic = TopicImage(record.name, record.topic_id)
            self.topics[record.name] = topic
            self.topics_by_id[record.topic_id] = topic
        elif isinstance(record, PartitionRecord):
            owner = self.topics_by_id[record.topic_id]
            owner.partitions[record.partition_id] = PartitionRegistration(
                tuple(record.replicas), tuple(record.isr), record.leader, record.leader_epoch, record.partition_epoch
            )
        elif isinstance(record, ConfigRecord):
            key = (record.resource_type, record.resource_name)
            if record.value is None:
                entries = self.configs.get(key, {})
                entries.pop(record.name, None)
                if not entries:
                    self.configs.pop(key, None)
            else:
                self.configs.setdefault(key, {})[record.name] = record.value
        elif isinstance(record, RemoveTopicRecord):
            removed = self.topics_by_id.pop(record.topic_id, None)
            if removed is not None:
                self.topics.pop(removed.name, None)
                self.configs.pop((TOPIC_RESOURCE, removed.name), None)
        elif isinstance(record, FeatureLevelRecord):
            self.features[record.name] = record.feature_level
        elif isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = record
        if offset >= 0:
            self.provenance = offset

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and partition in t.partitions

    def topic_config(self, name: str) -> dict[str, str]:
        return dict(self.configs.get((TOPIC_RESOURCE, name), {}))
