"""Workload 5, end-to-end latency: a producer paced at a fixed rate (default 50,000 records/s
for 20 s) and a consumer on the same partition; p50/p99/p99.9 of (consume time - create time).

    python -m benchmarks.latency [--broker kbroker|tansu] [--bootstrap HOST:PORT]
                                 [--rate 50000] [--seconds 20] [--size 100] [--runs 1]
                                 [--linger-ms 1] [--fetch-wait-ms 10] [--compare-linger0]
                                 [--replication-factor 1 --min-insync-replicas 1]

Without --bootstrap the broker named by --broker is started with benchmarks.harness.

How it is measured
- Producer and consumer are separate processes (spawned), so neither stalls the other's GIL.
- The producer is paced by a token bucket (bucket of 5 ms worth of records, refilled from
  perf_counter), not by a sleep per record. Each value starts with time.time_ns() taken just
  before produce(); the record's CreateTime (librdkafka sets it at produce(), in ms) is also
  checked: the consumer asserts the timestamp type is CreateTime.
- The consumer calls poll() (one record at a time: consume(n, t) would hold records back
  until n arrive) and takes time.time_ns() as soon as poll() returns the record. Both processes read the
  same CLOCK_REALTIME on the same machine, so the difference is the end-to-end latency.
- librdkafka settings chosen not to add latency: producer linger.ms=1 (option), acks=all
  (the librdkafka default; one node, so the ISR is the leader), no idempotence, no compression;
  consumer fetch.wait.max.ms=10 (option), fetch.min.bytes=1, fetch.queue.backoff.ms=0.
- The first --warmup-s seconds of records (by create time) are left out of the percentiles.
- Also reported: the producer's delivery-report latency (produce() to ack, msg.latency()),
  and the consumed rate, so a producer that could not keep the rate is visible.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.harness import BrokerUnderTest

PAD = struct.Struct(">q")


# -- helpers shared by benchmarks/scale.py and benchmarks/connections.py ------------------------


class ExternalBroker:
    """A broker somebody else started (--bootstrap): no pid, so no CPU/RSS figures."""

    def __init__(self, bootstrap: str, name: str = "external") -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.pid = 0
        self.data_dir = None

    def cpu_seconds(self) -> float:
        return 0.0

    def rss_bytes(self) -> int:
        return 0

    def peak_rss_bytes(self) -> int:
        return 0

    def restart(self, overrides: Any = None) -> None:
        raise RuntimeError("an external broker cannot be restarted by the benchmark")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def standalone(description: str, run, extra_args=None) -> None:  # type: ignore[no-untyped-def]
    """`python -m benchmarks.X`: start a broker with the harness (or use --bootstrap), run, print."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--broker", choices=("kbroker", "tansu"), default="kbroker")
    parser.add_argument("--bootstrap", help="use a running broker (no CPU/RSS/restart figures)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", help="write the rows here as well")
    if extra_args:
        extra_args(parser)
    args = parser.parse_args()
    options = {k: v for k, v in vars(args).items() if k not in ("broker", "bootstrap", "runs", "json")}
    if args.bootstrap:
        rows = run(ExternalBroker(args.bootstrap), args.runs, **options)
    else:
        from benchmarks.harness import BrokerUnderTest

        with BrokerUnderTest(args.broker) as broker:
            rows = run(broker, args.runs, **options)
    for row in rows:
        extra = {k: v for k, v in row.items() if k not in ("workload", "metric", "value", "unit")}
        print(f"{row['workload']:28} {row['metric']:48} {row['value']:>12.3f} {row['unit']:8} {json.dumps(extra) if extra else ''}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


def fd_limit(pid: int) -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of a process, from /proc/PID/limits (-1: unlimited)."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return (int(soft) if soft != "unlimited" else -1, int(hard) if hard != "unlimited" else -1)
    return (-1, -1)


def ensure_fd_limit(broker, need: int) -> str:  # type: ignore[no-untyped-def]
    """Make the broker's soft RLIMIT_NOFILE at least ``need``, now (prlimit on its pid) and for
    restarts (this process's limits, which the harness's Popen children inherit). Raising a hard
    limit needs CAP_SYS_RESOURCE (root here). Returns what was found and done, for the report."""
    import resource

    done = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new_hard = hard if hard == resource.RLIM_INFINITY or hard >= need else need
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, new_hard))
            done.append(f"own limit {soft}/{hard} -> {need}/{new_hard} (inherited by restarts)")
        except (ValueError, OSError) as e:
            done.append(f"could not raise own limit {soft}/{hard}: {e}")
    if broker.pid:
        b_soft, b_hard = fd_limit(broker.pid)
        if 0 <= b_soft < need:
            new_hard = b_hard if b_hard < 0 or b_hard >= need else need
            try:
                resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (need, resource.RLIM_INFINITY if new_hard < 0 else new_hard))
                done.append(f"broker limit {b_soft}/{b_hard} -> {need}/{new_hard} (prlimit)")
            except (ValueError, OSError) as e:
                done.append(f"could not raise broker limit {b_soft}/{b_hard}: {e}")
        else:
            done.append(f"broker limit {b_soft}/{b_hard} is enough")
    return "; ".join(done) or "enough"


