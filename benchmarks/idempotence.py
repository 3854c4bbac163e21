"""Workload 1's produce phase with and without enable.idempotence, interleaved.

    python -m benchmarks.idempotence [--runs 3] [--records 1000000]

Each run starts a fresh kbroker, creates a one-partition topic and produces the records
(100 B, acks=1 for the plain producer, linger.ms=5, confluent-kafka). An idempotent producer
always uses acks=all (librdkafka forces it); on one node that answers as soon as acks=1 does.
The two modes alternate run by run so machine noise hits both alike; the broker's CPU
seconds per phase are reported beside the rate.

The rate counts from the first acknowledged record. Before it, librdkafka's idempotent producer
waits for a producer id, and when its first metadata answer comes before its connection to the
broker is up it retries only after its 500 ms PID timer ("Coordinator not up" in its eos
debug log): half a second of a one-second run, spent before any record is sent. The time to
the first acknowledgement is printed beside the rate.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time

from benchmarks.harness import BrokerUnderTest
from benchmarks.workloads import create_topic, produce


def run_once(records: int, idempotent: bool) -> dict[str, float]:
    with BrokerUnderTest("kbroker") as broker:
        topic = f"idem-{int(idempotent)}-{random.randrange(1 << 30)}"
        create_topic(broker, topic, 1)
        created = time.perf_counter()
        start = {"t": created, "cpu": broker.cpu_seconds(), "client": _client_cpu_seconds()}

        def ready() -> None:
            start.update(t=time.perf_counter(), cpu=broker.cpu_seconds(), client=_client_cpu_seconds())

        conf = {"enable.idempotence": idempotent, "acks": "all" if idempotent else "1"}
        produce(broker.bootstrap, topic, records, [random.Random(7).randbytes(100)], conf=conf, ready=ready)
        seconds = time.perf_counter() - start["t"]
        cpu = broker.cpu_seconds() - start["cpu"]
        client = _client_cpu_seconds() - start["client"]
    return {
        "records_per_s": (records - 1) / seconds,
        "seconds": seconds,
        "first_ack_s": start["t"] - created,
        "broker_cpu_s": cpu,
        "client_cpu_s": client,
    }


def _client_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for i in range(args.runs):
        for idempotent in (False, True) if i % 2 == 0 else (True, False):
            row = run_once(args.records, idempotent)
            results[idempotent].append(row)
            print(json.dumps({"run": i, "idempotent": idempotent, **{k: round(v, 2) for k, v in row.items()}}), flush=True)
    for idempotent, rows in results.items():
        rate = statistics.median(r["records_per_s"] for r in rows)
        cpu = statistics.median(r["broker_cpu_s"] for r in rows)
        client = statistics.median(r["client_cpu_s"] for r in rows)
        first = statistics.median(r["first_ack_s"] for r in rows)
        print(
            f"enable.idempotence={str(idempotent).lower():5}  median {rate:,.0f} records/s after the first ack"
            f" ({first * 1000:.0f} ms from producer creation)  broker CPU {cpu:.2f} s  client CPU {client:.2f} s  (runs: {len(rows)})"
        )
    # Runs of one round are back to back: their ratio is the least disturbed by the machine's drift.
    ratios = [i["records_per_s"] / p["records_per_s"] for p, i in zip(results[False], results[True])]
    print(f"idempotent / plain rate, per round: median {statistics.median(ratios):.3f} ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
