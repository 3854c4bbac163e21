"""Replication across an Apache Kafka 4.4 broker and kbroker brokers under Kafka's controller
(issue 36, M2): RF=3 partitions whose replicas are both kinds, some led by each; acks=all records
survive the SIGKILL of a leader of each kind, in turn, with nothing lost and nothing duplicated;
every ISR is whole again after each restart (kbroker leaders send AlterPartition to Kafka's
controller to take the returning Kafka broker back, and the reverse); a consumer group committed
through one kind's coordinator resumes on the other kind's coordinator from those offsets.

benchmarks/mixed_cluster.py runs the longer campaign (two brokers of each kind, Kafka's
VerifiableProducer and VerifiableConsumer, transactions with their coordinator on either kind).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kio.schema.alter_partition_reassignments.v0.request import AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from benchmarks.mixed_cluster import GROUP_KEY, QUIET, MixedCluster, end_offsets, read_log
from benchmarks.transactions import find_coordinator
from broker.wire_client import request
from tests.cluster.cluster import wait_until

TIMEOUT_S = 30.0
KAFKA, KBROKER, OTHER_KBROKER = 2, 11, 12
# Kafka leads partition 0, kbroker 1 and 2; every partition has all three brokers.
ASSIGNMENT = [[KAFKA, KBROKER, OTHER_KBROKER], [KBROKER, KAFKA, OTHER_KBROKER], [OTHER_KBROKER, KAFKA, KBROKER]]
PARTITIONS = len(ASSIGNMENT)
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[MixedCluster]:
    cluster = MixedCluster(tmp_path_factory.mktemp("mixed"), kafka_lib, controllers=1, kafka_brokers=1, kbroker_brokers=2)
    try:
        yield cluster.start()
    finally:
        cluster.close()


class Producing:
    """An acks=all idempotent producer sending increasing integers in a thread; what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[int] = []
        self.failed: Counter = Counter()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000, **QUIET})
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        def done(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                self.acked.append(int(msg.value()))
            else:
                self.failed[err.name()] += 1

        n = 0
        while not self._stop.is_set():
            self._producer.produce(topic, key=b"%d" % (n % 97), value=b"%d" % n, on_delivery=done)
            self._producer.poll(0.005)
            n += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert self._producer.flush(2 * TIMEOUT_S) == 0


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka's GroupCoordinator.partitionFor: Utils.abs(groupId.hashCode) % partitions (ASCII ids)."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def group_moving_to(mixed: MixedCluster, coordinator: int, successor: int) -> str:
    """A group coordinated by ``coordinator`` whose __consumer_offsets partition goes to
    ``successor`` when ``coordinator`` dies: Kafka's controller elects the first live ISR member in
    replica order, so the partition's replicas are reordered (same set, nothing moves) if need be."""
    placement = mixed.placement(OFFSETS_TOPIC)
    group = next(g for i in range(400) if placement[offsets_partition(g := f"g-{coordinator}-{i}", len(placement))][0] == coordinator)
    assert find_coordinator(mixed.bootstrap, GROUP_KEY, group) == coordinator
    partition = offsets_partition(group, len(placement))
    replicas = placement[partition][1]
    wanted = [coordinator, successor, *(r for r in replicas if r not in (coordinator, successor))]
    if replicas != wanted:
        reorder = AlterPartitionReassignmentsRequest(
            topics=(ReassignableTopic(name=TopicName(OFFSETS_TOPIC), partitions=(ReassignablePartition(partition_index=i32(partition), replicas=tuple(BrokerId(r) for r in wanted)),)),)
        )
        answer = request(mixed.kafka.nodes[KAFKA].bootstrap, reorder)
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer
        wait_until(f"{OFFSETS_TOPIC}-{partition} reordered", lambda: mixed.placement(OFFSETS_TOPIC)[partition][1] == wanted, TIMEOUT_S)
    return group


def resume(bootstrap: str, group: str, topic: str) -> list[int]:
    """A group member reading from the group's committed offsets to the log end as it is now,
    committing where it stopped; the values it read."""
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True, **QUIET})  # fmt: skip
    consumer.subscribe([topic])
    seen: list[int] = []
    positions: dict[int, int] = {}

    def at_end() -> bool:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                seen.append(int(msg.value()))
                positions[msg.partition()] = msg.offset() + 1
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                positions[msg.partition()] = max(positions.get(msg.partition(), 0), msg.offset())
        return all(positions.get(p, 0) >= end for p, end in ends.items())

    try:
        wait_until(f"{group} at the log end", at_end, TIMEOUT_S, 0)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def kill_and_restart(mixed: MixedCluster, node: int, topic: str, while_down: list[str], group: str) -> list[int]:
    """SIGKILL ``node`` (it leads a partition of ``topic``), let ``group`` resume while it is down,
    restart it, and wait for every ISR to be whole again."""
    assert any(leader == node for leader, _, _ in mixed.placement(topic).values())
    mixed.kill(node)
    wait_until(f"{topic} led without {node}", lambda: all(leader not in (node, -1) and node not in isr for leader, _, isr in mixed.placement(topic).values()), TIMEOUT_S)
    # Brokers apply the controller's records each at its own pace: the one asked may still name the dead coordinator.
    moved = wait_until(f"{group}'s coordinator moved", lambda: (c := find_coordinator(mixed.bootstrap, GROUP_KEY, group)) != node and c, TIMEOUT_S)
    while_down.append(f"{group}@{moved}")
    seen = resume(mixed.bootstrap, group, topic)
    mixed.launch(node)
    mixed.await_started(node)
    for t in (topic, OFFSETS_TOPIC):
        mixed.await_full_isrs(t, TIMEOUT_S)
    return seen


