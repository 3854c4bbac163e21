"""The streams group protocol (KIP-1071) sans-IO: StreamsGroupManager against Kafka 4.4's rules."""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kio.schema.streams_group_heartbeat.v0 import request as kio_request
from kio.static.primitive import i16, i32, i32Timedelta, u16

from broker.group.consumer_group import GroupError
from broker.group.group_metadata_manager import CancelTimer, ScheduleTimer
from broker.group.streams_group import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    AssignedTasks,
    FencedMemberError,
    MemberState,
    OwnerLookup,
    StreamsGroupMember,
    StreamsGroupState,
    TasksTuple,
    configure_topics,
    next_member,
    tasks,
)
from broker.group.streams_group_manager import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    STREAMS_INVALID_TOPOLOGY,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    StreamsGroupHeartbeat,
    StreamsGroupManager,
    _throw_if_member_epoch_is_invalid,
    rebalance_timeout_key,
    session_timeout_key,
)
from broker.group.streams_group_records import (
    CopartitionGroup,
    Endpoint,
    StreamsGroupMetadataKey,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTopologyValue,
    StreamsTopicInfo,
    Subtopology,
    decode_record,
    encode_key,
    encode_value,
)
from tests.unit.test_streams_assignor import run_kafka_harness

GROUP = "app"


def topic(partitions: int) -> tuple[uuid.UUID, int]:
    return uuid.uuid4(), partitions


# Subtopology 0 reads "input" and writes the repartition topic; subtopology 1 reads it, with a store.
TOPOLOGY = StreamsGroupTopologyValue(
    epoch=0,
    subtopologies=(
        Subtopology(
            subtopology_id="0",
            source_topics=("input",),
            source_topic_regex=(),
            state_changelog_topics=(),
            repartition_sink_topics=("app-rep",),
            repartition_source_topics=(),
            copartition_groups=(),
        ),
        Subtopology(
            subtopology_id="1",
            source_topics=(),
            source_topic_regex=(),
            state_changelog_topics=(StreamsTopicInfo(name="app-store-changelog", partitions=0, replication_factor=0, topic_configs=()),),
            repartition_sink_topics=(),
            repartition_source_topics=(StreamsTopicInfo(name="app-rep", partitions=0, replication_factor=0, topic_configs=()),),
            copartition_groups=(),
        ),
    ),
)
INPUT_ONLY = {"input": topic(4)}
ALL_TOPICS = {"input": topic(4), "app-rep": topic(4), "app-store-changelog": topic(4)}
NO_TASKS: dict[str, frozenset[int]] = {}


def undelayed(**kwargs: Any) -> StreamsGroupManager:
    """A manager that assigns at once: no initial rebalance delay, no assignment interval (the
    tests of those two set them)."""
    return StreamsGroupManager(**{"initial_rebalance_delay_ms": 0, "assignment_interval_ms": 0, **kwargs})


def join(member_id: str, process_id: str, **kwargs: object) -> StreamsGroupHeartbeat:
    fields: dict[str, object] = {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "topology": TOPOLOGY,
        "active_tasks": NO_TASKS,
        "standby_tasks": NO_TASKS,
        "warmup_tasks": NO_TASKS,
        "process_id": process_id,
    }
    fields.update(kwargs)
    return StreamsGroupHeartbeat(**fields)  # type: ignore[arg-type]


def beat(member_id: str, epoch: int, active: dict[str, set[int]] | None = None, standby: dict[str, set[int]] | None = None, **kwargs: object) -> StreamsGroupHeartbeat:
    fields: dict[str, object] = {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": epoch,
        "active_tasks": {s: frozenset(ps) for s, ps in (active or {}).items()},
        "standby_tasks": {s: frozenset(ps) for s, ps in (standby or {}).items()},
        "warmup_tasks": NO_TASKS,
    }
    fields.update(kwargs)
    return StreamsGroupHeartbeat(**fields)  # type: ignore[arg-type]


def owned(response_tasks: dict[str, tuple[int, ...]] | None) -> dict[str, set[int]]:
    return {s: set(ps) for s, ps in (response_tasks or {}).items()}


def ready_group(manager: StreamsGroupManager) -> int:
    """One member "a" that owns every task; returns its epoch."""
    r = manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0)
    assert r.response is not None and r.response.error_code == 0
    return r.response.member_epoch


# -- joining and the topology ---------------------------------------------------------------------


def test_missing_source_topics_leave_the_group_not_ready() -> None:
    manager = undelayed()
    r = manager.heartbeat(join("a", "p1"), {}, 0)
    assert r.response is not None
    assert r.response.error_code == 0
    # A new group starts at epoch 1 (Kafka 4.4's StreamsGroup): the join moves it to 2.
    assert r.response.member_epoch == 2
    assert r.response.status is not None
    assert [(s.status_code, s.status_detail) for s in r.response.status] == [(MISSING_SOURCE_TOPICS, "Source topics input are missing.")]
    assert r.response.active_tasks == {} and r.response.standby_tasks == {} and r.response.warmup_tasks == {}
    assert manager.groups[GROUP].state is StreamsGroupState.NOT_READY
    assert r.internal_topics == {}


