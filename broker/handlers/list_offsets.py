"""ListOffsets: earliest, latest, max timestamp and by-time lookups per partition."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from broker.security.standard_acl import AclOperation, ResourceType
from storage.errors import StorageError


class ListOffsetsHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._auth = auth or AuthHelper(None)
        self._rm = replica_manager
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LIST_OFFSETS, ctx.version)
        topic_cls = nested(schema, "ListOffsetsTopicResponse")
        part_cls = nested(schema, "ListOffsetsPartitionResponse")
        # As Kafka's: a replica's request (a follower answered OFFSET_OUT_OF_RANGE) has no isolation level.
        isolation = None if request.replica_id >= 0 else getattr(request, "isolation_level", 0)
        topics = []
        allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)) if self._auth.enabled else None
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if allowed is not None and t.name not in allowed:
                    parts.append(build(part_cls, partition_index=p.partition_index, error_code=ErrorCode.topic_authorization_failed, timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                error, timestamp, offset, epoch = self._lookup(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1), isolation)
                parts.append(build(part_cls, partition_index=p.partition_index, error_code=error, timestamp=timestamp, offset=offset, leader_epoch=epoch))
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(schema, throttle_time=0, topics=tuple(topics))

    def _lookup(self, topic: str, index: int, timestamp: int, leader_epoch: int, isolation: int | None) -> tuple[int, int, int, int]:
        try:
            partition = self._rm.leader_partition(topic, index, self._metadata.image)
            found = partition.fetch_offset_for_timestamp(timestamp, isolation, leader_epoch)
        except StorageError as e:
            return (e.error_code, -1, -1, -1)
        if found is None:
            return (0, -1, -1, -1)
        ts, offset, epoch = found
        return (0, ts, offset, epoch)
