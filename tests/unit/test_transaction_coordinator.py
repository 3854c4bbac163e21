"""The transaction coordinator's rules on real logs of one node, no network: InitProducerId,
AddPartitionsToTxn, EndTxn with its markers, fencing, timeouts, expiration, reload after restart,
transactional offsets settled by markers, and writes to a replicated ``__transaction_state``
answered only once its follower (faked by hand) has copied them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Coroutine

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from broker.config import load_config
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group_coordinator import GROUP_METADATA_TOPIC, GroupCoordinator, now_ms
from broker.handlers.transactions import AddPartitionsToTxnHandler, EndTxnHandler
from broker.kafka_apis import RequestContext
from broker.transaction.transaction_coordinator import TransactionCoordinator
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from broker.transaction.transaction_marker_writer import TransactionMarkerWriter
from broker.transaction.transaction_metadata import TransactionState
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager
from protocol.control_records import read_marker
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import TOPIC_RESOURCE
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import ConfigRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader
from broker.network import ClientInfo
from broker.producer_id_manager import ProducerIdsUnavailableError
from tests.unit.leader_node import start_leader_node

S = TransactionState
DATA = "data"
TXN = "tx"


class ProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


class NoNetwork:
    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        raise AssertionError(f"nothing is remote on one node: {body}")


class OtherBroker:
    """Node 2 over a fake network: answers WriteTxnMarkers with ``error`` for every partition."""

    def __init__(self) -> None:
        self.error = ErrorCode.none
        self.received: list[WriteTxnMarkersRequest] = []

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        assert destination == ("node2", 9093)
        self.received.append(body)
        [marker] = body.markers
        topics = tuple(
            WritableTxnMarkerTopicResult(name=t.name, partitions=tuple(WritableTxnMarkerPartitionResult(partition_index=p, error_code=self.error) for p in t.partition_indexes))
            for t in marker.topics
        )
        return WriteTxnMarkersResponse(markers=(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics),))


class Node:
    """One node's replica manager, group coordinator and transaction coordinator over ``data_dir``."""

    def __init__(self, data_dir: Path, expiration_ms: int = 604800000, network: Any = None, txn_replicas: tuple[int, ...] = (1,)) -> None:
        """``txn_replicas``: ``__transaction_state``'s replicas, all in sync, led by this node (1),
        with transaction.state.log.min.isr 2 as a replicated log has it."""
        self.config = load_config(None, {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2", "transaction.max.timeout.ms": "60000"})
        records: list[MetadataRecord] = []
        for name in (TRANSACTION_STATE_TOPIC, GROUP_METADATA_TOPIC, DATA):
            topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
            records.append(TopicRecord(name=name, topic_id=topic_id))
            replicas = txn_replicas if name == TRANSACTION_STATE_TOPIC else (1,)
            for index in range(2):
                records.append(PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas, leader=1, leader_epoch=3, partition_epoch=0))
        if len(txn_replicas) > 1:
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=TRANSACTION_STATE_TOPIC, name="min.insync.replicas", value="2"))
        self.delta, self.metadata, self.log_manager, self.rm = start_leader_node(data_dir, records)
        self.groups = GroupCoordinator(self.config, None, self.metadata, self.rm)  # type: ignore[arg-type]
        self.state = TransactionStateManager(self.config, None, self.metadata, self.rm)  # type: ignore[arg-type]
        self.writer = TransactionMarkerWriter(self.rm, self.metadata, self.groups)
        # One node: every partition is local, nothing is ever sent.
        self.markers = TransactionMarkerChannelManager(
            self.metadata, self.writer, network or NoNetwork(), inter_broker_listener_name="PLAINTEXT", retry_backoff_ms=1, retry_backoff_max_ms=5
        )
        self.ids = ProducerIds()
        self.coordinator = TransactionCoordinator(self.state, self.ids, self.markers, max_timeout_ms=60000, transactional_id_expiration_ms=expiration_ms)

    async def load(self) -> None:
        self.groups.on_metadata_update(self.delta, self.metadata.image)
        self.state.on_metadata_update(self.delta, self.metadata.image)
        for _ in range(100):
            if len(self.state.partitions) == 2 and len(self.groups.shards) == 2:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("partitions not loaded")

    def close(self) -> None:
        self.markers.shutdown()
        self.groups.shutdown()
        self.log_manager.shutdown()

    def markers_in(self, topic: str, index: int) -> list[tuple[int, int, bool]]:
        """(producer id, epoch, commit) of every marker in a partition."""
        log = self.rm.get_partition(topic, index).log  # type: ignore[union-attr]
        out = []
        for header, batch in log.batches(0):
            if header.is_control:
                marker = read_marker(batch, header)
                assert marker is not None
                out.append((header.producer_id, header.producer_epoch, marker.commit))
        return out

    def meta(self, transactional_id: str = TXN):  # type: ignore[no-untyped-def]
        return self.state.partitions[self.state.partition_for(transactional_id)].metadata[transactional_id]


