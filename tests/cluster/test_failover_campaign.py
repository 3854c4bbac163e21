"""The failover campaign of issue #17: three combined nodes, RF=3, min.insync.replicas=2.

- Idempotent acks=all producers of confluent-kafka, kafka-python and aiokafka write to three
  partitions at once while the leader of one of them is killed (SIGKILL) again and again; each
  kill waits for the killed broker to rejoin the ISRs before the next, so at most one replica is
  ever down. Every acknowledged record is read back at its acknowledged offset, once, offsets
  dense. ``FAILOVER_CAMPAIGN_KILLS`` (20) sets the number of kills (``make chaos`` runs 100).
- A consumer group with manual commits consumes through two deaths of its coordinator: the
  committed offsets never go backwards, and every record written is delivered.
- A transactional consume-transform-produce loop runs across the death of its output partition's
  leader, and of its transaction coordinator: read_committed sees each input record's output once.

The campaign's own acknowledgement times give each kill's failover gap (the longest time without
an acknowledgement from any of the three clients around the kill), printed at the end.
"""

from __future__ import annotations

import asyncio
import bisect
import datetime
import json
import os
import statistics
import threading
import time
from typing import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from broker.coordinator.coordinator_runtime import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import FAST_FAILOVER, admin, create, partition_state
from tests.cluster.test_replication_faults import Load, Record, assert_acked_once_at_their_offsets, read_to_end, restart, wait_for_isr
from tests.integration.helpers import unique_topic

TIMEOUT_S = 90.0
API_TIMEOUT_S = 30.0
KILLS = int(os.environ.get("FAILOVER_CAMPAIGN_KILLS", "20"))
# Acknowledgements each client must get after a kill before the next one: proof it recovered.
ACKS_BETWEEN_KILLS = 40
SESSION_MS = 2000
INTERNAL_TOPIC_PARTITIONS = 50
PARTITIONS = 3
ALL = {1, 2, 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("failover-campaign"),
        combined=3,
        overrides={
            **FAST_FAILOVER,
            # A dead broker is fenced, and its partitions move, within two seconds.
            "broker.session.timeout.ms": str(SESSION_MS),
            "broker.heartbeat.interval.ms": "250",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            # Leadership returns to the preferred replicas soon after a restart, so the campaign's
            # kills rotate over the three nodes, the active controller among them.
            "leader.imbalance.check.interval.seconds": "2",
        },
    )
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(autouse=True)
def every_node_running(cluster: KafkaCluster) -> Iterator[None]:
    """A test that fails with a node down leaves it running for the next."""
    yield
    down = [node for node in cluster.nodes.values() if not node.running]
    for node in down:
        node.launch()
    for node in down:
        node.await_started()


# -- the three clients' producers ----------------------------------------------------------------


