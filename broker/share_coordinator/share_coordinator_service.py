"""ShareCoordinatorService: the share coordinator shards on the coordinator runtime (Kafka 4.4's
``ShareCoordinatorService``), the I/O shell around the sans-IO ShareCoordinatorShard.

The coordinator of a share partition (group, topic id, partition) is the leader of
``__share_group_state`` partition ``partition_for(key)``; the CoordinatorRuntime loads a shard
for each partition this node leads. Each operation covers one share partition, as Kafka splits the
requests before they reach the shard: it runs on the loaded shard, the records it returns are
replayed at once (so the next operation sees them) and appended with acks=all, and its answer is
given once they are replicated. A write that fails takes the shard back to its state before the
operation, and is answered with Kafka's CoordinatorOperationExceptionHelper error (WRITE_ERRORS).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Callable, TypeVar

import structlog

from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.config import BrokerConfig
from broker.coordinator.coordinator_runtime import WRITE_ERRORS, CoordinatorNotAvailable, CoordinatorRuntime, now_ms
from broker.group.coordinator_records import UnknownRecordType
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.replica_manager import ReplicaManager
from broker.share_coordinator import share_partition_key
from broker.share_coordinator.config import STATE_TOPIC, ShareCoordinatorConfig
from broker.share_coordinator.records import ShareCoordinatorRecord, decode_record, encode_record
from broker.share_coordinator.share_coordinator_shard import (
    PartitionResult,
    ReadStateResult,
    ReadStateSummaryResult,
    ShareCoordinatorResult,
    ShareCoordinatorShard,
    WriteStateData,
)
from broker.share_coordinator.share_partition_key import SharePartitionKey
from protocol.record_batch import BatchHeader
from protocol.records import Record, build_batch

log = structlog.get_logger(__name__)

T = TypeVar("T")
# An answer now, or once the operation's records are replicated (or failed).
Answer = T | asyncio.Future[T]


def share_coordinator_config(cfg: BrokerConfig) -> ShareCoordinatorConfig:
    return ShareCoordinatorConfig(
        state_topic_num_partitions=cfg.share_coordinator_state_topic_num_partitions,
        state_topic_replication_factor=cfg.share_coordinator_state_topic_replication_factor,
        state_topic_min_isr=cfg.share_coordinator_state_topic_min_isr,
        state_topic_segment_bytes=cfg.share_coordinator_state_topic_segment_bytes,
        snapshot_update_records_per_snapshot=cfg.share_coordinator_snapshot_update_records_per_snapshot,
        write_timeout_ms=cfg.share_coordinator_write_timeout_ms,
    )


def state_topic_configs(config: ShareCoordinatorConfig) -> dict[str, str | None]:
    """Kafka 4.4's ShareCoordinatorService.shareGroupStateTopicConfigs: the topic is never compacted
    (a ShareUpdate needs the ShareSnapshot before it) nor expired by time; the coordinator prunes
    it with DeleteRecords instead."""
    return {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "segment.bytes": str(config.state_topic_segment_bytes),
        "min.insync.replicas": str(config.state_topic_min_isr),
        "retention.ms": "-1",
    }


class ShareCoordinatorService:
    def __init__(self, config: BrokerConfig, creator: AutoTopicCreationManager, metadata: MetadataCache, replica_manager: ReplicaManager) -> None:
        self.config = share_coordinator_config(config)
        self._creator = creator
        self._metadata = metadata
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] = CoordinatorRuntime(
            STATE_TOPIC, self.config.state_topic_num_partitions, metadata, replica_manager, self
        )
        self.shards = self.runtime.shards

    def partition_for(self, key: SharePartitionKey) -> int:
        return share_partition_key.partition_for(key, self.config.state_topic_num_partitions)

    async def ensure_topic(self) -> None:
        """Create ``__share_group_state`` on first need, as Kafka does on the first FindCoordinator(SHARE)."""
        await self.runtime.ensure_topic(self._creator, self.config.state_topic_num_partitions, self.config.state_topic_replication_factor, state_topic_configs(self.config))

    async def wait_loaded(self, key: SharePartitionKey, timeout_s: float) -> None:
        await self.runtime.wait_loaded(key.as_coordinator_key(), timeout_s)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: the runtime loads and unloads the partitions this node leads; the
        shards check share partitions against the new image's topics."""
        self.runtime.on_metadata_update(delta, image)
        if delta.topics_delta is not None:
            for shard in self.shards.values():
                shard.on_metadata_update(self._partition_count)

    def _partition_count(self, topic_id: uuid.UUID) -> int | None:
        topic = self._metadata.image.topics_by_id.get(topic_id)
        return None if topic is None else len(topic.partitions)

    # -- the runtime's CoordinatorShardLoader ---------------------------------------------------------

    def new_shard(self, index: int, leader_epoch: int) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(self.config, now_ms)

    def replay(self, shard: ShareCoordinatorShard, header: BatchHeader, batch: memoryview, records: list[Record]) -> int:
        applied = 0
        for record in records:  # a control batch has none: the share coordinator writes no transactions
            try:
                decoded = decode_record(record.key, record.value)  # type: ignore[arg-type]
            except UnknownRecordType:
                continue
            shard.replay(decoded, record.offset)
            applied += 1
        return applied

    def on_loaded(self, index: int, shard: ShareCoordinatorShard) -> None:
        shard.on_loaded(self._partition_count)
        log.info("share_coordinator.loaded", partition=index, share_partitions=len(shard.share_states))

    def on_unloaded(self, index: int, shard: ShareCoordinatorShard) -> None:
        """Nothing waits in a share coordinator shard: its writes in flight fail with the runtime's NOT_COORDINATOR."""

    # -- the operations, one share partition each ------------------------------------------------------

    def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> Answer[PartitionResult]:
        return self._run(key, lambda shard: shard.initialize_state(key, state_epoch, start_offset), _partition_error)

    def read_state(self, key: SharePartitionKey, leader_epoch: int) -> Answer[ReadStateResult]:
        """A write too: a newer leader epoch is recorded, fencing the share partition's old leader."""
        return self._run(key, lambda shard: shard.read_state_and_maybe_update_leader_epoch(key, leader_epoch), lambda e: ReadStateResult(error_code=e))

    def write_state(self, key: SharePartitionKey, data: WriteStateData) -> Answer[PartitionResult]:
        return self._run(key, lambda shard: shard.write_state(key, data), _partition_error)

    def read_state_summary(self, key: SharePartitionKey) -> Answer[ReadStateSummaryResult]:
        return self._run(key, lambda shard: shard.read_state_summary(key), lambda e: ReadStateSummaryResult(error_code=e))

    def delete_state(self, key: SharePartitionKey) -> Answer[PartitionResult]:
        return self._run(key, lambda shard: shard.delete_state(key), _partition_error)

    def _run(
        self,
        key: SharePartitionKey,
        operation: Callable[[ShareCoordinatorShard], ShareCoordinatorResult[T]],
        failed: Callable[[int], T],
    ) -> Answer[T]:
        """Run ``operation`` on the shard of ``key``; its answer once its records are replicated, or
        ``failed`` with Kafka's error (NOT_COORDINATOR elsewhere, COORDINATOR_LOAD_IN_PROGRESS
        while loading). An operation that wrote nothing is answered once the partition's earlier
        writes are settled, so a read never shows state that could still be taken back."""
        try:
            shard = self.runtime.shard_of(key.as_coordinator_key())
        except CoordinatorNotAvailable as e:
            return failed(e.error_code)
        before = shard.snapshot([key])
        result = operation(shard)
        records = result.records

        def appended(base_offset: int) -> None:
            for i, record in enumerate(records):
                shard.replay(record, base_offset + i)

        def settle(error: int) -> T:
            return failed(WRITE_ERRORS.get(error, error)) if error else result.response

        return self.runtime.write(self.partition_for(key), _batch(records), self.config.write_timeout_ms, settle, lambda error: shard.revert(before), appended)

    def shutdown(self) -> None:
        self.runtime.shutdown()


def _partition_error(error: int) -> PartitionResult:
    return PartitionResult(error_code=error)


def _batch(records: list[ShareCoordinatorRecord]) -> bytes | None:
    if not records:
        return None
    timestamp = now_ms()
    return build_batch([(*encode_record(record), (), timestamp) for record in records])
