"""KIP-932 share groups through a partition leader's SIGKILL, kbroker beside Apache Kafka 4.4.

    python -m benchmarks.share_groups [--targets kbroker,kafka] [--records 3000]

On a 3-node cluster (kbroker's of tests/cluster or Apache Kafka 4.4's of benchmarks/apache_kafka.py,
both with their defaults: a new cluster finalizes share.version 2), a topic of 3 partitions,
RF=3, min.insync.replicas=2. Two share consumers of one group: confluent-kafka's ShareConsumer
and Kafka 4.4's KafkaShareConsumer (benchmarks/share_groups_java, run by ``java`` from its
source), each committing its acknowledgements (implicit mode: accept) with a synchronous commit
after every poll. An idempotent acks=all producer writes ``--records`` numbered records round
robin over the partitions. When half are acknowledged, the confluent consumer holds the batch it
just polled unacknowledged, the leader of that batch's partition is SIGKILLed, and the batch is
committed once another node leads the partition. The run ends when every record the producer
had acknowledged was delivered (or after a bound), and the killed node is started again.
tests/cluster/test_share_groups_cluster.py runs the same with a share coordinator as the victim.

Printed per target: records produced, lost (produced and acknowledged, never delivered),
redelivered (deliveries beyond each record's first), acked-then-redelivered (delivered again
after a commit of its acknowledgement had succeeded: what the persisted share-partition state
forbids), unexpected (delivered, never produced), the seconds from the first record produced to
the last one delivered, redeliveries of partitions the killed node did not lead, the held
records (those of the killed leader's partitions must come again: acquisitions are not
persisted), and the delivery counts the clients saw.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6 import request as find_coordinator_v6
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.share_group_describe.v1 import request as describe_v1
from kio.static.primitive import i8

from benchmarks.apache_kafka import KAFKA_VERSION, TOOL_JVM_OPTS, KafkaReferenceCluster, fetch_jars
from broker import wire_client
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.test_share_fetch_wire import set_group_configs

HERE = Path(__file__).resolve().parent
CONSUMER_SOURCE = HERE / "share_groups_java" / "ShareConsume.java"
TARGETS = ("kbroker", "kafka")
KEY_GROUP, KEY_SHARE = 0, 2
CLUSTER_TIMEOUT_S = 120.0
ASSIGN_TIMEOUT_S = 60.0
DELIVERY_TIMEOUT_S = 90.0
CONSUMER_STOP_S = 30.0
QUIET = {"log_level": 0}


Cluster = KafkaCluster | KafkaReferenceCluster


# -- what the cluster says ---------------------------------------------------------------------


def ask(bootstrap: str, body: Any) -> Any:
    """``body``'s answer from the first of ``bootstrap``'s brokers that answers at all."""
    error: OSError | None = None
    for address in bootstrap.split(","):
        try:
            return wire_client.request(address, body)
        except OSError as e:  # a killed node
            error = e
    raise error or OSError("no bootstrap broker")


def topic_metadata(bootstrap: str, topic: str) -> Any:
    answer = ask(
        bootstrap,
        metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    [t] = answer.topics
    return t


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    return {int(p.partition_index): int(p.leader_id) for p in topic_metadata(bootstrap, topic).partitions}


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    tid = topic_metadata(bootstrap, topic).topic_id
    assert tid is not None
    return tid


def create_share_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    new = NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=30, request_timeout=30)[topic].result(timeout=30)

    def replicated() -> bool:
        parts = topic_metadata(bootstrap, topic).partitions
        return len(parts) == partitions and all(len(p.isr_nodes) == 3 and p.leader_id >= 0 for p in parts)

    wait_until(f"{topic} fully replicated", replicated, CLUSTER_TIMEOUT_S)


def coordinator(bootstrap: str, key_type: int, key: str) -> tuple[int, str] | None:
    """(node id, address) of ``key``'s coordinator, or None while the cluster names none."""
    answer = ask(bootstrap, find_coordinator_v6.FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,)))
    [c] = answer.coordinators
    return (int(c.node_id), f"{c.host}:{c.port}") if c.error_code == ErrorCode.none else None


