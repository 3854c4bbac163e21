"""A share group's dead-letter queue (KIP-1191), sans-IO: which archived records go to it, whether
the group's DLQ topic may take them, and the records written there. Kafka 4.4's
``org.apache.kafka.server.share.dlq`` (ShareGroupDLQRecordParameter, ShareGroupDLQStateManager's
ProduceRequestHandler) and SharePartition's DLQ hand-off.

With share.version 2 and the group config ``errors.deadletterqueue.topic.name`` set, a record
archived because a member REJECTed it (cause "Offset rejected by client.") or because it went
back to AVAILABLE at the delivery count limit (a RELEASE, a lock timeout or a member leaving:
"Offset delivery count exceeded the threshold.") is written to the DLQ topic. GAP acknowledgements
and records archived for other reasons (aborted transactions, the log start moving) are not.

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

from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.persister import PersisterStateBatch
from broker.share.record_state import AcknowledgeType, RecordState
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


def for_acknowledgement(
    group_id: str,
    topic_id: uuid.UUID,
    topic: str,
    partition: int,
    acknowledgements: Sequence[ShareAcknowledgementBatch],
    changed: Iterable[PersisterStateBatch],
) -> list[ShareGroupDLQRecordParameter]:
    """What an acknowledgement archived for the DLQ: of the ``changed`` ranges it made ARCHIVED,
    the REJECTed offsets (CLIENT_REJECT) and the RELEASEd ones at the delivery count limit
    (DELIVERY_COUNT_EXCEEDED); GAPs have no record to write."""
    params: list[ShareGroupDLQRecordParameter] = []
    for batch in changed:
        if batch.delivery_state is not RecordState.ARCHIVED:
            continue
        run: tuple[int, int, DLQCause] | None = None
        for offset in range(batch.first_offset, batch.last_offset + 1):
            cause = _cause_of(acknowledgements, offset)
            if run is not None and cause is run[2] and offset == run[1] + 1:
                run = (run[0], offset, cause)
                continue
            if run is not None:
                params.append(ShareGroupDLQRecordParameter(group_id, topic_id, topic, partition, run[0], run[1], batch.delivery_count, run[2]))
            run = None if cause is None else (offset, offset, cause)
        if run is not None:
            params.append(ShareGroupDLQRecordParameter(group_id, topic_id, topic, partition, run[0], run[1], batch.delivery_count, run[2]))
    return params


def for_release(
    group_id: str, topic_id: uuid.UUID, topic: str, partition: int, changed: Iterable[PersisterStateBatch]
) -> list[ShareGroupDLQRecordParameter]:
    """What a release (lock timeout, member leaving) archived: records that reached the delivery
    count limit."""
    return [
        ShareGroupDLQRecordParameter(
            group_id, topic_id, topic, partition, b.first_offset, b.last_offset, b.delivery_count, DLQCause.DELIVERY_COUNT_EXCEEDED
        )
        for b in changed
        if b.delivery_state is RecordState.ARCHIVED
    ]


def _cause_of(acknowledgements: Sequence[ShareAcknowledgementBatch], offset: int) -> DLQCause | None:
    for ack in acknowledgements:
        if ack.first_offset <= offset <= ack.last_offset:
            ack_type = ack.type_of(offset)
            if ack_type == AcknowledgeType.REJECT:
                return DLQCause.CLIENT_REJECT
            if ack_type == AcknowledgeType.RELEASE:
                return DLQCause.DELIVERY_COUNT_EXCEEDED
            return None
    return None


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
    "ShareGroupDLQRecordParameter",
    "dlq_batches",
    "dlq_headers",
    "dlq_partition",
    "for_acknowledgement",
    "for_release",
    "validate_dlq_topic",
]
