"""Restart and crash: acknowledged records survive, offsets stay dense and continue."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import consume, create_topic, produce_acked, wait_for, watermarks

SEGMENT_BYTES = {"segment.bytes": "20000"}


def test_sigterm_restarts_keep_records_offsets_and_topic_configs(broker: BrokerProcess, topic_name: str) -> None:
    """Two graceful restarts of one broker: records, dense offsets that continue after a restart,
    and topic configs survive."""
    configured = topic_name + "-configs"
    create_topic(broker.bootstrap, topic_name, 3, configs=SEGMENT_BYTES)
    create_topic(broker.bootstrap, configured, configs={"retention.ms": "123456789", **SEGMENT_BYTES})
    first = {p: [f"p{p}-a{i}".encode() * 10 for i in range(1000)] for p in range(3)}
    for p, values in first.items():
        assert produce_acked(broker.bootstrap, topic_name, values, partition=p, batch_size=2000) == list(range(1000))
    produce_acked(broker.bootstrap, configured, [b"one"])
    broker.stop()
    broker.start()

    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=10)
    assert sorted(meta.topics[topic_name].partitions) == [0, 1, 2]
    for p in range(3):
        assert watermarks(broker.bootstrap, topic_name, p) == (0, 1000)
        second = [f"p{p}-b{i}".encode() for i in range(100)]
        assert produce_acked(broker.bootstrap, topic_name, second, partition=p) == list(range(1000, 1100))
        got = consume(broker.bootstrap, topic_name, p, 0, 1100)
        assert [m.offset() for m in got] == list(range(1100))
        assert [m.value() for m in got] == first[p] + second
    produce_acked(broker.bootstrap, configured, [b"two"])
    broker.restart()
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, configured, 0, 0, 2)] == [(0, b"one"), (1, b"two")]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, configured)]).values())[0].result(10)
    assert configs["retention.ms"].value == "123456789"
    assert configs["segment.bytes"].value == "20000"


class BackgroundProducer:
    """Produces numbered records as fast as it can; remembers which were acknowledged, at what offset."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[bytes, int] = {}
        self.failed = 0
        self.sent = 0
        self._stop = threading.Event()
        # retries=0: a retried, non-idempotent send could legitimately be stored twice.
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1, "retries": 0,
            "message.timeout.ms": 3000, "batch.size": 4000, "reconnect.backoff.max.ms": 100,
        })
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Message) -> None:
        if err is None:
            self.acked[msg.value()] = msg.offset()
        else:
            self.failed += 1

    def _run(self) -> None:
        for _ in range(1_000_000):
            if self._stop.is_set() or self.sent >= 500_000:
                break
            try:
                self._producer.produce(self.topic, value=f"r{self.sent:07d}".encode(), partition=0, on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                self._producer.poll(0.01)
            self._producer.poll(0)
        self._producer.flush(10)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_sigkill_mid_produce_loses_no_acknowledged_record(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, configs=SEGMENT_BYTES)
    bg = BackgroundProducer(broker.bootstrap, topic_name)
    bg.start()
    assert wait_for(lambda: len(bg.acked) >= 5000, timeout_s=30, interval_s=0.02), f"only {len(bg.acked)} acknowledged"
    broker.kill()
    # The producer's in-flight records now time out (message.timeout.ms) before the restart.
    bg.stop()
    broker.start()

    low, end = watermarks(broker.bootstrap, topic_name)
    assert low == 0
    assert end >= max(bg.acked.values()) + 1
    got = consume(broker.bootstrap, topic_name, 0, 0, end, timeout_s=60)
    assert [m.offset() for m in got] == list(range(end)), "offsets are not dense"
    values = [m.value() for m in got]
    assert len(set(values)) == len(values), "a record was stored twice"
    for value, offset in bg.acked.items():
        assert values[offset] == value, f"acknowledged {value!r} at {offset}, found {values[offset]!r}"
    # What survives is a prefix of what was sent, in order.
    assert values == [f"r{i:07d}".encode() for i in range(end)]
    assert produce_acked(broker.bootstrap, topic_name, [b"after-crash-1", b"after-crash-2"]) == [end, end + 1]
    assert [m.value() for m in consume(broker.bootstrap, topic_name, 0, end, 2)] == [b"after-crash-1", b"after-crash-2"]


def test_sigkill_when_idle_and_torn_tail_then_sigterm(broker: BrokerProcess, topic_name: str) -> None:
    """SIGKILL when idle, and a crash mid-write simulated on top of it (a partial batch at the end of
    the active segment): recovery keeps every record and drops the torn tail; a SIGTERM restart then
    keeps everything. (An idle kill with an intact tail: test_metadata_survives_sigkill_and_....)"""
    create_topic(broker.bootstrap, topic_name, configs=SEGMENT_BYTES)
    values = [f"v{i}".encode() * 50 for i in range(3000)]
    produce_acked(broker.bootstrap, topic_name, values, batch_size=5000)
    time.sleep(0.2)
    broker.kill()
    segment = sorted(Path(broker.data_dir, f"{topic_name}-0").glob("*.log"))[-1]
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(b"\x00" * 8 + struct.pack(">i", 500) + b"\xab" * 40)  # a batch header promising 500 bytes, then nothing
    broker.start()
    assert watermarks(broker.bootstrap, topic_name) == (0, 3000)
    assert [m.value() for m in consume(broker.bootstrap, topic_name, 0, 0, 3000)] == values
    assert produce_acked(broker.bootstrap, topic_name, [b"after-tear"]) == [3000]
    assert [m.value() for m in consume(broker.bootstrap, topic_name, 0, 2999, 2)] == [values[-1], b"after-tear"]
    broker.stop()
    # "after-tear" went after the cut: into this segment, or a new one where it had no room left.
    assert segment.stat().st_size > size or sorted(segment.parent.glob("*.log"))[-1] != segment
    broker.start()
    assert produce_acked(broker.bootstrap, topic_name, [b"last"]) == [3001]


def test_metadata_survives_sigkill_and_log_start_survives_restart(broker: BrokerProcess, topic_name: str) -> None:
    b = broker.bootstrap
    create_topic(b, topic_name, configs=SEGMENT_BYTES)
    produce_acked(b, topic_name, [f"v{i}".encode() * 20 for i in range(500)], batch_size=2000)
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0, 321)
    assert admin.delete_records([tp])[tp].result(10).low_watermark == 321
    doomed, fresh = topic_name + "-doomed", topic_name + "-fresh"
    create_topic(b, doomed)
    produce_acked(b, doomed, [b"gone"])
    admin.delete_topics([doomed])[doomed].result(10)
    create_topic(b, fresh, 4, configs={"retention.ms": "987654321"})
    broker.kill()
    broker.start()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert doomed not in topics
    assert fresh in topics and len(topics[fresh].partitions) == 4
    assert not list(broker.data_dir.glob(f"{doomed}-*")) or all(".delete" in p.name for p in broker.data_dir.glob(f"{doomed}-*"))
    configs = list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, fresh)]).values())[0].result(10)
    assert configs["retention.ms"].value == "987654321"
    # Like Kafka, the log start offset is checkpointed periodically: after a crash it may fall
    # back to the first segment's base, never forward.
    low, high = watermarks(broker.bootstrap, topic_name)
    assert low <= 321 and high == 500
    assert [m.offset() for m in consume(broker.bootstrap, topic_name, 0, low, 500 - low)] == list(range(low, 500))
    assert produce_acked(broker.bootstrap, topic_name, [b"next"]) == [500]

    # After a graceful shutdown it is exact.
    tp = TopicPartition(topic_name, 0, 321)
    assert admin.delete_records([tp])[tp].result(10).low_watermark == 321
    broker.restart()
    assert watermarks(broker.bootstrap, topic_name) == (321, 501)
