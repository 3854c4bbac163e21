"""TransactionStateManager: the ``__transaction_state`` partitions this node leads and their ids.

The coordinator of transactional id t is the leader of partition
``abs(java_hash(t)) % transaction.state.log.num.partitions`` (the groups' hashing). For each
such partition the CoordinatorRuntime replays the latest record of every id into memory when
the node becomes its leader; until then its ids answer COORDINATOR_LOAD_IN_PROGRESS. A transition is written
as one record with acks=all and applied to memory only once the partition's high watermark
passes it (Kafka's appendTransactionToLog), so nothing a client was told can be lost when the
leader dies; while it waits the id's pending state makes other requests answer
CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.coordinator.coordinator_runtime import WRITE_ERRORS, CoordinatorRuntime, Written, now_ms
from broker.group.coordinator_records import UnknownRecordType
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from broker.transaction.transaction_log import decode_key, decode_value, encode_key, encode_value, metadata_from_value, value_from_transit
from broker.transaction.transaction_metadata import TransactionMetadata, TransactionState, TxnTransitMetadata
from protocol.record_batch import BatchHeader
from protocol.records import Record, build_batch
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage

log = structlog.get_logger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"

# Kafka's request.timeout.ms default, which bounds the wait of a tombstone (a transition waits
# for its transaction's timeout instead, as Kafka's appendTransactionToLog does).
REQUEST_TIMEOUT_MS = 30000

T = TypeVar("T")
# A value now, or later once the write it depends on is settled.
Settled = T | asyncio.Future[T]


def then(written: Written, answer: Callable[[int], T]) -> Settled[T]:
    """``answer`` of the write's error code: at once when the write is settled (the fast path of a
    partition with no follower to wait for), else a future of it, resolved once the write is."""
    if not isinstance(written, asyncio.Future):
        return answer(written)
    # The write's own loop, not the running one: a simulation settles writes on a loop it drives.
    out: asyncio.Future[T] = written.get_loop().create_future()

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


class TxnStateLoader:
    """The runtime's CoordinatorShardLoader for ``__transaction_state``: the latest record of each id."""

    def __init__(self, manager: TransactionStateManager) -> None:
        self._manager = manager

    def new_shard(self, index: int, leader_epoch: int) -> TxnStatePartition:
        return TxnStatePartition(index, leader_epoch)

    def replay(self, shard: TxnStatePartition, header: BatchHeader, batch: memoryview, records: list[Record]) -> int:
        applied = 0
        for record in records:
            try:
                replay(shard.metadata, record.key, record.value)  # type: ignore[arg-type]
            except UnknownRecordType:
                continue
            applied += 1
        return applied

    def on_loaded(self, index: int, shard: TxnStatePartition) -> None:
        log.info("txn_coordinator.loaded", partition=index, coordinator_epoch=shard.coordinator_epoch, transactional_ids=len(shard.metadata))
        self._manager.on_loaded(shard)

    def on_unloaded(self, index: int, shard: TxnStatePartition) -> None:
        self._manager.on_unloaded(index)


RuntimeFactory = Callable[[TxnStateLoader], CoordinatorRuntime[TxnStatePartition]]


class TransactionStateManager:
    def __init__(
        self,
        config: BrokerConfig,
        controller: AutoTopicCreationManager,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        *,
        make_runtime: RuntimeFactory | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        """``make_runtime``: the runtime over ``__transaction_state`` (default: the CoordinatorRuntime
        on ``replica_manager``; the cluster simulation gives one over its simulated logs)."""
        self._config = config
        self._controller = controller
        self._clock = clock
        loader = TxnStateLoader(self)
        self.runtime: CoordinatorRuntime[TxnStatePartition] = (
            make_runtime(loader)
            if make_runtime is not None
            else CoordinatorRuntime(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions, metadata, replica_manager, loader)
        )
        self.partitions = self.runtime.shards
        # Called with each partition once loaded: the coordinator resumes its unfinished commits and aborts.
        self.on_loaded: Callable[[TxnStatePartition], None] = lambda partition: None
        # Called with the index of each loaded partition dropped (leadership moved, or a new leader epoch
        # reloads it): the markers its transactions have in flight are withdrawn.
        self.on_unloaded: Callable[[int], None] = lambda index: None

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    # -- leadership and loading --------------------------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A MetadataPublisher: the runtime loads each ``__transaction_state`` partition this node
        now leads (again if its leader epoch, the coordinator epoch, changed) and unloads those it
        stopped leading."""
        self.runtime.on_metadata_update(delta, image)

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use, as Kafka does on the first FindCoordinator."""
        cfg = self._config
        await self.runtime.ensure_topic(
            self._controller,
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
        await self.runtime.wait_loaded(transactional_id, timeout_s)

    @property
    def loading(self) -> bool:
        return self.runtime.loading

    # -- lookups -----------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> TxnStatePartition:
        """The loaded partition coordinating the id, or CoordinatorNotAvailable with Kafka's error."""
        return self.runtime.shard_of(transactional_id)

    def coordinator_error(self, transactional_id: str) -> int:
        return self.runtime.coordinator_error(transactional_id)

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
        index = self.partition_for(transactional_id)
        loaded = self.partitions.get(index)

        def settle(error: int) -> int:
            current = self._coordinating(loaded, metadata)
            if not error:
                if not current:
                    log.info("txn_coordinator.moved_while_writing", transactional_id=transactional_id, partition=index)
                    return ErrorCode.not_coordinator
                metadata.complete_transition_to(transit)
                return 0
            if current:
                metadata.abort_pending()
            return WRITE_ERRORS.get(error, error)

        # A transition waits for its transaction's timeout, as Kafka's appendTransactionToLog does.
        return self.runtime.write(index, self._batch(transactional_id, encode_value(value_from_transit(transit))), transit.txn_timeout_ms, settle)

    def append_tombstone(self, metadata: TransactionMetadata) -> Written:
        """Expire a transactional id whose Dead transition is pending: write its tombstone and,
        once replicated, forget it; the error code (0: forgotten)."""
        index = self.partition_for(metadata.transactional_id)
        loaded = self.partitions.get(index)

        def settle(error: int) -> int:
            if not error and self._coordinating(loaded, metadata) and metadata.pending_state is TransactionState.DEAD:
                assert loaded is not None
                del loaded.metadata[metadata.transactional_id]
                return 0
            # Kafka drops the pending Dead whatever moved: the id stays, to expire another time.
            metadata.abort_pending()
            return WRITE_ERRORS.get(error, error) or ErrorCode.not_coordinator

        return self.runtime.write(index, self._batch(metadata.transactional_id, None), REQUEST_TIMEOUT_MS, settle)

    def _coordinating(self, loaded: TxnStatePartition | None, metadata: TransactionMetadata) -> bool:
        """Is ``metadata`` still what this node coordinates, in the partition a write was made to?"""
        return loaded is not None and self.partitions.get(loaded.index) is loaded and loaded.metadata.get(metadata.transactional_id) is metadata

    def _batch(self, transactional_id: str, value: bytes | None) -> bytes:
        return build_batch([(encode_key(transactional_id), value, (), self._clock())])

    def shutdown(self) -> None:
        self.runtime.shutdown()
