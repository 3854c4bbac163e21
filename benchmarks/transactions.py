"""Transactions, two ways.

    python -m benchmarks.transactions [--txns 30] [--per-txn 1000] [--clients confluent,franz-go,java] [--targets kbroker,kafka] [--kill-leader | --kill-coordinator]
    python -m benchmarks.transactions commits [--runs 3] [--records 200000] [--per-txn 1000] [--override key=value ...]

**The copy loop** (issue 32, the default): the consume-transform-produce loop of exactly-once
stream processing, run by three clients against a 3-node kbroker cluster (tests/cluster) and a
3-node Apache Kafka 4.4 cluster (benchmarks/apache_kafka.py), one after the other in one run.
Each client copies ``--per-txn`` records (100 B) per transaction from a one-partition RF=3 topic
to another with a read_committed group consumer and a transactional producer, the consumer's
offsets committed in each transaction: confluent-kafka (librdkafka, transaction version 1),
franz-go v1.22.3's GroupTransactSession (benchmarks/transactions_go, built with ``go``) and
Kafka's Java client 4.4 (benchmarks/transactions_java, compiled with ``javac`` against the
jars benchmarks/apache_kafka.py fetches); the last two use transaction version 2. The source
holds every record before a client starts, so a transaction's latency, from its begin to the
return of its commit, is the transaction's own. The first transaction (group join, producer id)
is not counted. Each client's destination is read back read_committed: every key once.
With ``--kill-leader`` the destination's leader is SIGKILLed halfway through each client's
run (and restarted after it), as in the issue. With ``--kill-coordinator`` the transactional
id's transaction coordinator is, at the same point: the group and transactional id are drawn so
that this node leads neither topic and does not coordinate the group, so only the transaction
coordinator moves.

**Commits**: a transactional producer committing every N records on one kbroker node (the
exactly-once issue's bar): begin, N records (100 B, linger.ms=5, confluent-kafka), commit,
repeated. The rate counts committed records; the commit latency is the time
commit_transaction() takes (flush of the last records, EndTxn, markers, CompleteCommit).
The broker's CPU seconds are reported beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.find_coordinator.v4 import request as find_v4

from benchmarks.apache_kafka import KAFKA_VERSION, TOOL_JVM_OPTS, KafkaReferenceCluster, fetch_jars
from benchmarks.harness import BrokerUnderTest
from benchmarks.workloads import QUIET, create_topic
from broker.wire_client import request
from tests.cluster.cluster import KafkaCluster, wait_until

API_TIMEOUT_S = 30
HERE = Path(__file__).resolve().parent
CLIENTS = ("confluent", "franz-go", "java")
TARGETS = ("kbroker", "kafka")
# A client's whole run, its group join and a leader kill included.
CLIENT_TIMEOUT_S = 600
CLUSTER_TIMEOUT_S = 120.0
WARM_UP_TXNS = 5
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types

Cluster = KafkaCluster | KafkaReferenceCluster
# (bootstrap, source, destination, group, transactional id, transactions, records per transaction,
# called with each committed transaction's index) -> each committed transaction's latency in ms
Copier = Callable[[str, str, str, str, str, int, int, Callable[[int], None]], list[float]]


# -- the copy loop -----------------------------------------------------------------------------


def copy_confluent(bootstrap: str, source: str, dest: str, group: str, txn_id: str, txns: int, per_txn: int, committed: Callable[[int], None]) -> list[float]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET}
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **QUIET})
    latencies: list[float] = []
    try:
        init_transactions(producer)
        consumer.subscribe([source])
        for i in range(txns):
            t0 = time.perf_counter()
            producer.begin_transaction()
            copied = 0
            while copied < per_txn:
                for m in consumer.consume(per_txn - copied, 0.1):
                    if m.error() is not None:
                        raise KafkaException(m.error())
                    producer.produce(dest, key=m.key(), value=m.value())
                    copied += 1
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), API_TIMEOUT_S)
            producer.commit_transaction(API_TIMEOUT_S)
            latencies.append(1000 * (time.perf_counter() - t0))
            committed(i)
    finally:
        consumer.close()
    return latencies


def init_transactions(producer: Producer) -> None:
    """A cold Kafka answers a broker's first InitProducerId COORDINATOR_LOAD_IN_PROGRESS until it
    has its block of producer ids, longer than API_TIMEOUT_S on a loaded machine; librdkafka
    resumes the call where it timed out."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        try:
            producer.init_transactions(API_TIMEOUT_S)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise


def run_lines(command: list[str], committed: Callable[[int], None]) -> list[float]:
    """A client process printing one JSON line per transaction (benchmarks/transactions_go's form)."""
    latencies: list[float] = []
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                row = json.loads(line)
                if row.get("committed") is True:
                    latencies.append(row["ms"])
                    committed(row["txn"])
            code = proc.wait(CLIENT_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code != 0:
            stderr.seek(0)
            raise RuntimeError(f"{command[0]} exited {code}: {stderr.read()[-3000:].decode(errors='replace')}")
    return latencies


def build_franz_go(out: Path) -> Path | None:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        return None
    binary = out / "transactions_go"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=HERE / "transactions_go", check=True, timeout=CLIENT_TIMEOUT_S)
    return binary


