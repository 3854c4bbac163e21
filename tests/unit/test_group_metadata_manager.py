"""The classic group state machine and committed offsets, driven without sockets or an event loop."""

from __future__ import annotations

import io
import itertools

import pytest
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.serial import entity_writer

from broker.group.classic_group import ClassicGroupState
from broker.group.coordinator_records import GroupMetadataKey, OffsetCommitKey, decode_record, encode_key, encode_value
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    CancelTimer,
    CoordinatorResult,
    GroupConfig,
    JoinGroupRequest,
    JoinGroupResponse,
    ScheduleTimer,
    SyncGroupResponse,
    heartbeat_key,
    join_key,
)
from broker.group.offset_metadata_manager import GROUP_SUBSCRIBED_TO_TOPIC, OFFSET_METADATA_TOO_LARGE, PartitionCommit
from broker.coordinator.coordinator_partitioner import java_string_hash, partition_for

GROUP = "g"
SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    out = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(out, ConsumerProtocolSubscription(topics=topics, user_data=None, owned_partitions=()))
    return b"\x00\x01" + out.getvalue()


class Harness:
    """One shard plus a fake clock, a record of responses per waiting request, and the timers armed."""

    def __init__(self, initial_delay_ms: int = 0) -> None:
        ids = itertools.count(1)
        self.shard = GroupCoordinatorShard(
            GroupConfig(initial_rebalance_delay_ms=initial_delay_ms), offset_metadata_max_bytes=100, offsets_retention_ms=60_000
        )
        self.shard.groups._suffix = lambda: str(next(ids))
        self.now = 1_000
        self.responses: dict[object, object] = {}
        self.timers: dict[tuple[str, ...], int] = {}
        self.records: list[tuple[object, object | None]] = []
        self._requests = itertools.count()

    def run(self, result: CoordinatorResult) -> None:
        for key, value in result.records:
            # Every record must survive the wire format the partition stores.
            decoded = decode_record(encode_key(key), None if value is None else encode_value(value))
            assert (decoded.key, decoded.value) == (key, value)
            self.records.append((key, value))
            if isinstance(key, OffsetCommitKey):
                self.shard.replay(key, value, len(self.records) - 1)
        for respond in result.responses:
            self.responses[respond.responder] = respond.response
        for timer in result.timers:
            if isinstance(timer, CancelTimer):
                self.timers.pop(timer.key, None)
            else:
                assert isinstance(timer, ScheduleTimer)
                self.timers[timer.key] = timer.deadline_ms

    def join(self, member_id: str = "", instance_id: str | None = None, topics: tuple[str, ...] = ("t",), session: int = SESSION, version: int = 9) -> int:
        token = next(self._requests)
        request = JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=session,
            rebalance_timeout_ms=REBALANCE,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=(("range", subscription(*topics)),),
            client_id="client",
            client_host="/127.0.0.1",
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        self.run(self.shard.groups.join_group(request, token, self.now))
        return token

    def join_new(self, instance_id: str | None = None) -> tuple[int, str]:
        """A dynamic member's two-step join (KIP-394); returns the waiting request and the member id."""
        if instance_id is not None:
            return self.join(instance_id=instance_id), ""
        first = self.join()
        response = self.response(first)
        assert response.error_code == MEMBER_ID_REQUIRED
        return self.join(member_id=response.member_id), response.member_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, instance_id: str | None = None) -> int:
        token = next(self._requests)
        self.run(self.shard.groups.sync_group(GROUP, generation, member_id, instance_id, "consumer", "range", assignments or {}, token, self.now))
        return token

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> int:
        error, result = self.shard.groups.heartbeat(GROUP, generation, member_id, instance_id, self.now)
        self.run(result)
        return error

    def response(self, token: int) -> JoinGroupResponse:
        response = self.responses[token]
        assert isinstance(response, JoinGroupResponse)
        return response

    def sync_response(self, token: int) -> SyncGroupResponse:
        response = self.responses[token]
        assert isinstance(response, SyncGroupResponse)
        return response

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms
        for _ in range(1000):
            due = sorted((deadline, key) for key, deadline in self.timers.items() if deadline <= target)
            if not due:
                break
            deadline, key = due[0]
            del self.timers[key]
            self.now = deadline
            self.run(self.shard.groups.on_timer(key, self.now))
        self.now = target

    @property
    def group(self):  # type: ignore[no-untyped-def]
        return self.shard.groups.groups[GROUP]


