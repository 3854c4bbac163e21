"""Workloads 1-4 and 8 of `make bench`, one run each, against a started BrokerUnderTest.

    1  produce 1,000,000 x 100 B, acks=1, linger.ms=5, 1 partition; consume it from offset 0
       (fetch.queue.backoff.ms=0, and once more with librdkafka's default backoff)
    2  the same on 64 partitions, every record with a key
    3  200,000 x 1 KiB records, zstd and lz4 compressed: produce and consume each
    4  consume through a consumer group: 3 consumers subscribe to a 6-partition topic holding
       1,000,000 x 100 B; the rate counts from the first record, the join is reported apart
    8  workload 1 with kafka-python as the client (report only)

Every phase is one dict (see ``measure``). Record counts are multiplied by ``broker.scale``.
MB/s counts key + value bytes before compression, 1 MB = 10^6 bytes.
"""

from __future__ import annotations

import random
import resource
import threading
import time
from collections.abc import Callable
from itertools import cycle, islice, repeat
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import BrokerUnderTest

Mark = Callable[[], None]

TITLES = {
    "1": "1. 1 partition, 100 B",
    "2": "2. 64 partitions, 100 B, keyed",
    "3": "3. 1 KiB, compressed",
    "4": "4. consumer group, 3 members, 6 partitions",
    "8": "8. kafka-python, 1 partition, 100 B",
}


def client_cpu_seconds() -> float:
    """CPU of this whole process (every thread: Python and librdkafka's), user + system."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def scaled(broker: BrokerUnderTest, n: int) -> int:
    return max(1000, int(n * broker.scale))


class PhaseError(Exception):
    """A phase could not run; ``skipped`` when it never started because an earlier one failed."""

    def __init__(self, message: str, skipped: bool = False) -> None:
        super().__init__(message)
        self.skipped = skipped


def measure(
    broker: BrokerUnderTest,
    workload: str,
    phase: str,
    records: int,
    nbytes: int,
    fn: Callable[[Mark], dict | None],
) -> dict:
    """Run ``fn(mark)`` and time it. Broker CPU comes from /proc/PID/stat, client CPU from
    getrusage(RUSAGE_SELF); both are % of one core over the phase (they can exceed 100).
    The broker's peak RSS is VmHWM, reset at the phase start when the kernel lets us.
    ``mark()`` (a group consumer calls it at its first record) restarts the clock and the CPU
    counters: the time before it is reported as ``join_seconds``. ``fn`` may return extra keys."""
    row: dict[str, Any] = {
        "workload": workload,
        "title": TITLES.get(workload, workload),
        "phase": phase,
        "broker": broker.name,
        "records": records,
        "bytes": nbytes,
    }
    lock = threading.Lock()
    broker.reset_peak_rss()
    t0 = time.perf_counter()
    start = {"t": t0, "b": broker.cpu_seconds(), "c": client_cpu_seconds()}

    def mark() -> None:
        with lock:
            if start["t"] == t0:
                start.update(
                    t=time.perf_counter(),
                    b=broker.cpu_seconds(),
                    c=client_cpu_seconds(),
                )

    try:
        extra = fn(mark) or {}
    except PhaseError as e:
        row.update(error=str(e), skipped=e.skipped)
        return row
    except Exception as e:  # noqa: BLE001 - recorded: the peer may not support the workload
        row.update(error=f"{type(e).__name__}: {e}"[:500])
        return row
    end = time.perf_counter()
    busy = end - start["t"]
    if not broker.running():
        row.update(
            error=f"{broker.name} exited during the phase: {broker.log_tail(300)}"
        )
        return row
    row.update(
        seconds=round(busy, 4),
        records_per_s=round(records / busy, 1),
        mb_per_s=round(nbytes / busy / 1e6, 2),
        broker_cpu_pct=round((broker.cpu_seconds() - start["b"]) / busy * 100, 1),
        client_cpu_pct=round((client_cpu_seconds() - start["c"]) / busy * 100, 1),
        broker_peak_rss_bytes=broker.peak_rss_bytes(),
        broker_rss_bytes=broker.rss_bytes(),
        join_seconds=None if start["t"] == t0 else round(start["t"] - t0, 3),
    )
    row.update(extra)
    return row


# -- clients -----------------------------------------------------------------------------------

QUIET = {"log.connection.close": False}


def create_topic(broker: BrokerUnderTest, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[
        topic
    ].result(30)
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
    ):  # wait until every partition has a leader in metadata
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise PhaseError(f"topic {topic} not ready with {partitions} partitions after 30 s")


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    values: list[bytes],
    keys: list[bytes] | None = None,
    conf: dict | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """acks=1, linger.ms=5; delivery reports for errors only (no per-record Python callback).

    With ``ready``, the first record is sent and acknowledged alone, then ``ready()`` is called:
    the client's start-up (connections, metadata, a producer id) stays out of a rate the caller
    measures from there."""
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
            **QUIET,
            **(conf or {}),
        }
    )
    send, poll = producer.produce, producer.poll
    pairs = islice(zip(cycle(values), cycle(keys) if keys else repeat(None)), records)
    if ready is not None:
        value, key = next(pairs)
        send(topic, value, key)
        producer.flush(30)
        ready()
    for value, key in pairs:
        while True:
            try:
                send(topic, value, key)
                break
            except BufferError:
                # The queue is full. Successful deliveries raise no event (only errors are
                # reported), so poll sleeps its whole timeout: keep it short, or the loop idles
                # while the queue drains (it cost idempotent producers, 5 requests in flight at
                # most, a quarter of their rate at 50 ms).
                poll(0.002)
    left = producer.flush(max(120, records / 5000))
    poll(0)
    if failures:
        raise PhaseError(f"{len(failures)} records failed: {failures[0]}")
    if left:
        raise PhaseError(f"{left} records left undelivered after flush")


def consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    backoff_ms: int | None = 0,
    timeout: float | None = None,
) -> None:
    """Read every partition from offset 0 (assigned, no group) until ``records`` arrived."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **QUIET,
    }
    if backoff_ms is not None:
        conf["fetch.queue.backoff.ms"] = backoff_ms
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, error = 0, None
    deadline = time.monotonic() + (timeout or max(60, records / 10000))
    try:
        while seen < records and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is None:
                    seen += 1
                else:
                    error = msg.error()
    finally:
        consumer.close()
    if seen < records:
        raise PhaseError(
            f"consumed {seen} of {records} records"
            + (f"; last error {error}" if error else "")
        )