def assigned_members(bootstrap: str, group: str) -> int:
    """How many of the group's members hold a partition, by ShareGroupDescribe at its coordinator."""
    found = coordinator(bootstrap, KEY_GROUP, group)
    if found is None:
        return 0
    answer = wire_client.request(found[1], describe_v1.ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False))
    [g] = answer.groups
    if g.error_code != ErrorCode.none:
        return 0
    return sum(1 for m in g.members if any(t.partitions for t in m.assignment.topic_partitions))


# -- the two consumers -------------------------------------------------------------------------


@dataclass
class Deliveries:
    """What one consumer was delivered and which of those it acknowledged, with when (monotonic)."""

    name: str
    delivered: list[tuple[float, str, int]] = field(default_factory=list)
    acked: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self, value: str, delivery_count: int) -> None:
        with self.lock:
            self.delivered.append((time.monotonic(), value, delivery_count))

    def ack(self, value: str) -> None:
        with self.lock:
            self.acked.setdefault(value, time.monotonic())


class ConfluentShareConsumer:
    """confluent-kafka's ShareConsumer on a thread of its own: poll, then commit_sync the poll.
    ``hold_batch`` stops it between a poll that brought records and that poll's commit: those
    records stay acquired, unacknowledged, until ``resume``."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.deliveries = Deliveries("confluent")
        self._stop = threading.Event()
        self._hold, self._holding, self._resume = threading.Event(), threading.Event(), threading.Event()
        self._held: list[tuple[str, int]] = []
        self._consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"confluent-share-{group}", **QUIET})
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, name="confluent-share", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = [m for m in self._consumer.poll(0.3) if m.error() is None]
                for m in batch:
                    self.deliveries.deliver(m.value().decode(), m.delivery_count() or 0)
                if not batch:
                    continue
                if self._hold.is_set():
                    self._held = [(m.value().decode(), m.partition()) for m in batch]
                    self._holding.set()
                    self._resume.wait(CONSUMER_STOP_S)
                    self._hold.clear()
                results = self._consumer.commit_sync(30)
            except Exception as e:  # a broker dying under the client: it retries on the next poll
                self.deliveries.errors.append(repr(e))
                continue
            ok = {(tp.partition) for tp, error in results.items() if error is None}
            for m in batch:
                if m.partition() in ok:
                    self.deliveries.ack(m.value().decode())

    def hold_batch(self, timeout_s: float) -> list[tuple[str, int]]:
        """(value, partition) of the records of the batch it now holds unacknowledged."""
        self._resume.clear()
        self._hold.set()
        assert self._holding.wait(timeout_s), f"no batch to hold within {timeout_s}s"
        return self._held

    def resume(self) -> None:
        self._holding.clear()
        self._resume.set()

    def close(self) -> None:
        self._stop.set()
        self.resume()
        self._thread.join(CONSUMER_STOP_S)
        self._consumer.close()


class JavaShareConsumer:
    """Kafka 4.4's KafkaShareConsumer in a JVM of its own, read line by line (ShareConsume.java)."""

    def __init__(self, lib: Path, bootstrap: str, topic: str, group: str) -> None:
        self.deliveries = Deliveries("java")
        self._stderr = tempfile.TemporaryFile()
        # Java's source-file mode: compiled in memory at each start, nothing to cache.
        self._proc = subprocess.Popen(
            ["java", *TOOL_JVM_OPTS, "-cp", f"{lib}/*", str(CONSUMER_SOURCE), bootstrap, topic, group],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="java-share", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            kind, *fields = line.rstrip("\n").split(" ")
            if kind == "D":
                self.deliveries.deliver(fields[3], int(fields[2]))
            elif kind == "A":
                self.deliveries.ack(fields[2])

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-3000:].decode(errors="replace")

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(CONSUMER_STOP_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(CONSUMER_STOP_S)
        self._stderr.close()


# -- the producer ------------------------------------------------------------------------------


class NumberedProducer:
    """An idempotent acks=all producer of ``count`` records "<prefix>-<n>" round robin over
    ``partitions``, on a thread; ``at_half`` runs once half of them are acknowledged."""

    def __init__(self, bootstrap: str, topic: str, prefix: str, count: int, partitions: int, at_half: Callable[[], None] | None = None, every_s: float = 0.0) -> None:
        self.sent = [f"{prefix}-{n:06d}" for n in range(count)]
        self.partition_of = {value: n % partitions for n, value in enumerate(self.sent)}
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self._topic, self._partitions, self._every_s = topic, partitions, every_s
        self._at_half = at_half
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **QUIET})
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)
        self.started = time.monotonic()
        self._thread.start()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))
            return
        self.acked.add(message.value().decode())

    def _run(self) -> None:
        half_done = self._at_half is None
        for n, value in enumerate(self.sent):
            self._producer.produce(self._topic, value=value.encode(), partition=n % self._partitions, on_delivery=self._delivered)
            self._producer.poll(0)
            if self._every_s:
                time.sleep(self._every_s)
            if not half_done and len(self.acked) >= len(self.sent) // 2:
                half_done = True
                assert self._at_half is not None
                self._at_half()
        self._producer.flush(DELIVERY_TIMEOUT_S)
        if not half_done and self._at_half is not None:
            self._at_half()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the producer did not finish within {timeout_s}s"


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    target: str
    records: int
    delivered: int
    lost: int
    redelivered: int
    acked_then_redelivered: int
    unexpected: int
    seconds: float
    killed: int | None
    # Redeliveries of records in partitions the killed node did not lead when it died.
    redelivered_elsewhere: int
    # The records held unacknowledged through the kill; of those, the ones the killed node led
    # (available again on the new leader: redelivered) and how many of those were redelivered.
    held: int
    held_on_killed: int
    held_on_killed_redelivered: int
    # Held records of partitions whose leader lived, redelivered: their late acknowledgement failed.
    held_elsewhere_redelivered: int
    # How many deliveries came with each delivery count, as the clients report it.
    delivery_counts: dict[int, int]
    by_consumer: dict[str, int]

    def line(self) -> str:
        return (
            f"{self.target:<12} records {self.records:>6}  lost {self.lost:>4}  redelivered {self.redelivered:>5}  "
            f"acked-then-redelivered {self.acked_then_redelivered:>3}  unexpected {self.unexpected:>3}  seconds {self.seconds:>6.1f}  "
            f"killed node {self.killed} (redelivered elsewhere {self.redelivered_elsewhere})  "
            f"held {self.held} (on the killed leader {self.held_on_killed}, redelivered {self.held_on_killed_redelivered}; elsewhere redelivered {self.held_elsewhere_redelivered})  delivery counts {self.delivery_counts}  per consumer {self.by_consumer}"
        )


