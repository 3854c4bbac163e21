"""Preferred leaders across three broker processes: once a broker killed with SIGKILL is back in
its partitions' ISRs, `kbroker leader-election --election-type preferred --all-topic-partitions`
gives each partition back to its first replica, and with auto.leader.rebalance.enable the active
controller does so on its own.

Each part has its own cluster: auto.leader.rebalance.enable is a static setting, and with it on
the controller would race the command for the same elections.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.kbroker_command import run_in_process
from tests.integration.helpers import unique_topic

TIMEOUT_S = 60.0
PARTITIONS = 3
# Short enough for a test to see a dead broker fenced and a returning one back in the ISR soon.
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "4000"}


def started(root: Path, **overrides: str) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(root, combined=3, overrides={**OVERRIDES, **overrides})
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[KafkaCluster]:
    yield from started(tmp_path, **{"auto.leader.rebalance.enable": "false"})


@pytest.fixture
def automatic(tmp_path: Path) -> Iterator[KafkaCluster]:
    yield from started(tmp_path, **{"leader.imbalance.check.interval.seconds": "1"})


def layout(bootstrap: str, name: str) -> dict[int, tuple[int, tuple[int, ...], frozenset[int]]]:
    """Each partition's (leader, replicas, ISR) as Metadata shows them."""
    topic = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000}).list_topics(name, timeout=TIMEOUT_S).topics[name]
    return {i: (p.leader, tuple(p.replicas), frozenset(p.isrs)) for i, p in topic.partitions.items()}


def preferred_lead(bootstrap: str, name: str) -> bool:
    return all(leader == replicas[0] for leader, replicas, _ in layout(bootstrap, name).values())


def kill_and_return(cluster: KafkaCluster, name: str) -> tuple[int, list[int]]:
    """Create ``name`` (RF 3), kill the first replica of its partition 0 with SIGKILL, wait for its
    leaderships to move, restart it and wait for it in every ISR: (the broker, the partitions it prefers)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
    admin.create_topics([NewTopic(name, PARTITIONS, 3)], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)

    def full_isrs() -> bool:
        state = layout(cluster.bootstrap, name)
        return len(state) == PARTITIONS and all(len(isr) == 3 for _, _, isr in state.values())

    wait_until("full ISRs", full_isrs, TIMEOUT_S)
    assert preferred_lead(cluster.bootstrap, name)
    state = layout(cluster.bootstrap, name)
    victim = state[0][1][0]
    preferred_by_victim = sorted(i for i, (_, replicas, _) in state.items() if replicas[0] == victim)
    cluster.nodes[victim].warm_up()  # its next interpreter imports the broker while it is down
    cluster.nodes[victim].kill()
    survivors = cluster.bootstrap
    wait_until(f"broker {victim}'s leaderships to move", lambda: all(leader not in (victim, -1) for leader, _, _ in layout(survivors, name).values()), TIMEOUT_S)
    cluster.nodes[victim].launch()
    cluster.nodes[victim].await_started()
    wait_until(f"broker {victim} back in every ISR", lambda: all(victim in isr for _, _, isr in layout(cluster.bootstrap, name).values()), TIMEOUT_S)
    return victim, preferred_by_victim


def leader_election(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`kbroker leader-election`, in process."""
    return run_in_process("leader-election", "--bootstrap-server", bootstrap, *args)


def test_the_command_gives_leadership_back_to_the_preferred_replicas(manual: KafkaCluster) -> None:
    name = unique_topic("elect")
    victim, preferred = kill_and_return(manual, name)
    # In sync again, yet not leading: nothing moves leadership back without the command here.
    state = layout(manual.bootstrap, name)
    assert all(state[i][0] != victim for i in preferred)
    done = leader_election(manual.bootstrap, "--election-type", "preferred", "--all-topic-partitions")
    assert done.returncode == 0, done.stderr
    partitions = ", ".join(f"{name}-{i}" for i in preferred)
    assert done.stdout.splitlines() == [f"Successfully completed leader election (PREFERRED) for partitions {partitions}"]
    wait_until("every partition led by its first replica", lambda: preferred_lead(manual.bootstrap, name), TIMEOUT_S)
    # Nothing left to elect: Kafka's tool prints nothing for --all-topic-partitions then.
    again = leader_election(manual.bootstrap, "--election-type", "preferred", "--all-topic-partitions")
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    one = leader_election(manual.bootstrap, "--election-type", "preferred", "--topic", name, "--partition", str(preferred[0]))
    assert (one.returncode, one.stdout) == (0, f"Valid replica already elected for partitions {name}-{preferred[0]}\n"), one.stderr


def test_the_controller_gives_leadership_back_on_its_own(automatic: KafkaCluster) -> None:
    name = unique_topic("auto")
    kill_and_return(automatic, name)
    # leader.imbalance.check.interval.seconds is 1: a few checks at most once the broker is in sync.
    wait_until("every partition led by its first replica without the command", lambda: preferred_lead(automatic.bootstrap, name), TIMEOUT_S)