def run(tmp_path: Path, test: Callable[[Node], Coroutine[Any, Any, None]], **kwargs: Any) -> None:
    async def main() -> None:
        node = Node(tmp_path / "data", **kwargs)
        try:
            await node.load()
            await test(node)
        finally:
            node.close()

    asyncio.run(main())


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def init(node: Node, transactional_id: str = TXN, expected: tuple[int, int] | None = None) -> tuple[int, int]:
    result = await node.coordinator.init_producer_id(transactional_id, 30000, expected)
    assert result.error_code == 0, ErrorCode(result.error_code).name
    return result.producer_id, result.producer_epoch


# -- InitProducerId ------------------------------------------------------------------------------------


def test_init_allocates_an_id_and_bumps_the_epoch_each_time(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        assert await init(node) == (1000, 0)
        assert await init(node) == (1000, 1)
        assert await init(node, "other") == (1001, 0)
        assert node.meta().state is S.EMPTY and node.meta().txn_timeout_ms == 30000

    run(tmp_path, test)


@pytest.mark.parametrize(("transactional_id", "timeout_ms", "error"), [("", 1000, ErrorCode.invalid_request), (TXN, 0, ErrorCode.invalid_transaction_timeout), (TXN, 60001, ErrorCode.invalid_transaction_timeout)])
def test_init_refuses_bad_requests(tmp_path: Path, transactional_id: str, timeout_ms: int, error: int) -> None:
    async def test(node: Node) -> None:
        assert (await node.coordinator.init_producer_id(transactional_id, timeout_ms, None)).error_code == error

    run(tmp_path, test)


def test_kip360_resume_with_current_epoch_and_fenced_epoch(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        pid, epoch = await init(node)
        await init(node)  # another producer took epoch 1
        assert await init(node, expected=(pid, 1)) == (pid, 2)
        # The same call again (a lost response) answers the same epoch.
        assert await init(node, expected=(pid, 1)) == (pid, 2)
        assert (await node.coordinator.init_producer_id(TXN, 30000, (pid, epoch))).error_code == ErrorCode.producer_fenced
        assert (await node.coordinator.init_producer_id(TXN, 30000, (pid + 77, 2))).error_code == ErrorCode.producer_fenced

    run(tmp_path, test)


def test_loading_partition_answers_load_in_progress(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        index = node.state.partition_for(TXN)
        node.state.partitions.pop(index)
        node.state.runtime._loading[index] = None  # type: ignore[assignment]  # stands for the replay task
        assert (await node.coordinator.init_producer_id(TXN, 1000, None)).error_code == ErrorCode.coordinator_load_in_progress
        node.state.runtime._loading.clear()
        assert (await node.coordinator.init_producer_id(TXN, 1000, None)).error_code == ErrorCode.not_coordinator

    run(tmp_path, test)


# -- a transaction -------------------------------------------------------------------------------------


def test_commit_writes_markers_to_every_partition_then_completes(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0), (DATA, 1)]) == 0
        assert node.meta().state is S.ONGOING and node.meta().topic_partitions == {(DATA, 0), (DATA, 1)}
        assert c.verify_partitions(TXN, pid, epoch, [(DATA, 1), (GROUP_METADATA_TOPIC, 0)]) == {(DATA, 1): 0, (GROUP_METADATA_TOPIC, 0): ErrorCode.transaction_abortable}
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert node.meta().state is S.COMPLETE_COMMIT and node.meta().topic_partitions == set()
        assert node.markers_in(DATA, 0) == node.markers_in(DATA, 1) == [(pid, epoch, True)]
        # A retried EndTxn succeeds again and writes nothing; the other outcome is an invalid state.
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == ErrorCode.invalid_txn_state
        assert node.markers_in(DATA, 0) == [(pid, epoch, True)]
        # The next transaction aborts.
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == 0
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == 0
        assert node.meta().state is S.COMPLETE_ABORT
        assert node.markers_in(DATA, 1) == [(pid, epoch, True), (pid, epoch, False)]

    run(tmp_path, test)


def test_producer_checks(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid + 1, epoch, [(DATA, 0)]) == ErrorCode.invalid_producer_id_mapping
        assert c.add_partitions(TXN, pid, epoch + 1, [(DATA, 0)]) == ErrorCode.producer_fenced
        assert c.add_partitions("unknown", pid, epoch, [(DATA, 0)]) == ErrorCode.invalid_producer_id_mapping
        assert c.add_partitions("", pid, epoch, [(DATA, 0)]) == ErrorCode.invalid_request
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.invalid_txn_state  # nothing begun
        assert c.end_transaction(TXN, pid, epoch - 1, commit=True).error_code == ErrorCode.producer_fenced
        assert c.end_transaction(TXN, pid + 1, epoch, commit=True).error_code == ErrorCode.invalid_producer_id_mapping
        assert c.verify_partitions(TXN, pid, epoch + 1, [(DATA, 0)]) == {(DATA, 0): ErrorCode.producer_fenced}

    run(tmp_path, test)


def test_a_pending_transition_answers_concurrent_transactions(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        pid, epoch = await init(node)
        node.meta().prepare_add_partitions({(DATA, 0)}, now_ms())  # its write has not finished
        assert node.coordinator.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == ErrorCode.concurrent_transactions
        assert node.coordinator.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.concurrent_transactions
        assert (await node.coordinator.init_producer_id(TXN, 30000, None)).error_code == ErrorCode.concurrent_transactions

    run(tmp_path, test)


def test_init_with_an_open_transaction_aborts_it_under_a_fencing_epoch(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        result = await c.init_producer_id(TXN, 30000, None)
        assert result.error_code == ErrorCode.concurrent_transactions
        assert node.meta().state is S.COMPLETE_ABORT and node.meta().producer_epoch == epoch + 1
        assert node.markers_in(DATA, 0) == [(pid, epoch + 1, False)]
        # The zombie is fenced; the retry gets the next epoch.
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.producer_fenced
        assert await init(node) == (pid, epoch + 2)

    run(tmp_path, test)


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == 0
        c.abort_timed_out_transactions()
        assert node.meta().state is S.ONGOING  # not yet timed out
        node.meta().txn_start_timestamp -= 31000
        c.abort_timed_out_transactions()
        assert node.meta().state is S.COMPLETE_ABORT and node.meta().producer_epoch == epoch + 1
        assert node.markers_in(DATA, 1) == [(pid, epoch + 1, False)]
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == ErrorCode.producer_fenced

    run(tmp_path, test)


def test_unwritable_marker_keeps_prepare_state_until_written(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0), (DATA, 1)]) == 0
        partition = node.rm.partitions.pop((DATA, 0))  # leadership lost for a moment
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert node.meta().state is S.PREPARE_COMMIT
        assert node.markers_in(DATA, 1) == [(pid, epoch, True)]
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == ErrorCode.concurrent_transactions
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.concurrent_transactions
        # An abort sent while the commit's markers are written is retried too, as in Kafka (not
        # INVALID_TXN_STATE, which librdkafka takes as fatal), and changes nothing.
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == ErrorCode.concurrent_transactions
        assert node.meta().state is S.PREPARE_COMMIT
        c.abort_timed_out_transactions()  # asks again for markers already in flight: nothing new
        assert node.markers.pending_transactions == {TXN}
        await asyncio.sleep(0.02)
        assert node.meta().state is S.PREPARE_COMMIT  # still retried
        node.rm.partitions[(DATA, 0)] = partition
        await wait_for(lambda: node.meta().state is S.COMPLETE_COMMIT)
        assert node.markers_in(DATA, 0) == [(pid, epoch, True)]
        assert node.markers_in(DATA, 1) == [(pid, epoch, True)]  # written once
        assert node.markers.pending_transactions == set()

    run(tmp_path, test)


def test_unloading_the_txn_partition_withdraws_its_markers(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        partition = node.rm.partitions.pop((DATA, 0))
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == 0
        assert node.markers.pending_transactions == {TXN}
        node.state.runtime.resign(node.state.partition_for(TXN))  # leadership of the txn partition moved away
        assert node.markers.pending_transactions == set()
        node.rm.partitions[(DATA, 0)] = partition
        await asyncio.sleep(0.02)
        assert node.markers_in(DATA, 0) == []

    run(tmp_path, test)


def lead_data_1_from_node_2(node: Node) -> None:
    """The image now has (DATA, 1) led by node 2; this node's replica manager is not told."""
    register = RegisterBrokerRecord(
        broker_id=2, incarnation_id=uuid.UUID(int=2), broker_epoch=1, end_points=(RegisteredEndpoint(name="PLAINTEXT", host="node2", port=9093),), fenced=False
    )
    change = PartitionChangeRecord(partition_id=1, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, DATA), leader=2)
    node.metadata.image = apply_records(node.metadata.image, [register, change])


def test_remote_markers_complete_the_transaction_when_written(tmp_path: Path) -> None:
    other = OtherBroker()

    async def test(node: Node) -> None:
        c = node.coordinator
        lead_data_1_from_node_2(node)
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0), (DATA, 1)]) == 0
        other.error = ErrorCode.not_leader_or_follower  # node 2 has not caught up yet
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert node.meta().state is S.PREPARE_COMMIT and node.markers_in(DATA, 0) == [(pid, epoch, True)]
        await wait_for(lambda: len(other.received) >= 2)
        assert node.meta().state is S.PREPARE_COMMIT
        other.error = ErrorCode.none
        await wait_for(lambda: node.meta().state is S.COMPLETE_COMMIT)
        [marker] = other.received[-1].markers
        assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (pid, epoch, True, 3)
        assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [(DATA, [1])]
        assert node.markers_in(DATA, 1) == []  # not written here

    run(tmp_path, test, network=other)