def tally(target: str, producer: NumberedProducer, consumers: list[Deliveries], seconds: float, killed: int | None, killed_led: set[int], held: list[tuple[str, int]]) -> Outcome:
    """``killed_led``: the partitions the killed node led when it died; ``held``: the records
    (value, partition) held unacknowledged through the kill."""
    deliveries = sorted((t, v) for c in consumers for t, v, _ in c.delivered)
    acked_at: dict[str, float] = {}
    for c in consumers:
        for v, t in c.acked.items():
            acked_at[v] = min(t, acked_at.get(v, t))
    counts = Counter(v for _, v in deliveries)
    return Outcome(
        target=target,
        records=len(producer.acked),
        delivered=len(counts),
        lost=len(producer.acked - counts.keys()),
        redelivered=sum(n - 1 for n in counts.values()),
        acked_then_redelivered=len({v for t, v in deliveries if v in acked_at and t > acked_at[v]}),
        unexpected=len(counts.keys() - set(producer.sent)),
        seconds=seconds,
        killed=killed,
        redelivered_elsewhere=sum(n - 1 for v, n in counts.items() if producer.partition_of.get(v) not in killed_led),
        held=len(held),
        held_on_killed=sum(1 for _, p in held if p in killed_led),
        held_on_killed_redelivered=sum(1 for v, p in held if p in killed_led and counts[v] > 1),
        held_elsewhere_redelivered=sum(1 for v, p in held if p not in killed_led and counts[v] > 1),
        delivery_counts=dict(sorted(Counter(n for c in consumers for _, _, n in c.delivered).items())),
        by_consumer={c.name: len(c.delivered) for c in consumers},
    )


def wait_assigned(bootstrap: str, group: str, members: int) -> None:
    wait_until(f"{members} members of {group} assigned partitions", lambda: assigned_members(bootstrap, group) >= members or None, ASSIGN_TIMEOUT_S, 0.3)


def leader_of(bootstrap: str, topic: str, group: str, partition: int) -> int | None:
    leader = partition_leaders(bootstrap, topic).get(partition, -1)
    return leader if leader >= 0 else None


