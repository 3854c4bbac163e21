"""Metadata snapshots: every node snapshots its image and trims its log; a node that was away
longer than the log is kept catches up from the leader's snapshot. The cluster is formatted at
metadata.version 4.0 (`storage format --release-version 4.0`) and upgraded to 4.4 under produce
traffic by the first test, so the snapshots the others write and load hold Kafka 4.4's record
versions (RegisterBrokerRecord v4)."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3 import request as api_versions_v3

from broker.metadata.metadata_records import RegisterBrokerRecord, decode_metadata_record
from protocol.records import iter_batches, iter_records
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.kbroker_command import run_in_process
from tests.cluster.test_replication import create, partition_state, produce, read_all
from tests.integration.helpers import unique_topic
from tests.integration.wire import request

TIMEOUT_S = 30.0
TOPICS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Tiny segments and a snapshot every few KiB, so a few dozen topics trim the log several times.
    c = KafkaCluster(
        tmp_path_factory.mktemp("snapshots"),
        combined=3,
        overrides={
            "metadata.log.segment.min.bytes": "4096",
            "metadata.log.segment.bytes": "4096",
            "metadata.log.max.record.bytes.between.snapshots": "2048",
            # The log before a snapshot goes once the log and snapshots pass this size (Kafka's
            # cleanSnapshots): at 0 bytes, each new snapshot trims the log up to itself.
            "metadata.max.retention.bytes": "0",
            # A consumer group creates __consumer_offsets in one Raft batch: at 50 partitions that is
            # ~6 KB, past these 4 KiB segments (the leader cannot append it). Three partitions fit.
            "offsets.topic.num.partitions": "3",
            # As test_replication's cluster: a restarted node is back in the ISR within seconds.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": "4000",
        },
        format_args=("--release-version", "4.0"),
    )
    try:
        yield c.start()
    finally:
        c.close()


def snapshot_offsets(node_data: Path) -> list[int]:
    return sorted(int(p.name.split("-")[0]) for p in (node_data / "__cluster_metadata-0").glob("*.checkpoint"))


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in names], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


@contextmanager
def producing(bootstrap: str, name: str) -> Iterator[list[tuple[int, int, bytes]]]:
    """acks=all batches of 20 records in a thread until the block ends; what was acknowledged so far."""
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def keep_producing() -> None:
        batch = 0
        while not stop.is_set():
            acked.extend(produce(bootstrap, name, [b"u%d-%d" % (batch, i) for i in range(20)]))
            batch += 1

    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        yield acked
    finally:
        stop.set()
        writer.join(60.0)


def metadata_version(bootstrap: str) -> int:
    """The metadata.version this broker's ApiVersions shows finalized."""
    r = request(bootstrap, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return next(int(f.max_version_level) for f in r.finalized_features if f.name == "metadata.version")


def registrations(node_data: Path) -> list[RegisterBrokerRecord]:
    """The RegisterBrokerRecords in a node's metadata log segments and snapshots, each with the
    version it was written at (record_version), in no particular order."""
    found: list[RegisterBrokerRecord] = []
    directory = node_data / "__cluster_metadata-0"
    for path in sorted(directory.glob("*.log")) + sorted(directory.glob("*.checkpoint")):
        for header, batch in iter_batches(path.read_bytes()):
            if header.attributes & 0x20:  # a control batch (leader change, snapshot header)
                continue
            for record in iter_records(batch, header):
                if record.value is not None and isinstance(decoded := decode_metadata_record(record.value), RegisterBrokerRecord):
                    found.append(decoded)
    return found


def test_a_cluster_formatted_at_4_0_upgrades_to_4_4_under_traffic(cluster: KafkaCluster) -> None:
    """`kbroker features upgrade --metadata 4.4` while an RF 3 topic takes acks=all traffic; then a
    broker restarts and re-registers at the new record version. Nothing acknowledged is lost and
    the ISR is whole again."""
    assert {n.node_id: metadata_version(n.bootstrap) for n in cluster.brokers} == {1: 25, 2: 25, 3: 25}
    # At 4.0-IV3 the controller writes RegisterBrokerRecord v3 (log_dirs), as Kafka does.
    assert {r.broker_id: r.record_version for r in registrations(cluster.nodes[1].data_dir)} == {1: 3, 2: 3, 3: 3}

    name = unique_topic("upgrade")
    create(cluster.bootstrap, name)
    with producing(cluster.bootstrap, name) as acked:
        # Two acknowledged batches in each phase show the traffic going on through it.
        wait_until("records acknowledged at 4.0", lambda: len(acked) >= 40 or None, 60.0)
        # The commands in this process: the same code as `python -m broker`, without its interpreter start.
        up = run_in_process("features", "--bootstrap-server", cluster.nodes[2].bootstrap, "upgrade", "--metadata", "4.4")
        assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 33.\n"), up.stderr
        wait_until("every broker at 4.4-IV2", lambda: all(metadata_version(n.bootstrap) == 33 for n in cluster.brokers) or None, 30.0)
        at_upgrade = len(acked)
        wait_until("records acknowledged at 4.4", lambda: len(acked) >= at_upgrade + 40 or None, 60.0)

        leader, _ = partition_state(cluster.bootstrap, name)
        restarted = cluster.nodes[leader]
        restarted.restart()
        at_restart = len(acked)
        wait_until("records acknowledged after the restart", lambda: len(acked) >= at_restart + 40 or None, 60.0)
    assert metadata_version(restarted.bootstrap) == 33

    # The restarted broker (the partition's leader) registered again, at RegisterBrokerRecord v4
    # (4.3-IV0 and later): its newest registration, in the log or in a snapshot written since.
    mine = [r for r in registrations(cluster.nodes[1].data_dir) if r.broker_id == restarted.node_id]
    assert max(mine, key=lambda r: r.broker_epoch).record_version == 4, [(r.broker_epoch, r.record_version) for r in mine]

    assert wait_until("a full ISR", lambda: (s := partition_state(cluster.bootstrap, name)) and len(s[1]) == 3 and s, 60.0)[1] == (1, 2, 3)
    got = read_all(cluster.bootstrap, name, 1, len(acked))
    assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records missing"
    assert len({offset for _, offset, _ in got}) == len(got)  # dense, never reused

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept until the answer is in: it is the handle
    nodes = admin.describe_cluster(request_timeout=30).result(timeout=30).nodes
    assert sorted(n.id for n in nodes) == [1, 2, 3]
    replication = run_in_process("metadata-quorum", "--bootstrap-server", cluster.bootstrap.split(",")[0], "describe", "--replication")
    assert replication.returncode == 0, replication.stderr
    assert sorted(int(re.match(r"\s*(\d+)", line).group(1)) for line in replication.stdout.splitlines()[1:]) == [1, 2, 3]


def test_a_node_behind_the_log_start_catches_up_from_the_leaders_snapshot(cluster: KafkaCluster) -> None:
    away = cluster.nodes[3]
    away.kill()
    had = snapshot_offsets(away.data_dir)
    names = [unique_topic(f"snap{i}") for i in range(TOPICS)]
    for start in range(0, TOPICS, 5):
        create_topics(cluster.nodes[1].bootstrap, names[start : start + 5])

    def trimmed() -> int | None:
        """The lowest log start offset of the two live nodes, once both trimmed past every snapshot node 3 has."""
        starts = []
        for node in (cluster.nodes[1], cluster.nodes[2]):
            moved = node.events_named("raft.log_start_moved")
            if not moved:
                return None
            starts.append(int(moved[-1]["log_start_offset"]))
        floor = min(starts)
        return floor if floor > max(had, default=0) else None

    log_start = wait_until("the live nodes trimming their logs", trimmed, TIMEOUT_S)
    for node in (cluster.nodes[1], cluster.nodes[2]):
        assert snapshot_offsets(node.data_dir), f"node {node.node_id} wrote no snapshot"

    away.launch()
    away.await_started()
    wait_until("node 3 serving every topic", lambda: set(names) <= topic_names(away.bootstrap) or None, TIMEOUT_S)
    loaded = [int(e["offset"]) for e in away.events_named("raft.snapshot_loaded", current_run=True)]
    assert loaded and max(loaded) >= log_start, (loaded, log_start)


def test_a_restarted_node_rebuilds_its_image_from_its_own_snapshot_and_log(cluster: KafkaCluster) -> None:
    node = cluster.nodes[2]
    before = topic_names(node.bootstrap)
    node.kill()
    node.launch()
    node.await_started()
    assert wait_until("node 2 serving what it had", lambda: before <= topic_names(node.bootstrap) or None, TIMEOUT_S)
    assert node.events_named("raft.snapshot_loaded", current_run=True)
