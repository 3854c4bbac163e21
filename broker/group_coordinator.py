"""GroupCoordinator: the group coordinator shards on the coordinator runtime.

The coordinator of group g is the leader of ``__consumer_offsets`` partition
``abs(java_hash(g)) % offsets.topic.num.partitions``; the CoordinatorRuntime loads a shard
for each partition this node leads. Each call runs a shard operation, writes the records it
produced to the partition (one batch) through the runtime, arms the timers it asked for,
and completes the waiting requests once the write is replicated (or failed).

A share group heartbeat may also find subscribed partitions with no share-group state yet:
once its records are written, the coordinator asks the share coordinator to initialize them
(InitializeShareGroupState) and writes the outcome, as Kafka's GroupCoordinatorService does.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any, Awaitable, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator.coordinator_runtime import WRITE_ERRORS, CoordinatorNotAvailable, CoordinatorRuntime, Written, now_ms
from broker.group.coordinator_records import OffsetCommitKey, UnknownRecordType, decode_record, encode_key, encode_value
from broker.group.group_config import GroupConfigBounds, GroupConfigManager
from broker.group.group_coordinator_shard import GroupCoordinatorShard, GroupSnapshot
from broker.group.share_group_manager import InitializeShareGroupState, ShareGroupResult
from broker.group.group_metadata_manager import (
    CancelTimer,
    CoordinatorResult,
    ErrorResponse,
    GroupConfig,
    JoinGroupResponse,
    Respond,
    SyncGroupResponse,
    TimerAction,
)
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from protocol.control_records import build_control_batch, read_marker
from protocol.record_batch import BatchHeader
from protocol.records import Record, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage

log = structlog.get_logger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"


def topic_partition_counts(image: MetadataImage) -> dict[str, tuple[uuid.UUID, int]]:
    """What consumer-protocol groups see of the cluster: each topic's id and partition count."""
    return {name: (topic.topic_id, len(topic.partitions)) for name, topic in image.topics.items()}


# Errors of the producer-state checks a transactional offset commit answers as they are.
PRODUCER_ERRORS = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced, ErrorCode.invalid_txn_state, ErrorCode.unknown_producer_id})
# A transaction coordinator expects no coordinator errors from a marker's leader: "not ready here" is NOT_LEADER_OR_FOLLOWER.
MARKER_ERRORS: dict[int, int] = {
    ErrorCode.not_coordinator: ErrorCode.not_leader_or_follower,
    ErrorCode.coordinator_not_available: ErrorCode.not_leader_or_follower,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_leader_or_follower,
}