def test_internal_topics_to_create_are_returned_with_their_partition_counts() -> None:
    manager = undelayed()
    r = manager.heartbeat(join("a", "p1"), INPUT_ONLY, 0)
    assert r.response is not None and r.response.status is not None
    assert r.response.status[0].status_code == MISSING_INTERNAL_TOPICS
    assert r.response.status[0].status_detail == "Internal topics are missing: app-rep, app-store-changelog"
    # The repartition topic takes its writer's input count; the changelog one partition per task.
    assert {name: (t.num_partitions, t.replication_factor) for name, t in r.internal_topics.items()} == {"app-rep": (4, -1), "app-store-changelog": (4, -1)}
    assert manager.groups[GROUP].state is StreamsGroupState.NOT_READY
    assert r.response.active_tasks == {}

    # Once the shell created them the topology is validated: a new epoch, and every task assigned.
    r = manager.heartbeat(beat("a", 2), ALL_TOPICS, 10)
    assert r.response is not None
    assert r.response.status is None
    assert r.response.member_epoch == 3
    assert r.response.active_tasks == {"0": (0, 1, 2, 3), "1": (0, 1, 2, 3)}
    group = manager.groups[GROUP]
    assert group.validated_topology_epoch == 0
    assert group.state is StreamsGroupState.STABLE


def test_an_internal_topic_with_the_wrong_partition_count_is_reported() -> None:
    configured = configure_topics(TOPOLOGY, {"input": topic(4), "app-rep": topic(3)})
    assert configured.error is not None
    assert configured.error.status == INCORRECTLY_PARTITIONED_TOPICS
    assert configured.error.message == "Existing topic app-rep has different number of partitions: expected 4, found 3"
    assert not configured.is_ready()


def test_copartitioned_source_topics_must_agree() -> None:
    topology = StreamsGroupTopologyValue(
        epoch=0,
        subtopologies=(
            Subtopology(
                subtopology_id="0",
                source_topics=("left", "right"),
                source_topic_regex=(),
                state_changelog_topics=(),
                repartition_sink_topics=(),
                repartition_source_topics=(),
                copartition_groups=(CopartitionGroup(source_topics=(0, 1), source_topic_regex=(), repartition_source_topics=()),),
            ),
        ),
    )
    configured = configure_topics(topology, {"left": topic(2), "right": topic(3)})
    assert configured.error is not None and configured.error.status == INCORRECTLY_PARTITIONED_TOPICS
    ok = configure_topics(topology, {"left": topic(3), "right": topic(3)})
    assert ok.is_ready() and ok.subtopologies is not None and ok.subtopologies["0"].num_tasks == 3


def test_a_different_topology_is_refused_and_an_older_one_is_stale() -> None:
    manager = undelayed()
    ready_group(manager)
    changed = StreamsGroupTopologyValue(epoch=0, subtopologies=TOPOLOGY.subtopologies[:1])
    r = manager.heartbeat(join("b", "p2", topology=changed), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (INVALID_REQUEST, "Topology updates are not supported yet.")

    newer = StreamsGroupTopologyValue(epoch=1, subtopologies=TOPOLOGY.subtopologies)
    manager2 = undelayed()
    manager2.heartbeat(join("a", "p1", topology=newer), ALL_TOPICS, 0)
    r = manager2.heartbeat(join("b", "p2"), ALL_TOPICS, 0)
    assert r.response is not None and r.response.status is not None
    assert (r.response.status[0].status_code, r.response.status[0].status_detail) == (
        STALE_TOPOLOGY,
        "The member's topology epoch 0 is behind the group's topology epoch 1.",
    )


# -- reconciliation ------------------------------------------------------------------------------------


def test_a_task_is_revoked_from_one_member_before_another_gets_it() -> None:
    manager = undelayed()
    epoch_a = ready_group(manager)
    all_tasks = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}

    r = manager.heartbeat(join("b", "p2"), ALL_TOPICS, 100)
    assert r.response is not None
    epoch_b = r.response.member_epoch
    assert epoch_b == epoch_a + 1
    # b's target is half of the tasks, all still owned by a: it gets none of them yet.
    assert r.response.active_tasks == {}
    target_b = manager.groups[GROUP].target_assignment["b"].active
    assert sum(len(ps) for ps in target_b.values()) == 4
    assert manager.groups[GROUP].members["b"].state is MemberState.UNRELEASED_TASKS

    # a must give up b's tasks first: it stays at its epoch, told to keep only its own target.
    r = manager.heartbeat(beat("a", epoch_a, all_tasks), ALL_TOPICS, 200)
    assert r.response is not None
    assert r.response.member_epoch == epoch_a
    kept = owned(r.response.active_tasks)
    assert all(not (kept.get(s, set()) & ps) for s, ps in target_b.items())
    assert manager.groups[GROUP].members["a"].state is MemberState.UNREVOKED_TASKS
    assert ScheduleTimer(rebalance_timeout_key(GROUP, "a"), 200 + 30000) in r.timers

    # Until a confirms, b still gets nothing.
    r = manager.heartbeat(beat("b", epoch_b), ALL_TOPICS, 250)
    assert r.response is not None and r.response.active_tasks is None

    # a reports that it only owns what it kept: it moves to the new epoch.
    r = manager.heartbeat(beat("a", epoch_a, kept), ALL_TOPICS, 300)
    assert r.response is not None
    assert r.response.member_epoch == epoch_b
    assert manager.groups[GROUP].members["a"].state is MemberState.STABLE
    assert CancelTimer(rebalance_timeout_key(GROUP, "a")) in r.timers

    # Now b gets its tasks; the group is stable.
    r = manager.heartbeat(beat("b", epoch_b), ALL_TOPICS, 400)
    assert r.response is not None
    assert owned(r.response.active_tasks) == {s: set(ps) for s, ps in target_b.items()}
    assert manager.groups[GROUP].state is StreamsGroupState.STABLE
    # Every task has exactly one active owner.
    a, b = manager.groups[GROUP].members["a"], manager.groups[GROUP].members["b"]
    for s in ("0", "1"):
        assert a.assigned.active.get(s, {}).keys() | b.assigned.active.get(s, {}).keys() == {0, 1, 2, 3}
        assert not (a.assigned.active.get(s, {}).keys() & b.assigned.active.get(s, {}).keys())


