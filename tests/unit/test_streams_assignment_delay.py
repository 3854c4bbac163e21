"""When a streams group's target assignment is computed, with a virtual clock: Kafka 4.4's initial
rebalance delay (``group.streams.initial.rebalance.delay.ms``, a group's
``streams.initial.rebalance.delay.ms``) and assignment interval (``group.streams.assignment.interval.ms``),
the ASSIGNMENT_DELAYED statuses of GroupMetadataManager.maybeUpdateStreamsTargetAssignment, the
rack-aware assignment tags (MISSING_CLIENT_TAGS) and the statuses KafkaApis adds when internal
topics cannot be created."""

from __future__ import annotations

from typing import Any

from broker.config import BrokerConfig
from broker.group import streams_assignor
from broker.group.group_metadata_manager import CancelTimer, ScheduleTimer
from broker.group.streams_group import (
    ASSIGNMENT_DELAYED,
    MISSING_CLIENT_TAGS,
    MISSING_INTERNAL_TOPICS,
    StreamsGroupState,
)
from broker.group.streams_group_configs import StreamsGroupBounds, StreamsGroupConfigs
from broker.group.streams_group_manager import (
    ASSIGNMENT_INTERVAL_DELAYED,
    INITIAL_REBALANCE_DELAYED,
    Status,
    StreamsGroupHeartbeatResponse,
    StreamsGroupManager,
    StreamsGroupResult,
    can_compute_next_target_assignment,
    initial_rebalance_key,
    with_internal_topic_errors,
)
from broker.group.streams_group_records import StreamsGroupTargetAssignmentMemberKey
from tests.unit.test_streams_group import ALL_TOPICS, GROUP, beat, join, owned

KEY = initial_rebalance_key(GROUP)


class Clock:
    """The time the manager is told, moved by hand."""

    def __init__(self) -> None:
        self.now = 0

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def answer(result: StreamsGroupResult[StreamsGroupHeartbeatResponse]) -> StreamsGroupHeartbeatResponse:
    assert result.response is not None and result.response.error_code == 0, result.response
    return result.response


def statuses(response: StreamsGroupHeartbeatResponse) -> list[tuple[int, str]]:
    return [(s.status_code, s.status_detail) for s in response.status or ()]


def total(tasks: dict[str, tuple[int, ...]] | None) -> int:
    return sum(len(ps) for ps in (tasks or {}).values())


# -- the initial rebalance delay ---------------------------------------------------------------------


def test_the_first_member_starts_the_delay_and_the_timer_assigns_when_it_ends() -> None:
    clock = Clock()
    manager = StreamsGroupManager(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)

    first = manager.heartbeat(join("a", "p1"), ALL_TOPICS, clock.now)
    a = answer(first)
    # Kafka 4.4: the member reconciles to the new group's initial target (epoch 1, no task), told why.
    assert (a.member_epoch, a.active_tasks, a.standby_tasks, a.warmup_tasks) == (1, {}, {}, {})
    assert (ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED) in statuses(a)
    assert ScheduleTimer(KEY, 3000) in first.timers
    # No target is written.
    kinds = {type(key).__name__ for key, _ in first.records}
    assert kinds == {"StreamsGroupMemberMetadataKey", "StreamsGroupTopologyKey", "StreamsGroupMetadataKey", "StreamsGroupCurrentMemberAssignmentKey"}
    group = manager.groups[GROUP]
    assert (group.group_epoch, group.target_assignment_epoch, group.state) == (2, 1, StreamsGroupState.ASSIGNING)

    # A second member within the delay waits too; the delay is not restarted.
    second = manager.heartbeat(join("b", "p2"), ALL_TOPICS, clock.advance(1000))
    b = answer(second)
    assert b.member_epoch == 1 and (ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED) in statuses(b)
    assert not [t for t in second.timers if t.key == KEY]
    again = answer(manager.heartbeat(beat("a", 1), ALL_TOPICS, clock.advance(1000)))
    assert (again.member_epoch, again.active_tasks) == (1, None) and (ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED) in statuses(again)

    # A timer that fires early (clock rounding) is armed again and changes nothing.
    early = manager.on_timer(KEY, clock.advance(999))
    assert (early.records, early.timers) == ([], [ScheduleTimer(KEY, 3000)])

    # When it ends, the target of both members is computed at the group epoch.
    done = manager.on_timer(KEY, clock.advance(1))
    assert {key.member_id for key, _ in done.records if isinstance(key, StreamsGroupTargetAssignmentMemberKey)} == {"a", "b"}
    group = manager.groups[GROUP]
    assert group.target_assignment_epoch == group.group_epoch == 3 and group.assignment_timestamp == 3000
    assert KEY not in manager._deadlines

    # The members get it at their next heartbeat, with no status.
    a2 = answer(manager.heartbeat(beat("a", 1), ALL_TOPICS, clock.advance(100)))
    b2 = answer(manager.heartbeat(beat("b", 1), ALL_TOPICS, clock.advance(100)))
    assert (a2.member_epoch, b2.member_epoch) == (3, 3)
    assert a2.status is None and b2.status is None
    assert total(a2.active_tasks) + total(b2.active_tasks) == 8


