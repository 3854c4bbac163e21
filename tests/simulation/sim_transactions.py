"""The transaction coordinator of one node, on the leaders of __transaction_state: the broker's own
TransactionCoordinator, TransactionStateManager and TransactionMarkerChannelManager, over the
simulated logs and network.

They are asyncio code and run on the simulation's VirtualTimeLoop. What stands between them and
the simulation is what the broker's ReplicaManager and network layer give them:

- SimTxnStateRuntime is the CoordinatorRuntime of ``__transaction_state``: a partition's state is
  loaded by replaying its log when this node becomes its leader (at once: no
  COORDINATOR_LOAD_IN_PROGRESS here) and dropped when it stops; a write appends the state
  record with acks=all and settles once the high watermark passes it, with the produce path's
  errors (the DelayedProduce's timeout, NOT_LEADER_OR_FOLLOWER when the leadership goes).
- SimTransactionMarkerWriter is TransactionMarkerWriter: a marker is a ControlMarker appended
  as the coordinator with acks=all, answered once replicated.
- SimMarkerSender is the NetworkClient the channel manager sends WriteTxnMarkers with: a request
  over the simulated network, failed with NetworkError when no answer comes within the timeout.

Producer ids come from one counter of the simulation (the broker gets blocks of them from the
controller). No produce is verified with the coordinator (KIP-890), and no transaction carries
consumer offsets (TxnOffsetCommit).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterable

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from kio.static.primitive import i32

from broker.coordinator.coordinator_runtime import CoordinatorRuntime
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.network_client import NetworkError
from broker.partition import ACKS_ALL
from broker.transaction.transaction_coordinator import TransactionCoordinator
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager, TxnStateLoader, TxnStatePartition, replay
from protocol.record_batch import read_header
from protocol.records import iter_records
from storage.errors import StorageError
from storage.producer_state_manager import AppendOrigin
from tests.simulation.sim_replica import SimPartition, TopicPartition
from tests.simulation.simulated_disk import ControlMarker

if TYPE_CHECKING:
    from tests.simulation.sim_broker import SimNode

TXN_TOPIC = TRANSACTION_STATE_TOPIC
LISTENER = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str
    txn_timeout_ms: int
    expected: tuple[int, int] | None  # KIP-360: the (id, epoch) the producer resumes with


@dataclass(frozen=True, slots=True)
class AddPartitionsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class TxnResponse:
    """What the coordinator answered: the error, and InitProducerId's id and epoch."""

    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1


class SimTxnStateRuntime(CoordinatorRuntime[TxnStatePartition]):
    """The broker's CoordinatorRuntime for ``__transaction_state`` (its lookups and its unloading),
    loading from and writing to the node's simulated partitions."""

    def __init__(self, node: "SimNode", metadata: MetadataCache, loader: TxnStateLoader, num_partitions: int) -> None:
        super().__init__(TXN_TOPIC, num_partitions, metadata, None, loader)  # type: ignore[arg-type]  # no ReplicaManager: the node's replicas
        self.node = node
        self._writes: dict[int, list[Callable[[int], None]]] = {}  # partition -> how each write in flight completes

    def load(self, index: int, replica: SimPartition) -> None:
        """This node leads the partition at a new leader epoch: replay it to the log end, as the runtime loads."""
        self.resign(index)
        self._epochs[index] = replica.leader_epoch
        shard = self._loader.new_shard(index, replica.leader_epoch)
        plog = replica.log
        for key, value in plog.values_from(plog.log_start_offset):
            replay(shard.metadata, key, value)
        self.shards[index] = shard
        self._loader.on_loaded(index, shard)

    def resign(self, index: int) -> None:
        """The leadership went: writes in flight fail (NOT_COORDINATOR once settled), as the runtime's unload fails them."""
        for complete in self._writes.pop(index, []):
            complete(int(ErrorCode.not_coordinator))
        super().resign(index)

    def shutdown(self) -> None:
        for index in list(self.shards) + list(self._writes):
            self.resign(index)

    def write(self, index: int, batch: bytes | None, timeout_ms: int, settle: Callable[[int], Any], *_: Any) -> Any:
        if batch is None:
            return settle(0)
        tp = (TXN_TOPIC, index)
        replica = self.node.replicas.get(tp)
        if index not in self.shards or replica is None:
            return settle(int(ErrorCode.not_coordinator))
        records = [(r.key, r.value) for r in iter_records(batch, read_header(batch))]
        try:
            info = replica.append_records_to_leader(records, AppendOrigin.COORDINATOR, ACKS_ALL)
        except StorageError as e:
            return settle(e.error_code)
        future: asyncio.Future[Any] = self.node.sim.loop.create_future()

        def complete(error: int) -> None:
            waiting = self._writes.get(index, [])
            if complete in waiting:
                waiting.remove(complete)
            if future.done():
                return
            try:
                future.set_result(settle(error))
            except Exception as e:  # noqa: BLE001 - the request waiting on it fails with it
                future.set_exception(e)

        self._writes.setdefault(index, []).append(complete)
        self.node.await_replication(tp, info.last_offset + 1, info.first_offset, lambda response: complete(response.error_code))
        return future


