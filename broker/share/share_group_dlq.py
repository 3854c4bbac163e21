"""A share group's dead-letter queue (KIP-1191), sans-IO: which archived records go to it, whether
the group's DLQ topic may take them, and the records written there. Kafka 4.4's
``org.apache.kafka.server.share.dlq`` (ShareGroupDLQRecordParameter, ShareGroupDLQStateManager's
ProduceRequestHandler) and SharePartition's DLQ hand-off.

With share.version 2 and the group config ``errors.deadletterqueue.topic.name`` set, a record
archived because a member REJECTed it (cause "Offset rejected by client.") or because it went
back to AVAILABLE at the delivery count limit (a RELEASE, a lock timeout or a member leaving:
"Offset delivery count exceeded the threshold.") is written to the DLQ topic. GAP acknowledgements
and records archived for other reasons (aborted transactions, the log start moving) are not.

Such a record is not ARCHIVED at once, as Kafka 4.4 does it: it goes ARCHIVING (state 3), persisted
as that to the share coordinator, and only once its DLQ write landed, or was given up on, ARCHIVED
(persisted again). A share partition loaded with ARCHIVING records (its leader failed in between)
writes them to the DLQ again (``DlqBatch``; the cause from the delivery count: at the limit
DELIVERY_COUNT_EXCEEDED, else CLIENT_REJECT), so the DLQ copy is not lost; it may be written twice
if the old leader's write landed but its ARCHIVED did not.

Each archived offset becomes one record on partition ``source partition % DLQ partitions``,
timestamped when written, uncompressed, with the headers ``__dlq.errors.topic``, ``.partition``,
``.offset``, ``.group``, ``.delivery.count`` and ``.message`` (UTF-8 strings); its key and value are
the original record's with ``errors.deadletterqueue.copy.record.enable``, absent otherwise. The
original's headers are never copied.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from protocol.records import Header, build_batch

# ShareGroupDLQStateManager.ProduceRequestHandler's header names.
HEADER_DLQ_ERRORS_TOPIC = "__dlq.errors.topic"
HEADER_DLQ_ERRORS_PARTITION = "__dlq.errors.partition"
HEADER_DLQ_ERRORS_OFFSET = "__dlq.errors.offset"
HEADER_DLQ_ERRORS_GROUP = "__dlq.errors.group"
HEADER_DLQ_ERRORS_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_DLQ_ERRORS_MESSAGE = "__dlq.errors.message"

# The topic config a DLQ topic must set to true (TopicConfig.ERRORS_DEADLETTERQUEUE_GROUP_ENABLE_CONFIG).
DLQ_GROUP_ENABLE_CONFIG = "errors.deadletterqueue.group.enable"
# The broker configs (GroupCoordinatorConfig) and their defaults.
DLQ_TOPIC_NAME_PREFIX_DEFAULT = "dlq."
# The configs an auto-created DLQ topic gets (ProduceRequestHandler.createTopicBuilder).
AUTO_CREATED_TOPIC_CONFIGS: Mapping[str, str] = {DLQ_GROUP_ENABLE_CONFIG: "true", "message.timestamp.type": "CreateTime"}
# A v2 batch with no records (DefaultRecordBatch.RECORD_BATCH_OVERHEAD): the size a DLQ batch starts at.
RECORD_BATCH_OVERHEAD = 61


class DLQCause(enum.Enum):
    """ShareGroupDLQManager.CLIENT_REJECT and DELIVERY_COUNT_EXCEEDED: the ``__dlq.errors.message``."""

    CLIENT_REJECT = "Offset rejected by client."
    DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."


@dataclass(frozen=True, slots=True)
class ShareGroupDLQRecordParameter:
    """Offsets ``first_offset..last_offset`` of one share partition to write to the group's DLQ."""

    group_id: str
    topic_id: uuid.UUID
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    delivery_count: int
    cause: DLQCause


@dataclass(frozen=True, slots=True)
class DlqBatch:
    """SharePartition.DlqBatch: offsets ``first_offset..last_offset`` of a share partition held
    ARCHIVING until their dead-letter write lands."""

    first_offset: int
    last_offset: int
    delivery_count: int
    cause: DLQCause


