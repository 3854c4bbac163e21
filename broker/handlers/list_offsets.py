"""ListOffsets: earliest, latest, max timestamp and by-time lookups per partition."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.partition import READ_COMMITTED, Partition
from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from storage.errors import StorageError

EARLIEST = -2
LATEST = -1


def check_leader_epoch(partition: Partition, requested: int) -> int:
    if requested < 0 or requested == partition.leader_epoch:
        return 0
    return ErrorCode.fenced_leader_epoch if requested < partition.leader_epoch else ErrorCode.unknown_leader_epoch


class ListOffsetsHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache) -> None:
        self._rm = replica_manager
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LIST_OFFSETS, ctx.version)
        topic_cls = nested(schema, "ListOffsetsTopicResponse")
        part_cls = nested(schema, "ListOffsetsPartitionResponse")
        isolation = getattr(request, "isolation_level", 0)
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                error, timestamp, offset, epoch = self._lookup(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1), isolation)
                parts.append(build(part_cls, partition_index=p.partition_index, error_code=error, timestamp=timestamp, offset=offset, leader_epoch=epoch))
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(schema, throttle_time=0, topics=tuple(topics))

    def _lookup(self, topic: str, index: int, timestamp: int, leader_epoch: int, isolation: int) -> tuple[int, int, int, int]:
        partition = self._rm.get_partition(topic, index)
        if partition is None:
            known = self._metadata.image.has_partition(topic, index)
            return (ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition, -1, -1, -1)
        error = check_leader_epoch(partition, leader_epoch)
        if error:
            return (error, -1, -1, -1)
        if timestamp == LATEST:
            # Consumers never see past the high watermark (or the LSO when read_committed).
            end = partition.last_stable_offset if isolation == READ_COMMITTED else partition.high_watermark
            return (0, -1, end, partition.leader_epoch)
        try:
            found = partition.log.fetch_offset_by_timestamp(timestamp)
        except StorageError as e:
            return (e.error_code, -1, -1, -1)
        if found is None:
            return (0, -1, -1, -1)
        ts, offset, epoch = found
        return (0, ts, offset, epoch)
