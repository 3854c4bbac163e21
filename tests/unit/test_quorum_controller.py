"""QuorumController on an in-memory quorum: active only as the reported leader, writes answered
once committed, NOT_CONTROLLER when leadership moves, bootstrap, broker registration, heartbeats,
fencing by session timeout, failover sessions and controlled shutdown."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from broker.controller.controller_logic import CreatableTopic
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL
from broker.controller.quorum_controller import ConfigResource, NotControllerError
from broker.metadata.metadata_image import BROKER_RESOURCE, NO_LEADER
from broker.metadata.metadata_records import ConfigRecord, FeatureLevelRecord, RegisterBrokerRecord
from tests.unit.quorum_controller_fakes import Clock, FakeQuorum, Node, registration, run, settle

SESSION_MS = 9000


def topic(name: str, partitions: int = 1, rf: int = 3) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, assignments=None, configs={})


def cluster(*node_ids: int, auto_commit: bool = True) -> tuple[FakeQuorum, dict[int, Node], Clock]:
    quorum = FakeQuorum()
    quorum.auto_commit = auto_commit
    clock = Clock()
    nodes = {n: Node(quorum, n, clock) for n in node_ids}
    return quorum, nodes, clock


async def live_brokers(node: Node, *broker_ids: int) -> dict[int, int]:
    """Register the brokers and heartbeat them until unfenced; their epochs."""
    epochs = {}
    for b in broker_ids:
        reply = await node.controller.register_broker(registration(b))
        assert reply.error_code == 0
        epochs[b] = reply.broker_epoch
    for b, epoch in epochs.items():
        beat = await node.controller.broker_heartbeat(b, epoch, node.controller.committed_offset, False, False)
        assert not beat.is_fenced and beat.is_caught_up
    return epochs


def test_inactive_until_raft_reports_this_node_as_leader() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, 2)
        assert not nodes[1].controller.is_active
        with pytest.raises(NotControllerError):
            await nodes[1].controller.create_topics([topic("t")], validate_only=False)
        quorum.elect(2)
        assert nodes[2].controller.is_active and not nodes[1].controller.is_active
        with pytest.raises(NotControllerError):
            await nodes[1].controller.register_broker(registration(7))

    run(scenario())


def test_first_activation_on_an_empty_log_writes_the_new_cluster_features_once() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, 2)
        quorum.elect(1)
        await settle()
        records = [r for b in quorum.committed for r in b.records]
        assert records == [
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION_LEVEL),
            FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
            FeatureLevelRecord(name="group.version", feature_level=1),
            FeatureLevelRecord(name="share.version", feature_level=2),
            FeatureLevelRecord(name="streams.version", feature_level=1),
            FeatureLevelRecord(name="transaction.version", feature_level=2),
            # Eligible leader replicas on: the cluster-wide min.insync.replicas, the controller's (Kafka's default).
            ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="min.insync.replicas", value="1"),
        ]
        assert nodes[2].loader.image.features[METADATA_VERSION_FEATURE] == METADATA_VERSION_LEVEL
        quorum.elect(2)
        quorum.elect(1)
        await settle()
        assert [r for b in quorum.committed for r in b.records] == records

    run(scenario())


def test_the_first_write_waits_for_the_bootstrap_to_commit() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, auto_commit=False)
        quorum.elect(1)
        task = asyncio.ensure_future(nodes[1].controller.register_broker(registration(5)))
        await settle()
        assert len(quorum.pending) == 1 and not task.done()
        quorum.commit()
        await settle()
        # Decided over the image with metadata.version, its record appended only now.
        assert len(quorum.pending) == 1 and isinstance(quorum.pending[0].records[0], RegisterBrokerRecord)
        quorum.commit()
        reply = await task
        assert reply.error_code == 0 and reply.broker_epoch == quorum.committed[-1].base_offset

    run(scenario())


def test_a_write_is_answered_only_once_committed_and_applied() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, auto_commit=True)
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2, 3)
        quorum.auto_commit = False
        task = asyncio.ensure_future(nodes[1].controller.create_topics([topic("orders", 3)], validate_only=False))
        await settle()
        assert not task.done() and len(quorum.pending) == 1
        quorum.commit()
        [result] = await task
        assert result.error_code == 0
        assert sorted(nodes[1].loader.image.topics["orders"].partitions) == [0, 1, 2]

    run(scenario())


def test_writes_are_serialized_over_the_committed_image() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2, 3)
        c = nodes[1].controller
        first, second = await asyncio.gather(c.create_topics([topic("dup")], False), c.create_topics([topic("dup")], False))
        assert sorted([first[0].error_code, second[0].error_code]) == [0, ErrorCode.topic_already_exists]

    run(scenario())


def test_losing_leadership_fails_waiting_writes_with_not_controller() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, 2)
        quorum.auto_commit = True
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2, 3)
        quorum.auto_commit = False
        task = asyncio.ensure_future(nodes[1].controller.create_topics([topic("lost")], validate_only=False))
        queued = asyncio.ensure_future(nodes[1].controller.delete_topics([("lost", None)]))
        await settle()
        quorum.elect(2)
        with pytest.raises(NotControllerError):
            await task
        with pytest.raises(NotControllerError):
            await queued
        assert not nodes[1].controller.is_active
        assert "lost" not in nodes[2].loader.image.topics

    run(scenario())


def test_resignation_without_a_new_leader_deactivates() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, auto_commit=False)
        quorum.elect(1)
        task = asyncio.ensure_future(nodes[1].controller.register_broker(registration(4)))
        await settle()
        quorum.resign()
        with pytest.raises(NotControllerError):
            await task
        assert not nodes[1].controller.is_active

    run(scenario())


def test_a_node_that_stops_leading_is_inactive_before_raft_says_so() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        await settle()
        quorum.leader_id = None  # resigned inside Raft; the LeaderChange is not delivered yet
        assert not nodes[1].controller.is_active
        with pytest.raises(NotControllerError):
            await nodes[1].controller.register_broker(registration(4))

    run(scenario())


def test_a_cancelled_write_still_comes_before_the_next_decision() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2, 3)
        quorum.auto_commit = False
        c = nodes[1].controller
        task = asyncio.ensure_future(c.create_topics([topic("once")], validate_only=False))
        await settle()
        task.cancel()
        second = asyncio.ensure_future(c.create_topics([topic("once")], validate_only=False))
        await settle()
        assert len(quorum.pending) == 1  # the second waits for the first's records
        quorum.commit()
        await settle()
        [result] = await second
        assert result.error_code == ErrorCode.topic_already_exists

    run(scenario())


def test_registration_epoch_is_the_record_offset_and_the_broker_starts_fenced() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        reply = await nodes[1].controller.register_broker(registration(3))
        assert reply.error_code == 0
        [batch] = [b for b in quorum.committed if b.records and isinstance(b.records[0], RegisterBrokerRecord)]
        assert reply.broker_epoch == batch.base_offset
        broker = nodes[1].loader.image.brokers[3]
        assert broker.fenced and broker.epoch == reply.broker_epoch
        # Behind its registration record: still fenced.
        beat = await nodes[1].controller.broker_heartbeat(3, reply.broker_epoch, reply.broker_epoch - 1, False, False)
        assert beat.is_fenced and not beat.is_caught_up
        beat = await nodes[1].controller.broker_heartbeat(3, reply.broker_epoch, reply.broker_epoch, False, False)
        assert not beat.is_fenced and beat.is_caught_up
        assert not nodes[1].loader.image.brokers[3].fenced
        stale = await nodes[1].controller.broker_heartbeat(3, reply.broker_epoch + 1, reply.broker_epoch, False, False)
        assert stale.error_code == ErrorCode.stale_broker_epoch

    run(scenario())


def test_registration_with_another_cluster_id_is_refused() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        reply = await nodes[1].controller.register_broker(registration(3, cluster_id="other"))
        assert reply.error_code == ErrorCode.inconsistent_cluster_id
        assert 3 not in nodes[1].loader.image.brokers

    run(scenario())


def test_session_timeout_fences_the_broker_and_moves_its_leadership() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1)
        quorum.elect(1)
        c = nodes[1].controller
        epochs = await live_brokers(nodes[1], 1, 2, 3)
        [created] = await c.create_topics([topic("t", 3)], validate_only=False)
        assert created.error_code == 0
        clock.now += SESSION_MS // 2
        for b in (2, 3):
            await c.broker_heartbeat(b, epochs[b], c.committed_offset, False, False)
        assert await c.fence_stale_brokers() == []
        clock.now += SESSION_MS // 2 + 1
        assert await c.fence_stale_brokers() == [1]
        image = nodes[1].loader.image
        assert image.brokers[1].fenced
        for partition in image.topics["t"].partitions.values():
            assert partition.leader != 1 and 1 not in partition.isr

    run(scenario())


def test_the_session_timer_fences_on_its_own() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1)
        c = nodes[1].controller
        c.start()
        try:
            quorum.elect(1)
            await live_brokers(nodes[1], 1)
            clock.now += SESSION_MS + 1
            for _ in range(500):
                if nodes[1].loader.image.brokers[1].fenced:
                    break
                await asyncio.sleep(0.01)
            assert nodes[1].loader.image.brokers[1].fenced
        finally:
            await c.shutdown()

    run(scenario())


def test_a_broker_last_heard_at_t_is_fenced_just_past_t_plus_the_session_timeout() -> None:
    """The timer is due at the first session expiry, not at a check period's next tick (Kafka 4.4
    checks every session timeout / 8, up to 1.1 s late): a SIGKILLed partition leader's partitions
    move broker.session.timeout.ms after its last heartbeat."""
    async def scenario() -> None:
        quorum, clock = FakeQuorum(), Clock()
        quorum.auto_commit = True
        node = Node(quorum, 1, clock, metadata_max_idle_interval_ms=0)  # no NoOpRecord passes to wake the timer
        quorum.elect(1)
        c = node.controller
        last_heard = clock.now
        epochs = await live_brokers(node, 1, 2)
        clock.now += 4_321
        await c.broker_heartbeat(2, epochs[2], c.committed_offset, False, False)
        assert c.next_timer_due_ms() == last_heard + SESSION_MS + 1
        clock.now = last_heard + SESSION_MS
        assert await c.fence_stale_brokers() == []
        clock.now += 1
        assert await c.fence_stale_brokers() == [1]
        assert c.next_timer_due_ms() == last_heard + 4_321 + SESSION_MS + 1

    run(scenario())


def test_a_new_active_controller_gives_every_broker_a_fresh_session() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1, 2)
        quorum.elect(1)
        epochs = await live_brokers(nodes[1], 1, 2, 3)
        clock.now += SESSION_MS - 1  # nearly expired on controller 1
        quorum.elect(2)
        c2 = nodes[2].controller
        clock.now += SESSION_MS - 1
        assert await c2.fence_stale_brokers() == []
        beat = await c2.broker_heartbeat(2, epochs[2], c2.committed_offset, False, False)
        assert beat.error_code == 0 and not beat.is_fenced
        clock.now += 2
        # One per pass (Kafka's maybeFenceOneStaleBroker); the timer comes back at once for the next.
        assert await c2.fence_stale_brokers() == [1]
        assert await c2.fence_stale_brokers() == [3]
        assert await c2.fence_stale_brokers() == []

    run(scenario())


def test_a_heartbeat_waiting_behind_a_slow_write_keeps_its_broker_unfenced() -> None:
    """Counted when it arrives (Kafka 4.4's trackBrokerHeartbeat), not when the writes queued
    before it have committed: long campaign 756070550 fenced a live broker so. The session timer
    queued its fencing behind a slow write; the broker's heartbeat arrived before the fencing was
    decided."""
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1)
        quorum.elect(1)
        c = nodes[1].controller
        epochs = await live_brokers(nodes[1], 1, 2)
        quorum.auto_commit = False
        slow = asyncio.ensure_future(c.create_topics([topic("orders", 3, rf=2)], validate_only=False))
        await settle()
        clock.now += SESSION_MS + 1
        fencing = asyncio.ensure_future(c.fence_stale_brokers())
        await settle()
        beat = asyncio.ensure_future(c.broker_heartbeat(1, epochs[1], c.committed_offset, False, False))
        await settle()
        assert not fencing.done() and not beat.done()  # both behind the topic's records
        quorum.auto_commit = True
        quorum.commit()
        await slow
        # Broker 2 said nothing: its session ran out; broker 1's heartbeat had arrived.
        assert await fencing == [2]
        assert not (await beat).is_fenced
        assert await c.fence_stale_brokers() == []

    run(scenario())


def test_controlled_shutdown_moves_leadership_then_says_shut_down() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        c = nodes[1].controller
        epochs = await live_brokers(nodes[1], 1, 2, 3)
        await c.create_topics([topic("t", 6)], validate_only=False)
        assert any(p.leader == 2 for p in nodes[1].loader.image.topics["t"].partitions.values())
        beat = await c.broker_heartbeat(2, epochs[2], c.committed_offset, False, True)
        assert beat.error_code == 0 and not beat.should_shut_down
        image = nodes[1].loader.image
        assert image.brokers[2].in_controlled_shutdown
        for partition in image.topics["t"].partitions.values():
            assert partition.leader not in (2, NO_LEADER) and 2 not in partition.isr
        # The others have not reported the moves yet.
        beat = await c.broker_heartbeat(2, epochs[2], c.committed_offset, False, True)
        assert not beat.should_shut_down
        for b in (1, 3):
            await c.broker_heartbeat(b, epochs[b], c.committed_offset, False, False)
        beat = await c.broker_heartbeat(2, epochs[2], c.committed_offset, False, True)
        assert beat.should_shut_down and beat.is_fenced
        assert nodes[1].loader.image.brokers[2].fenced

    run(scenario())


def test_unregister_broker() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2)
        assert (await nodes[1].controller.unregister_broker(2)).error_code == 0
        assert 2 not in nodes[1].loader.image.brokers
        assert (await nodes[1].controller.unregister_broker(2)).error_code == ErrorCode.broker_id_not_registered

    run(scenario())


def test_producer_id_blocks() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1, 2)
        quorum.elect(1)
        epochs = await live_brokers(nodes[1], 1)
        c = nodes[1].controller
        first = await c.allocate_producer_id_block(1, epochs[1])
        assert (first.error_code, first.first_producer_id, first.size) == (0, 0, 1000)
        assert (await c.allocate_producer_id_block(1, epochs[1] + 1)).error_code == ErrorCode.stale_broker_epoch
        record = await c.allocate_producer_ids(1)
        assert record.next_producer_id == 2000
        quorum.elect(2)
        second = await nodes[2].controller.allocate_producer_id_block(1, epochs[1])
        assert second.first_producer_id == 2000

    run(scenario())


def test_topic_writes_and_configs_on_the_active_controller() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = cluster(1)
        quorum.elect(1)
        await live_brokers(nodes[1], 1, 2, 3)
        c = nodes[1].controller
        [validated] = await c.create_topics([topic("v")], validate_only=True)
        assert validated.error_code == 0 and "v" not in nodes[1].loader.image.topics
        assert await c.auto_create_topics(["a", "a"]) == {"a": 0}
        assert await c.auto_create_topics(["a"]) == {"a": 0}
        [grown] = await c.create_partitions([("a", 3, None)], validate_only=False)
        assert grown.error_code == 0 and len(nodes[1].loader.image.topics["a"].partitions) == 3
        [altered] = await c.alter_configs([ConfigResource(2, "a", [("retention.ms", 0, "1000")])], incremental=True, validate_only=False)
        assert altered.error_code == 0 and nodes[1].loader.image.topic_config("a") == {"retention.ms": "1000"}
        [deleted] = await c.delete_topics([("a", None)])
        assert deleted.error_code == 0 and "a" not in nodes[1].loader.image.topics

    run(scenario())
