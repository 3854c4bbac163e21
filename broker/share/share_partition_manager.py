"""The share partitions this broker leads: Kafka's ``kafka.server.share.SharePartitionManager``
with ``DelayedShareFetch``'s reading and ``ShareFetchUtils``' answer.

One ``SharePartition`` per (group, topic id, partition) while this node leads the partition. It is
created by the first ShareFetch that reads it and initialized from the share coordinator
(ReadShareGroupState through the persister); a leadership move or the topic's deletion drops it,
and the next leader initializes its own from what was persisted. Acquisitions are not persisted
(Kafka's neither): every other state change (acknowledgement, release, lock expiry) is written
with WriteShareGroupState before the acknowledgement that caused it is answered; a write that
fails drops the share partition, so that the next fetch starts again from the persisted state.

For a group with a dead-letter queue (KIP-1191), records archived by a REJECT or at the delivery
count limit are persisted ARCHIVING first; once that write succeeded their DLQ write is enqueued,
and when it lands (or is given up on) they become ARCHIVED, persisted again: as Kafka 4.4, a failed
ARCHIVED write is only logged (the next write carries the start offset past them). A share
partition initialized with ARCHIVING records enqueues their DLQ writes again.

The records a fetch acquires are cut from the log read on batch boundaries: the answer holds
the whole batches covering the acquired offsets, as the log read's chunks (regions of the
segment files, sent with sendfile as Fetch sends them; Kafka's FileRecords slice).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.delayed_operations import Purgatory
from broker.metrics.share_group_metrics import ShareGroupMetrics
from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.acquired_records import AbortedTransaction, AcquiredRecords, FetchedBatch, ReadCommitted
from broker.share.persister import SharePartitionStateData
from broker.share.share_group_dlq import DlqBatch, ShareGroupDLQRecordParameter, for_archiving
from broker.share.share_partition import SharePartition, SharePartitionConfig, ShareStateUpdate, validate_acknowledgement_batches
from broker.share.share_session_cache import TopicIdPartition
from broker.share_coordinator.share_partition_key import SharePartitionKey
from storage.fetch_data_info import FileRegion

log = structlog.get_logger(__name__)

# Record bytes as a read holds them: a region of a segment file (sent with sendfile), or bytes.
RecordChunk = bytes | FileRegion


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ReadStateResult(Protocol):
    error: int
    state: SharePartitionStateData | None


class StatePersister(Protocol):
    """What the manager needs of DefaultStatePersister (ReadShareGroupState/WriteShareGroupState)."""

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadStateResult: ...

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state: SharePartitionStateData) -> int: ...


# Kafka's SharePartition.fetchPersisterError: what a member is told when reading or writing a share
# partition's state failed. A fenced epoch means another node leads the partition now.
_PERSISTER_ERRORS_FOR_MEMBERS = {
    ErrorCode.not_coordinator: ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_not_available: ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress: ErrorCode.coordinator_not_available,
    ErrorCode.group_id_not_found: ErrorCode.group_id_not_found,
    ErrorCode.unknown_topic_or_partition: ErrorCode.unknown_topic_or_partition,
    ErrorCode.fenced_leader_epoch: ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_state_epoch: ErrorCode.not_leader_or_follower,
}


def persister_error_for_member(error: int) -> int:
    """The error a ShareFetch or ShareAcknowledge answers for a persister's ``error``; any other
    than those Kafka names is UNKNOWN_SERVER_ERROR."""
    if error == ErrorCode.none:
        return ErrorCode.none
    return _PERSISTER_ERRORS_FOR_MEMBERS.get(ErrorCode(error), ErrorCode.unknown_server_error)


class DeadLetterQueue(Protocol):
    """ShareGroupDLQManager (KIP-1191): where archived records of a group with a DLQ topic go."""

    def enabled(self, group_id: str) -> bool: ...

    def enqueue(self, params: Iterable[ShareGroupDLQRecordParameter]) -> Sequence[Awaitable[int]]:
        """One write per param, each done with NONE or the error it was given up on."""
        ...


@dataclass(frozen=True, slots=True)
class LeaderState:
    leader_epoch: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class LogRead:
    """Whole batches read from a fetch offset: their offsets (``batches``) and their bytes
    (``chunks``: regions of segment files, or bytes), ``batch_ends[i]`` the end of batch i
    counted in bytes from the start of the first chunk."""

    error: int = ErrorCode.none
    chunks: tuple[RecordChunk, ...] = ()
    batches: tuple[FetchedBatch, ...] = ()
    batch_ends: tuple[int, ...] = ()
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    # (leader id, leader epoch) for NOT_LEADER_OR_FOLLOWER/FENCED_LEADER_EPOCH answers.
    current_leader: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return self.batch_ends[-1] if self.batch_ends else 0

    @property
    def records(self) -> bytes:
        """The batches' bytes, read from their files (the dead-letter queue's original records)."""
        return b"".join(c if isinstance(c, bytes) else os.pread(c.fd, c.length, c.position) for c in self.chunks)


class FetchWaiters(Protocol):
    """ReplicaManager's fetch purgatory."""

    def touch(self, key: Hashable) -> None: ...

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool: ...