def assigned_after_the_delay(clock: Clock) -> tuple[StreamsGroupManager, StreamsGroupHeartbeatResponse]:
    """"a" joins a new group, the delay ends, "a" heartbeats: the manager and that answer."""
    manager = StreamsGroupManager(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)
    answer(manager.heartbeat(join("a", "p1"), ALL_TOPICS, clock.now))
    manager.on_timer(KEY, clock.advance(3000))
    return manager, answer(manager.heartbeat(beat("a", 1), ALL_TOPICS, clock.advance(10)))


def test_a_member_joining_later_is_not_delayed() -> None:
    clock = Clock()
    manager, a = assigned_after_the_delay(clock)
    b = answer(manager.heartbeat(join("b", "p2"), ALL_TOPICS, clock.advance(10)))
    assert a.member_epoch == 2 and total(a.active_tasks) == 8
    assert b.member_epoch == 3 and b.status is None


def test_an_emptied_group_delays_again_and_a_gone_group_ignores_the_timer() -> None:
    clock = Clock()
    manager, a = assigned_after_the_delay(clock)
    answer(manager.heartbeat(beat("a", -1), ALL_TOPICS, clock.advance(10)))
    assert manager.groups[GROUP].state is StreamsGroupState.EMPTY

    # The leave settled the empty group's target at epoch 3: the newcomer reconciles to that
    # (empty) target while the delay runs again.
    rejoin = manager.heartbeat(join("c", "p3"), ALL_TOPICS, clock.advance(10))
    c = answer(rejoin)
    assert (c.member_epoch, c.active_tasks) == (3, {}) and (ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED) in statuses(c)
    assert ScheduleTimer(KEY, clock.now + 3000) in rejoin.timers
    # The group is deleted before the delay ends (its member left): the timer finds nothing to do.
    answer(manager.heartbeat(beat("c", -1), ALL_TOPICS, clock.advance(10)))
    assert manager.delete_group(GROUP).response == 0
    assert manager.on_timer(KEY, clock.advance(3000)).records == []
    assert a.member_epoch == 2


def test_no_delay_assigns_at_once() -> None:
    manager = StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
    first = manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0)
    assert answer(first).member_epoch == 2 and total(answer(first).active_tasks) == 8
    assert not [t for t in first.timers if t.key == KEY]


def test_a_groups_own_delay_overrides_the_brokers() -> None:
    props = {"fast": {"streams.initial.rebalance.delay.ms": "0"}, GROUP: {"streams.initial.rebalance.delay.ms": "500"}}
    configs = StreamsGroupConfigs(StreamsGroupBounds.of(BrokerConfig()), lambda g: props.get(g, {}))
    manager = StreamsGroupManager(group_configs=configs)
    assert (configs.streams_initial_rebalance_delay_ms("fast"), configs.streams_initial_rebalance_delay_ms("other")) == (0, 3000)
    first = manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0)
    assert ScheduleTimer(KEY, 500) in first.timers
    fast = manager.heartbeat(join("a", "p1", group_id="fast"), ALL_TOPICS, 0)
    assert answer(fast).member_epoch == 2


