"""Produce N records to one partition with confluent-kafka, read them back (assigned, and
through a consumer group), report speed and broker CPU.

    python -m benchmarks.produce_consume [--records 1000000] [--size 100] [--bootstrap HOST:PORT]

Without --bootstrap a kbroker node is started on a free port with a temporary data
dir (the default configuration: page-cache durability, CRC checked on every batch).
Broker CPU is read from /proc/PID/stat, so it covers exactly the broker process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class Phase:
    name: str
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    broker_cpu_pct: float | None
    # Group phases: from subscribe() to the first record (the rebalance), left out of the rate,
    # as kafka-consumer-perf-test reports rebalance time apart from fetch throughput.
    join_seconds: float | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data_dir: str, overrides: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    extra = [arg for key, value in (overrides or {}).items() for arg in ("--override", f"{key}={value}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("broker did not start within 30 s")


def measure(name: str, pid: int | None, records: int, size: int, run) -> Phase:  # type: ignore[no-untyped-def]
    """Time ``run(mark)``. A group consumer calls ``mark()`` at its first record: the rate and
    the broker CPU then count from that moment, and the time before it is the join."""
    start = [time.perf_counter(), cpu_seconds(pid) if pid else 0.0]
    t0 = start[0]

    def mark() -> None:
        start[:] = [time.perf_counter(), cpu_seconds(pid) if pid else 0.0]

    run(mark)
    end = time.perf_counter()
    busy = end - start[0]
    cpu = (cpu_seconds(pid) - start[1]) / busy * 100 if pid else None
    join = start[0] - t0 if start[0] != t0 else None
    return Phase(
        name,
        records,
        round(busy, 3),
        round(records / busy),
        round(records * size / busy / 1e6, 1),
        None if cpu is None else round(cpu, 1),
        None if join is None else round(join, 3),
    )


def produce(bootstrap: str, topic: str, records: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "enable.idempotence": False})
    payload = os.urandom(size)
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("records left undelivered")


def consume(bootstrap: str, topic: str, records: int, backoff_ms: int, subscribe: bool = False, mark=None) -> None:  # type: ignore[no-untyped-def]
    """Read the topic from offset 0: assigned directly, or through a consumer group (subscribe)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": backoff_ms,
        }
    )
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 300
    while seen < records and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                if seen == 0 and mark is not None:
                    mark()
                seen += 1
    consumer.close()
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--bootstrap")
    parser.add_argument("--json", help="write the results here as well")
    args = parser.parse_args()

    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="kbroker-bench-")
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc, bootstrap = start_broker(tmp.name)
    pid = proc.pid if proc else None
    try:
        topic = f"bench-{int(time.time())}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        phases = [
            measure("produce", pid, args.records, args.size, lambda mark: produce(bootstrap, topic, args.records, args.size)),
            measure("consume (fetch.queue.backoff.ms=0)", pid, args.records, args.size, lambda mark: consume(bootstrap, topic, args.records, 0)),
            measure("consume (librdkafka default backoff)", pid, args.records, args.size, lambda mark: consume(bootstrap, topic, args.records, 1000)),
            measure("consume via a group (subscribe)", pid, args.records, args.size, lambda mark: consume(bootstrap, topic, args.records, 0, subscribe=True, mark=mark)),
        ]
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        tmp.cleanup()
    print(f"{'phase':40} {'records/s':>12} {'MB/s':>8} {'broker CPU %':>13} {'seconds':>8} {'join s':>7}")
    for p in phases:
        print(f"{p.name:40} {p.records_per_s:>12,} {p.mb_per_s:>8} {str(p.broker_cpu_pct):>13} {p.seconds:>8} {str(p.join_seconds or ''):>7}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(p) for p in phases], indent=2))


if __name__ == "__main__":
    main()