class ShareLogReader(Protocol):
    """The log side (ReplicaManager's in the broker): only partitions this node leads."""

    def leader_state(self, topic: str, partition: int) -> LeaderState | None: ...

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, read_committed: bool) -> LogRead: ...


@dataclass(frozen=True, slots=True)
class ShareFetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int | None = None
    # ShareAcquireMode RECORD_LIMIT (v2): max_records is a hard limit.
    record_limit: bool = False


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition's part of a ShareFetch answer."""

    error: int = ErrorCode.none
    # Whole batches covering ``acquired``: regions of segment files, or bytes.
    records: tuple[RecordChunk, ...] = ()
    acquired: tuple[AcquiredRecords, ...] = ()
    current_leader: tuple[int, int] | None = None


_EMPTY = PartitionFetch()


@dataclass(frozen=True, slots=True)
class GroupShareSettings:
    """A group's settings for its share partitions: SharePartitionConfig and share.isolation.level."""

    partition: SharePartitionConfig = SharePartitionConfig()
    read_committed: bool = False


class _Entry:
    __slots__ = ("expiry", "key", "ready", "share_partition", "topic", "write_lock")

    def __init__(self, key: SharePartitionKey, topic: str, share_partition: SharePartition) -> None:
        self.key = key
        self.topic = topic
        self.share_partition = share_partition
        # Done once initialized: the error (NONE when ready).
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Writes of one share partition go one at a time, in the order their changes were made.
        self.write_lock = asyncio.Lock()
        self.expiry: asyncio.TimerHandle | None = None