class ConfluentLoad(Load):
    """test_replication_faults' confluent-kafka producer over every partition (librdkafka's
    partitioner), with the time of each acknowledgement."""

    client = "confluent-kafka"

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, partition=-1)
        self.ack_times: list[float] = []

    def _done(self, err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        super()._done(err, msg)
        if err is None:
            self.ack_times.append(time.monotonic())


class ThreadLoad:
    """An idempotent acks=all producer of another client in a thread, writing ``prefix-N`` to
    partition N mod ``partitions`` about 200 records a second and never far ahead of its
    acknowledgements."""

    client = ""

    def __init__(self, bootstrap: str, topic: str, prefix: bytes, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.prefix = prefix
        self.partitions = partitions
        self.acked: list[Record] = []
        self.ack_times: list[float] = []
        self.errors: list[BaseException] = []
        self.in_flight = 0
        self._sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{self.client}")

    def __enter__(self) -> "ThreadLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.client}'s producer did not finish"

    def _run(self) -> None:
        raise NotImplementedError

    def _next_round(self) -> list[tuple[bytes, int]]:
        """The next 20 (value, partition) to send; none while 500 are unanswered."""
        if self.in_flight >= 500:
            return []
        first = self._sent
        self._sent += 20
        self.in_flight += 20
        return [(b"%s-%d" % (self.prefix, n), n % self.partitions) for n in range(first, first + 20)]

    def _acked(self, partition: int, offset: int, value: bytes) -> None:
        self.in_flight -= 1
        self.acked.append((partition, offset, value))
        self.ack_times.append(time.monotonic())

    def _failed(self, error: BaseException) -> None:
        self.in_flight -= 1
        self.errors.append(error)


class KafkaPythonLoad(ThreadLoad):
    client = "kafka-python"

    def _run(self) -> None:
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=5000,
            delivery_timeout_ms=120000,
        )
        try:
            while not self._stop.is_set():
                for value, partition in self._next_round():
                    future = producer.send(self.topic, value=value, partition=partition)
                    future.add_callback(lambda md, v=value: self._acked(md.partition, md.offset, v))
                    future.add_errback(self._failed)
                time.sleep(0.1)
            producer.flush(TIMEOUT_S)
        finally:
            producer.close(TIMEOUT_S)


class AIOKafkaLoad(ThreadLoad):
    client = "aiokafka"

    def _run(self) -> None:
        asyncio.run(self._produce())

    async def _produce(self) -> None:
        # aiokafka gives a batch up after request_timeout_ms without a leader to take it.
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5, request_timeout_ms=60000)
        await producer.start()
        try:
            while not self._stop.is_set():
                for value, partition in self._next_round():
                    delivery = await producer.send(self.topic, value=value, partition=partition)
                    delivery.add_done_callback(lambda f, v=value: self._delivered(f, v))
                await asyncio.sleep(0.1)
            await asyncio.wait_for(producer.flush(), TIMEOUT_S)
        finally:
            await producer.stop()

    def _delivered(self, delivery: asyncio.Future, value: bytes) -> None:  # type: ignore[type-arg]
        if delivery.exception() is not None:
            self._failed(delivery.exception())  # type: ignore[arg-type]
        else:
            self._acked(delivery.result().partition, delivery.result().offset, value)


def wait_for_acks(loads: list, count: int, what: str) -> None:  # type: ignore[type-arg]
    """Until every load has ``count`` acknowledgements more than now."""
    targets = [len(load.acked) + count for load in loads]

    def behind() -> str:
        return ", ".join(f"{load.client}: {len(load.acked)}/{t} (errors {load.errors[-2:]})" for load, t in zip(loads, targets))

    wait_until(f"{count} more acknowledgements from every client {what} [{behind()}]", lambda: all(len(load.acked) >= t for load, t in zip(loads, targets)) or None, TIMEOUT_S)


def failover_gaps(kills: list[tuple[float, float]], ack_times: list[float]) -> list[float]:
    """For each kill, given as (killed at, new leader seen at), the longest time without an
    acknowledgement from the last one before the kill to the first one after the new leader was
    seen. Answers already on their way when the leader died may still arrive after the kill."""
    times = sorted(ack_times)
    gaps = []
    for killed_at, replaced_at in kills:
        window = times[max(bisect.bisect_left(times, killed_at) - 1, 0) : bisect.bisect_left(times, replaced_at) + 1]
        gaps.append(max(b - a for a, b in zip(window, window[1:])))
    return gaps


def active_controllers(cluster: KafkaCluster, at: list[float]) -> list[int]:
    """The active controller at each wall-clock time of ``at``: the node that logged the latest
    controller.activated before it. (Asking the quorum at each kill costs a process start.)"""
    activations: list[tuple[float, int]] = []
    for node in cluster.nodes.values():
        for line in node.log_path.read_text(errors="replace").splitlines():
            if '"controller.activated"' in line:
                stamp = json.loads(line)["timestamp"]
                activations.append((datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp(), node.node_id))
    activations.sort()
    return [activations[bisect.bisect_left(activations, (t,)) - 1][1] for t in at]


