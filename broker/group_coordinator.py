"""GroupCoordinator: the asyncio shell around the sans-IO group coordinator shards.

The coordinator of group g is the leader of ``__consumer_offsets`` partition
``abs(java_hash(g)) % offsets.topic.num.partitions``. For each partition this node leads,
a shard is loaded by replaying the partition's records; until that finishes its groups
answer COORDINATOR_LOAD_IN_PROGRESS. Each call runs a shard operation, appends the
records it produced to the partition (one batch), then completes the waiting requests
and arms the timers it asked for, in that order, all on the event loop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator_partition import create_internal_topic, replay_batches
from broker.group.coordinator_records import CoordinatorRecordError, OffsetCommitKey, UnknownRecordType, decode_record, encode_key, encode_value
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import CancelTimer, CoordinatorResult, ErrorResponse, GroupConfig, JoinGroupResponse, Respond, SyncGroupResponse
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ACKS_ALL, ReplicaManager
from protocol.control_records import read_marker
from protocol.records import InvalidRecordError, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from storage.errors import StorageError
from storage.log import AppendOrigin

log = structlog.get_logger()

GROUP_METADATA_TOPIC = "__consumer_offsets"


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def topic_partition_counts(image: MetadataImage) -> dict[str, tuple[uuid.UUID, int]]:
    """What consumer-protocol groups see of the cluster: each topic's id and partition count."""
    return {name: (topic.topic_id, len(topic.partitions)) for name, topic in image.topics.items()}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Errors of the producer-state checks a transactional offset commit answers as they are.
PRODUCER_ERRORS = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced, ErrorCode.invalid_txn_state, ErrorCode.unknown_producer_id})


# Kafka's normalizeException for coordinator writes: what a client retries, and against whom.
WRITE_ERRORS: dict[int, int] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}

# An error code now, or later once the write is replicated.
Written = int | asyncio.Future[int]