class ShareGroupStateInitializer(Protocol):
    """The share coordinator's InitializeShareGroupState (Kafka's Persister.initializeState): True
    once the state of every partition asked for is written, False if any failed."""

    def initialize_share_group_state(self, request: InitializeShareGroupState) -> Awaitable[bool]: ...


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, controller: AutoTopicCreationManager, metadata: MetadataCache, replica_manager: ReplicaManager) -> None:
        self._config = config
        self._controller = controller
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._group_config = GroupConfig(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size,
        )
        # Each group's own configs (kafka-configs --entity-type groups), kept from the metadata image.
        self.group_configs = GroupConfigManager(GroupConfigBounds.of(config))
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            GROUP_METADATA_TOPIC, config.offsets_topic_num_partitions, metadata, replica_manager, self
        )
        self.shards = self.runtime.shards
        self._timers: dict[tuple[str, ...], asyncio.TimerHandle] = {}
        # None until kbroker has a share coordinator: share partitions then stay initializing and
        # are never assigned.
        self.share_state_initializer: ShareGroupStateInitializer | None = None
        self._initializing: set[asyncio.Task[None]] = set()

    # -- partitions and loading --------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: the runtime loads and unloads the offsets partitions this node
        leads; consumer-protocol groups recompute their targets when a subscribed topic changes;
        group configs (ConfigRecords of type 32) take effect at each group's next heartbeat."""
        self.group_configs.on_metadata_update(delta, image)
        self.runtime.on_metadata_update(delta, image)
        if delta.topics_delta is not None and delta.topics_delta.topology_changed and self.shards:
            topics = topic_partition_counts(image)
            for index, shard in list(self.shards.items()):
                before = shard.snapshot([])
                changed = shard.consumer_groups.on_metadata_change(topics)
                share = shard.share_groups.on_metadata_change(topics)
                result = CoordinatorResult(records=changed.records + share.records, timers=changed.timers + share.timers)
                if result.records or result.timers:
                    self._execute(index, result, before)

    # The runtime's CoordinatorShardLoader.

    def new_shard(self, index: int, leader_epoch: int) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(
            self._group_config,
            offset_metadata_max_bytes=self._config.offset_metadata_max_bytes,
            offsets_retention_ms=self._config.offsets_retention_minutes * 60_000,
            consumer_session_timeout_ms=self._config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=self._config.group_consumer_heartbeat_interval_ms,
            consumer_max_size=self._config.group_consumer_max_size,
            group_configs=self.group_configs,
        )
        partition = self._replica_manager.get_partition(GROUP_METADATA_TOPIC, index)
        if partition is not None:
            shard.offsets.loaded_high_watermark = partition.log.high_watermark
        return shard

    def replay(self, shard: GroupCoordinatorShard, header: BatchHeader, batch: memoryview, records: list[Record]) -> int:
        """Group records take effect at once; offsets records and markers once committed, as
        OffsetFetch reads them."""
        offsets = shard.offsets
        if header.is_control:
            # A transaction marker settles the offsets its producer committed in the transaction.
            marker = read_marker(batch, header)
            if marker is not None:
                offsets.replay_loaded(header.last_offset, partial(offsets.complete_transaction, header.producer_id, marker.commit))
            return 0
        applied = 0
        for record in records:
            try:
                decoded = decode_record(record.key, record.value)  # type: ignore[arg-type]
            except UnknownRecordType:
                continue
            if header.is_transactional and isinstance(decoded.key, OffsetCommitKey):
                offsets.replay_loaded(header.last_offset, partial(offsets.replay_transactional, header.producer_id, decoded.key, decoded.value, record.offset))  # type: ignore[arg-type]
            elif isinstance(decoded.key, OffsetCommitKey):
                offsets.replay_loaded(header.last_offset, partial(shard.replay, decoded.key, decoded.value, record.offset))
            else:
                shard.replay(decoded.key, decoded.value, record.offset)
            applied += 1
        return applied

    def on_loaded(self, index: int, shard: GroupCoordinatorShard) -> None:
        if shard.offsets.has_uncommitted:
            self._wait_committed(index, shard)
        self._execute(index, shard.on_loaded(now_ms()))
        log.info(
            "group_coordinator.loaded",
            partition=index,
            groups=len(shard.groups.groups),
            consumer_groups=len(shard.consumer_groups.groups),
            share_groups=len(shard.share_groups.groups),
        )

    def _wait_committed(self, index: int, shard: GroupCoordinatorShard) -> None:
        """The offsets the load held back become visible once the followers have the whole log it
        read; until then a stable fetch and every later write wait for them, as in Kafka."""
        partition = self._replica_manager.get_partition(GROUP_METADATA_TOPIC, index)
        assert partition is not None, "a load that held records back read them from the partition"

        def committed(error: int) -> None:
            if not error:
                shard.offsets.update_last_committed_offset()

        self.runtime.wait_committed(index, partition.log.log_end_offset, committed)

    def on_unloaded(self, index: int, shard: GroupCoordinatorShard) -> None:
        for group in shard.groups.groups.values():
            for member in group.members.values():
                for waiting in (member.awaiting_join, member.awaiting_sync):
                    if isinstance(waiting, asyncio.Future) and not waiting.done():
                        waiting.set_exception(CoordinatorNotAvailable(ErrorCode.not_coordinator))
        for key in [k for k in self._timers if self.partition_for(k[1]) == index]:
            self._timers.pop(key).cancel()

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use, as Kafka does on the first FindCoordinator."""
        cfg = self._config
        await self.runtime.ensure_topic(
            self._controller,
            cfg.offsets_topic_num_partitions,
            cfg.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(cfg.offsets_topic_segment_bytes)},
        )

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        """The loaded shard coordinating ``group_id``, or CoordinatorNotAvailable with Kafka's error."""
        return self.runtime.shard_of(group_id)

    async def wait_loaded(self, group_id: str, timeout_s: float) -> None:
        await self.runtime.wait_loaded(group_id, timeout_s)

    @property
    def loading(self) -> bool:
        return self.runtime.loading

    def coordinator_error(self, group_id: str) -> int:
        return self.runtime.coordinator_error(group_id)

    def last_pending_write(self, group_id: str) -> int | None:
        return self.runtime.last_pending_write(group_id)

    def writes_settled_through(self, group_id: str, required_offset: int) -> bool:
        return self.runtime.writes_settled_through(group_id, required_offset)

    # -- running shard operations ------------------------------------------------------------------

    def execute(self, group_id: str, result: CoordinatorResult, before: GroupSnapshot | None) -> Written:
        """Write what a shard operation on ``group_id`` produced; ``before``: the groups it may
        have changed as they were before it (None: it changed no group state)."""
        return self._execute(self.partition_for(group_id), result, before)

    def execute_share_group(self, group_id: str, result: ShareGroupResult[Any], before: GroupSnapshot) -> Written:
        """Write what a share group operation produced; once written, initialize the share-group
        state of the partitions it found uninitialized (the answer does not wait for that)."""
        written = self.execute(group_id, CoordinatorResult(records=result.records, timers=result.timers), before)
        request = result.initialize
        if request is None or self.share_state_initializer is None:
            return written

        def initialize(error: int) -> None:
            if not error:
                task = asyncio.get_running_loop().create_task(self._initialize_share_group_state(request))
                self._initializing.add(task)
                task.add_done_callback(self._initializing.discard)

        if isinstance(written, asyncio.Future):
            written.add_done_callback(lambda f: initialize(ErrorCode.unknown_server_error if f.cancelled() or f.exception() is not None else f.result()))
        else:
            initialize(written)
        return written

    async def _initialize_share_group_state(self, request: InitializeShareGroupState) -> None:
        """InitializeShareGroupState, then its outcome written: the partitions become assignable,
        or stop initializing so that a later heartbeat asks again (Kafka's
        GroupCoordinatorService.persisterInitialize)."""
        assert self.share_state_initializer is not None
        try:
            done = await self.share_state_initializer.initialize_share_group_state(request)
        except Exception:  # the share coordinator's failure must not take the group coordinator down
            log.exception("group_coordinator.share_state_initialize_failed", group=request.group_id)
            done = False
        try:
            shard = self.shard_for(request.group_id)
        except CoordinatorNotAvailable:
            return  # the partition moved: the new coordinator's heartbeats ask again
        before = shard.snapshot([request.group_id])
        if done:
            outcome = shard.share_groups.initialize_share_group_state(request.group_id, request.partitions)
        else:
            outcome = shard.share_groups.uninitialize_share_group_state(request.group_id, request.partitions)
        self.execute(request.group_id, CoordinatorResult(records=outcome.records, timers=outcome.timers), before)

    def _execute(self, index: int, result: CoordinatorResult, before: GroupSnapshot | None = None) -> Written:
        """Write the records and arm the timers; answer once the records are replicated.

        Returns the write's error code (0: written), or a future of it while the partition's
        followers have yet to copy the records: a commit is acknowledged only when it would
        survive the leader's death, as Kafka's coordinator runtime waits for the high watermark.
        A write that fails takes the groups back to ``before``, as Kafka's timeline does.
        """
        self._arm(result.timers)
        written_at: list[int] = []  # the batch's base offset, once appended

        def settle(error: int) -> int:
            error = WRITE_ERRORS.get(error, error)
            self._settle(index, result, error, written_at[0] if written_at else -1)
            if error and before is not None:
                self._forget_answered(index, before)
            return error

        def revert(error: int) -> None:
            if before is not None:
                self._revert(index, before, result, WRITE_ERRORS.get(error, error))

        return self.runtime.write(index, self._batch(result.records), self._config.offsets_commit_timeout_ms, settle, revert, written_at.append)

    def _arm(self, timers: list[TimerAction]) -> None:
        loop = asyncio.get_running_loop()
        for timer in timers:
            old = self._timers.pop(timer.key, None)
            if old is not None:
                old.cancel()
            if not isinstance(timer, CancelTimer):
                delay = max(timer.deadline_ms - now_ms(), 0) / 1000
                self._timers[timer.key] = loop.call_later(delay, self._fire, timer.key)

    def _revert(self, index: int, before: GroupSnapshot, result: CoordinatorResult, error: int) -> None:
        """Put the groups a failed write changed back as they were. The requests it answers are
        told its error when it settles; those that came to wait in the groups since (a JoinGroup
        that wrote nothing) are told now, and the groups' timers are armed for their old state."""
        shard = self.shards.get(index)
        if shard is None:
            return
        answered = {respond.responder for respond in result.responses}
        waiting = {r for group_id in before.group_ids for r in shard.groups.responders(group_id)}
        shard.revert(before)
        for group_id in before.group_ids:
            waiting -= shard.groups.responders(group_id)
        for responder in waiting - answered:
            if isinstance(responder, asyncio.Future) and not responder.done():
                responder.set_exception(CoordinatorNotAvailable(error))
        self._arm(shard.on_reverted(before.group_ids, now_ms()).timers)
        log.info("group_coordinator.write_reverted", partition=index, groups=sorted(before.group_ids)[:10], error=ErrorCode(error).name)

    def _forget_answered(self, index: int, before: GroupSnapshot) -> None:
        """Requests a reverted group still holds that failed writes have answered wait no more."""
        shard = self.shards.get(index)
        if shard is None:
            return
        for group_id in before.group_ids:
            answered = {r for r in shard.groups.responders(group_id) if isinstance(r, asyncio.Future) and r.done()}
            shard.groups.forget_responders(group_id, answered)

    def _settle(self, index: int, result: CoordinatorResult, error: int, base_offset: int) -> None:
        shard = self.shards.get(index)
        if not error and shard is not None:
            # Offsets change in memory only once their records are written; group state
            # changes as the shard decides (a failed write is answered with an error).
            for i, (key, value) in enumerate(result.records):
                if isinstance(key, OffsetCommitKey):
                    shard.replay(key, value, base_offset + i)
        for respond in result.responses:
            self._complete(respond, error)

    @staticmethod
    def _batch(records: list[tuple[Any, Any]], producer: tuple[int, int] | None = None) -> bytes | None:
        if not records:
            return None
        timestamp = now_ms()
        entries = [(encode_key(k), None if v is None else encode_value(v), (), timestamp) for k, v in records]
        if producer is None:
            return build_batch(entries)
        # TxnOffsetCommit: the producer's transactional batch, settled by its transaction's marker.
        return build_batch(entries, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)

    # -- transactions ------------------------------------------------------------------------------

    def execute_transactional(self, group_id: str, producer_id: int, producer_epoch: int, records: list[tuple[Any, Any]]) -> Written:
        """Write TxnOffsetCommit records in the producer's transaction; they stay pending until its
        marker, and are answered once replicated."""
        index = self.partition_for(group_id)
        written_at: list[int] = []  # the batch's base offset, once appended

        def settle(error: int) -> int:
            # The log's producer-state checks are answered as they are.
            error = error if error in PRODUCER_ERRORS else WRITE_ERRORS.get(error, error)
            shard = self.shards.get(index)
            if not error and shard is not None:
                for i, (key, value) in enumerate(records):
                    shard.offsets.replay_transactional(producer_id, key, value, written_at[0] + i)
            return error

        return self.runtime.write(index, self._batch(records, (producer_id, producer_epoch)), self._config.offsets_commit_timeout_ms, settle, appended=written_at.append)

    def complete_transaction(self, index: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timeout_ms: int) -> Written:
        """WriteTxnMarkers for ``__consumer_offsets`` partition ``index`` (Kafka's completeTransaction):
        the marker is one more write of the shard, so it settles the producer's pending offsets in
        log order, after every TxnOffsetCommit written before it and only once replicated, and a
        partition still loading refuses it rather than replaying past it. The error code (0:
        written and replicated), or its future; a partition this node does not coordinate answers
        NOT_LEADER_OR_FOLLOWER, which the transaction coordinator retries (Kafka's mapping)."""
        batch = build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, now_ms())

        def settle(error: int) -> int:
            shard = self.shards.get(index)
            if not error and shard is not None:
                settled = shard.offsets.complete_transaction(producer_id, commit)
                if settled:
                    log.debug("group_coordinator.txn_offsets", partition=index, producer_id=producer_id, committed=commit, offsets=settled)
            return MARKER_ERRORS.get(error, error)

        return self.runtime.write(index, batch, timeout_ms, settle)

    @staticmethod
    def _complete(respond: Respond, append_error: int) -> None:
        future = respond.responder
        if not isinstance(future, asyncio.Future) or future.done():
            return
        response = respond.response
        if append_error and response.error_code == 0:
            if isinstance(response, JoinGroupResponse):
                response = JoinGroupResponse(append_error, member_id=response.member_id)
            elif isinstance(response, SyncGroupResponse):
                response = SyncGroupResponse(append_error)
            else:
                response = ErrorResponse(append_error)
        future.set_result(response)

    def _fire(self, key: tuple[str, ...]) -> None:
        self._timers.pop(key, None)
        index = self.partition_for(key[1])
        shard = self.shards.get(index)
        if shard is None:
            return
        before = shard.members_of(key[1])
        snapshot = shard.snapshot([key[1]])
        self._execute(index, shard.on_timer(key, now_ms()), snapshot)
        gone = before - shard.members_of(key[1])
        if gone:
            log.info("group.members_expired", group=key[1], timer=key[0], members=sorted(gone))

    # -- background --------------------------------------------------------------------------------

    def cleanup_group_metadata(self) -> None:
        """offsets.retention.check.interval.ms: expire offsets and drop empty groups with none left."""
        now = now_ms()
        for index, shard in list(self.shards.items()):
            before = shard.snapshot()
            records = shard.cleanup(now)
            if records:
                self._execute(index, CoordinatorResult(records=records), before)
                log.info("group_coordinator.offsets_expired", partition=index, records=len(records))

    def shutdown(self) -> None:
        # The runtime first: the writes it fails revert their groups, which arms timers again.
        self.runtime.shutdown()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._initializing:
            task.cancel()
