"""DescribeTopicPartitions (KIP-966): topics and partitions as Metadata gives them, plus each partition's
eligible leader replicas and last known ELR, a page at a time.

Kafka's DescribeTopicPartitionsRequestHandler: the requested topics (none: every topic) from the
cursor's topic on, by name; at most ``response_partition_limit`` partitions (and at most
``max.request.partition.size.limit``) per answer, the rest behind ``next_cursor``. A requested topic
the broker does not know is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal
name); a cursor outside the requested topics, or at a negative partition, refuses the request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.controller.replication_control_manager import topic_name_error
from broker.handlers.metadata import AUTHORIZED_OPERATIONS_UNKNOWN, INTERNAL_TOPICS
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import MetadataImage, PartitionRegistration
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested


@dataclass(frozen=True, slots=True)
class TopicPage:
    name: str
    error_code: int
    topic_id: uuid.UUID
    partitions: list[tuple[int, PartitionRegistration]]


def describe_topic_partitions(
    image: MetadataImage, requested: list[str], cursor: tuple[str, int] | None, limit: int, visible: Callable[[str], bool] = lambda name: True
) -> tuple[list[TopicPage], tuple[str, int] | None]:
    """Kafka's getTopicMetadataForDescribeTopicResponse: (the topics of this page, the next cursor or None).
    ``requested`` empty means every topic; ``limit`` is already at least 1; a topic not ``visible``
    (the principal may not describe it) is left out."""
    every_topic = not requested
    start_topic = cursor[0] if cursor else ""
    names = sorted({n for n in (image.topics if every_topic else requested) if n >= start_topic and visible(n)})
    pages: list[TopicPage] = []
    remaining = limit
    for name in names:
        if remaining == 0:
            # The previous topics are complete: the next page starts at this one.
            return pages, (name, 0)
        topic = image.topics.get(name)
        if topic is None:
            if not every_topic:
                code = ErrorCode.invalid_topic_exception if topic_name_error(name) else ErrorCode.unknown_topic_or_partition
                pages.append(TopicPage(name, code, uuid.UUID(int=0), []))
            continue
        first = cursor[1] if cursor and name == cursor[0] else 0
        end = min(len(topic.partitions), first + remaining)
        partitions = [(i, topic.partitions[i]) for i in range(first, end) if i in topic.partitions]
        pages.append(TopicPage(name, ErrorCode.none, topic.topic_id, partitions))
        if end < len(topic.partitions):
            return pages, (name, end)
        remaining -= len(partitions)
    return pages, None


class DescribeTopicPartitionsHandler:
    def __init__(self, metadata: MetadataCache, max_partitions: int, auth: AuthHelper | None = None) -> None:
        self._auth = auth or AuthHelper(None)
        self._metadata = metadata
        self._max_partitions = max_partitions

    def __call__(self, ctx: RequestContext, request: Any) -> Any:
        requested = [t.name for t in request.topics]
        cursor = (request.cursor.topic_name, int(request.cursor.partition_index)) if request.cursor is not None else None
        schema = response_schema(ApiKey.DESCRIBE_TOPIC_PARTITIONS, ctx.version)
        if cursor is not None and (cursor[1] < 0 or (requested and cursor[0] not in requested)):
            # Kafka raises InvalidRequestException: every requested topic answers INVALID_REQUEST.
            return build(schema, throttle_time=0, topics=tuple(self._topic(schema, TopicPage(n, ErrorCode.invalid_request, uuid.UUID(int=0), [])) for n in requested), next_cursor=None)
        limit = max(min(self._max_partitions, int(request.response_partition_limit)), 1)
        image = self._metadata.image
        refused: list[str] = []
        if self._auth.enabled:
            start = cursor[0] if cursor else ""
            allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n in (requested or image.topics) if n >= start))
            refused = sorted({n for n in requested if n >= start} - allowed)
            pages, next_cursor = describe_topic_partitions(image, requested, cursor, limit, allowed.__contains__)
        else:
            pages, next_cursor = describe_topic_partitions(image, requested, cursor, limit)
        cursor_cls = nested(schema, "Cursor")
        # Kafka's order: the topics of the page, then the refused ones, whose existence is not told.
        answers = [self._topic(schema, page, self._auth.authorized_operations(ctx, ResourceType.TOPIC, page.name)) for page in pages]
        answers += [self._topic(schema, TopicPage(name, ErrorCode.topic_authorization_failed, uuid.UUID(int=0), []), AUTHORIZED_OPERATIONS_UNKNOWN) for name in refused]
        return build(
            schema,
            throttle_time=0,
            topics=tuple(answers),
            next_cursor=None if next_cursor is None else build(cursor_cls, topic_name=next_cursor[0], partition_index=next_cursor[1]),
        )

    @staticmethod
    def _topic(schema: Any, page: TopicPage, operations: int = AUTHORIZED_OPERATIONS_UNKNOWN) -> Any:
        topic_cls = nested(schema, "DescribeTopicPartitionsResponseTopic")
        part_cls = nested(schema, "DescribeTopicPartitionsResponsePartition")
        partitions = tuple(
            build(part_cls, error_code=ErrorCode.none, partition_index=index, leader_id=reg.leader, leader_epoch=reg.leader_epoch,
                  replica_nodes=reg.replicas, isr_nodes=reg.isr, eligible_leader_replicas=reg.elr, last_known_elr=reg.last_known_elr, offline_replicas=())
            for index, reg in page.partitions
        )
        return build(topic_cls, error_code=page.error_code, name=page.name, topic_id=page.topic_id, is_internal=page.name in INTERNAL_TOPICS,
                     partitions=partitions, topic_authorized_operations=operations)


__all__ = ["DescribeTopicPartitionsHandler", "TopicPage", "describe_topic_partitions"]
