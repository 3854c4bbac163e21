"""Transactions with kafka-python 3.0.12's transactional producer against a real broker process."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError
from kafka.structs import OffsetAndMetadata

from tests.integration.conftest import StartBroker
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.txn_helpers import check_ctp_output, check_open_transaction_aborted, ctp_setup, start_txn_broker, values_of

TIMEOUT_MS = 20000


def producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5, request_timeout_ms=TIMEOUT_MS)
    p.init_transactions()
    return p


def test_consume_transform_produce_with_aborts(broker_factory: StartBroker) -> None:
    total = 20
    bs, source, sink, group = ctp_setup(broker_factory, total)
    tp = TopicPartition(source, 0)
    c = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False, isolation_level="read_committed", auto_offset_reset="earliest")
    p = producer(bs, unique_topic("kp-txn"))
    aborted: list[str] = []
    try:
        c.assign([tp])
        done, txn_number = 0, 0
        deadline = time.monotonic() + 60
        while done < total and time.monotonic() < deadline:
            msgs = c.poll(timeout_ms=1000, max_records=4).get(tp, [])
            if not msgs:
                continue
            p.begin_transaction()
            outputs = [f"out-{m.value.decode()}" for m in msgs]
            for value in outputs:
                p.send(sink, value=value.encode(), partition=0)
            p.flush()
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(msgs[-1].offset + 1, "", -1)}, group)
            if txn_number % 3 == 2:
                p.abort_transaction()
                aborted += outputs
                committed = c.committed(tp) or 0
                assert committed == done
                c.seek(tp, committed)
            else:
                p.commit_transaction()
                done += len(msgs)
                assert c.committed(tp) == done
            txn_number += 1
        assert done == total
    finally:
        c.close()
        p.close()
    check_ctp_output(bs, sink, total, aborted)


def test_second_producer_fences_the_first(broker_factory: StartBroker) -> None:
    bs = start_txn_broker(broker_factory).bootstrap
    topic, txn_id = unique_topic("kp-fence"), unique_topic("kp-fence-txn")
    create_topic(bs, topic)
    first = producer(bs, txn_id)
    first.begin_transaction()
    first.send(topic, value=b"zombie", partition=0)
    first.flush()
    second = producer(bs, txn_id)
    second.begin_transaction()
    second.send(topic, value=b"winner", partition=0)
    second.commit_transaction()
    with pytest.raises(KafkaError) as caught:
        first.send(topic, value=b"late", partition=0)
        first.commit_transaction()
    assert isinstance(caught.value, (ProducerFencedError, InvalidProducerEpochError)), repr(caught.value)
    second.close()
    first.close(timeout=1)
    assert values_of(bs, topic, "read_committed", 1) == ["winner"]


def test_transaction_past_its_timeout_is_aborted(broker_factory: StartBroker) -> None:
    broker = start_txn_broker(broker_factory)
    topic = unique_topic("kp-timeout")
    create_topic(broker.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique_topic("kp-abandoned"), transaction_timeout_ms=1500)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, value=b"never-committed", partition=0)
    p.flush()
    check_open_transaction_aborted(broker, topic)
    with pytest.raises(KafkaError):
        p.commit_transaction()
    p.close(timeout=1)


def test_a_regular_commit_made_during_a_transaction_outlives_its_commit(broker_factory: StartBroker) -> None:
    # Kafka materialises a transaction's offsets at its COMMIT marker only over older records:
    # compaction of __consumer_offsets keeps a partition's later record, so memory must too.
    broker = start_txn_broker(broker_factory)
    bs = broker.bootstrap
    topic, group = unique_topic("mixed"), unique_topic("mixed-commits")
    create_topic(bs, topic)
    tp = TopicPartition(topic, 0)

    def committed() -> int | None:
        c = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
        try:
            return c.committed(tp)
        finally:
            c.close()

    p = producer(bs, unique_topic("kp-mixed"))
    c = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(10, "", -1)}, group)
        c.commit({tp: OffsetAndMetadata(3, "", -1)})
        p.commit_transaction()
        # The next transaction's AddOffsetsToTxn waits (CONCURRENT_TRANSACTIONS) until the
        # commit's markers, the one on __consumer_offsets included, are written.
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(99, "", -1)}, group)
        p.abort_transaction()
    finally:
        c.close()
        p.close()
    assert committed() == 3
    broker.restart()
    assert committed() == 3, "the reloaded coordinator differs from the one that wrote the log"
