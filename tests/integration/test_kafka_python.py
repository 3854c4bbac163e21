"""kafka-python against a real broker: admin, produce, consume, offsets.

Producers run with enable_idempotence=False: idempotence (InitProducerId) is a later issue.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import BIG_TOPIC_CONFIG, ONE_MB, Rec, sample_records

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def admin(module_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


def producer(bootstrap: str, **extra: Any) -> KafkaProducer:
    conf: dict[str, Any] = {"enable_idempotence": False, "acks": "all", "linger_ms": 5}
    conf.update(extra)
    return KafkaProducer(bootstrap_servers=bootstrap, **conf)


def consumer(bootstrap: str, **extra: Any) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, consumer_timeout_ms=10000, **extra)


def send_all(p: KafkaProducer, topic: str, records: list[Rec], partition: int) -> list[int]:
    futures = [p.send(topic, key=r.key, value=r.value, headers=r.headers, timestamp_ms=r.timestamp, partition=partition) for r in records]
    p.flush(20)
    return [f.get(timeout=20).offset for f in futures]


def read(c: KafkaConsumer, count: int, timeout_s: float = 20) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.2) + count + 1):
        if len(out) >= count or time.monotonic() > deadline:
            break
        for msgs in c.poll(timeout_ms=200).values():
            out.extend(msgs)
    return sorted(out, key=lambda m: (m.partition, m.offset))


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_values_headers_timestamps(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str, codec: str | None) -> None:
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    records = sample_records(200, int(time.time() * 1000) - 60_000)
    p = producer(b, compression_type=codec)
    assert send_all(p, topic_name, records, 0) == list(range(200))
    p.close()
    c = consumer(b)
    tp = TopicPartition(topic_name, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = read(c, len(records))
    c.close()
    assert [m.offset for m in got] == list(range(len(records)))
    for msg, r in zip(got, records):
        assert (msg.key, msg.value, list(msg.headers), msg.timestamp, msg.timestamp_type) == (r.key, r.value, r.headers, r.timestamp, 0)


def test_one_megabyte_record(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str) -> None:
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 1, 1, topic_configs=BIG_TOPIC_CONFIG)])
    big = os.urandom(ONE_MB)
    p = producer(b, max_request_size=2_000_000)
    assert send_all(p, topic_name, [Rec(b"big", big, [], int(time.time() * 1000)), Rec(None, b"after", [], int(time.time() * 1000))], 0) == [0, 1]
    p.close()
    c = consumer(b)
    c.assign([TopicPartition(topic_name, 0)])
    c.seek_to_beginning()
    got = read(c, 2)
    c.close()
    assert [(m.offset, m.key) for m in got] == [(0, b"big"), (1, None)]
    assert got[0].value == big and got[1].value == b"after"


def test_hundred_partitions(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str) -> None:
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 100, 1)])
    p = producer(b, linger_ms=20)
    futures = [p.send(topic_name, value=f"{part}-{i}".encode(), partition=part) for part in range(100) for i in range(3)]
    p.flush(30)
    assert all(f.get(timeout=20).offset in (0, 1, 2) for f in futures)
    p.close()
    c = consumer(b)
    assert c.partitions_for_topic(topic_name) == set(range(100))
    c.assign([TopicPartition(topic_name, part) for part in range(100)])
    c.seek_to_beginning()
    got = read(c, 300, timeout_s=40)
    c.close()
    assert [(m.partition, m.offset, m.value) for m in got] == [(part, i, f"{part}-{i}".encode()) for part in range(100) for i in range(3)]


def test_offsets_for_times_beginning_end(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str) -> None:
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    base = int(time.time() * 1000) - 100_000
    p = producer(b, linger_ms=0)
    for i in range(20):
        p.send(topic_name, value=f"v{i}".encode(), timestamp_ms=base + 1000 * i, partition=0).get(timeout=20)
    p.close()
    c = consumer(b)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    assert c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
    assert c.end_offsets([tp0, tp1]) == {tp0: 20, tp1: 0}
    found = c.offsets_for_times({tp0: base + 7000})[tp0]
    assert (found.offset, found.timestamp) == (7, base + 7000)
    assert c.offsets_for_times({tp0: base + 7001})[tp0].offset == 8
    assert c.offsets_for_times({tp0: base + 100_000})[tp0] is None
    assert c.offsets_for_times({tp1: base})[tp1] is None
    c.close()


def test_seek_and_replay_from_the_middle(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str) -> None:
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    records = sample_records(100, int(time.time() * 1000) - 10_000)
    p = producer(b, batch_size=300)
    send_all(p, topic_name, records, 0)
    p.close()
    c = consumer(b)
    tp = TopicPartition(topic_name, 0)
    c.assign([tp])
    c.seek(tp, 50)
    first = next(iter(c))
    assert (first.offset, first.value) == (50, records[50].value)
    c.seek(tp, 13)
    replay = read(c, 87)
    c.close()
    assert [m.offset for m in replay] == list(range(13, 100))
    assert [m.value for m in replay] == [r.value for r in records[13:]]


def test_changing_assignment_across_fetch_sessions(module_broker: BrokerProcess, admin: KafkaAdminClient, topic_name: str) -> None:
    """kafka-python uses incremental fetch sessions (KIP-227): partitions join and leave them."""
    b = module_broker.bootstrap
    admin.create_topics([NewTopic(topic_name, 8, 1)])
    p = producer(b, linger_ms=0)
    c = consumer(b)
    counts = {part: 0 for part in range(8)}

    def produce_round(parts: list[int], tag: str) -> None:
        for part in parts:
            for i in range(3):
                p.send(topic_name, value=f"{tag}-{part}-{i}".encode(), partition=part)
                counts[part] += 1
        p.flush(10)

    first = [TopicPartition(topic_name, part) for part in range(4)]
    c.assign(first)
    c.seek_to_beginning()
    produce_round(list(range(8)), "r1")
    got = read(c, 12)
    assert sorted((m.partition, m.offset) for m in got) == [(part, i) for part in range(4) for i in range(3)]

    produce_round([1, 2], "r2")
    got = read(c, 6)
    assert sorted((m.partition, m.offset) for m in got) == [(part, i) for part in (1, 2) for i in range(3, 6)]

    second = [TopicPartition(topic_name, part) for part in (2, 3, 5, 6)]
    c.assign(second)
    c.seek(second[0], 1)
    c.seek(second[1], 3)
    c.seek(second[2], 0)
    c.seek(second[3], 2)
    produce_round([2, 5, 7], "r3")
    got = read(c, (9 - 1) + (3 - 3) + 6 + 1)
    expected = [(2, o) for o in range(1, 9)] + [(5, o) for o in range(6)] + [(6, 2)]
    assert sorted((m.partition, m.offset) for m in got) == expected
    c.close()
    p.close()
    assert counts == {0: 3, 1: 6, 2: 9, 3: 3, 4: 3, 5: 6, 6: 3, 7: 6}