def stable_group_of_two(h: Harness) -> tuple[str, str]:
    j1, a = h.join_new()
    assert h.response(j1).error_code == NONE and h.response(j1).leader == a
    h.run(h.shard.groups.sync_group(GROUP, 1, a, None, None, None, {a: b"A"}, "s0", h.now))
    j2, b = h.join_new()
    assert j2 not in h.responses, "the join waits for the existing member to rejoin"
    assert h.heartbeat(a, 1) == REBALANCE_IN_PROGRESS
    j1b = h.join(member_id=a)
    assert h.response(j1b).generation_id == h.response(j2).generation_id == 2
    assert {m.member_id for m in h.response(j1b).members} == {a, b}, "the leader learns every member"
    assert h.response(j2).members == ()
    s2 = h.sync(b, 2)
    assert s2 not in h.responses, "followers wait for the leader's assignment"
    s1 = h.sync(a, 2, {a: b"A", b: b"B"})
    assert h.sync_response(s1).assignment == b"A" and h.sync_response(s2).assignment == b"B"
    assert h.group.state is ClassicGroupState.STABLE
    return a, b


def test_java_hash_and_coordinator_partition() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Java's famous Integer.MIN_VALUE hash
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("ü€") == (31 * 0xFC + 0x20AC)


def test_join_sync_and_a_second_member_rebalance() -> None:
    h = Harness()
    a, b = stable_group_of_two(h)
    group_records = [v for k, v in h.records if isinstance(k, GroupMetadataKey)]
    assert group_records[-1].generation == 2 and {m.member_id: m.assignment for m in group_records[-1].members} == {a: b"A", b: b"B"}
    assert h.heartbeat(a, 2) == NONE and h.heartbeat(b, 2) == NONE


