"""DescribeProducers: each partition's active producers, from its producer state, answered by any
replica that hosts the partition, as Kafka answers it (`kafka-transactions.sh find-hanging
--broker-id` asks every partition of one broker, followers included)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from broker.security.standard_acl import AclOperation, ResourceType
from storage.errors import StorageError


class DescribeProducersHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._auth = auth or AuthHelper(None)
        self._rm = replica_manager
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_PRODUCERS, ctx.version)
        topic_cls = nested(schema, "TopicResponse")
        part_cls = nested(schema, "PartitionResponse")
        state_cls = nested(schema, "ProducerState")
        topics: list[Any] = []
        for t in request.topics:
            parts: list[Any] = []
            if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.TOPIC, t.name):
                refused = tuple(
                    build(part_cls, partition_index=i, error_code=ErrorCode.topic_authorization_failed, error_message="Topic authorization failed.", active_producers=())
                    for i in t.partition_indexes
                )
                topics.append(build(topic_cls, name=t.name, partitions=refused))
                continue
            for index in t.partition_indexes:
                try:
                    entries = self._rm.hosted_partition(t.name, index, self._metadata.image).active_producers()
                except StorageError as e:
                    parts.append(build(part_cls, partition_index=index, error_code=e.error_code, error_message=None, active_producers=()))
                    continue
                producers: tuple[Any, ...] = tuple(
                    build(
                        state_cls,
                        producer_id=entry.producer_id,
                        producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_seq,
                        last_timestamp=entry.last_timestamp,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset,
                    )
                    for entry in entries
                )
                parts.append(build(part_cls, partition_index=index, error_code=ErrorCode.none, error_message=None, active_producers=producers))
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(schema, throttle_time=0, topics=tuple(topics))
