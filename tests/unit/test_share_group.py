"""Share groups (KIP-932) in the group coordinator, sans-IO, on a virtual clock."""

from __future__ import annotations

import uuid

from broker.group import share_assignor
from broker.group.coordinator_records import (
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    decode_record,
    encode_key,
    encode_value,
)
from broker.group.share_group_manager import (
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_MEMBER_ID,
    ShareGroupHeartbeat,
    ShareGroupManager,
    ShareGroupResult,
    session_timeout_key,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"t1": (T1, 3), "t2": (T2, 2)}
G = "g"


def hb(member_id: str, epoch: int, topics: tuple[str, ...] | None = None) -> ShareGroupHeartbeat:
    return ShareGroupHeartbeat(G, member_id, epoch, None, topics)


def initialize(manager: ShareGroupManager, result: ShareGroupResult[object]) -> None:
    """The share coordinator initializes what the heartbeat asked for."""
    assert result.initialize is not None
    manager.initialize_share_group_state(result.initialize.group_id, result.initialize.partitions)


def join(manager: ShareGroupManager, member_id: str, topics: tuple[str, ...], now_ms: int = 0) -> int:
    """Join, let the state be initialized, heartbeat again: the member's epoch."""
    result = manager.heartbeat(hb(member_id, 0, topics), TOPICS, now_ms)
    assert result.response is not None and result.response.error_code == NONE
    if result.initialize is not None:
        initialize(manager, result)
    again = manager.heartbeat(hb(member_id, result.response.member_epoch), TOPICS, now_ms)
    assert again.response is not None and again.response.error_code == NONE
    return again.response.member_epoch


def assigned(manager: ShareGroupManager, member_id: str) -> dict[uuid.UUID, frozenset[int]]:
    return dict(manager.groups[G].members[member_id].assigned_partitions)


def replayed(records: list[tuple[object, object | None]]) -> ShareGroupManager:
    """A new coordinator that loads the partition, through the bytes Kafka's tools read."""
    manager = ShareGroupManager()
    for key, value in records:
        decoded = decode_record(encode_key(key), None if value is None else encode_value(value))  # type: ignore[arg-type]
        manager.replay(decoded.key, decoded.value)
    return manager


def test_first_member_gets_nothing_until_the_share_state_is_initialized() -> None:
    manager = ShareGroupManager(heartbeat_interval_ms=1234)
    result = manager.heartbeat(hb("m1", 0, ("t1",)), TOPICS, 0)
    assert result.response is not None
    assert (result.response.error_code, result.response.member_id, result.response.member_epoch) == (NONE, "m1", 1)
    assert result.response.heartbeat_interval_ms == 1234
    assert result.response.assignment == {}
    assert result.initialize is not None and result.initialize.partitions == {T1: frozenset({0, 1, 2})}
    assert result.initialize.state_epoch == 1
    assert manager.groups[G].initializing == {T1: ("t1", frozenset({0, 1, 2}))}
    initialize(manager, result)
    assert manager.groups[G].initialized == {T1: ("t1", frozenset({0, 1, 2}))} and not manager.groups[G].initializing
    # The newly initialized partitions come with a new group epoch.
    again = manager.heartbeat(hb("m1", 1), TOPICS, 10)
    assert again.response is not None
    assert again.response.member_epoch == 2
    assert again.response.assignment == {T1: (0, 1, 2)}
    assert again.initialize is None


def test_two_members_split_the_partitions_and_a_third_shares() -> None:
    manager = ShareGroupManager()
    join(manager, "m1", ("t1",))
    join(manager, "m2", ("t1",))
    manager.heartbeat(hb("m1", manager.groups[G].members["m1"].member_epoch), TOPICS, 0)
    a1, a2 = assigned(manager, "m1"), assigned(manager, "m2")
    assert a1[T1] | a2[T1] == {0, 1, 2} and not a1[T1] & a2[T1]
    assert sorted((len(a1[T1]), len(a2[T1]))) == [1, 2]


