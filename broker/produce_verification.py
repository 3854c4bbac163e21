"""Transaction verification on the produce path (KIP-890), as Kafka's ReplicaManager does it.

A transactional batch whose producer has no transaction open on the partition gets a
VerificationGuard from the partition's producer state, and the producer's transaction
coordinator is asked (AddPartitionsToTxnManager) whether the partition is in the transaction,
or, for Produce v12 (transaction version 2), to add it. The append waits for the answer and
carries the guard; the log takes the batch only if that guard is still the partition's, so a
marker written meanwhile turns the late batch away instead of letting it open a transaction
its coordinator knows nothing about (a hanging transaction).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from typing import Awaitable, Iterable

from kio.schema.errors import ErrorCode

from broker.add_partitions_to_txn_manager import AddPartitionsToTxnManager, TransactionSupportedOperation
from broker.replica_manager import ProduceResult, ReplicaManager
from protocol.record_batch import InvalidBatch, read_header
from storage.errors import StorageError
from storage.producer_state_manager import SENTINEL_VERIFICATION_GUARD, VerificationGuard

TopicPartition = tuple[str, int]
Entry = tuple[str, int, "memoryview | None"]

# Produce v11 clients know TRANSACTION_ABORTABLE; v12 ones are on transaction version 2.
ABORTABLE_ERROR_PRODUCE_VERSION = 11
ADD_PARTITION_PRODUCE_VERSION = 12

# add.partitions.to.txn.retry.backoff.ms and add.partitions.to.txn.retry.backoff.max.ms, Kafka's defaults.
DEFAULT_RETRY_BACKOFF_MS = 20
DEFAULT_RETRY_BACKOFF_MAX_MS = 100

# Retriable coordinator answers older clients would not retry as such: NOT_ENOUGH_REPLICAS makes
# them retry the produce without a metadata refresh (Kafka's choice).
RETRIED_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


@dataclass(slots=True)
class Verification:
    """What the produce request appends with: each partition's guard, the partitions refused
    before the append, and the coordinator's answer still awaited (None: nothing to ask)."""

    guards: dict[TopicPartition, VerificationGuard] = field(default_factory=dict)
    errors: dict[TopicPartition, ProduceResult] = field(default_factory=dict)
    pending: Awaitable[dict[TopicPartition, int]] | None = None