def summary(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    return f"{len(seconds)} kills, median {statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms"


# -- 1. the leader killed under three clients' producers -----------------------------------------


def preferred_leaders(bootstrap: str, name: str) -> list[int]:
    topic = admin(bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name]
    return [topic.partitions[p].replicas[0] for p in sorted(topic.partitions)]


@pytest.mark.timeout(60 + 15 * KILLS)
def test_killing_the_leader_again_and_again_under_three_clients_loses_and_duplicates_nothing(cluster: KafkaCluster) -> None:
    name = unique_topic("campaign")
    create(cluster.bootstrap, name, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        wait_for_isr(cluster, name, ALL, p)
    preferred = preferred_leaders(cluster.bootstrap, name)
    kills: list[tuple[float, float]] = []  # (killed at, new leader seen at)
    leaders: list[int] = []
    killed_at_wall: list[float] = []
    started = time.monotonic()
    with (
        ConfluentLoad(cluster.bootstrap, name) as confluent,
        KafkaPythonLoad(cluster.bootstrap, name, b"kafka-python", PARTITIONS) as kafka_python,
        AIOKafkaLoad(cluster.bootstrap, name, b"aiokafka", PARTITIONS) as aio,
    ):
        loads = [confluent, kafka_python, aio]
        for kill in range(1, KILLS + 1):
            # Every partition led by its preferred replica: partition (kill mod 3)'s leader is a
            # different node each time.
            wait_until("the preferred leaders back", lambda: [partition_state(cluster.bootstrap, name, p)[0] for p in range(PARTITIONS)] == preferred or None, TIMEOUT_S)
            wait_for_acks(loads, ACKS_BETWEEN_KILLS, f"before kill {kill}")
            partition = kill % PARTITIONS
            leader, _ = partition_state(cluster.bootstrap, name, partition)
            leaders.append(leader)
            killed_at_wall.append(time.time())
            killed_at = time.monotonic()
            cluster.nodes[leader].kill()
            wait_until(f"a new leader after kill {kill}", lambda: partition_state(cluster.bootstrap, name, partition)[0] not in (leader, -1) or None, TIMEOUT_S)
            kills.append((killed_at, time.monotonic()))
            restart(cluster, leader)
            for p in range(PARTITIONS):
                wait_for_isr(cluster, name, ALL, p)
        wait_for_acks(loads, ACKS_BETWEEN_KILLS, "after the last kill")
    elapsed = time.monotonic() - started
    acked = [record for load in loads for record in load.acked]
    for isolation in ("read_uncommitted", "read_committed"):
        records, ends = read_to_end(cluster.bootstrap, name, list(range(PARTITIONS)), isolation)
        assert_acked_once_at_their_offsets(records, acked)
    gaps = failover_gaps(kills, [t for load in loads for t in load.ack_times])
    controllers = active_controllers(cluster, killed_at_wall)
    elections = [replaced - killed for killed, replaced in kills]
    worst = {load.client: max(failover_gaps(kills, load.ack_times)) for load in loads}
    print(
        f"\n{KILLS} leader kills in {elapsed:.0f}s (leaders {leaders}, active controllers {controllers}): "
        + ", ".join(f"{load.client} {len(load.acked)} acknowledged, {len(load.errors)} failed" for load in loads)
        + f"; {sum(ends.values())} records in the log"
        + f"\nfailover gap (broker.session.timeout.ms={SESSION_MS}) per kill: {[round(g * 1000) for g in gaps]}"
        + f"\n  the leader alone: {summary([g for g, l, c in zip(gaps, leaders, controllers) if l != c])}"
        + f"\n  the leader and active controller: {summary([g for g, l, c in zip(gaps, leaders, controllers) if l == c])}"
        + f"\nkill to new leader in Metadata: {summary(elections)}"
        + "; longest gap per client: " + ", ".join(f"{client} {gap * 1000:.0f} ms" for client, gap in worst.items())
    )


# -- 2. a consumer group through its coordinator's death ------------------------------------------


class CommittedOffsets:
    """What a group's coordinator answers for its committed offsets, asked again and again; each
    answer must be at least the one before."""

    def __init__(self, bootstrap: str, group: str, partitions: list[TopicPartition]) -> None:
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        self._partitions = partitions
        self.latest = {tp.partition: -1 for tp in partitions}
        self.answers = 0
        self.regressions: list[tuple[int, int, int]] = []  # (partition, from, to)

    def check(self) -> None:
        try:
            answered = self._consumer.committed(self._partitions, timeout=5)
        except KafkaException:
            return  # no coordinator this moment
        for tp in answered:
            if tp.error is None and tp.offset >= 0:
                if tp.offset < self.latest[tp.partition]:
                    self.regressions.append((tp.partition, self.latest[tp.partition], tp.offset))
                self.latest[tp.partition] = tp.offset
        self.answers += 1

    def close(self) -> None:
        self._consumer.close()


def test_a_consumer_group_with_manual_commits_consumes_through_its_coordinators_death(cluster: KafkaCluster) -> None:
    name, group = unique_topic("group-input"), unique_topic("group")
    create(cluster.bootstrap, name, partitions=2)
    for p in range(2):
        wait_for_isr(cluster, name, ALL, p)
    partitions = [TopicPartition(name, p) for p in range(2)]
    config = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000}
    members = [Consumer(config), Consumer(config)]
    for member in members:
        member.subscribe([name])
    delivered: list[Record] = []
    commits = {"done": 0, "failed": 0}
    observer = CommittedOffsets(cluster.bootstrap, group, partitions)

    def consume_and_commit() -> None:
        for member in members:
            messages = [m for m in member.consume(200, 0.2) if m.error() is None]
            delivered.extend((m.partition(), m.offset(), m.value()) for m in messages)
            if messages:
                try:
                    member.commit(asynchronous=False)
                    commits["done"] += 1
                except KafkaException:
                    commits["failed"] += 1  # no coordinator, or a rebalance: the next commit covers it
        observer.check()

    def consume_until(what: str, condition) -> None:  # type: ignore[no-untyped-def]
        wait_until(what, lambda: consume_and_commit() or condition() or None, TIMEOUT_S, interval_s=0)

    coordinator_partition = partition_for(group, INTERNAL_TOPIC_PARTITIONS)
    try:
        with Load(cluster.bootstrap, name, 0) as first, Load(cluster.bootstrap, name, 1) as second:
            consume_until("the group consuming", lambda: len(delivered) >= 200 and commits["done"] >= 5)
            for kill in range(1, 3):
                coordinator, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, coordinator_partition)
                cluster.nodes[coordinator].kill()
                count, done = len(delivered), commits["done"]
                consume_until(f"the group consuming and committing after coordinator kill {kill}", lambda: len(delivered) >= count + 200 and commits["done"] >= done + 5)
                restart(cluster, coordinator)
                wait_for_isr(cluster, GROUP_METADATA_TOPIC, ALL, coordinator_partition)
                wait_for_isr(cluster, name, ALL, 0)
                wait_for_isr(cluster, name, ALL, 1)
        acked = first.acked + second.acked
        _, ends = read_to_end(cluster.bootstrap, name, [0, 1])
        written = {(p, o) for p in ends for o in range(ends[p])}
        consume_until("every record delivered", lambda: written <= {(p, o) for p, o, _ in delivered})
        consume_until("the last positions committed", lambda: observer.latest == ends)
    finally:
        for member in members:
            member.close()
        observer.close()
    assert not observer.regressions, f"committed offsets went back (partition, from, to): {observer.regressions}"
    missing = set(acked) - set(delivered)
    assert not missing, f"{len(missing)} acknowledged records never delivered, e.g. {sorted(missing)[:5]}"
    redelivered = len(delivered) - len(set(delivered))
    print(f"\n{len(acked)} records acknowledged, {len(delivered)} deliveries ({redelivered} again after a failover), {commits} commits, {observer.answers} committed-offset reads")


