"""AddPartitionsToTxnManager: where a verification goes, how waiting ones are batched and replaced,
and how the coordinator's answers reach the producer."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Iterable

import pytest
from kio.schema.add_partitions_to_txn.v5 import response as add_v5
from kio.schema.errors import ErrorCode

from broker.add_partitions_to_txn_manager import TRANSACTION_STATE_TOPIC, AddPartitionsToTxnManager, TransactionSupportedOperation
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from broker.network_client import RequestTimeoutError

Op = TransactionSupportedOperation
THIS_NODE, COORDINATOR = 1, 2
TP = ("data", 0)


def image(leader: int) -> MetadataImage:
    """Two ``__transaction_state`` partitions: 0 led by ``leader``, 1 by nobody."""
    topic_id = uuid.uuid4()
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=COORDINATOR, incarnation_id=uuid.uuid4(), broker_epoch=1, end_points=(RegisteredEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9999),), fenced=False
        ),
        TopicRecord(name=TRANSACTION_STATE_TOPIC, topic_id=topic_id),
        PartitionRecord(partition_id=0, topic_id=topic_id, replicas=(leader,), isr=(leader,), leader=leader, leader_epoch=0, partition_epoch=0),
        PartitionRecord(partition_id=1, topic_id=topic_id, replicas=(leader,), isr=(leader,), leader=-1, leader_epoch=0, partition_epoch=0),
    ]
    return apply_records(MetadataImage(), records)


class Coordinator:
    """The remote coordinator: answers each transaction with ``codes`` (per transactional id), once released."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.codes: dict[str, int] = {}
        self.release = asyncio.Event()
        self.error: Exception | None = None

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        assert destination == ("127.0.0.1", 9999)
        self.requests.append(body)
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return add_v5.AddPartitionsToTxnResponse(
            throttle_time=0,  # type: ignore[arg-type]
            error_code=ErrorCode.none,
            results_by_transaction=tuple(
                add_v5.AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id,
                    topic_results=tuple(
                        add_v5.AddPartitionsToTxnTopicResult(
                            name=topic.name,
                            results_by_partition=tuple(
                                add_v5.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=ErrorCode(self.codes.get(t.transactional_id, 0)))
                                for p in topic.partitions
                            ),
                        )
                        for topic in t.topics
                    ),
                )
                for t in body.transactions
            ),
        )


class LocalCoordinator:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append(("verify", transactional_id))
        return {tp: ErrorCode.transaction_abortable for tp in partitions}

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]) -> int:
        self.asked.append(("add", transactional_id))
        return ErrorCode.producer_fenced


def manager(leader: int, remote: Coordinator, local: LocalCoordinator | None = None, partition: int = 0) -> AddPartitionsToTxnManager:
    metadata = MetadataCache(THIS_NODE, "cluster", BrokerEndpoint(THIS_NODE, "127.0.0.1", 1), image=image(leader))
    return AddPartitionsToTxnManager(metadata, local or LocalCoordinator(), remote, lambda tid: partition, inter_broker_listener_name="plaintext")


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 5))


def test_waiting_transactions_go_in_one_request_behind_the_one_in_flight() -> None:
    async def main() -> None:
        remote = Coordinator()
        m = manager(COORDINATOR, remote)
        first = asyncio.ensure_future(m.verify_transaction("a", 1, 0, [TP], Op.DEFAULT_ERROR))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(m.verify_transaction("b", 2, 0, [TP], Op.DEFAULT_ERROR))
        third = asyncio.ensure_future(m.verify_transaction("c", 3, 0, [("data", 1)], Op.ADD_PARTITION))
        await asyncio.sleep(0.01)
        assert len(remote.requests) == 1  # one in flight per coordinator
        remote.codes = {"b": ErrorCode.transaction_abortable, "c": ErrorCode.producer_fenced}
        remote.release.set()
        assert await first == {}
        assert await second == {TP: ErrorCode.invalid_txn_state}  # an old client is not told TRANSACTION_ABORTABLE
        assert await third == {("data", 1): ErrorCode.invalid_producer_epoch}  # producers expect this when fenced
        [_, batched] = remote.requests
        assert [(t.transactional_id, t.verify_only) for t in batched.transactions] == [("b", True), ("c", False)]

    run(main())


@pytest.mark.parametrize(("first_epoch", "second_epoch", "first_told", "second_told"), [(0, 0, ErrorCode.network_exception, None), (0, 1, ErrorCode.invalid_producer_epoch, None), (1, 0, None, ErrorCode.invalid_producer_epoch)])
def test_a_second_verification_of_one_id_replaces_or_is_refused(first_epoch: int, second_epoch: int, first_told: int | None, second_told: int | None) -> None:
    async def main() -> None:
        remote = Coordinator()
        m = manager(COORDINATOR, remote)
        blocker = asyncio.ensure_future(m.verify_transaction("other", 9, 0, [TP], Op.GENERIC_ERROR))
        await asyncio.sleep(0.01)
        first = asyncio.ensure_future(m.verify_transaction("a", 1, first_epoch, [TP], Op.GENERIC_ERROR))
        second = asyncio.ensure_future(m.verify_transaction("a", 1, second_epoch, [TP], Op.GENERIC_ERROR))
        await asyncio.sleep(0.01)
        remote.release.set()
        assert await first == ({TP: first_told} if first_told else {})
        assert await second == ({TP: second_told} if second_told else {})
        assert await blocker == {}

    run(main())


def test_no_answer_is_a_network_exception() -> None:
    async def main() -> None:
        remote = Coordinator()
        remote.error = RequestTimeoutError("slow")
        remote.release.set()
        assert await manager(COORDINATOR, remote).verify_transaction("a", 1, 0, [TP], Op.GENERIC_ERROR) == {TP: ErrorCode.network_exception}

    run(main())


def test_no_coordinator_is_coordinator_not_available() -> None:
    async def main() -> None:
        m = manager(COORDINATOR, Coordinator(), partition=1)
        assert await m.verify_transaction("a", 1, 0, [TP], Op.GENERIC_ERROR) == {TP: ErrorCode.coordinator_not_available}

    run(main())


def test_this_nodes_coordinator_is_asked_directly() -> None:
    async def main() -> None:
        local = LocalCoordinator()
        m = manager(THIS_NODE, Coordinator(), local)
        assert await m.verify_transaction("a", 1, 0, [TP], Op.GENERIC_ERROR) == {TP: ErrorCode.transaction_abortable}
        assert await m.verify_transaction("b", 1, 0, [TP], Op.ADD_PARTITION) == {TP: ErrorCode.invalid_producer_epoch}
        assert local.asked == [("verify", "a"), ("add", "b")]

    run(main())
