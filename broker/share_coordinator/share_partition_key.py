"""Which share partition a state belongs to, and which ``__share_group_state`` partition keeps it:
Kafka's ``SharePartitionKey`` and ``ShareCoordinatorService.partitionFor``.

Kafka hashes the string ``"<group id>:<topic id>:<partition>"`` (``asCoordinatorKey``; the topic
id as Kafka prints a Uuid, URL-safe base64 without padding) with Java's String.hashCode, takes
``Utils.abs`` and the remainder by ``share.coordinator.state.topic.num.partitions``.
"""

from __future__ import annotations

import base64
import binascii
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


def parse_share_partition_key(key: str) -> SharePartitionKey | None:
    """Kafka's ``SharePartitionKey.getInstance``: the last two of the colon-separated parts are the
    topic id and the partition, the rest (colons and all) the group id; None where Kafka throws."""
    # Java's String.split drops trailing empty strings.
    parts = key.split(":")
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) < 3:
        return None
    group_id = ":".join(parts[:-2])
    if not group_id.strip():
        return None
    topic_id = parse_kafka_uuid(parts[-2])
    try:
        partition = int(parts[-1])
    except ValueError:
        return None
    if topic_id is None or not -(2**31) <= partition < 2**31:
        return None
    return SharePartitionKey(group_id, topic_id, partition)


def parse_kafka_uuid(text: str) -> uuid.UUID | None:
    """Kafka's ``Uuid.fromString``: URL-safe base64 of 16 bytes, None where Kafka throws."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def partition_for(key: SharePartitionKey, num_partitions: int) -> int:
    """The ``__share_group_state`` partition whose coordinator keeps ``key``'s state."""
    return coordinator_partitioner.partition_for(key.as_coordinator_key(), num_partitions)