def create_topic(bootstrap: str, topic: str, partitions: int = 1, replication_factor: int = 1, min_insync_replicas: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": str(min_insync_replicas)}
    admin.create_topics([NewTopic(topic, partitions, replication_factor, config=config)])[topic].result(30)
    # Wait until the topic's leader is known, so the first produce does not pay for it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leader after 30 s")


# -- the two processes --------------------------------------------------------------------------


def _producer(bootstrap: str, topic: str, rate: int, seconds: float, size: int, linger_ms: float, go, done, sent_count, out) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": linger_ms,
            "acks": "all",
            "enable.idempotence": False,
            "compression.type": "none",
        }
    )
    pad = b"x" * max(0, size - PAD.size)
    acked: list[float] = []
    errors = [0]

    def on_delivery(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors[0] += 1
        else:
            acked.append(msg.latency())

    producer.list_topics(topic, timeout=10)  # connection and metadata up before the clock starts
    go.wait()
    capacity = max(1.0, rate * 0.005)
    tokens = 0.0
    sent = 0
    t0 = last = time.perf_counter()
    end = t0 + seconds
    produce = producer.produce
    now_ns = time.time_ns
    pack = PAD.pack
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        tokens = min(capacity, tokens + (now - last) * rate)
        last = now
        n = int(tokens)
        if n:
            tokens -= n
            for _ in range(n):
                try:
                    produce(topic, pack(now_ns()) + pad, partition=0, on_delivery=on_delivery)
                except BufferError:
                    producer.poll(0.001)
                    continue
                sent += 1
            producer.poll(0)
        else:
            time.sleep(max(0.0002, (1.0 - tokens) / rate))
    elapsed = time.perf_counter() - t0
    left = producer.flush(30)
    sent_count.value = sent - left
    done.set()
    acked.sort()
    out.put(
        {
            "sent": sent,
            "send_rate": sent / elapsed,
            "undelivered": left,
            "delivery_errors": errors[0],
            "ack_p50_ms": percentile(acked, 50) * 1e3,
            "ack_p99_ms": percentile(acked, 99) * 1e3,
        }
    )


def _consumer(bootstrap: str, topic: str, warmup_ns: int, fetch_wait_ms: int, ready, go, done, sent_count, out) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_wait_ms,
            "fetch.min.bytes": 1,
            "fetch.queue.backoff.ms": 0,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.consume(1, 1.0)  # connect and start fetching: the topic is empty
    ready.set()
    go.wait()
    start_ns = time.time_ns()
    latencies: list[int] = []
    ts_latencies: list[int] = []
    seen = 0
    bad_ts_type = 0
    errors = 0
    unpack = PAD.unpack_from
    deadline = time.monotonic() + 300
    idle_since = time.monotonic()
    first_ns = last_ns = 0
    poll = consumer.poll
    while time.monotonic() < deadline:
        # poll() returns as soon as one record is there; consume(n, t) would wait for n
        # records or t seconds, which at 50k/s holds records back for up to n/50k s.
        m = poll(0.5)
        now = time.time_ns()
        if m is None:
            # Stop once the producer has flushed and everything it got acked is in, or when
            # nothing has come for 10 s after that (records lost: reported as not consumed).
            if done.is_set() and (seen >= sent_count.value or time.monotonic() - idle_since > 10):
                break
            continue
        idle_since = time.monotonic()
        if m.error() is not None:
            errors += 1
            continue
        seen += 1
        (created,) = unpack(m.value())
        if created - start_ns < warmup_ns:
            continue
        latencies.append(now - created)
        ts_type, ts_ms = m.timestamp()
        if ts_type != TIMESTAMP_CREATE_TIME:
            bad_ts_type += 1
        ts_latencies.append(now // 1_000_000 - ts_ms)
        if not first_ns:
            first_ns = now
        last_ns = now
    consumer.close()
    latencies.sort()
    ts_latencies.sort()
    out.put(
        {
            "consumed": seen,
            "measured": len(latencies),
            "consume_errors": errors,
            "not_create_time": bad_ts_type,
            "consume_rate": len(latencies) / ((last_ns - first_ns) / 1e9) if last_ns > first_ns else 0.0,
            "p50_ms": percentile(latencies, 50) / 1e6,
            "p99_ms": percentile(latencies, 99) / 1e6,
            "p999_ms": percentile(latencies, 99.9) / 1e6,
            "max_ms": (latencies[-1] / 1e6) if latencies else float("nan"),
            # the same from the record's own CreateTime timestamp (1 ms resolution)
            "ts_p50_ms": percentile(ts_latencies, 50),
            "ts_p99_ms": percentile(ts_latencies, 99),
        }
    )


def measure_once(
    bootstrap: str, pid: int, rate: int, seconds: float, size: int, linger_ms: float, fetch_wait_ms: int, warmup_s: float, replication_factor: int = 1, min_insync_replicas: int = 1
) -> dict[str, Any]:
    topic = f"latency-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, topic, replication_factor=replication_factor, min_insync_replicas=min_insync_replicas)
    ctx = mp.get_context("spawn")
    ready, go, done, out_c, out_p = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    sent_count = ctx.Value("q", 0)
    consumer = ctx.Process(target=_consumer, args=(bootstrap, topic, int(warmup_s * 1e9), fetch_wait_ms, ready, go, done, sent_count, out_c))
    producer = ctx.Process(target=_producer, args=(bootstrap, topic, rate, seconds, size, linger_ms, go, done, sent_count, out_p))
    consumer.start()
    producer.start()
    if not ready.wait(60):
        raise RuntimeError("consumer did not start")
    time.sleep(1.0)  # let the producer connect too
    cpu0 = _cpu(pid)
    t0 = time.perf_counter()
    go.set()
    p = out_p.get(timeout=seconds + 120)
    cpu1, t1 = _cpu(pid), time.perf_counter()
    c = out_c.get(timeout=330)
    producer.join(30)
    consumer.join(30)
    result = {**p, **c, "linger_ms": linger_ms, "fetch_wait_ms": fetch_wait_ms}
    if pid:
        result["broker_cpu_pct"] = (cpu1 - cpu0) / (t1 - t0) * 100
    return result


def _cpu(pid: int) -> float:
    if not pid:
        return 0.0
    from benchmarks.harness import proc_cpu_seconds

    return proc_cpu_seconds(pid)


def run(
    broker: BrokerUnderTest,
    runs: int = 1,
    rate: int = 50_000,
    seconds: float = 20.0,
    size: int = 100,
    linger_ms: float = 1.0,
    fetch_wait_ms: int = 10,
    warmup_s: float = 2.0,
    compare_linger0: bool = True,
    replication_factor: int = 1,
    min_insync_replicas: int = 1,
) -> list[dict]:
    rows: list[dict] = []
    factor = getattr(broker, "scale", 1.0)  # the harness's --scale: shorter runs, same rate
    if factor != 1.0:
        seconds = max(6.0, seconds * factor)
        warmup_s = min(warmup_s, seconds / 4)
    settings = [(linger_ms, fetch_wait_ms, runs)]
    if compare_linger0 and linger_ms != 0:
        settings.append((0.0, fetch_wait_ms, 1))  # the comparison: once
    for linger, wait, n_runs in settings:
        results = [
            measure_once(broker.bootstrap, broker.pid, rate, seconds, size, linger, wait, warmup_s, replication_factor, min_insync_replicas) for _ in range(n_runs)
        ]
        label = f"latency linger.ms={linger:g} fetch.wait.max.ms={wait}"
        extra = {"runs": n_runs, "rate": rate, "seconds": seconds, "size": size, "linger_ms": linger, "fetch_wait_ms": wait, "replication_factor": replication_factor}
        median = lambda key: sorted(r[key] for r in results)[len(results) // 2]  # noqa: B023
        for key, metric, unit in (
            ("p50_ms", "e2e p50", "ms"),
            ("p99_ms", "e2e p99", "ms"),
            ("p999_ms", "e2e p99.9", "ms"),
            ("max_ms", "e2e max", "ms"),
            ("ts_p99_ms", "e2e p99 from record CreateTime (1 ms res.)", "ms"),
            ("ack_p50_ms", "produce ack p50", "ms"),
            ("ack_p99_ms", "produce ack p99", "ms"),
            ("send_rate", "producer rate achieved", "rec/s"),
            ("consume_rate", "consumer rate", "rec/s"),
            ("broker_cpu_pct", "broker CPU", "%"),
        ):
            if key in results[0]:
                rows.append({"workload": label, "metric": metric, "value": float(median(key)), "unit": unit, **extra})
        problems = sum(r["undelivered"] + r["delivery_errors"] + r["consume_errors"] + r["not_create_time"] for r in results)
        missing = sum(max(0, r["sent"] - r["consumed"]) for r in results)
        rows.append({"workload": label, "metric": "errors+undelivered+not-CreateTime", "value": float(problems), "unit": "count", **extra})
        rows.append({"workload": label, "metric": "records not consumed", "value": float(missing), "unit": "count", **extra})
    return rows


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--linger-ms", dest="linger_ms", type=float, default=1.0)
    parser.add_argument("--fetch-wait-ms", dest="fetch_wait_ms", type=int, default=10)
    parser.add_argument("--warmup-s", dest="warmup_s", type=float, default=2.0)
    parser.add_argument("--no-linger0", dest="compare_linger0", action="store_false", help="skip the linger.ms=0 comparison run")
    parser.add_argument("--replication-factor", dest="replication_factor", type=int, default=1, help="the topic's (against a cluster's --bootstrap)")
    parser.add_argument("--min-insync-replicas", dest="min_insync_replicas", type=int, default=1)


if __name__ == "__main__":
    standalone(__doc__.splitlines()[0], run, _args)