def test_acks_all_records_survive_a_leader_of_each_kind_killed_and_groups_move_across_kinds(mixed: MixedCluster) -> None:
    topic = "mixed"
    mixed.create_topic(topic, ASSIGNMENT)
    assert {p: leader for p, (leader, _, _) in mixed.placement(topic).items()} == {0: KAFKA, 1: KBROKER, 2: OTHER_KBROKER}
    find_coordinator(mixed.bootstrap, GROUP_KEY, "any")  # creates __consumer_offsets
    mixed.await_full_isrs(OFFSETS_TOPIC, TIMEOUT_S)
    # Committed through Kafka's coordinator, resumed through a kbroker one; and the reverse.
    kafka_group = group_moving_to(mixed, KAFKA, KBROKER)
    kbroker_group = group_moving_to(mixed, KBROKER, KAFKA)

    producing = Producing(mixed.bootstrap, topic)
    try:
        wait_until("records acknowledged", lambda: len(producing.acked) >= 200, TIMEOUT_S)
        seen = {g: resume(mixed.bootstrap, g, topic) for g in (kafka_group, kbroker_group)}
        while_down: list[str] = []
        seen[kafka_group] += kill_and_restart(mixed, KAFKA, topic, while_down, kafka_group)
        seen[kbroker_group] += kill_and_restart(mixed, KBROKER, topic, while_down, kbroker_group)
    finally:
        producing.stop()

    assert while_down == [f"{kafka_group}@{KBROKER}", f"{kbroker_group}@{KAFKA}"]
    log = Counter(int(v) for v in read_log(mixed.bootstrap, topic, PARTITIONS))
    assert set(producing.acked) <= set(log), f"lost {sorted(set(producing.acked) - set(log))[:20]}"
    assert [v for v, n in log.items() if n > 1] == []
    assert not producing.failed
    for group, values in seen.items():
        values += resume(mixed.bootstrap, group, topic)
        # Every record once: each member started where the previous one committed.
        assert sorted(values) == sorted(log), group
    assert all(sorted(replicas) == isr for _, replicas, isr in mixed.placement(topic).values())
