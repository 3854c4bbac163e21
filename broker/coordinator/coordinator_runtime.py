"""CoordinatorRuntime: what the group and transaction coordinators share about their partitions.

Kafka's coordinator-common CoordinatorRuntime, for the asyncio event loop: one shard per
partition of the coordinator's internal topic that this node leads, loaded by replaying the
partition when the metadata makes this node its leader (again on a new leader epoch) and
unloaded when it stops; meanwhile its keys answer COORDINATOR_LOAD_IN_PROGRESS or
NOT_COORDINATOR. A write appends one batch with acks=all and is settled once the partition's
high watermark passes it, or failed (REQUEST_TIMED_OUT after the coordinator's timeout, the
append's error, NOT_COORDINATOR when the shard is unloaded meanwhile); a failed write reverts
the shard's memory, with every later write, through the DeferredWriteQueue. Error codes reach
the coordinator as the log gave them; WRITE_ERRORS is what its clients are told instead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Generic, Protocol, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator.coordinator_partitioner import partition_for
from broker.coordinator.deferred_write_queue import DeferredWrite, DeferredWriteQueue
from broker.coordinator.coordinator_partition import create_internal_topic, replay_batches
from broker.group.coordinator_records import CoordinatorRecordError
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.replica_manager import ACKS_ALL, ReplicaManager
from protocol.record_batch import BatchHeader
from protocol.records import InvalidRecordError, Record
from storage.errors import StorageError
from storage.producer_state_manager import AppendOrigin, VerificationGuard

log = structlog.get_logger(__name__)

S = TypeVar("S")
T = TypeVar("T")
# An error code now, or later once the write is replicated.
Written = int | asyncio.Future[int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Kafka's CoordinatorOperationExceptionHelper (and the transaction coordinator's append errors)
# for a failed coordinator write: what a client retries, and against whom. The high watermark
# may also fail a waiting write with NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrinks.
WRITE_ERRORS: dict[int, int] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    # A record too large for the log is the coordinator's fault, not one the client can fix.
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


# How long one wait of ``wait_committed`` lasts before it looks again: it waits as long as it takes.
COMMITTED_WAIT_MS = 60_000


def _committed_code(code: int) -> int:
    """A high watermark past the records commits them, whatever the ISR's size is now."""
    return 0 if code == ErrorCode.not_enough_replicas_after_append else code