def test_more_members_than_partitions_share_them() -> None:
    target = share_assignor.assign({"a": frozenset({T2}), "b": frozenset({T2}), "c": frozenset({T2})}, {}, {T2: frozenset({0, 1})})
    counts = {m: len(target[m].get(T2, ())) for m in target}
    assert sorted(counts.values()) == [1, 1, 2]  # 3 members, 2 partitions: each partition shared by 2
    holders = [sum(p in target[m].get(T2, ()) for m in target) for p in (0, 1)]
    assert holders == [2, 2]


def test_assignor_is_sticky_and_heterogeneous_per_topic() -> None:
    previous = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2})}}
    target = share_assignor.assign({"a": frozenset({T1}), "b": frozenset({T1})}, previous, {T1: frozenset({0, 1, 2})})
    assert target == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2})}}
    hetero = share_assignor.assign({"a": frozenset({T1}), "b": frozenset({T2})}, {}, {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1})})
    assert hetero == {"a": {T1: frozenset({0, 1, 2})}, "b": {T2: frozenset({0, 1})}}
    # Uninitialized partitions are not assignable.
    assert share_assignor.assign({"a": frozenset({T1})}, {}, {T1: frozenset({1})}) == {"a": {T1: frozenset({1})}}


def test_subscription_change_and_leave() -> None:
    manager = ShareGroupManager()
    epoch = join(manager, "m1", ("t1",))
    result = manager.heartbeat(hb("m1", epoch, ("t1", "t2")), TOPICS, 0)
    assert result.response is not None and result.response.member_epoch == epoch + 1
    assert result.initialize is not None and result.initialize.partitions == {T2: frozenset({0, 1})}
    initialize(manager, result)
    result = manager.heartbeat(hb("m1", epoch + 1), TOPICS, 0)
    assert result.response is not None and result.response.assignment == {T1: (0, 1, 2), T2: (0, 1)}
    group_epoch = manager.groups[G].group_epoch
    left = manager.heartbeat(hb("m1", -1), TOPICS, 0)
    assert left.response is not None and (left.response.error_code, left.response.member_epoch) == (NONE, -1)
    group = manager.groups[G]
    assert not group.members and group.state.value == "Empty" and group.group_epoch == group_epoch + 1
    assert session_timeout_key(G, "m1") in [t.key for t in left.timers]


def test_errors() -> None:
    manager = ShareGroupManager(max_size=1)
    codes = lambda r: r.response.error_code  # noqa: E731
    assert codes(manager.heartbeat(hb("m1", 1), TOPICS, 0)) == GROUP_ID_NOT_FOUND
    assert codes(manager.heartbeat(hb("", 0, ("t1",)), TOPICS, 0)) == INVALID_REQUEST
    assert codes(manager.heartbeat(hb("m1", 0), TOPICS, 0)) == INVALID_REQUEST
    assert codes(manager.heartbeat(hb("m1", 0, ()), TOPICS, 0)) == INVALID_REQUEST
    assert codes(manager.heartbeat(hb("m1", -2), TOPICS, 0)) == INVALID_REQUEST
    epoch = join(manager, "m1", ("t1",))
    assert codes(manager.heartbeat(hb("m2", 0, ("t1",)), TOPICS, 0)) == GROUP_MAX_SIZE_REACHED
    assert codes(manager.heartbeat(hb("m2", 1), TOPICS, 0)) == GROUP_MAX_SIZE_REACHED
    assert codes(manager.heartbeat(hb("m1", epoch + 1), TOPICS, 0)) == FENCED_MEMBER_EPOCH
    assert codes(manager.heartbeat(hb("m1", epoch - 1), TOPICS, 0)) == NONE  # the previous epoch: a lost response
    assert codes(manager.heartbeat(hb("m1", 0, ("t1",)), TOPICS, 0)) == NONE  # a rejoin
    other = ShareGroupManager(is_other_group=lambda g: g == G)
    response = other.heartbeat(hb("m1", 0, ("t1",)), TOPICS, 0).response
    assert response is not None and response.error_code == GROUP_ID_NOT_FOUND and response.error_message == "Group g is not a share group."
    unknown = ShareGroupManager()
    join(unknown, "m1", ("t1",))
    assert codes(unknown.heartbeat(hb("m9", 3), TOPICS, 0)) == UNKNOWN_MEMBER_ID
    assert codes(unknown.heartbeat(hb("m9", -1), TOPICS, 0)) == UNKNOWN_MEMBER_ID