class SharePartitionManager:
    def __init__(
        self,
        node_id: int,
        reader: ShareLogReader,
        persister: StatePersister,
        settings: Callable[[str], GroupShareSettings],
        waiters: FetchWaiters | None = None,
        dlq: DeadLetterQueue | None = None,
        metrics: ShareGroupMetrics | None = None,
    ) -> None:
        self._node_id = node_id
        # Takes the records a state change made ARCHIVING (REJECTed, or at the delivery count
        # limit), once that is persisted; they are ARCHIVED when their write is done.
        self._dlq = dlq
        self._reader = reader
        self._persister = persister
        # The group's settings at the time of asking: group configs may change at any time.
        self._settings = settings
        # The fetches waiting for records: on a share partition's key (a release made records
        # available) or its log partition's (topic, index) (appends; ReplicaManager wakes those).
        self._waiters: FetchWaiters = waiters if waiters is not None else Purgatory()
        self._partitions: dict[SharePartitionKey, _Entry] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self.metrics = metrics if metrics is not None else ShareGroupMetrics()

    # ------------------------------------------------------------------ views

    def share_partition(self, key: SharePartitionKey) -> SharePartition | None:
        entry = self._partitions.get(key)
        return entry.share_partition if entry is not None and entry.ready.done() and entry.ready.result() == ErrorCode.none else None

    def __len__(self) -> int:
        return len(self._partitions)

    def share_partitions(self) -> Iterator[tuple[SharePartitionKey, str, SharePartition]]:
        """The initialized share partitions, with their topic's name."""
        for key, entry in list(self._partitions.items()):
            if entry.ready.done() and entry.ready.result() == ErrorCode.none:
                yield key, entry.topic, entry.share_partition

    # ------------------------------------------------------------- fetching

    async def fetch(
        self, group_id: str, member_id: str, partitions: Sequence[tuple[TopicIdPartition, str]], params: ShareFetchParams
    ) -> dict[TopicIdPartition, PartitionFetch]:
        """DelayedShareFetch: initialize the share partitions, then acquire what the log holds past
        each one's next fetch offset once at least min_bytes wait there, or when max_wait is up.
        ``partitions`` pairs each partition with its topic's name."""
        started = time.monotonic()
        deadline = started + params.max_wait_ms / 1000
        results: dict[TopicIdPartition, PartitionFetch] = {}
        ready: list[tuple[TopicIdPartition, _Entry]] = []
        errors = await asyncio.gather(*(self._initialized(group_id, tip, topic) for tip, topic in partitions))
        for (tip, _), (error, entry) in zip(partitions, errors):
            if error != ErrorCode.none or entry is None:
                results[tip] = PartitionFetch(error)
            else:
                ready.append((tip, entry))
        self.metrics.partitions_acquired(group_id, len(ready), len(partitions), started)
        settings = self._settings(group_id)
        while True:
            live = [(tip, entry) for tip, entry in ready if self._partitions.get(entry.key) is entry]
            reads = self._read_all(live, params, settings.read_committed)
            available = sum(read.size for read in reads.values() if read.error == ErrorCode.none)
            failed = any(read.error != ErrorCode.none for read in reads.values()) or len(live) < len(ready)
            remaining = deadline - time.monotonic()
            if available >= max(params.min_bytes, 1) or failed or remaining <= 0 or not live:
                break
            keys: list[Hashable] = [entry.key for _, entry in live] + [(entry.topic, tip.partition) for tip, entry in live]
            await self._waiters.wait(keys, remaining)
        now = now_ms()
        budget = params.max_records
        for tip, entry in ready:
            read = reads.get(tip)
            if self._partitions.get(entry.key) is not entry or read is None:
                results[tip] = PartitionFetch(ErrorCode.not_leader_or_follower)
                continue
            if read.error != ErrorCode.none:
                results[tip] = PartitionFetch(read.error, current_leader=read.current_leader)
                continue
            if budget <= 0:
                results[tip] = _EMPTY
                continue
            fetched = self._acquire(entry, member_id, read, budget, params, settings, now)
            budget -= sum(r.last_offset - r.first_offset + 1 for r in fetched.acquired)
            results[tip] = fetched
        self.metrics.share_fetched(partitions, results, params)
        return results

    def _read_all(self, live: list[tuple[TopicIdPartition, _Entry]], params: ShareFetchParams, read_committed: bool) -> dict[TopicIdPartition, LogRead]:
        """Read each share partition's log from its next fetch offset (max_bytes shared evenly, as
        Kafka's uniform PartitionMaxBytesStrategy); a partition at its record-lock limit reads nothing."""
        reads: dict[TopicIdPartition, LogRead] = {}
        if not live:
            return reads
        per_partition = max(params.max_bytes // len(live), 1)
        for tip, entry in live:
            sp = entry.share_partition
            if not sp.can_acquire_records():
                reads[tip] = LogRead()
                continue
            read = self._reader.read(entry.topic, tip.partition, sp.next_fetch_offset(), per_partition, read_committed)
            if read.error == ErrorCode.offset_out_of_range:
                # ShareFetchUtils: the log start offset moved past the share partition's next
                # fetch offset (retention, DeleteRecords): start from there and read again.
                state = self._reader.leader_state(entry.topic, tip.partition)
                if state is not None:
                    sp.update_log_start_offset(state.log_start_offset)
                    read = self._reader.read(entry.topic, tip.partition, sp.next_fetch_offset(), per_partition, read_committed)
            reads[tip] = read
        return reads

    def _acquire(
        self, entry: _Entry, member_id: str, read: LogRead, max_records: int, params: ShareFetchParams, settings: GroupShareSettings, now: int
    ) -> PartitionFetch:
        sp = entry.share_partition
        if not read.batches:
            return _EMPTY
        if sp.config != settings.partition:
            # The group's configs changed: they apply from this acquisition on (the auto offset
            # reset only ever applied to the initialization).
            sp.config = settings.partition
        fetch_offset = sp.next_fetch_offset()
        acquired = sp.acquire(
            member_id,
            read.batches,
            max_records,
            now,
            fetch_offset=fetch_offset,
            batch_size=params.batch_size if params.batch_size and params.batch_size > 0 else None,
            read_committed=ReadCommitted(read.aborted_transactions) if settings.read_committed else None,
            record_limit=params.record_limit,
        )
        self._schedule_expiry(entry)
        if not acquired.records:
            return _EMPTY
        return PartitionFetch(records=_covering(read, acquired.records), acquired=acquired.records)

    # ------------------------------------------------------- initializing

    async def _initialized(self, group_id: str, tip: TopicIdPartition, topic: str) -> tuple[int, _Entry | None]:
        """The share partition, initialized from the share coordinator on first use (Kafka's
        getOrCreateSharePartition and maybeInitialize); one read however many fetches ask."""
        key = SharePartitionKey(group_id, tip.topic_id, tip.partition)
        entry = self._partitions.get(key)
        if entry is None:
            state = self._reader.leader_state(topic, tip.partition)
            if state is None:
                return ErrorCode.not_leader_or_follower, None
            sp = SharePartition(group_id, tip.topic_id, tip.partition, self._settings(group_id).partition, leader_epoch=state.leader_epoch)
            entry = self._partitions[key] = _Entry(key, topic, sp)
            self._spawn(self._initialize(entry, state))
        error = await asyncio.shield(entry.ready)
        return error, entry if error == ErrorCode.none else None

    async def _initialize(self, entry: _Entry, state: LeaderState) -> None:
        key = entry.key
        error: int
        started = time.monotonic()
        try:
            result = await self._persister.read_state(key.group_id, key.topic_id, key.partition, state.leader_epoch)
            error = int(result.error)
            if error != ErrorCode.none:
                log.info("share_partition.read_failed", group=key.group_id, topic=entry.topic, partition=key.partition, error=ErrorCode(error).name)
                error = persister_error_for_member(error)
            else:
                # The log may have moved while the coordinator answered.
                now_state = self._reader.leader_state(entry.topic, key.partition) or state
                error = int(
                    entry.share_partition.initialize(result.state, earliest_offset=now_state.log_start_offset, latest_offset=now_state.high_watermark)
                )
        except Exception:
            log.exception("share_partition.initialize_failed", group=key.group_id, topic=entry.topic, partition=key.partition)
            error = ErrorCode.unknown_server_error
        if error != ErrorCode.none:
            log.info("share_partition.not_initialized", group=key.group_id, topic=entry.topic, partition=key.partition, error=ErrorCode(error).name)
            if self._partitions.get(key) is entry:
                del self._partitions[key]
        if not entry.ready.done():
            entry.ready.set_result(error)
        if error == ErrorCode.none:
            self.metrics.partition_loaded(started)
            archiving = entry.share_partition.archiving_batches()
            if archiving:
                log.info("share_partition.resuming_dlq", group=key.group_id, topic=entry.topic, partition=key.partition, batches=len(archiving))
                self._spawn(self._dead_letter(entry, archiving))

    # ------------------------------------------------------ acknowledging

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: dict[TopicIdPartition, list[ShareAcknowledgementBatch]],
        renew: bool = False,
    ) -> dict[TopicIdPartition, int]:
        """Kafka's acknowledge: each partition's acknowledgements checked (KafkaApis'
        validateAcknowledgementBatches: INVALID_REQUEST), applied, persisted, then answered.
        ``renew``: the request may renew (v2 with IsRenewAck). A share partition not here
        (never fetched, or led elsewhere now) is UNKNOWN_TOPIC_OR_PARTITION."""
        tips = list(acknowledgements)
        errors = await asyncio.gather(*(self._acknowledge_one(group_id, member_id, tip, acknowledgements[tip], renew) for tip in tips))
        return dict(zip(tips, errors))

    async def _acknowledge_one(
        self, group_id: str, member_id: str, tip: TopicIdPartition, batches: list[ShareAcknowledgementBatch], renew: bool
    ) -> int:
        error = validate_acknowledgement_batches(batches, renew)
        if error != ErrorCode.none:
            return int(error)
        entry = self._partitions.get(SharePartitionKey(group_id, tip.topic_id, tip.partition))
        if entry is None or not entry.ready.done() or entry.ready.result() != ErrorCode.none:
            return ErrorCode.unknown_topic_or_partition
        sp = entry.share_partition
        if renew:
            # A renewal takes the group's lock duration and renew setting as they are now.
            sp.config = self._settings(group_id).partition
        update = sp.acknowledge(member_id, batches, now_ms=now_ms(), renew=renew, dlq=self._dlq_enabled(group_id))
        error = await self._complete(entry, update)
        if error == ErrorCode.none:
            self.metrics.records_acknowledged(batches)
        return error

    async def release_session(self, group_id: str, member_id: str, partitions: Iterable[TopicIdPartition]) -> dict[TopicIdPartition, int]:
        """Kafka's releaseSession: the member's acquired records of its session's partitions go
        back to AVAILABLE (ARCHIVED at the delivery count limit), persisted."""
        async def release(tip: TopicIdPartition) -> int:
            entry = self._partitions.get(SharePartitionKey(group_id, tip.topic_id, tip.partition))
            if entry is None or not entry.ready.done() or entry.ready.result() != ErrorCode.none:
                return ErrorCode.none
            update = entry.share_partition.release_acquired_records(member_id, dlq=self._dlq_enabled(group_id))
            return await self._complete(entry, update)

        tips = list(partitions)
        errors = await asyncio.gather(*(release(tip) for tip in tips))
        return dict(zip(tips, errors))

    def release_in_background(self, group_id: str, member_id: str, partitions: Iterable[TopicIdPartition]) -> None:
        """For a session whose connection closed: nobody waits for the answer."""
        tips = list(partitions)
        if tips:
            self._spawn(self.release_session(group_id, member_id, tips))

    async def _complete(self, entry: _Entry, update: ShareStateUpdate) -> int:
        """Persist a state change, then let waiting fetches see what it made available."""
        if update.error != ErrorCode.none:
            return int(update.error)
        if update.write is None:
            return ErrorCode.none
        self._schedule_expiry(entry)
        self._waiters.touch(entry.key)
        return await self._persist(entry, update)

    def _dlq_enabled(self, group_id: str) -> bool:
        return self._dlq is not None and self._dlq.enabled(group_id)

    async def _persist(self, entry: _Entry, update: ShareStateUpdate, *, archived: bool = False) -> int:
        """Write ``update``; once it is persisted, start the DLQ writes of what it made ARCHIVING.
        A failed write drops the share partition, except the ARCHIVED one after a DLQ write
        (``archived``), which Kafka only logs."""
        key = entry.key
        assert update.write is not None
        async with entry.write_lock:
            try:
                error = int(await self._persister.write_state(key.group_id, key.topic_id, key.partition, update.write))
            except Exception:
                log.exception("share_partition.write_failed", group=key.group_id, topic=entry.topic, partition=key.partition)
                error = ErrorCode.unknown_server_error
        if error != ErrorCode.none:
            if archived:
                log.error("share_partition.archived_write_failed", group=key.group_id, topic=entry.topic, partition=key.partition, error=ErrorCode(error).name)
            else:
                # The in-memory state is ahead of the coordinator's: start again from what it holds.
                log.warning("share_partition.write_failed", group=key.group_id, topic=entry.topic, partition=key.partition, error=ErrorCode(error).name)
                self._drop(key, entry)
        elif update.archiving:
            self._spawn(self._dead_letter(entry, update.archiving))
        return persister_error_for_member(error)

    async def _dead_letter(self, entry: _Entry, batches: Sequence[DlqBatch]) -> None:
        """Kafka's initiateDLQAndArchive: write ``batches`` to the group's DLQ, and archive each
        once its write is done, whether it landed or was given up on. A share partition this
        node no longer holds is left to its next leader, which writes them again."""
        key = entry.key
        bound = log.bind(group=key.group_id, topic=entry.topic, partition=key.partition)
        params = for_archiving(key.group_id, key.topic_id, entry.topic, key.partition, batches)
        writes: Sequence[Awaitable[int]] = self._dlq.enqueue(params) if self._dlq is not None else [_given_up() for _ in params]
        for batch, write in zip(batches, writes):
            error = await write
            if self._partitions.get(key) is not entry:
                bound.info("share_partition.dlq_left_to_next_leader", first_offset=batch.first_offset, last_offset=batch.last_offset)
                return
            if error != ErrorCode.none:
                bound.warning("share_partition.dlq_failed_archiving_regardless", first_offset=batch.first_offset, last_offset=batch.last_offset, error=ErrorCode(error).name)
            update = entry.share_partition.complete_archiving(batch.first_offset, batch.last_offset)
            if update.write is not None:
                self._waiters.touch(key)
                await self._persist(entry, update, archived=True)

    # ---------------------------------------------------- acquisition locks

    def _schedule_expiry(self, entry: _Entry) -> None:
        """One timer per share partition, at its earliest acquisition lock's deadline."""
        deadline = entry.share_partition.next_lock_deadline_ms()
        if entry.expiry is not None:
            entry.expiry.cancel()
            entry.expiry = None
        if deadline is None:
            return
        delay = max(deadline - now_ms(), 0) / 1000
        entry.expiry = asyncio.get_running_loop().call_later(delay, self._expire, entry)

    def _expire(self, entry: _Entry) -> None:
        entry.expiry = None
        if self._partitions.get(entry.key) is not entry:
            return
        update = entry.share_partition.expire_acquisition_locks(now_ms(), dlq=self._dlq_enabled(entry.key.group_id))
        self._schedule_expiry(entry)
        if update.write is not None:
            key = entry.key
            self.metrics.locks_expired(key, update.write.state_batches)
            log.debug("share_partition.locks_expired", group=key.group_id, topic=entry.topic, partition=key.partition)
            self._waiters.touch(key)
            self._spawn(self._persist(entry, update))

    # ------------------------------------------------------------ leadership

    def on_metadata_update(self, delta: object, image: object) -> None:
        """A MetadataPublisher: drop the share partitions of deleted topics and of partitions this
        node no longer leads (or leads in a new epoch): their next leader initializes its own."""
        if not self._partitions:
            return
        topics_by_id = getattr(image, "topics_by_id")
        for key, entry in list(self._partitions.items()):
            topic = topics_by_id.get(key.topic_id)
            registration = topic.partitions.get(key.partition) if topic is not None else None
            if registration is None or registration.leader != self._node_id or registration.leader_epoch != entry.share_partition.leader_epoch:
                self._drop(key, entry)

    def _drop(self, key: SharePartitionKey, entry: _Entry) -> None:
        if self._partitions.get(key) is not entry:
            return
        del self._partitions[key]
        if entry.expiry is not None:
            entry.expiry.cancel()
            entry.expiry = None
        log.info("share_partition.removed", group=key.group_id, topic=entry.topic, partition=key.partition)
        self._waiters.touch(key)

    # ------------------------------------------------------------ lifecycle

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        for entry in self._partitions.values():
            if entry.expiry is not None:
                entry.expiry.cancel()
            if not entry.ready.done():
                entry.ready.set_result(ErrorCode.unknown_server_error)
        self._partitions.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _given_up() -> int:
    """A DLQ write with no DLQ manager to make it."""
    return ErrorCode.invalid_config