def test_error_paths() -> None:
    h = Harness()
    a, b = stable_group_of_two(h)
    assert h.heartbeat("nobody", 2) == UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, 1) == ILLEGAL_GENERATION
    assert h.sync_response(h.sync(a, 7)).error_code == ILLEGAL_GENERATION
    bad_session = h.join(session=10)
    assert h.response(bad_session).error_code == INVALID_SESSION_TIMEOUT
    token = next(h._requests)
    other_type = JoinGroupRequest(GROUP, SESSION, REBALANCE, "", None, "connect", (("x", b""),), "c", "/h", True, True)
    h.run(h.shard.groups.join_group(other_type, token, h.now))
    assert h.response(token).error_code == INCONSISTENT_GROUP_PROTOCOL
    assert h.response(h.join(member_id="ghost")).error_code == UNKNOWN_MEMBER_ID
    # A rebalance is under way once b rejoins: syncs and heartbeats say so.
    h.join(member_id=b, topics=("t", "u"))
    assert h.heartbeat(a, 2) == REBALANCE_IN_PROGRESS
    assert h.sync_response(h.sync(a, 2)).error_code == REBALANCE_IN_PROGRESS
    errors, _ = h.shard.delete_groups(["missing", GROUP], h.now)
    assert errors == {"missing": GROUP_ID_NOT_FOUND, GROUP: NON_EMPTY_GROUP}


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    h = Harness()
    a, b = stable_group_of_two(h)
    for _ in range(4):
        h.advance(SESSION // 2)
        assert h.heartbeat(a, 2) in (NONE, REBALANCE_IN_PROGRESS)
    assert b not in h.group.members, "b stopped heartbeating and its session expired"
    assert h.group.state is ClassicGroupState.PREPARING_REBALANCE
    j = h.join(member_id=a)
    assert h.response(j).generation_id == 3 and [m.member_id for m in h.response(j).members] == [a]


def test_leave_group_moves_partitions_in_one_rebalance() -> None:
    h = Harness()
    a, b = stable_group_of_two(h)
    error, answers, result = h.shard.groups.leave_group(GROUP, [(b, None), ("ghost", None)], h.now)
    h.run(result)
    assert error == NONE and answers == [(b, None, NONE), ("ghost", None, UNKNOWN_MEMBER_ID)]
    assert h.heartbeat(a, 2) == REBALANCE_IN_PROGRESS
    assert h.response(h.join(member_id=a)).generation_id == 3


def test_pending_member_that_never_returns_expires() -> None:
    h = Harness()
    first = h.join()
    pending = h.response(first).member_id
    assert pending in h.group.pending_members and heartbeat_key(GROUP, pending) in h.timers
    h.advance(SESSION + 1)
    assert pending not in h.group.pending_members
    assert h.response(h.join(member_id=pending)).error_code == UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_its_assignment_without_rebalance() -> None:
    h = Harness()
    j1, _ = h.join_new(instance_id="i-1")
    first_id = h.response(j1).member_id
    h.sync(first_id, 1, {first_id: b"A"}, instance_id="i-1")
    j2, _ = h.join_new(instance_id="i-2")
    j1b = h.join(member_id=first_id, instance_id="i-1")
    second_id = h.response(j2).member_id
    s2 = h.sync(second_id, 2, instance_id="i-2")
    h.sync(first_id, 2, {first_id: b"A", second_id: b"B"}, instance_id="i-1")
    assert h.response(j1b).generation_id == 2 and h.sync_response(s2).assignment == b"B"
    # i-2 restarts: a new member id, the same generation and assignment, no rebalance.
    rejoin = h.join(instance_id="i-2")
    response = h.response(rejoin)
    assert response.error_code == NONE and response.generation_id == 2 and response.member_id != second_id
    assert h.group.state is ClassicGroupState.STABLE
    assert h.sync_response(h.sync(response.member_id, 2, instance_id="i-2")).assignment == b"B"
    # The old incarnation is fenced.
    assert h.heartbeat(second_id, 2, instance_id="i-2") == FENCED_INSTANCE_ID
    assert h.heartbeat(first_id, 2, instance_id="i-1") == NONE


def test_initial_rebalance_delay_waits_for_members_to_arrive() -> None:
    h = Harness(initial_delay_ms=3000)
    j1, a = h.join_new()
    assert h.timers[join_key(GROUP)] == h.now + 3000 and j1 not in h.responses
    h.advance(2000)
    j2, b = h.join_new()
    h.advance(1500)
    assert j1 not in h.responses, "a member arrived during the delay: the join waits another delay"
    h.advance(3000)
    assert h.response(j1).generation_id == h.response(j2).generation_id == 1
    assert {m.member_id for m in h.response(j1).members} | {m.member_id for m in h.response(j2).members} == {a, b}


def test_group_state_replays_from_its_records() -> None:
    h = Harness()
    a, b = stable_group_of_two(h)
    replayed = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=100, offsets_retention_ms=60_000)
    for offset, (key, value) in enumerate(h.records):
        replayed.replay(key, value, offset)
    group = replayed.groups.groups[GROUP]
    assert group.state is ClassicGroupState.STABLE and group.generation_id == 2 and group.leader_id == a
    assert {m.member_id: m.assignment for m in group.members.values()} == {a: b"A", b: b"B"}
    timers = replayed.groups.on_loaded(h.now).timers
    assert {t.key for t in timers} == {heartbeat_key(GROUP, a), heartbeat_key(GROUP, b)}


def test_a_simple_consumers_offsets_replay_into_the_empty_group_they_made() -> None:
    """Kafka's OffsetMetadataManager.replay: a commit with no group record makes an empty classic
    group, so a new coordinator lists and describes the group the old one did."""
    h = Harness()
    assert commit(h, "", -1, 10) == [NONE]
    assert [g.group_id for g in h.shard.list_groups(set(), set())] == [GROUP]
    replayed = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=100, offsets_retention_ms=60_000)
    for offset, (key, value) in enumerate(h.records):
        replayed.replay(key, value, offset)
    [listed] = replayed.list_groups(set(), set())
    assert (listed.group_id, listed.state, listed.protocol_type) == (GROUP, "Empty", "")
    assert replayed.groups.group(GROUP) is not None and not replayed.groups.group(GROUP).members
    assert [o.offset for _, _, o in replayed.offsets.fetch(GROUP, [("t", 0)]) if o is not None] == [10]


