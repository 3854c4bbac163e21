"""Group state reverts when its write fails, as Kafka's snapshot timeline does: JoinGroup, SyncGroup,
OffsetCommit, ConsumerGroupHeartbeat and ShareGroupHeartbeat whose records are refused (NOT_ENOUGH_REPLICAS), not
replicated in time, or lost with the leadership leave the groups as they were and answer the
client as Kafka's coordinator does. Real logs on one node; ``__consumer_offsets`` has a second
replica, node 2, which no one runs: a write is replicated only when the test plays its fetch."""

from __future__ import annotations

import asyncio
import copy
import uuid
from pathlib import Path
from typing import Any, Callable, Coroutine

from kio.schema.errors import ErrorCode

from broker.config import load_config
from broker.group.classic_group import ClassicGroupState
from broker.group.group_metadata_manager import CoordinatorResult, JoinGroupRequest, JoinGroupResponse, SyncGroupResponse
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group.share_group_manager import InitializeShareGroupState, ShareGroupHeartbeat
from broker.group_coordinator import GROUP_METADATA_TOPIC, CoordinatorNotAvailable, GroupCoordinator, now_ms, topic_partition_counts
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import TOPIC_RESOURCE
from broker.metadata.metadata_records import ConfigRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord, TopicRecord
from tests.unit.leader_node import start_leader_node
from tests.unit.test_consumer_group import request as heartbeat_request

GROUP = "g"
DATA = "data"
OFFSETS_ID = uuid.uuid5(uuid.NAMESPACE_DNS, GROUP_METADATA_TOPIC)


class Node:
    """Node 1 leads ``__consumer_offsets`` (replicas 1 and 2, min.insync.replicas 2) and a data topic."""

    def __init__(self, data_dir: Path) -> None:
        config = load_config(
            None,
            {"offsets.topic.num.partitions": "1", "offsets.commit.timeout.ms": "200", "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "10"},
        )
        records: list[MetadataRecord] = []
        for name, replicas in ((GROUP_METADATA_TOPIC, (1, 2)), (DATA, (1,))):
            topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
            records.append(TopicRecord(name=name, topic_id=topic_id))
            records.append(PartitionRecord(partition_id=0, topic_id=topic_id, replicas=replicas, isr=replicas, leader=1, leader_epoch=3, partition_epoch=0))
        records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=GROUP_METADATA_TOPIC, name="min.insync.replicas", value="2"))
        self.delta, self.metadata, self.log_manager, self.rm = start_leader_node(data_dir, records)
        self.groups = GroupCoordinator(config, None, self.metadata, self.rm)  # type: ignore[arg-type]

    async def load(self) -> None:
        self.groups.on_metadata_update(self.delta, self.metadata.image)
        await wait_for(lambda: 0 in self.groups.shards)

    @property
    def shard(self) -> Any:
        return self.groups.shard_for(GROUP)

    @property
    def partition(self) -> Any:
        return self.rm.partitions[(GROUP_METADATA_TOPIC, 0)]

    def replicate(self) -> None:
        """Node 2 fetches the whole log: the high watermark reaches the log end."""
        leo = self.partition.log.log_end_offset
        result = self.rm.read_for_follower(2, 1, GROUP_METADATA_TOPIC, 0, leo, -1, 0, -1, 1 << 20, self.metadata.image)
        assert result.error_code == 0 and self.partition.high_watermark == leo

    def change_offsets_partition(self, **change: Any) -> None:
        delta = MetadataDelta(self.metadata.image)
        delta.replay(PartitionChangeRecord(partition_id=0, topic_id=OFFSETS_ID, **change))
        image = delta.apply(self.metadata.image.provenance + 1)
        self.metadata.image = image
        self.rm.apply_delta(delta, image)
        self.groups.on_metadata_update(delta, image)

    # What the handlers do: snapshot the group, run the shard operation, write its result.

    def join(self, member_id: str = "", session_timeout_ms: int = 10000) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        join = JoinGroupRequest(GROUP, session_timeout_ms, 10000, member_id, None, "consumer", (("range", b"m"),), "c", "/h", False, False)
        before = self.shard.snapshot([GROUP])
        self.groups.execute(GROUP, self.shard.groups.join_group(join, future, now_ms()), before)
        return future

    def sync(self, member_id: str, generation: int, assignment: bytes) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        before = self.shard.snapshot([GROUP])
        result = self.shard.groups.sync_group(GROUP, generation, member_id, None, None, None, {member_id: assignment}, future, now_ms())
        self.groups.execute(GROUP, result, before)
        return future

    def commit(self, offset: int, generation: int = -1, member_id: str = "") -> Any:
        before = self.shard.snapshot_before_commit(GROUP)
        answers, records = self.shard.offsets.commit(GROUP, generation, member_id, None, -1, [PartitionCommit(DATA, 0, offset, -1, "")], 9, now_ms())
        assert [code for _, code in answers] == [0]
        return self.groups.execute(GROUP, CoordinatorResult(records=records), before)

    def committed(self) -> int | None:
        [(_, _, found)] = self.shard.offsets.fetch(GROUP, [(DATA, 0)])
        return None if found is None else found.offset

    def consumer_heartbeat(self, req: Any) -> tuple[Any, Any]:
        before = self.shard.snapshot([req.group_id])
        result = self.shard.consumer_groups.heartbeat(req, topic_partition_counts(self.metadata.image), now_ms())
        return result.response, self.groups.execute(req.group_id, CoordinatorResult(records=result.records, timers=result.timers), before)

    def close(self) -> None:
        self.groups.shutdown()
        self.log_manager.shutdown()


