"""Produce N records to one partition with confluent-kafka, read them back, report speed and broker CPU.

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}"],
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
    cpu0 = cpu_seconds(pid) if pid else 0.0
    t0 = time.perf_counter()
    run()
    elapsed = time.perf_counter() - t0
    cpu = (cpu_seconds(pid) - cpu0) / elapsed * 100 if pid else None
    return Phase(name, records, round(elapsed, 3), round(records / elapsed), round(records * size / elapsed / 1e6, 1), None if cpu is None else round(cpu, 1))


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


def consume(bootstrap: str, topic: str, records: int, backoff_ms: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, "fetch.queue.backoff.ms": backoff_ms})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 300
    while seen < records and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
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
            measure("produce", pid, args.records, args.size, lambda: produce(bootstrap, topic, args.records, args.size)),
            measure("consume (fetch.queue.backoff.ms=0)", pid, args.records, args.size, lambda: consume(bootstrap, topic, args.records, 0)),
            measure("consume (librdkafka default backoff)", pid, args.records, args.size, lambda: consume(bootstrap, topic, args.records, 1000)),
        ]
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        tmp.cleanup()
    print(f"{'phase':40} {'records/s':>12} {'MB/s':>8} {'broker CPU %':>13} {'seconds':>8}")
    for p in phases:
        print(f"{p.name:40} {p.records_per_s:>12,} {p.mb_per_s:>8} {str(p.broker_cpu_pct):>13} {p.seconds:>8}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(p) for p in phases], indent=2))


if __name__ == "__main__":
    main()
