"""GroupCoordinator: the group coordinator shards on the coordinator runtime.

The coordinator of group g is the leader of ``__consumer_offsets`` partition
``abs(java_hash(g)) % offsets.topic.num.partitions``; the CoordinatorRuntime loads a shard
for each partition this node leads. Each call runs a shard operation, writes the records it
produced to the partition (one batch) through the runtime, arms the timers it asked for,
and completes the waiting requests once the write is replicated (or failed).

A share group heartbeat may also find subscribed partitions with no share-group state yet:
once its records are written, the coordinator asks the share coordinator to initialize them
(InitializeShareGroupState) and writes the outcome, as Kafka's GroupCoordinatorService does.
The share group offsets admin APIs (describe, alter, delete, and DeleteGroups of a share group)
go the same way through the persister (Kafka's Persister: broker/default_state_persister.py).

A streams group heartbeat may find internal topics (repartition, changelog) its topology needs
that do not exist: they are created through the controller, as Kafka's
AutoTopicCreationManager.createStreamsInternalTopics does, while the answer tells the member
they are missing; a later heartbeat finds them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Awaitable, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.expiring_error_cache import ExpiringErrorCache
from broker.coordinator.coordinator_runtime import WRITE_ERRORS, CoordinatorNotAvailable, CoordinatorRuntime, Written, now_ms
from broker.controller.replication_control_manager import CreatableTopic
from broker.group import streams_group_records
from broker.group.coordinator_records import CoordinatorRecord, OffsetCommitKey, UnknownRecordType, decode_record, encode_key, encode_value
from broker.group.group_config import GroupConfigBounds, GroupConfigManager
from broker.group.group_coordinator_shard import GroupCoordinatorShard, GroupSnapshot
from broker.group.share_group_manager import (
    AlterShareGroupOffsets,
    AlteredTopic,
    DeletedTopic,
    DescribedPartitionOffsets,
    DescribedShareGroupOffsets,
    DescribedTopicOffsets,
    InitializeShareGroupState,
    ShareGroupResult,
    described_partition,
    lag_computable,
)
from broker.share.share_group_configs import ShareGroupConfigs
from broker.group.streams_group import InternalTopic
from broker.group.streams_group_configs import StreamsGroupConfigs
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
from storage.producer_state_manager import VerificationGuard
from protocol.control_records import build_control_batch, read_marker
from protocol.record_batch import NO_SEQUENCE, BatchHeader
from protocol.records import Record, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage

log = structlog.get_logger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"


def _decode(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """A record of the partition: the streams group records have their own codec."""
    try:
        return decode_record(key, value)
    except UnknownRecordType as e:
        if not streams_group_records.is_streams_record_type(e.record_type):
            raise
        return CoordinatorRecord(*streams_group_records.decode_record(key, value))


def _encode(key: Any, value: Any) -> tuple[bytes, bytes | None]:
    if isinstance(key, streams_group_records.STREAMS_GROUP_KEY_TYPES):
        return streams_group_records.encode_key(key), None if value is None else streams_group_records.encode_value(value)
    return encode_key(key), None if value is None else encode_value(value)


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


class StateSummary(Protocol):
    error: int
    start_offset: int
    leader_epoch: int
    delivery_complete_count: int


SharePartition = tuple[uuid.UUID, int]


class ShareGroupStatePersister(ShareGroupStateInitializer, Protocol):
    """Kafka's Persister as the share group offsets admin APIs use it (broker/default_state_persister.py):
    each share partition's error, or its state summary."""

    def initialize_state(self, group_id: str, state_epoch: int, start_offsets: Mapping[SharePartition, int]) -> Awaitable[dict[SharePartition, int]]: ...

    def read_state_summary(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> Awaitable[Mapping[SharePartition, StateSummary]]: ...

    def delete_state(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> Awaitable[dict[SharePartition, int]]: ...


class LatestOffsets(Protocol):
    """Kafka's PartitionMetadataClient.listLatestOffsets: each (topic, partition)'s (error, high watermark)."""

    def __call__(self, partitions: Iterable[tuple[str, int]]) -> Awaitable[dict[tuple[str, int], tuple[int, int]]]: ...


# Errors.message() of the errors the share group offsets APIs answer with, and of those a CreateTopics
# of streams internal topics may get: Kafka sends an error's default message where it has none of its own.
ERROR_MESSAGES: dict[int, str] = {
    ErrorCode.unknown_server_error: "The server experienced an unexpected error when processing the request.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.leader_not_available: "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    ErrorCode.not_leader_or_follower: "For requests intended only for the leader, this error indicates that the broker is not the current leader. "
    "For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition.",
    ErrorCode.request_timed_out: "The request timed out.",
    ErrorCode.coordinator_load_in_progress: "The coordinator is loading and hence can't process requests.",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.invalid_group_id: "The group id is invalid.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.unsupported_version: "The version of API is not supported.",
    ErrorCode.invalid_request: "This most likely occurs because of a request being malformed by the client library or the message was sent to an "
    "incompatible broker. See the broker logs for more details.",
    ErrorCode.kafka_storage_error: "Disk error when trying to access log file on the disk.",
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.fenced_leader_epoch: "The leader epoch in the request is older than the epoch on the broker.",
    ErrorCode.fenced_state_epoch: "The coordinator rejected the request because the state epoch did not match.",
    ErrorCode.invalid_topic_exception: "The request attempted to perform an operation on an invalid topic.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.topic_already_exists: "Topic with this name already exists.",
    ErrorCode.invalid_partitions: "Number of partitions is below 1.",
    ErrorCode.invalid_replication_factor: "Replication factor is below 1 or larger than the number of available brokers.",
    ErrorCode.invalid_replica_assignment: "Replica assignment is invalid.",
    ErrorCode.invalid_config: "Configuration is invalid.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
    ErrorCode.policy_violation: "Request parameters do not satisfy the configured policy.",
    ErrorCode.throttling_quota_exceeded: "The throttling quota has been exceeded.",
}


def error_message(error: int) -> str | None:
    return ERROR_MESSAGES.get(error) if error else None


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
        self.share_state_initializer: ShareGroupStatePersister | None = None
        self._initializing: set[asyncio.Task[None]] = set()
        # Streams groups' internal topics being created, by name: a topic is asked for once at a time.
        self._creating: dict[str, asyncio.Task[None]] = {}
        # Why their creation failed, kept for a time to live; a topic is not asked for again meanwhile.
        self._creation_errors = ExpiringErrorCache()

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
            share_session_timeout_ms=self._config.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=self._config.group_share_heartbeat_interval_ms,
            share_max_size=self._config.group_share_max_size,
            share_group_configs=ShareGroupConfigs.of_metadata(self._config, self._metadata),
            streams_session_timeout_ms=self._config.group_streams_session_timeout_ms,
            streams_heartbeat_interval_ms=self._config.group_streams_heartbeat_interval_ms,
            streams_max_size=self._config.group_streams_max_size,
            streams_num_standby_replicas=self._config.group_streams_num_standby_replicas,
            streams_acceptable_recovery_lag=self._config.group_streams_acceptable_recovery_lag,
            streams_task_offset_interval_ms=self._config.group_streams_task_offset_interval_ms,
            streams_group_configs=StreamsGroupConfigs.of_metadata(self._config, self._metadata),
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
                decoded = _decode(record.key, record.value)  # type: ignore[arg-type]
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

    def create_streams_internal_topics(self, topics: Mapping[str, InternalTopic], error_ttl_ms: int) -> None:
        """Kafka's createStreamsInternalTopics: ask the controller for the internal topics a
        streams group's topology needs, each once at a time; the answer does not wait for them.
        A topic's creation error is kept ``error_ttl_ms`` (Kafka: twice the group's heartbeat
        interval), and the topic is not asked for again until it expires."""
        now = now_ms()
        wanted = [t for name, t in topics.items() if name not in self._creating and not self._creation_errors.has_error(name, now)]
        if not wanted:
            return
        task = asyncio.get_running_loop().create_task(self._create_internal_topics(wanted, error_ttl_ms))
        for t in wanted:
            self._creating[t.name] = task

    def streams_internal_topic_creation_errors(self, topics: Iterable[str]) -> dict[str, str]:
        """Kafka's getStreamsInternalTopicCreationErrors: the kept creation errors of these topics."""
        return self._creation_errors.errors_for_topics(topics, now_ms())

    async def _create_internal_topics(self, topics: list[InternalTopic], error_ttl_ms: int) -> None:
        try:
            creatable = [CreatableTopic(t.name, t.num_partitions, t.replication_factor, None, dict(t.configs)) for t in topics]
            # Every error is kept, TOPIC_ALREADY_EXISTS too: Kafka keeps whatever is not NONE.
            results = await self._controller.create_topic_results(creatable)
            failed = {name: message or error_message(code) or ErrorCode(code).name for name, (code, message) in results.items() if code}
            for name, error in failed.items():
                self._creation_errors.put(name, error, error_ttl_ms, now_ms())
            if failed:
                log.warning("group_coordinator.streams_internal_topics_failed", topics=failed)
            else:
                log.info("group_coordinator.streams_internal_topics_created", topics=sorted(t.name for t in topics))
        except Exception as e:
            log.exception("group_coordinator.streams_internal_topics_failed", topics=sorted(t.name for t in topics))
            for t in topics:
                self._creation_errors.put(t.name, str(e) or repr(e), error_ttl_ms, now_ms())
        finally:
            for t in topics:
                self._creating.pop(t.name, None)

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

    # -- share group offsets (Kafka's describeShareGroupOffsets, alterShareGroupOffsets, -------------
    # -- deleteShareGroupOffsets and deleteGroups of share groups) ---------------------------------------

    async def describe_share_group_offsets(self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None, latest_offsets: LatestOffsets) -> DescribedShareGroupOffsets:
        """Each share partition's start offset and lag, from the share coordinator's state summary;
        ``topics`` None: every partition the group has initialized (which only the group's
        coordinator knows). A topic that does not exist is answered with start offsets -1."""
        image = self._metadata.image
        ids = {name: topic.topic_id for name, topic in image.topics.items()}
        names = {topic_id: name for name, topic_id in ids.items()}
        unknown: list[DescribedTopicOffsets] = []
        wanted: dict[uuid.UUID, list[int]] = {}
        if topics is None:
            try:
                shard = self.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                return DescribedShareGroupOffsets(e.error_code, error_message(e.error_code))
            wanted = {t: sorted(ps) for t, ps in shard.share_groups.initialized_partitions(group_id).items() if t in names}
        else:
            for name, partitions in topics:
                if name in ids:
                    wanted.setdefault(ids[name], []).extend(partitions)
                else:
                    unknown.append(DescribedTopicOffsets(name, None, tuple(DescribedPartitionOffsets(p, start_offset=-1) for p in partitions)))
        if not wanted:
            return DescribedShareGroupOffsets(topics=tuple(unknown))
        try:
            summaries = await self._persister().read_state_summary(group_id, wanted)
        except Exception:  # the persister's failure is the request's, not the coordinator's
            log.exception("group_coordinator.share_state_summary_failed", group=group_id)
            return DescribedShareGroupOffsets(ErrorCode.unknown_server_error, error_message(ErrorCode.unknown_server_error))
        computable = [(names[t], p) for (t, p), s in summaries.items() if lag_computable(s.error, s.start_offset, s.delivery_complete_count)]
        ends = await latest_offsets(computable) if computable else {}
        described = []
        for topic_id, partitions in wanted.items():
            offsets = []
            for p in partitions:
                s = summaries[(topic_id, p)]
                d = described_partition(p, s.error, s.start_offset, s.leader_epoch, s.delivery_complete_count, ends.get((names[topic_id], p)))
                offsets.append(replace(d, error_message=error_message(d.error_code)))
            described.append(DescribedTopicOffsets(names[topic_id], topic_id, tuple(offsets)))
        return DescribedShareGroupOffsets(topics=tuple(described + unknown))

    async def alter_share_group_offsets(self, group_id: str, topics: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> AlterShareGroupOffsets:
        """An empty share group's start offsets set: the partitions are recorded as initializing,
        initialized on the share coordinator at the new offsets, then recorded as initialized
        (those that failed, as not initializing), as Kafka's persisterInitialize."""
        if not group_id:
            return AlterShareGroupOffsets(ErrorCode.invalid_group_id, error_message(ErrorCode.invalid_group_id))
        try:
            shard = self.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            return AlterShareGroupOffsets(e.error_code, error_message(e.error_code))
        before = shard.snapshot([group_id])
        result = shard.share_groups.alter_offsets(group_id, topics, topic_partition_counts(self._metadata.image))
        altered = result.response
        assert altered is not None
        if altered.error_code:
            return altered
        error = await self._written(self.execute(group_id, CoordinatorResult(records=result.records), before))
        if error:
            return AlterShareGroupOffsets(error, error_message(error))
        if not altered.start_offsets:
            return altered
        try:
            errors = await self._persister().initialize_state(group_id, altered.state_epoch, altered.start_offsets)
        except Exception:  # the persister's failure is the request's, not the coordinator's
            log.exception("group_coordinator.share_state_initialize_failed", group=group_id)
            errors = dict.fromkeys(altered.start_offsets, int(ErrorCode.unknown_server_error))
        done: dict[uuid.UUID, set[int]] = {}
        failed: dict[uuid.UUID, set[int]] = {}
        for (topic_id, p), code in errors.items():
            (failed if code else done).setdefault(topic_id, set()).add(p)
        await self._settle_share_group_initialization(group_id, done, failed)
        return replace(
            altered,
            topics=tuple(
                AlteredTopic(
                    t.topic_name,
                    t.topic_id,
                    tuple(
                        replace(o, error_code=code, error_message=error_message(code))
                        if t.topic_id is not None and (code := errors.get((t.topic_id, o.partition), 0))
                        else o
                        for o in t.partitions
                    ),
                )
                for t in altered.topics
            ),
        )

    async def delete_share_group_offsets(self, group_id: str, topic_names: Sequence[str]) -> tuple[int, str | None, tuple[DeletedTopic, ...]]:
        """An empty share group forgets topics: their share-group state is deleted on the share
        coordinator, then the group records them no longer deleting. The group-level error and
        message, and each topic's outcome (deleted ones first, as Kafka answers)."""
        if not group_id:
            return ErrorCode.invalid_group_id, error_message(ErrorCode.invalid_group_id), ()
        try:
            shard = self.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            return e.error_code, error_message(e.error_code), ()
        topics = topic_partition_counts(self._metadata.image)
        before = shard.snapshot([group_id])
        result = shard.share_groups.delete_offsets(group_id, topic_names, topics)
        plan = result.response
        assert plan is not None
        if plan.error_code:
            return plan.error_code, plan.error_message, ()
        error = await self._written(self.execute(group_id, CoordinatorResult(records=result.records), before))
        if error:
            return error, error_message(error), ()
        if not plan.to_delete:
            return 0, None, plan.refused
        try:
            errors = await self._persister().delete_state(group_id, {t: sorted(ps) for t, (_, ps) in plan.to_delete.items()})
        except Exception:  # the persister's failure is the request's, not the coordinator's
            log.exception("group_coordinator.share_state_delete_failed", group=group_id)
            return ErrorCode.unknown_server_error, error_message(ErrorCode.unknown_server_error), ()
        refused = list(plan.refused)
        deleted: list[DeletedTopic] = []
        for topic_id, (name, _) in plan.to_delete.items():
            code = next((c for (t, _), c in errors.items() if t == topic_id and c), 0)
            (refused if code else deleted).append(DeletedTopic(name, topic_id, code, error_message(code)))
        if deleted:
            try:
                shard = self.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                return e.error_code, error_message(e.error_code), ()
            before = shard.snapshot([group_id])
            completed = shard.share_groups.complete_delete_offsets(group_id, [t.topic_id for t in deleted if t.topic_id is not None], topics)
            error = await self._written(self.execute(group_id, CoordinatorResult(records=completed.records), before))
            if error:
                return error, error_message(error), ()
        return 0, None, tuple(deleted + refused)

    async def delete_share_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: only an empty one goes; its share partitions' state is
        deleted on the share coordinator first (recorded as deleting meanwhile), then the group and
        its records, as any group's."""
        try:
            shard = self.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            return e.error_code
        before = shard.snapshot([group_id])
        result = shard.share_groups.delete_group_state(group_id, topic_partition_counts(self._metadata.image))
        plan = result.response
        assert plan is not None
        if plan.error_code:
            return plan.error_code
        error = await self._written(self.execute(group_id, CoordinatorResult(records=result.records), before))
        if error:
            return error
        if plan.to_delete:
            try:
                errors = await self._persister().delete_state(group_id, {t: sorted(ps) for t, ps in plan.to_delete.items()})
            except Exception:  # the persister's failure is the request's, not the coordinator's
                log.exception("group_coordinator.share_state_delete_failed", group=group_id)
                return ErrorCode.unknown_server_error
            failed = [code for code in errors.values() if code]
            if failed:
                log.warning("group_coordinator.share_group_delete_failed", group=group_id, error=ErrorCode(failed[0]).name)
                return failed[0]
        try:
            shard = self.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            return e.error_code
        before = shard.snapshot([group_id])
        errors_by_group, deleted = shard.delete_groups([group_id], now_ms())
        return errors_by_group[group_id] or await self._written(self.execute(group_id, deleted, before))

    def _persister(self) -> ShareGroupStatePersister:
        if self.share_state_initializer is None:
            raise RuntimeError("no share group state persister")
        return self.share_state_initializer

    async def _settle_share_group_initialization(self, group_id: str, done: Mapping[uuid.UUID, Iterable[int]], failed: Mapping[uuid.UUID, Iterable[int]]) -> None:
        """Kafka's handlePersisterInitializeResponse: initialized partitions become assignable, the
        others stop initializing (a later heartbeat asks again)."""
        try:
            shard = self.shard_for(group_id)
        except CoordinatorNotAvailable:
            return  # the partition moved: the new coordinator's heartbeats ask again
        before = shard.snapshot([group_id])
        records = []
        if done:
            records += shard.share_groups.initialize_share_group_state(group_id, done).records
        if failed:
            records += shard.share_groups.uninitialize_share_group_state(group_id, failed).records
        if records:
            await self._written(self.execute(group_id, CoordinatorResult(records=records), before))

    @staticmethod
    async def _written(written: Written) -> int:
        return await written if isinstance(written, asyncio.Future) else written

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
        entries = [(*_encode(k, v), (), timestamp) for k, v in records]
        if producer is None:
            return build_batch(entries)
        # TxnOffsetCommit: the producer's transactional batch, settled by its transaction's marker.
        return build_batch(entries, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)

    # -- transactions ------------------------------------------------------------------------------

    def maybe_start_transaction_verification(self, group_id: str, producer_id: int, producer_epoch: int) -> VerificationGuard | None:
        """KIP-890 for a TxnOffsetCommit, as Kafka's CoordinatorPartitionWriter: the guard the
        group's ``__consumer_offsets`` batch must carry (the sentinel when the producer's transaction
        is open there already, so its coordinator need not be asked), or None when this node does
        not lead the partition (the commit answers NOT_COORDINATOR then)."""
        partition = self._replica_manager.get_partition(GROUP_METADATA_TOPIC, self.partition_for(group_id))
        if partition is None or not partition.is_leader:
            return None
        return partition.maybe_start_transaction_verification(producer_id, NO_SEQUENCE, producer_epoch, now_ms())

    def execute_transactional(
        self, group_id: str, producer_id: int, producer_epoch: int, records: list[tuple[Any, Any]], verification_guard: VerificationGuard | None = None
    ) -> Written:
        """Write TxnOffsetCommit records in the producer's transaction; they stay pending until its
        marker, and are answered once replicated. ``verification_guard``: the one
        maybe_start_transaction_verification gave, when the transaction was verified."""
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

        batch = self._batch(records, (producer_id, producer_epoch))
        return self.runtime.write(index, batch, self._config.offsets_commit_timeout_ms, settle, appended=written_at.append, verification_guard=verification_guard)

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
        for creating in set(self._creating.values()):
            creating.cancel()
