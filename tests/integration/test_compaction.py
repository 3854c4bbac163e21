"""Log compaction seen by confluent-kafka (librdkafka): latest value per key, offsets with gaps,
tombstones, null keys refused, a crash in the middle of a segment swap, __consumer_offsets."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.integration.conftest import REPO, BrokerProcess, StartBroker
from tests.integration.helpers import consumer, create_topic, unique_topic, wait_for, watermarks

pytestmark = pytest.mark.timeout(240)

CLEANER = {"log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "1000"}


def produce_pairs(bootstrap: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]], **extra: Any) -> list[int]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 500}
    conf.update(extra)
    producer = Producer(conf)
    offsets: list[int] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Message) -> None:
        (errors.append(err) if err is not None else offsets.append(msg.offset()))

    for i, (key, value) in enumerate(pairs):
        for _ in range(1000):
            try:
                producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return offsets


def read_all(bootstrap: str, topic: str, timeout_s: float = 60, **extra: Any) -> list[Message]:
    """Every record from offset 0 up to the high watermark."""
    _, high = watermarks(bootstrap, topic)
    c = consumer(bootstrap, **extra)
    out: list[Message] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (not out or out[-1].offset() < high - 1):
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        c.close()
    assert out and out[-1].offset() == high - 1, f"read up to {out[-1].offset() if out else None}, high watermark {high}"
    return out


def cleaned_up_to(broker: BrokerProcess, topic: str, offset: int) -> bool:
    return any(e.get("topic") == topic and e.get("end_offset", -1) >= offset for e in broker.events_named("log_cleaner.cleaned", current_run=True))


def roll_with_sentinel(bootstrap: str, topic: str, segment_ms: int) -> int:
    """Wait past segment.ms and append one record under a key of its own: the active segment rolls,
    so everything before it becomes cleanable."""
    time.sleep(segment_ms / 1000 + 0.2)
    return produce_pairs(bootstrap, topic, [(b"sentinel", b"s")])[0]


def test_latest_value_per_key_with_offset_gaps(broker_factory: StartBroker) -> None:
    broker = broker_factory(CLEANER)
    topic = unique_topic("compact")
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact", "segment.bytes": "200000", "segment.ms": "1500"})
    rng = random.Random(7)
    updates = [(b"key-%d" % (i % 1000 if i < 1000 else rng.randrange(1000)), b"value-%d" % i) for i in range(100_000)]
    produce_pairs(broker.bootstrap, topic, updates)
    sentinel = roll_with_sentinel(broker.bootstrap, topic, 1500)
    assert sentinel == 100_000
    assert wait_for(lambda: cleaned_up_to(broker, topic, 100_000), timeout_s=90), broker.tail()
    messages = read_all(broker.bootstrap, topic)
    latest = {key: (offset, value) for offset, (key, value) in enumerate(updates)}
    latest[b"sentinel"] = (100_000, b"s")
    assert len(messages) == 1001
    assert {m.key(): (m.offset(), m.value()) for m in messages} == latest
    offsets = [m.offset() for m in messages]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] + 1 > 2 * len(offsets)  # increasing, with gaps
    # A fetch from an offset the cleaner removed starts at the next one kept.
    gap = next(o + 1 for o, nxt in zip(offsets, offsets[1:]) if nxt > o + 1)
    c = consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, gap)])
        first = next(m for m in iter(lambda: c.poll(0.5), "never") if m is not None)
        assert first.error() is None and first.offset() == offsets[offsets.index(gap - 1) + 1]
    finally:
        c.close()


def test_tombstones_visible_then_gone_after_delete_retention_ms(broker_factory: StartBroker) -> None:
    broker = broker_factory(CLEANER)
    topic = unique_topic("tomb")
    create_topic(
        broker.bootstrap, topic, configs={"cleanup.policy": "compact", "segment.ms": "1000", "delete.retention.ms": "4000", "min.cleanable.dirty.ratio": "0.01"}
    )
    produce_pairs(broker.bootstrap, topic, [(b"gone", b"1"), (b"kept", b"1"), (b"gone", b"2"), (b"gone", None)])
    sentinel = roll_with_sentinel(broker.bootstrap, topic, 1000)
    assert wait_for(lambda: cleaned_up_to(broker, topic, sentinel), timeout_s=30), broker.tail()
    seen = {m.key(): m.value() for m in read_all(broker.bootstrap, topic)}
    assert seen == {b"gone": None, b"kept": b"1", b"sentinel": b"s"}  # librdkafka hands the tombstone over as a null value
    described = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "describe", topic, "--bootstrap-server", broker.bootstrap], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert described.returncode == 0, described.stderr
    line = next(row for row in described.stdout.splitlines() if "Partition: 0" in row)
    assert "DirtyRatio: 0." in line and "LastCleaned: 20" in line and f"up to offset {sentinel}" in line, described.stdout
    assert wait_for(lambda: b"gone" not in {m.key() for m in read_all(broker.bootstrap, topic)}, timeout_s=30), broker.tail()
    assert {m.key(): m.value() for m in read_all(broker.bootstrap, topic)} == {b"kept": b"1", b"sentinel": b"s"}


def test_null_keys_are_refused_with_invalid_record(broker: BrokerProcess) -> None:
    topic = unique_topic("nokey")
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    codes = [e.code() if e is not None else None for e in errors]
    assert KafkaError.INVALID_RECORD in codes
    # A non-compacted topic still takes them.
    plain = unique_topic("plain")
    create_topic(broker.bootstrap, plain)
    assert produce_pairs(broker.bootstrap, plain, [(None, b"no key")]) == [0]


@pytest.mark.parametrize("step", ["before_commit", "committed"])
def test_sigkill_during_a_segment_swap(broker_factory: StartBroker, step: str) -> None:
    broker = broker_factory({**CLEANER, "log.cleaner.enable": "false"})
    topic = unique_topic("swap")
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact", "segment.ms": "200", "segment.bytes": "10000000"})
    produced: dict[int, tuple[bytes | None, bytes | None]] = {}
    for burst in range(4):  # small segments, one group: the whole cleaned section swaps at once
        pairs = [(b"k%d" % (i % 50), b"v%d-%d" % (burst, i)) for i in range(500)]
        offsets = produce_pairs(broker.bootstrap, topic, pairs)
        produced.update(zip(offsets, pairs))
        time.sleep(0.3)  # past segment.ms: the next append rolls
    produced[produce_pairs(broker.bootstrap, topic, [(b"sentinel", b"s")])[0]] = (b"sentinel", b"s")
    # The cleaner starts with everything written, and stops on the event loop in the middle of its swap.
    broker.stop()
    broker.overrides = {**CLEANER, "log.cleaner.test.swap.pause.ms": "60000", "log.cleaner.test.swap.pause.step": step}
    broker.start()
    assert wait_for(lambda: any(e.get("step") == step for e in broker.events_named("log_cleaner.test_pause", current_run=True)), timeout_s=30), broker.tail()
    broker.kill()
    broker.overrides = {**CLEANER, "log.cleaner.enable": "false"}
    broker.start()
    messages = read_all(broker.bootstrap, topic)
    got = {m.offset(): (m.key(), m.value()) for m in messages}
    old = dict(produced)
    latest: dict[bytes | None, int] = {}
    for offset, (key, _) in sorted(produced.items()):
        latest[key] = offset
    new = {o: kv for o, kv in produced.items() if latest[kv[0]] == o}
    assert got == (old if step == "before_commit" else new)
    assert all(produced[o] == kv for o, kv in got.items())


def test_consumer_offsets_shrink_and_keep_the_groups_offsets(broker_factory: StartBroker) -> None:
    # Segments of 100 kB: the commits below fill about ten of them, all of which the cleaner shrinks.
    broker = broker_factory({**CLEANER, "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "100000", "log.roll.ms": "500"})
    topic = unique_topic("committed")
    create_topic(broker.bootstrap, topic, partitions=10)
    group = unique_topic("group")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        # 10,000 offset commit records: 1,000 commits of the topic's 10 partitions.
        for i in range(1_000):
            c.commit(offsets=[TopicPartition(topic, p, 10 * i + p) for p in range(10)], asynchronous=True)
            if i % 100 == 0:
                c.poll(0)
        final = [TopicPartition(topic, p, 10_000 - 10 + p) for p in range(10)]
        c.commit(offsets=final, asynchronous=False)
        before = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(10)], timeout=30)}
    finally:
        c.close()
    assert before == {p: 10_000 - 10 + p for p in range(10)}
    _, high = watermarks(broker.bootstrap, "__consumer_offsets")
    assert high > 10_000
    time.sleep(0.7)  # past log.roll.ms
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("probe"), "enable.auto.commit": False})
    try:  # a commit of another group rolls the segment holding the last commits
        probe.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        probe.close()
    assert wait_for(lambda: cleaned_up_to(broker, "__consumer_offsets", high), timeout_s=90), broker.tail()
    records = read_all(broker.bootstrap, "__consumer_offsets")
    assert len(records) <= 10 + 5  # one offset commit per group-partition, plus a few group metadata records
    broker.stop()
    broker.start()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        after = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(10)], timeout=30)}
    finally:
        c.close()
    assert after == before


def test_aborted_transactions_are_cleaned_away(broker_factory: StartBroker) -> None:
    broker = broker_factory(CLEANER)
    topic = unique_topic("txn-compact")
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"a", value=b"committed", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"b", value=b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    sentinel = roll_with_sentinel(broker.bootstrap, topic, 1000)
    assert wait_for(lambda: cleaned_up_to(broker, topic, sentinel), timeout_s=30), broker.tail()
    # Even a read_uncommitted consumer no longer sees the aborted record: the cleaner removed it.
    seen = {m.key(): m.value() for m in read_all(broker.bootstrap, topic, isolation_level="read_uncommitted")}
    assert seen == {b"a": b"committed", b"sentinel": b"s"}
