"""Replication across an Apache Kafka 4.4 broker and kbroker brokers under Kafka's controller
(issue 36, M2): RF=3 partitions whose replicas are both kinds, some led by each; acks=all records
survive the SIGKILL of a leader of each kind, in turn, with nothing lost and nothing duplicated;
every ISR is whole again after each restart (kbroker leaders send AlterPartition to Kafka's
controller to take the returning Kafka broker back, and the reverse); a consumer group committed
through one kind's coordinator resumes on the other kind's coordinator from those offsets; a
consumer-protocol group (KIP-848) keeps its members and their assignments, unfenced, while its
coordinator moves from Kafka to kbroker (failover) and back (preferred election), each kind
rebalancing it from the records the other wrote.
Kafka's kafka-reassign-partitions moves replicas from the Kafka broker onto kbroker brokers and
from kbroker brokers onto the Kafka broker, throttled, while a producer writes (KIP-455 adding and
removing replicas, applied by both kinds from Kafka's controller's records).

benchmarks/mixed_cluster.py runs the longer campaign (two brokers of each kind, Kafka's
VerifiableProducer and VerifiableConsumer, transactions with their coordinator on either kind).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, ConsumerGroupDescription, ResourceType
from kio.schema.alter_partition_reassignments.v0.request import AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from benchmarks.mixed_cluster import GROUP_KEY, QUIET, MixedCluster, end_offsets, read_log
from benchmarks.transactions import find_coordinator
from broker.wire_client import request
from tests.cluster.cluster import wait_until
from tests.kafka_tools import kafka_tool

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


class Kip848Member:
    """A consumer-protocol (KIP-848) group member reading in its own thread, committing what it
    read after each batch and before giving partitions up; what it read, what it owns, and any
    partitions it lost (librdkafka's on_lost: the coordinator fenced it)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.values: list[int] = []
        self.member_id = ""
        self.owned: set[int] = set()
        self.lost: list[int] = []
        self.errors: Counter = Counter()
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False, **QUIET})  # fmt: skip
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    # ``owned`` is replaced, never changed in place: the test thread reads it. The consumer is used
    # by this member's thread alone (a call from another blocks while it polls).
    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.member_id = self.member_id or consumer.memberid()  # may be "" in a later callback
        self.owned = self.owned | {tp.partition for tp in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()
        self.owned = self.owned - {tp.partition for tp in partitions}

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.lost += [tp.partition for tp in partitions]
        self.owned = self.owned - {tp.partition for tp in partitions}

    def _commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as e:
            # Nothing read since the last commit, or the coordinator is moving: the next one covers it.
            self.errors[e.args[0].name()] += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = [m for m in self._consumer.consume(500, 0.2) if m.error() is None]
            self.values += [int(m.value()) for m in batch]
            if batch:
                self._commit()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._commit()
        self._consumer.close()


@pytest.fixture
def started_members() -> Iterator[list[Kip848Member]]:
    """Every member a test starts, closed at the end if the test did not."""
    started: list[Kip848Member] = []
    yield started
    for member in started:
        member.close()


def describe_group(mixed: MixedCluster, group: str) -> ConsumerGroupDescription:
    admin = mixed.admin()  # kept referenced until answered: its handle is destroyed with it
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(TIMEOUT_S)


def settled(mixed: MixedCluster, group: str, coordinator: int, members: list[Kip848Member]) -> dict[str, set[int]] | None:
    """The group's assignment (member id: partitions) once ``coordinator`` describes it as a
    consumer-protocol group of ``members`` alone that has reached its target assignment, each
    member owning what it was assigned and every partition assigned; None before that."""
    try:
        described = describe_group(mixed, group)
    except KafkaException:
        return None  # the coordinator moving, or its partition loading
    assignment = {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}
    target = {m.member_id: {tp.partition for tp in m.target_assignment.topic_partitions} for m in described.members if m.target_assignment}
    if described.coordinator.id != coordinator or described.type != ConsumerGroupType.CONSUMER or target != assignment:
        return None
    if sorted(map(frozenset, assignment.values()), key=sorted) != sorted((frozenset(m.owned) for m in members), key=sorted):
        return None
    return assignment if set().union(*assignment.values()) == set(range(PARTITIONS)) else None


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka's GroupCoordinator.partitionFor: Utils.abs(groupId.hashCode) % partitions (ASCII ids)."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def group_moving_to(mixed: MixedCluster, coordinator: int, successor: int, prefix: str = "g") -> str:
    """A group coordinated by ``coordinator`` whose __consumer_offsets partition goes to
    ``successor`` when ``coordinator`` dies: Kafka's controller elects the first live ISR member in
    replica order, so the partition's replicas are reordered (same set, nothing moves) if need be."""
    placement = mixed.placement(OFFSETS_TOPIC)
    group = next(g for i in range(400) if placement[offsets_partition(g := f"{prefix}-{coordinator}-{i}", len(placement))][0] == coordinator)
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


def kill_and_restart(mixed: MixedCluster, node: int, topic: str, while_down: list[str], group: str, during: Callable[[], None] = lambda: None) -> list[int]:
    """SIGKILL ``node`` (it leads a partition of ``topic``), let ``group`` resume and ``during`` run
    while it is down, restart it, and wait for every ISR to be whole again."""
    assert any(leader == node for leader, _, _ in mixed.placement(topic).values())
    mixed.kill(node)
    wait_until(f"{topic} led without {node}", lambda: all(leader not in (node, -1) and node not in isr for leader, _, isr in mixed.placement(topic).values()), TIMEOUT_S)
    # Brokers apply the controller's records each at its own pace: the one asked may still name the dead coordinator.
    moved = wait_until(f"{group}'s coordinator moved", lambda: (c := find_coordinator(mixed.bootstrap, GROUP_KEY, group)) != node and c, TIMEOUT_S)
    while_down.append(f"{group}@{moved}")
    seen = resume(mixed.bootstrap, group, topic)
    during()
    mixed.launch(node)
    mixed.await_started(node)
    for t in (topic, OFFSETS_TOPIC):
        mixed.await_full_isrs(t, TIMEOUT_S)
    return seen


def test_acks_all_records_survive_a_leader_of_each_kind_killed_and_groups_move_across_kinds(mixed: MixedCluster, started_members: list[Kip848Member]) -> None:
    topic = "mixed"
    mixed.create_topic(topic, ASSIGNMENT)
    assert {p: leader for p, (leader, _, _) in mixed.placement(topic).items()} == {0: KAFKA, 1: KBROKER, 2: OTHER_KBROKER}
    find_coordinator(mixed.bootstrap, GROUP_KEY, "any")  # creates __consumer_offsets
    mixed.await_full_isrs(OFFSETS_TOPIC, TIMEOUT_S)
    # Committed through Kafka's coordinator, resumed through a kbroker one; and the reverse.
    kafka_group = group_moving_to(mixed, KAFKA, KBROKER)
    kbroker_group = group_moving_to(mixed, KBROKER, KAFKA)
    # A consumer-protocol group on Kafka's coordinator, moved to kbroker's by the first kill and back
    # to Kafka's by the preferred election after the restart.
    kip848_group = group_moving_to(mixed, KAFKA, KBROKER, prefix="kip848")

    producing = Producing(mixed.bootstrap, topic)
    first = Kip848Member(mixed.bootstrap, kip848_group, topic)
    members = [first]
    started_members.append(first)
    try:
        wait_until("records acknowledged", lambda: len(producing.acked) >= 200, TIMEOUT_S)
        on_kafka = wait_until(f"{kip848_group} settled on Kafka's coordinator", lambda: settled(mixed, kip848_group, KAFKA, members), TIMEOUT_S)
        assert on_kafka == {first.member_id: set(range(PARTITIONS))}
        seen = {g: resume(mixed.bootstrap, g, topic) for g in (kafka_group, kbroker_group)}
        while_down: list[str] = []
        on_kbroker: dict[str, set[int]] = {}

        def second_member_joins() -> None:
            # kbroker's coordinator, from the records Kafka's wrote, keeps the first member as it
            # was and gives the newcomer a share, revoked from the first member.
            members.append(Kip848Member(mixed.bootstrap, kip848_group, topic))
            started_members.append(members[-1])
            on_kbroker.update(wait_until(f"{kip848_group} settled on kbroker's coordinator", lambda: settled(mixed, kip848_group, KBROKER, members), TIMEOUT_S))

        seen[kafka_group] += kill_and_restart(mixed, KAFKA, topic, while_down, kafka_group, second_member_joins)
        assert set(on_kbroker) == {first.member_id, members[1].member_id} and all(on_kbroker.values())
        # Kafka's coordinator, from the records kbroker's wrote: the same members and assignment,
        # and the leaver's partitions given to the one left.
        back = wait_until(f"{kip848_group} back on Kafka's coordinator", lambda: settled(mixed, kip848_group, KAFKA, members), TIMEOUT_S)
        assert back == on_kbroker
        leaving = members.pop()
        leaving.close()
        alone = wait_until(f"{kip848_group} rebalanced by Kafka's coordinator", lambda: settled(mixed, kip848_group, KAFKA, members), TIMEOUT_S)
        assert alone == {first.member_id: set(range(PARTITIONS))}
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
    wait_until(f"{kip848_group} read to the log end", lambda: len(first.values) + len(leaving.values) >= len(log), TIMEOUT_S)
    first.close()
    # Never fenced through either move, and every record read once by one member or the other.
    assert first.lost == leaving.lost == []
    assert sorted(first.values + leaving.values) == sorted(log)
    admin = mixed.admin()
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(kip848_group)])[kip848_group].result(TIMEOUT_S)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == end_offsets(mixed.bootstrap, topic, PARTITIONS)
    assert all(sorted(replicas) == isr for _, replicas, isr in mixed.placement(topic).values())


REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
INTO, OUT_OF = "into-kbroker", "out-of-kbroker"
# topic: (replicas before, replicas after). Into kbroker: a kbroker broker added as the preferred
# leader beside the Kafka broker, and one replacing it. Out of kbroker: the kbroker leader and a
# kbroker follower each replaced by the Kafka broker.
MOVES = {
    INTO: ([[KAFKA], [KAFKA]], [[KBROKER, KAFKA], [OTHER_KBROKER]]),
    OUT_OF: ([[OTHER_KBROKER, KBROKER], [KBROKER, OTHER_KBROKER]], [[KAFKA, KBROKER], [KBROKER, KAFKA]]),
}
THROTTLE = "10000000"  # B/s: the configs set, the move not slowed by the little there is to copy
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def dynamic_configs(mixed: MixedCluster, resources: list[ConfigResource]) -> dict[str, dict[str, str]]:
    """Each resource's replication throttles set on it (a broker's own, a topic's), as the broker
    asked answers: a broker resource is described by that broker itself."""
    own = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    admin = mixed.admin()  # kept referenced until answered: its handle is destroyed with it
    # One request each, sent together (librdkafka allows one broker resource per call).
    answers = [admin.describe_configs([r], request_timeout=TIMEOUT_S)[r] for r in resources]
    return {
        r.name: {name: e.value for name, e in answer.result(TIMEOUT_S).items() if "throttled" in name and e.source in own}
        for r, answer in zip(resources, answers)
    }


