"""The active controller is paused (SIGSTOP) past the broker session, then resumed: its successor
fences it, and only it. Each broker's heartbeat in flight to the paused controller used to wait
out the controller channel's request timeout (2 s), longer than the broker session (1 s here, as
in the chaos bench's fast profile), so the new controller heard from no broker within its first
session and fenced all three, its own broker included; a Metadata response then listed no broker,
and librdkafka clients decommissioned every broker they knew and never found their group
coordinator again. A request waiting on a controller now goes to its successor as soon as Raft
names one."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from typing import Iterator

import pytest

from tests.cluster.cluster import KafkaCluster, leader_id, wait_until

TIMEOUT_S = 30.0
PAUSES = 3
PAUSE_S = 2.0
OVERRIDES = {
    "broker.session.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "150",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.election.backoff.max.ms": "300",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("controller-pause"), combined=3, overrides=OVERRIDES)
    try:
        yield c.start()
    finally:
        c.close()


def fencings(cluster: KafkaCluster) -> Counter[tuple[int, int]]:
    """(controller, broker) of every controller.broker_fenced logged so far, counted."""
    found: Counter[tuple[int, int]] = Counter()
    for node in cluster.nodes.values():
        for line in node.log_path.read_text().splitlines():
            if '"controller.broker_fenced"' in line:
                event = json.loads(line)
                found[(event["node"], event["broker"])] += 1
    return found


def active_controller(cluster: KafkaCluster, exclude: int | None = None) -> int:
    asked = [n for n in cluster.nodes if n != exclude]
    return wait_until("an active controller", lambda: next((lid for n in asked if (lid := leader_id(cluster, n)) not in (None, exclude)), None), TIMEOUT_S)


def test_pausing_the_active_controller_fences_it_alone(cluster: KafkaCluster) -> None:
    for _ in range(PAUSES):
        paused = active_controller(cluster)
        before = fencings(cluster)
        proc = cluster.nodes[paused].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            active_controller(cluster, exclude=paused)
            time.sleep(PAUSE_S)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        # The paused node is fenced by its successor (and unfenced once it heartbeats again).
        wait_until(f"node {paused} fenced", lambda: any(b == paused for _, b in fencings(cluster) - before) or None, TIMEOUT_S)
        time.sleep(1.0)
        others = sorted((c, b) for c, b in fencings(cluster) - before if b != paused)
        assert others == [], f"pausing controller {paused} got brokers that kept running fenced: {others}"
