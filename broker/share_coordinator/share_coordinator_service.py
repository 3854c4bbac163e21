"""ShareCoordinatorService: the share coordinator shards on the coordinator runtime (Kafka 4.4's
``ShareCoordinatorService``), the I/O shell around the sans-IO ShareCoordinatorShard.

The coordinator of a share partition (group, topic id, partition) is the leader of
``__share_group_state`` partition ``partition_for(key)``; the CoordinatorRuntime loads a shard
for each partition this node leads. Each operation covers one share partition, as Kafka splits the
requests before they reach the shard: it runs on the loaded shard, the records it returns are
replayed at once (so the next operation sees them) and appended with acks=all, and its answer is
given once they are replicated. A write that fails takes the shard back to its state before the
operation, and is answered with Kafka's CoordinatorOperationExceptionHelper error (WRITE_ERRORS).

While the cluster's share.version has share groups, two periodic jobs run over the loaded shards,
as Kafka 4.4's: every ``share.coordinator.state.topic.prune.interval.ms`` each partition's records
below its last redundant offset are deleted (``record_pruner``), and every
``share.coordinator.cold.partition.snapshot.interval.ms`` the share partitions nobody wrote for that
long are snapshotted, so that they stop holding the pruning back. A deleted topic's share
partitions get tombstones, as Kafka's onTopicsDeleted writes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Iterable
from functools import partial
from typing import Callable, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.config import BrokerConfig
from broker.coordinator.coordinator_runtime import WRITE_ERRORS, CoordinatorNotAvailable, CoordinatorRuntime, now_ms
from broker.group.coordinator_records import UnknownRecordType
from broker.group.share_version import share_groups_enabled
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metrics.share_coordinator_metrics import ShareCoordinatorMetrics
from broker.replica_manager import ReplicaManager
from broker.share_coordinator import share_partition_key
from broker.share_coordinator.config import STATE_TOPIC, ShareCoordinatorConfig
from broker.share_coordinator.record_pruner import RecordPruner
from broker.share_coordinator.records import ShareCoordinatorRecord, decode_record, encode_record
from broker.share_coordinator.share_coordinator_shard import (
    PartitionResult,
    ReadStateResult,
    ReadStateSummaryResult,
    ShareCoordinatorResult,
    ShardSnapshot,
    ShareCoordinatorShard,
    WriteStateData,
)
from broker.share_coordinator.share_partition_key import SharePartitionKey
from protocol.record_batch import BatchHeader
from protocol.records import Record, build_batch
from storage.errors import StorageError

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
        state_topic_prune_interval_ms=cfg.share_coordinator_state_topic_prune_interval_ms,
        cold_partition_snapshot_interval_ms=cfg.share_coordinator_cold_partition_snapshot_interval_ms,
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
        self._rm = replica_manager
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] = CoordinatorRuntime(
            STATE_TOPIC, self.config.state_topic_num_partitions, metadata, replica_manager, self
        )
        self.shards = self.runtime.shards
        self._pruner = RecordPruner()
        self.metrics = ShareCoordinatorMetrics()
        self._periodic_jobs: list[asyncio.Task[None]] = []  # running while share groups are enabled

    def partition_for(self, key: SharePartitionKey) -> int:
        return share_partition_key.partition_for(key, self.config.state_topic_num_partitions)

    async def ensure_topic(self) -> None:
        """Create ``__share_group_state`` on first need, as Kafka does on the first FindCoordinator(SHARE)."""
        await self.runtime.ensure_topic(self._creator, self.config.state_topic_num_partitions, self.config.state_topic_replication_factor, state_topic_configs(self.config))

    async def wait_loaded(self, key: SharePartitionKey, timeout_s: float) -> None:
        await self.runtime.wait_loaded(key.as_coordinator_key(), timeout_s)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: the runtime loads and unloads the partitions this node leads; the
        shards check share partitions against the new image's topics, and drop the state of the
        deleted ones; the periodic jobs follow share.version."""
        self.runtime.on_metadata_update(delta, image)
        if delta.topics_delta is not None:
            for shard in self.shards.values():
                shard.on_metadata_update(self._partition_count)
            deleted = set(delta.topics_delta.deleted_topic_ids)
            if deleted:
                self._write_all("on-topics-deleted", lambda shard: shard.maybe_cleanup_share_state(deleted))
        enabled = share_groups_enabled(image.features)
        if enabled and not self._periodic_jobs:
            loop = asyncio.get_running_loop()
            self._periodic_jobs = [
                loop.create_task(self._every(self.config.state_topic_prune_interval_ms, self._prune_records), name="share-coordinator-prune"),
                loop.create_task(self._every(self.config.cold_partition_snapshot_interval_ms, self._snapshot_cold_partitions), name="share-coordinator-cold-snapshots"),
            ]
        elif not enabled:
            self._stop_periodic_jobs()

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
        """Nothing waits in a share coordinator shard: its writes in flight fail with the runtime's
        NOT_COORDINATOR. Its pruning starts afresh on a later leadership, as Kafka's onResignation."""
        self._pruner.forget(index)
        self.metrics.resigned(index)

    # -- the operations, one share partition each ------------------------------------------------------

    def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> Answer[PartitionResult]:
        return self._run(key, lambda shard: shard.initialize_state(key, state_epoch, start_offset), _partition_error)

    def read_state(self, key: SharePartitionKey, leader_epoch: int) -> Answer[ReadStateResult]:
        """A write too: a newer leader epoch is recorded, fencing the share partition's old leader."""
        return self._run(key, lambda shard: self._counted(shard.read_state_and_maybe_update_leader_epoch(key, leader_epoch)), lambda e: ReadStateResult(error_code=e))

    def write_state(self, key: SharePartitionKey, data: WriteStateData) -> Answer[PartitionResult]:
        started = time.monotonic()
        return self.metrics.timed(self._run(key, lambda shard: self._counted(shard.write_state(key, data), always=True), _partition_error), started)

    def _counted(self, result: ShareCoordinatorResult[T], always: bool = False) -> ShareCoordinatorResult[T]:
        """Kafka's ShareCoordinatorWrite sensor: every write the shard took, and a read that wrote."""
        if always or result.records:
            self.metrics.record_write()
        return result

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

        def settle(error: int) -> T:
            return failed(WRITE_ERRORS.get(error, error)) if error else result.response

        return self._append(self.partition_for(key), shard, result.records, before, settle)

    def _append(self, index: int, shard: ShareCoordinatorShard, records: list[ShareCoordinatorRecord], before: ShardSnapshot, settle: Callable[[int], T]) -> Answer[T]:
        """Write the records a shard made: replayed once in the log, taken back to ``before`` if the write fails."""

        def appended(base_offset: int) -> None:
            for i, record in enumerate(records):
                shard.replay(record, base_offset + i)

        return self.runtime.write(index, _batch(records), self.config.write_timeout_ms, settle, lambda error: shard.revert(before), appended)

    def _write_all(self, operation: str, records_of: Callable[[ShareCoordinatorShard], list[ShareCoordinatorRecord]]) -> list[asyncio.Future[int]]:
        """Kafka's scheduleWriteAllOperation: the records each loaded shard makes, written to its
        partition; returns the writes still waiting for their followers."""
        waiting = []
        for index, shard in list(self.shards.items()):
            records = records_of(shard)
            if records:
                before = shard.snapshot(_keys(records))
                answer = self._append(index, shard, records, before, partial(_logged, operation, index))
                if isinstance(answer, asyncio.Future):
                    waiting.append(answer)
        return waiting

    # -- the periodic jobs -----------------------------------------------------------------------------

    @staticmethod
    async def _every(interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        """Kafka's timer tasks: the next round is scheduled once this one is done."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:  # noqa: BLE001 - a failed round is logged, and the next one runs, as Kafka's
                log.exception("share_coordinator.periodic_job_failed", job=job.__name__)

    async def _snapshot_cold_partitions(self) -> None:
        await asyncio.gather(*self._write_all("snapshot-cold-partitions", lambda shard: shard.snapshot_cold_partitions()))

    async def _prune_records(self) -> None:
        await asyncio.gather(*(self._prune(index, shard) for index, shard in list(self.shards.items())))

    async def _prune(self, index: int, shard: ShareCoordinatorShard) -> None:
        """Kafka's performRecordPruning: the shard's last redundant offset, acted on once the
        partition's writes up to it are committed (a write of no records waits for them)."""
        offset = shard.last_redundant_offset()
        if offset is None:
            return
        committed = self.runtime.write(index, None, self.config.write_timeout_ms, lambda error: error)
        error = await committed if isinstance(committed, asyncio.Future) else committed
        partition = self._rm.get_partition(STATE_TOPIC, index)
        if error or partition is None or self.shards.get(index) is not shard:
            return  # resigned meanwhile, or a write before it failed: the next round looks again
        target = self._pruner.prune_offset(index, offset, partition.high_watermark)
        if target is None:
            return
        if not partition.log.config.deletes:
            # Kafka's deleteRecordsOnLeader refuses a topic whose cleanup.policy lacks delete.
            log.error("share_coordinator.prune_failed", partition=index, offset=target, error="POLICY_VIOLATION")
            return
        try:
            partition.delete_records_on_leader(target)
        except StorageError as e:
            log.error("share_coordinator.prune_failed", partition=index, offset=target, error=ErrorCode(e.error_code).name)
            return
        self._rm.fetch_purgatory.touch(partition.key)
        self._pruner.pruned(index, target)
        self.metrics.pruned(index, target)
        log.info("share_coordinator.pruned", partition=index, offset=target)

    def _stop_periodic_jobs(self) -> None:
        for task in self._periodic_jobs:
            task.cancel()
        self._periodic_jobs = []

    def shutdown(self) -> None:
        self._stop_periodic_jobs()
        self.runtime.shutdown()


def _partition_error(error: int) -> PartitionResult:
    return PartitionResult(error_code=error)


def _logged(operation: str, index: int, error: int) -> int:
    if error:
        log.warning("share_coordinator.write_failed", operation=operation, partition=index, error=ErrorCode(error).name)
    return error


def _keys(records: Iterable[ShareCoordinatorRecord]) -> set[SharePartitionKey]:
    return {SharePartitionKey(r.key.group_id, r.key.topic_id, r.key.partition) for r in records}


def _batch(records: list[ShareCoordinatorRecord]) -> bytes | None:
    if not records:
        return None
    timestamp = now_ms()
    return build_batch([(*encode_record(record), (), timestamp) for record in records])
