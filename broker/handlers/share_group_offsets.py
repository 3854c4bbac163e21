"""KIP-932's share group offsets admin APIs (kafka-share-groups --describe, --reset-offsets,
--delete-offsets): DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets,
answered as Kafka 4.4's KafkaApis (handleDescribeShareGroupOffsetsRequest,
handleAlterShareGroupOffsetsRequest, handleDeleteShareGroupOffsetsRequest) answers them; the group
coordinator does the rest (broker/group_coordinator.py).

Each refuses everything while share.version is below 1, before any authorization.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.group.share_group_manager import DescribedPartitionOffsets, DescribedShareGroupOffsets, DescribedTopicOffsets
from broker.group.share_version import share_groups_enabled
from broker.group_coordinator import GroupCoordinator, error_message
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.network_client import NetworkError
from broker.replica_fetcher_requests import list_offsets_request
from broker.replica_manager import ReplicaManager
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

log = structlog.get_logger(__name__)

LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
NO_LEADER_EPOCH = -1
LIST_OFFSETS_VERSION = 9


class PartitionLatestOffsets:
    """Kafka's NetworkPartitionMetadataClient.listLatestOffsets: each partition's high watermark
    (ListOffsets latest, read_uncommitted) as its leader tells it; read from the log where this
    node leads the partition."""

    def __init__(self, metadata: MetadataCache, replica_manager: ReplicaManager, network: Any, listener_name: str) -> None:
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._network = network
        self._listener = listener_name

    async def __call__(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        wanted = list(partitions)
        answers = await asyncio.gather(*(self._latest(topic, p) for topic, p in wanted))
        return dict(zip(wanted, answers))

    async def _latest(self, topic: str, index: int) -> tuple[int, int]:
        local = self._replica_manager.get_partition(topic, index)
        if local is not None and local.is_leader:
            return ErrorCode.none, local.high_watermark
        t = self._metadata.image.topics.get(topic)
        registration = t.partitions.get(index) if t is not None else None
        if registration is None:
            return ErrorCode.unknown_topic_or_partition, -1
        endpoint = None if registration.leader == NO_LEADER else self._metadata.alive_broker(registration.leader, self._listener)
        if endpoint is None or self._network is None:
            return ErrorCode.leader_not_available, -1
        body = list_offsets_request(LIST_OFFSETS_VERSION, CONSUMER_REPLICA_ID, topic, index, NO_LEADER_EPOCH, LATEST_TIMESTAMP)
        try:
            response = await self._network.send((endpoint.host, endpoint.port), body)
        except NetworkError as e:
            log.info("share_group_offsets.list_offsets_failed", topic=topic, partition=index, error=str(e))
            return ErrorCode.network_exception, -1
        [answer] = [p for t in response.topics for p in t.partitions]
        return int(answer.error_code), int(answer.offset)


class DescribeShareGroupOffsetsHandler:
    """Each group's share partitions: start offset, leader epoch and (v1) lag."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, latest_offsets: PartitionLatestOffsets, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._latest_offsets = latest_offsets
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        schema = response_schema(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ctx.version)
        described = await asyncio.gather(*(self._group(ctx, g) for g in request.groups))
        return build(schema, throttle_time=0, groups=tuple(self._group_entity(schema, g.group_id, d) for g, d in zip(request.groups, described)))

    async def _group(self, ctx: RequestContext, group: Any) -> DescribedShareGroupOffsets:
        if not share_groups_enabled(self._metadata.image.features):
            return DescribedShareGroupOffsets(ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            return DescribedShareGroupOffsets(ErrorCode.group_authorization_failed)
        if group.topics is None:
            described = await self._coordinator.describe_share_group_offsets(group.group_id, None, self._latest_offsets)
            if described.error_code or not self._auth.enabled:
                return described
            # Topics the client may not describe are left out of "all".
            allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {t.topic_name for t in described.topics})
            return DescribedShareGroupOffsets(topics=tuple(t for t in described.topics if t.topic_name in allowed))
        if not group.topics:
            return DescribedShareGroupOffsets()
        allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {t.topic_name for t in group.topics})
        authorized = [(t.topic_name, tuple(int(p) for p in t.partitions)) for t in group.topics if t.topic_name in allowed]
        described = await self._coordinator.describe_share_group_offsets(group.group_id, authorized, self._latest_offsets)
        if described.error_code:
            return described
        refused = tuple(
            DescribedTopicOffsets(t.topic_name, None, tuple(_refused_partition(int(p)) for p in t.partitions)) for t in group.topics if t.topic_name not in allowed
        )
        return DescribedShareGroupOffsets(topics=described.topics + refused)

    @staticmethod
    def _group_entity(schema: Any, group_id: str, d: DescribedShareGroupOffsets) -> Any:
        group_cls = nested(schema, "DescribeShareGroupOffsetsResponseGroup")
        topic_cls = nested(schema, "DescribeShareGroupOffsetsResponseTopic")
        partition_cls = nested(schema, "DescribeShareGroupOffsetsResponsePartition")
        topics = tuple(
            build(
                topic_cls,
                topic_name=t.topic_name,
                topic_id=t.topic_id,
                partitions=tuple(
                    build(
                        partition_cls,
                        partition_index=p.partition,
                        start_offset=p.start_offset,
                        leader_epoch=p.leader_epoch,
                        lag=p.lag,
                        error_code=p.error_code,
                        error_message=p.error_message,
                    )
                    for p in t.partitions
                ),
            )
            for t in d.topics
        )
        return build(group_cls, group_id=group_id, topics=topics, error_code=d.error_code, error_message=d.error_message)


