"""KIP-932 share groups through a partition leader's SIGKILL, kbroker beside Apache Kafka 4.4.

    python -m benchmarks.share_groups [--targets kbroker,kafka] [--records 3000] [--isolation read_committed]

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

``--isolation read_committed`` sets the group's share.isolation.level and writes the records with
a transactional producer instead, in transactions of 30 (10 a partition), every third aborted,
each held open a moment after its records are acknowledged. In the middle transaction, open with
its records in every replica's log, the leader of partition 0 is SIGKILLed; once another node
leads it the killed node is started again and the transaction committed (aborted if the producer
must). Printed per target: records of committed transactions, lost (never delivered), records of
aborted transactions and how many were delivered, records delivered before their transaction's
commit was asked for (read past the last stable offset), redelivered, unexpected, and the seconds
from the first transaction to the last record delivered. tests/cluster/test_share_groups_cluster.py
runs it on kbroker with 30 transactions.
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_share_group_offsets.v0 import request as offsets_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6 import request as find_coordinator_v6
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.share_group_describe.v1 import request as describe_v1
from kio.static.primitive import i8, i32

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
START_OFFSETS_TIMEOUT_S = 3.0
QUIET = {"log_level": 0}
# Records per transaction of the read_committed scenario: 10 in each partition.
TRANSACTION_SIZE = 30


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


def start_offsets(bootstrap: str, group: str, topic: str, partitions: int = 3) -> dict[int, int] | None:
    """DescribeShareGroupOffsets at the group's coordinator; None while an answer carries an error."""
    found = coordinator(bootstrap, KEY_GROUP, group)
    if found is None:
        return None
    asked = offsets_v0.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=tuple(i32(p) for p in range(partitions)))
    answer = wire_client.request(found[1], offsets_v0.DescribeShareGroupOffsetsRequest(groups=(offsets_v0.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(asked,)),)))
    [g] = answer.groups
    if g.error_code != ErrorCode.none or not g.topics:
        return None
    [t] = g.topics
    if any(p.error_code != ErrorCode.none for p in t.partitions):
        return None
    return {int(p.partition_index): int(p.start_offset) for p in t.partitions}


def high_watermarks(bootstrap: str, topic: str, partitions: int = 3) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{uuid.uuid4().hex[:8]}", **QUIET})
    try:
        return {p: int(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]) for p in range(partitions)}
    finally:
        probe.close()


def start_offsets_short_of_log_end(bootstrap: str, group: str, topic: str, timeout_s: float) -> int:
    """How many offsets the group's start offsets stay short of the high watermarks, summed over
    the partitions, once they reach them or after ``timeout_s``: records, markers included,
    never acknowledged or archived."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends = high_watermarks(bootstrap, topic)
        offsets = start_offsets(bootstrap, group, topic) or {}
        short = sum(end - max(offsets.get(p, 0), 0) for p, end in ends.items())
        if short == 0 or time.monotonic() > deadline:
            return short
        time.sleep(0.5)


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
class ClientCounts:
    """What the clients saw: how many deliveries came with each delivery count, and how many
    each consumer had."""

    delivery_counts: dict[int, int]
    by_consumer: dict[str, int]

    @classmethod
    def of(cls, consumers: list[Deliveries]) -> "ClientCounts":
        counts = Counter(n for c in consumers for _, _, n in c.delivered)
        return cls(dict(sorted(counts.items())), {c.name: len(c.delivered) for c in consumers})

    def __str__(self) -> str:
        return f"delivery counts {self.delivery_counts}  per consumer {self.by_consumer}"


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
    clients: ClientCounts

    def line(self) -> str:
        return (
            f"{self.target:<12} records {self.records:>6}  lost {self.lost:>4}  redelivered {self.redelivered:>5}  "
            f"acked-then-redelivered {self.acked_then_redelivered:>3}  unexpected {self.unexpected:>3}  seconds {self.seconds:>6.1f}  "
            f"killed node {self.killed} (redelivered elsewhere {self.redelivered_elsewhere})  "
            f"held {self.held} (on the killed leader {self.held_on_killed}, redelivered {self.held_on_killed_redelivered}; elsewhere redelivered {self.held_elsewhere_redelivered})  {self.clients}"
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
        clients=ClientCounts.of(consumers),
    )


def wait_assigned(bootstrap: str, group: str, members: int) -> None:
    wait_until(f"{members} members of {group} assigned partitions", lambda: assigned_members(bootstrap, group) >= members or None, ASSIGN_TIMEOUT_S, 0.3)


def leader_of(bootstrap: str, topic: str, group: str, partition: int) -> int | None:
    leader = partition_leaders(bootstrap, topic).get(partition, -1)
    return leader if leader >= 0 else None


def deliver_through_leader_kill(cluster: Cluster, target: str, lib: Path, records: int, tag: str) -> Outcome:
    """The scenario of this module's docstring on ``cluster``; the killed node is running again on return."""
    return deliver_through_kill(cluster, target, lib, records, tag, leader_of)


