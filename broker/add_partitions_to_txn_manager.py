"""AddPartitionsToTxnManager: a partition leader asking transaction coordinators about its partitions.

Kafka's AddPartitionsToTxnManager (KIP-890). Before a producer's first transactional batch on a
partition is appended, the leader asks the producer's transaction coordinator whether the
partition is in the ongoing transaction (``verify_only``, transaction version 1), or has the
coordinator add it (transaction version 2, whose clients send no AddPartitionsToTxn). The
coordinator is the leader of the id's ``__transaction_state`` partition: this node's own
coordinator is asked directly; any other gets AddPartitionsToTxn v5, the broker-to-broker
form that carries many transactions, one request in flight per coordinator and the
transactions waiting meanwhile batched into the next. A newer request for a transactional id
already waiting replaces the older one, whose producer is answered INVALID_PRODUCER_EPOCH if
it was fenced, NETWORK_EXCEPTION (retriable) if it was the same producer retrying.

The answer is the error of each partition that could not be verified; an empty answer means
every partition may be appended to.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import structlog
from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.network_client import NetworkError

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
TRANSACTION_STATE_TOPIC = "__transaction_state"


class TransactionSupportedOperation(enum.Enum):
    """What the client of the request being verified understands (Kafka's enum of that name)."""

    DEFAULT_ERROR = "default"  # Produce v10 and older: told INVALID_TXN_STATE, never TRANSACTION_ABORTABLE
    GENERIC_ERROR = "generic"  # Produce v11, TxnOffsetCommit v4: TRANSACTION_ABORTABLE is understood
    ADD_PARTITION = "add"  # transaction version 2: the partition is added, not just verified

    @property
    def supports_abortable_error(self) -> bool:
        return self is not TransactionSupportedOperation.DEFAULT_ERROR

    @property
    def adds(self) -> bool:
        return self is TransactionSupportedOperation.ADD_PARTITION


class LocalTransactionCoordinator(Protocol):
    """The part of this node's TransactionCoordinator the manager asks directly."""

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> int | asyncio.Future[int]: ...


class RequestSender(Protocol):
    """NetworkClient.send."""

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any: ...


@dataclass(slots=True)
class _Waiting:
    transaction: AddPartitionsToTxnTransaction
    answer: asyncio.Future[dict[TopicPartition, int]]
    operation: TransactionSupportedOperation


@dataclass(slots=True)
class _NodeQueue:
    endpoint: BrokerEndpoint
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    sender: asyncio.Task[None] | None = None


class AddPartitionsToTxnManager:
    def __init__(
        self,
        metadata: MetadataCache,
        coordinator: LocalTransactionCoordinator,
        network: RequestSender,
        partition_for: Callable[[str], int],
        *,
        inter_broker_listener_name: str,
        request_timeout_ms: int | None = None,
    ) -> None:
        self._metadata = metadata
        self._coordinator = coordinator
        self._network = network
        self._partition_for = partition_for
        self._listener = inter_broker_listener_name.upper()
        self._request_timeout_ms = request_timeout_ms
        self._nodes: dict[int, _NodeQueue] = {}

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition], operation: TransactionSupportedOperation
    ) -> dict[TopicPartition, int]:
        """The error of each partition the coordinator did not verify (or add)."""
        coordinator = self._coordinator_node(transactional_id)
        if coordinator is None:
            return {tp: ErrorCode.coordinator_not_available for tp in partitions}
        if coordinator == self._metadata.node_id:
            results = await self._ask_local(transactional_id, producer_id, producer_epoch, partitions, operation)
        else:
            endpoint = self._metadata.broker_endpoint(coordinator, self._listener)
            if endpoint is None:
                return {tp: ErrorCode.coordinator_not_available for tp in partitions}
            results = await self._enqueue(coordinator, endpoint, _transaction(transactional_id, producer_id, producer_epoch, partitions, operation), operation)
        return {tp: _client_error(code, operation) for tp, code in results.items() if code}

    def shutdown(self) -> None:
        for queue in self._nodes.values():
            if queue.sender is not None:
                queue.sender.cancel()
            for waiting in queue.waiting.values():
                if not waiting.answer.done():
                    waiting.answer.set_result(_all(waiting.transaction, ErrorCode.network_exception))
        self._nodes.clear()

    def _coordinator_node(self, transactional_id: str) -> int | None:
        topic = self._metadata.image.topics.get(TRANSACTION_STATE_TOPIC)
        registration = topic.partitions.get(self._partition_for(transactional_id)) if topic is not None else None
        if registration is None or registration.leader == NO_LEADER:
            return None
        return registration.leader

    async def _ask_local(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition], operation: TransactionSupportedOperation
    ) -> dict[TopicPartition, int]:
        if not operation.adds:
            return self._coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
        added = self._coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
        error = await added if isinstance(added, asyncio.Future) else added
        return {tp: error for tp in partitions}

    # -- a remote coordinator ------------------------------------------------------------------------

    def _enqueue(
        self, node: int, endpoint: BrokerEndpoint, transaction: AddPartitionsToTxnTransaction, operation: TransactionSupportedOperation
    ) -> asyncio.Future[dict[TopicPartition, int]]:
        answer: asyncio.Future[dict[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        queue = self._nodes.get(node)
        if queue is None:
            queue = self._nodes[node] = _NodeQueue(endpoint)
        queue.endpoint = endpoint
        tid = str(transaction.transactional_id)
        existing = queue.waiting.get(tid)
        if existing is not None:
            if existing.transaction.producer_epoch > transaction.producer_epoch:
                answer.set_result(_all(transaction, ErrorCode.invalid_producer_epoch))
                return answer
            fenced = existing.transaction.producer_epoch < transaction.producer_epoch
            existing.answer.set_result(_all(existing.transaction, ErrorCode.invalid_producer_epoch if fenced else ErrorCode.network_exception))
        queue.waiting[tid] = _Waiting(transaction, answer, operation)
        if queue.sender is None:
            queue.sender = asyncio.get_running_loop().create_task(self._send_loop(node, queue), name=f"add-partitions-to-txn-{node}")
        return answer

    async def _send_loop(self, node: int, queue: _NodeQueue) -> None:
        """One request in flight to the coordinator; what arrives meanwhile goes in the next."""
        try:
            while queue.waiting:
                batch, queue.waiting = queue.waiting, {}
                try:
                    await self._send(node, queue.endpoint, batch)
                except Exception:
                    log.exception("add_partitions_to_txn.failed", coordinator=node)
                finally:
                    # Whatever the answer did not settle was not verified; no producer waits for ever.
                    _answer_all(batch, ErrorCode.network_exception)
        finally:
            queue.sender = None
            if self._nodes.get(node) is queue and not queue.waiting:
                del self._nodes[node]

    async def _send(self, node: int, endpoint: BrokerEndpoint, batch: dict[str, _Waiting]) -> None:
        request = AddPartitionsToTxnRequest(transactions=tuple(w.transaction for w in batch.values()))
        try:
            response = await self._network.send((endpoint.host, endpoint.port), request, timeout_ms=self._request_timeout_ms)
        except NetworkError as e:
            log.info("add_partitions_to_txn.send_failed", coordinator=node, error=str(e))
            _answer_all(batch, ErrorCode.network_exception)
            return
        if response.error_code:
            # A broker must not see CLUSTER_AUTHORIZATION_FAILED: the verification just did not happen.
            code = ErrorCode.invalid_txn_state if response.error_code == ErrorCode.cluster_authorization_failed else int(response.error_code)
            log.warning("add_partitions_to_txn.refused", coordinator=node, error=ErrorCode(response.error_code).name)
            _answer_all(batch, code)
            return
        for result in response.results_by_transaction:
            waiting = batch.pop(str(result.transactional_id), None)
            if waiting is None or waiting.answer.done():
                continue
            waiting.answer.set_result(
                {(str(t.name), int(p.partition_index)): int(p.partition_error_code) for t in result.topic_results for p in t.results_by_partition}
            )


def _client_error(code: int, operation: TransactionSupportedOperation) -> int:
    """Producers expect INVALID_PRODUCER_EPOCH when fenced; old ones do not know TRANSACTION_ABORTABLE."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and not operation.supports_abortable_error:
        return ErrorCode.invalid_txn_state
    return code


def _transaction(
    transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition], operation: TransactionSupportedOperation
) -> AddPartitionsToTxnTransaction:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return AddPartitionsToTxnTransaction(
        transactional_id=TransactionalId(transactional_id),
        producer_id=ProducerId(producer_id),
        producer_epoch=i16(producer_epoch),
        verify_only=not operation.adds,
        topics=tuple(AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(p) for p in ps)) for t, ps in by_topic.items()),
    )


def _all(transaction: AddPartitionsToTxnTransaction, code: int) -> dict[TopicPartition, int]:
    return {(str(t.name), int(p)): code for t in transaction.topics for p in t.partitions}


def _answer_all(batch: dict[str, _Waiting], code: int) -> None:
    for waiting in batch.values():
        if not waiting.answer.done():
            waiting.answer.set_result(_all(waiting.transaction, code))


__all__ = ["AddPartitionsToTxnManager", "TransactionSupportedOperation"]
