"""A transactional producer committing every N records (the exactly-once issue's bar).

    python -m benchmarks.transactions [--runs 3] [--records 200000] [--per-txn 1000] [--override key=value ...]

Each run starts a fresh kbroker, creates a one-partition topic, and produces the records
(100 B, linger.ms=5, confluent-kafka) with transactional.id set: begin, N records, commit,
repeated. The rate counts committed records; the commit latency is the time
commit_transaction() takes (flush of the last records, EndTxn, markers, CompleteCommit).
The broker's CPU seconds are reported beside it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from confluent_kafka import Producer

from benchmarks.harness import BrokerUnderTest
from benchmarks.workloads import QUIET, create_topic

API_TIMEOUT_S = 30


def run_once(records: int, per_txn: int, overrides: dict[str, str]) -> dict[str, float]:
    value = random.Random(7).randbytes(100)
    with BrokerUnderTest("kbroker", overrides) as broker:
        topic = f"txn-{random.randrange(1 << 30)}"
        create_topic(broker, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5, **QUIET})
        producer.init_transactions(API_TIMEOUT_S)
        commits: list[float] = []
        cpu0 = broker.cpu_seconds()
        t0 = time.perf_counter()
        for start in range(0, records, per_txn):
            producer.begin_transaction()
            for _ in range(min(per_txn, records - start)):
                while True:
                    try:
                        producer.produce(topic, value=value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.01)
            c0 = time.perf_counter()
            producer.commit_transaction(API_TIMEOUT_S)
            commits.append(time.perf_counter() - c0)
        seconds = time.perf_counter() - t0
        cpu = broker.cpu_seconds() - cpu0
        del producer  # closed before its broker stops, so it does not try to reconnect
    return {
        "records_per_s": records / seconds,
        "txns_per_s": len(commits) / seconds,
        "commit_p50_ms": 1000 * statistics.median(commits),
        "seconds": seconds,
        "broker_cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a broker property, e.g. transaction.partition.verification.enable=false")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    rows = []
    for i in range(args.runs):
        row = run_once(args.records, args.per_txn, overrides)
        rows.append(row)
        print(json.dumps({"run": i, **{k: round(v, 2) for k, v in row.items()}}), flush=True)
    rate = statistics.median(r["records_per_s"] for r in rows)
    txns = statistics.median(r["txns_per_s"] for r in rows)
    commit = statistics.median(r["commit_p50_ms"] for r in rows)
    cpu = statistics.median(r["broker_cpu_s"] for r in rows)
    print(f"{args.per_txn} records per transaction: median {rate:,.0f} records/s, {txns:,.1f} commits/s, commit p50 {commit:.1f} ms, broker CPU {cpu:.2f} s (runs: {len(rows)})")


if __name__ == "__main__":
    main()