def commit(h: Harness, member: str, generation: int, offset: int, metadata: str = "", topic: str = "t", version: int = 8) -> list[int]:
    answers, records = h.shard.offsets.commit(GROUP, generation, member, None, -1, [PartitionCommit(topic, 0, offset, 3, metadata)], version, h.now)
    h.run(CoordinatorResult(records=records))
    return [code for _, code in answers]


def test_offset_commit_checks_membership_and_generation() -> None:
    h = Harness()
    assert commit(h, "", 5, 10) == [ILLEGAL_GENERATION], "no such group, and the commit claims a generation"
    assert commit(h, "", 5, 10, version=9) == [GROUP_ID_NOT_FOUND]
    assert commit(h, "", -1, 10) == [NONE], "a simple consumer commits with no generation"
    a, b = stable_group_of_two(h)
    assert commit(h, a, 1, 11) == [ILLEGAL_GENERATION]
    assert commit(h, "ghost", 2, 11) == [UNKNOWN_MEMBER_ID]
    assert commit(h, a, 2, 12, metadata="x" * 101) == [OFFSET_METADATA_TOO_LARGE]
    assert commit(h, a, 2, 12, metadata="m") == [NONE]
    [(_, _, committed)] = h.shard.offsets.fetch(GROUP, [("t", 0)])
    assert committed is not None and (committed.offset, committed.leader_epoch, committed.metadata) == (12, 3, "m")
    h.join(member_id=b, topics=("t", "u"))
    assert h.group.state is ClassicGroupState.PREPARING_REBALANCE
    assert commit(h, a, 2, 13) == [NONE], "the old generation may still commit while members rejoin"
    h.join(member_id=a)
    assert h.group.state is ClassicGroupState.COMPLETING_REBALANCE
    assert commit(h, a, 3, 14) == [REBALANCE_IN_PROGRESS], "fenced until the member has its new assignment"


def test_offset_delete_refuses_subscribed_topics_and_offsets_expire() -> None:
    h = Harness()
    a, _ = stable_group_of_two(h)
    assert commit(h, a, 2, 5, topic="t") == [NONE]
    assert commit(h, a, 2, 6, topic="old") == [NONE]
    error, answers, records = h.shard.offsets.delete_offsets(GROUP, [("t", 0), ("old", 0)])
    h.run(CoordinatorResult(records=records))
    assert error == NONE and answers == [("t", 0, GROUP_SUBSCRIBED_TO_TOPIC), ("old", 0, NONE)]
    assert h.shard.offsets.fetch(GROUP, None) == [("t", 0, h.shard.offsets.offsets[GROUP][("t", 0)])]
    h.run(h.shard.groups.leave_group(GROUP, [(m, None) for m in list(h.group.members)], h.now)[2])
    assert h.group.state is ClassicGroupState.EMPTY
    h.advance(59_000)
    h.run(CoordinatorResult(records=h.shard.cleanup(h.now)))
    assert h.shard.offsets.has_offsets(GROUP), "not yet past offsets.retention since the group emptied"
    h.advance(2_000)
    h.run(CoordinatorResult(records=h.shard.cleanup(h.now)))
    assert not h.shard.offsets.has_offsets(GROUP)
    h.run(CoordinatorResult(records=h.shard.cleanup(h.now)))
    assert GROUP not in h.shard.groups.groups, "an empty group with no offsets left is deleted"


def test_delete_empty_group_writes_tombstones() -> None:
    h = Harness()
    assert commit(h, "", -1, 10) == [NONE]
    errors, result = h.shard.delete_groups([GROUP], h.now)
    h.run(result)
    assert errors == {GROUP: NONE}
    assert (OffsetCommitKey(group=GROUP, topic="t", partition=0), None) in h.records
    assert (GroupMetadataKey(group=GROUP), None) in h.records
    assert not h.shard.offsets.has_offsets(GROUP)


@pytest.mark.parametrize("version", [0, 3])
def test_old_clients_join_without_the_member_id_round_trip(version: int) -> None:
    h = Harness()
    token = h.join(version=version)
    response = h.response(token)
    assert response.error_code == NONE and response.generation_id == 1 and response.member_id.startswith("client-")
