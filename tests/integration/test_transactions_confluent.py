"""Transactions with confluent-kafka (librdkafka) against a real broker process.

A consume-transform-produce loop that aborts every third transaction; fencing by a second
producer with the same transactional.id; a transaction abandoned past its timeout; a broker
restart with a transaction open."""

from __future__ import annotations

import time
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consumer, create_topic, poll_messages, produce_acked, unique_topic, wait_for
from tests.integration.txn_helpers import API_TIMEOUT_S, check_ctp_output, ctp_setup, start_txn_broker, txn_producer, values_of

@pytest.fixture
def txn_broker(broker_factory: StartBroker) -> BrokerProcess:
    return start_txn_broker(broker_factory)


def committed_offset(c: Consumer, topic: str) -> int:
    [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
    return int(tp.offset)


def test_consume_transform_produce_with_aborts(broker_factory: StartBroker) -> None:
    total, batch = 30, 5
    bs, source, sink, group = ctp_setup(broker_factory, total)

    c = consumer(bs, group_id=group, isolation_level="read_committed", auto_offset_reset="earliest", session_timeout_ms=10000)
    p = txn_producer(bs, unique_topic("ctp-txn"))
    aborted_values: list[str] = []
    try:
        c.subscribe([source])
        done, txn_number = 0, 0
        deadline = time.monotonic() + 90
        while done < total and time.monotonic() < deadline:
            msgs = c.consume(batch, 1.0)
            if not msgs:
                continue
            assert all(m.error() is None for m in msgs), [m.error() for m in msgs]
            # Read before the transaction writes offsets: while it is open they are unstable
            # (KIP-447) and a read_committed consumer's OffsetFetch waits for them to settle.
            before = committed_offset(c, source)
            p.begin_transaction()
            outputs = [f"out-{m.value().decode()}" for m in msgs]
            for value in outputs:
                p.produce(sink, value=value.encode(), partition=0)
            # Flushed before deciding, so aborted records are in the log for read_uncommitted readers.
            assert p.flush(API_TIMEOUT_S) == 0
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), API_TIMEOUT_S)
            if txn_number % 3 == 2:
                p.abort_transaction(API_TIMEOUT_S)
                aborted_values += outputs
                # The group's offset did not move; the inputs are processed again from it.
                assert committed_offset(c, source) == before
                for tp in c.assignment():
                    c.seek(TopicPartition(tp.topic, tp.partition, before))
            else:
                p.commit_transaction(API_TIMEOUT_S)
                done += len(msgs)
                assert committed_offset(c, source) == msgs[-1].offset() + 1
            txn_number += 1
        assert done == total, f"processed {done} of {total}"
    finally:
        c.close()
    check_ctp_output(bs, sink, total, aborted_values)
    check = consumer(bs, group_id=group)
    try:
        assert committed_offset(check, source) == total
    finally:
        check.close()


def test_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    topic, txn_id = unique_topic("fence"), unique_topic("fence-txn")
    create_topic(bs, topic)
    first = txn_producer(bs, txn_id)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    assert first.flush(API_TIMEOUT_S) == 0
    second = txn_producer(bs, txn_id)  # aborts the first one's transaction and takes a newer epoch
    second.begin_transaction()
    second.produce(topic, value=b"winner", partition=0)
    second.commit_transaction(API_TIMEOUT_S)
    with pytest.raises(KafkaException) as caught:
        first.produce(topic, value=b"late", partition=0)
        first.commit_transaction(API_TIMEOUT_S)
    error: KafkaError = caught.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), error
    assert values_of(bs, topic, "read_committed", 1) == ["winner"]
    assert values_of(bs, topic, "read_uncommitted", 2) == ["zombie", "winner"]


def test_transaction_past_its_timeout_is_aborted_and_lso_moves_on(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    topic = unique_topic("timeout")
    create_topic(bs, topic)
    abandoned = txn_producer(bs, unique_topic("abandoned"), transaction_timeout_ms=1500)
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"never-committed", partition=0)
    assert abandoned.flush(API_TIMEOUT_S) == 0
    produce_acked(bs, topic, [b"after"])  # a plain record behind the open transaction

    reader = consumer(bs, isolation_level="read_committed", group_id=unique_topic("lso"))
    try:
        # ListOffsets read_committed answers the LSO: held at the open transaction's first offset.
        assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1] == 0
        assert wait_for(lambda: reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1] == 3, timeout_s=20)
        reader.assign([TopicPartition(topic, 0, 0)])
        assert [m.value() for m in poll_messages(reader, 1)] == [b"after"]
    finally:
        reader.close()
    assert txn_broker.events_named("txn.timed_out")
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(API_TIMEOUT_S)


def test_open_transaction_survives_a_restart_and_times_out(broker_factory: StartBroker) -> None:
    broker = start_txn_broker(broker_factory)
    bs = broker.bootstrap
    topic = unique_topic("restart")
    create_topic(bs, topic)
    p = txn_producer(bs, unique_topic("restart-txn"), transaction_timeout_ms=4000)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(API_TIMEOUT_S) == 0
    broker.kill()
    broker.start()
    produce_acked(bs, topic, [b"later"])
    # The reloaded coordinator still knows the transaction, aborts it at its timeout, and the LSO moves.
    assert [v for v in values_of(bs, topic, "read_committed", 1, timeout_s=30)] == ["later"]
    assert broker.events_named("txn.timed_out", current_run=True)
