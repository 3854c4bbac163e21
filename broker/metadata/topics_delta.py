"""TopicsDelta and TopicDelta: the topic and partition changes between two images.

Named and shaped as Kafka's: each changed topic has a TopicDelta holding only the partitions
that records touched, so applying a delta copies the partition map of the changed topics
alone and shares every other TopicImage and PartitionRegistration with the previous image.
``local_changes(node_id)`` tells one node what to do about its own replicas: lead, follow,
or delete.
"""

from __future__ import annotations

import dataclasses

import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from broker.metadata.metadata_image import EMPTY_MAP, MetadataImage, MetadataImageError, PartitionRegistration, TopicImage
from broker.metadata.metadata_records import ClearElrRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic_id: uuid.UUID
    registration: PartitionRegistration


@dataclass(slots=True)
class LocalReplicaChanges:
    """Kafka's LocalReplicaChanges. ``deletes`` maps each replica to drop to the id of the topic
    it belonged to, so a topic deleted and re-created under the same name in one delta is told
    apart from its successor. ``leaders`` and ``followers`` hold the partitions whose
    registration changed and which this node now leads or follows; ``elected_leaders`` is the
    part of ``leaders`` with a new leader epoch."""

    deletes: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)
    leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    followers: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    elected_leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)

    def of_topic(self, name: str) -> LocalReplicaChanges:
        """The changes of one topic's partitions (the coordinators look at their internal topic only)."""
        return LocalReplicaChanges(
            {tp: v for tp, v in self.deletes.items() if tp[0] == name},
            {tp: v for tp, v in self.leaders.items() if tp[0] == name},
            {tp: v for tp, v in self.followers.items() if tp[0] == name},
            {tp: v for tp, v in self.elected_leaders.items() if tp[0] == name},
        )


class TopicDelta:
    __slots__ = ("image", "partition_changes")

    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def topic_id(self) -> uuid.UUID:
        return self.image.topic_id

    def partition(self, index: int) -> PartitionRegistration | None:
        """The partition as the records replayed so far leave it."""
        reg = self.partition_changes.get(index)
        return reg if reg is not None else self.image.partitions.get(index)

    @property
    def new_partitions(self) -> list[int]:
        """Partitions that the previous image of this topic did not have."""
        return [i for i in self.partition_changes if i not in self.image.partitions]

    def replay_partition(self, record: PartitionRecord) -> None:
        self.partition_changes[record.partition_id] = PartitionRegistration.from_record(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        current = self.partition(record.partition_id)
        if current is None:
            raise MetadataImageError(f"PartitionChangeRecord for unknown partition {self.name}-{record.partition_id}")
        self.partition_changes[record.partition_id] = current.merge(record)

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.image
        partitions = self.image.partitions.copy()
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.topic_id, MappingProxyType(partitions))

    def local_changes(self, node_id: int, into: LocalReplicaChanges) -> None:
        previous = self.image.partitions
        name, topic_id = self.image.name, self.image.topic_id
        for index, reg in self.partition_changes.items():
            prev = previous.get(index)
            if node_id not in reg.replicas:
                if prev is not None and node_id in prev.replicas:
                    into.deletes[(name, index)] = topic_id
                continue
            if prev == reg:
                continue
            info = PartitionInfo(topic_id, reg)
            if reg.leader == node_id:
                into.leaders[(name, index)] = info
                if prev is None or prev.leader_epoch != reg.leader_epoch:
                    into.elected_leaders[(name, index)] = info
            else:
                into.followers[(name, index)] = info


class TopicsDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        self.deleted_topic_ids: set[uuid.UUID] = set()  # topics of the previous image that are gone
        self.created_topics: dict[str, uuid.UUID] = {}  # name -> id of the topics this delta creates
        self._local: tuple[int, LocalReplicaChanges] | None = None

    # -- replay --------------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord) -> None:
        self._local = None
        if isinstance(record, PartitionRecord):
            self._topic_delta(record.topic_id, record).replay_partition(record)
        elif isinstance(record, PartitionChangeRecord):
            self._topic_delta(record.topic_id, record).replay_partition_change(record)
        elif isinstance(record, TopicRecord):
            self._replay_topic(record)
        elif isinstance(record, RemoveTopicRecord):
            self.remove_topic(record.topic_id, record)
        elif isinstance(record, ClearElrRecord):
            self._clear_elr(record)
        else:
            raise MetadataImageError(f"{type(record).__name__} is not a topic record")

    def _clear_elr(self, record: ClearElrRecord) -> None:
        """Kafka's ClearElrRecord: every partition of the topic (of every topic, for "") loses its
        eligible leader replicas and last known ELR, as a PartitionChangeRecord setting both empty would."""
        if record.topic_name:
            topic_id = self.topic_id_of(record.topic_name)
            if topic_id is None:
                raise MetadataImageError(f"ClearElrRecord for unknown topic {record.topic_name}")
            topic_ids = [topic_id]
        else:
            names = set(self.image.topics) | set(self.created_topics)
            topic_ids = [i for i in (self.topic_id_of(n) for n in sorted(names)) if i is not None]
        for topic_id in topic_ids:
            delta = self._topic_delta(topic_id, record)
            for index in sorted(set(delta.image.partitions) | set(delta.partition_changes)):
                partition = delta.partition(index)
                if partition is not None and (partition.elr or partition.last_known_elr):
                    delta.partition_changes[index] = dataclasses.replace(partition, elr=(), last_known_elr=())

    def _replay_topic(self, record: TopicRecord) -> None:
        replaced = self.topic_id_of(record.name)
        if replaced is not None:
            # A name given a new id: the old topic is gone, as if removed first.
            self.remove_topic(replaced, record)
        self.changed_topics[record.topic_id] = TopicDelta(TopicImage(record.name, record.topic_id, EMPTY_MAP))
        self.created_topics[record.name] = record.topic_id

    def remove_topic(self, topic_id: uuid.UUID, record: MetadataRecord) -> str:
        """Drop a topic; returns its name. Raises before any change if the topic does not exist."""
        name = self.topic(topic_id, record).name
        self._local = None
        self.changed_topics.pop(topic_id, None)
        if self.created_topics.get(name) == topic_id:
            del self.created_topics[name]
        if topic_id in self.image.topics_by_id:
            self.deleted_topic_ids.add(topic_id)
        return name

    def _topic_delta(self, topic_id: uuid.UUID, record: MetadataRecord) -> TopicDelta:
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            delta = self.changed_topics[topic_id] = TopicDelta(self.topic(topic_id, record))
        return delta

    # -- the state as replayed so far -----------------------------------------------------------------

    def topic(self, topic_id: uuid.UUID, record: MetadataRecord | None = None) -> TopicImage:
        """The topic's previous image, or the empty one it was created with; MetadataImageError if it does not exist."""
        delta = self.changed_topics.get(topic_id)
        if delta is not None:
            return delta.image
        topic = None if topic_id in self.deleted_topic_ids else self.image.topics_by_id.get(topic_id)
        if topic is None:
            what = type(record).__name__ if record is not None else "lookup"
            raise MetadataImageError(f"{what} for unknown topic id {topic_id}")
        return topic

    def topic_id_of(self, name: str) -> uuid.UUID | None:
        created = self.created_topics.get(name)
        if created is not None:
            return created
        topic = self.image.topics.get(name)
        if topic is None or topic.topic_id in self.deleted_topic_ids:
            return None
        return topic.topic_id

    # -- what changed --------------------------------------------------------------------------------

    @property
    def deleted_topics(self) -> list[TopicImage]:
        return [self.image.topics_by_id[i] for i in self.deleted_topic_ids]

    def changed_topic(self, name: str) -> TopicDelta | None:
        topic_id = self.topic_id_of(name)
        return None if topic_id is None else self.changed_topics.get(topic_id)

    @property
    def topology_changed(self) -> bool:
        """A topic appeared or vanished, or a topic got partitions (what consumer-protocol assignments depend on)."""
        return bool(self.created_topics or self.deleted_topic_ids or any(d.new_partitions for d in self.changed_topics.values()))

    def local_changes(self, node_id: int) -> LocalReplicaChanges:
        if self._local is not None and self._local[0] == node_id:
            return self._local[1]
        changes = LocalReplicaChanges()
        for topic_id in self.deleted_topic_ids:
            topic = self.image.topics_by_id[topic_id]
            for index, reg in topic.partitions.items():
                if node_id in reg.replicas:
                    changes.deletes[(topic.name, index)] = topic_id
        for delta in self.changed_topics.values():
            delta.local_changes(node_id, changes)
        self._local = (node_id, changes)
        return changes

    # -- the next image ------------------------------------------------------------------------------

    def apply(self) -> tuple[Mapping[str, TopicImage], Mapping[uuid.UUID, TopicImage]]:
        """(topics by name, topics by id) of the next image."""
        by_name = self.image.topics.copy()
        by_id = self.image.topics_by_id.copy()
        for topic_id in self.deleted_topic_ids:
            gone = by_id.pop(topic_id)
            if by_name.get(gone.name) is gone:
                del by_name[gone.name]
        for topic_id, delta in self.changed_topics.items():
            topic = delta.apply()
            by_id[topic_id] = topic
            by_name[topic.name] = topic
        return MappingProxyType(by_name), MappingProxyType(by_id)


__all__ = ["LocalReplicaChanges", "PartitionInfo", "TopicDelta", "TopicPartition", "TopicsDelta"]