def for_archiving(
    group_id: str, topic_id: uuid.UUID, topic: str, partition: int, batches: Iterable[DlqBatch]
) -> list[ShareGroupDLQRecordParameter]:
    """The DLQ writes of a share partition's ARCHIVING batches."""
    return [
        ShareGroupDLQRecordParameter(group_id, topic_id, topic, partition, b.first_offset, b.last_offset, b.delivery_count, b.cause)
        for b in batches
    ]


def validate_dlq_topic(
    group_id: str, topic: str | None, prefix: str | None, exists: bool, enabled_on_topic: bool, auto_create: bool
) -> str | None:
    """ProduceRequestHandler.validateDlqTopic: why the group's DLQ topic cannot take records (its
    message), or None. ``prefix`` is errors.deadletterqueue.topic.name.prefix (empty: any name);
    an existing topic must set errors.deadletterqueue.group.enable, a missing one is created only
    with errors.deadletterqueue.auto.create.topics.enable."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if topic.startswith("__"):
        return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {topic}."
    if exists and not enabled_on_topic:
        return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {topic}."
    if not exists and not auto_create:
        return f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, topic: {topic}."
    if prefix and not topic.startswith(prefix):
        return f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group_id}, topic: {topic}, prefix: {prefix}."
    return None


def dlq_partition(source_partition: int, num_partitions: int) -> int:
    """The DLQ partition a share partition's records go to."""
    return source_partition % num_partitions


def dlq_headers(param: ShareGroupDLQRecordParameter, offset: int) -> tuple[Header, ...]:
    return (
        (HEADER_DLQ_ERRORS_TOPIC, param.topic.encode()),
        (HEADER_DLQ_ERRORS_PARTITION, str(param.partition).encode()),
        (HEADER_DLQ_ERRORS_OFFSET, str(offset).encode()),
        (HEADER_DLQ_ERRORS_GROUP, param.group_id.encode()),
        (HEADER_DLQ_ERRORS_DELIVERY_COUNT, str(param.delivery_count).encode()),
        (HEADER_DLQ_ERRORS_MESSAGE, param.cause.value.encode()),
    )


def dlq_batches(
    param: ShareGroupDLQRecordParameter,
    now_ms: int,
    max_message_bytes: int,
    originals: Mapping[int, tuple[bytes | None, bytes | None]] | None = None,
) -> list[bytes]:
    """The DLQ records of ``param``, in offset order, as uncompressed v2 batches each within the
    DLQ topic's ``max_message_bytes`` (a record larger than that goes alone). ``originals`` maps
    an offset to the original (key, value) when the group copies records; offsets it lacks (the
    log no longer holds them) get headers only."""
    batches: list[bytes] = []
    pending: list[tuple[bytes | None, bytes | None, tuple[Header, ...], int]] = []
    size = RECORD_BATCH_OVERHEAD
    for offset in range(param.first_offset, param.last_offset + 1):
        key, value = originals.get(offset, (None, None)) if originals is not None else (None, None)
        headers = dlq_headers(param, offset)
        record_size = _record_size_upper_bound(key, value, headers)
        if pending and size + record_size > max_message_bytes:
            batches.append(build_batch(pending))
            pending, size = [], RECORD_BATCH_OVERHEAD
        pending.append((key, value, headers, now_ms))
        size += record_size
    if pending:
        batches.append(build_batch(pending))
    return batches


def _record_size_upper_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """DefaultRecord.sizeInBytes with every varint at its widest (5 bytes, 10 for the timestamp delta)."""
    size = 1 + 10 + 5 + 5 + (len(key) if key else 0) + 5 + (len(value) if value else 0) + 5
    for name, data in headers:
        size += 5 + len(name.encode()) + 5 + (len(data) if data else 0)
    return size + 5


__all__ = [
    "AUTO_CREATED_TOPIC_CONFIGS",
    "DLQ_GROUP_ENABLE_CONFIG",
    "DLQ_TOPIC_NAME_PREFIX_DEFAULT",
    "DLQCause",
    "DlqBatch",
    "ShareGroupDLQRecordParameter",
    "dlq_batches",
    "dlq_headers",
    "dlq_partition",
    "for_archiving",
    "validate_dlq_topic",
]
