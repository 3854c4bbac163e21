"""The failover campaign of issue #17: three combined nodes, RF=3, min.insync.replicas=2.

- Idempotent acks=all producers of confluent-kafka, kafka-python and aiokafka write to three
  partitions at once while the leader of one of them is killed (SIGKILL) again and again; each
  kill waits for the killed broker to rejoin the ISRs before the next, so at most one replica is
  ever down. Every acknowledged record is read back at its acknowledged offset, once, offsets
  dense. ``FAILOVER_CAMPAIGN_KILLS`` (20) sets the number of kills (``make chaos`` runs 100).

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
from confluent_kafka import KafkaError
from kafka import KafkaProducer

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import FAST_FAILOVER, admin, create, partition_state
from tests.cluster.test_replication_faults import Load, Record, assert_acked_once_at_their_offsets, read_to_end, restart, wait_for_isr
from tests.integration.helpers import unique_topic

TIMEOUT_S = 90.0
KILLS = int(os.environ.get("FAILOVER_CAMPAIGN_KILLS", "20"))
# Acknowledgements each client must get after a kill before the next one: proof it recovered.
ACKS_BETWEEN_KILLS = 40
SESSION_MS = 2000
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