@dataclass
class ShareGroupRun:
    """A share group read by the two consumers on a fresh topic; ``killed`` the nodes killed
    during the run, each running again when the run ends."""

    bootstrap: str
    topic: str
    group: str
    confluent: ConfluentShareConsumer
    java: JavaShareConsumer | None
    killed: list[int] = field(default_factory=list)

    @property
    def consumers(self) -> list[Deliveries]:
        return [self.confluent.deliveries] + ([self.java.deliveries] if self.java is not None else [])

    def delivered_values(self) -> set[str]:
        return {v for c in self.consumers for _, v, _ in list(c.delivered)}

    def await_delivered(self, wanted: set[str], timeout_s: float) -> float:
        """Wait (bounded) until every one of ``wanted`` was delivered; the time (monotonic) of
        the last delivery."""
        deadline = time.monotonic() + timeout_s
        while not wanted <= self.delivered_values() and time.monotonic() < deadline:
            time.sleep(0.2)
        return max((t for c in self.consumers for t, _, _ in list(c.delivered)), default=time.monotonic())


@contextmanager
def share_group_run(
    cluster: Cluster, lib: Path | None, tag: str, group_configs: dict[str, str] | None = None, group_for: Callable[[str, str], str] | None = None
) -> Iterator[ShareGroupRun]:
    """A topic of 3 partitions RF=3 min.insync.replicas=2 and a share group (reset earliest, plus
    ``group_configs``) read by the confluent consumer and, given Kafka's ``lib``, the Java one,
    both assigned; ``group_for(bootstrap, topic)`` names the group once the topic exists. On
    exit the consumers close and every node the run killed is running again."""
    bootstrap = cluster.bootstrap
    topic = f"share-kill-{tag}"
    create_share_topic(bootstrap, topic)
    group = group_for(bootstrap, topic) if group_for is not None else f"share-kill-g-{tag}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", **(group_configs or {})})
    confluent = ConfluentShareConsumer(bootstrap, topic, group)
    run = ShareGroupRun(bootstrap, topic, group, confluent, JavaShareConsumer(lib, bootstrap, topic, group) if lib is not None else None)
    try:
        wait_assigned(bootstrap, group, len(run.consumers))
        yield run
    finally:
        if run.java is not None:
            run.java.close()
        confluent.close()
        for node_id in run.killed:
            node = cluster.nodes[node_id]
            if not node.running:
                node.launch()
            node.await_started()


def deliver_through_kill(
    cluster: Cluster, target: str, lib: Path | None, records: int, tag: str, victim: Callable[[str, str, str, int], int | None], group_for: Callable[[str, str], str] | None = None
) -> Outcome:
    """Two share consumers (the Java one only given Kafka's ``lib``) read ``records`` produced
    records; halfway through, the confluent one holds a polled batch unacknowledged and node
    ``victim(bootstrap, topic, group, partition)`` (for the partition of the batch's first record)
    is SIGKILLed; the batch is acknowledged once the victim's role has moved to another node. The
    killed node is running again on return. ``group_for(bootstrap, topic)`` names the group once
    the topic exists."""
    with share_group_run(cluster, lib, tag, group_for=group_for) as run:
        bootstrap, topic, group = run.bootstrap, run.topic, run.group
        killed_led: set[int] = set()
        held: list[tuple[str, int]] = []

        def kill_victim() -> None:
            held.extend(run.confluent.hold_batch(DELIVERY_TIMEOUT_S))
            partition = held[0][1]
            node_id = wait_until(f"the victim for partition {partition}", lambda: victim(bootstrap, topic, group, partition), CLUSTER_TIMEOUT_S)
            killed_led.update(p for p, leader in partition_leaders(bootstrap, topic).items() if leader == node_id)
            cluster.nodes[node_id].kill()
            run.killed.append(node_id)
            wait_until(f"node {node_id}'s role moved", lambda: victim(bootstrap, topic, group, partition) not in (None, node_id), CLUSTER_TIMEOUT_S, 0.2)
            run.confluent.resume()

        # Paced so the kill lands with records in flight: a second of producing per thousand at least.
        producer = NumberedProducer(bootstrap, topic, f"r-{tag}", records, 3, kill_victim, every_s=0.001)
        producer.join(DELIVERY_TIMEOUT_S + 30)
        last = run.await_delivered(producer.acked, DELIVERY_TIMEOUT_S)
        assert not producer.failed, f"the producer failed records: {producer.failed[:5]}"
        return tally(target, producer, run.consumers, last - producer.started, run.killed[0] if run.killed else None, killed_led, held)


