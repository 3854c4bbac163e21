"""Share groups in the group coordinator shard, sans-IO: their records, timers, ListGroups and
DeleteGroups are routed to the ShareGroupManager, a group id belongs to one group type (JoinGroup
answers INCONSISTENT_GROUP_PROTOCOL and ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND for a share
group's id, and ShareGroupHeartbeat GROUP_ID_NOT_FOUND for theirs, as Kafka 4.4's
GroupMetadataManager does; the offset APIs refuse it as its OffsetMetadataManager does), and a
snapshot reverts what a failed write changed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from broker.group.classic_group import ClassicGroupState
from broker.group.group_coordinator_shard import GroupCoordinatorShard, ListedGroup
from broker.group.group_metadata_manager import (
    GROUP_ID_NOT_FOUND,
    INCONSISTENT_GROUP_PROTOCOL,
    NON_EMPTY_GROUP,
    NONE,
    CancelTimer,
    GroupConfig,
    JoinGroupRequest,
    JoinGroupResponse,
    ScheduleTimer,
)
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group.share_group_manager import ShareGroupHeartbeat, session_timeout_key
from tests.unit.test_consumer_group import request as consumer_heartbeat

T = uuid.UUID(int=7)
TOPICS = {"t": (T, 2)}
SHARE = "share-g"
SESSION = 45_000


class Responder:
    """Stands in for a waiting JoinGroup: keeps what it is answered."""

    def __init__(self) -> None:
        self.answer: Any = None


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(GroupConfig(initial_rebalance_delay_ms=0), offset_metadata_max_bytes=4096, offsets_retention_ms=7 * 86_400_000)


def share_join(shard: GroupCoordinatorShard, member_id: str, group_id: str = SHARE, now_ms: int = 0) -> Any:
    return shard.share_groups.heartbeat(ShareGroupHeartbeat(group_id, member_id, 0, None, ("t",)), TOPICS, now_ms)


def classic_join(shard: GroupCoordinatorShard, group_id: str) -> JoinGroupResponse:
    join = JoinGroupRequest(group_id, 10_000, 10_000, "", None, "consumer", (("range", b"m"),), "c", "/h", False, False)
    result = shard.groups.join_group(join, Responder(), 0)
    return result.responses[0].response  # type: ignore[no-any-return]


def test_share_records_replay_into_the_share_groups() -> None:
    coordinator = new_shard()
    joined = share_join(coordinator, "m1")
    assert joined.response.error_code == NONE and joined.response.member_epoch == 1
    # Nothing initialized the share partitions: they are initializing, and not assigned.
    assert joined.response.assignment == {}
    assert joined.initialize is not None and joined.initialize.partitions == {T: frozenset({0, 1})}

    loaded = new_shard()
    for offset, (key, value) in enumerate(joined.records):
        loaded.replay(key, value, offset)
    group = loaded.share_groups.groups[SHARE]
    assert set(group.members) == {"m1"} and group.group_epoch == 1 and group.initializing == {T: ("t", frozenset({0, 1}))}
    assert not loaded.consumer_groups.groups and not loaded.groups.groups
    assert loaded.members_of(SHARE) == {"m1"}
    assert ScheduleTimer(session_timeout_key(SHARE, "m1"), 5 + SESSION) in loaded.on_loaded(5).timers


def test_a_share_session_timer_fences_the_member() -> None:
    coordinator = new_shard()
    joined = share_join(coordinator, "m1")
    [timer] = joined.timers
    assert isinstance(timer, ScheduleTimer) and timer.key[0] == "share-session-timeout"
    early = coordinator.on_timer(timer.key, timer.deadline_ms - 1)
    assert early.records == [] and early.timers == [timer]
    fenced = coordinator.on_timer(timer.key, timer.deadline_ms)
    assert fenced.records and coordinator.members_of(SHARE) == set()


def test_list_groups_lists_share_groups_by_type_and_state() -> None:
    coordinator = new_shard()
    share_join(coordinator, "m1")
    classic_join(coordinator, "classic-g")
    everything = {g.group_id: g for g in coordinator.list_groups(set(), set())}
    assert everything[SHARE] == ListedGroup(SHARE, "share", "Stable", "share")
    assert everything["classic-g"].group_type == "classic"
    assert coordinator.list_groups(set(), {"Share"}) == [ListedGroup(SHARE, "share", "Stable", "share")]
    assert coordinator.list_groups({"empty"}, {"share"}) == []
    assert [g.group_id for g in coordinator.list_groups(set(), {"classic", "consumer"})] == ["classic-g"]


def test_delete_groups_deletes_only_an_empty_share_group() -> None:
    coordinator = new_shard()
    joined = share_join(coordinator, "m1")
    errors, result = coordinator.delete_groups([SHARE], 0)
    assert errors == {SHARE: NON_EMPTY_GROUP} and result.records == []
    coordinator.share_groups.heartbeat(ShareGroupHeartbeat(SHARE, "m1", -1), TOPICS, 0)
    errors, result = coordinator.delete_groups([SHARE], 0)
    assert errors == {SHARE: NONE} and result.records and all(value is None for _, value in result.records)
    assert SHARE not in coordinator.share_groups.groups
    # Replayed, the tombstones leave nothing either.
    loaded = new_shard()
    for offset, (key, value) in enumerate(joined.records + result.records):
        loaded.replay(key, value, offset)
    assert SHARE not in loaded.share_groups.groups


def test_the_classic_and_consumer_protocols_refuse_a_share_group_id() -> None:
    coordinator = new_shard()
    share_join(coordinator, "m1")
    refused = classic_join(coordinator, SHARE)
    assert refused.error_code == INCONSISTENT_GROUP_PROTOCOL and coordinator.groups.group(SHARE) is None
    answer = coordinator.consumer_groups.heartbeat(consumer_heartbeat(str(uuid.uuid4()), group_id=SHARE, rebalance_timeout_ms=5000, subscribed_topic_names=["t"], owned={}), TOPICS, 0)
    assert answer.response.error_code == GROUP_ID_NOT_FOUND and answer.records == []
    assert answer.response.error_message == f"Group {SHARE} is not a consumer group"
    # Even an empty share group keeps its id (only an empty classic group is taken over).
    coordinator.share_groups.heartbeat(ShareGroupHeartbeat(SHARE, "m1", -1), TOPICS, 0)
    assert classic_join(coordinator, SHARE).error_code == INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("members", [True, False])
def test_the_offset_apis_refuse_a_share_group_id(members: bool) -> None:
    """ShareGroup.validateOffsetCommit/Fetch/Delete throw GROUP_ID_NOT_FOUND: OffsetCommit (any
    version, even the admin's generation -1 that creates a simple group) and TxnOffsetCommit (any
    version: only STALE_MEMBER_EPOCH is downgraded) fail every partition, nothing is written and
    no classic group appears; OffsetDelete fails the whole request; OffsetFetch is no error, the
    group answered as one with no offsets (fetchOffsets catches the exception)."""
    coordinator = new_shard()
    share_join(coordinator, "m1")
    if not members:
        coordinator.share_groups.heartbeat(ShareGroupHeartbeat(SHARE, "m1", -1), TOPICS, 0)
    parts = [PartitionCommit("t", 0, 5, -1, None, T), PartitionCommit("t", 1, 6, -1, "x" * 5000, T)]
    for generation, member_id, version in ((-1, "", 2), (-1, "", 9), (1, "m1", 8), (1, "m1", 10)):
        answers, records = coordinator.offsets.commit(SHARE, generation, member_id, None, -1, parts, version, 0)
        assert [e for _, e in answers] == [GROUP_ID_NOT_FOUND] * 2 and records == []
    for generation, member_id, version in ((-1, "", 0), (1, "m1", 3), (1, "m1", 6)):
        answers, records = coordinator.offsets.txn_commit(SHARE, generation, member_id, None, parts, 0, version)
        assert [e for _, e in answers] == [GROUP_ID_NOT_FOUND] * 2 and records == []
    assert coordinator.groups.group(SHARE) is None and not coordinator.offsets.has_offsets(SHARE)
    assert coordinator.offsets.delete_offsets(SHARE, [("t", 0)]) == (GROUP_ID_NOT_FOUND, [], [])
    for member_id, epoch in ((None, -1), ("m1", 1), ("other", 7)):
        assert coordinator.offsets.validate_fetch(SHARE, member_id, epoch) == NONE
    assert coordinator.offsets.fetch(SHARE, [("t", 0)]) == [("t", 0, None)]
    assert coordinator.offsets.fetch(SHARE, None) == []


def test_share_groups_refuse_a_classic_or_consumer_group_id() -> None:
    coordinator = new_shard()
    classic_join(coordinator, "classic-g")
    assert coordinator.groups.group("classic-g").state is ClassicGroupState.COMPLETING_REBALANCE
    consumer = coordinator.consumer_groups.heartbeat(consumer_heartbeat(str(uuid.uuid4()), group_id="consumer-g", rebalance_timeout_ms=5000, subscribed_topic_names=["t"], owned={}), TOPICS, 0)
    assert consumer.response.error_code == NONE
    for group_id in ("classic-g", "consumer-g"):
        refused = share_join(coordinator, "m1", group_id)
        assert (refused.response.error_code, refused.response.error_message) == (GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        assert refused.records == [] and group_id not in coordinator.share_groups.groups
        [described] = coordinator.share_groups.describe([group_id], {})
        assert described.error_code == GROUP_ID_NOT_FOUND


def test_a_snapshot_reverts_a_share_group_and_its_timers() -> None:
    coordinator = new_shard()
    share_join(coordinator, "m1")
    expected = coordinator.share_groups.groups[SHARE].copy()
    before = coordinator.snapshot([SHARE])
    joined = share_join(coordinator, "m2", now_ms=10)
    assert set(coordinator.share_groups.groups[SHARE].members) == {"m1", "m2"}
    assert before.share == {SHARE: expected} and SHARE in before.group_ids
    coordinator.revert(before)
    assert coordinator.share_groups.groups[SHARE] == expected
    timers = coordinator.on_reverted(before.group_ids, 20).timers
    assert ScheduleTimer(session_timeout_key(SHARE, "m1"), 20 + SESSION) in timers
    assert CancelTimer(session_timeout_key(SHARE, "m2")) in timers
    assert joined.response.error_code == NONE
    # A group the failed write created is gone.
    before = coordinator.snapshot(["other"])
    share_join(coordinator, "m3", "other")
    coordinator.revert(before)
    assert "other" not in coordinator.share_groups.groups
