"""Idempotent producers against a real broker: lost responses, SIGKILL, and three clients.

Each retry test checks the broker did see the retries (a lost response or a crash with
batches in flight), and that every record is stored once, in order, at dense offsets.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Message, Producer
from kafka import KafkaProducer
from kio.schema.describe_producers.v0.request import (
    DescribeProducersRequest,
    TopicRequest,
)
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.fault_proxy import FaultProxy
from tests.integration.helpers import (
    consume,
    create_topic,
    produce_acked,
    wait_for,
    watermarks,
)
from tests.integration.wire import request

SEGMENT_BYTES = {"segment.bytes": "50000"}


def numbered(n: int, start: int = 0) -> list[bytes]:
    return [f"r{i:07d}".encode() for i in range(start, start + n)]


def assert_once_in_order(bootstrap: str, topic: str, expected: list[bytes]) -> None:
    assert watermarks(bootstrap, topic) == (0, len(expected)), "a retry was stored twice or a record is missing"
    got = consume(bootstrap, topic, 0, 0, len(expected), timeout_s=60)
    assert [m.offset() for m in got] == list(range(len(expected)))
    assert [m.value() for m in got] == expected


@pytest.fixture
def proxied_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FaultProxy]]:
    """A broker that advertises a FaultProxy in front of it, so clients only reach it through the proxy."""
    broker = BrokerProcess(tmp_path / "data")
    proxy = FaultProxy(broker.port, every=7, max_faults=5).start()
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    try:
        yield broker.start(), proxy
    finally:
        retire(broker)
        proxy.close()


def test_confluent_retries_after_lost_responses_store_each_record_once(proxied_broker: tuple[BrokerProcess, FaultProxy], topic_name: str) -> None:
    broker, proxy = proxied_broker
    create_topic(broker.bootstrap, topic_name, configs=SEGMENT_BYTES)
    values = numbered(20_000)
    offsets = produce_acked(
        broker.bootstrap, topic_name, values, timeout_s=90,
        enable_idempotence=True, linger_ms=5, batch_size=4000, message_timeout_ms=80_000, retry_backoff_ms=50,
    )
    assert proxy.faults == proxy.max_faults, f"only {proxy.faults} responses were lost"
    assert sorted(offsets) == list(range(len(values)))
    assert_once_in_order(broker.bootstrap, topic_name, values)


class IdempotentProducer:
    """Produces numbered records from a thread with idempotence on and patient retries."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        self.topic = topic
        self.count = count
        self.acked = 0
        self.errors: list[Any] = []
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, "batch.size": 4000,
            "message.timeout.ms": 90_000, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 100,
        })
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.remaining = -1

    def _on_delivery(self, err: Any, msg: Message) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(err)

    def _run(self) -> None:
        for value in numbered(self.count):
            for _ in range(10_000):
                try:
                    self._producer.produce(self.topic, value=value, partition=0, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.01)
            self._producer.poll(0)
        self.remaining = self._producer.flush(100)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(120)
        assert not self._thread.is_alive()


def test_sigkill_mid_produce_then_retries_store_each_record_once(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, configs=SEGMENT_BYTES)
    count = 60_000
    producer = IdempotentProducer(broker.bootstrap, topic_name, count)
    producer.start()
    assert wait_for(lambda: producer.acked >= 10_000, timeout_s=60, interval_s=0.01), f"only {producer.acked} acknowledged"
    broker.kill()
    acked_at_kill = producer.acked
    time.sleep(1.0)
    broker.start()
    rebuilt = [e for e in broker.events_named("log.producer_state_rebuilt", current_run=True) if e.get("topic") == topic_name]
    assert rebuilt, "the producer state was not rebuilt from the log tail after the crash"
    producer.join()
    assert producer.remaining == 0 and not producer.errors, producer.errors[:3]
    assert acked_at_kill < count
    assert_once_in_order(broker.bootstrap, topic_name, numbered(count))


def test_kafka_python_idempotent_producer(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    producer = KafkaProducer(bootstrap_servers=b, enable_idempotence=True, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic_name, value=v, partition=0) for v in numbered(500)]
        producer.flush(20)
        assert [f.get(timeout=20).offset for f in futures] == list(range(500))
    finally:
        producer.close(10)
    assert_once_in_order(b, topic_name, numbered(500))


def test_aiokafka_idempotent_producer(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=b, enable_idempotence=True, acks="all")
        await producer.start()
        try:
            futures = [await producer.send(topic_name, value=v, partition=0) for v in numbered(500)]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == list(range(500))
    assert_once_in_order(b, topic_name, numbered(500))


def test_init_producer_id_hands_out_new_ids_that_survive_a_restart(broker: BrokerProcess) -> None:
    def init(producer_id: int = -1, epoch: int = -1) -> Any:
        return request(broker.bootstrap, InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=producer_id, producer_epoch=epoch))

    first, second = init(), init()
    assert first.error_code == 0 and first.producer_epoch == 0 and second.producer_id == first.producer_id + 1
    assert init(producer_id=first.producer_id, epoch=0).producer_id > second.producer_id
    assert init(producer_id=5).error_code == 42  # INVALID_REQUEST: an id without an epoch
    broker.kill()
    broker.start()
    assert init().producer_id >= first.producer_id + 1000  # the next block: nothing handed out twice


def test_describe_producers_lists_the_partitions_producers(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    produce_acked(b, topic_name, numbered(10), enable_idempotence=True)
    answer = request(b, DescribeProducersRequest(topics=(TopicRequest(name=topic_name, partition_indexes=(0, 7)),)))
    (topic,) = answer.topics
    ok, missing = topic.partitions
    assert ok.error_code == 0 and missing.error_code == 3
    (state,) = ok.active_producers
    assert state.producer_epoch == 0 and state.last_sequence == 9 and state.current_txn_start_offset == -1
