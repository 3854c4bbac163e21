"""Transaction markers sent to a real broker process from another node's coordinator: this test
process plays that coordinator, with a TransactionMarkerChannelManager whose metadata names the
broker as the leader, sending WriteTxnMarkers over the NetworkClient. The broker appends them:
an open transaction's data becomes stable, and a transaction's pending offsets in its
``__consumer_offsets`` partition are committed by its group coordinator."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any, Coroutine, Iterable, Iterator

import pytest
import uvloop
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0 import request as find_v0
from kio.schema.init_producer_id.v4 import request as init_v4
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from broker.network_client import NetworkClient
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager, TxnMarkerEntry
from protocol.records import build_batch
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.wire import request

RUN_TIMEOUT_S = 60.0
COORDINATOR_NODE = 1
BROKER_NODE = 2  # the broker process, as the coordinator's metadata knows it
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions of a default broker
READ_COMMITTED = 1
LATEST = -1


def leader_image(broker: BrokerProcess, partitions: Iterable[tuple[str, int]]) -> MetadataImage:
    """The coordinator's view: the broker process registered on PLAINTEXT, leading ``partitions``."""
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=BROKER_NODE,
            incarnation_id=uuid.uuid4(),
            broker_epoch=1,
            end_points=(RegisteredEndpoint(name="PLAINTEXT", host="127.0.0.1", port=broker.port),),
            fenced=False,
        )
    ]
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    for topic, indexes in by_topic.items():
        topic_id = uuid.uuid4()
        records.append(TopicRecord(name=topic, topic_id=topic_id))
        for index in indexes:
            records.append(PartitionRecord(partition_id=index, topic_id=topic_id, replicas=(BROKER_NODE,), isr=(BROKER_NODE,), leader=BROKER_NODE, leader_epoch=0, partition_epoch=0))
    return apply_records(MetadataImage(), records)


class NothingLocal:
    def write_markers(self, *args: Any) -> dict[tuple[str, int], int]:
        raise AssertionError("the coordinator leads none of these partitions")


class Completion:
    def __init__(self) -> None:
        self.written: asyncio.Future[TxnMarkerEntry] = asyncio.get_running_loop().create_future()

    def markers_still_wanted(self, entry: TxnMarkerEntry) -> bool:
        return True

    def markers_written(self, entry: TxnMarkerEntry) -> None:
        self.written.set_result(entry)


def send_markers(broker: BrokerProcess, entry: TxnMarkerEntry) -> None:
    """Have the markers written by the broker through a TransactionMarkerChannelManager, until it says so."""

    async def main() -> None:
        metadata = MetadataCache(COORDINATOR_NODE, "cluster", BrokerEndpoint(COORDINATOR_NODE, "127.0.0.1", 1), image=leader_image(broker, entry.partitions))
        network = NetworkClient("it-txn-coordinator", request_timeout_ms=10_000)
        markers = TransactionMarkerChannelManager(metadata, NothingLocal(), network, inter_broker_listener_name="plaintext")
        completion = Completion()
        try:
            markers.add_txn_markers_to_send(entry, completion)
            assert await completion.written == entry
        finally:
            markers.shutdown()
            network.close()
            await network.wait_closed()

    run(main())


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that does not verify transactions (KIP-890): the coordinator this process plays is
    not the one the broker's own metadata names, so the broker could not ask it."""
    b = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "data", {"transaction.partition.verification.enable": "false"}).start()
    yield b
    retire(b)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return uvloop.run(asyncio.wait_for(coro, RUN_TIMEOUT_S))


def producer_id(broker: BrokerProcess) -> tuple[int, int]:
    r = request(broker.bootstrap, init_v4.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


def last_stable_offset(broker: BrokerProcess, topic: str) -> int:
    r = request(
        broker.bootstrap,
        list_offsets_v7.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=READ_COMMITTED,
            topics=(list_offsets_v7.ListOffsetsTopic(name=topic, partitions=(list_offsets_v7.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),),
        ),
    )
    [part] = [p for t in r.topics for p in t.partitions]
    assert part.error_code == ErrorCode.none
    return part.offset


def test_a_remote_commit_marker_makes_the_transaction_stable(module_broker: BrokerProcess) -> None:
    topic = unique_topic("remote-marker")
    create_topic(module_broker.bootstrap, topic)
    pid, epoch = producer_id(module_broker)
    batch = build_batch([(None, b"in-txn", (), 0)], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    produced = request(
        module_broker.bootstrap,
        produce_v9.ProduceRequest(
            transactional_id="remote-marker-txn",
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=0, records=batch),)),),
        ),
    )
    assert [p.error_code for t in produced.responses for p in t.partition_responses] == [ErrorCode.none]
    assert last_stable_offset(module_broker, topic) == 0  # held back by the open transaction

    send_markers(module_broker, TxnMarkerEntry("remote-txn", 0, pid, epoch, 0, True, frozenset({(topic, 0)})))
    assert last_stable_offset(module_broker, topic) == 2  # the batch and its COMMIT marker


def offset_fetch(broker: BrokerProcess, group: str, topic: str) -> tuple[int, ErrorCode]:
    r = request(
        broker.bootstrap,
        fetch_v8.OffsetFetchRequest(
            groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
            require_stable=True,
        ),
    )
    [part] = [p for g in r.groups for t in g.topics for p in t.partitions]
    return part.committed_offset, part.error_code


def test_a_remote_marker_on_consumer_offsets_commits_the_pending_offsets(module_broker: BrokerProcess) -> None:
    bs = module_broker.bootstrap
    topic, group = unique_topic("remote-offsets"), unique_topic("remote-group")
    create_topic(bs, topic)
    assert request(bs, find_v0.FindCoordinatorRequest(key=group)).error_code == ErrorCode.none  # creates __consumer_offsets
    pid, epoch = producer_id(module_broker)
    commit = request(
        bs,
        txn_commit_v3.TxnOffsetCommitRequest(
            transactional_id="remote-txn",
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=(txn_commit_v3.TxnOffsetCommitRequestTopic(name=topic, partitions=(txn_commit_v3.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_leader_epoch=-1, committed_metadata="m"),)),),
        ),
    )
    assert [p.error_code for t in commit.topics for p in t.partitions] == [ErrorCode.none]
    assert offset_fetch(module_broker, group, topic) == (-1, ErrorCode.unstable_offset_commit)

    offsets_partition = (GROUP_METADATA_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
    send_markers(module_broker, TxnMarkerEntry("remote-txn", 0, pid, epoch, 0, True, frozenset({offsets_partition})))
    assert offset_fetch(module_broker, group, topic) == (42, ErrorCode.none)
