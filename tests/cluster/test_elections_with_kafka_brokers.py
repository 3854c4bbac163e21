"""Elections Apache Kafka 4.4's controller makes when a partition's ISR is gone, with replicas of
both kinds (issue 36): KIP-966's eligible leader replicas and unclean elections, a kbroker broker
elected where a Kafka leader was lost and a Kafka broker where a kbroker leader was.

One Kafka controller, the Kafka broker KAFKA and three kbroker brokers. Formatted at release 4.4
(metadata.version 4.4-IV2), as MixedCluster does, Kafka finalizes eligible.leader.replicas.version
1 with no option: level 1 comes with every metadata.version from 4.1-IV0. Four topics of one
partition, acks=all idempotent producers, and one sequence of stops serving all four (a clean stop
keeps a replica eligible, a SIGKILL does not):

- ELR_TO_KBROKER [KAFKA, FIRST, ELR_MEMBER] and ELR_TO_KAFKA [LOST_LEADER, ELR_MEMBER, KAFKA],
  min.insync.replicas 2: FIRST stops, ELR_MEMBER stops (the ISR of the first goes below the
  minimum: ELR_MEMBER becomes eligible), KAFKA stops (the first is leaderless; the ISR of the
  second goes below the minimum: KAFKA becomes eligible), LOST_LEADER is killed (the second is
  leaderless). ELR_MEMBER comes back and is elected from the first's ELR, KAFKA from the
  second's: cleanly, with every acknowledged record.
- UNCLEAN_TO_KBROKER [KAFKA, ELR_MEMBER] and UNCLEAN_TO_KAFKA [LOST_LEADER, KAFKA],
  min.insync.replicas 1, unclean.leader.election.enable: the follower stops, records are
  acknowledged by the leader alone, the leader goes too, the follower comes back and is the only
  live replica: elected uncleanly (RECOVERING), it serves produce and says RECOVERED in the
  AlterPartition that takes the old leader back. The old leader truncates its tail first, across
  kinds: Kafka's restarted follower by OffsetForLeaderEpoch to kbroker's leader, kbroker's on the
  diverging epoch in the Kafka leader's Fetch answer. Those records are lost, as an unclean
  election loses them, and every replica holds the same log.

Each step's partition states come from Kafka's controller's metadata log (read with kbroker's
decoder) and DescribeTopicPartitions from a live broker. ``elections`` is the scenario alone: run
against four Kafka brokers (``MixedCluster`` with no kbroker broker, ids 2-5 in the same roles) it
gave the states EXPECTED holds (2026-12-01).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pytest
from confluent_kafka import KafkaError, Message, Producer

from benchmarks.mixed_cluster import QUIET, MixedCluster, read_log
from broker.metadata.metadata_image import NO_LEADER, PartitionRegistration
from protocol.records import iter_batches, iter_records
from tests.cluster.cluster import wait_until
from tests.cluster.test_eligible_leaders import described, history

TIMEOUT_S = 30.0
KAFKA, ELR_MEMBER, LOST_LEADER, FIRST = 2, 11, 12, 13
ELR_TO_KBROKER, ELR_TO_KAFKA = "elr-kafka-leader-lost", "elr-kbroker-leader-lost"
UNCLEAN_TO_KBROKER, UNCLEAN_TO_KAFKA = "unclean-kafka-leader-lost", "unclean-kbroker-leader-lost"
TOPICS = (ELR_TO_KBROKER, ELR_TO_KAFKA, UNCLEAN_TO_KBROKER, UNCLEAN_TO_KAFKA)
UNCLEAN = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
BATCH = 100


@dataclass(frozen=True)
class Roles:
    """Which broker plays which part: the mixed cluster's, or four Kafka brokers' (ids 2-5)."""

    kafka: int = KAFKA  # leads the first ELR topic and the first unclean topic, is elected in the others
    elr_member: int = ELR_MEMBER  # elected from the first ELR topic's ELR, and uncleanly in the first unclean topic
    lost_leader: int = LOST_LEADER  # leads the second ELR topic and the second unclean topic, killed
    first: int = FIRST  # the first ELR topic's follower that stops first

    def name(self, node: int) -> str:
        return {self.kafka: "K", self.elr_member: "E", self.lost_leader: "L", self.first: "F"}.get(node, str(node))

    def names(self, nodes: Iterable[int] | None, *, sort: bool = False) -> str:
        named = [self.name(n) for n in nodes or ()]
        return ",".join(sorted(named) if sort else named)

    def placements(self) -> dict[str, tuple[list[int], dict[str, str]]]:
        return {
            ELR_TO_KBROKER: ([self.kafka, self.first, self.elr_member], {}),
            ELR_TO_KAFKA: ([self.lost_leader, self.elr_member, self.kafka], {}),
            UNCLEAN_TO_KBROKER: ([self.kafka, self.elr_member], UNCLEAN),
            UNCLEAN_TO_KAFKA: ([self.lost_leader, self.kafka], UNCLEAN),
        }


# A partition as a step left it, brokers named by role: (leader, ISR, ELR, last known ELR, leader recovery state, leader epoch).
State = tuple[str, str, str, str, str, int]


@dataclass
class Seen:
    """What ``elections`` saw: each step's committed states (every live broker described the
    same), the records acknowledged (offset, value) per topic and those a leader acknowledged
    alone before an unclean election lost them, what was acknowledged when a replica was elected
    from the ELR beside that replica's log, each topic's log read by a consumer at the end, each
    replica's log on disk then, and each partition's history in the metadata log."""

    states: dict[str, dict[str, State]] = field(default_factory=dict)
    acked: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    lost_tail: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    elected_log: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int]]]] = field(default_factory=dict)
    read: dict[str, list[int]] = field(default_factory=dict)
    on_disk: dict[str, dict[str, list[tuple[int, int, int]]]] = field(default_factory=dict)
    history: dict[str, list[State]] = field(default_factory=dict)


def histories(cluster: MixedCluster) -> dict[str, list[PartitionRegistration]]:
    """Partition 0 of each topic after each of its records in Kafka's controller's metadata log."""
    return {topic: history(cluster.kafka, topic) for topic in TOPICS}


def state(roles: Roles, p: PartitionRegistration) -> State:
    leader = "-" if p.leader == NO_LEADER else roles.name(p.leader)
    recovery = "RECOVERING" if p.leader_recovery_state else "RECOVERED"
    return leader, roles.names(p.isr, sort=True), roles.names(p.elr), roles.names(p.last_known_elr), recovery, p.leader_epoch


def describe(roles: Roles, bootstrap: str, topic: str) -> tuple[str, str, str, str]:
    """(leader, ISR, ELR, last known ELR) of ``topic``-0 as the broker at ``bootstrap`` answers DescribeTopicPartitions."""
    leader, isr, elr, last_known_elr = described(bootstrap, topic)
    return "-" if leader == NO_LEADER else roles.name(leader), roles.names(isr, sort=True), roles.names(elr), roles.names(last_known_elr)


def produce(bootstrap: str, batches: dict[str, range]) -> dict[str, list[tuple[int, int]]]:
    """Each topic's values sent with acks=all by one idempotent producer of their own; (offset,
    value) of each acknowledged, per topic."""
    acked: dict[str, list[tuple[int, int]]] = {topic: [] for topic in batches}
    errors: list[KafkaError] = []

    def done(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked[msg.topic()].append((msg.offset(), int(msg.value())))
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": int(TIMEOUT_S * 1000), **QUIET})
    for topic, values in batches.items():
        for v in values:
            producer.produce(topic, value=b"%d" % v, on_delivery=done)
    assert producer.flush(TIMEOUT_S + 5) == 0
    assert not errors and all(len(acked[t]) == len(v) for t, v in batches.items()), f"{ {t: len(a) for t, a in acked.items()} } acknowledged, {errors[:3]}"
    return acked


def log_on_disk(cluster: MixedCluster, node: int, topic: str) -> list[tuple[int, int, int]]:
    """(offset, leader epoch, value) of every record of ``topic``-0 in ``node``'s log directory,
    read from the segment files with kbroker's decoder (Kafka's are the same format)."""
    data = cluster.kbrokers[node].data_dir if node in cluster.kbrokers else cluster.kafka.nodes[node].data_dir
    out = []
    for segment in sorted((data / f"{topic}-0").glob("*.log")):
        for header, batch in iter_batches(segment.read_bytes()):
            out += [(r.offset, header.partition_leader_epoch, int(r.value or b"-1")) for r in iter_records(batch, header)]
    return out


def stop(cluster: MixedCluster, node: int) -> None:
    """A clean shutdown (SIGTERM: controlled shutdown, then the clean-shutdown marker)."""
    if node in cluster.kbrokers:
        cluster.kbrokers[node].stop()
    else:
        cluster.kafka.nodes[node].stop()


def elections(cluster: MixedCluster, roles: Roles) -> Seen:
    """The scenario of the module docstring on a started ``cluster`` whose brokers play ``roles``."""
    seen = Seen()
    placements = roles.placements()
    for topic, (replicas, config) in placements.items():
        cluster.create_topic(topic, [replicas], config)
        seen.acked[topic] = []

    def send(*topics: str) -> dict[str, list[tuple[int, int]]]:
        acked = produce(cluster.bootstrap, {t: range(len(seen.acked[t]), len(seen.acked[t]) + BATCH) for t in topics})
        for topic, records in acked.items():
            seen.acked[topic] += records
        return acked

    def step(what: str, done: dict[str, str]) -> None:
        """Wait until each topic of ``done`` is committed with that leader and ISR ("L:K,L": the
        leader, then the ISR in any order; "-" no leader, nothing before ":" any), and every live
        broker describes every topic as committed (each applies the controller's records at its
        own pace); record the states."""
        last: dict[str, dict[str, tuple]] = {}

        def settled() -> dict[str, State] | None:
            now = last["committed"] = {t: state(roles, states[-1]) for t, states in histories(cluster).items()}
            for topic, want in done.items():
                leader, _, isr = want.partition(":")
                if now[topic][:2] != (leader or now[topic][0], ",".join(sorted(filter(None, isr.split(","))))):
                    return None
            for node in cluster.broker_ids:
                process = cluster.kbrokers[node] if node in cluster.kbrokers else cluster.kafka.nodes[node]
                if process.running:
                    answer = last[f"described by {roles.name(node)}"] = {t: describe(roles, process.bootstrap, t) for t in TOPICS}
                    if answer != {t: s[:4] for t, s in now.items()}:
                        return None
            return now

        try:
            seen.states[what] = wait_until(f"{what}: {done}", settled, TIMEOUT_S, 0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {last}") from None

    K, E, L, F = roles.kafka, roles.elr_member, roles.lost_leader, roles.first
    step("in sync", {t: ":" + roles.names(replicas) for t, (replicas, _) in placements.items()})
    send(*TOPICS)
    stop(cluster, F)
    step("F stopped", {ELR_TO_KBROKER: "K:E,K"})
    send(ELR_TO_KBROKER)
    stop(cluster, E)
    step("E stopped", {ELR_TO_KBROKER: "K:K", ELR_TO_KAFKA: "L:K,L", UNCLEAN_TO_KBROKER: "K:K"})
    seen.lost_tail[UNCLEAN_TO_KBROKER] = send(ELR_TO_KAFKA, UNCLEAN_TO_KBROKER)[UNCLEAN_TO_KBROKER]
    stop(cluster, K)
    step("K stopped", {ELR_TO_KBROKER: "-:", ELR_TO_KAFKA: "L:L", UNCLEAN_TO_KBROKER: "-:", UNCLEAN_TO_KAFKA: "L:L"})
    seen.lost_tail[UNCLEAN_TO_KAFKA] = send(UNCLEAN_TO_KAFKA)[UNCLEAN_TO_KAFKA]
    cluster.kill(L)
    step("L killed", {ELR_TO_KAFKA: "-:", UNCLEAN_TO_KAFKA: "-:"})  # fenced when its session ran out

    cluster.launch(E)
    cluster.await_started(E)
    step("E back", {ELR_TO_KBROKER: "E:E", UNCLEAN_TO_KBROKER: "E:E"})
    # Alone in the ISR, below min.insync.replicas, a leader elected from the ELR holds its high
    # watermark (KIP-966, Kafka's as kbroker's): no consumer reads it yet; its log file does.
    seen.elected_log[ELR_TO_KBROKER] = (list(seen.acked[ELR_TO_KBROKER]), log_on_disk(cluster, E, ELR_TO_KBROKER))
    send(UNCLEAN_TO_KBROKER)
    cluster.launch(K)
    cluster.await_started(K)
    # K rejoins where E leads, then the controller's imbalance check gives it back the leadership
    # (it is the preferred replica); E, back, follows K where K was elected.
    step("K back", {ELR_TO_KBROKER: "K:E,K", ELR_TO_KAFKA: "K:E,K", UNCLEAN_TO_KBROKER: "K:E,K", UNCLEAN_TO_KAFKA: "K:K"})
    seen.elected_log[ELR_TO_KAFKA] = (list(seen.acked[ELR_TO_KAFKA]), log_on_disk(cluster, K, ELR_TO_KAFKA))
    send(ELR_TO_KBROKER, ELR_TO_KAFKA, UNCLEAN_TO_KAFKA)
    for node in (L, F):
        cluster.launch(node)
    for node in (L, F):
        cluster.await_started(node)
    # Every partition led by its preferred replica again (the imbalance check).
    step("L and F back", {t: roles.name(replicas[0]) + ":" + roles.names(replicas) for t, (replicas, _) in placements.items()})
    send(*TOPICS)

    with ThreadPoolExecutor(len(TOPICS)) as readers:
        logs = readers.map(lambda topic: read_log(cluster.bootstrap, topic, 1), TOPICS)
        seen.read = {topic: [int(v) for v in values] for topic, values in zip(TOPICS, logs)}
    for topic, (replicas, _) in placements.items():

        def same_everywhere(topic: str = topic, replicas: list[int] = replicas) -> dict[str, list[tuple[int, int, int]]] | None:
            logs = {roles.name(r): log_on_disk(cluster, r, topic) for r in replicas}
            return logs if len({tuple(log) for log in logs.values()}) == 1 else None

        seen.on_disk[topic] = wait_until(f"{topic}: every replica's log the same", same_everywhere, TIMEOUT_S, 0.2)
    seen.history = {t: [state(roles, p) for p in states] for t, states in histories(cluster).items()}
    return seen


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[MixedCluster]:
    cluster = MixedCluster(tmp_path_factory.mktemp("elections"), kafka_lib, controllers=1, kafka_brokers=1, kbroker_brokers=3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


# Each step's states on four Kafka 4.4 brokers in the same roles (ISRs sorted: a Kafka leader lists
# the ISR it asks for in its hash set's order, kbroker in the order replicas joined). Kafka's
# controller decides every election and ELR; on the mixed cluster it must decide the same.
EXPECTED: dict[str, dict[str, State]] = {
    "in sync": {
        ELR_TO_KBROKER: ("K", "E,F,K", "", "", "RECOVERED", 0),
        ELR_TO_KAFKA: ("L", "E,K,L", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KAFKA: ("L", "K,L", "", "", "RECOVERED", 0),
    },
    "F stopped": {
        ELR_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 0),  # still min.insync.replicas: F is not eligible
        ELR_TO_KAFKA: ("L", "E,K,L", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KAFKA: ("L", "K,L", "", "", "RECOVERED", 0),
    },
    "E stopped": {
        ELR_TO_KBROKER: ("K", "K", "E", "", "RECOVERED", 0),
        ELR_TO_KAFKA: ("L", "K,L", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KBROKER: ("K", "K", "", "", "RECOVERED", 0),
        UNCLEAN_TO_KAFKA: ("L", "K,L", "", "", "RECOVERED", 0),
    },
    "K stopped": {
        ELR_TO_KBROKER: ("-", "", "K,E", "K", "RECOVERED", 1),
        ELR_TO_KAFKA: ("L", "L", "K", "", "RECOVERED", 0),
        UNCLEAN_TO_KBROKER: ("-", "", "K", "K", "RECOVERED", 1),
        UNCLEAN_TO_KAFKA: ("L", "L", "", "", "RECOVERED", 0),
    },
    "L killed": {
        ELR_TO_KBROKER: ("-", "", "K,E", "K", "RECOVERED", 1),
        ELR_TO_KAFKA: ("-", "", "K,L", "L", "RECOVERED", 1),
        UNCLEAN_TO_KBROKER: ("-", "", "K", "K", "RECOVERED", 1),
        UNCLEAN_TO_KAFKA: ("-", "", "L", "L", "RECOVERED", 1),
    },
    "E back": {
        ELR_TO_KBROKER: ("E", "E", "K", "", "RECOVERED", 2),  # elected from the ELR
        ELR_TO_KAFKA: ("-", "", "K,L", "L", "RECOVERED", 1),
        UNCLEAN_TO_KBROKER: ("E", "E", "", "", "RECOVERING", 2),  # elected uncleanly
        UNCLEAN_TO_KAFKA: ("-", "", "L", "L", "RECOVERED", 1),
    },
    "K back": {
        ELR_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 3),
        ELR_TO_KAFKA: ("K", "E,K", "", "", "RECOVERED", 2),  # elected from the ELR
        UNCLEAN_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 3),
        UNCLEAN_TO_KAFKA: ("K", "K", "", "", "RECOVERING", 2),  # elected uncleanly; RECOVERED at its first ISR change
    },
    "L and F back": {
        ELR_TO_KBROKER: ("K", "E,F,K", "", "", "RECOVERED", 3),
        ELR_TO_KAFKA: ("L", "E,K,L", "", "", "RECOVERED", 3),
        UNCLEAN_TO_KBROKER: ("K", "E,K", "", "", "RECOVERED", 3),
        UNCLEAN_TO_KAFKA: ("L", "K,L", "", "", "RECOVERED", 3),
    },
}


def test_elections_from_the_elr_and_unclean_ones_across_kinds(mixed: MixedCluster) -> None:
    seen = elections(mixed, Roles())
    for what, states in EXPECTED.items():
        assert seen.states[what] == states, what
    for topic, (acked, log) in seen.elected_log.items():
        # Every record acknowledged before the election is on the replica elected from the ELR, at its offset.
        assert set(acked) <= {(offset, value) for offset, _, value in log}, topic
    for topic in (ELR_TO_KBROKER, ELR_TO_KAFKA):
        assert all(recovery == "RECOVERED" for *_, recovery, _ in seen.history[topic]), f"{topic}: an unclean election"
    # The leader elected uncleanly (kbroker's E, Kafka's K) says RECOVERED in the AlterPartition
    # that takes the returning old leader into the ISR, at its first leader epoch.
    recovering = {t: [i for i, s in enumerate(seen.history[t]) if s[4] == "RECOVERING"] for t in (UNCLEAN_TO_KBROKER, UNCLEAN_TO_KAFKA)}
    assert {t: seen.history[t][i[-1] + 1] for t, i in recovering.items() if len(i) == 1} == {
        UNCLEAN_TO_KBROKER: ("E", "E,K", "", "", "RECOVERED", 2),
        UNCLEAN_TO_KAFKA: ("K", "K,L", "", "", "RECOVERED", 2),
    }
    for topic, acked in seen.acked.items():
        tail = {value for _, value in seen.lost_tail.get(topic, ())}
        kept = [(offset, value) for offset, value in acked if value not in tail]
        # Unclean: what the lost leader alone acknowledged is gone from every replica (it truncated
        # its tail to the new leader's log); everything else acknowledged is there once, at its offset.
        assert sorted(seen.read[topic]) == sorted(value for _, value in kept), topic
        [log] = {tuple(log) for log in seen.on_disk[topic].values()}
        assert {(offset, value) for offset, _, value in log} == set(kept), topic
