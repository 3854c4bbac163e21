"""The active controller dies (SIGKILL), a broker stops heartbeating (SIGSTOP): the cluster goes on."""

from __future__ import annotations

import os
import signal
import time
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from broker.server import RAFT_RESIGN_TIMEOUT_MS
from tests.cluster.cluster import KafkaCluster, leader_id, wait_until
from tests.integration.helpers import unique_topic

TIMEOUT_S = 30.0
SESSION_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("failover"),
        combined=3,
        overrides={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "500"},
    )
    try:
        yield c.start()
    finally:
        c.close()


def create_through(bootstrap: str, name: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    futures = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futures[name].result(timeout=TIMEOUT_S)
    return True


def live_broker_ids(bootstrap: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    return sorted(admin.list_topics(timeout=10).brokers)


def test_killing_the_active_controller_elects_another_and_the_node_rejoins(cluster: KafkaCluster) -> None:
    old = wait_until("a quorum leader", lambda: leader_id(cluster, 1), TIMEOUT_S)
    cluster.nodes[old].kill()
    survivors = [n for n in cluster.nodes if n != old]
    new = wait_until("a new leader", lambda: (lid := leader_id(cluster, survivors[0])) not in (None, old) and lid, TIMEOUT_S)
    assert new in survivors
    for node_id in survivors:
        node = cluster.nodes[node_id]
        assert wait_until(f"CreateTopics through node {node_id}", lambda: create_through(node.bootstrap, unique_topic(f"after{node_id}")), TIMEOUT_S)
    cluster.nodes[old].launch()
    cluster.nodes[old].await_started()
    # The restarted node follows the new leader and serves the topics created while it was down.
    assert wait_until("the old leader following", lambda: leader_id(cluster, old) == new or None, TIMEOUT_S)
    assert live_broker_ids(cluster.nodes[old].bootstrap) == [1, 2, 3]


def test_a_broker_that_stops_heartbeating_is_fenced_then_comes_back(cluster: KafkaCluster) -> None:
    leader = wait_until("a quorum leader", lambda: leader_id(cluster, 1), TIMEOUT_S)
    stopped = next(n for n in cluster.nodes if n != leader)
    other = cluster.nodes[next(n for n in cluster.nodes if n not in (leader, stopped))]
    proc = cluster.nodes[stopped].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        wait_until(f"broker {stopped} fenced", lambda: stopped not in live_broker_ids(other.bootstrap), TIMEOUT_S)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_until(f"broker {stopped} unfenced again", lambda: stopped in live_broker_ids(other.bootstrap), TIMEOUT_S)
    events = [e for e in cluster.nodes[stopped].log_events(current_run=True) if e.get("event") in ("broker.fenced", "broker.registered", "broker.unfenced")]
    assert [e["event"] for e in events][-1] == "broker.unfenced"


def test_a_clean_shutdown_of_the_active_controller_hands_over_without_waiting_out_the_resign_timeout(cluster: KafkaCluster) -> None:
    old = wait_until("a quorum leader", lambda: leader_id(cluster, 1), TIMEOUT_S)
    node = cluster.nodes[old]
    started = time.monotonic()
    node.stop()
    took_s = time.monotonic() - started
    # The resigned leader stays until it hears the next leader's BeginQuorumEpoch; with its
    # controller listener closed first it never did, and every such shutdown took the whole timeout.
    changes = [e for e in node.events_named("raft.leader_change", current_run=True) if e.get("leader") not in (None, old)]
    node.launch()
    node.await_started()
    assert changes, "the resigned leader never saw its successor"
    assert took_s < RAFT_RESIGN_TIMEOUT_MS / 1000 - 1, f"SIGTERM to exit took {took_s:.1f}s"