def group_consume(
    bootstrap: str, topic: str, partitions: int, records: int, members: int, mark: Mark
) -> dict:
    """``members`` consumers (threads) subscribe together with one group.id and client defaults
    (session.timeout.ms=45000, auto commit on). Done when every partition was read to its end.
    Returns the time from subscribe() until every member had a record (``members_ready_seconds``)."""
    group = f"bench-group-{time.monotonic_ns()}"
    lock = threading.Lock()
    last_offset: dict[int, int] = {}
    firsts: list[float] = []
    errors: list[str] = []
    done = threading.Event()
    barrier = threading.Barrier(members + 1)
    t_sub = [0.0]
    deadline = time.monotonic() + max(120, records / 10000)

    def member() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "fetch.queue.backoff.ms": 0,
                **QUIET,
            }
        )
        barrier.wait()
        consumer.subscribe([topic])
        got_first = False
        try:
            while not done.is_set() and time.monotonic() < deadline:
                msgs = consumer.consume(10000, 0.2)
                if not msgs:
                    continue
                latest: dict[int, int] = {}
                for msg in msgs:
                    if msg.error() is None:
                        latest[msg.partition()] = msg.offset()
                    else:
                        errors.append(str(msg.error()))
                if not latest:
                    continue
                if not got_first:
                    got_first = True
                    mark()
                    with lock:
                        firsts.append(time.perf_counter() - t_sub[0])
                with lock:
                    for p, off in latest.items():
                        if off > last_offset.get(p, -1):
                            last_offset[p] = off
                    if sum(off + 1 for off in last_offset.values()) >= records:
                        done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, daemon=True) for _ in range(members)]
    for t in threads:
        t.start()
    barrier.wait()
    t_sub[0] = time.perf_counter()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 30))
    done.set()
    read = sum(off + 1 for off in last_offset.values())
    if read < records:
        raise PhaseError(
            f"the group read {read} of {records} records"
            + (f"; last error {errors[-1]}" if errors else "")
        )
    return {
        "members": members,
        "members_with_records": len(firsts),
        "members_ready_seconds": round(max(firsts), 3)
        if len(firsts) == members
        else None,
    }


