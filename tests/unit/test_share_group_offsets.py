"""The share group side of the offsets admin APIs, sans-IO: Kafka 4.4's GroupMetadataManager
alterShareGroupOffsets, sharePartitionsEligibleForOffsetDeletion / completeDeleteShareGroupOffsets,
shareGroupBuildPartitionDeleteRequest (DeleteGroups) and initializedShareGroupPartitions, and
GroupCoordinatorService's side: the persister calls around them and the lag
(computeShareGroupLagAndBuildResponse)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Coroutine

from broker.default_state_persister import StateSummary
from broker.group.share_group_manager import (
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    AlteredTopic,
    DeletedTopic,
    DescribedPartitionOffsets,
    DescribedShareGroupOffsets,
    DescribedTopicOffsets,
    InitializeShareGroupState,
    PartitionOutcome,
    ShareGroupHeartbeat,
    ShareGroupManager,
    described_partition,
)
from tests.unit.test_group_write_failures import DATA, GROUP, Node, run

FENCED_STATE_EPOCH = 124
COORDINATOR_NOT_AVAILABLE = 15

T = uuid.UUID(int=7)
U = uuid.UUID(int=8)
TOPICS = {"t": (T, 2), "u": (U, 1)}
G = "g"
UNKNOWN = "This server does not host this topic-partition."


def joined(manager: ShareGroupManager, member_id: str = "m1") -> None:
    result = manager.heartbeat(ShareGroupHeartbeat(G, member_id, 0, None, ("t",)), TOPICS, 0)
    assert result.response is not None and result.response.error_code == NONE


def left(manager: ShareGroupManager, member_id: str = "m1") -> None:
    result = manager.heartbeat(ShareGroupHeartbeat(G, member_id, -1), TOPICS, 0)
    assert result.response is not None and result.response.error_code == NONE


def empty_group_with_initialized_topics() -> ShareGroupManager:
    """A member joined (t becomes initializing), t was initialized, the member left."""
    manager = ShareGroupManager()
    joined(manager)
    manager.initialize_share_group_state(G, {T: [0, 1]})
    left(manager)
    assert manager.groups[G].initialized == {T: ("t", frozenset({0, 1}))}
    return manager


def test_alter_refuses_a_group_with_members() -> None:
    manager = ShareGroupManager()
    joined(manager)
    altered = manager.alter_offsets(G, [("t", [(0, 5)])], TOPICS)
    assert altered.records == []
    assert altered.response is not None and (altered.response.error_code, altered.response.error_message) == (NON_EMPTY_GROUP, "The group is not empty.")


def test_alter_creates_the_group_and_initializes_what_exists() -> None:
    manager = ShareGroupManager()
    altered = manager.alter_offsets(G, [("t", [(0, 5), (1, 3), (7, 1)]), ("nosuch", [(0, 1)])], TOPICS)
    r = altered.response
    assert r is not None and r.error_code == NONE
    assert r.topics == (
        AlteredTopic("t", T, (PartitionOutcome(0), PartitionOutcome(1), PartitionOutcome(7, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN))),
        AlteredTopic("nosuch", None, (PartitionOutcome(0, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN),)),
    )
    assert (r.state_epoch, r.start_offsets) == (0, {(T, 0): 5, (T, 1): 3})
    # The group exists from its ShareGroupStatePartitionMetadata record on, Empty.
    group = manager.groups[G]
    assert (group.state.value, group.initializing, group.initialized) == ("Empty", {T: ("t", frozenset({0, 1}))}, {})
    assert manager.initialized_partitions(G) == {}
    manager.initialize_share_group_state(G, {T: [0, 1]})
    assert manager.initialized_partitions(G) == {T: frozenset({0, 1})}
    assert manager.groups[G].initializing == {}


def test_alter_of_another_group_type_is_refused() -> None:
    manager = ShareGroupManager(is_other_group=lambda group_id: group_id == "classic")
    altered = manager.alter_offsets("classic", [("t", [(0, 1)])], TOPICS)
    assert altered.response is not None and (altered.response.error_code, altered.response.error_message) == (GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    assert "classic" not in manager.groups


def test_a_topic_altered_again_is_no_longer_deleting() -> None:
    manager = empty_group_with_initialized_topics()
    manager.delete_offsets(G, ["t"], TOPICS)
    assert manager.groups[G].deleting == {T: "t"}
    manager.alter_offsets(G, [("t", [(0, 1)])], TOPICS)
    group = manager.groups[G]
    assert (group.deleting, group.initializing) == ({}, {T: ("t", frozenset({0}))})


def test_delete_offsets_refusals() -> None:
    manager = ShareGroupManager()
    unknown = manager.delete_offsets("nobody", ["t"], TOPICS).response
    assert unknown is not None and (unknown.error_code, unknown.error_message) == (GROUP_ID_NOT_FOUND, "Group nobody not found.")
    joined(manager)
    busy = manager.delete_offsets(G, ["t"], TOPICS)
    assert busy.records == [] and busy.response is not None and (busy.response.error_code, busy.response.error_message) == (NON_EMPTY_GROUP, "The group is not empty.")


def test_delete_offsets_of_initialized_deleting_and_other_topics() -> None:
    manager = empty_group_with_initialized_topics()
    plan = manager.delete_offsets(G, ["t", "u", "nosuch"], TOPICS).response
    assert plan is not None and plan.error_code == NONE
    assert plan.to_delete == {T: ("t", frozenset({0, 1}))}
    assert plan.refused == (
        DeletedTopic("u", None, UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
        DeletedTopic("nosuch", None, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN),
    )
    group = manager.groups[G]
    assert (group.initialized, group.deleting) == ({}, {T: "t"})
    # Asked again while its state is still being deleted: every partition again.
    again = manager.delete_offsets(G, ["t"], TOPICS).response
    assert again is not None and again.to_delete == {T: ("t", frozenset({0, 1}))}
    manager.complete_delete_offsets(G, [T], TOPICS)
    assert manager.groups[G].deleting == {}
    gone = manager.delete_offsets(G, ["t"], TOPICS).response
    assert gone is not None and gone.to_delete == {} and [t.error_message for t in gone.refused] == ["There is no offset information to delete."]


def test_delete_offsets_of_a_group_without_share_state_answers_nothing() -> None:
    manager = ShareGroupManager()
    # Its member subscribes to a topic that does not exist: nothing to initialize, no record.
    assert manager.heartbeat(ShareGroupHeartbeat(G, "m1", 0, None, ("nosuch",)), TOPICS, 0).response.error_code == NONE  # type: ignore[union-attr]
    left(manager)
    plan = manager.delete_offsets(G, ["t"], TOPICS)
    assert plan.records == [] and plan.response is not None and (plan.response.error_code, plan.response.refused, plan.response.to_delete) == (NONE, (), {})


def test_delete_group_state_takes_every_share_partition_and_refuses_a_non_empty_group() -> None:
    manager = ShareGroupManager()
    joined(manager)
    busy = manager.delete_group_state(G, TOPICS)
    assert busy.records == [] and busy.response is not None and busy.response.error_code == NON_EMPTY_GROUP
    manager.initialize_share_group_state(G, {T: [0]})
    left(manager)
    # t-0 initialized, t-1 still initializing; u being deleted (after a reset, then --delete-offsets).
    manager.alter_offsets(G, [("u", [(0, 2)])], TOPICS)
    manager.initialize_share_group_state(G, {U: [0]})
    manager.delete_offsets(G, ["u"], TOPICS)
    plan = manager.delete_group_state(G, TOPICS)
    assert plan.response is not None and plan.response.error_code == NONE
    assert plan.response.to_delete == {T: frozenset({0, 1}), U: frozenset({0})}
    group = manager.groups[G]
    assert (group.initializing, group.initialized, group.deleting) == ({}, {}, {T: "t", U: "u"})
    deleted = manager.delete_group(G)
    assert deleted.response == NONE and G not in manager.groups


def test_unknown_groups_are_described_with_kafkas_message() -> None:
    [described] = ShareGroupManager().describe(["nobody"], {})
    assert (described.error_code, described.error_message) == (GROUP_ID_NOT_FOUND, "Group nobody not found.")
    assert ShareGroupManager().initialized_partitions("nobody") == {}


def test_lag_is_the_records_after_the_start_offset_not_yet_delivered_for_good() -> None:
    # end offset 10, start 4, 2 records past the start already acknowledged
    assert described_partition(0, NONE, 4, 3, 2, (NONE, 10)) == DescribedPartitionOffsets(0, 4, 3, 4)
    # No start offset yet (share.auto.offset.reset latest, nothing fetched), or no count: no lag.
    assert described_partition(0, NONE, -1, 0, 0, None) == DescribedPartitionOffsets(0, -1, 0, -1)
    assert described_partition(0, NONE, 4, 3, -1, None) == DescribedPartitionOffsets(0, 4, 3, -1)
    # A failed read is start offset -1 with no error, as Kafka answers it.
    assert described_partition(0, GROUP_ID_NOT_FOUND, 4, 3, 0, None) == DescribedPartitionOffsets(0, -1, 0, -1)
    # The high watermark could not be read: the partition carries that error.
    assert described_partition(1, NONE, 4, 3, 0, (UNKNOWN_TOPIC_OR_PARTITION, -1)) == DescribedPartitionOffsets(1, error_code=UNKNOWN_TOPIC_OR_PARTITION)


# -- the group coordinator's side (GroupCoordinatorService): real logs on one node, a fake persister --


class Persister:
    """A share coordinator keeping each share partition's start offset and delivery-complete
    count; the share partitions in ``failing`` answer ``error``."""

    def __init__(self) -> None:
        self.states: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.failing: set[tuple[uuid.UUID, int]] = set()
        self.error = FENCED_STATE_EPOCH

    async def initialize_share_group_state(self, request: InitializeShareGroupState) -> bool:
        errors = await self.initialize_state(request.group_id, request.state_epoch, {(t, p): -1 for t, ps in request.partitions.items() for p in ps})
        return not any(errors.values())

    async def initialize_state(self, group_id: str, state_epoch: int, start_offsets: Mapping[tuple[uuid.UUID, int], int]) -> dict[tuple[uuid.UUID, int], int]:
        for tp, offset in start_offsets.items():
            if tp not in self.failing:
                self.states[tp] = (offset, 0)
        return {tp: self.error if tp in self.failing else NONE for tp in start_offsets}

    async def read_state_summary(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> dict[tuple[uuid.UUID, int], StateSummary]:
        summaries = {}
        for t, ps in partitions.items():
            for p in ps:
                start, done = self.states.get((t, p), (-1, -1))
                summaries[(t, p)] = StateSummary(NONE, start, 1, 0, done)
        return summaries

    async def delete_state(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> dict[tuple[uuid.UUID, int], int]:
        errors = {}
        for t, ps in partitions.items():
            for p in ps:
                errors[(t, p)] = self.error if (t, p) in self.failing else NONE
                if (t, p) not in self.failing:
                    self.states.pop((t, p), None)
        return errors


DATA_ID = uuid.uuid5(uuid.NAMESPACE_DNS, DATA)


async def replicated(node: Node, operation: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coordinator operation while node 2 keeps fetching, so that its writes complete."""
    task = asyncio.ensure_future(operation)
    async with asyncio.timeout(10):
        while not task.done():
            node.replicate()
            await asyncio.sleep(0.005)
    return task.result()