class CoordinatorNotAvailable(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(ErrorCode(error_code).name)
        self.error_code = error_code


class CoordinatorShardLoader(Protocol[S]):
    """What a coordinator gives the runtime: how to make, replay, start and drop a shard."""

    def new_shard(self, index: int, leader_epoch: int) -> S: ...

    def replay(self, shard: S, header: BatchHeader, batch: memoryview, records: list[Record]) -> int:
        """Apply one batch of the partition (its keyed records, none for a control batch); the records applied."""
        ...

    def on_loaded(self, index: int, shard: S) -> None: ...

    def on_unloaded(self, index: int, shard: S) -> None: ...


class CoordinatorRuntime(Generic[S]):
    def __init__(self, topic: str, num_partitions: int, metadata: MetadataCache, replica_manager: ReplicaManager, loader: CoordinatorShardLoader[S]) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self._metadata = metadata
        self._rm = replica_manager
        self._loader = loader
        self.shards: dict[int, S] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}  # leader epoch of each partition loaded or loading
        self._deferred: dict[int, DeferredWriteQueue] = {}
        self._replicating: dict[int, set[asyncio.Task[None]]] = {}  # writes waiting for the followers
        self._create_lock = asyncio.Lock()

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    # -- leadership and loading --------------------------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Load each partition of the topic this node now leads (again if its leader epoch
        changed), unload those it stopped leading. Only the delta's changes of the topic count."""
        topics_delta = delta.topics_delta
        if topics_delta is None:
            return
        topic = image.topics.get(self.topic)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
        if topics_delta.changed_topic(self.topic) is None and all(t.name != self.topic for t in topics_delta.deleted_topics):
            return
        changes = topics_delta.local_changes(self._metadata.node_id).of_topic(self.topic)
        for _, index in list(changes.deletes) + list(changes.followers):
            self.resign(index)
        for (_, index), info in changes.leaders.items():
            epoch = info.registration.leader_epoch
            if self._epochs.get(index) != epoch:
                self.resign(index)
                self._epochs[index] = epoch
                self._loading[index] = asyncio.get_running_loop().create_task(self._load(index, epoch), name=f"load-{self.topic}-{index}")

    def resign(self, index: int) -> None:
        """Stop coordinating a partition: fail its writes in flight (NOT_COORDINATOR, as Kafka's
        unload does), stop loading it, drop its shard."""
        self._epochs.pop(index, None)
        for task in self._replicating.pop(index, set()):
            task.cancel()
        queue = self._deferred.pop(index, None)
        if queue is not None:
            queue.fail_all(ErrorCode.not_coordinator)
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading.cancel()
        shard = self.shards.pop(index, None)
        if shard is not None:
            log.info("coordinator.unloaded", topic=self.topic, partition=index)
            self._loader.on_unloaded(index, shard)

    async def _load(self, index: int, leader_epoch: int) -> None:
        started = time.monotonic()
        shard = self._loader.new_shard(index, leader_epoch)
        partition = self._rm.get_partition(self.topic, index)
        records = 0
        try:
            if partition is not None:
                # To the log end, as Kafka's coordinator loader reads: a new leader's own high
                # watermark may still lag what its predecessor acknowledged.
                async for header, batch, keyed in replay_batches(partition.log, partition.log.log_end_offset):
                    records += self._loader.replay(shard, header, batch, keyed)
        except (CoordinatorRecordError, StorageError, ValueError, InvalidRecordError):
            log.exception("coordinator.load_failed", topic=self.topic, partition=index)
            self._loading.pop(index, None)
            return
        self._loading.pop(index, None)
        self.shards[index] = shard
        self._deferred[index] = DeferredWriteQueue()
        log.info("coordinator.loaded", topic=self.topic, partition=index, leader_epoch=leader_epoch, records=records, seconds=round(time.monotonic() - started, 3))
        self._loader.on_loaded(index, shard)

    async def ensure_topic(self, creator: AutoTopicCreationManager, partitions: int, replication_factor: int, configs: dict[str, str | None]) -> None:
        """Create the topic on first use, as Kafka does on the first FindCoordinator that needs it."""
        if self.topic in self._metadata.image.topics:
            return
        async with self._create_lock:
            if self.topic not in self._metadata.image.topics:
                await create_internal_topic(creator, self.topic, partitions, replication_factor, configs)

    async def wait_loaded(self, key: str, timeout_s: float) -> None:
        """Give a partition being loaded a moment: a fresh or small one is ready at once, so the
        client is not sent away to retry; a big one still answers COORDINATOR_LOAD_IN_PROGRESS."""
        task = self._loading.get(self.partition_for(key))
        if task is not None:
            await asyncio.wait([task], timeout=timeout_s)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    # -- lookups -----------------------------------------------------------------------------------

    def shard_of(self, key: str) -> S:
        """The loaded shard coordinating ``key``, or CoordinatorNotAvailable with Kafka's error."""
        index = self.partition_for(key)
        shard = self.shards.get(index)
        if shard is not None:
            return shard
        if index in self._loading:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_load_in_progress)
        if self.topic not in self._metadata.image.topics:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_not_available)
        raise CoordinatorNotAvailable(ErrorCode.not_coordinator)

    def last_pending_write(self, key: str) -> int | None:
        """The offset the latest write of ``key``'s partition still waiting for its followers needs."""
        queue = self._deferred.get(self.partition_for(key))
        return None if queue is None else queue.last_required_offset

    def writes_settled_through(self, key: str, required_offset: int) -> bool:
        """Every write of ``key``'s partition up to ``required_offset`` is replicated or failed (and so
        applied to, or taken back from, the shard)."""
        queue = self._deferred.get(self.partition_for(key))
        first = None if queue is None else queue.first_required_offset
        return first is None or first > required_offset

    def coordinator_error(self, key: str) -> int:
        try:
            self.shard_of(key)
        except CoordinatorNotAvailable as e:
            return e.error_code
        return 0

    # -- writing -----------------------------------------------------------------------------------

    def write(
        self,
        index: int,
        batch: bytes | None,
        timeout_ms: int,
        settle: Callable[[int], T],
        revert: Callable[[int], None] = lambda error: None,
        appended: Callable[[int], None] = lambda base_offset: None,
        verification_guard: VerificationGuard | None = None,
    ) -> T | asyncio.Future[T]:
        """Append ``batch`` to the partition with acks=all and ``settle`` it with the log's error
        code (0: replicated): at once when it fails to append or is replicated already (every
        write of a one-replica partition), else the future of what ``settle`` returns, once the
        high watermark passes it or ``timeout_ms`` ends (REQUEST_TIMED_OUT). A failed write
        calls ``revert`` with its error first, and so do the later writes of the partition,
        latest first. ``appended`` is told the batch's base offset once it is in the log.
        ``verification_guard`` (KIP-890): a transactional batch's guard from the partition's
        verification, which the log checks as it checks a client's.

        No batch (an operation that wrote nothing) settles once the partition's earlier writes
        have, as in Kafka's CoordinatorRuntime: at once when none waits, else with the last of
        them (its error if it fails). A member's SyncGroup answered after its leader's is told
        the assignment only once the group record holding it, and the offset commits before that
        record, are replicated (chaos soak seed 1354848650: a kafka-python member was given a
        partition while its previous owner's last commit still waited for the followers, read the
        commit before it, and committed below it)."""
        queue = self._deferred.get(index)
        if batch is None:
            required = None if queue is None else queue.last_required_offset
            if required is None:
                return settle(0)
        else:
            partition = self._rm.get_partition(self.topic, index)
            if queue is None or index not in self.shards or partition is None:
                revert(ErrorCode.not_coordinator)
                return settle(ErrorCode.not_coordinator)
            try:
                info = partition.append_records_to_leader(memoryview(bytearray(batch)), AppendOrigin.COORDINATOR, ACKS_ALL, verification_guard)
            except StorageError as e:
                # NOT_ENOUGH_REPLICAS among others: the ISR is below the topic's min.insync.replicas.
                log.warning("coordinator.append_failed", topic=self.topic, partition=index, error=str(e))
                revert(e.error_code)
                return settle(e.error_code)
            self._rm.fetch_purgatory.touch((self.topic, index))
            appended(info.first_offset)
            required = info.last_offset + 1
        assert queue is not None
        settled: list[T] = []
        future: asyncio.Future[T] | None = None

        def complete(error: int) -> None:
            if future is None:
                settled.append(settle(error))
                return
            if future.done():
                return
            try:
                future.set_result(settle(error))
            except Exception as e:  # noqa: BLE001 - the request waiting on it fails with it
                log.exception("coordinator.settle_failed", topic=self.topic, partition=index)
                future.set_exception(e)

        queue.add(DeferredWrite(required, complete, revert))
        code = self._rm.replicated((self.topic, index), required)
        if code is not None:
            self._settle(queue, required, code)
        if settled:
            return settled[0]
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if batch is None:
            # Settled with the write it waits for, by that write's own wait and timeout.
            return future
        task = loop.create_task(self._settle_when_replicated(queue, index, required, timeout_ms), name=f"replicate-{self.topic}-{index}")
        waiting = self._replicating.setdefault(index, set())
        waiting.add(task)
        task.add_done_callback(waiting.discard)
        return future

    def wait_committed(self, index: int, end_offset: int, committed: Callable[[int], None]) -> None:
        """What a load read above the high watermark (Kafka's loader leaves the shard's last written
        offset at the log end, its last committed offset at the high watermark) is one more write
        waiting for the followers: ``committed`` is told 0 once the high watermark reaches
        ``end_offset``, or the error that ends the wait (NOT_COORDINATOR when the shard is
        unloaded). Unlike a client's write it has no timeout, and nothing to revert: the records are
        the log's already, and become visible whenever the followers have them. Call it before the
        shard's first write, so that every write after it waits for it too."""
        queue = self._deferred[index]
        queue.add(DeferredWrite(end_offset, committed, lambda error: None))
        code = self._rm.replicated((self.topic, index), end_offset)
        if code is not None:
            self._settle(queue, end_offset, _committed_code(code))
            return
        task = asyncio.get_running_loop().create_task(self._settle_when_committed(queue, index, end_offset), name=f"commit-loaded-{self.topic}-{index}")
        waiting = self._replicating.setdefault(index, set())
        waiting.add(task)
        task.add_done_callback(waiting.discard)

    async def _settle_when_committed(self, queue: DeferredWriteQueue, index: int, required: int) -> None:
        code: int = ErrorCode.request_timed_out
        while code == ErrorCode.request_timed_out:
            code = await self._rm.wait_replicated((self.topic, index), required, COMMITTED_WAIT_MS)
        self._settle(queue, required, _committed_code(code))

    async def _settle_when_replicated(self, queue: DeferredWriteQueue, index: int, required: int, timeout_ms: int) -> None:
        code = await self._rm.wait_replicated((self.topic, index), required, timeout_ms)
        self._settle(queue, required, code)

    @staticmethod
    def _settle(queue: DeferredWriteQueue, required: int, code: int) -> None:
        if code:
            queue.failed(required, code)
        else:
            queue.replicated(required)

    def shutdown(self) -> None:
        for task in self._loading.values():
            task.cancel()
        for tasks in self._replicating.values():
            for task in tasks:
                task.cancel()
        for queue in self._deferred.values():
            queue.fail_all(ErrorCode.not_coordinator)