def partition_dirs(mixed: MixedCluster, node: int, topic: str) -> set[str]:
    """The partition directories of ``topic`` on a node, not those renamed for deletion."""
    data = mixed.kbrokers[node].data_dir if node in mixed.kbrokers else mixed.kafka.nodes[node].data_dir
    return {d.name for d in data.iterdir() if d.name.rpartition("-")[0] == topic}


def test_kafka_reassign_partitions_moves_replicas_onto_kbroker_brokers_and_off_them(mixed: MixedCluster, kafka_lib: Path, tmp_path: Path) -> None:
    for topic, (before, _) in MOVES.items():
        mixed.create_topic(topic, before, {"min.insync.replicas": "1"})
    plan = tmp_path / "reassignment.json"
    partitions = [{"topic": t, "partition": p, "replicas": r} for t, (_, after) in MOVES.items() for p, r in enumerate(after)]
    plan.write_text(json.dumps({"version": 1, "partitions": partitions}))

    def tool(main_class: str, *args: str) -> str:
        # Bootstrapped from a kbroker broker, which forwards what it is sent of the reassignment,
        # the configs and the election to Kafka's controller.
        done = kafka_tool(kafka_lib, main_class, "--bootstrap-server", mixed.kbrokers[KBROKER].bootstrap, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    producing = {topic: Producing(mixed.bootstrap, topic) for topic in MOVES}
    try:
        wait_until("records acknowledged before the move", lambda: all(len(p.acked) >= 100 for p in producing.values()), TIMEOUT_S)
        before_move = sum(len(p.acked) for p in producing.values())
        assert "Successfully started partition reassignments" in tool(REASSIGN, "--execute", "--reassignment-json-file", str(plan), "--throttle", THROTTLE)
        # The throttles Kafka's tool sets: both rates on every broker of the move, each kind's own
        # (IncrementalAlterConfigs sent to the broker itself), and the moving replicas on the topics.
        brokers = [ConfigResource(ResourceType.BROKER, str(n)) for n in (KAFKA, KBROKER, OTHER_KBROKER)]
        assert dynamic_configs(mixed, [*brokers, ConfigResource(ResourceType.TOPIC, OUT_OF)]) == {
            **{b.name: dict.fromkeys(RATES, THROTTLE) for b in brokers},
            OUT_OF: {
                "leader.replication.throttled.replicas": f"0:{KBROKER},0:{OTHER_KBROKER},1:{KBROKER},1:{OTHER_KBROKER}",
                "follower.replication.throttled.replicas": f"0:{KAFKA},1:{KAFKA}",
            },
        }
        # Kafka's controller completes a move once its leader (of either kind) has taken the new
        # replicas into the ISR with AlterPartition; --verify then clears the throttles.
        verify = (REASSIGN, "--verify", "--reassignment-json-file", str(plan))
        verified = wait_until("the reassignment complete", lambda: "Clearing broker-level throttles" in (out := tool(*verify)) and out, TIMEOUT_S, 0.5)
        during_move = sum(len(p.acked) for p in producing.values()) - before_move
        assert all(f"Reassignment of partition {p['topic']}-{p['partition']} is completed." in verified for p in partitions), verified
        assert dynamic_configs(mixed, brokers) == {b.name: {} for b in brokers}
        assert {t: [r for _, (_, r, _) in sorted(mixed.placement(t).items())] for t in MOVES} == {t: after for t, (_, after) in MOVES.items()}
        # into-kbroker-0 keeps its Kafka leader until the preferred replica is elected (by the tool,
        # or by the controller's imbalance check first).
        elected = tool(ELECTION, "--election-type", "PREFERRED", "--topic", INTO, "--partition", "0")
        assert any(f"{answer} for partitions {INTO}-0" in elected for answer in ("Successfully completed leader election (PREFERRED)", "Valid replica already elected")), elected
        for topic in MOVES:
            mixed.await_preferred_leaders(topic, TIMEOUT_S)
    finally:
        for p in producing.values():
            p.stop()

    assert during_move > 0
    for topic, p in producing.items():
        # Read from the leaders: a kbroker broker for every partition of into-kbroker.
        log = Counter(int(v) for v in read_log(mixed.bootstrap, topic, len(MOVES[topic][1])))
        assert set(p.acked) <= set(log), f"{topic}: lost {sorted(set(p.acked) - set(log))[:20]}"
        assert [v for v, n in log.items() if n > 1] == [] and not p.failed, topic
    # The kbroker leaders of out-of-kbroker asked for the Kafka broker in the ISR. Kafka's controller
    # answers NEW_LEADER_ELECTED to the one whose request completed the move and removed it: kbroker
    # then waits for the metadata, as Kafka's Partition does.
    asked = {
        (n, e["partition"])
        for n in (KBROKER, OTHER_KBROKER)
        for e in mixed.kbrokers[n].log_events()
        if e["event"] in ("alter_partition.done", "alter_partition.failed") and e["topic"] == OUT_OF and KAFKA in e["isr"]
    }
    assert asked == {(OTHER_KBROKER, 0), (KBROKER, 1)}
    # A replica moved away is deleted where it was, by Kafka as by kbroker (renamed <dir>.<uuid>-delete first).
    wait_until(
        "the replicas moved away deleted",
        lambda: all(partition_dirs(mixed, n, t) == {f"{t}-{p}" for p, r in enumerate(MOVES[t][1]) if n in r} for n in mixed.broker_ids for t in MOVES),
        TIMEOUT_S,
    )
