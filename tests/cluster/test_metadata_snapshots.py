"""Metadata snapshots: every node snapshots its image and trims its log; a node that was away
longer than the log is kept catches up from the leader's snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.helpers import unique_topic

TIMEOUT_S = 30.0
TOPICS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Tiny segments and a snapshot every few KiB, so a few dozen topics trim the log several times.
    c = KafkaCluster(
        tmp_path_factory.mktemp("snapshots"),
        combined=3,
        overrides={"metadata.log.segment.min.bytes": "4096", "metadata.log.segment.bytes": "4096", "metadata.log.max.record.bytes.between.snapshots": "2048"},
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