# -- read_committed through a leader kill with a transaction open ------------------------------


@dataclass
class Transaction:
    values: list[str]
    # When commit_transaction was called (monotonic): no record of it may be delivered before.
    commit_started: float | None = None
    # "committed", "aborted" (asked for, or the producer had to), or None while open.
    fate: str | None = None


class TransactionalProducer:
    """A transactional producer (acks=all, as transactions require) of ``transactions``
    transactions of ``size`` numbered records "<prefix>-<t>-<n>" round robin over ``partitions``,
    on a thread. Every third transaction is aborted (never the last); each is held open
    ``open_s`` after its records are acknowledged, so a reader past the last stable offset would
    see them. ``at_open`` runs once, in the middle transaction, with its records in the log and
    the transaction open; that transaction is then committed."""

    def __init__(
        self, bootstrap: str, topic: str, prefix: str, transactions: int, size: int, partitions: int, at_open: Callable[[], None], open_s: float = 0.05
    ) -> None:
        self.transactions = [Transaction([f"{prefix}-{t:04d}-{n:04d}" for n in range(size)]) for t in range(transactions)]
        self.open_through_kill = transactions // 2
        self.errors: list[str] = []
        self._topic, self._partitions, self._open_s, self._at_open = topic, partitions, open_s, at_open
        self._producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-txn", "linger.ms": 5, **QUIET})
        self._producer.init_transactions(CLUSTER_TIMEOUT_S)
        self._thread = threading.Thread(target=self._run, name="transactional-producer", daemon=True)
        self.started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        last = len(self.transactions) - 1
        for t, txn in enumerate(self.transactions):
            self._producer.begin_transaction()
            for n, value in enumerate(txn.values):
                self._producer.produce(self._topic, value=value.encode(), partition=n % self._partitions)
            self._producer.flush(DELIVERY_TIMEOUT_S)
            time.sleep(self._open_s)
            if t == self.open_through_kill:
                self._at_open()
            txn.fate = self._end(txn, commit=t % 3 != 1 or t in (last, self.open_through_kill))

    def _end(self, txn: Transaction, commit: bool) -> str:
        """Commit or abort as an application would through a failover: retry a retriable error,
        abort on one that requires it (a record the failover failed)."""
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while True:
            try:
                if not commit:
                    self._producer.abort_transaction(DELIVERY_TIMEOUT_S)
                    return "aborted"
                txn.commit_started = txn.commit_started or time.monotonic()
                self._producer.commit_transaction(DELIVERY_TIMEOUT_S)
                return "committed"
            except KafkaException as e:
                error = e.args[0]
                self.errors.append(str(error))
                if error.txn_requires_abort():
                    commit = False
                elif not error.retriable() or time.monotonic() > deadline:
                    raise

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the transactional producer did not finish within {timeout_s}s"

    def values(self, fate: str) -> set[str]:
        return {v for txn in self.transactions if txn.fate == fate for v in txn.values}


@dataclass
class TransactionalOutcome:
    target: str
    committed: int
    aborted: int
    lost: int
    aborted_delivered: int
    # Delivered before commit_transaction was called: past the last stable offset.
    delivered_early: int
    redelivered: int
    unexpected: int
    seconds: float
    killed: int | None
    # Seconds from the kill to another node leading partition 0.
    failover_seconds: float
    # The fate of the transaction open through the kill, and the producer's errors.
    open_through_kill: str | None
    # The group's start offsets short of the log end once every committed record was delivered.
    start_offsets_short: int
    producer_errors: list[str]
    clients: ClientCounts

    def line(self) -> str:
        return (
            f"{self.target:<12} committed records {self.committed:>6}  lost {self.lost:>4}  aborted records {self.aborted:>5}  "
            f"aborted delivered {self.aborted_delivered:>3}  delivered before commit {self.delivered_early:>3}  redelivered {self.redelivered:>4}  "
            f"unexpected {self.unexpected:>3}  seconds {self.seconds:>6.1f}  killed node {self.killed} (failover {self.failover_seconds:.1f} s, open transaction {self.open_through_kill})  "
            f"start offsets short of the log end {self.start_offsets_short}  "
            f"producer errors {len(self.producer_errors)}  {self.clients}"
        )