def _refused_partition(index: int) -> DescribedPartitionOffsets:
    return DescribedPartitionOffsets(index, -1, 0, -1, ErrorCode.topic_authorization_failed, error_message(ErrorCode.topic_authorization_failed))


class AlterShareGroupOffsetsHandler:
    """An empty share group's start offsets set (kafka-share-groups --reset-offsets --execute)."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        schema = response_schema(ApiKey.ALTER_SHARE_GROUP_OFFSETS, ctx.version)
        if not share_groups_enabled(self._metadata.image.features):
            return _failed(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return _failed(schema, ErrorCode.group_authorization_failed)
        # AlterShareGroupOffsetsResponse.Builder: one entry per topic name, partitions in the order answered.
        answered: dict[str, tuple[Any, list[tuple[int, int, str | None]]]] = {}

        def add(name: str, topic_id: Any, partition: int, error: int, message: str | None) -> None:
            answered.setdefault(name, (topic_id, []))[1].append((partition, error, message))

        ids = {name: topic.topic_id for name, topic in self._metadata.image.topics.items()}
        asked: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        for topic in request.topics:
            if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic.topic_name):
                error = ErrorCode.topic_authorization_failed
            elif topic.topic_name not in ids:
                error = ErrorCode.unknown_topic_or_partition
            else:
                asked.append((topic.topic_name, tuple((int(p.partition_index), int(p.start_offset)) for p in topic.partitions)))
                continue
            for p in topic.partitions:
                add(topic.topic_name, ids.get(topic.topic_name), int(p.partition_index), error, error_message(error))
        altered = await self._coordinator.alter_share_group_offsets(request.group_id, asked)
        if altered.error_code:
            return _failed(schema, altered.error_code, altered.error_message)
        for t in altered.topics:
            for o in t.partitions:
                add(t.topic_name, ids.get(t.topic_name), o.partition, o.error_code, o.error_message)
        topic_cls = nested(schema, "AlterShareGroupOffsetsResponseTopic")
        partition_cls = nested(schema, "AlterShareGroupOffsetsResponsePartition")
        responses = tuple(
            build(
                topic_cls,
                topic_name=name,
                topic_id=topic_id,
                partitions=tuple(build(partition_cls, partition_index=p, error_code=e, error_message=m) for p, e, m in partitions),
            )
            for name, (topic_id, partitions) in answered.items()
        )
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None, responses=responses)


class DeleteShareGroupOffsetsHandler:
    """An empty share group forgets topics (kafka-share-groups --delete-offsets)."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        schema = response_schema(ApiKey.DELETE_SHARE_GROUP_OFFSETS, ctx.version)
        if not share_groups_enabled(self._metadata.image.features):
            return _failed(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
            return _failed(schema, ErrorCode.group_authorization_failed)
        topic_cls = nested(schema, "DeleteShareGroupOffsetsResponseTopic")
        refused = error_message(ErrorCode.topic_authorization_failed)
        out: list[Any] = []
        authorized: list[str] = []
        for topic in request.topics:
            if self._auth.authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic.topic_name):
                authorized.append(topic.topic_name)
            else:
                out.append(build(topic_cls, topic_name=topic.topic_name, topic_id=None, error_code=ErrorCode.topic_authorization_failed, error_message=refused))
        error, message, topics = await self._coordinator.delete_share_group_offsets(request.group_id, authorized)
        if error:
            return _failed(schema, error, message)
        out.extend(build(topic_cls, topic_name=t.topic_name, topic_id=t.topic_id, error_code=t.error_code, error_message=t.error_message) for t in topics)
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None, responses=tuple(out))


def _failed(schema: Any, error: int, message: str | None = None) -> Any:
    """Alter/DeleteShareGroupOffsetsRequest.getErrorResponse: the top-level error and its message
    (the error's default message where there is none), no topics."""
    return build(schema, throttle_time=0, error_code=error, error_message=message or error_message(error), responses=())
