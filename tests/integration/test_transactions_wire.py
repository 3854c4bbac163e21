"""The transaction APIs spoken on the wire: the forms and errors stock clients seldom show, and a
restart of a broker that wrote PrepareCommit but not yet its markers."""

from __future__ import annotations

import datetime

from confluent_kafka import Producer
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.describe_transactions.v0 import request as describe_v0
from kio.schema.end_txn.v1 import request as end_v1
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.init_producer_id.v4 import request as init_v4
from kio.schema.list_transactions.v1 import request as list_v1
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3
from kio.schema.write_txn_markers.v1 import request as markers_v1

from broker.coordinator.coordinator_partitioner import partition_for
from broker.transaction.transaction_log import PartitionsSchema, TransactionLogValue, encode_key, encode_value
from broker.transaction.transaction_metadata import TransactionState
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic, unique_topic, watermarks
from tests.integration.txn_helpers import start_txn_broker, txn_producer, values_of
from tests.integration.wire import request


def init(bootstrap: str, transactional_id: str, timeout_ms: int = 60000) -> tuple[int, int, int]:
    r = request(bootstrap, init_v4.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms), producer_id=-1, producer_epoch=-1))
    return r.error_code, r.producer_id, r.producer_epoch


def add(bootstrap: str, transactional_id: str, pid: int, epoch: int, topics: dict[str, tuple[int, ...]]) -> dict[tuple[str, int], ErrorCode]:
    r = request(
        bootstrap,
        add_v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(add_v3.AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in topics.items()),
        ),
    )
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def describe(bootstrap: str, *ids: str):  # type: ignore[no-untyped-def]
    return request(bootstrap, describe_v0.DescribeTransactionsRequest(transactional_ids=ids)).transaction_states


def offset_fetch(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, ErrorCode]:
    r = request(
        bootstrap,
        fetch_v8.OffsetFetchRequest(
            groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
            require_stable=require_stable,
        ),
    )
    [part] = [p for g in r.groups for t in g.topics for p in t.partitions]
    return part.committed_offset, part.error_code


def test_find_coordinator_for_transactional_ids(module_broker: BrokerProcess) -> None:
    r = request(module_broker.bootstrap, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=("txn-a", "")))
    assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [("txn-a", ErrorCode.none, module_broker.port), ("", ErrorCode.invalid_request, -1)]


def test_a_transaction_on_the_wire(module_broker: BrokerProcess) -> None:
    bs = module_broker.bootstrap
    topic, txn, other, group = unique_topic("w"), unique_topic("wtx"), unique_topic("wtx2"), unique_topic("wg")
    create_topic(bs, topic, partitions=2)
    request(bs, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(txn, other)))
    assert init(bs, txn, timeout_ms=10**9)[0] == ErrorCode.invalid_transaction_timeout
    error, pid, epoch = init(bs, txn)
    assert (error, epoch) == (ErrorCode.none, 0) and pid >= 0
    assert add(bs, txn, pid, epoch, {topic: (0,), "no-such-topic": (0,)}) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert add(bs, txn, pid, epoch, {topic: (0, 1)}) == {(topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none}
    assert add(bs, txn, pid + 1, epoch, {topic: (0,)}) == {(topic, 0): ErrorCode.invalid_producer_id_mapping}
    offsets = request(bs, add_offsets_v3.AddOffsetsToTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=group))
    assert offsets.error_code == ErrorCode.none

    commit = request(
        bs,
        txn_commit_v3.TxnOffsetCommitRequest(
            transactional_id=txn,
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
    # Pending in the open transaction: unstable for read_committed consumers, invisible to others.
    assert offset_fetch(bs, group, topic, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)
    assert offset_fetch(bs, group, topic, require_stable=False) == (-1, ErrorCode.none)

    # v4+: batched, with verify_only (how brokers check a partition is in a transaction).
    _, other_pid, other_epoch = init(bs, other)
    batched = request(
        bs,
        add_v4.AddPartitionsToTxnRequest(
            transactions=(
                add_v4.AddPartitionsToTxnTransaction(transactional_id=txn, producer_id=pid, producer_epoch=epoch, verify_only=True, topics=(add_v4.AddPartitionsToTxnTopic(name=topic, partitions=(1,)),)),
                add_v4.AddPartitionsToTxnTransaction(transactional_id=other, producer_id=other_pid, producer_epoch=other_epoch, verify_only=True, topics=(add_v4.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)),
            )
        ),
    )
    assert batched.error_code == ErrorCode.none
    assert {r.transactional_id: [p.partition_error_code for t in r.topic_results for p in t.results_by_partition] for r in batched.results_by_transaction} == {
        txn: [ErrorCode.none],
        other: [ErrorCode.transaction_abortable],  # Kafka 4: the asking leader tells older clients INVALID_TXN_STATE
    }

    [state] = describe(bs, txn)
    assert (state.error_code, state.transaction_state, state.producer_id, state.producer_epoch) == (ErrorCode.none, "Ongoing", pid, epoch)
    assert state.transaction_timeout == datetime.timedelta(minutes=1)
    assert {t.topic: tuple(t.partitions) for t in state.topics}[topic] == (0, 1)
    assert "__consumer_offsets" in {t.topic for t in state.topics}
    listed = request(bs, list_v1.ListTransactionsRequest(state_filters=("Ongoing", "Nope"), producer_id_filters=(pid,), duration_filter=-1))
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(txn, "Ongoing")]
    assert listed.unknown_state_filters == ("Nope",)

    # Before v2 a client does not know PRODUCER_FENCED: it is told INVALID_PRODUCER_EPOCH.
    assert request(bs, end_v1.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch + 1, committed=True)).error_code == ErrorCode.invalid_producer_epoch
    assert request(bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch + 1, committed=True)).error_code == ErrorCode.producer_fenced
    assert request(bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True)).error_code == ErrorCode.none
    [state] = describe(bs, txn)
    assert (state.transaction_state, state.topics) == ("CompleteCommit", ())
    assert offset_fetch(bs, group, topic, require_stable=True) == (42, ErrorCode.none)
    # A COMMIT marker in each partition of the transaction.
    assert watermarks(bs, topic, 0)[1] == watermarks(bs, topic, 1)[1] == 1
    [missing] = describe(bs, "never-initialised")
    assert missing.error_code == ErrorCode.transactional_id_not_found