class SimTransactionMarkerWriter:
    """TransactionMarkerWriter over the node's simulated partitions."""

    def __init__(self, node: "SimNode") -> None:
        self.node = node

    def write_markers(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | asyncio.Future[int]]:
        node = self.node
        results: dict[TopicPartition, int | asyncio.Future[int]] = {}
        marker = ControlMarker(producer_id, producer_epoch, coordinator_epoch, commit)
        for tp in sorted(partitions):
            replica = node.replicas.get(tp)
            if replica is None or not replica.is_leader:
                results[tp] = int(ErrorCode.not_leader_or_follower)
                continue
            try:
                info = replica.append_records_to_leader([marker], AppendOrigin.COORDINATOR, ACKS_ALL)
            except StorageError as e:
                results[tp] = e.error_code
                continue
            future: asyncio.Future[int] = node.sim.loop.create_future()
            node.await_replication(tp, info.last_offset + 1, info.first_offset, lambda response, f=future: _resolve(f, response.error_code))
            node.sim.stats.txn_markers += 1
            results[tp] = future
        return results


def _resolve(future: asyncio.Future[int], code: int) -> None:
    if not future.done():
        future.set_result(code)


class SimMarkerSender:
    """The NetworkClient the channel manager sends WriteTxnMarkers with."""

    def __init__(self, node: "SimNode", request_timeout_ms: int) -> None:
        self.node = node
        self._timeout_ms = request_timeout_ms
        self.waiting: dict[int, asyncio.Future[Any]] = {}

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        node = self.node
        sim = node.sim
        target = sim.by_address[destination]
        node.correlation += 1
        correlation_id = node.correlation
        future: asyncio.Future[Any] = sim.loop.create_future()
        self.waiting[correlation_id] = future
        # Through the node's events: a paused process sends once it resumes.
        node.schedule(sim.now, sim.transmit, node.node_id, target, "write_txn_markers_request", node.node_id, node.incarnation, correlation_id, body)
        timer = sim.loop.call_later((timeout_ms or self._timeout_ms) / 1000, self._timed_out, correlation_id)
        try:
            return await future
        finally:
            timer.cancel()
            self.waiting.pop(correlation_id, None)

    def _timed_out(self, correlation_id: int) -> None:
        future = self.waiting.pop(correlation_id, None)
        if future is not None and not future.done():
            future.set_exception(NetworkError(f"no answer to WriteTxnMarkers {correlation_id}"))

    def answered(self, correlation_id: int, response: Any) -> None:
        future = self.waiting.pop(correlation_id, None)
        if future is not None and not future.done():
            future.set_result(response)


