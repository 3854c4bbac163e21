"""Client quotas enforced: a producer or consumer over its byte-rate quota is told to wait
(throttle_time_ms, which librdkafka honours by holding its requests to that broker) and is held
to its quota, while a client without one is never throttled.

The broker runs with `quota.window.num=3` (Kafka's default is 11) so that the burst a quota lets
through before throttling begins, samples - 1 windows' worth, is two seconds and the tests stay
short; the rate rule is Kafka's either way (tests/unit/test_client_quota_manager.py)."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.describe_client_quotas.v1 import request as describe_quotas
from kio.schema.produce.v9 import request as produce

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_bad_input import record_batch
from tests.integration.wire import request

TIMEOUT_S = 30.0
QUOTA = 200_000.0  # bytes per second
BURST_S = 2.0  # quota.window.num=3 windows of a second: two seconds' worth pass before any throttle
VALUE = b"x" * 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("quotas") / "data", {"quota.window.num": "3"})
    broker.start()
    try:
        yield broker
    finally:
        retire(broker)


def set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    entity = (alter_quotas.EntityData(entity_type="client-id", entity_name=client_id),)
    ops = (alter_quotas.OpData(key=key, value=value, remove=False),)
    altered = request(bootstrap, alter_quotas.AlterClientQuotasRequest(entries=(alter_quotas.EntryData(entity=entity, ops=ops),), validate_only=False))
    assert [e.error_code for e in altered.entries] == [0]
    # AlterClientQuotas answers once the controller has it; the broker applies it a moment later.
    named = describe_quotas.DescribeClientQuotasRequest(components=(describe_quotas.ComponentData(entity_type="client-id", match_type=0, match=client_id),), strict=True)
    deadline = time.monotonic() + TIMEOUT_S
    while not request(bootstrap, named).entries:
        assert time.monotonic() < deadline, "the broker never showed the quota"
        time.sleep(0.1)


def produce_wire(bootstrap: str, topic: str, client_id: str, records: int) -> int:
    body = produce.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            produce.TopicProduceData(
                name=topic, partition_data=(produce.PartitionProduceData(index=0, records=record_batch([(None, VALUE)] * records, int(time.time() * 1000))),)
            ),
        ),
    )
    response = request(bootstrap, body, client_id=client_id)
    assert response.responses[0].partition_responses[0].error_code == 0
    return int(response.throttle_time.total_seconds() * 1000)


def assert_held_to_quota(sent: float, seconds: float) -> None:
    """What a quota guarantees, Kafka's rule: no more than the quota over the time, plus the burst
    its window lets through before throttling begins (samples - 1 windows' worth), within 10%."""
    allowed = QUOTA * (seconds + BURST_S)
    assert sent <= allowed * 1.1, f"{sent:.0f} bytes in {seconds:.1f} s over a quota of {QUOTA:.0f} B/s (at most {allowed:.0f})"


def test_a_client_over_its_quota_is_told_how_long_to_wait_and_others_are_not(broker: BrokerProcess) -> None:
    topic = unique_topic("quota-wire")
    create_topic(broker.bootstrap, topic)
    set_quota(broker.bootstrap, "wire-slow", "producer_byte_rate", 10_000)
    # 100 KB at once: ten seconds' worth over the two-second window, so about eight seconds to wait.
    throttles = [produce_wire(broker.bootstrap, topic, "wire-slow", 20) for _ in range(5)]
    assert throttles[0] == 0 or throttles[0] < throttles[-1]
    assert 7_000 <= throttles[-1] <= 10_000, throttles
    assert [produce_wire(broker.bootstrap, topic, "wire-free", 20) for _ in range(5)] == [0] * 5


def test_a_throttled_producer_is_held_to_its_quota_while_another_runs_free(broker: BrokerProcess) -> None:
    topic = unique_topic("quota-produce")
    create_topic(broker.bootstrap, topic, partitions=2)
    set_quota(broker.bootstrap, "throttled", "producer_byte_rate", QUOTA)
    acked: dict[str, list[float]] = {"throttled": [], "free": []}

    def run(client_id: str, seconds: float) -> None:
        # Batches small beside the quota, and a short queue, so that the rate is measured
        # smoothly and the flush at the end is quick.
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1, "batch.size": 16384, "queue.buffering.max.messages": 1000}
        )
        on_delivery = lambda err, msg: err is None and acked[client_id].append(time.monotonic())  # noqa: E731
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                producer.produce(topic, VALUE, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(TIMEOUT_S)

    free = threading.Thread(target=run, args=("free", 4.0))
    free.start()
    run("throttled", 6.0)
    free.join(TIMEOUT_S)
    times = acked["throttled"]
    assert_held_to_quota(len(times) * len(VALUE), times[-1] - times[0])
    assert len(times) * len(VALUE) >= QUOTA * 0.5 * (times[-1] - times[0]), "held far below its quota"
    free_rate = len(acked["free"]) * len(VALUE) / 4.0
    assert free_rate > 2 * QUOTA, f"the producer without a quota made only {free_rate:.0f} B/s"


def test_a_throttled_consumer_is_held_to_its_quota(broker: BrokerProcess) -> None:
    topic = unique_topic("quota-fetch")
    create_topic(broker.bootstrap, topic)
    # Small batches: a fetch's first batch goes out whole whatever the quota, so one larger than
    # the window allows would be throttled, answered empty and asked for again forever (in Kafka too).
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 16384})
    for _ in range(4000):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    set_quota(broker.bootstrap, "slow-reader", "consumer_byte_rate", QUOTA)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-reader", "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: list[float] = []
    try:
        end = time.monotonic() + 6.0
        while time.monotonic() < end and len(received) < 4000:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                received.append(time.monotonic())
    finally:
        consumer.close()
    assert received, "the consumer read nothing"
    assert_held_to_quota(len(received) * len(VALUE), received[-1] - received[0])
