"""Produce latency while the log cleaner works, against the same broker with the cleaner off.

    python -m benchmarks.compaction_latency [--records 600000] [--keys 10000] [--rate 5000]
                                            [--seconds 15] [--modes off,thread,process]
                                            [--io-max-bytes-per-second 0]

For each mode a fresh broker (benchmarks.harness) is filled with a compacted topic holding
``--records`` updates over ``--keys`` keys while its cleaner is off, then restarted with
log.cleaner.enable per the mode (log.cleaner.executor=thread or process), and the latency
workload of benchmarks/latency.py (a paced producer and a consumer on another topic) runs at
once, so the cleaner works through the whole backlog during the measurement. Reported per
mode: produce ack p50/p99, end-to-end p99, and how much of the window the cleaner was busy
(from the broker's log_cleaner.cleaning / log_cleaner.cleaned events).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from datetime import datetime
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import BrokerUnderTest
from benchmarks.latency import measure_once


def fill_compacted_topic(bootstrap: str, records: int, keys: int, size: int) -> str:
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"cleanup.policy": "compact", "segment.bytes": str(4 << 20)}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 2000, "compression.type": "lz4"})
    value = b"v" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % keys), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return topic


def cleaner_busy_seconds(broker: BrokerUnderTest, start: float, end: float) -> tuple[float, int]:
    """Seconds of [start, end] (wall clock) during which the cleaner was cleaning, and how many cleanings ended."""
    assert broker.log_path is not None
    busy, began, finished = 0.0, None, 0
    for line in broker.log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event")
        if name not in ("log_cleaner.cleaning", "log_cleaner.cleaned", "log_cleaner.aborted"):
            continue
        at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        if name == "log_cleaner.cleaning":
            began = at
        elif began is not None:
            busy += max(0.0, min(at, end) - max(began, start))
            finished += name == "log_cleaner.cleaned"
            began = None
    if began is not None:
        busy += max(0.0, end - max(began, start))
    return busy, finished


def run_mode(mode: str, records: int, keys: int, size: int, rate: int, seconds: float, io_max: float) -> dict[str, Any]:
    base = {"log.cleaner.enable": "false", "log.cleaner.backoff.ms": "100"}
    with BrokerUnderTest("kbroker", overrides=base) as broker:
        fill_compacted_topic(broker.bootstrap, records, keys, size)
        overrides = dict(base)
        if mode != "off":
            overrides.update({"log.cleaner.enable": "true", "log.cleaner.executor": mode})
            if io_max > 0:
                overrides["log.cleaner.io.max.bytes.per.second"] = str(io_max)
        broker.restart(overrides)
        start = time.time()
        result = measure_once(broker.bootstrap, broker.pid, rate, seconds, 100, 1.0, 10, 2.0)
        end = time.time()
        busy, cleanings = cleaner_busy_seconds(broker, start, end)
    return {
        "mode": mode,
        "ack_p50_ms": result.get("ack_p50_ms"),
        "ack_p99_ms": result.get("ack_p99_ms"),
        "e2e_p99_ms": result.get("p99_ms"),
        "send_rate": result.get("send_rate"),
        "broker_cpu_pct": result.get("broker_cpu_pct"),
        "cleaner_busy_s": round(busy, 2),
        "window_s": round(end - start, 2),
        "cleanings": cleanings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--modes", default="off,thread,process")
    parser.add_argument("--io-max-bytes-per-second", type=float, default=0.0, help="log.cleaner.io.max.bytes.per.second (0: unlimited)")
    parser.add_argument("--json", help="write the rows here as well")
    args = parser.parse_args(argv)
    os.environ["KBROKER_LOG_FORMAT"] = "json"  # the cleaner's events are read back from the broker log
    rows = [run_mode(m, args.records, args.keys, args.size, args.rate, args.seconds, args.io_max_bytes_per_second) for m in args.modes.split(",")]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
