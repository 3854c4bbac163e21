"""Retention deletes whole old segments and moves the log start; consumers below it reset."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.test_clients import confluent_consume, create_topic
from tests.integration.test_durability import produce_acked


def earliest(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests"})
    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
    consumer.close()
    return int(low)


def wait_for(predicate, timeout_s: float = 20) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_retention_bytes_deletes_segments_and_consumers_reset(broker_factory, topic_name: str) -> None:
    broker = broker_factory(log_retention_check_interval_ms="300", log_segment_delete_delay_ms="0")
    b = broker.bootstrap
    create_topic(b, topic_name, **{"segment.bytes": "10000", "retention.bytes": "30000"})
    produce_acked(b, topic_name, [f"{i:05d}".encode() * 20 for i in range(2000)])
    assert wait_for(lambda: earliest(b, topic_name) > 0)
    start = earliest(b, topic_name)
    segments = sorted(p.name for p in (broker.data_dir / f"{topic_name}-0").glob("*.log"))
    assert len(segments) <= 5 and int(segments[0].split(".")[0]) == start

    reset = Consumer({"bootstrap.servers": b, "group.id": "tests", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    reset.assign([TopicPartition(topic_name, 0, 0)])
    msg = None
    deadline = time.monotonic() + 15
    while msg is None and time.monotonic() < deadline:
        msg = reset.poll(0.5)
    reset.close()
    assert msg is not None and msg.error() is None and msg.offset() == start

    strict = Consumer({"bootstrap.servers": b, "group.id": "tests", "enable.auto.commit": False, "auto.offset.reset": "error"})
    strict.assign([TopicPartition(topic_name, 0, 0)])
    error = None
    deadline = time.monotonic() + 15
    while error is None and time.monotonic() < deadline:
        m = strict.poll(0.5)
        if m is not None and m.error():
            error = m.error()
    strict.close()
    assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET


def test_retention_ms_and_delete_records(broker_factory, topic_name: str) -> None:
    broker = broker_factory(log_retention_check_interval_ms="300", log_segment_delete_delay_ms="0")
    b = broker.bootstrap
    create_topic(b, topic_name, **{"segment.bytes": "5000"})
    produce_acked(b, topic_name, [b"x" * 100 for _ in range(300)])
    admin = AdminClient({"bootstrap.servers": b})
    result = admin.delete_records([TopicPartition(topic_name, 0, 120)])
    deleted = list(result.values())[0].result(10)
    assert deleted.low_watermark == 120 and earliest(b, topic_name) == 120
    assert confluent_consume(b, topic_name, 0, 120, 1)[0].offset() == 120
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    list(admin.incremental_alter_configs([resource]).values())[0].result(10)
    assert wait_for(lambda: earliest(b, topic_name) == 300)
    assert produce_acked(b, topic_name, [b"fresh"]) == [300]
