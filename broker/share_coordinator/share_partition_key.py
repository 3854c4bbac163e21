"""Which share partition a state belongs to, and which ``__share_group_state`` partition keeps it:
Kafka's ``SharePartitionKey`` and ``ShareCoordinatorService.partitionFor``.

Kafka hashes the string ``"<group id>:<topic id>:<partition>"`` (``asCoordinatorKey``; the topic
id as Kafka prints a Uuid, URL-safe base64 without padding) with Java's String.hashCode, takes
``Utils.abs`` and the remainder by ``share.coordinator.state.topic.num.partitions``.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

from broker.coordinator import coordinator_partitioner


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def as_coordinator_key(self) -> str:
        return f"{self.group_id}:{kafka_uuid_string(self.topic_id)}:{self.partition}"


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def partition_for(key: SharePartitionKey, num_partitions: int) -> int:
    """The ``__share_group_state`` partition whose coordinator keeps ``key``'s state."""
    return coordinator_partitioner.partition_for(key.as_coordinator_key(), num_partitions)