def kp_produce(bootstrap: str, topic: str, records: int, value: bytes) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, enable_idempotence=False
    )
    try:
        samples = []
        send = producer.send
        for i in range(records):
            future = send(topic, value)
            if i % 10000 == 0:
                samples.append(future)
        producer.flush(timeout=max(120, records / 2000))
        samples.append(future)
        for f in samples:
            f.get(timeout=30)  # raises the delivery error, if any
    finally:
        producer.close(timeout=10)


def kp_consume(bootstrap: str, topic: str, records: int) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    seen = 0
    deadline = time.monotonic() + max(120, records / 2000)
    try:
        while seen < records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500, max_records=10000).values():
                seen += len(batch)
    finally:
        consumer.close()
    if seen < records:
        raise PhaseError(f"consumed {seen} of {records} records")


# -- payloads ----------------------------------------------------------------------------------

_WORDS = None


def text_payloads(size: int, count: int, seed: int = 42) -> list[bytes]:
    """``count`` distinct ``size``-byte records of JSON-ish text over a 1,000-word vocabulary:
    they compress about as well as typical application events do."""
    global _WORDS
    rng = random.Random(seed)
    if _WORDS is None:
        letters = "abcdefghijklmnopqrstuvwxyz"
        _WORDS = [
            "".join(rng.choice(letters) for _ in range(rng.randint(3, 10)))
            for _ in range(1000)
        ]
    out = []
    for i in range(count):
        parts = [
            f'{{"id":{i},"ts":{1700000000000 + i * 17},"user":"{rng.choice(_WORDS)}","text":"'
        ]
        length = len(parts[0])
        while length < size:
            w = rng.choice(_WORDS) + " "
            parts.append(w)
            length += len(w)
        out.append("".join(parts).encode()[: size - 2] + b'"}')
    return out


# -- workloads ---------------------------------------------------------------------------------


def _topic(name: str) -> str:
    return f"bench-{name}-{time.monotonic_ns()}"


def _chain(rows: list[dict], row: dict) -> dict:
    rows.append(row)
    return row


def _skipped(
    broker: BrokerUnderTest,
    workload: str,
    phase: str,
    records: int,
    nbytes: int,
    reason: str,
) -> dict:
    return {
        "workload": workload,
        "title": TITLES.get(workload, workload),
        "phase": phase,
        "broker": broker.name,
        "records": records,
        "bytes": nbytes,
        "error": reason,
        "skipped": True,
    }


def _produce_consume(
    broker: BrokerUnderTest,
    workload: str,
    partitions: int,
    records: int,
    size: int,
    keyed: bool,
    default_backoff: bool,
) -> list[dict]:
    rows: list[dict] = []
    topic = _topic(f"w{workload}")
    values = [random.Random(7).randbytes(size)]
    keys = [b"key-%06d" % i for i in range(65536)] if keyed else None  # 10-byte keys
    nbytes = records * size + (records * len(keys[0]) if keys else 0)

    def setup_and_produce(mark: Mark) -> None:
        try:
            create_topic(broker, topic, partitions)
        except Exception as e:
            raise PhaseError(f"CreateTopics: {type(e).__name__}: {e}") from e
        mark()  # topic creation is not part of the produce rate
        produce(broker.bootstrap, topic, records, values, keys)

    prod = _chain(
        rows, measure(broker, workload, "produce", records, nbytes, setup_and_produce)
    )
    prod["join_seconds"] = None
    if "error" in prod:
        rows.append(
            _skipped(
                broker, workload, "consume", records, nbytes, "skipped: produce failed"
            )
        )
        return rows
    rows.append(
        measure(
            broker,
            workload,
            "consume",
            records,
            nbytes,
            lambda m: consume(broker.bootstrap, topic, partitions, records, 0),
        )
    )
    if default_backoff:
        rows.append(
            measure(
                broker, workload, "consume, default fetch.queue.backoff.ms", records, nbytes,
                lambda m: consume(broker.bootstrap, topic, partitions, records, None),
            )
        )  # fmt: skip
    return rows


