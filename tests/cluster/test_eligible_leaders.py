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
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from kio.schema.describe_topic_partitions.v0 import request as describe_v0
from kio.static.primitive import i32

from broker.controller.partition_change_builder import RECOVERING
from broker.metadata.metadata_image import NO_LEADER, PartitionRegistration
from broker.metadata.metadata_records import MetadataRecord, PartitionChangeRecord, PartitionRecord, TopicRecord, decode_metadata_record
from protocol.records import iter_batches, iter_records
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state
from tests.cluster.test_replication_faults import Load, assert_acked_once_at_their_offsets, read_to_end, wait_for_isr
from tests.integration.helpers import unique_topic
from tests.integration.wire import request

TIMEOUT_S = 90.0
SESSION_MS = 3000
CONTROLLER = 1
BROKERS = (2, 3, 4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("eligible-leaders"),
        combined=0,
        controllers=1,
        brokers=3,
        overrides={
            "broker.session.timeout.ms": str(SESSION_MS),
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": "4000",
        },
    )
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


def test_the_last_replica_standing_comes_back_from_the_elr_with_every_acknowledged_record(cluster: KafkaCluster) -> None:
    name = unique_topic("elr")
    create(cluster.bootstrap, name)  # RF 3, min.insync.replicas 2
    wait_for_isr(cluster, name, set(BROKERS))
    leader, _ = partition_state(cluster.bootstrap, name)
    first, eligible = (b for b in BROKERS if b != leader)
    with Load(cluster.bootstrap, name) as load:
        load.wait_for_more(200, "with the whole ISR")
        cluster.nodes[first].stop()  # a controlled shutdown: out of the ISR, which still meets min.insync.replicas
        wait_until(f"{first} out of the ISR", lambda: committed_state(cluster, name).isr == tuple(sorted((leader, eligible))) or None, TIMEOUT_S)
        assert committed_state(cluster, name).elr == ()
        load.wait_for_more(200, "with an ISR of two")
        cluster.nodes[eligible].stop()
        below = wait_until("the ISR below min.insync.replicas", lambda: (p := committed_state(cluster, name)).isr == (leader,) and p, TIMEOUT_S)
        assert below.elr == (eligible,), "the replica that took the ISR below min.insync.replicas is not eligible"
        acked_before_the_leader_died = len(load.acked)
        cluster.nodes[leader].kill()
        # Fenced when its session runs out: no leader, an empty ISR, and both the leader and the follower eligible.
        offline = wait_until("the partition without a leader", lambda: (p := committed_state(cluster, name)).leader == NO_LEADER and p, TIMEOUT_S)
        assert (offline.isr, offline.elr, offline.last_known_elr) == ((), tuple(sorted((leader, eligible))), (leader,))
        restarted_at = time.monotonic()
        cluster.nodes[eligible].launch()
        cluster.nodes[eligible].await_started()
        elected = wait_until("a leader from the ELR", lambda: (p := committed_state(cluster, name)).leader != NO_LEADER and p, TIMEOUT_S)
        elected_after_s = time.monotonic() - restarted_at
        assert elected.leader == eligible and elected.isr == (eligible,) and elected.elr == (leader,)
        assert elected.leader_recovery_state != RECOVERING
        wait_until("Metadata naming the new leader", lambda: partition_state(cluster.nodes[eligible].bootstrap, name)[0] == eligible or None, TIMEOUT_S)
        # Clients see the ELR through DescribeTopicPartitions.
        assert described(cluster.nodes[eligible].bootstrap, name) == (eligible, (eligible,), (leader,), ())
        # min.insync.replicas is 2: acks=all resumes once a second replica is back in the ISR.
        cluster.nodes[first].launch()
        cluster.nodes[first].await_started()
        wait_for_isr(cluster, name, {eligible, first})
        load.wait_for_more(200, "after the ELR member took over")
        # The killed leader restarts uncleanly: it leaves the ELR, truncates to the new leader and rejoins.
        cluster.nodes[leader].launch()
        cluster.nodes[leader].await_started()
        wait_for_isr(cluster, name, set(BROKERS))
        load.wait_for_more(100, "with the whole ISR again")
    states = history(cluster, name)
    assert not any(p.leader_recovery_state == RECOVERING for p in states), "an unclean election happened"
    assert states[-1].elr == () and states[-1].last_known_elr == ()
    print(
        f"leader {leader} killed after {acked_before_the_leader_died} acknowledged records; ELR member {eligible} "
        f"elected {elected_after_s:.1f}s after its restart began; {len(load.acked)} acknowledged in all"
    )
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert_acked_once_at_their_offsets(records, load.acked)