def test_write_txn_markers(module_broker: BrokerProcess) -> None:
    bs = module_broker.bootstrap
    topic = unique_topic("m")
    create_topic(bs, topic)
    marker = markers_v1.WritableTxnMarker(
        producer_id=4242,
        producer_epoch=0,
        transaction_result=False,
        topics=(markers_v1.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)), markers_v1.WritableTxnMarkerTopic(name="gone", partition_indexes=(3,))),
        coordinator_epoch=0,
    )
    r = request(bs, markers_v1.WriteTxnMarkersRequest(markers=(marker,)))
    assert {(t.name, p.partition_index): p.error_code for m in r.markers for t in m.topics for p in t.partitions} == {
        (topic, 0): ErrorCode.none,
        ("gone", 3): ErrorCode.unknown_topic_or_partition,
    }
    assert watermarks(bs, topic, 0)[1] == 1


def test_prepare_commit_is_completed_after_a_restart(broker_factory: StartBroker) -> None:
    broker = start_txn_broker(broker_factory)
    bs = broker.bootstrap
    topic, txn = unique_topic("prep"), unique_topic("prep-txn")
    create_topic(bs, topic)
    p = txn_producer(bs, txn)
    p.begin_transaction()
    p.produce(topic, value=b"in-doubt", partition=0)
    assert p.flush(20) == 0
    [state] = describe(bs, txn)
    assert state.transaction_state == "Ongoing"
    # What the coordinator writes before the markers, as if it crashed right after: PrepareCommit.
    prepare = TransactionLogValue(
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        transaction_timeout_ms=60000,
        transaction_status=TransactionState.PREPARE_COMMIT,
        transaction_partitions=(PartitionsSchema(topic=topic, partition_ids=(0,)),),
        transaction_last_update_timestamp_ms=int(state.transaction_start_time.timestamp() * 1000),
        transaction_start_timestamp_ms=int(state.transaction_start_time.timestamp() * 1000),
    )
    raw = Producer({"bootstrap.servers": bs, "enable.idempotence": False, "acks": "all"})
    raw.produce(TRANSACTION_STATE_TOPIC, key=encode_key(txn), value=encode_value(prepare), partition=partition_for(txn, 50))
    assert raw.flush(20) == 0
    assert values_of(bs, topic, "read_committed", 0, timeout_s=1) == []
    broker.kill()
    broker.start()
    assert values_of(bs, topic, "read_committed", 1, timeout_s=30) == ["in-doubt"]
    [state] = describe(bs, txn)
    assert state.transaction_state == "CompleteCommit"