def build_java(out: Path, lib: Path) -> Path | None:
    if shutil.which("javac") is None:
        return None
    subprocess.run(["javac", "-cp", f"{lib}/*", "-d", str(out), str(HERE / "transactions_java" / "TxnCopy.java")], check=True, timeout=CLIENT_TIMEOUT_S)
    return out


def copiers(names: list[str], build_dir: Path, lib: Path | None) -> Iterator[tuple[str, Copier]]:
    """Each client asked for that this machine can build, by name."""
    for name in names:
        if name == "confluent":
            yield name, copy_confluent
        elif name == "franz-go":
            binary = build_franz_go(build_dir)
            if binary is None:
                print("franz-go: no go on this machine, skipped", flush=True)
                continue

            def copy_go(bs: str, source: str, dest: str, group: str, txn_id: str, txns: int, per_txn: int, committed: Callable[[int], None], binary: Path = binary) -> list[float]:
                command = [str(binary), "-brokers", bs, "-source", source, "-dest", dest, "-group", group, "-txn-id", txn_id, "-txns", str(txns), "-per-txn", str(per_txn)]
                return run_lines(command, committed)

            yield name, copy_go
        elif name == "java":
            classes = build_java(build_dir, lib) if lib is not None else None
            if classes is None:
                print("java: no javac or Kafka jars on this machine, skipped", flush=True)
                continue

            def copy_java(bs: str, source: str, dest: str, group: str, txn_id: str, txns: int, per_txn: int, committed: Callable[[int], None], classes: Path = classes) -> list[float]:
                assert lib is not None
                command = ["java", *TOOL_JVM_OPTS, "-cp", f"{classes}:{lib}/*", "TxnCopy", bs, source, dest, group, txn_id, str(txns), str(per_txn)]
                return run_lines(command, committed)

            yield name, copy_java
        else:
            raise SystemExit(f"unknown client {name!r}: one of {', '.join(CLIENTS)}")


def create_rf3(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30, request_timeout=30)[topic].result(timeout=30)
    wait_until(f"{topic} in sync", lambda: len(partition_state(bootstrap, topic)[1]) == 3 or None, CLUSTER_TIMEOUT_S)


def partition_state(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions[0]
    return meta.leader, meta.isrs


def find_coordinator(bootstrap: str, key_type: int, key: str) -> int:
    """The node id coordinating ``key``, asked until the coordinator's topic exists."""
    deadline = time.monotonic() + CLUSTER_TIMEOUT_S
    while True:
        [found] = request(bootstrap, find_v4.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))).coordinators
        if found.error_code == 0:
            return int(found.node_id)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {key!r}: error {found.error_code}")
        time.sleep(0.1)


def ids_for_a_coordinator_kill(bootstrap: str, tag: str, source: str, dest: str) -> tuple[str, str]:
    """A group and a transactional id whose transaction coordinator leads neither topic and does not
    coordinate the group, so that killing it moves the transaction coordinator alone."""
    leaders = {partition_state(bootstrap, source)[0], partition_state(bootstrap, dest)[0]}
    for i in range(1000):
        group, txn_id = f"group-{tag}-{i}", f"txn-{tag}-{i}"
        coordinator = find_coordinator(bootstrap, TRANSACTION_KEY, txn_id)
        if coordinator not in leaders and coordinator != find_coordinator(bootstrap, GROUP_KEY, group):
            return group, txn_id
    raise RuntimeError("no transactional id coordinated away from the topics' leaders and the group's coordinator")


def fill(bootstrap: str, topic: str, records: int) -> None:
    value = random.Random(7).randbytes(100)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **QUIET})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(API_TIMEOUT_S):
        raise RuntimeError(f"the source topic {topic} was not filled")