async def high_watermark_10(partitions: Any) -> dict[tuple[str, int], tuple[int, int]]:
    return {tp: (NONE, 10) for tp in partitions}


def test_alter_then_describe_start_offsets_and_lag(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        node.groups.share_state_initializer = persister = Persister()
        altered = await replicated(node, node.groups.alter_share_group_offsets(GROUP, [(DATA, [(0, 4), (3, 1)])]))
        assert altered.error_code == NONE
        assert altered.topics == (AlteredTopic(DATA, DATA_ID, (PartitionOutcome(0), PartitionOutcome(3, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN))),)
        group = node.shard.share_groups.groups[GROUP]
        assert (group.initializing, group.initialized) == ({}, {DATA_ID: (DATA, frozenset({0}))})
        persister.states[(DATA_ID, 0)] = (4, 2)
        # All the group's partitions: 10 - 4 - 2 records still to deliver.
        described = await node.groups.describe_share_group_offsets(GROUP, None, high_watermark_10)
        assert described == DescribedShareGroupOffsets(topics=(DescribedTopicOffsets(DATA, DATA_ID, (DescribedPartitionOffsets(0, 4, 0, 4),)),))
        # Named topics: those Kafka knows first, then the others with start offset -1.
        named = await node.groups.describe_share_group_offsets(GROUP, [("nosuch", [1]), (DATA, [0])], high_watermark_10)
        assert [(t.topic_name, t.topic_id, [(p.partition, p.start_offset, p.lag) for p in t.partitions]) for t in named.topics] == [
            (DATA, DATA_ID, [(0, 4, 4)]),
            ("nosuch", None, [(1, -1, -1)]),
        ]

    run(tmp_path, test)


def test_a_partition_the_share_coordinator_refuses_stays_uninitialized(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        node.groups.share_state_initializer = persister = Persister()
        persister.failing.add((DATA_ID, 0))
        altered = await replicated(node, node.groups.alter_share_group_offsets(GROUP, [(DATA, [(0, 4)])]))
        [topic] = altered.topics
        assert topic.partitions == (PartitionOutcome(0, FENCED_STATE_EPOCH, "The coordinator rejected the request because the state epoch did not match."),)
        group = node.shard.share_groups.groups[GROUP]
        assert (group.initializing, group.initialized) == ({}, {})

    run(tmp_path, test)


def test_a_share_group_is_deleted_only_once_its_state_is(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        node.groups.share_state_initializer = persister = Persister()
        await replicated(node, node.groups.alter_share_group_offsets(GROUP, [(DATA, [(0, 4)])]))
        persister.failing.add((DATA_ID, 0))
        persister.error = COORDINATOR_NOT_AVAILABLE
        assert await replicated(node, node.groups.delete_share_group(GROUP)) == COORDINATOR_NOT_AVAILABLE
        group = node.shard.share_groups.groups[GROUP]
        assert (group.initialized, group.deleting) == ({}, {DATA_ID: DATA})
        # --delete-offsets meanwhile: the topic is still deleting, and fails the same way.
        error, message, topics = await replicated(node, node.groups.delete_share_group_offsets(GROUP, [DATA]))
        assert (error, message, topics) == (NONE, None, (DeletedTopic(DATA, DATA_ID, COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."),))
        persister.failing.clear()
        assert await replicated(node, node.groups.delete_share_group(GROUP)) == NONE
        assert GROUP not in node.shard.share_groups.groups and persister.states == {}

    run(tmp_path, test)
