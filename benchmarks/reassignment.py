"""Partition reassignment: how fast a move copies a partition to its new broker, and the longest
an acks=all producer goes unacknowledged while the move takes leadership off a removed leader;
and, on kbroker or on Apache Kafka 4.4, how a replication throttle paces a move.

    python -m benchmarks.reassignment [--megabytes 500] [--trials 2] [--override key=value ...]
    python -m benchmarks.reassignment --throttled [--target kbroker|kafka] [--megabytes 8] [--throttle 1000000] [--trials 1]

Three combined nodes and a broker-only node 4 on loopback (the cluster of tests/cluster). One
RF=3 partition with min.insync.replicas=2 is filled with --megabytes of 1,000-byte records, then
moved from {1, 2, 3} to {2, 3, 4} (AlterPartitionReassignments) and back, --trials moves in all;
each move removes its leader. A move lasts from the request until ListPartitionReassignments no
longer shows it: the added replica copies the whole log from the leader's log start, joins the
ISR, and the controller completes the move. Meanwhile an idempotent acks=all producer sends a
record every 10 ms; its longest gap between acknowledgements is the move's unavailability.

With --throttled, three combined nodes of kbroker or of Kafka 4.4 (benchmarks/apache_kafka.py),
one RF=2 partition on brokers 1 and 2 filled with --megabytes of random 10 kB records, and Kafka
4.4's own kafka-reassign-partitions against either (in one tool JVM, tests/kafka_tools.py): the
partition moves to {1, 3} with --execute --throttle (the rates on every broker of the move, the
leader's and the new follower's replicas in the topic's throttled-replicas configs), --verify run
every 0.2 s until it says the move is completed (which clears the throttles), then back to
{1, 2} with no throttle; --trials such pairs. A move lasts from --execute to that --verify: the
new replica copies the whole log (under the throttle). What the tool printed follows each move.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from benchmarks.workloads import produce
from broker.reassign_partitions_command import alter_reassignments, list_reassignments
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.kafka_tools import SEPARATE_LOG4J2, ToolJvm

TOPIC = "moving"
VALUE = b"x" * 1000
TIMEOUT_S = 600.0
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
THROTTLED_RECORD = 10_000
VERIFY_INTERVAL_S = 0.2


def replicas_in_sync(bootstrap: str) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    return len(meta.isrs)


def log_bytes(node_dir: Path) -> int:
    """Bytes of the partition's segments in a node's log dir (kbroker's and Kafka's name them alike)."""
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


def throttled_moves(bootstrap: str, data_dirs: dict[int, Path], tools: ToolJvm, work: Path, megabytes: int, rate: int, trials: int) -> list[str]:
    """``trials`` times a move to {1, 3} under --throttle ``rate`` and back to {1, 2} unthrottled, with Kafka's tool: what to print."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "1"})
    admin.create_topics([topic], operation_timeout=30, request_timeout=30)[TOPIC].result(timeout=30)
    wait_until("a full ISR", lambda: replicas_in_sync(bootstrap) == 2 or None, TIMEOUT_S)
    produce(bootstrap, TOPIC, megabytes * 1_000_000 // THROTTLED_RECORD, [os.urandom(THROTTLED_RECORD)], conf={"acks": "all"})
    wait_until("a full ISR after the fill", lambda: replicas_in_sync(bootstrap) == 2 or None, TIMEOUT_S)
    tool = ("--bootstrap-server", bootstrap)
    lines = []
    for target, added, throttle in [([1, 3], 3, rate), ([1, 2], 2, None)] * trials:
        plan = work / f"to-{added}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": target}]}))
        started = time.monotonic()
        throttling = ("--throttle", str(throttle)) if throttle else ()
        rc, executed, err = tools.run(REASSIGN, *tool, "--execute", "--reassignment-json-file", str(plan), *throttling)
        assert rc == 0, executed + err
        while True:
            _, verified, _ = tools.run(REASSIGN, *tool, "--verify", "--reassignment-json-file", str(plan))
            if "is completed" in verified or time.monotonic() - started > TIMEOUT_S:
                break
            time.sleep(VERIFY_INTERVAL_S)
        seconds = time.monotonic() - started
        copied = log_bytes(data_dirs[added]) / 1e6
        how = f"--throttle {throttle:,} B/s" if throttle else "no throttle"
        lines.append(f"move to {target} ({how}): {seconds:.1f} s for {copied:,.1f} MB copied to broker {added} ({copied / seconds:,.2f} MB/s)")
        lines += [f"  --execute| {line}" for line in executed.splitlines() if line and not line.startswith("{")]
        lines += [f"  --verify|  {line}" for line in verified.splitlines() if line]
    return lines


def throttled(target: str, megabytes: int, rate: int, trials: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kbroker-reassignment-") as root:
        work = Path(root)
        lib = fetch_jars()
        tools = ToolJvm(lib, work / "tools.stderr", SEPARATE_LOG4J2)
        cluster: KafkaCluster | KafkaReferenceCluster
        if target == "kafka":
            cluster = KafkaReferenceCluster(work / "kafka", lib, nodes=3)
        else:
            cluster = KafkaCluster(work / "kbroker", combined=3)
        try:
            cluster.start()
            data_dirs = {n: node.data_dir for n, node in cluster.nodes.items()}
            lines = throttled_moves(cluster.bootstrap, data_dirs, tools, work, megabytes, rate, trials)
        finally:
            tools.close()
            cluster.close()
    print(f"{target}: one RF=2 partition of {megabytes} MB moved with Kafka 4.4's kafka-reassign-partitions")
    for line in lines:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, help="500; 8 with --throttled")
    parser.add_argument("--trials", type=int, help="moves (2); with --throttled, pairs of moves (1)")
    parser.add_argument("--override", action="append", default=[], help="a broker property for every node, key=value")
    parser.add_argument("--throttled", action="store_true", help="the throttled move with Kafka's tool, on three nodes")
    parser.add_argument("--target", choices=("kbroker", "kafka"), default="kbroker", help="with --throttled")
    parser.add_argument("--throttle", type=int, default=1_000_000, help="bytes/s, with --throttled")
    args = parser.parse_args()
    if args.throttled:
        throttled(args.target, args.megabytes or 8, args.throttle, args.trials or 1)
        return
    if args.target != "kbroker":
        parser.error("--target kafka needs --throttled")
    megabytes = args.megabytes or 500
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory(prefix="kbroker-reassignment-") as root:
        cluster = KafkaCluster(Path(root), combined=3, brokers=1, overrides=overrides)
        try:
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            topic = NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})
            admin.create_topics([topic], operation_timeout=30, request_timeout=30)[TOPIC].result(timeout=30)
            wait_until("a full ISR", lambda: replicas_in_sync(cluster.bootstrap) == 3 or None, TIMEOUT_S)
            produce(cluster.bootstrap, TOPIC, megabytes * 1000, [VALUE], conf={"acks": "all"})
            wait_until("a full ISR after the fill", lambda: replicas_in_sync(cluster.bootstrap) == 3 or None, TIMEOUT_S)
            moves = [([2, 3, 4], 4), ([1, 2, 3], 1)]
            for trial in range(args.trials or 2):
                target, added = moves[trial % 2]
                seconds, moved_mb, gap = move(cluster, target, added)
                print(
                    f"move to {target}: {seconds:.1f} s for {moved_mb:,.0f} MB copied to broker {added} "
                    f"({moved_mb / seconds:,.0f} MB/s); longest acks=all gap {gap:,.0f} ms"
                )
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
