"""Each stock client against a real broker: topics, keyed/unkeyed records, headers, nulls,
every codec, a 1 MB record, 100 partitions, offsets by time, seek and replay."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BIG = 1_000_000


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(15)


def sample(n: int, base_ts: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    out = []
    for i in range(n):
        key = None if i % 3 == 0 and i % 7 else f"key-{i}".encode()  # never both null: kafka-python refuses that
        value = None if i % 7 == 0 else f"value-{i}".encode() * (1 + i % 5)
        headers = [("idx", str(i).encode()), ("kind", b"sample")] if i % 2 else []
        out.append((key, value, headers, base_ts + i))
    return out


def confluent_consume(bootstrap: str, topic: str, partition: int, offset: int, count: int, timeout_s: float = 20) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False, "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(topic, partition, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append(msg)
    consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(shared_broker, topic_name: str, codec: str) -> None:
    b = shared_broker.bootstrap
    create_topic(b, topic_name)
    base_ts = int(time.time() * 1000) - 10_000
    records = sample(200, base_ts)
    producer = Producer({"bootstrap.servers": b, "compression.type": codec, "linger.ms": 5, "acks": "all"})
    for key, value, headers, ts in records:
        producer.produce(topic_name, key=key, value=value, headers=headers or None, timestamp=ts, partition=0)
    assert producer.flush(15) == 0
    got = confluent_consume(b, topic_name, 0, 0, len(records))
    assert [m.offset() for m in got] == list(range(len(records)))
    for msg, (key, value, headers, ts) in zip(got, records):
        assert msg.key() == key and msg.value() == value
        assert (msg.headers() or []) == headers
        assert msg.timestamp() == (1, ts)  # CreateTime as the producer set it


def test_confluent_big_record_many_partitions_time_seek(shared_broker, topic_name: str) -> None:
    b = shared_broker.bootstrap
    create_topic(b, topic_name, 100, **{"max.message.bytes": "2000000"})
    producer = Producer({"bootstrap.servers": b, "message.max.bytes": 2_000_000, "linger.ms": 5})
    big = os.urandom(BIG)
    producer.produce(topic_name, value=big, partition=0, timestamp=1000)
    for p in range(100):
        for i in range(3):
            producer.produce(topic_name, key=b"k", value=f"{p}-{i}".encode(), partition=p, timestamp=2000 + i)
    assert producer.flush(30) == 0
    got = confluent_consume(b, topic_name, 0, 0, 4)
    assert got[0].value() == big and [m.value() for m in got[1:]] == [b"0-0", b"0-1", b"0-2"]
    for p in (1, 50, 99):
        assert [m.value() for m in confluent_consume(b, topic_name, p, 0, 3)] == [f"{p}-{i}".encode() for i in range(3)]
    consumer = Consumer({"bootstrap.servers": b, "group.id": "tests"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, 2001), TopicPartition(topic_name, 5, 9999)], 10)
    assert found[0].offset == 2 and found[1].offset == -1
    low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), 10)
    assert (low, high) == (0, 4)
    consumer.close()
    assert [m.offset() for m in confluent_consume(b, topic_name, 0, 2, 2)] == [2, 3]


def test_confluent_errors(shared_broker, topic_name: str) -> None:
    b = shared_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    create_topic(b, topic_name)
    cases = {
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        topic_name: KafkaError.TOPIC_ALREADY_EXISTS,
    }
    for name, code in cases.items():
        with pytest.raises(Exception) as info:
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
        assert info.value.args[0].code() == code
    with pytest.raises(Exception) as info:
        admin.create_topics([NewTopic(topic_name + "x", 1, 3)])[topic_name + "x"].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    producer = Producer({"bootstrap.servers": b, "message.max.bytes": 3_000_000})
    errors: list = []
    producer.produce(topic_name, value=b"x" * 2_000_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(Exception) as info:
        admin.delete_topics([topic_name + "-missing"])[topic_name + "-missing"].result(10)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python(shared_broker, topic_name: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import NewTopic as KNewTopic

    b = shared_broker.bootstrap
    KafkaAdminClient(bootstrap_servers=b).create_topics([KNewTopic(topic_name, 2, 1)])
    base_ts = int(time.time() * 1000) - 5000
    records = sample(60, base_ts)
    for codec in ("gzip", "snappy", "lz4", "zstd", None):
        # Idempotent producers (kafka-python's default) arrive with the exactly-once issue.
        producer = KafkaProducer(bootstrap_servers=b, compression_type=codec, enable_idempotence=False, linger_ms=5)
        for key, value, headers, ts in records:
            producer.send(topic_name, key=key, value=value, headers=headers, timestamp_ms=ts, partition=1)
        producer.flush(15)
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=b, enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = KTP(topic_name, 1)
    consumer.assign([tp])
    consumer.seek_to_beginning()
    got = list(consumer)
    assert len(got) == 5 * len(records)
    assert [m.offset for m in got] == list(range(len(got)))
    for msg, (key, value, headers, ts) in zip(got, records * 5):
        assert (msg.key, msg.value, list(msg.headers), msg.timestamp) == (key, value, headers, ts)
    assert consumer.offsets_for_times({tp: base_ts + 10})[tp].offset == 10
    consumer.seek(tp, 100)
    assert next(iter(consumer)).offset == 100
    consumer.close()


def test_aiokafka(shared_broker, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    b = shared_broker.bootstrap
    base_ts = int(time.time() * 1000) - 5000
    records = sample(50, base_ts)

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=b)
        await admin.start()
        await admin.create_topics([ANewTopic(topic_name, 1, 1)])
        await admin.close()
        for codec in ("gzip", "snappy", "lz4", "zstd", None):
            producer = AIOKafkaProducer(bootstrap_servers=b, compression_type=codec, enable_idempotence=False)
            await producer.start()
            for key, value, headers, ts in records:
                await producer.send(topic_name, key=key, value=value, headers=headers, timestamp_ms=ts, partition=0)
            await producer.flush()
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=b, enable_auto_commit=False)
        await consumer.start()
        tp = ATP(topic_name, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 * len(records) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for msgs in batch.values():
                got.extend(msgs)
        assert [m.offset for m in got] == list(range(5 * len(records)))
        for msg, (key, value, headers, ts) in zip(got, records * 5):
            assert (msg.key, msg.value, list(msg.headers), msg.timestamp) == (key, value, headers, ts)
        found = await consumer.offsets_for_times({tp: base_ts + 20})
        assert found[tp].offset == 20
        consumer.seek(tp, 120)
        msg = await asyncio.wait_for(consumer.getone(), 10)
        assert msg.offset == 120
        await consumer.stop()

    asyncio.run(run())


def _kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kcat is missing; make test installs it")
        pytest.skip("kcat is not installed")
    return path


@pytest.mark.parametrize("codec", CODECS)
def test_kcat(shared_broker, topic_name: str, codec: str) -> None:
    kcat = _kcat()
    b = shared_broker.bootstrap
    lines = "".join(f"k{i}|v{i}\n" for i in range(100))
    subprocess.run([kcat, "-b", b, "-P", "-t", topic_name, "-K", "|", "-z", codec, "-H", "src=kcat"], input=lines.encode(), check=True, timeout=30)
    out = subprocess.run(
        [kcat, "-b", b, "-C", "-t", topic_name, "-o", "beginning", "-e", "-f", "%k %s %o %h\n"],
        capture_output=True, check=True, timeout=30,
    ).stdout.decode().splitlines()
    assert out == [f"k{i} v{i} {i} src=kcat" for i in range(100)]
    replay = subprocess.run([kcat, "-b", b, "-C", "-t", topic_name, "-o", "90", "-e", "-f", "%o\n"], capture_output=True, check=True, timeout=30)
    assert replay.stdout.decode().split() == [str(i) for i in range(90, 100)]
    meta = subprocess.run([kcat, "-b", b, "-L", "-t", topic_name], capture_output=True, check=True, timeout=30).stdout.decode()
    assert f'topic "{topic_name}" with 1 partitions' in meta
