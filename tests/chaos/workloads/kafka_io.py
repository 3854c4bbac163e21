"""What the workloads need of a cluster besides their own clients: topics, a pre-fill, a final
read to the high watermark, a group's committed offsets. Every wait is bounded."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 60.0
Record = list[Any]  # [partition, offset, value], as the history holds it


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def retry(what: str, attempt: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """``attempt()`` until it returns without a KafkaException: a cluster failing over answers
    with retriable errors for a while."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout_s}s: {e}") from e
            time.sleep(0.2)


def create_topic(bootstrap: str, name: str, partitions: int, min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_isr)})
    admin.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)


def idempotent_producer(bootstrap: str) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        # A killed leader answers nothing: give its requests up soon and move to the new one.
        "socket.timeout.ms": 6000,
        "request.timeout.ms": 5000,
    })


def fill(bootstrap: str, topic: str, values: dict[int, list[str]]) -> None:
    """Writes ``values[p]`` to each partition p, every one acknowledged."""
    producer = idempotent_producer(bootstrap)
    errors: list[KafkaError] = []
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, value=v.encode(), partition=p, on_delivery=lambda err, _msg: err is not None and errors.append(err))
            producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    assert left == 0 and not errors, f"pre-filling {topic}: {left} unacknowledged, errors {errors[:3]}"


class Feeder:
    """An idempotent producer writing ``<prefix>-<partition>-<n>`` to every partition in a thread,
    about ``rate`` records a second, never far ahead of its acknowledgements."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, prefix: str, rate: int = 100) -> None:
        self._producer = idempotent_producer(bootstrap)
        self._topic, self._partitions, self._prefix, self._rate = topic, partitions, prefix, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"feed-{topic}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._producer.flush(TIMEOUT_S)

    def _run(self) -> None:
        sent = 0
        per_tick = max(1, self._rate // 10)
        while not self._stop.is_set():
            if len(self._producer) < 10 * per_tick:
                for _ in range(per_tick):
                    p = sent % self._partitions
                    self._producer.produce(self._topic, value=f"{self._prefix}-{p}-{sent}".encode(), partition=p)
                    sent += 1
            # poll returns as soon as it has served a delivery report: wait out the tick.
            until = time.monotonic() + 0.1
            while (left := until - time.monotonic()) > 0:
                self._producer.poll(left)


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation_level: str) -> tuple[list[Record], dict[int, int]]:
    """Every record of ``topic`` from offset 0 to the high watermark, and the high watermarks.
    A read_committed consumer gets there only once every transaction below it is decided."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("drain"), "enable.auto.commit": False, "isolation.level": isolation_level})
    try:
        ends = {p: retry(f"the high watermark of {topic}-{p}", lambda p=p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10))[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list[Record] = []
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            records.extend([m.partition(), m.offset(), m.value().decode()] for m in consumer.consume(500, 0.5) if m.error() is None)
            # The position, not the last record: a transaction's marker may be the last offset.
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions):
                break
            assert time.monotonic() < deadline, f"{topic} ({isolation_level}) not read to its high watermarks {ends} in {TIMEOUT_S}s: at {[tp.offset for tp in positions]}"
    finally:
        consumer.close()
    return [r for r in records if r[1] < ends[r[0]]], ends


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (stable: no transaction pending), as the admin
    client lists them; partitions without one left out."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]

    def attempt() -> dict[int, int]:
        answer = admin.list_consumer_group_offsets(request, require_stable=True, request_timeout=10)[group].result(timeout=15)
        for tp in answer.topic_partitions:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}

    return retry(f"the committed offsets of group {group}", attempt)