def tally_transactions(
    target: str, producer: TransactionalProducer, consumers: list[Deliveries], seconds: float, killed: int | None, failover_seconds: float, start_offsets_short: int
) -> TransactionalOutcome:
    committed, aborted = producer.values("committed"), producer.values("aborted")
    commit_started = {v: txn.commit_started for txn in producer.transactions for v in txn.values}
    deliveries = [(t, v) for c in consumers for t, v, _ in c.delivered]
    counts = Counter(v for _, v in deliveries)
    return TransactionalOutcome(
        target=target,
        committed=len(committed),
        aborted=len(aborted),
        lost=len(committed - counts.keys()),
        aborted_delivered=len(aborted & counts.keys()),
        delivered_early=len({v for t, v in deliveries if v in committed and t < (commit_started[v] or 0.0)}),
        redelivered=sum(n - 1 for n in counts.values()),
        unexpected=len(counts.keys() - commit_started.keys()),
        seconds=seconds,
        killed=killed,
        failover_seconds=failover_seconds,
        open_through_kill=producer.transactions[producer.open_through_kill].fate,
        start_offsets_short=start_offsets_short,
        producer_errors=producer.errors,
        clients=ClientCounts.of(consumers),
    )


def read_committed_through_leader_kill(cluster: Cluster, target: str, lib: Path | None, transactions: int, size: int, tag: str) -> TransactionalOutcome:
    """The share group, with share.isolation.level=read_committed, reads ``transactions``
    transactions of ``size`` records; in the middle one, open with its records in the log, the
    leader of partition 0 is SIGKILLed, and started again once another node leads it. The run
    ends when every committed record was delivered (or after a bound)."""
    with share_group_run(cluster, lib, tag, {"share.isolation.level": "read_committed"}) as run:
        failover: list[float] = []

        def kill_leader() -> None:
            node_id = wait_until("the leader of partition 0", lambda: leader_of(run.bootstrap, run.topic, run.group, 0), CLUSTER_TIMEOUT_S)
            killed_at = time.monotonic()
            cluster.nodes[node_id].kill()
            run.killed.append(node_id)
            wait_until(f"partition 0 led by another node than {node_id}", lambda: leader_of(run.bootstrap, run.topic, run.group, 0) not in (None, node_id), CLUSTER_TIMEOUT_S, 0.2)
            failover.append(time.monotonic() - killed_at)
            cluster.nodes[node_id].launch()

        producer = TransactionalProducer(run.bootstrap, run.topic, f"t-{tag}", transactions, size, 3, kill_leader)
        producer.join(DELIVERY_TIMEOUT_S + CLUSTER_TIMEOUT_S)
        last = run.await_delivered(producer.values("committed"), DELIVERY_TIMEOUT_S)
        short = start_offsets_short_of_log_end(run.bootstrap, run.group, run.topic, START_OFFSETS_TIMEOUT_S)
        killed = run.killed[0] if run.killed else None
        return tally_transactions(target, producer, run.consumers, last - producer.started, killed, failover[0] if failover else 0.0, short)


def make_cluster(target: str, root: Path, lib: Path) -> Cluster:
    if target == "kafka":
        return KafkaReferenceCluster(root, lib, nodes=3)
    return KafkaCluster(root, combined=3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_groups", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    args = parser.parse_args(argv)
    lib = fetch_jars()
    outcomes: list[Outcome | TransactionalOutcome] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-share-groups-") as tmp:
        for target in args.targets.split(","):
            cluster = make_cluster(target, Path(tmp) / target, lib)
            name = target if target == "kbroker" else f"kafka {KAFKA_VERSION}"
            try:
                cluster.start()
                tag = uuid.uuid4().hex[:8]
                outcome: Outcome | TransactionalOutcome
                if args.isolation == "read_committed":
                    outcome = read_committed_through_leader_kill(cluster, name, lib, args.records // TRANSACTION_SIZE, TRANSACTION_SIZE, tag)
                else:
                    outcome = deliver_through_leader_kill(cluster, name, lib, args.records, tag)
                outcomes.append(outcome)
                print(outcome.line(), flush=True)
            finally:
                gc.collect()
                cluster.close()
    if args.isolation == "read_committed":
        print(f"\nread_committed share group through a partition leader's SIGKILL with a transaction open (3 nodes, 3 partitions RF=3, transactions of {TRANSACTION_SIZE}, confluent + Java share consumers)")
    else:
        print("\nshare group through a partition leader's SIGKILL (3 nodes, 3 partitions RF=3, confluent + Java share consumers)")
    for o in outcomes:
        print(o.line())


if __name__ == "__main__":
    main()
