"""The transactions and groups workloads against three combined nodes, through three SIGKILLs:
the transaction coordinator's node, the output partition's leader, the group coordinator's node,
each restarted (and back in every ISR) before the next. Then the workloads stop, the cluster is
healed, the drain reads everything back, and every check must find nothing.

The faults here are a fixed script, not a nemesis: the campaign runner drives the same workloads
through the Workload protocol with faults of its own. About 65-90 s on a busy 2-core machine, a
third to a half of it the cluster's start.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.chaos.history import NEMESIS, History
from tests.chaos.workload import Verdict, Workload
from tests.chaos.workloads.groups import GroupsWorkload
from tests.chaos.workloads.transactions import TransactionsWorkload
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import FAST_FAILOVER, partition_state

TIMEOUT_S = 60.0
INTERNAL_TOPIC_PARTITIONS = 50
ALL = {1, 2, 3}
# Operations each workload must complete after a kill before the node comes back, and again
# before the next kill: proof that it went on through the fault and after it.
PROGRESS = 5
MEMBER_SESSION_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("chaos-workloads"),
        combined=3,
        proxy_inter_broker=True,
        overrides={
            **FAST_FAILOVER,
            "broker.session.timeout.ms": "2000",
            "broker.heartbeat.interval.ms": "250",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "group.initial.rebalance.delay.ms": "0",
            # Killed group members are noticed within two seconds: the group rebalances often.
            "group.min.session.timeout.ms": str(MEMBER_SESSION_MS),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        },
    )
    try:
        yield c.start()
    finally:
        c.close()


def progressed(history: History, since: int) -> bool:
    """Both workloads completed PROGRESS operations (committed transactions, committed offsets)
    after op index ``since``."""
    ops = history.ops[since:]
    txns = sum(op.type == "ok" and op.f == "txn" for op in ops)
    commits = sum(op.type == "ok" and op.f == "commit" for op in ops)
    return txns >= PROGRESS and commits >= PROGRESS


def in_every_isr(cluster: KafkaCluster, partitions: list[tuple[str, int]]) -> bool:
    return all(set(partition_state(cluster.bootstrap, t, p)[1]) == ALL for t, p in partitions)


def kill_each(victims: list[tuple[str, tuple[str, int]]], cluster: KafkaCluster, history: History, watched: list[tuple[str, int]]) -> None:
    """SIGKILL the leader of each victim's partition in turn; the workloads must go on while it is
    down, and again once it is back in every ISR of ``watched``."""
    mark = 0
    wait_until("both workloads under way", lambda: progressed(history, mark), TIMEOUT_S)
    for victim, (topic, partition) in victims:
        node, _ = partition_state(cluster.bootstrap, topic, partition)
        history.info(NEMESIS, "start-kill", {"node": node, "as": victim})
        cluster.nodes[node].kill()
        wait_until(f"a new leader of {topic}-{partition} after killing the {victim}", lambda: partition_state(cluster.bootstrap, topic, partition)[0] not in (node, -1) or None, TIMEOUT_S)
        mark = len(history.ops)
        wait_until(f"both workloads progressing with the {victim} down", lambda: progressed(history, mark), TIMEOUT_S)
        cluster.nodes[node].launch()
        cluster.nodes[node].await_started()
        history.info(NEMESIS, "stop-kill", {"node": node})
        wait_until(f"node {node} back in every ISR", lambda: in_every_isr(cluster, watched), TIMEOUT_S)
        mark = len(history.ops)
        wait_until(f"both workloads progressing after node {node} came back", lambda: progressed(history, mark), TIMEOUT_S)


def restart_the_dead(cluster: KafkaCluster) -> None:
    down = [node for node in cluster.nodes.values() if not node.running]
    for node in down:
        node.launch()
    for node in down:
        node.await_started()


@pytest.mark.timeout(300)
def test_transactions_and_groups_through_coordinator_and_leader_kills(cluster: KafkaCluster, tmp_path: Path) -> None:
    started = time.monotonic()
    history = History()
    txns = TransactionsWorkload(loops=3, seed=1)
    groups = GroupsWorkload(members=3, session_timeout_ms=MEMBER_SESSION_MS, seed=1, log_dir=tmp_path)
    workloads: list[Workload] = [txns, groups]
    for w in workloads:
        w.setup(cluster.bootstrap)
    txn_coordinator = (TRANSACTION_STATE_TOPIC, partition_for(txns.transactional_id(0), INTERNAL_TOPIC_PARTITIONS))
    group_coordinator = (GROUP_METADATA_TOPIC, partition_for(groups.group, INTERNAL_TOPIC_PARTITIONS))
    watched = [
        txn_coordinator, group_coordinator, (txns.output, 0),
        *((txns.input, p) for p in range(txns.loops)), *((groups.topic, p) for p in range(groups.partitions)),
    ]
    for w in workloads:
        w.start(history, lambda: cluster.bootstrap)
    try:
        try:
            kill_each([("transaction coordinator", txn_coordinator), ("output partition leader", (txns.output, 0)), ("group coordinator", group_coordinator)], cluster, history, watched)
        finally:
            for w in workloads:
                w.stop()
        assert not [f for w in workloads for f in w.failures()], "a workload's client died"
        cluster.heal()
        restart_the_dead(cluster)
        for w in workloads:
            w.drain(history, cluster.bootstrap)
    finally:
        history.dump(tmp_path / "history.jsonl")
    verdicts: list[Verdict] = [v for w in workloads for v in w.check(history.ops)]
    print(f"\nchaos workloads in {time.monotonic() - started:.0f}s, {len(history.ops)} ops in {tmp_path / 'history.jsonl'} (members' logs beside it)")
    for v in verdicts:
        print(f"  {v.workload}/{v.check}: {v.count} {v.examples[:2] if v.count else ''}")
    print(f"  stats: {verdicts[0].stats}, {verdicts[-1].stats}")
    invalid = [v for v in verdicts if not v.valid]
    assert not invalid, "anomalies: " + "; ".join(f"{v.workload}/{v.check}: {v.count}, e.g. {v.examples}" for v in invalid)