# -- 3. consume-transform-produce in transactions across a leader's death -------------------------


class TransformLoop:
    """Reads ``source`` with read_committed in group ``group`` and writes ``out-<value>`` for each
    record to ``sink`` in transactions that also commit the consumer's offsets, in a thread, until
    told where the input ends. An aborted or fenced transaction rewinds the consumer to the offsets
    the group committed, as an application must."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
        self.bootstrap, self.source, self.sink, self.transactional_id = bootstrap, source, sink, transactional_id
        self.committed = 0
        self.outcomes: dict[str, int] = {"aborted": 0, "fenced": 0, "commit retried": 0}
        self.end: int | None = None
        self.failure: BaseException | None = None
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self._consumer.subscribe([source])
        self._producer = self._new_producer()
        self._thread = threading.Thread(target=self._run, name="transform")

    def _new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id, "linger.ms": 5})
        producer.init_transactions(API_TIMEOUT_S)
        return producer

    def __enter__(self) -> "TransformLoop":
        self._thread.start()
        return self

    def finish(self, end: int) -> None:
        """Process the input up to offset ``end``, then stop."""
        self.end = end
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"the loop did not reach offset {end} ({self.committed} transactions, {self.outcomes})"
        if self.failure is not None:
            raise self.failure

    def __exit__(self, *exc: object) -> None:
        if self.end is None:
            self.end = -1
        self._thread.join(TIMEOUT_S)
        self._consumer.close()

    def _position(self) -> int:
        [tp] = self._consumer.position([TopicPartition(self.source, 0)])
        return int(tp.offset)

    def _run(self) -> None:
        try:
            while self.end is None or (self.end >= 0 and self._position() < self.end):
                messages = [m for m in self._consumer.consume(50, 0.2) if m.error() is None]
                if messages:
                    self._transform(messages)
        except BaseException as e:
            self.failure = e

    def _transform(self, messages: list) -> None:  # type: ignore[type-arg]
        try:
            self._producer.begin_transaction()
            for m in messages:
                self._producer.produce(self.sink, value=b"out-" + m.value(), partition=0)
            positions = self._consumer.position(self._consumer.assignment())
            self._producer.send_offsets_to_transaction(positions, self._consumer.consumer_group_metadata(), API_TIMEOUT_S)
            self._commit()
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.fatal():
                self.outcomes["fenced"] += 1
                self._producer = self._new_producer()
            elif error.txn_requires_abort():
                self.outcomes["aborted"] += 1
                self._producer.abort_transaction(API_TIMEOUT_S)
            else:
                raise
            self._rewind()

    def _commit(self) -> None:
        deadline = time.monotonic() + API_TIMEOUT_S
        while True:
            try:
                self._producer.commit_transaction(API_TIMEOUT_S)
                self.committed += 1
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                self.outcomes["commit retried"] += 1

    def _rewind(self) -> None:
        committed = self._consumer.committed(self._consumer.assignment(), timeout=API_TIMEOUT_S)
        for tp in committed:
            self._consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


@pytest.mark.parametrize("victim", ["output partition leader", "transaction coordinator"])
def test_a_transactional_consume_transform_produce_loop_outputs_each_input_once_across_a_kill(cluster: KafkaCluster, victim: str) -> None:
    source, sink = unique_topic("ctp-in"), unique_topic("ctp-out")
    group, transactional_id = unique_topic("ctp"), unique_topic("ctp-txn")
    for topic in (source, sink):
        create(cluster.bootstrap, topic)
        wait_for_isr(cluster, topic, ALL)
    with TransformLoop(cluster.bootstrap, source, sink, group, transactional_id) as loop:
        with Load(cluster.bootstrap, source) as feed:
            wait_until("transactions committed", lambda: loop.committed >= 10 or loop.failure, TIMEOUT_S)
            if victim == "output partition leader":
                target = (sink, 0)
            else:
                target = (TRANSACTION_STATE_TOPIC, partition_for(transactional_id, INTERNAL_TOPIC_PARTITIONS))
            killed, _ = partition_state(cluster.bootstrap, *target)
            cluster.nodes[killed].kill()
            count = loop.committed
            wait_until(f"transactions committed after the {victim} was killed ({loop.outcomes})", lambda: loop.committed >= count + 10 or loop.failure, TIMEOUT_S)
            restart(cluster, killed)
            wait_for_isr(cluster, target[0], ALL, target[1])
            feed.wait_for_more(100, "after the restart")
        inputs, ends = read_to_end(cluster.bootstrap, source, [0])
        loop.finish(ends[0])
    outputs, _ = read_to_end(cluster.bootstrap, sink, [0], "read_committed")
    produced = [v for _, _, v in outputs]
    expected = [b"out-" + v for _, _, v in inputs]
    assert not set(expected) - set(produced), f"{len(set(expected) - set(produced))} inputs without output"
    assert len(produced) == len(set(produced)), f"{len(produced) - len(set(produced))} outputs seen twice by read_committed"
    assert set(produced) == set(expected)
    print(f"\n{victim} killed: {len(inputs)} inputs, {loop.committed} transactions committed, {loop.outcomes}")
