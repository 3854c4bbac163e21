"""Replication across Apache Kafka 4.4 brokers and kbroker brokers under Kafka's controllers
(issue 36, M2): both kinds of broker replicate one another's partitions, lead some each, and
coordinate groups and transactions, while the leaders of each kind are SIGKILLed in turn.

    python -m benchmarks.mixed_cluster [--controllers 1|3] [--runs 3] [--seconds 20]

One run: Kafka controller-only nodes (ids 1..C), two Kafka broker-only nodes and two kbroker
broker-only nodes (ids 11, 12). A topic of 6 partitions, RF 3, min.insync.replicas 2, placed by
explicit assignment so that the preferred leaders alternate kinds and every partition has both
kinds among its replicas. Kafka's VerifiableProducer (acks=all, idempotent) writes to it
throughout; two VerifiableConsumers read it in two groups, one coordinated by a Kafka broker and
one by a kbroker broker; two confluent-kafka transactional producers commit every N records with
their transaction coordinator on either kind. Then a Kafka broker that leads partitions and
coordinates is SIGKILLed, restarted, and the same is done to a kbroker broker. Checked at the
end: every acknowledged record is in the log and was consumed by both groups, none is in the log
twice (by the producer's value sequence), both groups' committed offsets reach the log end, every
committed transaction is read by a read_committed consumer exactly once and nothing else is, and
every ISR is full again.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.apache_kafka import TOOL_JVM_OPTS, KafkaReferenceCluster, fetch_jars, free_ports, short_lived_jvm_opts
from benchmarks.transactions import find_coordinator
from broker.cli import main as kbroker_main
from tests.cluster.cluster import wait_until
from tests.integration.conftest import BrokerProcess, retire

GROUP_KEY, TRANSACTION_KEY = 0, 1
KBROKER_IDS = (11, 12, 13)
TIMEOUT_S = 60.0
# Kafka's controller fences a broker that missed its heartbeats this long, and refuses a restarted
# broker's registration until then (9 s by default).
SESSION_TIMEOUT_MS = 4000
QUIET = {"log.connection.close": False, "log_level": 3}
# The requests a follower sends its leader, counted on kbroker's side.
SERVED = ("Fetch", "ListOffsets", "OffsetForLeaderEpoch")
# Every broker, of either kind, creates the internal topics the same way: whichever asks first.
BROKER_SHARED = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "8",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "8",
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "10000",
    # A consumer-protocol (KIP-848) rebalance takes a few heartbeats: 1 s apart, not 5.
    "group.consumer.min.heartbeat.interval.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "1000",
}
CONTROLLER_ONLY = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    # Leadership goes back to the preferred replicas soon after a restart (300 s by default), so
    # that both kinds lead again before the next kill.
    "leader.imbalance.check.interval.seconds": "5",
}


def kbroker_broker(node_dir: Path, node_id: int, voters: str, extra: dict[str, str]) -> BrokerProcess:
    """A kbroker broker-only node under Kafka's controllers ``voters`` (id@host:port,...): its
    server.properties (``extra`` added) in ``node_dir``, its log dir node_dir/data; not formatted."""
    broker = BrokerProcess(node_dir / "data")
    broker.data_dir.mkdir(parents=True)
    broker.config_file = node_dir / "server.properties"
    props = {
        "node.id": str(node_id),
        "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": voters,
        "log.dirs": str(broker.data_dir),
        "broker.heartbeat.interval.ms": "500",
    } | extra
    broker.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return broker


class MixedCluster:
    """Kafka controller-only and broker-only nodes (ids 1.. as KafkaReferenceCluster numbers them)
    and kbroker broker-only nodes (ids 11..) under Kafka's controllers."""

    def __init__(self, root: Path, lib: Path, *, controllers: int = 1, kafka_brokers: int = 2, kbroker_brokers: int = 2) -> None:
        self.lib = lib
        self.kafka = KafkaReferenceCluster(
            root / "kafka", lib, nodes=0, controllers=controllers, brokers=kafka_brokers, overrides=CONTROLLER_ONLY | BROKER_SHARED
        )
        voters = ",".join(f"{n.node_id}@{n.controller_bootstrap}" for n in self.kafka.controllers)
        self.kbrokers: dict[int, BrokerProcess] = {}
        self.metrics: dict[int, str] = {}
        for node_id, metrics_port in zip(KBROKER_IDS[:kbroker_brokers], free_ports(kbroker_brokers)):
            self.metrics[node_id] = f"http://127.0.0.1:{metrics_port}/metrics"
            extra = BROKER_SHARED | {"metrics.listener": f"http://127.0.0.1:{metrics_port}"}
            self.kbrokers[node_id] = kbroker_broker(root / f"kbroker{node_id}", node_id, voters, extra)

    @property
    def kafka_broker_ids(self) -> list[int]:
        return [n.node_id for n in self.kafka.brokers]

    @property
    def broker_ids(self) -> list[int]:
        return self.kafka_broker_ids + list(self.kbrokers)

    def kind(self, node_id: int) -> str:
        return "kbroker" if node_id in self.kbrokers else "kafka"

    @property
    def bootstrap(self) -> str:
        kafka = [n.bootstrap for n in self.kafka.brokers if n.running]
        return ",".join(kafka + [b.bootstrap for b in self.kbrokers.values() if b.running])

    def start(self) -> "MixedCluster":
        # Kafka's format and start-up are JVM starts: kbroker's nodes are formatted (in process,
        # with Kafka's cluster id) and launched meanwhile, and find the quorum once it is up.
        with ThreadPoolExecutor(1) as pool:
            kafka_formatted = pool.submit(self.kafka.format)
            for broker in self.kbrokers.values():
                assert broker.config_file is not None
                out = io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    code = kbroker_main(["storage", "format", "--cluster-id", self.kafka.cluster_id, "--config", str(broker.config_file), "--no-initial-controllers"])
                if code != 0:
                    raise RuntimeError(out.getvalue())
                broker.launch()
            kafka_formatted.result()
        for node in self.kafka.nodes.values():
            node.launch()
        for node in self.kafka.nodes.values():
            node.await_started()
        for broker in self.kbrokers.values():
            broker.await_started()
        # A broker's start-up message can come before Kafka's controller unfences it; a manual
        # assignment naming a broker the controller does not know yet is refused.
        wait_until("every broker in Metadata", lambda: set(self.admin().list_topics(timeout=10).brokers) == set(self.broker_ids), TIMEOUT_S, 0.2)
        return self

    def kill(self, node_id: int) -> None:
        if node_id in self.kbrokers:
            self.kbrokers[node_id].kill()
        else:
            self.kafka.kill(node_id)

    def launch(self, node_id: int) -> None:
        if node_id in self.kbrokers:
            self.kbrokers[node_id].launch()
        else:
            self.kafka.launch(node_id)

    def await_started(self, node_id: int) -> None:
        if node_id in self.kbrokers:
            self.kbrokers[node_id].await_started()
        else:
            self.kafka.await_started(node_id)

    def close(self) -> None:
        for broker in self.kbrokers.values():
            retire(broker)
        self.kafka.close()

    def requests_served(self, node_id: int, names: tuple[str, ...] = SERVED) -> Counter:
        """(request, version): how many kbroker node ``node_id`` answered in this life, from its
        RequestsPerSec; ("FetchFollower", ""): the fetches that came from replicas."""
        with urllib.request.urlopen(self.metrics[node_id], timeout=10) as answer:
            text = answer.read().decode()
        served: Counter = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                request = sample.labels.get("request")
                if sample.name == "kafka_network_requestmetrics_requests_total" and request in names:
                    served[(request, sample.labels["version"])] += int(sample.value)
                elif sample.name == "kafka_network_requestmetrics_totaltimems_count" and request == "FetchFollower":
                    served[("FetchFollower", "")] += int(sample.value)
        return served

    def isr_changes_sent(self, node_id: int) -> Counter:
        """AlterPartition outcomes kbroker node ``node_id`` logged, in all its lives."""
        return Counter(e["event"] for e in self.kbrokers[node_id].log_events() if str(e.get("event", "")).startswith("alter_partition."))

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 10000, **QUIET})

    def placement(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition: (leader, replicas, ISR) as Metadata shows them."""
        meta = self.admin().list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in meta.partitions.values()}

    def create_topic(self, topic: str, assignment: list[list[int]], config: dict[str, str] | None = None) -> None:
        admin = self.admin()
        new = NewTopic(topic, len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2", **(config or {})})
        admin.create_topics([new], operation_timeout=30, request_timeout=30)[topic].result(timeout=40)
        self.await_full_isrs(topic)

    def await_full_isrs(self, topic: str, timeout_s: float = TIMEOUT_S) -> dict[int, tuple[int, list[int], list[int]]]:
        return wait_until(
            f"every ISR of {topic} full",
            lambda: (p := self.placement(topic)) and all(leader >= 0 and sorted(r) == isr for leader, r, isr in p.values()) and p,
            timeout_s,
            0.5,
        )

    def await_preferred_leaders(self, topic: str, timeout_s: float = TIMEOUT_S) -> None:
        """Every partition led by its first replica and its ISR full: the controller's imbalance check moved leadership back."""
        wait_until(
            f"{topic} led by its preferred replicas",
            lambda: all(leader == r[0] and sorted(r) == isr for leader, r, isr in self.placement(topic).values()),
            timeout_s,
            0.5,
        )

    def coordinated_by(self, key_type: int, prefix: str, node_id: int) -> str:
        """A group or transactional id (``prefix``-N) whose coordinator is ``node_id``."""
        for i in range(400):
            key = f"{prefix}-{i}"
            if find_coordinator(self.bootstrap, key_type, key) == node_id:
                return key
        raise RuntimeError(f"no {prefix}-N coordinated by node {node_id}")


def alternating_assignment(kafka_ids: list[int], kbroker_ids: list[int], partitions: int) -> list[list[int]]:
    """RF 3 replica lists whose first (preferred leader) alternates Kafka, kbroker, Kafka, ... and
    whose other two are one of each kind, so every partition has both kinds among its replicas."""
    out = []
    for p in range(partitions):
        kafka, kbroker = kafka_ids[(p // 2) % len(kafka_ids)], kbroker_ids[(p // 2) % len(kbroker_ids)]
        other_kafka = kafka_ids[(p // 2 + 1) % len(kafka_ids)]
        other_kbroker = kbroker_ids[(p // 2 + 1) % len(kbroker_ids)]
        if p % 2 == 0:
            third = other_kafka if other_kafka != kafka else other_kbroker
            out.append([kafka, kbroker, third])
        else:
            third = other_kbroker if other_kbroker != kbroker else other_kafka
            out.append([kbroker, kafka, third])
    return out


# Kafka's verifiable tools, one JVM each, their JSON events in a file.


class VerifiableTool:
    """Kafka's VerifiableProducer or VerifiableConsumer in its own JVM; SIGTERM runs its shutdown hook."""

    def __init__(self, lib: Path, out: Path, main_class: str, *args: str) -> None:
        self.out = out
        self._stdout: IO[bytes] = open(out, "wb")
        self._stderr: IO[bytes] = open(out.with_suffix(".stderr"), "wb")
        self.proc = subprocess.Popen(
            ["java", *TOOL_JVM_OPTS, *short_lived_jvm_opts(), "-cp", f"{lib}/*", main_class, *args], stdin=subprocess.DEVNULL, stdout=self._stdout, stderr=self._stderr
        )

    def events(self) -> Iterator[dict]:
        for line in self.out.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    yield json.loads(line)

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stdout.close()
        self._stderr.close()


def verifiable_producer(lib: Path, work: Path, bootstrap: str, topic: str, throughput: int) -> VerifiableTool:
    config = work / "producer.properties"
    # The tool sets retries=0 unless told otherwise, which an idempotent producer refuses.
    config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\n")
    return VerifiableTool(
        lib, work / "producer.jsonl", "org.apache.kafka.tools.VerifiableProducer",
        "--bootstrap-server", bootstrap, "--topic", topic, "--acks", "-1", "--throughput", str(throughput),
        "--repeating-keys", "600", "--command-config", str(config),
    )  # fmt: skip


def verifiable_consumer(lib: Path, work: Path, bootstrap: str, topic: str, group: str) -> VerifiableTool:
    return VerifiableTool(
        lib, work / f"consumer-{group}.jsonl", "org.apache.kafka.tools.VerifiableConsumer",
        "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group, "--verbose", "--reset-policy", "earliest",
    )  # fmt: skip


# Transactions: a confluent-kafka producer committing every N records, in a thread.


@dataclass
class TransactionalLoop:
    """Transactions of ``per_txn`` records (values ``<txn_id>:<txn>:<i>``) until stopped; what
    committed, what aborted and what is in doubt (a commit whose outcome the client never learned)."""

    bootstrap: str
    topic: str
    txn_id: str
    per_txn: int = 20
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    in_doubt: list[int] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        producer = self.new_producer()
        txn = 0
        while not self.stop.is_set():
            try:
                producer.begin_transaction()
                for i in range(self.per_txn):
                    producer.produce(self.topic, key=b"%d" % i, value=f"{self.txn_id}:{txn}:{i}".encode())
                    producer.poll(0)
                self.commit(producer, txn)
            except KafkaException as e:
                err = e.args[0]
                self.errors[err.name()] += 1
                if err.txn_requires_abort():
                    with contextlib.suppress(KafkaException):
                        producer.abort_transaction(TIMEOUT_S)
                    self.aborted.append(txn)
                else:  # fatal or unknown: a new producer fences the old and aborts what it left open
                    self.in_doubt.append(txn)
                    producer = self.new_producer()
            txn += 1

    def commit(self, producer: Producer, txn: int) -> None:
        for _ in range(20):
            try:
                producer.commit_transaction(TIMEOUT_S)
                self.committed.append(txn)
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
                self.errors[e.args[0].name()] += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit kept failing"))

    def new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id, "transaction.timeout.ms": 30000, "linger.ms": 5, **QUIET})
        deadline = time.monotonic() + 2 * TIMEOUT_S
        while True:
            try:
                producer.init_transactions(TIMEOUT_S)
                return producer
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                self.errors[e.args[0].name()] += 1

    def check(self, read: list[bytes]) -> dict[str, int]:
        """Against the values a read_committed consumer read from ``topic``."""
        prefix = f"{self.txn_id}:".encode()
        mine = Counter(v for v in read if v.startswith(prefix))
        by_txn = Counter(int(v.split(b":")[1]) for v in mine)
        complete = {t for t, n in by_txn.items() if n == self.per_txn}
        return {
            "committed": len(self.committed),
            "aborted": len(self.aborted),
            "in_doubt": len(self.in_doubt),
            "lost": len(set(self.committed) - complete),
            "partial": sum(1 for n in by_txn.values() if n != self.per_txn),
            "aborted_read": len(set(self.aborted) & set(by_txn)),
            "duplicated": sum(n - 1 for n in mine.values() if n > 1),
        }


# Reading the log back.


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermarks, asked again while a new leader's is not known yet (OFFSET_NOT_AVAILABLE, as in Kafka)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mixed-offsets", **QUIET})
    try:
        return wait_until(
            f"the end offsets of {topic}", lambda: {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}, TIMEOUT_S, 0.2
        )
    finally:
        consumer.close()


def read_log(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> list[bytes]:
    """Every value of ``topic`` up to its end offsets (the last stable offsets for read_committed)."""
    ends = end_offsets(bootstrap, topic, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mixed-reader", "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, **QUIET})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
    values: list[bytes] = []
    remaining = {p for p in range(partitions) if ends[p] > 0}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    values.append(msg.value())
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
    finally:
        consumer.close()
    if remaining:
        raise TimeoutError(f"{topic}: partitions {sorted(remaining)} not read to their end")
    return values


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)}
    finally:
        consumer.close()


def caught_up(committed: dict[int, int], ends: dict[int, int]) -> bool:
    """A group's committed offsets at the log end (a partition never written has no offset committed)."""
    return all(committed[p] == end for p, end in ends.items() if end > 0)


# One run of the campaign.

PARTITIONS = 6


@dataclass
class Kill:
    node: int
    kind: str
    led: int  # partitions of the topic it led when killed
    coordinated: str  # the groups and transactional ids it coordinated
    back_s: float  # from SIGKILL until every ISR was full again after its restart


def run_once(root: Path, lib: Path, controllers: int, seconds: float, throughput: int) -> dict:
    started = time.monotonic()
    cluster = MixedCluster(root, lib, controllers=controllers)
    tools: list[VerifiableTool] = []
    try:
        cluster.start()
        up_s = time.monotonic() - started
        kafka_ids, kbroker_ids = cluster.kafka_broker_ids, list(cluster.kbrokers)
        topic, txn_topic = "mixed", "mixed-txn"
        assignment = alternating_assignment(kafka_ids, kbroker_ids, PARTITIONS)
        cluster.create_topic(topic, assignment)
        cluster.create_topic(txn_topic, assignment)
        victims = {"kafka": kafka_ids[0], "kbroker": kbroker_ids[0]}
        groups = {kind: cluster.coordinated_by(GROUP_KEY, f"group-{kind}", node) for kind, node in victims.items()}
        txn_ids = {kind: cluster.coordinated_by(TRANSACTION_KEY, f"txn-{kind}", node) for kind, node in victims.items()}
        cluster.await_full_isrs("__consumer_offsets")
        cluster.await_full_isrs("__transaction_state")

        work = root / "tools"
        work.mkdir()
        consumers = {kind: verifiable_consumer(lib, work, cluster.bootstrap, topic, group) for kind, group in groups.items()}
        producer = verifiable_producer(lib, work, cluster.bootstrap, topic, throughput)
        tools += [producer, *consumers.values()]
        loops = {kind: TransactionalLoop(cluster.bootstrap, txn_topic, txn_id) for kind, txn_id in txn_ids.items()}
        threads = [threading.Thread(target=loop.run, daemon=True) for loop in loops.values()]
        for thread in threads:
            thread.start()
        try:
            time.sleep(seconds / 3)
            kills = []
            served: Counter = Counter()
            for kind, node in victims.items():
                placement = cluster.placement(topic)
                led = sum(1 for leader, _, _ in placement.values() if leader == node)
                coordinated = [g for g in groups.values() if find_coordinator(cluster.bootstrap, GROUP_KEY, g) == node]
                coordinated += [t for t in txn_ids.values() if find_coordinator(cluster.bootstrap, TRANSACTION_KEY, t) == node]
                if node in cluster.kbrokers:
                    served += cluster.requests_served(node)
                killed_at = time.monotonic()
                cluster.kill(node)
                time.sleep(seconds / 3)
                cluster.launch(node)
                cluster.await_started(node)
                for t in (topic, txn_topic, "__consumer_offsets", "__transaction_state"):
                    cluster.await_full_isrs(t)
                kills.append(Kill(node, kind, led, " ".join(coordinated), time.monotonic() - killed_at))
                cluster.await_preferred_leaders(topic)
            time.sleep(seconds / 3)
            if producer.proc.poll() is not None:
                raise RuntimeError(f"VerifiableProducer exited with {producer.proc.returncode}: see {producer.out}")
        finally:
            for loop in loops.values():
                loop.stop.set()
            producer.stop()
            for thread in threads:
                thread.join(2 * TIMEOUT_S)

        acked = Counter(int(e["value"]) for e in producer.events() if e.get("name") == "producer_send_success")
        send_errors = Counter(e.get("exception", "?") for e in producer.events() if e.get("name") == "producer_send_error")
        ends = end_offsets(cluster.bootstrap, topic, PARTITIONS)
        for group in groups.values():
            wait_until(f"{group} committed to the log end", lambda g=group: caught_up(committed_offsets(cluster.bootstrap, g, topic, PARTITIONS), ends), TIMEOUT_S, 0.5)
        for tool in consumers.values():
            tool.stop()
        log = Counter(int(v) for v in read_log(cluster.bootstrap, topic, PARTITIONS))
        read_committed = read_log(cluster.bootstrap, txn_topic, PARTITIONS, "read_committed")
        row = {
            "controllers": controllers,
            "up_s": round(up_s, 1),
            "acked": len(acked),
            "send_errors": sum(send_errors.values()),
            "lost": len(set(acked) - set(log)),
            "log_duplicates": sum(n - 1 for n in log.values() if n > 1),
            "kills": [k.__dict__ for k in kills],
        }
        for kind, tool in consumers.items():
            seen = Counter(int(e["value"]) for e in tool.events() if e.get("name") == "record_data")
            row[f"group_{kind}"] = {
                "id": groups[kind],
                "missed": len(set(acked) - set(seen)),
                "redelivered": sum(n - 1 for n in seen.values() if n > 1),
                "committed_at_end": True,
            }
        for kind, loop in loops.items():
            row[f"txn_{kind}"] = {"id": loop.txn_id, **loop.check(read_committed), "errors": dict(loop.errors)}
        for node in cluster.kbrokers:
            served += cluster.requests_served(node)
        row["kbroker_served"] = {f"{r} v{v}" if v else r: n for (r, v), n in sorted(served.items())}
        row["kbroker_alter_partition"] = dict(sum((cluster.isr_changes_sent(n) for n in cluster.kbrokers), Counter()))
        row["isrs_full_at_end"] = all(cluster.await_full_isrs(t) for t in (topic, txn_topic, "__consumer_offsets", "__transaction_state"))
        row["wall_s"] = round(time.monotonic() - started, 1)
        return row
    finally:
        for tool in tools:
            tool.stop(timeout_s=5)
        cluster.close()


def print_table(rows: list[dict]) -> None:
    header = ("run", "acked", "lost", "log dup", "grp kafka miss/redeliv", "grp kbroker miss/redeliv", "txn@kafka ok/abort/doubt/lost/dup",
              "txn@kbroker ok/abort/doubt/lost/dup", "kill kafka: led, back s", "kill kbroker: led, back s", "ISRs full")  # fmt: skip
    print(" | ".join(header))
    for i, r in enumerate(rows, 1):
        def txn(t: dict) -> str:
            return f"{t['committed']}/{t['aborted']}/{t['in_doubt']}/{t['lost']}/{t['duplicated']}"

        kills = {k["kind"]: f"{k['led']}p {k['back_s']:.1f}" for k in r["kills"]}
        cells = (
            str(i), str(r["acked"]), str(r["lost"]), str(r["log_duplicates"]),
            f"{r['group_kafka']['missed']}/{r['group_kafka']['redelivered']}", f"{r['group_kbroker']['missed']}/{r['group_kbroker']['redelivered']}",
            txn(r["txn_kafka"]), txn(r["txn_kbroker"]), kills.get("kafka", "-"), kills.get("kbroker", "-"), str(r["isrs_full_at_end"]),
        )  # fmt: skip
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mixed_cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controllers", type=int, default=1, choices=(1, 3))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=24.0, help="before, during and after each kill: a third each")
    parser.add_argument("--throughput", type=int, default=300, help="VerifiableProducer's records per second")
    parser.add_argument("--dir", type=Path, help="keep every run's logs here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    lib = fetch_jars()
    rows = []
    for run in range(args.runs):
        root = (args.dir or Path(tempfile.mkdtemp(prefix="mixed-cluster-"))) / f"run{run + 1}"
        row = run_once(root, lib, args.controllers, args.seconds, args.throughput)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["lost"] or r["log_duplicates"] or not r["isrs_full_at_end"]
           or any(r[f"group_{k}"]["missed"] for k in ("kafka", "kbroker"))
           or any(r[f"txn_{k}"][c] for k in ("kafka", "kbroker") for c in ("lost", "partial", "aborted_read", "duplicated"))]  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
