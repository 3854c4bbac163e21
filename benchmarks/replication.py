"""Replication's cost and its failover: acks=all with RF=3 beside acks=1 with RF=1, and how long a
partition takes no acks=all write after its leader is killed.

    python -m benchmarks.replication [--target kbroker|kafka] [--records 1000000] [--trials 5] [--override key=value ...]

Three combined nodes on loopback: kbroker's (the cluster of tests/cluster) or, with
``--target kafka``, Apache Kafka 4.4's own (benchmarks/apache_kafka.py), measured the same way. Throughput: workload 1's
producer (1,000,000 x 100 B, linger.ms=5, one partition, librdkafka) once with acks=1 to an RF=1
topic, once with acks=all and idempotence to an RF=3 topic with min.insync.replicas=2, in the
same run; the rate is counted from the first acknowledged record. Issue #17's goal: acks=all
RF=3 at least 50 % of acks=1 RF=1 (LinkedIn's 2014 measurement of Kafka: 51 %).

Failover: each trial SIGKILLs the leader of an RF=3 partition and from that instant sends one
acks=all record every 50 ms through a surviving broker, each bounded to 5 s; the first
acknowledged record ends the trial. The killed node is restarted and back in the ISR before the
next trial. Trials are reported apart when the killed node was also the active controller: a
new controller first needs an election (controller.quorum.fetch.timeout.ms, 2 s) and then, as
Kafka's does, gives every broker a whole session from its activation before it fences one.
Goal: at most broker.session.timeout.ms (9 s by default) + 1 s.

Controlled shutdown: an idempotent acks=all producer sends a record every 10 ms while the
partition's leader is stopped with SIGTERM (it asks the controller to move its leaderships
first); the longest gap between two acknowledgements is the partition's unavailability.
Goal: at most 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from benchmarks.controller_failover import quorum_leader
from benchmarks.workloads import produce
from tests.cluster.cluster import KafkaCluster, wait_until

Cluster = KafkaCluster | KafkaReferenceCluster

VALUE = b"x" * 100
SEND_EVERY_S = 0.05
SEND_TIMEOUT_MS = 5000
TIMEOUT_S = 120.0


def create(bootstrap: str, name: str, replication_factor: int, min_isr: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 1, replication_factor, config={"min.insync.replicas": str(min_isr)})
    admin.create_topics([topic], operation_timeout=30, request_timeout=30)[name].result(timeout=30)


def partition_state(bootstrap: str, name: str) -> tuple[int, list[int]]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(name, timeout=10).topics[name].partitions[0]
    return meta.leader, sorted(meta.isrs)


def rate(bootstrap: str, topic: str, records: int, conf: dict[str, object]) -> float:
    started: list[float] = []
    produce(bootstrap, topic, records, [VALUE], conf=conf, ready=lambda: started.append(time.monotonic()))
    return (records - 1) / (time.monotonic() - started[0])


def failover_ms(cluster: Cluster, topic: str) -> tuple[float, bool]:
    """(ms from the kill to the next acknowledged record, whether the killed node was the active controller)."""
    leader, _ = partition_state(cluster.bootstrap, topic)
    survivor = next(n for n in cluster.nodes.values() if n.node_id != leader)
    # Only the quorum's leader answers DescribeQuorum without an error: every node is asked.
    active = wait_until("the active controller", lambda: next(filter(None, (quorum_leader(cluster.controller_bootstrap(n)) for n in cluster.nodes)), None), TIMEOUT_S)
    was_controller = active == leader
    acked = threading.Event()
    producers: list[Producer] = []

    def attempt() -> None:
        producer = Producer({"bootstrap.servers": survivor.bootstrap, "acks": "all", "message.timeout.ms": SEND_TIMEOUT_MS, "log_level": 0})
        producers.append(producer)
        producer.produce(topic, VALUE, on_delivery=lambda err, _msg: acked.set() if err is None else None)
        producer.flush(SEND_TIMEOUT_MS / 1000 + 1)

    cluster.nodes[leader].kill()
    killed_at = time.monotonic()
    threads = []
    while not acked.is_set() and time.monotonic() - killed_at < TIMEOUT_S:
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        threads.append(thread)
        acked.wait(SEND_EVERY_S)
    elapsed = (time.monotonic() - killed_at) * 1000
    for thread in threads:
        thread.join(SEND_TIMEOUT_MS / 1000 + 2)
    cluster.nodes[leader].launch()
    cluster.nodes[leader].await_started()
    wait_until("the killed broker back in the ISR", lambda: len(partition_state(survivor.bootstrap, topic)[1]) == 3 or None, TIMEOUT_S)
    return elapsed, was_controller


def shutdown_gap_ms(cluster: Cluster, topic: str) -> float:
    leader, _ = partition_state(cluster.bootstrap, topic)
    survivor = next(n for n in cluster.nodes.values() if n.node_id != leader)
    producer = Producer({"bootstrap.servers": survivor.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0, "log_level": 0})
    acked: list[float] = []
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            producer.produce(topic, VALUE, on_delivery=lambda err, _msg: acked.append(time.monotonic()) if err is None else None)
            producer.poll(0.01)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    time.sleep(1)
    stopping = time.monotonic()
    cluster.nodes[leader].stop()
    time.sleep(2)
    stop.set()
    thread.join(10)
    producer.flush(30)
    cluster.nodes[leader].launch()
    cluster.nodes[leader].await_started()
    wait_until("the stopped broker back in the ISR", lambda: len(partition_state(survivor.bootstrap, topic)[1]) == 3 or None, TIMEOUT_S)
    around = [t for t in acked if t >= stopping - 0.5]
    return max((b - a for a, b in zip(around, around[1:])), default=float("nan")) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("kbroker", "kafka"), default="kbroker", help="whose cluster to measure (kafka: Apache Kafka 4.4.0)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--override", action="append", default=[], help="a broker property for every node, key=value")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory(prefix="kbroker-replication-") as root:
        cluster: Cluster
        if args.target == "kafka":
            cluster = KafkaReferenceCluster(Path(root), fetch_jars(), nodes=3, overrides=overrides)
        else:
            cluster = KafkaCluster(Path(root), combined=3, overrides=overrides)
        try:
            cluster.start()
            create(cluster.bootstrap, "rf1", 1, 1)
            create(cluster.bootstrap, "rf3", 3, 2)
            wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, "rf3")[1]) == 3 or None, TIMEOUT_S)
            one = rate(cluster.bootstrap, "rf1", args.records, {"acks": "1"})
            print(f"acks=1   RF=1: {one:,.0f} records/s")
            three = rate(cluster.bootstrap, "rf3", args.records, {"acks": "all", "enable.idempotence": True})
            print(f"acks=all RF=3: {three:,.0f} records/s ({three / one:.0%} of acks=1 RF=1)")
            create(cluster.bootstrap, "failover", 3, 2)
            wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, "failover")[1]) == 3 or None, TIMEOUT_S)
            trials: dict[bool, list[float]] = {False: [], True: []}
            for trial in range(args.trials):
                ms, was_controller = failover_ms(cluster, "failover")
                trials[was_controller].append(ms)
                print(f"failover trial {trial + 1}: {ms:.0f} ms" + (" (the leader was also the active controller)" if was_controller else ""))
            for was_controller, times in trials.items():
                if times:
                    kind = "leader and active controller killed" if was_controller else "leader killed"
                    print(f"failover, {kind}: median {statistics.median(times):.0f} ms, max {max(times):.0f} ms over {len(times)}")
            gaps = [shutdown_gap_ms(cluster, "failover") for _ in range(args.trials)]
            print("controlled shutdown, longest gap between acknowledgements: " + ", ".join(f"{g:.0f}" for g in gaps) + f" ms (median {statistics.median(gaps):.0f})")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