def workload_1(broker: BrokerUnderTest) -> list[dict]:
    return _produce_consume(
        broker,
        "1",
        1,
        scaled(broker, 1_000_000),
        100,
        keyed=False,
        default_backoff=True,
    )


def workload_2(broker: BrokerUnderTest) -> list[dict]:
    return _produce_consume(
        broker,
        "2",
        64,
        scaled(broker, 1_000_000),
        100,
        keyed=True,
        default_backoff=False,
    )


def workload_3(broker: BrokerUnderTest) -> list[dict]:
    rows: list[dict] = []
    records, size = scaled(broker, 200_000), 1024
    values = text_payloads(size, 4096)
    nbytes = records * size
    for codec in ("zstd", "lz4"):
        topic = _topic(f"w3-{codec}")

        def setup_and_produce(
            mark: Mark, topic: str = topic, codec: str = codec
        ) -> None:
            create_topic(broker, topic, 1)
            mark()
            produce(
                broker.bootstrap,
                topic,
                records,
                values,
                conf={"compression.type": codec},
            )

        prod = _chain(
            rows,
            measure(
                broker, "3", f"produce {codec}", records, nbytes, setup_and_produce
            ),
        )
        prod["join_seconds"] = None
        if "error" in prod:
            rows.append(
                _skipped(
                    broker,
                    "3",
                    f"consume {codec}",
                    records,
                    nbytes,
                    "skipped: produce failed",
                )
            )
            continue
        rows.append(
            measure(
                broker,
                "3",
                f"consume {codec}",
                records,
                nbytes,
                lambda m, topic=topic: consume(broker.bootstrap, topic, 1, records, 0),
            )
        )
    return rows


def workload_4(broker: BrokerUnderTest) -> list[dict]:
    records, size, partitions, members = scaled(broker, 1_000_000), 100, 6, 3
    topic = _topic("w4")
    nbytes = records * size
    try:
        create_topic(broker, topic, partitions)
        produce(broker.bootstrap, topic, records, [random.Random(7).randbytes(size)])
    except Exception as e:  # noqa: BLE001
        return [
            _skipped(
                broker,
                "4",
                "group consume",
                records,
                nbytes,
                f"setup failed: {type(e).__name__}: {e}",
            )
        ]
    row = measure(
        broker,
        "4",
        "group consume",
        records,
        nbytes,
        lambda mark: group_consume(
            broker.bootstrap, topic, partitions, records, members, mark
        ),
    )
    return [row]


def workload_8(broker: BrokerUnderTest) -> list[dict]:
    rows: list[dict] = []
    records, size = scaled(broker, 1_000_000), 100
    topic = _topic("w8")
    value = random.Random(7).randbytes(size)
    nbytes = records * size

    def setup_and_produce(mark: Mark) -> None:
        create_topic(broker, topic, 1)
        mark()
        kp_produce(broker.bootstrap, topic, records, value)

    prod = _chain(
        rows, measure(broker, "8", "produce", records, nbytes, setup_and_produce)
    )
    prod["join_seconds"] = None
    if "error" in prod:
        rows.append(
            _skipped(broker, "8", "consume", records, nbytes, "skipped: produce failed")
        )
        return rows
    rows.append(
        measure(
            broker,
            "8",
            "consume",
            records,
            nbytes,
            lambda m: kp_consume(broker.bootstrap, topic, records),
        )
    )
    return rows


WORKLOADS: dict[str, Callable[[BrokerUnderTest], list[dict]]] = {
    "1": workload_1,
    "2": workload_2,
    "3": workload_3,
    "4": workload_4,
    "8": workload_8,
}