def committed_keys(bootstrap: str, topic: str, expected: int) -> tuple[int, int]:
    """(records, distinct keys) that read_committed sees in ``topic``, once ``expected`` arrived or 10 s passed idle."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "isolation.level": "read_committed", "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    keys: list[bytes] = []
    idle_since = time.monotonic()
    try:
        while len(keys) < expected and time.monotonic() - idle_since < 10:
            batch = [m for m in consumer.consume(10_000, 0.5) if m.error() is None]
            if batch:
                idle_since = time.monotonic()
            keys.extend(m.key() for m in batch)
    finally:
        consumer.close()
    return len(keys), len(set(keys))


@dataclass(slots=True)
class Row:
    client: str
    target: str
    latencies_ms: list[float]
    seconds: float
    copied: int
    distinct: int

    def percentile(self, q: float) -> float:
        """Nearest rank: with 30 transactions the p99 is the slowest."""
        ordered = sorted(self.latencies_ms)
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def make_cluster(target: str, root: Path, lib: Path | None) -> Cluster:
    if target == "kafka":
        assert lib is not None
        return KafkaReferenceCluster(root, lib, nodes=3)
    return KafkaCluster(root, combined=3)


def copy_on(cluster: Cluster, target: str, copier: tuple[str, Copier], txns: int, per_txn: int, kill: str | None) -> Row:
    """One client's copy on ``cluster``: ``txns`` counted transactions after a first, uncounted one;
    ``kill``: "leader" (the destination's) or "coordinator" (the transaction coordinator's node)
    SIGKILLed once half of them are committed."""
    name, copy = copier
    bootstrap = cluster.bootstrap
    tag = f"{name}-{random.randrange(1 << 30)}"
    source, dest = f"src-{tag}", f"dst-{tag}"
    create_rf3(bootstrap, source)
    create_rf3(bootstrap, dest)
    group, txn_id = ids_for_a_coordinator_kill(bootstrap, tag, source, dest) if kill == "coordinator" else (f"group-{tag}", f"txn-{tag}")
    fill(bootstrap, source, (txns + 1) * per_txn)
    killed: list[int] = []

    def committed(index: int) -> None:
        if kill is not None and not killed and index == txns // 2:
            node = partition_state(bootstrap, dest)[0] if kill == "leader" else find_coordinator(bootstrap, TRANSACTION_KEY, txn_id)
            cluster.nodes[node].kill()
            killed.append(node)
            print(f"{name} on {target}: node {node}, the {'destination leader' if kill == 'leader' else 'transaction coordinator'}, killed after transaction {index}", flush=True)

    t0 = time.perf_counter()
    latencies = copy(bootstrap, source, dest, group, txn_id, txns + 1, per_txn, committed)
    seconds = time.perf_counter() - t0
    for node in killed:
        cluster.nodes[node].launch()
        cluster.nodes[node].await_started()
        wait_until(f"node {node} back in the ISR", lambda: len(partition_state(bootstrap, dest)[1]) == 3 or None, CLUSTER_TIMEOUT_S)
    copied, distinct = committed_keys(bootstrap, dest, (txns + 1) * per_txn)
    return Row(name, target, latencies[1:], seconds, copied, distinct)


def print_table(rows: list[Row], per_txn: int, kill: str | None) -> None:
    fault = {None: "", "leader": ", the destination leader killed", "coordinator": ", the transaction coordinator killed"}[kill]
    print(f"\nper-transaction latency, {per_txn} records per transaction, first transaction not counted{fault}")
    print(f"{'client':<10} {'broker':<13} {'txns':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'total s':>8} {'copied':>8} {'distinct':>9}")
    for r in rows:
        broker = f"kafka {KAFKA_VERSION}" if r.target == "kafka" else r.target
        print(
            f"{r.client:<10} {broker:<13} {len(r.latencies_ms):>5} {statistics.median(r.latencies_ms):>8.1f} {r.percentile(0.99):>8.1f} "
            f"{max(r.latencies_ms):>8.1f} {r.seconds:>8.1f} {r.copied:>8} {r.distinct:>9}"
        )


def copy_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transactions", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--txns", type=int, default=30, help="counted transactions per client and broker")
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    kills = parser.add_mutually_exclusive_group()
    kills.add_argument("--kill-leader", dest="kill", action="store_const", const="leader", help="SIGKILL the destination's leader halfway through each client's run")
    kills.add_argument("--kill-coordinator", dest="kill", action="store_const", const="coordinator", help="SIGKILL the transaction coordinator halfway through each client's run")
    args = parser.parse_args(argv)
    targets = args.targets.split(",")
    lib = fetch_jars() if "kafka" in targets or "java" in args.clients.split(",") else None
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-transactions-") as tmp:
        build_dir = Path(tmp) / "build"
        build_dir.mkdir()
        clients = list(copiers(args.clients.split(","), build_dir, lib))
        for target in targets:
            cluster = make_cluster(target, Path(tmp) / target, lib)
            try:
                # Inside the try: a node that does not start in time leaves the others running.
                cluster.start()
                # Not counted: a fresh cluster's first transactions load its coordinators (and warm
                # Kafka's JIT); their markers take longer than a warm cluster's.
                copy_on(cluster, target, ("confluent", copy_confluent), WARM_UP_TXNS, args.per_txn, None)
                for client in clients:
                    row = copy_on(cluster, target, client, args.txns, args.per_txn, args.kill)
                    rows.append(row)
                    print(json.dumps({"client": row.client, "broker": target, "p50_ms": round(statistics.median(row.latencies_ms), 1), "max_ms": round(max(row.latencies_ms), 1), "copied": row.copied}), flush=True)
            finally:
                # AdminClient futures keep their client in a reference cycle: collected now, no
                # librdkafka handle goes on dialling the stopped cluster's ports.
                gc.collect()
                cluster.close()
    print_table(rows, args.per_txn, args.kill)


# -- commits -----------------------------------------------------------------------------------


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


def commits_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transactions commits", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a broker property, e.g. transaction.partition.verification.enable=false")
    args = parser.parse_args(argv)
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["commits"]:
        commits_main(argv[1:])
    else:
        copy_main(argv)


if __name__ == "__main__":
    main()
