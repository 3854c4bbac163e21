"""Restart and crash: acknowledged records survive, offsets continue, nothing is duplicated;
and plain consumer fetches copy no record bytes through Python."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer

from tests.integration.test_clients import confluent_consume, create_topic


def produce_acked(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    offsets: list[int] = []
    for v in values:
        producer.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None)
    assert producer.flush(20) == 0
    return offsets


def test_sigterm_restart_keeps_everything_and_copies_nothing(broker, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, **{"segment.bytes": "20000"})
    first = [f"a{i}".encode() * 20 for i in range(2000)]
    assert produce_acked(broker.bootstrap, topic_name, first) == list(range(2000))
    assert [m.value() for m in confluent_consume(broker.bootstrap, topic_name, 0, 0, 2000)] == first
    assert broker.stop() == 0
    events = broker.log_events()
    fetch = [e for e in events if e.get("event") == "fetch.bytes"][-1]
    assert fetch["sendfile_bytes"] > 2000 * 40 and fetch["copied_bytes"] == 0
    broker.start()
    started = [e for e in broker.log_events() if e.get("event") == "log_manager.started"][-1]
    assert started["clean_shutdown"] is True
    second = [f"b{i}".encode() for i in range(100)]
    assert produce_acked(broker.bootstrap, topic_name, second) == list(range(2000, 2100))
    got = confluent_consume(broker.bootstrap, topic_name, 0, 0, 2100)
    assert [m.value() for m in got] == first + second
    assert [m.offset() for m in got] == list(range(2100))


def test_sigkill_mid_produce_loses_no_acknowledged_record(broker, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, **{"segment.bytes": "50000"})
    acked: dict[bytes, int] = {}
    stop = threading.Event()

    def run() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1, "retries": 0, "message.timeout.ms": 3000})

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                acked[msg.value()] = msg.offset()

        i = 0
        while not stop.is_set() and i < 200_000:
            try:
                producer.produce(topic_name, value=f"r{i:07d}".encode(), partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(5)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 20
    while len(acked) < 5000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    stop.set()
    thread.join(30)
    assert len(acked) >= 5000
    broker.start()
    recovered = [e for e in broker.log_events() if e.get("event") == "log_manager.started"][-1]
    assert recovered["clean_shutdown"] is False
    end = max(acked.values()) + 1
    got = confluent_consume(broker.bootstrap, topic_name, 0, 0, end, timeout_s=30)
    assert [m.offset() for m in got] == list(range(len(got)))
    values = [m.value() for m in got]
    assert len(set(values)) == len(values), "a record was stored twice"
    for value, offset in acked.items():
        assert values[offset] == value
    after = produce_acked(broker.bootstrap, topic_name, [b"after-crash"])
    assert after[0] >= end