class CoordinatorNotAvailable(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(ErrorCode(error_code).name)
        self.error_code = error_code


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, controller: AutoTopicCreationManager, metadata: MetadataCache, replica_manager: ReplicaManager) -> None:
        self._config = config
        self._controller = controller
        self._metadata = metadata
        self._rm = replica_manager
        self._num_partitions = config.offsets_topic_num_partitions
        self._group_config = GroupConfig(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size,
        )
        self.shards: dict[int, GroupCoordinatorShard] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}  # leader epoch of each partition loaded or loading
        self._timers: dict[tuple[str, ...], asyncio.TimerHandle] = {}
        self._replicating: set[asyncio.Task[None]] = set()  # writes waiting for the followers
        self._create_lock = asyncio.Lock()

    # -- partitions and loading --------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._num_partitions)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: load the shard of each offsets partition this node now leads
        (again, if its leader epoch changed), unload those it stopped leading. Only the
        delta's changes of ``__consumer_offsets`` are looked at."""
        topics_delta = delta.topics_delta
        if topics_delta is None:
            return
        topic = image.topics.get(GROUP_METADATA_TOPIC)
        if topic is not None:
            self._num_partitions = len(topic.partitions)
        if topics_delta.changed_topic(GROUP_METADATA_TOPIC) is not None or any(t.name == GROUP_METADATA_TOPIC for t in topics_delta.deleted_topics):
            changes = topics_delta.local_changes(self._metadata.node_id).of_topic(GROUP_METADATA_TOPIC)
            for _, index in list(changes.deletes) + list(changes.followers):
                self._resign(index)
            for (_, index), info in changes.leaders.items():
                epoch = info.registration.leader_epoch
                if self._epochs.get(index) != epoch:
                    self._resign(index)
                    self._epochs[index] = epoch
                    self._loading[index] = asyncio.get_running_loop().create_task(self._load(index), name=f"load-{GROUP_METADATA_TOPIC}-{index}")
        if topics_delta.topology_changed and self.shards:
            # Consumer-protocol groups recompute their targets when a subscribed topic changes.
            topics = topic_partition_counts(image)
            for index, shard in self.shards.items():
                changed = shard.consumer_groups.on_metadata_change(topics)
                if changed.records or changed.timers:
                    self._execute(index, CoordinatorResult(records=changed.records, timers=changed.timers))

    def _resign(self, index: int) -> None:
        """Stop coordinating an offsets partition: drop its shard, or stop loading it."""
        self._epochs.pop(index, None)
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading.cancel()
        if index in self.shards:
            self._unload(index)

    async def _load(self, index: int) -> None:
        started = time.monotonic()
        shard = GroupCoordinatorShard(
            self._group_config,
            offset_metadata_max_bytes=self._config.offset_metadata_max_bytes,
            offsets_retention_ms=self._config.offsets_retention_minutes * 60_000,
            consumer_session_timeout_ms=self._config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=self._config.group_consumer_heartbeat_interval_ms,
            consumer_max_size=self._config.group_consumer_max_size,
        )
        partition = self._rm.get_partition(GROUP_METADATA_TOPIC, index)
        records = skipped = 0
        try:
            if partition is not None:
                # To the log end, as Kafka's coordinator loader reads: a new leader's own high
                # watermark may still lag the one its predecessor acknowledged commits under.
                async for header, batch, keyed in replay_batches(partition.log, partition.log.log_end_offset):
                    if header.is_control:
                        # A transaction marker settles the offsets its producer committed in the transaction.
                        marker = read_marker(batch, header)
                        if marker is not None and header.base_offset >= partition.log.log_start_offset:
                            shard.offsets.complete_transaction(header.producer_id, marker.commit)
                        continue
                    for record in keyed:
                        try:
                            decoded = decode_record(record.key, record.value)  # type: ignore[arg-type]
                        except UnknownRecordType:
                            skipped += 1
                            continue
                        if header.is_transactional and isinstance(decoded.key, OffsetCommitKey):
                            shard.offsets.replay_transactional(header.producer_id, decoded.key, decoded.value)  # type: ignore[arg-type]
                        else:
                            shard.replay(decoded.key, decoded.value)
                        records += 1
        except (CoordinatorRecordError, StorageError, ValueError, InvalidRecordError):
            log.exception("group_coordinator.load_failed", partition=index)
            self._loading.pop(index, None)
            return
        self._loading.pop(index, None)
        self.shards[index] = shard
        self._execute(index, shard.on_loaded(now_ms()))
        log.info(
            "group_coordinator.loaded",
            partition=index,
            groups=len(shard.groups.groups),
            records=records,
            skipped=skipped,
            seconds=round(time.monotonic() - started, 3),
        )

    def _unload(self, index: int) -> None:
        shard = self.shards.pop(index)
        for group in shard.groups.groups.values():
            for member in group.members.values():
                for waiting in (member.awaiting_join, member.awaiting_sync):
                    if isinstance(waiting, asyncio.Future) and not waiting.done():
                        waiting.set_exception(CoordinatorNotAvailable(ErrorCode.not_coordinator))
        for key in [k for k in self._timers if self.partition_for(k[1]) == index]:
            self._timers.pop(key).cancel()
        log.info("group_coordinator.unloaded", partition=index)

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use, as Kafka does on the first FindCoordinator."""
        if GROUP_METADATA_TOPIC in self._metadata.image.topics:
            return
        async with self._create_lock:
            if GROUP_METADATA_TOPIC in self._metadata.image.topics:
                return
            cfg = self._config
            await create_internal_topic(
                self._controller,
                GROUP_METADATA_TOPIC,
                cfg.offsets_topic_num_partitions,
                cfg.offsets_topic_replication_factor,
                {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(cfg.offsets_topic_segment_bytes)},
            )

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        """The loaded shard coordinating ``group_id``, or CoordinatorNotAvailable with Kafka's error."""
        index = self.partition_for(group_id)
        shard = self.shards.get(index)
        if shard is not None:
            return shard
        if index in self._loading:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_load_in_progress)
        if GROUP_METADATA_TOPIC not in self._metadata.image.topics:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_not_available)
        raise CoordinatorNotAvailable(ErrorCode.not_coordinator)

    async def wait_loaded(self, group_id: str, timeout_s: float) -> None:
        """Give a partition being loaded a moment: a fresh or small one is ready at once, so the
        client is not sent away to retry; a big one still answers COORDINATOR_LOAD_IN_PROGRESS."""
        task = self._loading.get(self.partition_for(group_id))
        if task is not None:
            await asyncio.wait([task], timeout=timeout_s)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def coordinator_error(self, group_id: str) -> int:
        try:
            self.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            return e.error_code
        return 0

    # -- running shard operations ------------------------------------------------------------------

    def execute(self, group_id: str, result: CoordinatorResult) -> Written:
        return self._execute(self.partition_for(group_id), result)

    def _execute(self, index: int, result: CoordinatorResult) -> Written:
        """Append the records and arm the timers; answer once the records are replicated.

        Returns the write's error code (0: written), or a future of it while the partition's
        followers have yet to copy the records: a commit is acknowledged only when it would
        survive the leader's death, as Kafka's coordinator runtime waits for the high watermark.
        """
        error, required = self._append(index, result.records) if result.records else (0, -1)
        loop = asyncio.get_running_loop()
        for timer in result.timers:
            old = self._timers.pop(timer.key, None)
            if old is not None:
                old.cancel()
            if not isinstance(timer, CancelTimer):
                delay = max(timer.deadline_ms - now_ms(), 0) / 1000
                self._timers[timer.key] = loop.call_later(delay, self._fire, timer.key)
        return self._once_replicated(index, error, required, lambda settled: self._settle(index, result, settled))

    def _once_replicated(self, index: int, error: int, required: int, settle: Callable[[int], None]) -> Written:
        """Call ``settle`` with the write's outcome once the offsets partition's high watermark
        passes ``required`` (at once if it has, or if the append failed); the outcome, or its future."""
        settled = error if error or required < 0 else self._rm.replicated((GROUP_METADATA_TOPIC, index), required)
        if settled is not None:
            settled = WRITE_ERRORS.get(settled, settled)
            settle(settled)
            return settled
        loop = asyncio.get_running_loop()
        written: asyncio.Future[int] = loop.create_future()
        task = loop.create_task(self._settle_when_replicated(index, required, settle, written), name=f"replicate-{GROUP_METADATA_TOPIC}-{index}")
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)
        return written

    async def _settle_when_replicated(self, index: int, required: int, settle: Callable[[int], None], written: asyncio.Future[int]) -> None:
        error = await self._rm.wait_replicated((GROUP_METADATA_TOPIC, index), required, self._config.offsets_commit_timeout_ms)
        error = WRITE_ERRORS.get(error, error)
        settle(error)
        if not written.done():
            written.set_result(error)

    def _settle(self, index: int, result: CoordinatorResult, error: int) -> None:
        shard = self.shards.get(index)
        if not error and shard is not None:
            # Offsets change in memory only once their records are written; group state
            # changes as the shard decides (a failed write is answered with an error).
            for key, value in result.records:
                if isinstance(key, OffsetCommitKey):
                    shard.replay(key, value)
        for respond in result.responses:
            self._complete(respond, error)

    def _append(self, index: int, records: list[tuple[Any, Any]], producer: tuple[int, int] | None = None) -> tuple[int, int]:
        """(error code, the offset the high watermark must pass for the records to be replicated)."""
        partition = self._rm.get_partition(GROUP_METADATA_TOPIC, index)
        if partition is None:
            return ErrorCode.not_coordinator, -1
        timestamp = now_ms()
        entries = [(encode_key(k), None if v is None else encode_value(v), (), timestamp) for k, v in records]
        if producer is None:
            batch = build_batch(entries)
        else:
            # TxnOffsetCommit: the producer's transactional batch, settled by its transaction's marker.
            batch = build_batch(entries, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
        try:
            info = partition.append_records_to_leader(memoryview(bytearray(batch)), AppendOrigin.COORDINATOR, ACKS_ALL)
        except StorageError as e:
            if producer is not None and e.error_code in PRODUCER_ERRORS:
                return e.error_code, -1
            # Kafka maps a failed coordinator write to errors the client retries against a coordinator.
            log.error("group_coordinator.append_failed", partition=index, error=str(e))
            return WRITE_ERRORS.get(e.error_code, ErrorCode.coordinator_not_available), -1
        self._rm.fetch_purgatory.touch((GROUP_METADATA_TOPIC, index))
        return 0, info.last_offset + 1

    # -- transactions ------------------------------------------------------------------------------

    def execute_transactional(self, group_id: str, producer_id: int, producer_epoch: int, records: list[tuple[Any, Any]]) -> Written:
        """Write TxnOffsetCommit records in the producer's transaction; they stay pending until its
        marker, and are answered once replicated."""
        index = self.partition_for(group_id)
        error, required = self._append(index, records, (producer_id, producer_epoch))

        def settle(outcome: int) -> None:
            shard = self.shards.get(index)
            if not outcome and shard is not None:
                for key, value in records:
                    shard.offsets.replay_transactional(producer_id, key, value)

        return self._once_replicated(index, error, required, settle)

    def on_transaction_completed(self, index: int, producer_id: int, commit: bool) -> None:
        """The transaction coordinator wrote a marker to ``__consumer_offsets`` partition ``index``."""
        shard = self.shards.get(index)
        if shard is None:
            return
        settled = shard.offsets.complete_transaction(producer_id, commit)
        if settled:
            log.debug("group_coordinator.txn_offsets", partition=index, producer_id=producer_id, committed=commit, offsets=settled)

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
        self._execute(index, shard.on_timer(key, now_ms()))
        gone = before - shard.members_of(key[1])
        if gone:
            log.info("group.members_expired", group=key[1], timer=key[0], members=sorted(gone))

    # -- background --------------------------------------------------------------------------------

    def cleanup_group_metadata(self) -> None:
        """offsets.retention.check.interval.ms: expire offsets and drop empty groups with none left."""
        now = now_ms()
        for index, shard in list(self.shards.items()):
            records = shard.cleanup(now)
            if records:
                self._execute(index, CoordinatorResult(records=records))
                log.info("group_coordinator.offsets_expired", partition=index, records=len(records))

    def shutdown(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._replicating:
            task.cancel()
        for task in self._loading.values():
            task.cancel()