def run(tmp_path: Path, test: Callable[[Node], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        node = Node(tmp_path / "data")
        try:
            await node.load()
            await test(node)
        finally:
            node.close()

    asyncio.run(asyncio.wait_for(main(), 30))


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def answer(future: Any) -> Any:
    """What the request is told: a write's error code, a response, or the error it failed with."""
    if not isinstance(future, asyncio.Future):
        return future
    try:
        return await asyncio.wait_for(future, 5)
    except CoordinatorNotAvailable as e:
        return e.error_code


async def stable_group(node: Node, session_timeout_ms: int = 10000) -> tuple[str, int]:
    """One member joined and synced, replicated: (member id, generation)."""
    joined = await answer(node.join(session_timeout_ms=session_timeout_ms))
    assert isinstance(joined, JoinGroupResponse) and joined.error_code == 0
    synced = node.sync(joined.member_id, joined.generation_id, b"first")
    node.replicate()
    assert (await answer(synced)).error_code == 0
    assert node.shard.groups.group(GROUP).state is ClassicGroupState.STABLE
    return joined.member_id, joined.generation_id


def group_state(node: Node) -> tuple[Any, ...]:
    group = node.shard.groups.group(GROUP)
    return group.state, group.generation_id, group.leader_id, {m: (g.assignment, g.awaiting_join, g.awaiting_sync) for m, g in group.members.items()}


# -- classic groups ----------------------------------------------------------------------------------


def test_a_sync_not_replicated_in_time_leaves_the_group_completing_its_rebalance(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        joined = await answer(node.join())
        before = group_state(node)
        assert before[0] is ClassicGroupState.COMPLETING_REBALANCE
        synced = await answer(node.sync(joined.member_id, joined.generation_id, b"assignment"))  # offsets.commit.timeout.ms: 200
        assert isinstance(synced, SyncGroupResponse) and synced.error_code == ErrorCode.coordinator_not_available
        assert group_state(node) == before  # no assignment, not Stable
        # The member rejoins (the generation it has not synced yet) and syncs; this time the write
        # is replicated.
        rejoined = await answer(node.join(joined.member_id))
        assert rejoined.error_code == 0 and rejoined.generation_id == joined.generation_id
        synced_again = node.sync(rejoined.member_id, rejoined.generation_id, b"assignment")
        node.replicate()
        assert (await answer(synced_again)).assignment == b"assignment"

    run(tmp_path, test)


def test_a_sync_refused_below_min_isr_answers_coordinator_not_available_and_changes_nothing(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        joined = await answer(node.join())
        before = group_state(node)
        node.change_offsets_partition(isr=(1,))  # NOT_ENOUGH_REPLICAS at the append
        end = node.partition.log.log_end_offset
        synced = await answer(node.sync(joined.member_id, joined.generation_id, b"assignment"))
        assert synced.error_code == ErrorCode.coordinator_not_available
        assert node.partition.log.log_end_offset == end and group_state(node) == before

    run(tmp_path, test)


def test_a_sync_after_a_rejoin_that_fails_to_write_keeps_the_old_assignment(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        member, generation = await stable_group(node)
        before = group_state(node)
        node.change_offsets_partition(isr=(1,))
        # A static-less member rejoining a Stable group starts a rebalance; it completes at once
        # (one member) and writes nothing until SyncGroup, whose write then fails.
        rejoined = await answer(node.join(member))
        assert rejoined.generation_id == generation + 1
        synced = await answer(node.sync(member, rejoined.generation_id, b"second"))
        assert synced.error_code == ErrorCode.coordinator_not_available
        state, new_generation, *_ = group_state(node)
        assert (state, new_generation) == (ClassicGroupState.COMPLETING_REBALANCE, generation + 1)
        assert node.shard.groups.group(GROUP).members[member].assignment == before[3][member][0]

    run(tmp_path, test)


def test_leadership_lost_under_a_waiting_sync_answers_not_coordinator(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        joined = await answer(node.join())
        synced = node.sync(joined.member_id, joined.generation_id, b"assignment")
        await asyncio.sleep(0.02)
        assert not synced.done()
        node.change_offsets_partition(leader=2)
        assert (await answer(synced)).error_code == ErrorCode.not_coordinator
        assert node.groups.coordinator_error(GROUP) == ErrorCode.not_coordinator

    run(tmp_path, test)


def test_a_join_waiting_in_a_group_reverted_under_it_is_told_the_error(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        member, generation = await stable_group(node)
        # The group's write (a sync after a rejoin) waits; meanwhile a second member joins and
        # waits in the rebalance that the failed write's group state no longer has.
        rejoined = await answer(node.join(member))
        synced = node.sync(member, rejoined.generation_id, b"second")
        newcomer = node.join()
        await asyncio.sleep(0.02)
        assert not synced.done() and not newcomer.done()
        assert (await answer(synced)).error_code == ErrorCode.coordinator_not_available  # timed out
        assert await answer(newcomer) == ErrorCode.coordinator_not_available
        group = node.shard.groups.group(GROUP)
        assert set(group.members) == {member} and group.state is ClassicGroupState.COMPLETING_REBALANCE

    run(tmp_path, test)


def test_an_expiry_that_fails_to_write_keeps_the_member_and_tries_again(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        member, _ = await stable_group(node, session_timeout_ms=100)
        node.change_offsets_partition(isr=(1,))
        # The member stops heartbeating: its expiry empties the group, whose record is refused.
        await asyncio.sleep(0.5)
        group = node.shard.groups.group(GROUP)
        assert set(group.members) == {member} and group.state is ClassicGroupState.STABLE
        assert ("heartbeat", GROUP, member) in node.groups._timers  # armed again for the restored member
        node.change_offsets_partition(isr=(1, 2))
        await wait_for(lambda: node.shard.groups.group(GROUP).state is ClassicGroupState.EMPTY and node.partition.log.log_end_offset > node.partition.high_watermark)
        node.replicate()
        assert node.shard.groups.group(GROUP).members == {}

    run(tmp_path, test)


# -- offsets -----------------------------------------------------------------------------------------


def test_a_failed_commit_leaves_the_committed_offset_and_no_group_behind(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        written = node.commit(10)
        node.replicate()
        assert await answer(written) == 0 and node.committed() == 10
        failing = node.commit(20)
        assert await answer(failing) == ErrorCode.coordinator_not_available  # not replicated in time
        assert node.committed() == 10
        # A simple consumer's first commit makes its group; a failed one does not.
        node.shard.groups.groups.clear()
        node.shard.offsets.offsets.clear()
        assert await answer(node.commit(30)) == ErrorCode.coordinator_not_available
        assert node.shard.groups.group(GROUP) is None and node.committed() is None

    run(tmp_path, test)


# -- consumer groups (KIP-848) ------------------------------------------------------------------------


def test_a_consumer_group_heartbeat_that_fails_to_write_leaves_no_member_behind(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        response, written = node.consumer_heartbeat(heartbeat_request(member_id=str(uuid.uuid4()), group_id=GROUP, rebalance_timeout_ms=5000, subscribed_topic_names=[DATA], owned={}))
        assert response.error_code == 0 and GROUP in node.shard.consumer_groups.groups  # applied, not yet written
        assert await answer(written) == ErrorCode.coordinator_not_available
        assert GROUP not in node.shard.consumer_groups.groups
        # The member joins again, and this time it is written.
        member = str(uuid.uuid4())
        response, written = node.consumer_heartbeat(heartbeat_request(member_id=member, group_id=GROUP, rebalance_timeout_ms=5000, subscribed_topic_names=[DATA], owned={}))
        node.replicate()
        assert await answer(written) == 0
        group = node.shard.consumer_groups.groups[GROUP]
        assert set(group.members) == {member} and group.group_epoch == 1

    run(tmp_path, test)


def test_a_consumer_group_keeps_its_epoch_when_a_join_fails_to_write(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        first = str(uuid.uuid4())
        _, written = node.consumer_heartbeat(heartbeat_request(member_id=first, group_id=GROUP, rebalance_timeout_ms=5000, subscribed_topic_names=[DATA], owned={}))
        node.replicate()
        assert await answer(written) == 0
        expected = copy.deepcopy(node.shard.consumer_groups.groups[GROUP])
        node.change_offsets_partition(isr=(1,))
        response, written = node.consumer_heartbeat(heartbeat_request(member_id=str(uuid.uuid4()), group_id=GROUP, rebalance_timeout_ms=5000, subscribed_topic_names=[DATA], owned={}))
        assert response.error_code == 0 and written == ErrorCode.coordinator_not_available
        assert node.shard.consumer_groups.groups[GROUP] == expected

    run(tmp_path, test)


# -- share groups ------------------------------------------------------------------------------------


def share_heartbeat(node: Node, member_id: str, epoch: int = 0) -> tuple[Any, Any]:
    """What ShareGroupHeartbeatHandler does: snapshot, heartbeat, write (and initialize)."""
    before = node.shard.snapshot([GROUP])
    result = node.shard.share_groups.heartbeat(ShareGroupHeartbeat(GROUP, member_id, epoch, None, (DATA,) if epoch == 0 else None), topic_partition_counts(node.metadata.image), now_ms())
    return result.response, node.groups.execute_share_group(GROUP, result, before)


class Initializer:
    """A share coordinator that answers each InitializeShareGroupState with ``succeeds``."""

    def __init__(self, succeeds: bool) -> None:
        self.succeeds = succeeds
        self.asked: list[InitializeShareGroupState] = []

    async def initialize_share_group_state(self, request: InitializeShareGroupState) -> bool:
        self.asked.append(request)
        return self.succeeds


def test_a_share_group_heartbeat_that_fails_to_write_leaves_no_member_behind(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        response, written = share_heartbeat(node, "m1")
        assert response.error_code == 0 and GROUP in node.shard.share_groups.groups  # applied, not yet written
        assert await answer(written) == ErrorCode.coordinator_not_available
        assert GROUP not in node.shard.share_groups.groups
        response, written = share_heartbeat(node, "m1")
        node.replicate()
        assert await answer(written) == 0
        group = node.shard.share_groups.groups[GROUP]
        assert set(group.members) == {"m1"} and group.group_epoch == 1
        # A second member refused below min.insync.replicas leaves the group as it was.
        expected = copy.deepcopy(group)
        node.change_offsets_partition(isr=(1,))
        response, written = share_heartbeat(node, "m2")
        assert response.error_code == 0 and written == ErrorCode.coordinator_not_available
        assert node.shard.share_groups.groups[GROUP] == expected

    run(tmp_path, test)


def test_share_partitions_stay_initializing_with_no_share_coordinator(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        response, written = share_heartbeat(node, "m1")
        node.replicate()
        assert await answer(written) == 0 and response.assignment == {}
        response, written = share_heartbeat(node, "m1", response.member_epoch)
        node.replicate()
        assert await answer(written) == 0 and response.assignment is None
        group = node.shard.share_groups.groups[GROUP]
        assert set(group.initializing) == {uuid.uuid5(uuid.NAMESPACE_DNS, DATA)} and group.initialized == {}

    run(tmp_path, test)


def test_initialized_share_partitions_are_assigned_and_failed_ones_asked_again(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        data_id = uuid.uuid5(uuid.NAMESPACE_DNS, DATA)
        node.groups.share_state_initializer = initializer = Initializer(succeeds=False)
        response, written = share_heartbeat(node, "m1")
        node.replicate()
        assert await answer(written) == 0
        await wait_for(lambda: GROUP in node.shard.share_groups.groups and not node.shard.share_groups.groups[GROUP].initializing)
        assert [(r.group_id, r.partitions) for r in initializer.asked] == [(GROUP, {data_id: frozenset({0})})]
        node.replicate()
        # The next heartbeat asks again; this time the share coordinator initializes the partition.
        initializer.succeeds = True
        response, written = share_heartbeat(node, "m1", response.member_epoch)
        node.replicate()
        assert await answer(written) == 0 and len(initializer.asked) == 2
        await wait_for(lambda: bool(node.shard.share_groups.groups[GROUP].initialized))
        node.replicate()
        response, written = share_heartbeat(node, "m1", response.member_epoch)
        node.replicate()
        assert await answer(written) == 0
        assert response.assignment == {data_id: (0,)}

    run(tmp_path, test)
