"""Retention deletes whole old segments and moves the log start; consumers below it reset.

Segments roll at batch boundaries, so producers here send small batches (batch.size) to get
many segments out of few records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec, ResourceType

from tests.integration.conftest import BrokerProcess, StartBroker, retire
from tests.integration.helpers import consume, consumer, create_topic, produce_acked, wait_for, watermarks

FAST_RETENTION = {"log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0"}
SMALL_BATCHES = {"batch.size": 1000, "linger.ms": 0}


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("retention") / "data", FAST_RETENTION).start()
    yield b
    retire(b)


def segment_bases(broker: BrokerProcess, topic: str, partition: int = 0) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in Path(broker.data_dir, f"{topic}-{partition}").glob("*.log"))


def earliest(bootstrap: str, topic: str) -> int:
    return watermarks(bootstrap, topic)[0]


def first_message_or_error(bootstrap: str, topic: str, offset: int, reset: str, timeout_s: float = 15) -> tuple[int | None, KafkaError | None]:
    c = consumer(bootstrap, auto_offset_reset=reset)
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout_s
        for _ in range(int(timeout_s / 0.2) + 1):
            if time.monotonic() > deadline:
                break
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                return None, msg.error()
            return msg.offset(), None
        return None, None
    finally:
        c.close()


def test_retention_bytes_deletes_old_segments(retention_broker: BrokerProcess, topic_name: str) -> None:
    b = retention_broker.bootstrap
    create_topic(b, topic_name, configs={"segment.bytes": "10000", "retention.bytes": "30000"})
    values = [f"{i:05d}".encode() * 20 for i in range(2000)]
    assert produce_acked(b, topic_name, values, **SMALL_BATCHES) == list(range(2000))
    assert wait_for(lambda: earliest(b, topic_name) > 0, timeout_s=20), retention_broker.tail()
    assert wait_for(lambda: sum(p.stat().st_size for p in Path(retention_broker.data_dir, f"{topic_name}-0").glob("*.log")) <= 40_000, timeout_s=20)
    start = earliest(b, topic_name)
    bases = segment_bases(retention_broker, topic_name)
    assert bases[0] == start, (bases, start)
    assert watermarks(b, topic_name)[1] == 2000
    got = consume(b, topic_name, 0, start, 2000 - start)
    assert [m.offset() for m in got] == list(range(start, 2000))
    assert [m.value() for m in got] == values[start:]

    offset, error = first_message_or_error(b, topic_name, 0, "earliest")
    assert (offset, error) == (start, None)
    offset, error = first_message_or_error(b, topic_name, 0, "error")
    assert offset is None and error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error


def test_retention_ms_deletes_expired_segments_and_offsets_continue(retention_broker: BrokerProcess, topic_name: str) -> None:
    b = retention_broker.bootstrap
    create_topic(b, topic_name, configs={"segment.bytes": "2000", "retention.ms": "60000"})
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": b, "acks": "all", **SMALL_BATCHES})
    for i in range(300):
        producer.produce(topic_name, value=b"x" * 100, partition=0, timestamp=an_hour_ago + i)
    assert producer.flush(20) == 0
    # Every record is past retention: all segments go, the log keeps an empty active one.
    assert wait_for(lambda: earliest(b, topic_name) == 300, timeout_s=20), (watermarks(b, topic_name), retention_broker.tail())
    assert segment_bases(retention_broker, topic_name) == [300]
    assert produce_acked(b, topic_name, [b"fresh"]) == [300]
    assert [(m.offset(), m.value()) for m in consume(b, topic_name, 0, 0, 1, auto_offset_reset="earliest")] == [(300, b"fresh")]


def test_altering_retention_ms_applies_to_a_live_topic(retention_broker: BrokerProcess, topic_name: str) -> None:
    b = retention_broker.bootstrap
    create_topic(b, topic_name, configs={"segment.bytes": "5000"})
    produce_acked(b, topic_name, [b"y" * 100 for _ in range(300)], **SMALL_BATCHES)
    time.sleep(1.5)  # three retention checks: the default retention (7 days) deletes nothing
    assert earliest(b, topic_name) == 0
    admin = AdminClient({"bootstrap.servers": b})
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    list(admin.incremental_alter_configs([resource]).values())[0].result(10)
    assert wait_for(lambda: earliest(b, topic_name) == 300, timeout_s=20), retention_broker.tail()


def test_delete_records_moves_log_start(retention_broker: BrokerProcess, topic_name: str) -> None:
    b = retention_broker.bootstrap
    create_topic(b, topic_name, configs={"segment.bytes": "5000"})
    produce_acked(b, topic_name, [f"r{i}".encode() * 30 for i in range(300)], **SMALL_BATCHES)
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0, 120)
    deleted = admin.delete_records([tp])[tp].result(10)
    assert deleted.low_watermark == 120
    assert earliest(b, topic_name) == 120
    tp0 = TopicPartition(topic_name, 0)
    assert admin.list_offsets({tp0: OffsetSpec.earliest()})[tp0].result(10).offset == 120
    assert [m.offset() for m in consume(b, topic_name, 0, 120, 3)] == [120, 121, 122]
    assert first_message_or_error(b, topic_name, 50, "earliest") == (120, None)
    offset, error = first_message_or_error(b, topic_name, 50, "error")
    assert offset is None and error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error

    # Deleting below the current start is a no-op; beyond the high watermark is an error.
    tp_low = TopicPartition(topic_name, 0, 10)
    assert admin.delete_records([tp_low])[tp_low].result(10).low_watermark == 120
    tp_high = TopicPartition(topic_name, 0, 1000)
    with pytest.raises(KafkaException) as info:
        admin.delete_records([tp_high])[tp_high].result(10)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # -1 means "up to the high watermark".
    tp_all = TopicPartition(topic_name, 0, -1)
    assert admin.delete_records([tp_all])[tp_all].result(10).low_watermark == 300
    assert produce_acked(b, topic_name, [b"next"]) == [300]


def test_broker_level_segment_bytes_rolls_segments(broker_factory: StartBroker, topic_name: str) -> None:
    broker = broker_factory({"log.segment.bytes": "1024", **FAST_RETENTION, "log.retention.bytes": "4096"})
    b = broker.bootstrap
    create_topic(b, topic_name)
    produce_acked(b, topic_name, [b"z" * 50 for _ in range(500)], **SMALL_BATCHES)
    assert wait_for(lambda: earliest(b, topic_name) > 0, timeout_s=20), broker.tail()
    assert wait_for(lambda: len(segment_bases(broker, topic_name)) <= 7, timeout_s=20), segment_bases(broker, topic_name)
    assert segment_bases(broker, topic_name)[0] == earliest(b, topic_name)