def _covering(read: LogRead, acquired: Sequence[AcquiredRecords]) -> tuple[RecordChunk, ...]:
    """ShareFetchUtils.maybeSliceFetchRecords: the whole batches from the one holding the first
    acquired offset to the one holding the last (a slice of the read, not a copy)."""
    first, last = acquired[0].first_offset, acquired[-1].last_offset
    start = end = -1
    for i, batch in enumerate(read.batches):
        if batch.last_offset < first:
            continue
        if batch.base_offset > last:
            break
        if start < 0:
            start = read.batch_ends[i - 1] if i else 0
        end = read.batch_ends[i]
    return _sliced(read.chunks, start, end) if start >= 0 else ()


def _sliced(chunks: Sequence[RecordChunk], start: int, end: int) -> tuple[RecordChunk, ...]:
    """Bytes ``start`` to ``end`` of ``chunks`` (counted from the first one's start), as chunks."""
    out: list[RecordChunk] = []
    at = 0
    for chunk in chunks:
        length = len(chunk) if isinstance(chunk, bytes) else chunk.length
        lo, hi = max(start - at, 0), min(end - at, length)
        if lo < hi:
            if isinstance(chunk, bytes):
                out.append(chunk[lo:hi])
            else:
                out.append(chunk if (lo, hi) == (0, length) else FileRegion(chunk.fd, chunk.position + lo, hi - lo))
        at += length
        if at >= end:
            break
    return tuple(out)