def test_a_new_coordinator_epoch_cancels_the_old_markers_and_resends(tmp_path: Path) -> None:
    other = OtherBroker()

    async def test(node: Node) -> None:
        c = node.coordinator
        lead_data_1_from_node_2(node)
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == 0
        other.error = ErrorCode.request_timed_out
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == 0
        await wait_for(lambda: len(other.received) >= 1)
        # The txn partition is reloaded under a new leader epoch, as after a leadership change.
        index = node.state.partition_for(TXN)
        node.state.runtime.resign(index)
        assert node.markers.pending_transactions == set()
        other.error = ErrorCode.none
        await node.state.runtime._load(index, 4)
        await wait_for(lambda: node.meta().state is S.COMPLETE_ABORT)
        assert other.received[-1].markers[0].coordinator_epoch == 4

    run(tmp_path, test, network=other)


def test_init_producer_id_without_a_block_is_load_in_progress(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        async def unavailable() -> int:
            raise ProducerIdsUnavailableError("no controller")

        node.ids.generate_producer_id = unavailable  # type: ignore[method-assign]
        result = await node.coordinator.init_producer_id(TXN, 30000, None)
        assert result.error_code == ErrorCode.coordinator_load_in_progress

    run(tmp_path, test)


# -- restart ---------------------------------------------------------------------------------------------


def test_reload_replays_metadata_and_resumes_prepare_commit(tmp_path: Path) -> None:
    async def first(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        await init(node, "open")
        assert c.add_partitions("open", pid + 1, 0, [(DATA, 0)]) == 0
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == 0
        # Crash between PrepareCommit and the markers.
        meta = node.meta()
        assert node.state.append_transaction(meta, meta.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms())) == 0

    async def second(node: Node) -> None:
        assert node.meta().state is S.COMPLETE_COMMIT
        assert node.markers_in(DATA, 1) == [(1000, 0, True)]
        assert node.meta("open").state is S.ONGOING and node.meta("open").topic_partitions == {(DATA, 0)}
        assert node.meta("open").txn_timeout_ms == 30000

    run(tmp_path, first)
    run(tmp_path, second)


def test_expired_transactional_id_is_tombstoned(tmp_path: Path) -> None:
    async def first(node: Node) -> None:
        await init(node)
        await init(node, "busy")
        assert node.coordinator.add_partitions("busy", 1001, 0, [(DATA, 0)]) == 0
        await asyncio.sleep(0.01)
        node.coordinator.remove_expired_transactional_ids()
        assert TXN not in node.state.partitions[node.state.partition_for(TXN)].metadata
        assert node.meta("busy").state is S.ONGOING  # an open transaction never expires

    async def second(node: Node) -> None:
        assert TXN not in node.state.partitions[node.state.partition_for(TXN)].metadata

    run(tmp_path, first, expiration_ms=5)
    run(tmp_path, second, expiration_ms=5)


# -- Describe / List ------------------------------------------------------------------------------------


def test_describe_and_list(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        await init(node, "idle")
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        error, meta = c.describe(TXN)
        assert error == 0 and meta is not None and meta.state is S.ONGOING
        assert c.describe("nope") == (ErrorCode.transactional_id_not_found, None)
        error, unknown, listed = c.list_transactions([], [], -1)
        assert (error, unknown) == (0, []) and {(t.transactional_id, t.state) for t in listed} == {(TXN, "Ongoing"), ("idle", "Empty")}
        _, unknown, listed = c.list_transactions(["Ongoing", "Bogus"], [], -1)
        assert unknown == ["Bogus"] and [t.transactional_id for t in listed] == [TXN]
        _, unknown, listed = c.list_transactions(["Bogus"], [], -1)
        assert unknown == ["Bogus"] and listed == []
        _, _, listed = c.list_transactions([], [pid + 1], -1)
        assert [t.transactional_id for t in listed] == ["idle"]
        # KIP-994: only transactions running longer than the duration.
        _, _, listed = c.list_transactions(["Ongoing"], [], 60000)
        assert listed == []
        node.meta().txn_start_timestamp -= 120000
        _, _, listed = c.list_transactions(["Ongoing"], [], 60000)
        assert [t.transactional_id for t in listed] == [TXN]

    run(tmp_path, test)


# -- transactional offsets ------------------------------------------------------------------------------


def test_txn_offsets_become_visible_only_on_commit(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        group = "readers"
        offsets_partition = (GROUP_METADATA_TOPIC, node.groups.partition_for(group))
        shard = node.groups.shard_for(group)

        def txn_commit(offset: int) -> None:
            answers, records = shard.offsets.txn_commit(group, -1, "", None, [PartitionCommit(DATA, 0, offset, -1, "")], now_ms())
            assert [code for _, code in answers] == [0]
            assert node.groups.execute_transactional(group, pid, epoch, records) == 0

        assert c.add_partitions(TXN, pid, epoch, [offsets_partition]) == 0
        txn_commit(10)
        assert shard.offsets.fetch(group, [(DATA, 0)])[0][2] is None
        assert shard.offsets.has_pending_offset(group, DATA, 0)
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert shard.offsets.fetch(group, [(DATA, 0)])[0][2].offset == 10  # type: ignore[union-attr]
        assert not shard.offsets.has_pending_offset(group, DATA, 0)

        assert c.add_partitions(TXN, pid, epoch, [offsets_partition]) == 0
        txn_commit(20)
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == 0
        assert shard.offsets.fetch(group, [(DATA, 0)])[0][2].offset == 10  # type: ignore[union-attr]

        # A reload replays the same outcome from the records and markers.
        assert c.add_partitions(TXN, pid, epoch, [offsets_partition]) == 0
        txn_commit(30)
        index = offsets_partition[1]
        node.groups.runtime.resign(index)
        await node.groups.runtime._load(index, 3)
        reloaded = node.groups.shard_for(group)
        assert reloaded.offsets.fetch(group, [(DATA, 0)])[0][2].offset == 10  # type: ignore[union-attr]
        assert reloaded.offsets.has_pending_offset(group, DATA, 0)
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0
        assert reloaded.offsets.fetch(group, [(DATA, 0)])[0][2].offset == 30  # type: ignore[union-attr]

    run(tmp_path, test)


def test_exhausted_epoch_rotates_to_a_new_producer_id(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        pid, _ = await init(node)
        node.meta().producer_epoch = 32766
        assert await init(node) == (pid + 1, 0)
        node.meta().producer_epoch = 32766
        # Only a producer holding the exhausted epoch may rotate it; another one is fenced.
        assert (await node.coordinator.init_producer_id(TXN, 30000, (pid + 1, 3))).error_code == ErrorCode.producer_fenced

    run(tmp_path, test)


# -- a replicated __transaction_state ------------------------------------------------------------------
# The log has a second replica, node 2, which no one runs: a write is replicated only when the test
# plays node 2's fetch (``replicate``), so the coordinator's answers can be watched before and after.

REPLICATED = {"txn_replicas": (1, 2)}


def txn_partition(node: Node, transactional_id: str = TXN) -> Any:
    return node.rm.partitions[(TRANSACTION_STATE_TOPIC, node.state.partition_for(transactional_id))]


def replicate(node: Node, transactional_id: str = TXN) -> None:
    """Node 2 fetches the whole log: the high watermark reaches the log end."""
    partition = txn_partition(node, transactional_id)
    leo = partition.log.log_end_offset
    result = node.rm.read_for_follower(2, 1, partition.topic, partition.index, leo, -1, 0, -1, 1 << 20, node.metadata.image)
    assert result.error_code == 0 and partition.high_watermark == leo


def change_txn_partition(node: Node, transactional_id: str = TXN, **change: Any) -> None:
    """A PartitionChangeRecord for the id's ``__transaction_state`` partition, published to the
    replica manager and the state manager as the broker's metadata publishers are."""
    record = PartitionChangeRecord(partition_id=node.state.partition_for(transactional_id), topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, TRANSACTION_STATE_TOPIC), **change)
    delta = MetadataDelta(node.metadata.image)
    delta.replay(record)
    image = delta.apply(node.metadata.image.provenance + 1)
    node.metadata.image = image
    node.rm.apply_delta(delta, image)
    node.state.on_metadata_update(delta, image)


async def waiting(written: Any) -> asyncio.Future[Any]:
    """A write still waiting for the follower, after giving it every chance to finish."""
    assert isinstance(written, asyncio.Future), written
    await asyncio.sleep(0.02)
    assert not written.done()
    return written


async def replicated_init(node: Node, transactional_id: str = TXN, timeout_ms: int = 30000) -> tuple[int, int]:
    task = asyncio.ensure_future(node.coordinator.init_producer_id(transactional_id, timeout_ms, None))
    await asyncio.sleep(0.02)
    assert not task.done()
    replicate(node, transactional_id)
    result = await asyncio.wait_for(task, 5)
    assert result.error_code == 0, ErrorCode(result.error_code).name
    return result.producer_id, result.producer_epoch


def test_replicated_log_answers_each_write_once_the_follower_has_it(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        init_task = asyncio.ensure_future(c.init_producer_id(TXN, 30000, None))
        await asyncio.sleep(0.02)
        # Appended but not replicated: not answered, not applied, and the id is busy.
        assert not init_task.done() and node.meta().producer_epoch == -1 and node.meta().pending_state is S.EMPTY
        assert (await c.init_producer_id(TXN, 30000, None)).error_code == ErrorCode.concurrent_transactions
        replicate(node)
        assert (await asyncio.wait_for(init_task, 5)).producer_epoch == 0
        pid, epoch = node.meta().producer_id, 0

        added = await waiting(c.add_partitions(TXN, pid, epoch, [(DATA, 0)]))
        assert node.meta().state is S.EMPTY
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == ErrorCode.concurrent_transactions
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.concurrent_transactions
        replicate(node)
        assert await asyncio.wait_for(added, 5) == 0 and node.meta().state is S.ONGOING

        ended = await waiting(c.end_transaction(TXN, pid, epoch, commit=True))
        # No marker before PrepareCommit is replicated: a new coordinator could still find the transaction open.
        assert node.markers_in(DATA, 0) == [] and node.meta().state is S.ONGOING
        replicate(node)
        assert (await asyncio.wait_for(ended, 5)).error_code == 0
        assert node.markers_in(DATA, 0) == [(pid, epoch, True)]
        # CompleteCommit is written and waits in turn; the retried EndTxn is told to back off until then.
        await wait_for(lambda: node.meta().pending_state is S.COMPLETE_COMMIT)
        assert node.meta().state is S.PREPARE_COMMIT
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == ErrorCode.concurrent_transactions
        replicate(node)
        await wait_for(lambda: node.meta().state is S.COMPLETE_COMMIT and node.meta().pending_state is None)
        assert c.end_transaction(TXN, pid, epoch, commit=True).error_code == 0

    run(tmp_path, test, **REPLICATED)


def test_a_write_not_replicated_in_time_is_coordinator_not_available(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        # InitProducerId waits as long as the transaction timeout it asks for, as Kafka's does.
        result = await asyncio.wait_for(node.coordinator.init_producer_id(TXN, 100, None), 5)
        assert result.error_code == ErrorCode.coordinator_not_available
        assert node.meta().pending_state is None and node.meta().producer_epoch == -1
        # The retry writes again; once the follower has both records the second is answered.
        assert await replicated_init(node, timeout_ms=100) == (1000, 0)

    run(tmp_path, test, **REPLICATED)


def test_below_min_isr_a_write_is_refused_with_coordinator_not_available(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await replicated_init(node)
        change_txn_partition(node, isr=(1,))  # node 2 left the ISR: fewer than min.insync.replicas
        before = txn_partition(node).log.log_end_offset
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == ErrorCode.coordinator_not_available
        assert txn_partition(node).log.log_end_offset == before  # NOT_ENOUGH_REPLICAS: nothing appended
        assert node.meta().state is S.EMPTY and node.meta().pending_state is None

    run(tmp_path, test, **REPLICATED)


def test_isr_shrinking_under_a_waiting_write_is_coordinator_not_available(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await replicated_init(node, timeout_ms=100)
        added = await waiting(c.add_partitions(TXN, pid, epoch, [(DATA, 0)]))
        change_txn_partition(node, isr=(1,))
        # Below min.insync.replicas the high watermark stands still (KIP-966): the write times out.
        assert await asyncio.wait_for(added, 5) == ErrorCode.coordinator_not_available
        assert node.meta().state is S.EMPTY and node.meta().pending_state is None

    run(tmp_path, test, **REPLICATED)


def test_leadership_lost_under_a_waiting_write_is_not_coordinator(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await replicated_init(node)
        meta = node.meta()
        added = await waiting(c.add_partitions(TXN, pid, epoch, [(DATA, 0)]))
        change_txn_partition(node, leader=2)
        assert await asyncio.wait_for(added, 5) == ErrorCode.not_coordinator
        assert meta.state is S.EMPTY  # never applied here
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == ErrorCode.not_coordinator
        # Back as leader under a new epoch: the log is loaded to its end, past the high watermark, so
        # a leader knows every record it will go on to replicate (as Kafka loads).
        change_txn_partition(node, leader=1)
        await wait_for(lambda: node.state.partition_for(TXN) in node.state.partitions)
        assert node.meta().state is S.ONGOING and node.meta().topic_partitions == {(DATA, 0)}

    run(tmp_path, test, **REPLICATED)


def test_a_failed_fence_is_not_bumped_twice(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await replicated_init(node, timeout_ms=100)
        added = await waiting(c.add_partitions(TXN, pid, epoch, [(DATA, 0)]))
        replicate(node)
        assert await added == 0
        node.meta().txn_start_timestamp -= 1000
        c.abort_timed_out_transactions()  # PrepareAbort under epoch + 1, never replicated
        await wait_for(lambda: node.meta().has_failed_epoch_fence)
        assert node.meta().state is S.ONGOING and node.meta().producer_epoch == epoch + 1
        c.abort_timed_out_transactions()  # the next run fences with the same epoch
        await wait_for(lambda: node.meta().pending_state is S.PREPARE_ABORT)
        replicate(node)
        await wait_for(lambda: node.meta().pending_state is S.COMPLETE_ABORT)
        replicate(node)
        await wait_for(lambda: node.meta().state is S.COMPLETE_ABORT)
        assert node.meta().producer_epoch == epoch + 1 and not node.meta().has_failed_epoch_fence
        assert node.markers_in(DATA, 0) == [(pid, epoch + 1, False)]

    run(tmp_path, test, **REPLICATED)


def test_expiry_forgets_an_id_once_its_tombstone_is_replicated(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        await replicated_init(node)
        await asyncio.sleep(0.01)
        node.coordinator.remove_expired_transactional_ids()
        assert node.meta().pending_state is S.DEAD
        await asyncio.sleep(0.02)
        replicate(node)
        await wait_for(lambda: TXN not in node.state.partitions[node.state.partition_for(TXN)].metadata)

    run(tmp_path, test, expiration_ms=5, **REPLICATED)


def context(api_key: ApiKey, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1"))


async def answered(node: Node, result: Any, replicated: bool) -> Any:
    """A handler's response: at once on a one-replica log, else from a coroutine that waits for the follower."""
    if not replicated:
        assert not asyncio.iscoroutine(result)  # the synchronous fast path
        return result
    assert asyncio.iscoroutine(result)
    task = asyncio.ensure_future(result)
    await asyncio.sleep(0.02)
    assert not task.done()
    replicate(node)
    return await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("replicated", [False, True])
def test_handlers_answer_at_once_on_one_replica_and_later_on_a_replicated_log(tmp_path: Path, replicated: bool) -> None:
    async def test(node: Node) -> None:
        pid, epoch = await (replicated_init(node) if replicated else init(node))
        topics = (SimpleNamespace(name=DATA, partitions=(0,)),)
        add = SimpleNamespace(v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)
        added = await answered(node, AddPartitionsToTxnHandler(node.coordinator, node.metadata)(context(ApiKey.ADD_PARTITIONS_TO_TXN, 3), add), replicated)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        end = SimpleNamespace(transactional_id=TXN, producer_id=pid, producer_epoch=epoch, committed=True)
        ended = await answered(node, EndTxnHandler(node.coordinator)(context(ApiKey.END_TXN, 3), end), replicated)
        assert ended.error_code == 0 and node.markers_in(DATA, 0) == [(pid, epoch, True)]

    run(tmp_path, test, **(REPLICATED if replicated else {}))