def deliver_through_leader_kill(cluster: Cluster, target: str, lib: Path, records: int, tag: str) -> Outcome:
    """The scenario of this module's docstring on ``cluster``; the killed node is running again on return."""
    return deliver_through_kill(cluster, target, lib, records, tag, leader_of)


def deliver_through_kill(
    cluster: Cluster, target: str, lib: Path | None, records: int, tag: str, victim: Callable[[str, str, str, int], int | None], group_for: Callable[[str, str], str] | None = None
) -> Outcome:
    """Two share consumers (the Java one only given Kafka's ``lib``) read ``records`` produced
    records; halfway through, the confluent one holds a polled batch unacknowledged and node
    ``victim(bootstrap, topic, group, partition)`` (for the partition of the batch's first record)
    is SIGKILLed; the batch is acknowledged once the victim's role has moved to another node. The
    killed node is running again on return. ``group_for(bootstrap, topic)`` names the group once
    the topic exists."""
    bootstrap = cluster.bootstrap
    topic = f"share-kill-{tag}"
    create_share_topic(bootstrap, topic)
    group = group_for(bootstrap, topic) if group_for is not None else f"share-kill-g-{tag}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    confluent = ConfluentShareConsumer(bootstrap, topic, group)
    java = JavaShareConsumer(lib, bootstrap, topic, group) if lib is not None else None
    consumers = [confluent.deliveries] + ([java.deliveries] if java is not None else [])
    killed: list[int] = []
    killed_led: set[int] = set()
    held: list[tuple[str, int]] = []
    try:
        wait_assigned(bootstrap, group, len(consumers))

        def kill_victim() -> None:
            held.extend(confluent.hold_batch(DELIVERY_TIMEOUT_S))
            partition = held[0][1]
            node_id = wait_until(f"the victim for partition {partition}", lambda: victim(bootstrap, topic, group, partition), CLUSTER_TIMEOUT_S)
            killed_led.update(p for p, leader in partition_leaders(bootstrap, topic).items() if leader == node_id)
            cluster.nodes[node_id].kill()
            killed.append(node_id)
            wait_until(f"node {node_id}'s role moved", lambda: victim(bootstrap, topic, group, partition) not in (None, node_id), CLUSTER_TIMEOUT_S, 0.2)
            confluent.resume()

        # Paced so the kill lands with records in flight: a second of producing per thousand at least.
        producer = NumberedProducer(bootstrap, topic, f"r-{tag}", records, 3, kill_victim, every_s=0.001)
        producer.join(DELIVERY_TIMEOUT_S + 30)

        def all_delivered() -> bool:
            return producer.acked <= {v for c in consumers for _, v, _ in list(c.delivered)}

        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while not all_delivered() and time.monotonic() < deadline:
            time.sleep(0.2)
        last = max((t for c in consumers for t, _, _ in list(c.delivered)), default=time.monotonic())
        assert not producer.failed, f"the producer failed records: {producer.failed[:5]}"
        return tally(target, producer, consumers, last - producer.started, killed[0] if killed else None, killed_led, held)
    finally:
        if java is not None:
            java.close()
        confluent.close()
        for node_id in killed:
            cluster.nodes[node_id].launch()
            cluster.nodes[node_id].await_started()


def make_cluster(target: str, root: Path, lib: Path) -> Cluster:
    if target == "kafka":
        return KafkaReferenceCluster(root, lib, nodes=3)
    return KafkaCluster(root, combined=3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_groups", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--records", type=int, default=3000)
    args = parser.parse_args(argv)
    lib = fetch_jars()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-share-groups-") as tmp:
        for target in args.targets.split(","):
            cluster = make_cluster(target, Path(tmp) / target, lib)
            try:
                cluster.start()
                outcome = deliver_through_leader_kill(cluster, target if target == "kbroker" else f"kafka {KAFKA_VERSION}", lib, args.records, uuid.uuid4().hex[:8])
                outcomes.append(outcome)
                print(outcome.line(), flush=True)
            finally:
                gc.collect()
                cluster.close()
    print("\nshare group through a partition leader's SIGKILL (3 nodes, 3 partitions RF=3, confluent + Java share consumers)")
    for o in outcomes:
        print(o.line())


if __name__ == "__main__":
    main()
