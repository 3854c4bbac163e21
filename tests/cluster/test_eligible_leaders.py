"""KIP-966's last replica standing, on real processes: eligible leader replicas let a partition
whose every broker went down come back under a replica that holds every acknowledged record,
with no unclean election.

One controller and three brokers (the brokers can all be down while the controller decides).
RF=3, min.insync.replicas=2, an idempotent acks=all producer throughout. The followers shut down
cleanly one after the other: the first leaves the ISR while it still meets min.insync.replicas,
the second takes it below and so becomes an eligible leader replica (the high watermark stops
moving: it holds everything acknowledged). The leader is then killed, and the partition has no
leader, no ISR, and the ELR. The eligible follower restarts cleanly and is elected from the ELR.
What the test reads is the controller's metadata log (every PartitionChangeRecord of the topic)
and every acknowledged record, at its offset, once.

``last_replica_standing`` is the scenario alone: benchmarks/elr.py plays it against Apache Kafka
4.4 with the same roles and settings (Kafka's metadata log is read with the same decoder) and puts
the two side by side, with kafka-topics --describe after each step.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
from kio.schema.describe_topic_partitions.v0 import request as describe_v0
from kio.static.primitive import i32

from broker.controller.partition_change_builder import RECOVERING
from broker.metadata.metadata_image import NO_LEADER, PartitionRegistration
from broker.metadata.metadata_records import MetadataRecord, PartitionChangeRecord, PartitionRecord, TopicRecord, decode_metadata_record
from protocol.records import iter_batches, iter_records
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state
from tests.cluster.test_replication_faults import Load, Record, assert_acked_once_at_their_offsets, read_to_end, wait_for_isr
from tests.integration.helpers import unique_topic
from tests.integration.wire import request

TIMEOUT_S = 90.0
SESSION_MS = 3000
CONTROLLER = 1
BROKERS = (2, 3, 4)
OVERRIDES = {
    "broker.session.timeout.ms": str(SESSION_MS),
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("eligible-leaders"), combined=0, controllers=1, brokers=3, overrides=OVERRIDES)
    try:
        yield c.start()
    finally:
        c.close()


def metadata_records(cluster: KafkaCluster) -> list[MetadataRecord]:
    """Every record of the controller's metadata log so far (control batches and a partial last batch left out)."""
    directory = cluster.nodes[CONTROLLER].data_dir / "__cluster_metadata-0"
    records: list[MetadataRecord] = []
    for segment in sorted(directory.glob("*.log")):
        for header, batch in iter_batches(segment.read_bytes()):
            if not header.is_control:
                records.extend(decode_metadata_record(r.value) for r in iter_records(batch, header) if r.value is not None)
    return records


def history(cluster: KafkaCluster, topic: str) -> list[PartitionRegistration]:
    """Partition 0 of ``topic`` after each of its records, as the controller committed them."""
    states: list[PartitionRegistration] = []
    topic_id = None
    for record in metadata_records(cluster):
        if isinstance(record, TopicRecord) and record.name == topic:
            topic_id = record.topic_id
        elif isinstance(record, PartitionRecord) and record.topic_id == topic_id and record.partition_id == 0:
            states.append(PartitionRegistration.from_record(record))
        elif isinstance(record, PartitionChangeRecord) and record.topic_id == topic_id and record.partition_id == 0 and states:
            states.append(states[-1].merge(record))
    return states


def committed_state(cluster: KafkaCluster, topic: str) -> PartitionRegistration:
    return history(cluster, topic)[-1]


def described(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, tuple[int, ...] | None]:
    """(leader, ISR, ELR, last known ELR) of partition 0 as DescribeTopicPartitions answers."""
    [answer] = request(bootstrap, describe_v0.DescribeTopicPartitionsRequest(
        topics=(describe_v0.TopicRequest(name=topic),), response_partition_limit=i32(10), cursor=None
    )).topics
    [p] = answer.partitions
    return int(p.leader_id), tuple(p.isr_nodes), p.eligible_leader_replicas, p.last_known_elr


@dataclass
class LastReplicaStanding:
    """What ``last_replica_standing`` saw: the brokers' roles, the partition as the controller
    committed it after each step, what ``describe`` printed then (where a broker was running), the
    times, and the records."""

    leader: int
    first: int
    eligible: int
    states: dict[str, PartitionRegistration] = field(default_factory=dict)
    describes: dict[str, str] = field(default_factory=dict)
    described: tuple[int, tuple[int, ...], tuple[int, ...] | None, tuple[int, ...] | None] | None = None
    started_after_s: float = 0.0  # the eligible broker's restart: until its process reported started
    elected_after_s: float = 0.0  # until the controller committed it as leader
    served_after_s: float = 0.0  # until its Metadata named it leader
    acked_before_the_leader_died: int = 0
    acked: list[Record] = field(default_factory=list)
    history: list[PartitionRegistration] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


# The steps ``last_replica_standing`` records, in order.
STEPS = ("in sync", "first stopped", "eligible stopped", "leader killed", "eligible elected", "first back", "leader back")