def test_standbys_are_never_on_the_process_of_the_active_task() -> None:
    manager = undelayed(num_standby_replicas=1)
    manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0)
    manager.heartbeat(join("b", "p2"), ALL_TOPICS, 0)
    group = manager.groups[GROUP]
    targets = group.target_assignment
    for s, partitions in (("1", range(4)),):
        for p in partitions:
            active = [m for m, t in targets.items() if p in t.active.get(s, frozenset())]
            standby = [m for m, t in targets.items() if p in t.standby.get(s, frozenset())]
            assert len(active) == 1 and len(standby) == 1 and active != standby
    # The stateless subtopology 0 gets no standby.
    assert all("0" not in t.standby for t in targets.values())
    assert group.last_assignment_configs == {"num.standby.replicas": "1"}


def test_assignment_epochs_of_active_tasks_are_kept_until_revoked() -> None:
    member = StreamsGroupMember("m", member_epoch=3, previous_member_epoch=2, process_id="p", assigned=AssignedTasks({"0": {0: 2, 1: 3}}))
    nobody = OwnerLookup(lambda s, p: None, lambda s, p: set(), lambda s, p: set())
    after = next_member(member, 5, TasksTuple({"0": frozenset({0, 2})}), nobody, TasksTuple({"0": frozenset({0})}, {}, {}))
    assert after.state is MemberState.STABLE
    assert (after.member_epoch, after.previous_member_epoch) == (5, 3)
    assert after.assigned.active == {"0": {0: 2, 2: 5}}


def test_a_standby_is_promoted_in_place() -> None:
    member = StreamsGroupMember("m", member_epoch=3, process_id="p", assigned=AssignedTasks({}, {"0": frozenset({1})}))
    held = OwnerLookup(lambda s, p: None, lambda s, p: {"p"} if (s, p) == ("0", 1) else set(), lambda s, p: set())
    after = next_member(member, 4, TasksTuple({"0": frozenset({1})}), held, TasksTuple({}, {"0": frozenset({1})}, {}))
    assert after.assigned.active == {"0": {1: 4}}
    assert after.assigned.standby == {}
    assert after.pending_revocation.is_empty()


