"""auto.leader.rebalance.enable on the controller: the balancing pass that gives partitions back
to their preferred replicas, and the active controller's timer that runs it every
leader.imbalance.check.interval.seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

import pytest

from broker.config import BrokerConfig, ConfigError, load_config
from broker.metadata.metadata_records import BrokerRegistrationChangeRecord, PartitionChangeRecord
from tests.unit.control_manager_images import Log, cluster_log
from tests.unit.preferred_leaders_fakes import balanced, failed_over, partitions_of, rejoin, single
from tests.unit.quorum_controller_fakes import Clock, FakeQuorum, Node, run
from tests.unit.test_replication_control_manager import assign, fence, manager, part, unfence


def rejoin_isr(log: Log, name: str, broker: int) -> None:
    """``broker`` back in the ISR of every partition of ``name``, as its leaders' AlterPartition would put it."""
    topic_id = log.image.topics[name].topic_id
    log.commit(
        [
            PartitionChangeRecord(partition_id=i, topic_id=topic_id, isr=(*p.isr, broker))
            for i, p in log.image.topics[name].partitions.items()
            if broker not in p.isr
        ]
    )


async def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether ``condition`` holds within ``timeout_s`` of real time."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# --- the balancing pass ------------------------------------------------------------


def test_the_pass_gives_leadership_back_once_the_preferred_replica_is_in_sync() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3], [2, 3, 1], [3, 1, 2])
    fence(rcm, log, 1)
    unfence(rcm, log, 1)
    assert [part(log, "t", p).leader for p in range(3)] == [2, 2, 3]
    # Unfenced but not in sync: the leader stays.
    result = rcm.maybe_balance_partition_leaders(log.image)
    assert (result.records, result.response) == ([], False)
    rejoin_isr(log, "t", 1)
    result = rcm.maybe_balance_partition_leaders(log.image)
    assert result.response is False and len(result.records) == 1
    log.commit(result.records)
    assert [part(log, "t", p).leader for p in range(3)] == [1, 2, 3]
    assert part(log, "t", 0).leader_epoch == 2  # one bump for the failover, one for the return
    assert rcm.maybe_balance_partition_leaders(log.image).records == []


def test_no_per_broker_ratio_gates_the_pass() -> None:
    # One partition in twenty led by another replica is 5 % of broker 1's leaderships, under
    # leader.imbalance.per.broker.percentage's default of 10: Kafka 4's controller moves it all the same.
    log = cluster_log(1, 2)
    rcm = manager()
    assign(rcm, log, "t", *([[1, 2]] * 20))
    topic_id = log.image.topics["t"].topic_id
    log.commit([PartitionChangeRecord(partition_id=7, topic_id=topic_id, leader=2)])
    result = rcm.maybe_balance_partition_leaders(log.image)
    assert result.records == [PartitionChangeRecord(partition_id=7, topic_id=topic_id, leader=1)]


def test_a_preferred_replica_that_may_not_lead_is_skipped() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "fenced", [1, 2])
    assign(rcm, log, "shutting", [3, 2])
    fence(rcm, log, 1)
    topic_id = log.image.topics["shutting"].topic_id
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=2), BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=0, in_controlled_shutdown=1)])
    rejoin_isr(log, "fenced", 1)  # in the ISR, yet fenced
    assert rcm.maybe_balance_partition_leaders(log.image).records == []


def test_the_pass_stops_at_its_cap_and_says_more_may_wait() -> None:
    log = cluster_log(1, 2)
    rcm = manager()
    assign(rcm, log, "t", *([[1, 2]] * 5))
    fence(rcm, log, 1)
    unfence(rcm, log, 1)
    rejoin_isr(log, "t", 1)
    first = rcm.maybe_balance_partition_leaders(log.image, max_elections=3)
    assert len(first.records) == 3 and first.response is True
    log.commit(first.records)
    second = rcm.maybe_balance_partition_leaders(log.image, max_elections=3)
    assert len(second.records) == 2 and second.response is False


# --- the active controller's timer ----------------------------------------------------


def test_one_pass_on_the_active_controller() -> None:
    async def scenario() -> None:
        quorum, node, _ = single()
        quorum.elect(1)
        epochs, preferred = await failed_over(node)
        assert await node.controller.balance_partition_leaders() is False and not balanced(node, preferred)
        await rejoin(node, epochs, 1)
        assert await node.controller.balance_partition_leaders() is False
        assert balanced(node, preferred)

    run(scenario())


@pytest.mark.parametrize("enabled", [True, False])
def test_the_timer_balances_an_interval_after_taking_over_and_only_if_enabled(enabled: bool) -> None:
    async def scenario() -> None:
        quorum, node, clock = single(auto_leader_rebalance_enable=enabled, leader_imbalance_check_interval_seconds=5)
        quorum.elect(1)
        epochs, preferred = await failed_over(node)
        await rejoin(node, epochs, 1)
        node.controller.start()
        try:
            # The timer looks at least once a second; the first pass is due 5 s (of the fake clock) after activation.
            assert not await wait_for(lambda: balanced(node, preferred), 1.2)
            clock.now += 5000
            assert await wait_for(lambda: balanced(node, preferred), 1.5) is enabled
        finally:
            await node.controller.shutdown()

    run(scenario())


def test_a_pass_that_reaches_its_cap_runs_again_at_once() -> None:
    async def scenario() -> None:
        quorum, node, clock = single(leader_imbalance_check_interval_seconds=5)
        quorum.elect(1)
        epochs, preferred = await failed_over(node, partitions=3100)
        await rejoin(node, epochs, 1)
        assert sum(1 for i, p in enumerate(partitions_of(node)) if p.leader != preferred[i]) > 1000
        node.controller.start()
        try:
            clock.now += 5000
            assert await wait_for(lambda: sum(p.leader == 1 for p in partitions_of(node)) == 1000, 1.5)
            clock.now += 10  # the rerun is due 10 ms later, not an interval later
            assert await wait_for(lambda: balanced(node, preferred), 1.5)
        finally:
            await node.controller.shutdown()

    run(scenario())


def test_the_timer_does_nothing_on_a_controller_that_is_not_active() -> None:
    async def scenario() -> None:
        quorum = FakeQuorum()
        quorum.auto_commit = True
        clock = Clock()
        nodes = {n: Node(quorum, n, clock, leader_imbalance_check_interval_seconds=5) for n in (1, 2)}
        quorum.elect(1)
        epochs, preferred = await failed_over(nodes[1])
        await rejoin(nodes[1], epochs, 1)
        nodes[2].controller.start()
        try:
            clock.now += 5000
            assert not await wait_for(lambda: balanced(nodes[1], preferred), 1.2)
        finally:
            await nodes[2].controller.shutdown()

    run(scenario())


def test_the_settings_have_kafka_s_names_and_defaults(tmp_path: Path) -> None:
    defaults = BrokerConfig()
    assert (defaults.auto_leader_rebalance_enable, defaults.leader_imbalance_check_interval_seconds) == (True, 300)
    path = tmp_path / "server.properties"
    # Kafka 4's controller has no per-broker ratio: the old setting is warned about and dropped, as Kafka does.
    path.write_text("auto.leader.rebalance.enable=false\nleader.imbalance.check.interval.seconds=7\nleader.imbalance.per.broker.percentage=25\n")
    config = load_config(path, {})
    assert (config.auto_leader_rebalance_enable, config.leader_imbalance_check_interval_seconds) == (False, 7)
    with pytest.raises(ConfigError, match="leader.imbalance.check.interval.seconds"):
        load_config(path, {"leader.imbalance.check.interval.seconds": "0"})