@dataclass(frozen=True, slots=True)
class _Transaction:
    """What one produce request asks its transaction coordinator about."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    operation: TransactionSupportedOperation
    first_sequences: dict[TopicPartition, int]


def supported_operation(produce_version: int) -> TransactionSupportedOperation:
    if produce_version >= ADD_PARTITION_PRODUCE_VERSION:
        return TransactionSupportedOperation.ADD_PARTITION
    if produce_version >= ABORTABLE_ERROR_PRODUCE_VERSION:
        return TransactionSupportedOperation.GENERIC_ERROR
    return TransactionSupportedOperation.DEFAULT_ERROR


def produce_result(error: int, produce_version: int) -> ProduceResult:
    """A coordinator's answer as the producer is told it (Kafka's postVerificationCallback)."""
    # Transaction version 2 clients know CONCURRENT_TRANSACTIONS, common while a commit's markers
    # are written: Kafka 4 answers it as it is, so do we.
    if error == ErrorCode.concurrent_transactions and supported_operation(produce_version).adds:
        return ProduceResult(error_code=error)
    if error in RETRIED_AS_NOT_ENOUGH_REPLICAS:
        message = f"Unable to verify the partition has been added to the transaction. Underlying error: {ErrorCode(error).name.upper()}"
        return ProduceResult(error_code=ErrorCode.not_enough_replicas, error_message=message)
    if error == ErrorCode.invalid_txn_state:
        return ProduceResult(error_code=error, error_message="Partition was not added to the transaction")
    return ProduceResult(error_code=error)


class ProduceVerifier:
    """``verify``: transaction.partition.verification.enable. Off, only Produce v12's partitions
    are still added to their transactions (transaction version 2 has no other way in)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        manager: AddPartitionsToTxnManager,
        *,
        verify: bool = True,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
    ) -> None:
        self._rm = replica_manager
        self._manager = manager
        self.verify = verify
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_max_ms = retry_max_ms
        # The verification under way of each (transactional id, producer id, epoch).
        self._verifying: dict[tuple[str, int, int], asyncio.Future[dict[TopicPartition, int]]] = {}

    def start(self, transactional_id: str | None, entries: Iterable[Entry], produce_version: int) -> Verification | None:
        """Start verifying the transactional batches of one produce request; None when this
        request's transactions are not verified at all."""
        if not self.verify and produce_version < ADD_PARTITION_PRODUCE_VERSION:
            return None
        out = Verification()
        if transactional_id is None:
            # Nothing to verify (nor a header to read on this hot path): the handler refused a
            # request whose partitions' first batches are transactional without an id, as Kafka;
            # a transactional batch after a partition's first meets the sentinel guard in the
            # log, and is refused unless its transaction is open already.
            return out
        producers: set[tuple[int, int]] = set()
        first_sequences: dict[TopicPartition, int] = {}
        for topic, index, records in entries:
            if records is None:
                continue
            try:
                header = read_header(records)
            except InvalidBatch:
                continue  # the append refuses it with the reason
            if header.is_transactional and header.has_producer_id:
                producers.add((header.producer_id, header.producer_epoch))
                first_sequences[(topic, index)] = header.base_sequence
        if not first_sequences:
            return out
        if len(producers) > 1:
            refused = ProduceResult(error_code=ErrorCode.invalid_producer_id_mapping, error_message="Transactional records contained more than one producer ID")
            out.errors = {tp: refused for tp in first_sequences}
            return out
        ((producer_id, producer_epoch),) = producers
        txn = _Transaction(transactional_id, producer_id, producer_epoch, supported_operation(produce_version), first_sequences)
        key = (transactional_id, producer_id, producer_epoch)
        earlier = self._verifying.get(key)
        if earlier is None:
            to_verify = self._start_guards(out, txn, list(first_sequences))
            if not to_verify:
                return out
            asking = self._ask(out, txn, to_verify)
        else:
            asking = self._ask_after(earlier, out, txn)
        task = asyncio.ensure_future(asking)
        self._verifying[key] = task
        task.add_done_callback(functools.partial(self._verified, key))
        out.pending = task
        return out

    def _verified(self, key: tuple[str, int, int], task: asyncio.Future[dict[TopicPartition, int]]) -> None:
        if self._verifying.get(key) is task:
            del self._verifying[key]

    def _start_guards(self, out: Verification, txn: _Transaction, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Each partition's guard into ``out``; the partitions whose coordinator must be asked."""
        now = time.time_ns() // 1_000_000
        to_verify: list[TopicPartition] = []
        for tp in partitions:
            partition = self._rm.get_partition(*tp)
            if partition is None:
                continue  # the append answers NOT_LEADER_OR_FOLLOWER
            try:
                guard = partition.maybe_start_transaction_verification(txn.producer_id, txn.first_sequences[tp], txn.producer_epoch, now)
            except StorageError as e:
                out.errors[tp] = ProduceResult(error_code=e.error_code, error_message=str(e) or None)
                continue
            out.guards[tp] = guard
            if guard is not SENTINEL_VERIFICATION_GUARD:
                to_verify.append(tp)
        return to_verify

    async def _ask_after(self, earlier: asyncio.Future[dict[TopicPartition, int]], out: Verification, txn: _Transaction) -> dict[TopicPartition, int]:
        """A produce request pipelined behind another of the same transaction still verifying.

        Kafka reads a connection's next request only once it has answered the last, so the
        producer's next batches find the transaction open and need no verification. Here they
        are handled at once: each would ask the coordinator too, and the AddPartitionsToTxn
        waiting for a remote coordinator would be replaced by the next one of the same
        transaction, its producer answered NETWORK_EXCEPTION (NOT_ENOUGH_REPLICAS), and each
        later batch OUT_OF_ORDER_SEQUENCE_NUMBER once a later one got through first: the Java
        client's five batches in flight made it retry for seconds. So this one waits for the
        earlier one, whose produce request appends first (it awaited ``earlier`` first), and
        then asks only for what is still not in the transaction."""
        await asyncio.wait((earlier,))
        to_verify = self._start_guards(out, txn, list(txn.first_sequences))
        return await self._ask(out, txn, to_verify) if to_verify else {}

    async def _ask(self, out: Verification, txn: _Transaction, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The coordinator's answer; transaction version 2's add retried on CONCURRENT_TRANSACTIONS,
        as Kafka's ReplicaManager.handleProduceAppend does (add.partitions.to.txn.retry.backoff.ms,
        for up to add.partitions.to.txn.retry.backoff.max.ms).

        EndTxn answers once the Prepare record is written, before the markers are: a client that
        begins its next transaction at once has its first batch reach the coordinator while the
        previous transaction is still PrepareCommit. Told so at once, franz-go retries the
        produce only after a metadata refresh, which it spaces by its metadata min age (5 s):
        every transaction took 5 s (issue 32). The markers take milliseconds: waiting for them
        here, the producer is answered no error."""
        deadline = time.monotonic() + self._retry_max_ms / 1000
        while True:
            errors = await self._manager.verify_transaction(txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions, txn.operation)
            if not txn.operation.adds or ErrorCode.concurrent_transactions not in errors.values() or time.monotonic() >= deadline:
                return errors
            await asyncio.sleep(self._retry_backoff_ms / 1000)
            # Anew: the previous transaction's marker, written meanwhile, voids a guard made before it.
            partitions = self._start_guards(out, txn, partitions)
            if not partitions:
                return {}


__all__ = ["ProduceVerifier", "Verification", "produce_result", "supported_operation"]
