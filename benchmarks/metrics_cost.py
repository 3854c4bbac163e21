"""Produce-path cost of metrics.listener: workload 1's produce phase (100 B records, acks=1,
linger.ms=5, 1 partition, confluent-kafka), kbroker with metrics off and on in turn (on: scraped
every 5 s), alternating on the same machine."""

from __future__ import annotations

import argparse
import statistics
import threading
import urllib.request

from benchmarks import workloads
from benchmarks.harness import BrokerUnderTest, free_port


def one(metrics: bool, i: int, records: int) -> dict[str, object]:
    port = free_port()
    overrides = {"metrics.listener": f"http://127.0.0.1:{port}"} if metrics else {}
    with BrokerUnderTest("kbroker", overrides=overrides, scale=1.0) as b:
        stop = threading.Event()

        def scraper() -> None:
            while not stop.wait(5):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        if metrics:
            threading.Thread(target=scraper, daemon=True).start()
        topic = f"bench-{i}-{int(metrics)}"

        def fn(mark) -> None:  # type: ignore[no-untyped-def]
            workloads.create_topic(b, topic, 1)
            mark()
            workloads.produce(b.bootstrap, topic, records, [b"v" * 100], None)
        row = workloads.measure(b, "1", "produce", records, records * 100, fn)
        stop.set()
        assert "error" not in row, row
        row["us_per_record"] = row["broker_cpu_pct"] / 100 * row["seconds"] / records * 1e6
        row["metrics"] = metrics
        return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", type=int, nargs="?", default=6, help="runs per setting (default 6)")
    parser.add_argument("records", type=int, nargs="?", default=4_000_000, help="records per run (default 4,000,000)")
    args = parser.parse_args(argv)
    rows = [one(m, i, args.records) for i in range(args.runs) for m in ((False, True) if i % 2 == 0 else (True, False))]
    report(rows)


def report(rows: list[dict[str, object]]) -> None:
    for m in (False, True):
        rs = [r for r in rows if r["metrics"] == m]
        rate, us = [r["records_per_s"] for r in rs], [r["us_per_record"] for r in rs]
        print(f"metrics {'on' if m else 'off'}: {statistics.median(rate):,.0f} rec/s ({min(rate):,.0f}-{max(rate):,.0f}), "
              f"broker {statistics.median(us):.3f} us/record ({min(us):.3f}-{max(us):.3f})")


if __name__ == "__main__":
    main()
