"""TransactionStateManager: the ``__transaction_state`` partitions this node leads and their ids.

The coordinator of transactional id t is the leader of partition
``abs(java_hash(t)) % transaction.state.log.num.partitions`` (the groups' hashing). For each
such partition the latest record of every id is replayed into memory when the node becomes
its leader; until then its ids answer COORDINATOR_LOAD_IN_PROGRESS. A transition is written
as one record with acks=all and applied to memory only once the partition's high watermark
passes it (Kafka's appendTransactionToLog), so nothing a client was told can be lost when the
leader dies; while it waits the id's pending state makes other requests answer
CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator_partition import create_internal_topic, replay_batches
from broker.group.coordinator_records import CoordinatorRecordError, UnknownRecordType
from broker.group_coordinator import WRITE_ERRORS, CoordinatorNotAvailable, Written, now_ms, partition_for
from broker.metadata.metadata_cache import MetadataCache
from broker.partition import ACKS_ALL
from broker.replica_manager import ReplicaManager
from broker.transaction.transaction_log import decode_key, decode_value, encode_key, encode_value, metadata_from_value, value_from_transit
from broker.transaction.transaction_metadata import TransactionMetadata, TransactionState, TxnTransitMetadata
from protocol.records import InvalidRecordError, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from storage.errors import StorageError
from storage.log import AppendOrigin

log = structlog.get_logger()

TRANSACTION_STATE_TOPIC = "__transaction_state"

# Kafka's request.timeout.ms default, which bounds the wait of a tombstone (a transition waits
# for its transaction's timeout instead, as Kafka's appendTransactionToLog does).
REQUEST_TIMEOUT_MS = 30000

# What a failed write answers (Kafka's appendTransactionToLog): the groups' mapping, and a
# record too large for the log is the coordinator's fault, not one the client can fix.
TXN_WRITE_ERRORS: dict[int, int] = {
    **WRITE_ERRORS,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}

T = TypeVar("T")
# A value now, or later once the write it depends on is settled.
Settled = T | asyncio.Future[T]


def then(written: Written, answer: Callable[[int], T]) -> Settled[T]:
    """``answer`` of the write's error code: at once when the write is settled (the fast path of a
    partition with no follower to wait for), else a future of it, resolved once the write is."""
    if not isinstance(written, asyncio.Future):
        return answer(written)
    out: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future[int]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        try:
            out.set_result(answer(f.result()))
        except Exception as e:  # noqa: BLE001 - handed to whoever awaits the answer
            out.set_exception(e)

    written.add_done_callback(done)
    return out


async def settled(value: Settled[T]) -> T:
    return await value if isinstance(value, asyncio.Future) else value


@dataclass(slots=True)
class TxnStatePartition:
    """One loaded partition: the leader epoch it was loaded at (the coordinator epoch markers
    carry) and the metadata of its transactional ids."""

    index: int
    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


def replay(metadata: dict[str, TransactionMetadata], key: bytes, value: bytes | None) -> None:
    """Apply one ``__transaction_state`` record: the latest value of an id wins, a tombstone removes it."""
    transactional_id = decode_key(key)
    if value is None:
        metadata.pop(transactional_id, None)
    else:
        metadata[transactional_id] = metadata_from_value(transactional_id, decode_value(value))


class TransactionStateManager:
    def __init__(self, config: BrokerConfig, controller: AutoTopicCreationManager, metadata: MetadataCache, replica_manager: ReplicaManager) -> None:
        self._config = config
        self._controller = controller
        self._metadata = metadata
        self._rm = replica_manager
        self.num_partitions = config.transaction_state_log_num_partitions
        self.partitions: dict[int, TxnStatePartition] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}  # leader epoch of each partition loaded or loading
        self._create_lock = asyncio.Lock()
        self._replicating: set[asyncio.Task[None]] = set()  # writes waiting for the followers
        # Called with each partition once loaded: the coordinator resumes its unfinished commits and aborts.
        self.on_loaded: Callable[[TxnStatePartition], None] = lambda partition: None
        # Called with the index of each loaded partition dropped (leadership moved, or a new leader epoch
        # reloads it): the markers its transactions have in flight are withdrawn.
        self.on_unloaded: Callable[[int], None] = lambda index: None

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # -- leadership and loading --------------------------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: load each ``__transaction_state`` partition this node now leads
        (again if its leader epoch, the coordinator epoch, changed), unload those it stopped
        leading. Only the delta's changes of that topic are looked at."""
        topics_delta = delta.topics_delta
        if topics_delta is None:
            return
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
        if topics_delta.changed_topic(TRANSACTION_STATE_TOPIC) is None and all(t.name != TRANSACTION_STATE_TOPIC for t in topics_delta.deleted_topics):
            return
        changes = topics_delta.local_changes(self._metadata.node_id).of_topic(TRANSACTION_STATE_TOPIC)
        for _, index in list(changes.deletes) + list(changes.followers):
            self._resign(index)
        for (_, index), info in changes.leaders.items():
            epoch = info.registration.leader_epoch
            if self._epochs.get(index) != epoch:
                self._resign(index)
                self._epochs[index] = epoch
                self._loading[index] = asyncio.get_running_loop().create_task(self._load(index, epoch), name=f"load-{TRANSACTION_STATE_TOPIC}-{index}")

    def _resign(self, index: int) -> None:
        self._epochs.pop(index, None)
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading.cancel()
        if self.partitions.pop(index, None) is not None:
            log.info("txn_coordinator.unloaded", partition=index)
            self.on_unloaded(index)

    async def _load(self, index: int, coordinator_epoch: int) -> None:
        started = time.monotonic()
        loaded = TxnStatePartition(index, coordinator_epoch)
        partition = self._rm.get_partition(TRANSACTION_STATE_TOPIC, index)
        records = 0
        try:
            if partition is not None:
                # Up to the log end, as Kafka loads: a new leader's high watermark may still lag
                # records the old leader had acknowledged, and a leader never truncates its own log.
                async for _, _, keyed in replay_batches(partition.log, partition.log.log_end_offset):
                    for record in keyed:
                        try:
                            replay(loaded.metadata, record.key, record.value)  # type: ignore[arg-type]
                        except UnknownRecordType:
                            continue
                        records += 1
        except (CoordinatorRecordError, StorageError, InvalidRecordError, ValueError):
            log.exception("txn_coordinator.load_failed", partition=index)
            self._loading.pop(index, None)
            return
        self._loading.pop(index, None)
        self.partitions[index] = loaded
        log.info(
            "txn_coordinator.loaded",
            partition=index,
            coordinator_epoch=coordinator_epoch,
            transactional_ids=len(loaded.metadata),
            records=records,
            seconds=round(time.monotonic() - started, 3),
        )
        self.on_loaded(loaded)

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use, as Kafka does on the first FindCoordinator."""
        if TRANSACTION_STATE_TOPIC in self._metadata.image.topics:
            return
        async with self._create_lock:
            if TRANSACTION_STATE_TOPIC in self._metadata.image.topics:
                return
            cfg = self._config
            await create_internal_topic(
                self._controller,
                TRANSACTION_STATE_TOPIC,
                cfg.transaction_state_log_num_partitions,
                cfg.transaction_state_log_replication_factor,
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "min.insync.replicas": str(cfg.transaction_state_log_min_isr),
                    "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
                    "unclean.leader.election.enable": "false",
                },
            )

    async def wait_loaded(self, transactional_id: str, timeout_s: float) -> None:
        task = self._loading.get(self.partition_for(transactional_id))
        if task is not None:
            await asyncio.wait([task], timeout=timeout_s)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    # -- lookups -----------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> TxnStatePartition:
        """The loaded partition coordinating the id, or CoordinatorNotAvailable with Kafka's error."""
        index = self.partition_for(transactional_id)
        loaded = self.partitions.get(index)
        if loaded is not None:
            return loaded
        if index in self._loading:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_load_in_progress)
        if TRANSACTION_STATE_TOPIC not in self._metadata.image.topics:
            raise CoordinatorNotAvailable(ErrorCode.coordinator_not_available)
        raise CoordinatorNotAvailable(ErrorCode.not_coordinator)

    def coordinator_error(self, transactional_id: str) -> int:
        try:
            self.partition_of(transactional_id)
        except CoordinatorNotAvailable as e:
            return e.error_code
        return 0

    def all_metadata(self) -> Iterator[tuple[TxnStatePartition, TransactionMetadata]]:
        for loaded in list(self.partitions.values()):
            for metadata in list(loaded.metadata.values()):
                yield loaded, metadata

    # -- writing -----------------------------------------------------------------------------------

    def append_transaction(self, metadata: TransactionMetadata, transit: TxnTransitMetadata) -> Written:
        """Write a prepared transition and apply it once replicated; the error code (0: written).

        Memory follows only if the partition is still coordinated here at the same coordinator
        epoch when the write settles (else NOT_COORDINATOR: the new coordinator has reloaded the
        log); a failed write drops the pending state, as Kafka's appendTransactionToLog does."""
        transactional_id = metadata.transactional_id
        index, coordinator_epoch, error, required = self._write(transactional_id, encode_value(value_from_transit(transit)))

        def settle(error: int) -> int:
            current = self._coordinating(index, coordinator_epoch, metadata)
            if not error:
                if not current:
                    log.info("txn_coordinator.moved_while_writing", transactional_id=transactional_id, partition=index)
                    return ErrorCode.not_coordinator
                metadata.complete_transition_to(transit)
                return 0
            if current:
                metadata.abort_pending()
            return error

        return self._when_replicated(index, error, required, transit.txn_timeout_ms, settle)

    def append_tombstone(self, metadata: TransactionMetadata) -> Written:
        """Expire a transactional id whose Dead transition is pending: write its tombstone and,
        once replicated, forget it; the error code (0: forgotten)."""
        index, coordinator_epoch, error, required = self._write(metadata.transactional_id, None)

        def settle(error: int) -> int:
            loaded = self.partitions.get(index)
            if not error and self._coordinating(index, coordinator_epoch, metadata) and metadata.pending_state is TransactionState.DEAD:
                assert loaded is not None
                del loaded.metadata[metadata.transactional_id]
                return 0
            # Kafka drops the pending Dead whatever moved: the id stays, to expire another time.
            metadata.abort_pending()
            return error or ErrorCode.not_coordinator

        return self._when_replicated(index, error, required, REQUEST_TIMEOUT_MS, settle)

    def _coordinating(self, index: int, coordinator_epoch: int, metadata: TransactionMetadata) -> bool:
        """Is ``metadata`` still what this node coordinates, at the epoch a write was made under?"""
        loaded = self.partitions.get(index)
        return loaded is not None and loaded.coordinator_epoch == coordinator_epoch and loaded.metadata.get(metadata.transactional_id) is metadata

    def _write(self, transactional_id: str, value: bytes | None) -> tuple[int, int, int, int]:
        """Append one record with acks=all: (partition, coordinator epoch, error code, the offset
        the high watermark must pass for the record to be replicated)."""
        index = self.partition_for(transactional_id)
        partition = self._rm.get_partition(TRANSACTION_STATE_TOPIC, index)
        loaded = self.partitions.get(index)
        if partition is None or loaded is None:
            return index, -1, ErrorCode.not_coordinator, -1
        batch = build_batch([(encode_key(transactional_id), value, (), now_ms())])
        try:
            info = partition.append_records_to_leader(memoryview(bytearray(batch)), AppendOrigin.COORDINATOR, ACKS_ALL)
        except StorageError as e:
            # NOT_ENOUGH_REPLICAS among others: the ISR is below transaction.state.log.min.isr.
            log.warning("txn_coordinator.append_failed", partition=index, transactional_id=transactional_id, error=str(e))
            return index, loaded.coordinator_epoch, e.error_code, -1
        self._rm.fetch_purgatory.touch((TRANSACTION_STATE_TOPIC, index))
        return index, loaded.coordinator_epoch, 0, info.last_offset + 1

    def _when_replicated(self, index: int, error: int, required: int, timeout_ms: int, settle: Callable[[int], int]) -> Written:
        """``settle`` the write with its client-facing error code: now if it failed or is already
        replicated (every write of a one-replica partition), else once the high watermark passes
        ``required`` or ``timeout_ms`` ends (REQUEST_TIMED_OUT, answered COORDINATOR_NOT_AVAILABLE)."""
        key = (TRANSACTION_STATE_TOPIC, index)
        code = error if error or required < 0 else self._rm.replicated(key, required)
        if code is not None:
            return settle(TXN_WRITE_ERRORS.get(code, code))
        loop = asyncio.get_running_loop()
        written: asyncio.Future[int] = loop.create_future()

        async def wait() -> None:
            try:
                code = await self._rm.wait_replicated(key, required, timeout_ms)
                written.set_result(settle(TXN_WRITE_ERRORS.get(code, code)))
            except asyncio.CancelledError:
                written.cancel()  # shutdown: nobody is answered any more
                raise
            except Exception as e:  # noqa: BLE001 - the request waiting on it fails with it
                log.exception("txn_coordinator.settle_failed", partition=index)
                written.set_exception(e)

        task = loop.create_task(wait(), name=f"replicate-{TRANSACTION_STATE_TOPIC}-{index}")
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)
        return written

    def shutdown(self) -> None:
        for task in self._loading.values():
            task.cancel()
        for task in list(self._replicating):
            task.cancel()