def last_replica_standing(cluster: Any, describe: Callable[[str, str], str] | None = None) -> LastReplicaStanding:
    """The scenario, against kbroker's cluster or Apache Kafka's (benchmarks/elr.py runs both):
    ``cluster`` has a controller-only node CONTROLLER and broker-only nodes BROKERS, with
    ``nodes``, ``bootstrap`` and nodes that ``stop``, ``kill``, ``launch`` and ``await_started``.
    ``describe(bootstrap, topic)`` (kafka-topics --describe) is run after each step a broker is
    up for."""
    name = unique_topic("elr")
    create(cluster.bootstrap, name)  # RF 3, min.insync.replicas 2
    wait_for_isr(cluster, name, set(BROKERS))
    leader, _ = partition_state(cluster.bootstrap, name)
    first, eligible = (b for b in BROKERS if b != leader)
    seen = LastReplicaStanding(leader, first, eligible)

    def step(what: str, state: PartitionRegistration) -> PartitionRegistration:
        seen.states[what] = state
        if describe is not None and cluster.bootstrap:
            seen.describes[what] = describe(cluster.bootstrap, name)
        return state

    def committed(what: str, done: Callable[[PartitionRegistration], bool]) -> PartitionRegistration:
        return step(what, wait_until(what, lambda: done(p := committed_state(cluster, name)) and p, TIMEOUT_S))

    committed("in sync", lambda p: set(p.isr) == set(BROKERS))
    with Load(cluster.bootstrap, name) as load:
        load.wait_for_more(200, "with the whole ISR")
        cluster.nodes[first].stop()  # a controlled shutdown: out of the ISR, which still meets min.insync.replicas
        committed("first stopped", lambda p: set(p.isr) == {leader, eligible})
        load.wait_for_more(200, "with an ISR of two")
        cluster.nodes[eligible].stop()
        committed("eligible stopped", lambda p: p.isr == (leader,))
        seen.acked_before_the_leader_died = len(load.acked)
        cluster.nodes[leader].kill()
        # Fenced when its session runs out: no leader, an empty ISR.
        committed("leader killed", lambda p: p.leader == NO_LEADER)
        restarted_at = time.monotonic()
        cluster.nodes[eligible].launch()

        def await_started() -> float:
            cluster.nodes[eligible].await_started()
            return time.monotonic() - restarted_at

        # Awaited beside the election, which may come before the process reports it has started.
        with ThreadPoolExecutor(1) as starting:
            started = starting.submit(await_started)
            elected = wait_until("a leader from the ELR", lambda: (p := committed_state(cluster, name)).leader != NO_LEADER and p, TIMEOUT_S)
            seen.elected_after_s = time.monotonic() - restarted_at
            seen.started_after_s = started.result(TIMEOUT_S)
        wait_until("Metadata naming the new leader", lambda: partition_state(cluster.nodes[eligible].bootstrap, name)[0] == eligible or None, TIMEOUT_S)
        seen.served_after_s = time.monotonic() - restarted_at
        step("eligible elected", elected)
        # Clients see the ELR through DescribeTopicPartitions.
        seen.described = described(cluster.nodes[eligible].bootstrap, name)
        # min.insync.replicas is 2: acks=all resumes once a second replica is back in the ISR.
        cluster.nodes[first].launch()
        cluster.nodes[first].await_started()
        wait_for_isr(cluster, name, {eligible, first})
        committed("first back", lambda p: set(p.isr) == {eligible, first})
        load.wait_for_more(200, "after the ELR member took over")
        # The killed leader restarts uncleanly: it leaves the ELR, truncates to the new leader and rejoins.
        cluster.nodes[leader].launch()
        cluster.nodes[leader].await_started()
        wait_for_isr(cluster, name, set(BROKERS))
        committed("leader back", lambda p: set(p.isr) == set(BROKERS))
        load.wait_for_more(100, "with the whole ISR again")
    seen.acked = load.acked
    seen.history = history(cluster, name)
    seen.records, _ = read_to_end(cluster.bootstrap, name, [0])
    return seen


def test_the_last_replica_standing_comes_back_from_the_elr_with_every_acknowledged_record(cluster: KafkaCluster) -> None:
    seen = last_replica_standing(cluster)
    leader, eligible = seen.leader, seen.eligible
    assert seen.states["first stopped"].elr == ()
    assert seen.states["eligible stopped"].elr == (eligible,), "the replica that took the ISR below min.insync.replicas is not eligible"
    # The leader fenced when its session ran out: both it and the follower eligible.
    offline = seen.states["leader killed"]
    assert (offline.isr, offline.elr, offline.last_known_elr) == ((), tuple(sorted((leader, eligible))), (leader,))
    elected = seen.states["eligible elected"]
    assert elected.leader == eligible and elected.isr == (eligible,) and elected.elr == (leader,)
    assert elected.leader_recovery_state != RECOVERING
    assert seen.described == (eligible, (eligible,), (leader,), ())
    assert not any(p.leader_recovery_state == RECOVERING for p in seen.history), "an unclean election happened"
    assert seen.history[-1].elr == () and seen.history[-1].last_known_elr == ()
    print(
        f"leader {leader} killed after {seen.acked_before_the_leader_died} acknowledged records; ELR member {eligible} "
        f"elected {seen.elected_after_s:.1f}s after its restart began; {len(seen.acked)} acknowledged in all"
    )
    assert_acked_once_at_their_offsets(seen.records, seen.acked)
