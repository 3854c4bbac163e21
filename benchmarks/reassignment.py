"""Partition reassignment: how fast a move copies a partition to its new broker, and the longest
an acks=all producer goes unacknowledged while the move takes leadership off a removed leader.

    python -m benchmarks.reassignment [--megabytes 500] [--trials 2] [--override key=value ...]

Three combined nodes and a broker-only node 4 on loopback (the cluster of tests/cluster). One
RF=3 partition with min.insync.replicas=2 is filled with --megabytes of 1,000-byte records, then
moved from {1, 2, 3} to {2, 3, 4} (AlterPartitionReassignments) and back, --trials moves in all;
each move removes its leader. A move lasts from the request until ListPartitionReassignments no
longer shows it: the added replica copies the whole log from the leader's log start, joins the
ISR, and the controller completes the move. Meanwhile an idempotent acks=all producer sends a
record every 10 ms; its longest gap between acknowledgements is the move's unavailability.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.workloads import produce
from broker.reassign_partitions_command import alter_reassignments, list_reassignments
from tests.cluster.cluster import KafkaCluster, wait_until

TOPIC = "moving"
VALUE = b"x" * 1000
TIMEOUT_S = 600.0


def replicas_in_sync(bootstrap: str) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    return len(meta.isrs)


def log_bytes(node_dir: Path) -> int:
    return sum(f.stat().st_size for f in (node_dir / f"{TOPIC}-0").glob("*.log"))


def move(cluster: KafkaCluster, target: list[int], added: int) -> tuple[float, float, float]:
    """(seconds, MB copied, longest acks=all gap in ms) of one move."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0, "log_level": 0})
    acked: list[float] = []
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            producer.produce(TOPIC, b"p", on_delivery=lambda err, _msg: acked.append(time.monotonic()) if err is None else None)
            producer.poll(0.01)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    time.sleep(1)
    started = time.monotonic()
    errors = alter_reassignments(cluster.bootstrap, {(TOPIC, 0): target})
    assert not errors, errors
    wait_until("the move to complete", lambda: not list_reassignments(cluster.bootstrap, [(TOPIC, 0)]) or None, TIMEOUT_S, interval_s=0.05)
    seconds = time.monotonic() - started
    time.sleep(1)
    stop.set()
    thread.join(10)
    producer.flush(30)
    around = [t for t in acked if t >= started - 0.5]
    gap = max((b - a for a, b in zip(around, around[1:])), default=float("nan")) * 1000
    return seconds, log_bytes(cluster.nodes[added].data_dir) / 1e6, gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=500)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--override", action="append", default=[], help="a broker property for every node, key=value")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory(prefix="kbroker-reassignment-") as root:
        cluster = KafkaCluster(Path(root), combined=3, brokers=1, overrides=overrides)
        try:
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            topic = NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})
            admin.create_topics([topic], operation_timeout=30, request_timeout=30)[TOPIC].result(timeout=30)
            wait_until("a full ISR", lambda: replicas_in_sync(cluster.bootstrap) == 3 or None, TIMEOUT_S)
            produce(cluster.bootstrap, TOPIC, args.megabytes * 1000, [VALUE], conf={"acks": "all"})
            wait_until("a full ISR after the fill", lambda: replicas_in_sync(cluster.bootstrap) == 3 or None, TIMEOUT_S)
            moves = [([2, 3, 4], 4), ([1, 2, 3], 1)]
            for trial in range(args.trials):
                target, added = moves[trial % 2]
                seconds, megabytes, gap = move(cluster, target, added)
                print(
                    f"move to {target}: {seconds:.1f} s for {megabytes:,.0f} MB copied to broker {added} "
                    f"({megabytes / seconds:,.0f} MB/s); longest acks=all gap {gap:,.0f} ms"
                )
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
