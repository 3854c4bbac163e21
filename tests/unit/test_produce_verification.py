"""ProduceVerifier under transaction version 2: a producer's next transaction begins while the
coordinator is still writing the previous one's markers (issue 32). The partition's producer
state is real; the coordinator answers CONCURRENT_TRANSACTIONS until the marker is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.add_partitions_to_txn_manager import TransactionSupportedOperation
from broker.produce_verification import ProduceVerifier, Verification, produce_result
from protocol.records import build_batch
from storage.producer_state_manager import ProducerStateManager, VerificationGuard
from tests.unit.test_verification_guard import PID, append, marker, start

TP = ("out", 0)
TXN = "copier"
NEXT_EPOCH = 1  # EndTxn of the transaction at epoch 0 bumped it (KIP-890 part 2)


class Partition:
    """The partition leader's side of Partition.maybe_start_transaction_verification."""

    def __init__(self, psm: ProducerStateManager) -> None:
        self.psm = psm

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int, epoch: int, now_ms: int) -> VerificationGuard:
        assert producer_id == PID
        return start(self.psm, sequence, epoch)


class ReplicaManager:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partition if (topic, index) == TP else None


class Coordinator:
    """AddPartitionsToTxnManager's answers: CONCURRENT_TRANSACTIONS while the previous transaction
    is PrepareCommit; its marker lands on the partition after ``busy_answers`` of them."""

    def __init__(self, psm: ProducerStateManager, busy_answers: int | None) -> None:
        self.psm = psm
        self.busy_answers = busy_answers
        self.asked: list[TransactionSupportedOperation] = []

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]], operation: TransactionSupportedOperation
    ) -> dict[tuple[str, int], int]:
        self.asked.append(operation)
        if self.busy_answers is None or len(self.asked) <= self.busy_answers:
            if len(self.asked) == self.busy_answers:
                marker(self.psm, 1, commit=True, epoch=NEXT_EPOCH)
            return {tp: ErrorCode.concurrent_transactions for tp in partitions}
        return {}


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    """The previous transaction (epoch 0) is open on the partition: its marker is not written yet."""
    state = ProducerStateManager("out-0", tmp_path)
    append(state, start(state), 0, 0)
    return state


def batch(sequence: int) -> tuple[str, int, memoryview]:
    """A batch of the producer's next transaction."""
    records = build_batch([(None, b"v", (), 0)], producer_id=PID, producer_epoch=NEXT_EPOCH, base_sequence=sequence, is_transactional=True)
    return TP[0], TP[1], memoryview(records)


def next_transaction(verifier: ProduceVerifier, produce_version: int) -> tuple[Verification, dict[tuple[str, int], int]]:
    """The first batch of the producer's next transaction; its verification and what it awaited."""

    async def verify() -> tuple[Verification, dict[tuple[str, int], int]]:
        verification = verifier.start(TXN, [batch(0)], produce_version)
        assert verification is not None and verification.pending is not None
        return verification, await verification.pending

    return asyncio.run(verify())


def verifier(psm: ProducerStateManager, coordinator: Coordinator, retry_max_ms: int = 5000) -> ProduceVerifier:
    return ProduceVerifier(ReplicaManager(Partition(psm)), coordinator, retry_backoff_ms=1, retry_max_ms=retry_max_ms)  # type: ignore[arg-type]


def test_the_add_waits_for_the_previous_transactions_markers(psm: ProducerStateManager) -> None:
    """Refused twice while the markers are written, then added: the producer is answered no error
    and appends with the guard made after the marker (the one made before it is void)."""
    coordinator = Coordinator(psm, busy_answers=2)
    verification, unverified = next_transaction(verifier(psm, coordinator), produce_version=12)
    assert unverified == {}
    assert coordinator.asked == [TransactionSupportedOperation.ADD_PARTITION] * 3
    append(psm, verification.guards[TP], 0, 2, epoch=NEXT_EPOCH)
    assert psm.has_ongoing_transaction(PID, NEXT_EPOCH)


def test_the_retries_end_with_the_retry_time(psm: ProducerStateManager) -> None:
    """Markers that never come: after add.partitions.to.txn.retry.backoff.max.ms the producer is
    told CONCURRENT_TRANSACTIONS, as Kafka 4 tells transaction version 2 clients, and retries."""
    coordinator = Coordinator(psm, busy_answers=None)
    _, unverified = next_transaction(verifier(psm, coordinator, retry_max_ms=30), produce_version=12)
    assert unverified == {TP: ErrorCode.concurrent_transactions}
    assert len(coordinator.asked) > 1
    assert produce_result(unverified[TP], 12).error_code == ErrorCode.concurrent_transactions


def test_a_verification_only_is_not_retried(psm: ProducerStateManager) -> None:
    """Transaction version 1 (Produce v11) added its partitions itself: as in Kafka, its leader
    only verifies, once."""
    coordinator = Coordinator(psm, busy_answers=1)
    _, unverified = next_transaction(verifier(psm, coordinator), produce_version=11)
    assert unverified == {TP: ErrorCode.concurrent_transactions}
    assert coordinator.asked == [TransactionSupportedOperation.GENERIC_ERROR]
    # Clients older than transaction version 2 may not retry it as such (Kafka's choice).
    assert produce_result(unverified[TP], 11).error_code == ErrorCode.not_enough_replicas


def test_a_pipelined_request_waits_for_the_first_ones_verification(psm: ProducerStateManager) -> None:
    """Three produce requests of the new transaction in flight on one connection (the Java
    client's batches): the first is verified while the markers are written; the next ones find
    the transaction open once it has appended, as on Kafka, which reads a connection's next
    request only after answering the last. They ask nothing, so none is answered the
    NETWORK_EXCEPTION of a replaced AddPartitionsToTxn, nor is appended before the first."""
    coordinator = Coordinator(psm, busy_answers=1)
    producer = verifier(psm, coordinator)
    appended: list[int] = []

    async def produce(sequence: int) -> None:
        # As ProduceHandler: started in the order the requests arrive, appended once verified.
        verification = producer.start(TXN, [batch(sequence)], 12)
        assert verification is not None and verification.pending is not None

        async def append_when_verified() -> None:
            assert await verification.pending == {}
            append(psm, verification.guards[TP], sequence, 2 + sequence, epoch=NEXT_EPOCH)
            appended.append(sequence)

        await asyncio.ensure_future(append_when_verified())

    async def pipelined() -> None:
        await asyncio.gather(*(produce(sequence) for sequence in range(3)))

    asyncio.run(pipelined())
    assert appended == [0, 1, 2]
    assert coordinator.asked == [TransactionSupportedOperation.ADD_PARTITION] * 2
