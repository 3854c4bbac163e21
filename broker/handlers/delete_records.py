"""DeleteRecords: move a partition's log start offset forward."""

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


class DeleteRecordsHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._auth = auth or AuthHelper(None)
        self._rm = replica_manager
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DELETE_RECORDS, ctx.version)
        topic_cls = nested(schema, "DeleteRecordsTopicResult")
        part_cls = nested(schema, "DeleteRecordsPartitionResult")
        topics = []
        allowed = self._auth.filter_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics)) if self._auth.enabled else None
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if allowed is not None and t.name not in allowed:
                    low, error = -1, ErrorCode.topic_authorization_failed
                else:
                    low, error = self._delete(t.name, p.partition_index, p.offset)
                parts.append(build(part_cls, partition_index=p.partition_index, low_watermark=low, error_code=error))
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(schema, throttle_time=0, topics=tuple(topics))

    def _delete(self, topic: str, index: int, offset: int) -> tuple[int, int]:
        try:
            partition = self._rm.leader_partition(topic, index, self._metadata.image)
            if not partition.log.config.deletes:
                # Kafka's Partition.deleteRecordsOnLeader: a topic whose cleanup.policy lacks
                # delete (compact alone) keeps its records, whatever the offset.
                return -1, ErrorCode.policy_violation
            low_watermark = partition.delete_records_on_leader(offset)
        except StorageError as e:
            return -1, e.error_code
        self._rm.fetch_purgatory.touch(partition.key)
        return low_watermark, ErrorCode.none