def test_a_failed_write_keeps_the_delay_running() -> None:
    """Kafka's timers are not part of its timeline: the delay outlives a reverted write."""
    manager = StreamsGroupManager(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)
    answer(manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0))
    journal = manager.journal()
    answer(manager.heartbeat(join("b", "p2"), ALL_TOPICS, 100))
    manager.groups[GROUP] = journal[GROUP]  # type: ignore[assignment]
    reverted = manager.on_reverted(GROUP, 200)
    assert CancelTimer(KEY) not in reverted.timers and KEY in manager._deadlines
    assert manager.on_timer(KEY, 3000).records


# -- the assignment interval --------------------------------------------------------------------------


def test_a_new_target_waits_for_the_assignment_interval() -> None:
    clock = Clock()
    manager = StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=1000)
    a = answer(manager.heartbeat(join("a", "p1"), ALL_TOPICS, clock.advance(5000)))
    assert a.member_epoch == 2 and a.status is None  # never computed before: at once
    mine = owned(a.active_tasks)

    # "b" joins 400 ms later: the group epoch moves, the target stays (the interval runs from the
    # last target), and "b" reconciles to the old target, which has nothing for it.
    b = answer(manager.heartbeat(join("b", "p2"), ALL_TOPICS, clock.advance(400)))
    assert (ASSIGNMENT_DELAYED, ASSIGNMENT_INTERVAL_DELAYED) in statuses(b)
    assert (b.member_epoch, total(b.active_tasks)) == (2, 0)
    group = manager.groups[GROUP]
    assert (group.group_epoch, group.target_assignment_epoch) == (3, 2)

    # No timer: the first heartbeat after the interval computes it.
    a = answer(manager.heartbeat(beat("a", 2, mine), ALL_TOPICS, clock.advance(599)))
    assert (ASSIGNMENT_DELAYED, ASSIGNMENT_INTERVAL_DELAYED) in statuses(a)
    a = answer(manager.heartbeat(beat("a", 2, mine), ALL_TOPICS, clock.advance(1)))
    assert a.status is None and manager.groups[GROUP].target_assignment_epoch == 3
    assert manager.groups[GROUP].assignment_timestamp == clock.now


def test_the_interval_counts_from_the_replayed_timestamp() -> None:
    manager = StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=1000)
    written = manager.heartbeat(join("a", "p1"), ALL_TOPICS, 7000).records
    loaded = StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=1000)
    for key, value in written:
        loaded.replay(key, value)
    assert loaded.groups[GROUP].assignment_timestamp == 7000
    b = answer(loaded.heartbeat(join("b", "p2"), ALL_TOPICS, 7500))
    assert (ASSIGNMENT_DELAYED, ASSIGNMENT_INTERVAL_DELAYED) in statuses(b)


def test_can_compute_next_target_assignment() -> None:
    assert can_compute_next_target_assignment(0, 1000, 5)  # never computed
    assert can_compute_next_target_assignment(100, 0, 100)  # no interval
    assert not can_compute_next_target_assignment(100, 1000, 1099)
    assert can_compute_next_target_assignment(100, 1000, 1100)


def test_a_groups_interval_is_capped_to_the_brokers_bounds() -> None:
    config = BrokerConfig(**{"group.streams.max.assignment.interval.ms": "2000", "group.streams.assignment.interval.ms": "1500"})  # type: ignore[arg-type]
    props = {GROUP: {"streams.assignment.interval.ms": "90000"}}
    layers: list[dict[str, str]] = [{}, {}]
    configs = StreamsGroupConfigs(StreamsGroupBounds.of(config), lambda g: props.get(g, {}), lambda: layers)
    assert (configs.streams_assignment_interval_ms(GROUP), configs.streams_assignment_interval_ms("other")) == (2000, 1500)
    # The broker setting is dynamic in Kafka: the cluster default, then the broker's own, win.
    layers[1]["group.streams.assignment.interval.ms"] = "300"
    assert configs.streams_assignment_interval_ms("other") == 300
    layers[0]["group.streams.assignment.interval.ms"] = "200"
    assert configs.streams_assignment_interval_ms("other") == 200


# -- rack-aware assignment tags ----------------------------------------------------------------------


def tagged(tags: tuple[str, ...], **kwargs: Any) -> StreamsGroupManager:
    return StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=0, rack_aware_assignment_tags=tags, **kwargs)


