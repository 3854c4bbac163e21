"""PendingReplicas: replicas a metadata delta gave this node whose logs are still to be created.

Creating a log is file-system work (a folder, a segment file, a third of a millisecond on an
idle machine); a delta of thousands of new partitions (CreateTopics takes up to 10,000) created
in one go held the event loop, and every client of the node, for seconds. The ReplicaManager
creates a slice at once and the rest a slice at a time, yielding to the loop in between (Kafka
creates logs off its request threads). Until its log exists a replica is not hosted, so nothing
is served from it: requests for it are answered NOT_LEADER_OR_FOLLOWER, as Kafka answers them
until its broker has applied the delta.

Later deltas act on what is still pending: the last registration and role win, and a replica
dropped (its topic deleted, or this node no longer among its replicas) is forgotten, unless it
already belongs to a topic of the same name created since.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from itertools import islice

from broker.metadata.topics_delta import PartitionInfo, TopicPartition


@dataclass(frozen=True, slots=True)
class PendingReplica:
    key: TopicPartition
    info: PartitionInfo
    leader: bool


class PendingReplicas:
    """In the order they were added; adding one again keeps its place and takes the new role."""

    def __init__(self) -> None:
        self._entries: dict[TopicPartition, PendingReplica] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def add(self, key: TopicPartition, info: PartitionInfo, leader: bool) -> None:
        self._entries[key] = PendingReplica(key, info, leader)

    def discard(self, key: TopicPartition, topic_id: uuid.UUID) -> bool:
        """Forget the replica if it still belongs to the topic ``topic_id``; whether it did."""
        entry = self._entries.get(key)
        if entry is None or entry.info.topic_id != topic_id:
            return False
        del self._entries[key]
        return True

    def take(self, count: int) -> list[PendingReplica]:
        """The ``count`` oldest, no longer pending."""
        return [self._entries.pop(key) for key in list(islice(self._entries, count))]


__all__ = ["PendingReplica", "PendingReplicas"]
