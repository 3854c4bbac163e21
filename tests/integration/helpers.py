"""Client-side helpers shared by the integration tests (confluent-kafka unless named otherwise)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ONE_MB = 1_000_000
BIG_TOPIC_CONFIG = {"max.message.bytes": "2000000"}


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int


def sample_records(n: int, base_ts: int) -> list[Rec]:
    """Keyed and unkeyed records, some null values, headers on every other one, distinct CreateTimes.

    Key and value are never both null: kafka-python refuses such a send.
    """
    out = []
    for i in range(n):
        key = None if i % 3 == 0 and i % 7 else f"key-{i}".encode()
        value = None if i % 7 == 0 else f"value-{i}-".encode() * (1 + i % 5)
        headers = [("idx", str(i).encode()), ("kind", b"sample")] if i % 2 else []
        out.append(Rec(key, value, headers, base_ts + i))
    return out


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 1):
        if predicate():
            return True
        if time.monotonic() > deadline:
            break
        time.sleep(interval_s)
    return False


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None, timeout_s: float = 15) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(timeout_s)


def consumer(bootstrap: str, **extra: Any) -> Consumer:
    # librdkafka needs a group.id even for assign(); nothing is committed.
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "kbroker-tests",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.queue.backoff.ms": 0,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return Consumer(conf)


def poll_messages(c: Consumer, count: int, timeout_s: float = 20) -> list[Message]:
    """Poll until `count` messages arrived or the time is up; any error event fails the test."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.2) + count + 1):
        if len(out) >= count or time.monotonic() > deadline:
            break
        msg = c.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append(msg)
    return out


def consume(bootstrap: str, topic: str, partition: int, offset: int, count: int, timeout_s: float = 20, **extra: Any) -> list[Message]:
    c = consumer(bootstrap, **extra)
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        return poll_messages(c, count, timeout_s)
    finally:
        c.close()


def produce_acked(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, timeout_s: float = 30, **extra: Any) -> list[int]:
    """Produce with acks=all; returns the acknowledged offsets in delivery order."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    producer = Producer(conf)
    offsets: list[int] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Message) -> None:
        if err is None:
            offsets.append(msg.offset())
        else:
            errors.append(err)

    for i, v in enumerate(values):
        for _ in range(1000):
            try:
                producer.produce(topic, value=v, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(timeout_s) == 0, "records still in flight"
    assert not errors, errors[:3]
    return offsets


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        c.close()