def test_rack_aware_tags_are_assignment_configs() -> None:
    manager = tagged(("zone", "rack"))
    assert manager.assignment_configs(GROUP) == {"num.standby.replicas": "0", streams_assignor.RACK_AWARE_ASSIGNMENT_TAGS_CONFIG: "zone,rack"}
    assert tagged(()).assignment_configs(GROUP) == {"num.standby.replicas": "0"}
    a = answer(manager.heartbeat(join("a", "p1"), ALL_TOPICS, 0))
    assert manager.groups[GROUP].last_assignment_configs == {"num.standby.replicas": "0", "rack.aware.assignment.tags": "zone,rack"}
    # A change of the tags is a rebalance: the group epoch moves.
    manager.rack_aware_assignment_tags = ("zone",)
    again = answer(manager.heartbeat(beat("a", a.member_epoch, owned(a.active_tasks)), ALL_TOPICS, 10))
    assert again.member_epoch == a.member_epoch + 1


def test_a_v1_member_without_the_tags_is_told_missing_client_tags() -> None:
    manager = tagged(("zone", "rack", "host"))
    v1 = answer(manager.heartbeat(join("a", "p1", client_tags={"rack": "r1"}), ALL_TOPICS, 0, api_version=1))
    assert (
        MISSING_CLIENT_TAGS,
        "Missing required client tags for rack-aware standby assignment: [zone, host]. Configure them via 'client.tag.<tagKey>' in your Streams config.",
    ) in statuses(v1)
    # v0 clients do not know the status (KAFKA-20744): they are not told.
    v0 = answer(manager.heartbeat(join("b", "p2", client_tags={"rack": "r1"}), ALL_TOPICS, 0))
    assert all(code != MISSING_CLIENT_TAGS for code, _ in statuses(v0))
    full = answer(manager.heartbeat(join("c", "p3", client_tags={"zone": "z", "rack": "r", "host": "h"}), ALL_TOPICS, 0, api_version=1))
    assert all(code != MISSING_CLIENT_TAGS for code, _ in statuses(full))


def test_a_groups_own_tags_override_the_brokers() -> None:
    config = BrokerConfig(**{"group.streams.rack.aware.assignment.tags": "zone, rack"})  # type: ignore[arg-type]
    props = {"none": {"streams.rack.aware.assignment.tags": ""}, GROUP: {"streams.rack.aware.assignment.tags": "host"}}
    configs = StreamsGroupConfigs(StreamsGroupBounds.of(config), lambda g: props.get(g, {}))
    assert [configs.streams_rack_aware_assignment_tags(g) for g in (GROUP, "none", "other")] == [("host",), (), ("zone", "rack")]


# -- the offsets a heartbeat reports ------------------------------------------------------------------


def test_the_assignor_sees_the_offsets_of_this_heartbeat(monkeypatch: Any) -> None:
    seen: list[dict[str, Any]] = []
    real = streams_assignor.assign

    def spy(members: Any, subtopologies: Any, standbys: int = 0) -> Any:
        seen.append({m: spec.task_offsets for m, spec in members.items()})
        return real(members, subtopologies, standbys)

    monkeypatch.setattr(streams_assignor, "assign", spy)
    manager = StreamsGroupManager(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
    answer(manager.heartbeat(join("a", "p1", task_offsets={"1": {2: 500}}), ALL_TOPICS, 0))
    assert seen[-1] == {"a": {"1": {2: 500}}}


# -- internal topics that cannot be created ----------------------------------------------------------


def test_internal_topic_creation_errors_in_the_status() -> None:
    missing = Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b")
    other = Status(ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED)
    assert with_internal_topic_errors([other, missing], unauthorized=["a", "b"]) == (
        other,
        Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b; Unauthorized to CREATE on topics a, b."),
    )
    assert with_internal_topic_errors([], unauthorized=["a"]) == (Status(MISSING_INTERNAL_TOPICS, "Unauthorized to CREATE on topics a."),)
    errors = {f"t{i}": f"Topic t{i} error." for i in range(5)}
    assert with_internal_topic_errors([missing], creation_errors=errors) == (
        Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b; Creation failed: t0 (Topic t0 error.), t1 (Topic t1 error.), t2 (Topic t2 error.) and 2 more."),
    )
    # Errors are told only while topics are missing.
    assert with_internal_topic_errors([other], creation_errors=errors) == (other,)
