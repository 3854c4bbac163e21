"""confluent-kafka (librdkafka) against a real broker: admin, produce, consume, offsets."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import BIG_TOPIC_CONFIG, CODECS, ONE_MB, consume, consumer, create_topic, poll_messages, sample_records


def produce_all(bootstrap: str, topic: str, records: list, partition: int = 0, **extra: object) -> list[int]:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    producer = Producer(conf)
    offsets: list[int] = []
    errors: list[KafkaError] = []
    for r in records:
        producer.produce(
            topic, key=r.key, value=r.value, headers=r.headers or None, timestamp=r.timestamp, partition=partition,
            on_delivery=lambda err, msg: errors.append(err) if err else offsets.append(msg.offset()),
        )
    assert producer.flush(20) == 0
    assert not errors, errors
    return offsets


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_values_headers_timestamps(module_broker: BrokerProcess, topic_name: str, codec: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    records = sample_records(300, int(time.time() * 1000) - 60_000)
    assert sorted(produce_all(b, topic_name, records, compression_type=codec)) == list(range(300))
    got = consume(b, topic_name, 0, 0, len(records))
    assert [m.offset() for m in got] == list(range(len(records)))
    for msg, r in zip(got, records):
        assert (msg.topic(), msg.partition()) == (topic_name, 0)
        assert msg.key() == r.key and msg.value() == r.value
        assert (msg.headers() or []) == r.headers
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, r.timestamp)


def test_null_header_value_and_empty_payloads(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    producer = Producer({"bootstrap.servers": b})
    producer.produce(topic_name, key=b"", value=b"", headers=[("nothing", None), ("empty", b"")], partition=0)
    producer.produce(topic_name, key=None, value=None, partition=0)
    assert producer.flush(15) == 0
    first, second = consume(b, topic_name, 0, 0, 2)
    assert (first.key(), first.value(), first.headers()) == (b"", b"", [("nothing", None), ("empty", b"")])
    assert (second.key(), second.value(), second.headers()) == (None, None, None)


def test_one_megabyte_record(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs=BIG_TOPIC_CONFIG)
    big = os.urandom(ONE_MB)
    producer = Producer({"bootstrap.servers": b, "message.max.bytes": 2_000_000, "acks": "all"})
    producer.produce(topic_name, key=b"big", value=big, partition=0)
    producer.produce(topic_name, value=b"after", partition=0)
    assert producer.flush(20) == 0
    got = consume(b, topic_name, 0, 0, 2)
    assert [m.offset() for m in got] == [0, 1]
    assert got[0].key() == b"big" and got[0].value() == big and got[1].value() == b"after"


def test_record_over_topic_limit_is_rejected(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs={"max.message.bytes": "10000"})
    producer = Producer({"bootstrap.servers": b, "message.max.bytes": 3_000_000, "retries": 0})
    errors: list[KafkaError] = []
    producer.produce(topic_name, value=os.urandom(20_000), partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_hundred_partitions(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 100)
    meta = AdminClient({"bootstrap.servers": b}).list_topics(topic_name, timeout=10)
    assert sorted(meta.topics[topic_name].partitions) == list(range(100))
    producer = Producer({"bootstrap.servers": b, "linger.ms": 20, "acks": "all"})
    for p in range(100):
        for i in range(5):
            producer.produce(topic_name, key=f"k{i}".encode(), value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    c = consumer(b)
    try:
        c.assign([TopicPartition(topic_name, p, 0) for p in range(100)])
        got = poll_messages(c, 500, timeout_s=40)
    finally:
        c.close()
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append((m.offset(), m.value()))
    assert sorted(by_partition) == list(range(100))
    for p, msgs in by_partition.items():
        assert msgs == [(i, f"{p}-{i}".encode()) for i in range(5)]


def test_list_offsets_by_time_earliest_latest(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 2)
    base = int(time.time() * 1000) - 100_000
    producer = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0, timestamp=base + 1000 * i)
        producer.flush(10)  # one batch per record, so time lookups must look inside the log, not only batch edges
    assert producer.flush(10) == 0

    c = consumer(b)
    try:
        lookups = [
            (0, base + 5000, 5),  # exact hit
            (0, base + 5500, 6),  # between records: the next one
            (0, base - 1, 0),  # before everything: the first
            (0, base + 100_000, -1),  # after everything: none
            (1, base, -1),  # empty partition: none
        ]
        for partition, ts, expected in lookups:
            (found,) = c.offsets_for_times([TopicPartition(topic_name, partition, ts)], timeout=10)
            assert (found.error, found.offset) == (None, expected), (partition, ts - base)
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 20)
        assert c.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=10) == (0, 0)
    finally:
        c.close()

    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(), "time": OffsetSpec.for_timestamp(base + 7000), "max": OffsetSpec.max_timestamp()}
    results = {}
    for name, spec in specs.items():
        results[name] = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)
    assert results["earliest"].offset == 0 and results["latest"].offset == 20
    assert (results["time"].offset, results["time"].timestamp) == (7, base + 7000)
    assert (results["max"].offset, results["max"].timestamp) == (19, base + 19_000)


def test_seek_and_replay_from_the_middle(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    records = sample_records(100, int(time.time() * 1000) - 10_000)
    produce_all(b, topic_name, records, linger_ms=0, batch_num_messages=7)
    c = consumer(b)
    try:
        c.assign([TopicPartition(topic_name, 0, 50)])
        first = poll_messages(c, 10)
        assert [m.offset() for m in first] == list(range(50, 60))
        c.seek(TopicPartition(topic_name, 0, 13))
        replay = poll_messages(c, 87)
        assert [m.offset() for m in replay] == list(range(13, 100))
        assert [m.value() for m in replay] == [r.value for r in records[13:]]
    finally:
        c.close()


def test_admin_errors(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    create_topic(b, topic_name)
    cases = [
        (NewTopic("bad name!", 1, 1), KafkaError.TOPIC_EXCEPTION),
        (NewTopic(topic_name, 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        (NewTopic(topic_name + "-rf", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        (NewTopic(topic_name + "-cfg", 1, 1, config={"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
    ]
    for new, code in cases:
        with pytest.raises(KafkaException) as info:
            admin.create_topics([new])[new.topic].result(10)
        assert info.value.args[0].code() == code, (new, info.value)
    missing = topic_name + "-missing"
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([missing])[missing].result(10)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_topic_then_recreate(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 3)
    producer = Producer({"bootstrap.servers": b})
    producer.produce(topic_name, value=b"old", partition=2)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": b})
    admin.delete_topics([topic_name])[topic_name].result(10)
    create_topic(b, topic_name, 1)
    producer.produce(topic_name, value=b"new", partition=0)
    assert producer.flush(10) == 0
    got = consume(b, topic_name, 0, 0, 1)
    assert [(m.offset(), m.value()) for m in got] == [(0, b"new")]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_time_lookup_inside_one_batch(module_broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """ListOffsets by time must find the exact record inside a (compressed) batch, not the batch start."""
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    base = int(time.time() * 1000) - 50_000
    producer = Producer({"bootstrap.servers": b, "linger.ms": 1000, "compression.type": codec, "batch.num.messages": 1000})
    for i in range(100):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0, timestamp=base + 10 * i)
    assert producer.flush(10) == 0
    c = consumer(b)
    try:
        for target, expected in [(base + 370, 37), (base + 371, 38), (base, 0), (base + 990, 99), (base + 991, -1)]:
            (found,) = c.offsets_for_times([TopicPartition(topic_name, 0, target)], timeout=10)
            assert found.offset == expected, (target - base, found)
    finally:
        c.close()
    # Starting in the middle of a batch: the consumer gets exactly from that offset on.
    assert [m.offset() for m in consume(b, topic_name, 0, 37, 63)] == list(range(37, 100))


def test_log_append_time_topic(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": b, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(10):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0, timestamp=1000 + i)
    assert producer.flush(10) == 0
    after = int(time.time() * 1000)
    got = consume(b, topic_name, 0, 0, 10)
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(10)]
    for m in got:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, m.timestamp()


def test_auto_create_on_produce_uses_num_partitions(broker_factory: StartBroker, topic_name: str) -> None:
    broker = broker_factory({"num.partitions": "3"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, value=b"auto", partition=2)
    assert producer.flush(15) == 0
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=10)
    assert sorted(meta.topics[topic_name].partitions) == [0, 1, 2]
    assert [m.value() for m in consume(broker.bootstrap, topic_name, 2, 0, 1)] == [b"auto"]


def test_no_auto_create_when_disabled(broker_factory: StartBroker, topic_name: str) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=10)
    assert meta.topics[topic_name].error is not None
    assert meta.topics[topic_name].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
    producer.produce(topic_name, value=b"nowhere", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT), errors
    assert topic_name not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics


def test_create_partitions_then_produce_to_them(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 2)
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    assert sorted(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == [0, 1, 2, 3, 4]
    producer = Producer({"bootstrap.servers": b, "topic.metadata.refresh.interval.ms": 1000})
    producer.produce(topic_name, value=b"p4", partition=4)
    assert producer.flush(15) == 0
    assert [m.value() for m in consume(b, topic_name, 4, 0, 1)] == [b"p4"]
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_long_poll_wakes_on_append(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    c = consumer(b, fetch_wait_max_ms=5000, fetch_min_bytes=1)
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        assert c.poll(1.0) is None  # parked: nothing to read
        producer = Producer({"bootstrap.servers": b, "linger.ms": 0})
        sent = time.monotonic()
        producer.produce(topic_name, value=b"wake", partition=0)
        assert producer.flush(10) == 0
        (msg,) = poll_messages(c, 1, timeout_s=10)
        latency = time.monotonic() - sent
    finally:
        c.close()
    assert msg.value() == b"wake"
    assert latency < 2.0, f"the parked fetch answered after {latency:.2f}s, not on the append"


def test_small_fetch_limits_still_return_a_big_batch(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs=BIG_TOPIC_CONFIG)
    big = os.urandom(300_000)
    producer = Producer({"bootstrap.servers": b, "message.max.bytes": 2_000_000})
    producer.produce(topic_name, value=big, partition=0)
    for i in range(50):
        producer.produce(topic_name, value=f"small-{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    got = consume(b, topic_name, 0, 0, 51, max_partition_fetch_bytes=1024, fetch_max_bytes=1024, message_max_bytes=1000, receive_message_max_bytes=2_000_000)
    assert [m.offset() for m in got] == list(range(51))
    assert got[0].value() == big


def test_produce_to_missing_partition_fails(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 2)
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": b, "message.timeout.ms": 3000})
    producer.produce(topic_name, value=b"x", partition=7, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError._UNKNOWN_PARTITION, errors


def test_fetch_out_of_range_and_at_end(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name)
    producer = Producer({"bootstrap.servers": b})
    for i in range(5):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    c = consumer(b, auto_offset_reset="error")
    try:
        c.assign([TopicPartition(topic_name, 0, 50)])
        errors: list[KafkaError] = []
        for _ in range(50):
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is not None, f"read offset {m.offset()} from beyond the end"
                errors.append(m.error())
                break
        assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors
    finally:
        c.close()
    c = consumer(b, auto_offset_reset="latest")
    try:
        c.assign([TopicPartition(topic_name, 0, 5)])  # exactly the end: nothing, no error
        assert all(c.poll(0.3) is None for _ in range(5))
    finally:
        c.close()


def test_describe_cluster(module_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    desc = admin.describe_cluster(request_timeout=10).result(10)
    assert desc.cluster_id
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, "127.0.0.1", module_broker.port)]
    assert desc.controller is not None and desc.controller.id == 1


def test_time_lookups_across_segments_with_out_of_order_timestamps(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs={"segment.bytes": "2000"})
    base = int(time.time() * 1000) - 500_000
    stamps = [base + 10 * i for i in range(300)]
    stamps[250] = base + 100_000  # the newest record sits in a middle segment, not the last
    producer = Producer({"bootstrap.servers": b, "linger.ms": 0, "batch.size": 500})
    for i, ts in enumerate(stamps):
        producer.produce(topic_name, value=f"{i:04d}".encode() * 20, partition=0, timestamp=ts)
    assert producer.flush(15) == 0
    assert len(list(module_broker.data_dir.glob(f"{topic_name}-0/*.log"))) > 5
    c = consumer(b)
    try:
        # The answer is the first offset whose timestamp is >= the target.
        lookups = [(base, 0), (base + 1234, 124), (base + 2000, 200), (base + 2490, 249), (base + 2491, 250), (base + 2990, 250), (base + 99_999, 250), (base + 100_001, -1)]
        for target, expected in lookups:
            (found,) = c.offsets_for_times([TopicPartition(topic_name, 0, target)], timeout=10)
            assert found.offset == expected, (target - base, found)
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0)
    newest = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(10)
    assert (newest.offset, newest.timestamp) == (250, base + 100_000)


def test_acks_zero_and_several_topics_at_once(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    topics = [f"{topic_name}-{i}" for i in range(3)]
    for t in topics:
        create_topic(b, t, 2)
    producer = Producer({"bootstrap.servers": b, "acks": 0, "linger.ms": 20})
    for i in range(30):
        for t in topics:
            producer.produce(t, value=f"{t}/{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0
    c = consumer(b)
    try:
        c.assign([TopicPartition(t, p, 0) for t in topics for p in (0, 1)])
        got = poll_messages(c, 90)
    finally:
        c.close()
    for t in topics:
        for p in (0, 1):
            msgs = [m for m in got if (m.topic(), m.partition()) == (t, p)]
            assert [m.offset() for m in msgs] == list(range(15))
            assert [m.value() for m in msgs] == [f"{t}/{i}".encode() for i in range(p, 30, 2)]
