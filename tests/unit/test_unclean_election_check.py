"""The active controller's periodic unclean election (Kafka's maybeElectUncleanLeaders, every
unclean.leader.election.interval.ms from activation): a partition left leaderless where its topic
allows an unclean election gets a leader without another broker or config change, and only then:
as in Kafka 4.4, turning unclean.leader.election.enable on elects nothing by itself."""

from __future__ import annotations

from broker.controller.configuration_control_manager import OP_SET, UNCLEAN_LEADER_ELECTION_ENABLE
from broker.controller.partition_change_builder import RECOVERING
from broker.controller.quorum_controller import ConfigResource
from broker.metadata.metadata_image import NO_LEADER, TOPIC_RESOURCE, PartitionRegistration
from broker.metadata.metadata_records import ConfigRecord
from tests.unit.preferred_leaders_fakes import single
from tests.unit.test_leader_balance import wait_for
from tests.unit.quorum_controller_fakes import Node, run
from tests.unit.test_quorum_controller import live_brokers, topic


def partition(node: Node) -> PartitionRegistration:
    return node.loader.image.topics["t"].partitions[0]


async def leaderless_with_a_follower_back(node: Node) -> int:
    """Topic "t" (RF 3) whose last ISR member is fenced, one of the two other replicas back: that one."""
    c = node.controller
    epochs = await live_brokers(node, 1, 2, 3)
    [created] = await c.create_topics([topic("t", 1, rf=3)], validate_only=False)
    assert created.error_code == 0
    leader = partition(node).leader
    others = [b for b in (1, 2, 3) if b != leader]
    for b in (*others, leader):  # the leader last: it is the last ISR member, then the partition has none
        await c.broker_heartbeat(b, epochs[b], c.committed_offset, True, False)
    back = others[0]
    await c.broker_heartbeat(back, epochs[back], c.committed_offset, False, False)
    assert partition(node).leader == NO_LEADER  # unclean elections are off: the broker back is not eligible
    return back


def test_a_leaderless_partition_whose_topic_allows_it_gets_an_unclean_leader_an_interval_later() -> None:
    async def scenario() -> None:
        quorum, node, clock = single(unclean_leader_election_interval_ms=5000)
        quorum.elect(1)
        c = node.controller
        back = await leaderless_with_a_follower_back(node)
        # The topic allows unclean elections from now on (committed as any controller commits the change).
        quorum.append(1, [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name="unclean.leader.election.enable", value="true")])
        c.start()
        try:
            assert not await wait_for(lambda: partition(node).leader != NO_LEADER, 1.5)
            clock.now += 5000
            assert await wait_for(lambda: partition(node).leader != NO_LEADER, 2.5)
            p = partition(node)
            assert (p.leader, p.isr, p.leader_recovery_state, p.elr) == (back, (back,), RECOVERING, ())
        finally:
            await c.shutdown()

    run(scenario())


def test_enabling_unclean_elections_elects_nothing_before_the_periodic_check() -> None:
    """Kafka 4.4's controller elects nothing when the config changes (TopicConfig's doc: wait for the
    periodic check, or run kafka-leader-election --election-type unclean); its electUnclean task runs
    every interval from activation."""

    async def scenario() -> None:
        quorum, node, clock = single(unclean_leader_election_interval_ms=5000)
        quorum.elect(1)
        c = node.controller
        await leaderless_with_a_follower_back(node)
        c.start()
        try:
            clock.now += 4000
            enable = ConfigResource(TOPIC_RESOURCE, "t", [(UNCLEAN_LEADER_ELECTION_ENABLE, OP_SET, "true")])
            [altered] = await c.alter_configs([enable], incremental=True, validate_only=False)
            assert altered.error_code == 0
            assert not await wait_for(lambda: partition(node).leader != NO_LEADER, 1.5)
            clock.now += 1000  # the interval since activation, not since the change
            assert await wait_for(lambda: partition(node).leader != NO_LEADER, 2.5)
            assert partition(node).leader_recovery_state == RECOVERING
        finally:
            await c.shutdown()

    run(scenario())


def test_the_check_elects_nothing_where_the_topic_does_not_allow_it() -> None:
    async def scenario() -> None:
        quorum, node, clock = single(unclean_leader_election_interval_ms=5000)
        quorum.elect(1)
        c = node.controller
        epochs = await live_brokers(node, 1, 2)
        [created] = await c.create_topics([topic("t", 1, rf=2)], validate_only=False)
        assert created.error_code == 0
        leader = partition(node).leader
        other = 3 - leader
        for b in (other, leader):
            await c.broker_heartbeat(b, epochs[b], c.committed_offset, True, False)
        await c.broker_heartbeat(other, epochs[other], c.committed_offset, False, False)
        assert await c.elect_unclean_leaders() is False
        assert partition(node).leader == NO_LEADER
        c.start()
        try:
            clock.now += 5000
            assert not await wait_for(lambda: partition(node).leader != NO_LEADER, 1.5)
        finally:
            await c.shutdown()

    run(scenario())