def test_session_expiry_fences_the_member_on_a_virtual_clock() -> None:
    manager = ShareGroupManager(session_timeout_ms=45000)
    join(manager, "m1", ("t1",), now_ms=0)
    join(manager, "m2", ("t1",), now_ms=0)
    manager.heartbeat(hb("m2", manager.groups[G].members["m2"].member_epoch), TOPICS, 30000)
    key1, key2 = session_timeout_key(G, "m1"), session_timeout_key(G, "m2")
    assert manager.on_timer(key2, 45000).timers[0].deadline_ms == 75000  # type: ignore[union-attr]
    expired = manager.on_timer(key1, 45000)
    assert "m1" not in manager.groups[G].members and expired.records
    assert manager.on_timer(key1, 90000).records == []
    epoch = manager.groups[G].members["m2"].member_epoch
    result = manager.heartbeat(hb("m2", epoch), TOPICS, 50000)
    assert result.response is not None and result.response.assignment == {T1: (0, 1, 2)}


def test_records_replay_to_the_same_group() -> None:
    manager = ShareGroupManager()
    log: list[tuple[object, object | None]] = []
    original_apply = manager._apply

    def recording(result):  # type: ignore[no-untyped-def]
        log.extend(result.records)
        return original_apply(result)

    manager._apply = recording  # type: ignore[method-assign]
    join(manager, "m1", ("t1", "t2"))
    join(manager, "m2", ("t1",))
    join(manager, "m3", ("t2",))
    manager.heartbeat(hb("m3", -1), TOPICS, 0)
    for member_id in ("m1", "m2"):
        manager.heartbeat(hb(member_id, manager.groups[G].members[member_id].member_epoch), TOPICS, 0)
    restored = replayed(log)
    assert restored.groups[G] == manager.groups[G]
    assert {type(k).__name__ for k, _ in log} >= {
        "ShareGroupMetadataKey",
        "ShareGroupMemberMetadataKey",
        "ShareGroupTargetAssignmentMetadataKey",
        "ShareGroupTargetAssignmentMemberKey",
        "ShareGroupCurrentMemberAssignmentKey",
        "ShareGroupStatePartitionMetadataKey",
    }
    # Kafka's record types: 11 for the group's epoch, 15 for the share-group state partitions.
    assert encode_key(ShareGroupMetadataKey(group_id=G))[:2] == b"\x00\x0b"
    assert encode_key(ShareGroupStatePartitionMetadataKey(group_id=G))[:2] == b"\x00\x0f"
    timers = restored.on_loaded(1000).timers
    assert {t.key for t in timers} == {session_timeout_key(G, "m1"), session_timeout_key(G, "m2")}


def test_describe() -> None:
    manager = ShareGroupManager()
    epoch = join(manager, "m1", ("t1",))
    (described, missing) = manager.describe([G, "nope"], {T1: "t1"})
    assert (described.error_code, described.group_state, described.group_epoch, described.assignment_epoch) == (NONE, "Stable", epoch, epoch)
    assert described.assignor_name == "simple"
    (member,) = described.members
    assert (member.member_id, member.member_epoch, member.subscribed_topic_names) == ("m1", epoch, ("t1",))
    assert [(a.topic_name, a.partitions) for a in member.assignment] == [("t1", (0, 1, 2))]
    assert missing.error_code == GROUP_ID_NOT_FOUND


def test_topic_growth_bumps_the_epoch_and_asks_for_the_new_partitions() -> None:
    manager = ShareGroupManager()
    epoch = join(manager, "m1", ("t1",))
    bumped = manager.on_metadata_change({"t1": (T1, 4)})
    assert bumped.records and manager.groups[G].group_epoch == epoch + 1
    result = manager.heartbeat(hb("m1", epoch), {"t1": (T1, 4)}, 0)
    assert result.initialize is not None and result.initialize.partitions == {T1: frozenset({3})}
    assert result.response is not None and result.response.assignment is None  # still 0-2