class SimTransactionCoordinator:
    """One incarnation's transaction coordinator and marker channel, as BrokerServer wires them."""

    def __init__(self, node: "SimNode", num_partitions: int, txn_timeout_max_ms: int) -> None:
        sim = node.sim
        self.node = node
        self.metadata = MetadataCache(node.node_id, sim.cluster_id, BrokerEndpoint(node.node_id, *node.address), listener_name=LISTENER)
        self.marker_writer = SimTransactionMarkerWriter(node)
        self.sender = SimMarkerSender(node, sim.params.request_timeout_ms)
        self.markers = TransactionMarkerChannelManager(
            self.metadata,
            self.marker_writer,
            self.sender,
            inter_broker_listener_name=LISTENER,
            request_timeout_ms=sim.params.request_timeout_ms,
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
            rng=sim.txn_rng,
        )
        self.runtime: SimTxnStateRuntime | None = None

        def make_runtime(loader: TxnStateLoader) -> Any:
            self.runtime = SimTxnStateRuntime(node, self.metadata, loader, num_partitions)
            return self.runtime

        # No config, topic creator, metadata or replica manager: only the runtime uses them.
        self.state = TransactionStateManager(None, None, None, None, make_runtime=make_runtime, clock=lambda: sim.now)  # type: ignore[arg-type]
        self.coordinator = TransactionCoordinator(
            self.state,
            sim,
            self.markers,
            max_timeout_ms=txn_timeout_max_ms,
            transactional_id_expiration_ms=7 * 24 * 3600 * 1000,
            clock=lambda: sim.now,
        )
        self.tasks: set[asyncio.Task[Any]] = set()

    def load(self, index: int, replica: SimPartition) -> None:
        """Loaded on the loop (the coordinator's callbacks want it running), in the same virtual ms."""
        self.node.sim.loop.call_soon(self._load, index, replica, replica.leader_epoch)

    def _load(self, index: int, replica: SimPartition, leader_epoch: int) -> None:
        assert self.runtime is not None
        if self.node.txn is not self or not replica.is_leader or replica.leader_epoch != leader_epoch:
            return
        self.runtime.load(index, replica)
        self.node.sim.stats.txn_coordinator_loads += 1

    def abort_timed_out_transactions(self) -> None:
        self.node.sim.loop.call_soon(self._abort_timed_out_transactions)

    def _abort_timed_out_transactions(self) -> None:
        if self.node.txn is self:
            self.coordinator.abort_timed_out_transactions()

    def resign(self, index: int) -> None:
        assert self.runtime is not None
        self.runtime.resign(index)

    def shutdown(self) -> None:
        """The process is gone: its tasks and writes in flight with it."""
        for task in list(self.tasks):
            task.cancel()
        for future in list(self.sender.waiting.values()):
            future.cancel()
        self.markers.shutdown()
        assert self.runtime is not None
        self.runtime.shutdown()

    def handle(self, request: Any, reply: Callable[[TxnResponse], None]) -> None:
        """A client's InitProducerId, AddPartitionsToTxn or EndTxn, answered once settled."""
        self._answer(self._handle(request), reply)

    def _answer(self, answer: Coroutine[Any, Any, Any], reply: Callable[[Any], None]) -> None:
        """Run ``answer`` on the loop and send what it returns through the node's events (a paused process answers once it resumes)."""
        task = self.node.sim.loop.create_task(answer)
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            if not t.cancelled():
                self.node.schedule(self.node.sim.now, reply, t.result())

        task.add_done_callback(done)

    async def _handle(self, request: Any) -> TxnResponse:
        c = self.coordinator
        if isinstance(request, InitProducerIdRequest):
            result = await c.init_producer_id(request.transactional_id, request.txn_timeout_ms, request.expected)
            return TxnResponse(result.error_code, result.producer_id, result.producer_epoch)
        if isinstance(request, AddPartitionsRequest):
            added = c.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch, request.partitions)
            code = await added if isinstance(added, asyncio.Future) else added
            return TxnResponse(int(code))
        assert isinstance(request, EndTxnRequest)
        ended = c.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch, request.commit)
        result = await ended if isinstance(ended, asyncio.Future) else ended
        return TxnResponse(result.error_code, result.producer_id, result.producer_epoch)

    def write_txn_markers(self, request: Any, reply: Callable[[Any], None]) -> None:
        """The WriteTxnMarkers handler: every marker appended, answered once all are replicated."""
        written = [
            (
                m.producer_id,
                self.marker_writer.write_markers(
                    m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result, [(str(t.name), int(p)) for t in m.topics for p in t.partition_indexes]
                ),
            )
            for m in request.markers
        ]

        async def answer() -> Any:
            out = []
            for producer_id, results in written:
                codes = {tp: (await code if isinstance(code, asyncio.Future) else code) for tp, code in results.items()}
                by_topic: dict[str, list[tuple[int, int]]] = {}
                for (topic, index), code in sorted(codes.items()):
                    by_topic.setdefault(topic, []).append((index, code))
                topics = tuple(
                    WritableTxnMarkerTopicResult(
                        name=TopicName(topic), partitions=tuple(WritableTxnMarkerPartitionResult(partition_index=i32(i), error_code=ErrorCode(c)) for i, c in parts)
                    )
                    for topic, parts in by_topic.items()
                )
                out.append(WritableTxnMarkerResult(producer_id=ProducerId(producer_id), topics=topics))
            return WriteTxnMarkersResponse(markers=tuple(out))

        self._answer(answer(), reply)
