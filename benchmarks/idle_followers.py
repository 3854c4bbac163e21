"""What following many idle partitions costs: the CPU of three nodes doing nothing but replicate.

    python -m benchmarks.idle_followers [--partitions 600] [--seconds 20]

Three combined nodes on loopback; one RF=3 topic with ``--partitions`` partitions (leaders spread
over the nodes, so each node follows two thirds of them) and no traffic. Once every ISR is full,
each node's CPU seconds (utime + stime from /proc/<pid>/stat) over ``--seconds`` are reported.
What remains is mostly the followers' long-polling fetches (`replica.fetch.wait.max.ms`): with
incremental fetch sessions an idle fetch names no partition and its answer none.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.follower_catchup import cpu_seconds
from tests.cluster.cluster import KafkaCluster, wait_until

TOPIC = "idle"
TIMEOUT_S = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-idle-") as root:
        cluster = KafkaCluster(Path(root), combined=3)
        try:
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic(TOPIC, args.partitions, 3)], operation_timeout=60, request_timeout=60)[TOPIC].result(timeout=60)

            def full() -> bool | None:
                partitions = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
                return all(len(p.isrs) == 3 for p in partitions.values()) or None

            wait_until("every ISR full", full, TIMEOUT_S)
            pids = [n.proc.pid for n in cluster.brokers if n.proc is not None]
            before = [cpu_seconds(pid) for pid in pids]
            time.sleep(args.seconds)
            used = [cpu_seconds(pid) - b for pid, b in zip(pids, before)]
            print(f"{args.partitions} idle RF=3 partitions, CPU per node over {args.seconds:.0f} s: " + ", ".join(f"{u:.2f} s" for u in used))
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