# -- epochs and errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (join("", "p"), INVALID_REQUEST, "MemberId can't be empty."),
        (join("a", "p", group_id=" "), INVALID_REQUEST, "GroupId can't be empty."),
        (join("a", "p", rack_id=""), INVALID_REQUEST, "RackId can't be empty."),
        (join("a", "p", rebalance_timeout_ms=-1), INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (join("a", "p", active_tasks={"0": frozenset({1})}), INVALID_REQUEST, "ActiveTasks must be empty when (re-)joining."),
        (join("a", "p", standby_tasks=None), INVALID_REQUEST, "StandbyTasks must be empty when (re-)joining."),
        (join("a", "p", topology=None), INVALID_REQUEST, "Topology must be non-null when (re-)joining."),
        (beat("a", -3), INVALID_REQUEST, "MemberEpoch is -3, but must be greater than or equal to -2."),
        (beat("a", -2), INVALID_REQUEST, "InstanceId can't be null."),
        (beat("a", 1, warmup_tasks=None), INVALID_REQUEST, "If one task-type is non-null, all must be non-null."),
        (beat("a", 1, topology=TOPOLOGY), INVALID_REQUEST, "Topology can only be provided when (re-)joining."),
        (join("a", "p", uses_source_topic_regex=True), INVALID_REQUEST, "Regular expressions for source topics are not supported yet."),
        (beat("a", 1), GROUP_ID_NOT_FOUND, "Streams group app not found."),
    ],
)
def test_bad_requests_get_kafkas_errors(request_: StreamsGroupHeartbeat, code: int, message: str) -> None:
    r = undelayed().heartbeat(request_, ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (code, message)
    assert r.records == []


def test_a_changelog_topic_with_a_partition_count_is_an_invalid_topology() -> None:
    changelog = StreamsTopicInfo(name="c", partitions=3, replication_factor=0, topic_configs=())
    bad = replace(TOPOLOGY, subtopologies=(TOPOLOGY.subtopologies[0], replace(TOPOLOGY.subtopologies[1], state_changelog_topics=(changelog,))))
    r = undelayed().heartbeat(join("a", "p", topology=bad), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (STREAMS_INVALID_TOPOLOGY, "Changelog topic c must have an undefined partition count, but it is set to 3.")


def test_wrong_epochs_unknown_members_and_invalid_tasks() -> None:
    manager = undelayed()
    epoch = ready_group(manager)
    r = manager.heartbeat(beat("a", epoch + 1), ALL_TOPICS, 0)
    assert r.response is not None and r.response.error_code == FENCED_MEMBER_EPOCH
    assert r.response.error_message == (
        f"The streams group member has a greater member epoch ({epoch + 1}) than the one known by the group coordinator ({epoch}). "
        "The member must abandon all its partitions and rejoin."
    )
    r = manager.heartbeat(beat("zz", epoch), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (UNKNOWN_MEMBER_ID, "Member zz is not a member of group app.")
    r = manager.heartbeat(beat("a", epoch, {"0": {4}}), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (STREAMS_INVALID_TOPOLOGY, "Task 4 for subtopology 0 is invalid. Number of tasks for this subtopology: 4")
    r = manager.heartbeat(beat("a", epoch, {"9": {0}}), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (STREAMS_INVALID_TOPOLOGY, "Subtopology 9 does not exist in the topology.")


def test_the_previous_epoch_is_accepted_only_with_a_subset_of_the_assignment() -> None:
    member = StreamsGroupMember("m", member_epoch=5, previous_member_epoch=3, assigned=AssignedTasks({"0": {0: 3}}))
    _throw_if_member_epoch_is_invalid(member, beat("m", 3, {"0": {0}}))
    for request in (beat("m", 4), beat("m", 3, {"0": {0, 1}}), beat("m", 3, warmup_tasks=None)):
        with pytest.raises(GroupError) as e:
            _throw_if_member_epoch_is_invalid(member, request)
        assert e.value.error_code == FENCED_MEMBER_EPOCH
        assert e.value.message.startswith(f"The streams group member has a smaller member epoch ({request.member_epoch})")


def test_a_group_of_another_type_is_not_found() -> None:
    r = undelayed(is_other_group=lambda g: True).heartbeat(join("a", "p"), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (GROUP_ID_NOT_FOUND, "Group app is not a streams group.")


# -- leaving, fencing, timers --------------------------------------------------------------------------


def test_leaving_removes_the_member_and_bumps_the_epoch() -> None:
    manager = undelayed()
    ready_group(manager)
    manager.heartbeat(join("b", "p2"), ALL_TOPICS, 0)
    group_epoch = manager.groups[GROUP].group_epoch
    r = manager.heartbeat(beat("b", 1, member_epoch=-1), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.member_id, r.response.member_epoch, r.response.status) == ("b", -1, ())
    assert [type(k).__name__ for k, v in r.records] == [
        "StreamsGroupCurrentMemberAssignmentKey",
        "StreamsGroupTargetAssignmentMemberKey",
        "StreamsGroupMemberMetadataKey",
        "StreamsGroupMetadataKey",
    ]
    assert manager.groups[GROUP].group_epoch == group_epoch + 1
    assert "b" not in manager.groups[GROUP].members
    assert CancelTimer(session_timeout_key(GROUP, "b")) in r.timers

    # The last member leaving also settles the target epoch: the group is empty, not assigning.
    r = manager.heartbeat(beat("a", 5, member_epoch=-1), ALL_TOPICS, 0)
    assert isinstance(r.records[-1][0], StreamsGroupTargetAssignmentMetadataKey)
    assert manager.groups[GROUP].state is StreamsGroupState.EMPTY
    assert manager.delete_group(GROUP).response == 0
    assert GROUP not in manager.groups


def test_a_static_member_leaves_for_a_while_and_comes_back_under_a_new_id() -> None:
    manager = undelayed()
    r = manager.heartbeat(join("a", "p1", instance_id="i1"), ALL_TOPICS, 0)
    assert r.response is not None
    epoch = r.response.member_epoch
    tasks_ = owned(r.response.active_tasks)
    r = manager.heartbeat(beat("a", -2, instance_id="i1"), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.member_id, r.response.member_epoch, r.response.status) == ("a", -2, ())
    kept = manager.groups[GROUP].members["a"]
    assert kept.member_epoch == -2 and kept.assigned.active == {s: dict.fromkeys(ps, 0) for s, ps in tasks_.items()}
    group_epoch = manager.groups[GROUP].group_epoch

    # Another member cannot take the instance id while it is held, nor heartbeat under it.
    r = manager.heartbeat(beat("x", epoch, instance_id="i1"), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (FENCED_INSTANCE_ID, "Static member x with instance id i1 was fenced by member a.")
    r = manager.heartbeat(beat("x", epoch, instance_id="nope"), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (UNKNOWN_MEMBER_ID, "Instance id nope is unknown.")

    # The instance rejoins as "a2": it replaces "a" with its tasks; nothing is rebalanced.
    r = manager.heartbeat(join("a2", "p1", instance_id="i1"), ALL_TOPICS, 0)
    assert r.response is not None and r.response.error_code == 0
    group = manager.groups[GROUP]
    assert set(group.members) == {"a2"} and "a" not in group.target_assignment
    assert group.group_epoch == group_epoch
    assert owned(r.response.active_tasks) == tasks_
    assert r.response.member_epoch == group.target_assignment_epoch

    r = manager.heartbeat(join("b", "p2", instance_id="i1"), ALL_TOPICS, 0)
    assert r.response is not None
    assert (r.response.error_code, r.response.error_message) == (
        UNRELEASED_INSTANCE_ID,
        "Static member b with instance id i1 cannot join the group because the instance id is owned by a2 member.",
    )


def test_an_expired_session_fences_the_member() -> None:
    manager = undelayed(session_timeout_ms=1000)
    ready_group(manager)
    key = session_timeout_key(GROUP, "a")
    assert manager.on_timer(key, 500).timers == [ScheduleTimer(key, 1000)]  # early: re-armed
    r = manager.on_timer(key, 1000)
    assert isinstance(r.records[3][0], StreamsGroupMetadataKey)
    assert manager.groups[GROUP].members == {}
    assert manager.on_timer(key, 2000).records == []  # stale


def test_a_non_empty_group_is_not_deleted() -> None:
    manager = undelayed()
    ready_group(manager)
    assert manager.delete_group(GROUP).response == NON_EMPTY_GROUP
    assert manager.delete_group("nope").response == GROUP_ID_NOT_FOUND


def test_shutdown_request_is_broadcast() -> None:
    manager = undelayed()
    epoch = ready_group(manager)
    r = manager.heartbeat(beat("a", epoch, {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}, shutdown_application=True), ALL_TOPICS, 0)
    assert r.response is not None and r.response.status is not None
    assert r.response.status[-1].status_code == SHUTDOWN_APPLICATION


def test_user_endpoints_map_to_their_partitions() -> None:
    manager = undelayed()
    r = manager.heartbeat(join("a", "p1", user_endpoint=Endpoint(host="h", port=8080)), ALL_TOPICS, 0)
    assert r.response is not None
    assert r.response.endpoint_information_epoch == 1
    assert r.response.partitions_by_user_endpoint is not None
    (entry,) = r.response.partitions_by_user_endpoint
    assert entry.user_endpoint == Endpoint(host="h", port=8080)
    assert entry.active_partitions == {"app-rep": (0, 1, 2, 3), "input": (0, 1, 2, 3)}


# -- records -------------------------------------------------------------------------------------------


def test_replaying_the_written_records_rebuilds_the_groups() -> None:
    manager = undelayed(num_standby_replicas=1)
    log: list[tuple[bytes, bytes | None]] = []
    steps = [
        (join("a", "p1", client_tags={"zone": "z1"}), INPUT_ONLY),
        (beat("a", 2), ALL_TOPICS),
        (join("b", "p2", user_endpoint=Endpoint(host="h", port=1)), ALL_TOPICS),
    ]
    for request, topics in steps:
        r = manager.heartbeat(request, topics, 5)
        assert r.response is not None and r.response.error_code == 0
        log += [(encode_key(k), None if v is None else encode_value(v)) for k, v in r.records]  # type: ignore[arg-type]
    replayed = undelayed()
    for key, value in log:
        replayed.replay(*decode_record(key, value))
    assert replayed.groups == manager.groups
    assert replayed.groups[GROUP].state is manager.groups[GROUP].state


def test_on_loaded_rearms_the_rebalance_timeout_of_a_member_still_revoking() -> None:
    """Kafka 4.4's GroupMetadataManager.onLoaded: a session for every member, and the rebalance
    timeout again for one in UNREVOKED_TASKS."""
    manager = undelayed()
    log: list[tuple[bytes, bytes | None]] = []
    all_tasks = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
    for request, now_ms in ((join("a", "p1"), 0), (join("b", "p2"), 100), (beat("a", 2, all_tasks), 200)):
        r = manager.heartbeat(request, ALL_TOPICS, now_ms)
        assert r.response is not None and r.response.error_code == 0
        log += [(encode_key(k), None if v is None else encode_value(v)) for k, v in r.records]  # type: ignore[arg-type]
    assert manager.groups[GROUP].members["a"].state is MemberState.UNREVOKED_TASKS
    loaded = undelayed()
    for key, value in log:
        loaded.replay(*decode_record(key, value))
    assert loaded.groups[GROUP].members["a"].state is MemberState.UNREVOKED_TASKS
    assert loaded.groups[GROUP].members["b"].state is not MemberState.UNREVOKED_TASKS
    timers = loaded.on_loaded(1000).timers
    assert sorted(timers, key=lambda t: t.key) == sorted(
        [
            ScheduleTimer(session_timeout_key(GROUP, "a"), 1000 + 45000),
            ScheduleTimer(session_timeout_key(GROUP, "b"), 1000 + 45000),
            ScheduleTimer(rebalance_timeout_key(GROUP, "a"), 1000 + 30000),
        ],
        key=lambda t: t.key,
    )
    # The re-armed timeout fences a member that still has not revoked.
    fenced = loaded.on_timer(rebalance_timeout_key(GROUP, "a"), 1000 + 30000)
    assert "a" not in loaded.groups[GROUP].members and fenced.records


def test_journal_keeps_the_group_as_it_was() -> None:
    manager = undelayed()
    ready_group(manager)
    before = manager.groups[GROUP].copy()
    journal = manager.journal()
    manager.heartbeat(join("b", "p2"), ALL_TOPICS, 0)
    assert journal[GROUP] == before


def test_kio_request_is_read() -> None:
    request = kio_request.StreamsGroupHeartbeatRequest(
        group_id=GROUP,
        member_id="a",
        member_epoch=i32(0),
        endpoint_information_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topology=kio_request.Topology(
            epoch=i32(0),
            subtopologies=(
                kio_request.Subtopology(
                    subtopology_id="0",
                    source_topics=("input",),
                    state_changelog_topics=(kio_request.TopicInfo(name="c", partitions=i32(0), replication_factor=i16(0), topic_configs=()),),
                    repartition_source_topics=(),
                    copartition_groups=(),
                ),
            ),
        ),
        active_tasks=(),
        standby_tasks=(),
        warmup_tasks=(),
        process_id="p1",
        user_endpoint=kio_request.Endpoint(host="h", port=u16(9)),
        client_tags=(kio_request.KeyValue(key="k", value="v"),),
        task_offsets=(kio_request.TaskOffset(subtopology_id="0", partition=i32(1), offset=5),),  # type: ignore[arg-type]
        task_end_offsets=None,
    )
    hb = StreamsGroupHeartbeat.of(request)
    assert hb.rebalance_timeout_ms == 30000
    assert hb.topology is not None and hb.topology.subtopologies[0].state_changelog_topics[0].name == "c"
    assert hb.client_tags == {"k": "v"} and hb.user_endpoint == Endpoint(host="h", port=9)
    assert hb.task_offsets == {"0": {1: 5}}
    r = undelayed().heartbeat(request, {"input": topic(2), "c": topic(2)}, 0)
    assert r.response is not None and r.response.active_tasks == {"0": (0, 1)}


# -- reconciliation against Kafka's own CurrentAssignmentBuilder -------------------------------------

BUILDER_HARNESS = r"""
import org.apache.kafka.coordinator.group.streams.*;
import org.apache.kafka.common.errors.FencedMemberEpochException;
import java.io.*;
import java.util.*;

public class BuilderHarness {
    static Map<String, Set<Integer>> set(Map<String, Set<Integer>> m, String s, int p) { m.computeIfAbsent(s, k -> new HashSet<>()).add(p); return m; }
    static String tasks(Map<String, Set<Integer>> m) {
        List<String> all = new ArrayList<>();
        m.forEach((s, ps) -> ps.forEach(p -> all.add(s + ":" + p)));
        Collections.sort(all);
        return String.join(",", all);
    }
    static String epochs(Map<String, Map<Integer, Integer>> m) {
        List<String> all = new ArrayList<>();
        m.forEach((s, ps) -> ps.forEach((p, e) -> all.add(s + ":" + p + "@" + e)));
        Collections.sort(all);
        return String.join(",", all);
    }
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        Map<String, Map<String, Map<Integer, Integer>>> active = new HashMap<>();
        Map<String, Map<String, Set<Integer>>> sets = new HashMap<>();
        Map<String, String> activeOwner = new HashMap<>();
        Map<String, Set<String>> standbyOwners = new HashMap<>(), warmupOwners = new HashMap<>();
        String[] member = null;
        int targetEpoch = 0;
        boolean hasOwned = false;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "case":
                    active.clear(); sets.clear(); activeOwner.clear(); standbyOwners.clear(); warmupOwners.clear(); hasOwned = false;
                    for (String k : new String[]{"assigned_active", "pending_active"}) active.put(k, new HashMap<>());
                    for (String k : new String[]{"assigned_standby", "assigned_warmup", "pending_standby", "pending_warmup", "target_active", "target_standby", "target_warmup", "owned_active", "owned_standby", "owned_warmup"}) sets.put(k, new HashMap<>());
                    break;
                case "member": member = f; break;
                case "target_epoch": targetEpoch = Integer.parseInt(f[1]); break;
                case "assigned_active": case "pending_active":
                    active.get(f[0]).computeIfAbsent(f[1], k -> new HashMap<>()).put(Integer.parseInt(f[2]), Integer.parseInt(f[3])); break;
                case "owner_active": activeOwner.put(f[1] + "-" + f[2], f[3]); break;
                case "owner_standby": standbyOwners.computeIfAbsent(f[1] + "-" + f[2], k -> new HashSet<>()).add(f[3]); break;
                case "owner_warmup": warmupOwners.computeIfAbsent(f[1] + "-" + f[2], k -> new HashSet<>()).add(f[3]); break;
                case "owned": hasOwned = true; break;
                case "end": {
                    StreamsGroupMember m = StreamsGroupMember.Builder.withDefaults("m")
                        .setState(MemberState.fromValue(Byte.parseByte(member[1])))
                        .setMemberEpoch(Integer.parseInt(member[2])).setPreviousMemberEpoch(Integer.parseInt(member[3])).setProcessId(member[4])
                        .setAssignedTasks(new TasksTupleWithEpochs(active.get("assigned_active"), sets.get("assigned_standby"), sets.get("assigned_warmup")))
                        .setTasksPendingRevocation(new TasksTupleWithEpochs(active.get("pending_active"), sets.get("pending_standby"), sets.get("pending_warmup")))
                        .build();
                    CurrentAssignmentBuilder b = new CurrentAssignmentBuilder(m)
                        .withTargetAssignment(targetEpoch, new TasksTuple(sets.get("target_active"), sets.get("target_standby"), sets.get("target_warmup")))
                        .withCurrentActiveTaskProcessId((s, p) -> activeOwner.get(s + "-" + p))
                        .withCurrentStandbyTaskProcessIds((s, p) -> standbyOwners.getOrDefault(s + "-" + p, Set.of()))
                        .withCurrentWarmupTaskProcessIds((s, p) -> warmupOwners.getOrDefault(s + "-" + p, Set.of()))
                        .withOwnedAssignment(hasOwned ? new TasksTuple(sets.get("owned_active"), sets.get("owned_standby"), sets.get("owned_warmup")) : null);
                    try {
                        StreamsGroupMember r = b.build();
                        System.out.println("result " + r.state().value() + " " + r.memberEpoch() + " " + r.previousMemberEpoch()
                            + " A" + epochs(r.assignedTasks().activeTasksWithEpochs()) + " S" + tasks(r.assignedTasks().standbyTasks()) + " W" + tasks(r.assignedTasks().warmupTasks())
                            + " PA" + epochs(r.tasksPendingRevocation().activeTasksWithEpochs()) + " PS" + tasks(r.tasksPendingRevocation().standbyTasks()) + " PW" + tasks(r.tasksPendingRevocation().warmupTasks()));
                    } catch (FencedMemberEpochException e) {
                        System.out.println("result FENCED");
                    }
                    break;
                }
                default:
                    set(sets.get(f[0]), f[1], Integer.parseInt(f[2]));
            }
        }
    }
}
"""


def _builder_case(rng: random.Random) -> tuple[list[str], Callable[[], str]]:
    """A random member, target and group ownership, as lines for the harness and as a thunk that
    runs ours."""
    subs, parts, processes = ["0", "1"], range(4), ["p1", "p2", "p3"]
    me = rng.choice(processes)
    state = rng.choice([1, 1, 2, 3, 127])
    epoch = rng.randint(1, 5)
    previous = rng.randint(0, epoch)
    target_epoch = epoch + rng.randint(0, 2)

    def pick(k: int) -> list[tuple[str, int]]:
        return rng.sample([(s, p) for s in subs for p in parts], k=rng.randint(0, k))

    lines = ["case", f"member {state} {epoch} {previous} {me}", f"target_epoch {target_epoch}"]
    assigned_active = {t: rng.randint(0, epoch) for t in pick(3)}
    assigned_standby, assigned_warmup = pick(2), pick(1)
    pending_active = {t: rng.randint(0, epoch) for t in pick(2) if t not in assigned_active}
    pending_standby, pending_warmup = pick(1), pick(1)
    target_active, target_standby, target_warmup = pick(4), pick(2), pick(1)
    owner_active = {t: rng.choice(processes) for t in pick(4)}
    owner_standby = [(t, rng.choice(processes)) for t in pick(3)]
    owner_warmup = [(t, rng.choice(processes)) for t in pick(2)]
    has_owned = rng.random() < 0.7
    owned_active, owned_standby, owned_warmup = pick(3), pick(2), pick(1)
    lines += [f"assigned_active {s} {p} {e}" for (s, p), e in assigned_active.items()]
    lines += [f"pending_active {s} {p} {e}" for (s, p), e in pending_active.items()]
    for name, entries in (
        ("assigned_standby", assigned_standby),
        ("assigned_warmup", assigned_warmup),
        ("pending_standby", pending_standby),
        ("pending_warmup", pending_warmup),
        ("target_active", target_active),
        ("target_standby", target_standby),
        ("target_warmup", target_warmup),
    ):
        lines += [f"{name} {s} {p}" for s, p in entries]
    lines += [f"owner_active {s} {p} {o}" for (s, p), o in owner_active.items()]
    lines += [f"owner_standby {s} {p} {o}" for (s, p), o in owner_standby]
    lines += [f"owner_warmup {s} {p} {o}" for (s, p), o in owner_warmup]
    if has_owned:
        lines.append("owned")
        for name, entries in (("owned_active", owned_active), ("owned_standby", owned_standby), ("owned_warmup", owned_warmup)):
            lines += [f"{name} {s} {p}" for s, p in entries]
    lines.append("end")

    def grouped(entries: list[tuple[str, int]]) -> dict[str, frozenset[int]]:
        return tasks((s, [p]) for s, p in entries)

    def with_epochs(entries: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for (s, p), e in entries.items():
            out.setdefault(s, {})[p] = e
        return out

    def ours() -> str:
        member = StreamsGroupMember(
            "m",
            member_epoch=epoch,
            previous_member_epoch=previous,
            state=MemberState.from_value(state),
            process_id=me,
            assigned=AssignedTasks(with_epochs(assigned_active), grouped(assigned_standby), grouped(assigned_warmup)),
            pending_revocation=AssignedTasks(with_epochs(pending_active), grouped(pending_standby), grouped(pending_warmup)),
        )
        standby_owners: dict[tuple[str, int], set[str]] = {}
        for t, o in owner_standby:
            standby_owners.setdefault(t, set()).add(o)
        warmup_owners: dict[tuple[str, int], set[str]] = {}
        for t, o in owner_warmup:
            warmup_owners.setdefault(t, set()).add(o)
        lookup = OwnerLookup(
            lambda s, p: owner_active.get((s, p)), lambda s, p: standby_owners.get((s, p), set()), lambda s, p: warmup_owners.get((s, p), set())
        )
        owned = TasksTuple(grouped(owned_active), grouped(owned_standby), grouped(owned_warmup)) if has_owned else None
        try:
            r = next_member(member, target_epoch, TasksTuple(grouped(target_active), grouped(target_standby), grouped(target_warmup)), lookup, owned)
        except FencedMemberError:
            return "result FENCED"

        def fmt(t: Mapping[str, Iterable[int]]) -> str:
            return ",".join(sorted(f"{s}:{p}" for s, ps in t.items() for p in ps))

        def fmt_epochs(t: Mapping[str, Mapping[int, int]]) -> str:
            return ",".join(sorted(f"{s}:{p}@{e}" for s, ps in t.items() for p, e in ps.items()))

        return (
            f"result {int(r.state)} {r.member_epoch} {r.previous_member_epoch}"
            f" A{fmt_epochs(r.assigned.active)} S{fmt(r.assigned.standby)} W{fmt(r.assigned.warmup)}"
            f" PA{fmt_epochs(r.pending_revocation.active)} PS{fmt(r.pending_revocation.standby)} PW{fmt(r.pending_revocation.warmup)}"
        )

    return lines, ours


def test_reconciliation_matches_kafkas_current_assignment_builder(tmp_path: Path) -> None:
    rng = random.Random(848)
    cases = [_builder_case(rng) for _ in range(2000)]
    kafka = run_kafka_harness(tmp_path, "BuilderHarness", BUILDER_HARNESS, "\n".join(line for lines, _ in cases for line in lines) + "\n")
    assert len(kafka) == len(cases)
    for (lines, ours), expected in zip(cases, kafka, strict=True):
        assert ours() == expected, lines
