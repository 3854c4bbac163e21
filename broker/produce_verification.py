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


def supported_operation(produce_version: int) -> TransactionSupportedOperation:
    if produce_version >= ADD_PARTITION_PRODUCE_VERSION:
        return TransactionSupportedOperation.ADD_PARTITION
    if produce_version >= ABORTABLE_ERROR_PRODUCE_VERSION:
        return TransactionSupportedOperation.GENERIC_ERROR
    return TransactionSupportedOperation.DEFAULT_ERROR


def produce_result(error: int) -> ProduceResult:
    """A coordinator's answer as the producer is told it (Kafka's postVerificationCallback)."""
    if error in RETRIED_AS_NOT_ENOUGH_REPLICAS:
        message = f"Unable to verify the partition has been added to the transaction. Underlying error: {ErrorCode(error).name.upper()}"
        return ProduceResult(error_code=ErrorCode.not_enough_replicas, error_message=message)
    if error == ErrorCode.invalid_txn_state:
        return ProduceResult(error_code=error, error_message="Partition was not added to the transaction")
    return ProduceResult(error_code=error)


class ProduceVerifier:
    """``verify``: transaction.partition.verification.enable. Off, only Produce v12's partitions
    are still added to their transactions (transaction version 2 has no other way in)."""

    def __init__(self, replica_manager: ReplicaManager, manager: AddPartitionsToTxnManager, *, verify: bool = True) -> None:
        self._rm = replica_manager
        self._manager = manager
        self._verify = verify

    def start(self, transactional_id: str | None, entries: Iterable[Entry], produce_version: int) -> Verification | None:
        """Start verifying the transactional batches of one produce request; None when this
        request's transactions are not verified at all."""
        if not self._verify and produce_version < ADD_PARTITION_PRODUCE_VERSION:
            return None
        out = Verification()
        if transactional_id is None:
            # Nothing to verify (nor a header to read on this hot path): a transactional batch
            # without a transactional id meets the sentinel guard in the log, and is refused
            # unless its transaction is open already.
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
        now = time.time_ns() // 1_000_000
        to_verify: list[TopicPartition] = []
        for tp, sequence in first_sequences.items():
            partition = self._rm.get_partition(*tp)
            if partition is None:
                continue  # the append answers NOT_LEADER_OR_FOLLOWER
            try:
                guard = partition.maybe_start_transaction_verification(producer_id, sequence, producer_epoch, now)
            except StorageError as e:
                out.errors[tp] = ProduceResult(error_code=e.error_code, error_message=str(e) or None)
                continue
            out.guards[tp] = guard
            if guard is not SENTINEL_VERIFICATION_GUARD:
                to_verify.append(tp)
        if to_verify:
            out.pending = self._manager.verify_transaction(transactional_id, producer_id, producer_epoch, to_verify, supported_operation(produce_version))
        return out


__all__ = ["ProduceVerifier", "Verification", "produce_result", "supported_operation"]
