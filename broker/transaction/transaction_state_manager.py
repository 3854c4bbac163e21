"""TransactionStateManager: the ``__transaction_state`` partitions this node leads and their ids.

The coordinator of transactional id t is the leader of partition
``abs(java_hash(t)) % transaction.state.log.num.partitions`` (the groups' hashing). For each
such partition the latest record of every id is replayed into memory when the node becomes
its leader; until then its ids answer COORDINATOR_LOAD_IN_PROGRESS. A transition is written
as one record and applied to memory only once written.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator_partition import create_internal_topic, replay_batches
from broker.group.coordinator_records import CoordinatorRecordError, UnknownRecordType
from broker.group_coordinator import CoordinatorNotAvailable, now_ms, partition_for
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from broker.transaction.transaction_log import decode_key, decode_value, encode_key, encode_value, metadata_from_value, value_from_transit
from broker.transaction.transaction_metadata import TransactionMetadata, TxnTransitMetadata
from protocol.records import InvalidRecordError, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from storage.errors import StorageError
from storage.log import AppendOrigin

log = structlog.get_logger()

TRANSACTION_STATE_TOPIC = "__transaction_state"


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
                async for _, _, keyed in replay_batches(partition.log, partition.high_watermark):
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

    def append_transaction(self, metadata: TransactionMetadata, transit: TxnTransitMetadata) -> int:
        """Write a prepared transition; memory follows only if the write succeeded. Returns the error code."""
        error = self._write(metadata.transactional_id, encode_value(value_from_transit(transit)))
        if error:
            metadata.abort_pending()
            return error
        metadata.complete_transition_to(transit)
        return 0

    def append_tombstone(self, metadata: TransactionMetadata) -> int:
        """Expire a transactional id whose Dead transition is pending: write its tombstone and forget it."""
        error = self._write(metadata.transactional_id, None)
        if error:
            metadata.abort_pending()
            return error
        loaded = self.partitions.get(self.partition_for(metadata.transactional_id))
        if loaded is not None and loaded.metadata.get(metadata.transactional_id) is metadata:
            del loaded.metadata[metadata.transactional_id]
        return 0

    def _write(self, transactional_id: str, value: bytes | None) -> int:
        index = self.partition_for(transactional_id)
        partition = self._rm.get_partition(TRANSACTION_STATE_TOPIC, index)
        if partition is None or index not in self.partitions:
            return ErrorCode.not_coordinator
        batch = build_batch([(encode_key(transactional_id), value, (), now_ms())])
        try:
            partition.append_records_to_leader(memoryview(bytearray(batch)), AppendOrigin.COORDINATOR)
        except StorageError as e:
            # Kafka answers a failed transaction log write with an error the client retries.
            log.error("txn_coordinator.append_failed", partition=index, transactional_id=transactional_id, error=str(e))
            return ErrorCode.coordinator_not_available
        self._rm.fetch_purgatory.touch((TRANSACTION_STATE_TOPIC, index))
        return 0

    def shutdown(self) -> None:
        for task in self._loading.values():
            task.cancel()
