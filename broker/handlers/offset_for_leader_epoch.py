"""OffsetForLeaderEpoch: the end offset of a leader epoch, for truncation after a leader change."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from storage.errors import StorageError


class OffsetForLeaderEpochHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._auth = auth or AuthHelper(None)
        self._rm = replica_manager
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.version)
        topic_cls = nested(schema, "OffsetForLeaderTopicResult")
        part_cls = nested(schema, "EpochEndOffset")
        topics = []
        allowed = None
        auth = self._auth
        if auth.enabled and not auth.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
            # A follower has CLUSTER_ACTION; a consumer validating its position needs DESCRIBE.
            allowed = auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if allowed is not None and t.topic not in allowed:
                    parts.append(build(part_cls, error_code=ErrorCode.topic_authorization_failed, partition=p.partition, leader_epoch=-1, end_offset=-1))
                    continue
                error, epoch, end = self._end_offset(t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
                parts.append(build(part_cls, error_code=error, partition=p.partition, leader_epoch=epoch, end_offset=end))
            topics.append(build(topic_cls, topic=t.topic, partitions=tuple(parts)))
        return build(schema, throttle_time=0, topics=tuple(topics))

    def _end_offset(self, topic: str, index: int, current_epoch: int, epoch: int) -> tuple[int, int, int]:
        try:
            partition = self._rm.leader_partition(topic, index, self._metadata.image)
            found_epoch, end = partition.last_offset_for_leader_epoch(current_epoch, epoch)
        except StorageError as e:
            return (e.error_code, -1, -1)
        return (0, found_epoch, end)
