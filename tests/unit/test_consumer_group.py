"""The consumer group protocol (KIP-848), driven with a fake clock and simulated clients."""

from __future__ import annotations

import datetime
import itertools
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, cast

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV0,
)
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV1,
)
from kio.schema.consumer_group_heartbeat.v1.request import (
    TopicPartitions as RequestTopicPartitions,
)
from kio.static.primitive import i32

from broker.group.consumer_group import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    NONE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    CancelTimer,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupManager,
    ConsumerGroupState,
    GroupError,
    GroupResult,
    Record,
    ScheduleTimer,
    rebalance_timeout_key,
    session_timeout_key,
)
from broker.group.coordinator_records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    CoordinatorKey,
    CoordinatorValue,
    decode_record,
    encode_key,
    encode_value,
)
from broker.group.current_assignment_builder import (
    CurrentAssignment,
    FencedMemberEpochError,
    MemberState,
    reconcile,
)

GROUP = "g"
ORDERS = uuid.UUID(int=0xA1)
PAYMENTS = uuid.UUID(int=0xB2)
TOPICS = {"orders": (ORDERS, 6), "payments": (PAYMENTS, 3)}
SESSION = 45_000
REBALANCE = 30_000


def request(
    member_id: str = "",
    member_epoch: int = 0,
    *,
    group_id: str = GROUP,
    instance_id: str | None = None,
    rack_id: str | None = None,
    rebalance_timeout_ms: int = -1,
    subscribed_topic_names: Iterable[str] | None = None,
    server_assignor: str | None = None,
    owned: Mapping[uuid.UUID, Iterable[int]] | None = None,
    subscribed_topic_regex: str | None = None,
    version: int = 1,
) -> Any:
    fields: dict[str, Any] = {
        "group_id": group_id,
        "member_id": member_id,
        "member_epoch": member_epoch,
        "instance_id": instance_id,
        "rack_id": rack_id,
        "rebalance_timeout": datetime.timedelta(milliseconds=rebalance_timeout_ms),
        "subscribed_topic_names": None if subscribed_topic_names is None else tuple(subscribed_topic_names),
        "server_assignor": server_assignor,
        "topic_partitions": None if owned is None else tuple(RequestTopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in sorted(ps))) for t, ps in owned.items()),
    }
    if version == 0:
        return HeartbeatV0(**fields)
    return HeartbeatV1(subscribed_topic_regex=subscribed_topic_regex, **fields)


class Cluster:
    """A manager, a fake clock, every record it emitted and every client talking to it."""

    def __init__(self, **kwargs: Any) -> None:
        ids = itertools.count(1)
        self.manager = ConsumerGroupManager(new_member_id=lambda: f"generated-{next(ids)}", **kwargs)
        self.now = 1_000
        self.topics = dict(TOPICS)
        self.records: list[Record] = []
        self.timers: dict[tuple[str, ...], int] = {}
        self.clients: list[Client] = []

    def run(self, result: GroupResult[Any]) -> GroupResult[Any]:
        self.records.extend(result.records)
        for timer in result.timers:
            if isinstance(timer, CancelTimer):
                self.timers.pop(timer.key, None)
            else:
                self.timers[timer.key] = timer.deadline_ms
        return result

    def heartbeat(self, req: Any) -> ConsumerGroupHeartbeatResponse:
        response = self.run(self.manager.heartbeat(req, self.topics, self.now, client_id="client", client_host="/127.0.0.1")).response
        assert response is not None
        return response

    def client(self, member_id: str, topics: Iterable[str] = ("orders",), instance_id: str | None = None) -> Client:
        client = Client(self, member_id, tuple(topics), instance_id)
        self.clients.append(client)
        return client

    def fire(self, key: tuple[str, ...]) -> None:
        self.now = max(self.now, self.timers.pop(key))
        self.run(self.manager.on_timer(key, self.now))

    @property
    def group(self) -> Any:
        return self.manager.groups[GROUP]

    def check_invariants(self) -> None:
        """No partition has two owners, neither in the coordinator's view nor the clients'."""
        coordinator: dict[tuple[uuid.UUID, int], str] = {}
        for member in self.group.members.values() if GROUP in self.manager.groups else ():
            for partitions in (member.assigned_partitions, member.assignment.partitions_pending_revocation):
                for t, ps in partitions.items():
                    for p in ps:
                        assert (t, p) not in coordinator, f"{t}-{p} held by {coordinator.get((t, p))} and {member.member_id}"
                        coordinator[(t, p)] = member.member_id
        clients: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients:
            for t, ps in client.owned.items():
                for p in ps:
                    assert (t, p) not in clients, f"{t}-{p} consumed by {clients.get((t, p))} and {client.member_id}"
                    clients[(t, p)] = client.member_id

    def settle(self, rounds: int = 10) -> None:
        """Every live client heartbeats in turn until the group is stable."""
        for _ in range(rounds):
            for client in self.clients:
                if client.alive:
                    client.heartbeat()
                    self.check_invariants()
            self.now += 1_000
            if self.group.state is ConsumerGroupState.STABLE and all(c.owned == c.assigned() for c in self.clients if c.alive):
                return
        raise AssertionError(f"not stable: {self.group.state}")


class Client:
    """A KIP-848 consumer: it revokes at once what the coordinator no longer assigns and
    takes what it is given; ``revoking=False`` makes it hang on to its partitions."""

    def __init__(self, cluster: Cluster, member_id: str, topics: tuple[str, ...], instance_id: str | None) -> None:
        self.cluster = cluster
        self.member_id = member_id
        self.topics = topics
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.alive = True
        self.revoking = True
        self.last: ConsumerGroupHeartbeatResponse | None = None

    def heartbeat(self, **overrides: Any) -> ConsumerGroupHeartbeatResponse:
        if self.epoch == 0:
            req = request(self.member_id, 0, instance_id=self.instance_id, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=self.topics, owned={})
        else:
            req = request(self.member_id, self.epoch, instance_id=self.instance_id, owned=self.owned)
        if overrides:
            req = request(**{**_fields(req), **overrides})
        response = self.cluster.heartbeat(req)
        self.last = response
        if response.error_code == NONE:
            assert response.member_id is not None
            self.member_id = response.member_id
            self.epoch = response.member_epoch
            if response.assignment is not None:
                given = {t: frozenset(ps) for t, ps in response.assignment.items()}
                self.owned = given if self.revoking else {t: given.get(t, frozenset()) | self.owned.get(t, frozenset()) for t in given.keys() | self.owned.keys()}
        return response

    def leave(self, epoch: int = -1) -> ConsumerGroupHeartbeatResponse:
        response = self.cluster.heartbeat(request(self.member_id, epoch, instance_id=self.instance_id))
        self.alive = False
        self.owned = {}
        self.epoch = 0
        return response

    def assigned(self) -> dict[uuid.UUID, frozenset[int]]:
        return dict(self.cluster.group.members[self.member_id].assigned_partitions)

    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def _fields(req: Any) -> dict[str, Any]:
    return {
        "group_id": req.group_id,
        "member_id": req.member_id,
        "member_epoch": req.member_epoch,
        "instance_id": req.instance_id,
        "rack_id": req.rack_id,
        "rebalance_timeout_ms": req.rebalance_timeout // datetime.timedelta(milliseconds=1),
        "subscribed_topic_names": req.subscribed_topic_names,
        "server_assignor": req.server_assignor,
        "owned": None if req.topic_partitions is None else {tp.topic_id: tp.partitions for tp in req.topic_partitions},
    }


def replayed(cluster: Cluster) -> ConsumerGroupManager:
    """A new coordinator loading the partition: every record through its wire format."""
    manager = ConsumerGroupManager()
    for key, value in cluster.records:
        decoded = decode_record(encode_key(cast(CoordinatorKey, key)), None if value is None else encode_value(cast(CoordinatorValue, value)))
        manager.replay(decoded.key, decoded.value)
    return manager


# -- joining, reconciling, leaving ------------------------------------------------------------------


def test_three_members_join_one_by_one_and_end_with_two_partitions_each() -> None:
    cluster = Cluster()
    a = cluster.client("a")
    first = a.heartbeat()
    assert first.member_id == "a" and first.member_epoch == 1 and first.heartbeat_interval_ms == 5000
    assert first.assignment == {ORDERS: (0, 1, 2, 3, 4, 5)}
    assert cluster.timers[session_timeout_key(GROUP, "a")] == cluster.now + SESSION
    cluster.settle()

    b = cluster.client("b")
    joined = b.heartbeat()
    assert joined.member_epoch == 2 and joined.assignment == {}, "a still owns everything: b waits"
    assert cluster.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    revoke = a.heartbeat()
    assert revoke.member_epoch == 1 and revoke.assignment is not None and len(revoke.assignment[ORDERS]) == 3
    assert cluster.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert rebalance_timeout_key(GROUP, "a") in cluster.timers
    cluster.settle()
    assert rebalance_timeout_key(GROUP, "a") not in cluster.timers

    c = cluster.client("c")
    cluster.settle()
    assert [x.count() for x in (a, b, c)] == [2, 2, 2]
    assert {m.member_epoch for m in cluster.group.members.values()} == {cluster.group.group_epoch} == {3}
    assert cluster.group.state is ConsumerGroupState.STABLE
    # A steady heartbeat carries no assignment: the client has it already.
    assert a.heartbeat().assignment is None


def test_leave_and_session_timeout_hand_partitions_to_the_others() -> None:
    cluster = Cluster()
    a, b, c = (cluster.client(m) for m in "abc")
    cluster.settle()
    epoch = cluster.group.group_epoch

    left = c.leave()
    assert (left.error_code, left.member_id, left.member_epoch) == (NONE, "c", -1)
    assert "c" not in cluster.group.members and cluster.group.group_epoch == epoch + 1
    assert session_timeout_key(GROUP, "c") not in cluster.timers
    cluster.settle()
    assert sorted(x.count() for x in (a, b)) == [3, 3]

    b.alive = False
    cluster.now += SESSION - 1_000
    a.heartbeat()
    cluster.now += 1_000
    # A firing before the deadline (a heartbeat moved it on) only arms the timer again.
    early = cluster.manager.on_timer(session_timeout_key(GROUP, "a"), cluster.now)
    assert early.records == [] and early.timers == [ScheduleTimer(session_timeout_key(GROUP, "a"), cluster.now - 1_000 + SESSION)]
    cluster.fire(session_timeout_key(GROUP, "b"))
    assert "b" not in cluster.group.members
    b.owned = {}
    cluster.settle()
    assert a.count() == 6


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    cluster = Cluster()
    a = cluster.client("a")
    cluster.settle()
    a.revoking = False
    b = cluster.client("b")
    for _ in range(3):
        b.heartbeat()
        a.heartbeat()
        cluster.check_invariants()
    assert b.count() == 0, "b never gets what a still holds"
    assert cluster.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    key = rebalance_timeout_key(GROUP, "a")
    cluster.fire(key)
    assert "a" not in cluster.group.members
    assert a.heartbeat().error_code == UNKNOWN_MEMBER_ID
    a.alive = False
    a.owned = {}
    cluster.settle()
    assert b.count() == 6


def test_rebalance_timer_of_an_epoch_the_member_left_is_ignored() -> None:
    cluster = Cluster()
    a = cluster.client("a")
    cluster.settle()
    cluster.client("b")
    cluster.settle()
    assert rebalance_timeout_key(GROUP, "a") not in cluster.timers
    cluster.now += REBALANCE
    assert cluster.manager.on_timer(rebalance_timeout_key(GROUP, "a"), cluster.now).records == []
    assert cluster.manager.on_timer(("heartbeat", GROUP, "a"), cluster.now).records == []
    assert a.heartbeat().error_code == NONE


def test_static_member_comes_back_to_its_partitions() -> None:
    cluster = Cluster()
    s = cluster.client("s1", instance_id="instance-1")
    d = cluster.client("d")
    cluster.settle()
    owned_before = s.owned
    epoch = cluster.group.group_epoch

    left = s.leave(-2)
    assert (left.member_id, left.member_epoch) == ("s1", -2)
    assert cluster.group.group_epoch == epoch, "a static member's temporary leave is no rebalance"
    assert session_timeout_key(GROUP, "s1") in cluster.timers
    for _ in range(3):
        d.heartbeat()
    assert d.count() == 3, "nobody takes the partitions of a static member that will be back"
    assert cluster.group.state is ConsumerGroupState.RECONCILING

    s.alive = True
    s.member_id = "s2"  # a restarted client has a new member id
    back = s.heartbeat()
    assert back.error_code == NONE and back.member_id == "s2"
    assert back.member_epoch == epoch and {t: frozenset(ps) for t, ps in (back.assignment or {}).items()} == owned_before
    assert "s1" not in cluster.group.members and cluster.group.static_members == {"instance-1": "s2"}
    assert session_timeout_key(GROUP, "s1") not in cluster.timers
    assert cluster.group.group_epoch == epoch
    cluster.settle()


def test_static_member_that_stays_away_is_removed_at_session_timeout() -> None:
    cluster = Cluster()
    s = cluster.client("s1", instance_id="instance-1")
    d = cluster.client("d")
    cluster.settle()
    s.leave(-2)
    s.alive = False
    cluster.now += SESSION
    cluster.fire(session_timeout_key(GROUP, "s1"))
    assert "s1" not in cluster.group.members and cluster.group.static_members == {}
    cluster.settle()
    assert d.count() == 6


def test_static_member_errors() -> None:
    cluster = Cluster()
    s = cluster.client("s1", instance_id="instance-1")
    cluster.settle()
    taken = cluster.heartbeat(request("other", 0, instance_id="instance-1", rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["orders"], owned={}))
    assert taken.error_code == UNRELEASED_INSTANCE_ID
    assert taken.error_message == "Static member other with instance id instance-1 cannot join the group because the instance id is owned by s1 member."
    fenced = cluster.heartbeat(request("other", s.epoch, instance_id="instance-1"))
    assert fenced.error_code == FENCED_INSTANCE_ID
    assert fenced.error_message == "Static member other with instance id instance-1 was fenced by member s1."
    unknown = cluster.heartbeat(request("s1", s.epoch, instance_id="instance-9"))
    assert (unknown.error_code, unknown.error_message) == (UNKNOWN_MEMBER_ID, "Instance id instance-9 is unknown.")
    assert cluster.heartbeat(request("s1", -2, instance_id="instance-9")).error_code == UNKNOWN_MEMBER_ID
    assert cluster.heartbeat(request("other", -2, instance_id="instance-1")).error_code == FENCED_INSTANCE_ID
    # A static member leaving for good (-1) is removed at once.
    assert cluster.heartbeat(request("s1", -1, instance_id="instance-1")).member_epoch == -1
    assert cluster.group.members == {}


# -- epochs, subscriptions, metadata ----------------------------------------------------------------


def test_member_epoch_validation() -> None:
    cluster = Cluster()
    a = cluster.client("a")
    cluster.settle()
    b = cluster.client("b")
    b.heartbeat()
    a.heartbeat()  # a is asked to revoke half of its partitions
    a.heartbeat()  # and does: it moves to epoch 2
    assert a.epoch == 2 and cluster.group.members["a"].previous_member_epoch == 1
    ahead = cluster.heartbeat(request("a", 3, owned=a.owned))
    assert ahead.error_code == FENCED_MEMBER_EPOCH
    assert ahead.error_message == (
        "The consumer group member has a greater member epoch (3) than the one known by the group coordinator (2). "
        "The member must abandon all its partitions and rejoin."
    )
    # The response with epoch 2 may have been lost: epoch 1 with a subset of the assignment is fine.
    assert cluster.heartbeat(request("a", 1, owned=a.owned)).member_epoch == 2
    assert cluster.heartbeat(request("a", 1, owned={ORDERS: range(6)})).error_code == FENCED_MEMBER_EPOCH
    assert cluster.heartbeat(request("a", 1)).error_code == FENCED_MEMBER_EPOCH
    # A fenced member rejoins with epoch 0 under the same id (KAFKA-19233) and gets its partitions back.
    rejoined = cluster.heartbeat(request("a", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["orders"], owned={}))
    assert rejoined.error_code == NONE and rejoined.member_epoch == 2 and rejoined.assignment == {ORDERS: tuple(sorted(a.owned[ORDERS]))}


def test_subscription_change_bumps_the_epoch_and_moves_partitions() -> None:
    cluster = Cluster()
    a, b = cluster.client("a"), cluster.client("b")
    cluster.settle()
    epoch = cluster.group.group_epoch
    a.heartbeat(subscribed_topic_names=["orders", "payments"])
    assert cluster.group.group_epoch == epoch + 1
    assert cluster.group.subscribed_topic_names == {"orders": 2, "payments": 1}
    assert set(cluster.group.subscription_metadata) == {"orders", "payments"}
    cluster.settle()
    assert PAYMENTS in a.owned and PAYMENTS not in b.owned
    assert sorted([a.count(), b.count()]) == [4, 5]


def test_metadata_change_bumps_subscribed_groups_only() -> None:
    cluster = Cluster()
    a, b = cluster.client("a"), cluster.client("b")
    cluster.settle()
    epoch = cluster.group.group_epoch
    cluster.topics["payments"] = (PAYMENTS, 10)
    assert cluster.run(cluster.manager.on_metadata_change(cluster.topics)).records == []
    cluster.topics["orders"] = (ORDERS, 10)
    result = cluster.run(cluster.manager.on_metadata_change(cluster.topics))
    assert [type(k).__name__ for k, _ in result.records] == ["ConsumerGroupPartitionMetadataKey", "ConsumerGroupMetadataKey"]
    assert cluster.group.group_epoch == epoch + 1 and cluster.group.state is ConsumerGroupState.ASSIGNING
    cluster.settle()
    assert (a.count(), b.count()) == (5, 5)
    # The topic goes away: its partitions are revoked.
    del cluster.topics["orders"]
    cluster.run(cluster.manager.on_metadata_change(cluster.topics))
    cluster.settle()
    assert a.owned == b.owned == {}
    assert cluster.group.subscription_metadata == {}


def test_regular_expression_subscription_follows_the_topics() -> None:
    cluster = Cluster()
    cluster.topics["__consumer_offsets"] = (uuid.UUID(int=0xC0), 50)
    joined = cluster.heartbeat(request("r", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_regex="(orders|__.*)", owned={}))
    assert joined.error_code == NONE and joined.assignment == {ORDERS: (0, 1, 2, 3, 4, 5)}
    assert set(cluster.group.subscription_metadata) == {"orders"}, "internal topics never match"
    epoch = cluster.group.group_epoch
    cluster.topics["orders-eu"] = (uuid.UUID(int=0xE0), 2)
    cluster.run(cluster.manager.on_metadata_change(cluster.topics))
    assert cluster.group.group_epoch == epoch, "orders-eu does not match the whole pattern"
    changed = cluster.heartbeat(request("r", epoch, subscribed_topic_regex="orders.*", owned={ORDERS: range(6)}))
    assert changed.assignment == {ORDERS: (0, 1, 2, 3, 4, 5), uuid.UUID(int=0xE0): (0, 1)}
    assert cluster.group.subscribed_topic_regexes == {"orders.*": 1}
    bad = cluster.heartbeat(request("r", changed.member_epoch, subscribed_topic_regex="orders(", owned={}))
    assert bad.error_code == INVALID_REGULAR_EXPRESSION and bad.error_message is not None
    assert bad.error_message.startswith("SubscribedTopicRegex `orders(` is not a valid regular expression: ")
    cluster.heartbeat(request("r", -1))
    assert cluster.group.subscription_metadata == {} and cluster.group.subscribed_topic_regexes == {}


def test_server_assignor_is_chosen_by_the_members() -> None:
    cluster = Cluster()
    t = uuid.UUID(int=7)
    cluster.topics = {"t1": (t, 4)}
    a = cluster.client("a", topics=["t1"])
    a.heartbeat(server_assignor="range")
    assert cluster.manager.describe([GROUP], {t: "t1"})[0].assignor_name == "range"
    assert cluster.group.members["a"].server_assignor_name == "range"
    a.heartbeat()  # a null assignor later keeps the chosen one
    assert cluster.group.members["a"].server_assignor_name == "range"


# -- errors -----------------------------------------------------------------------------------------


JOIN: dict[str, Any] = {"rebalance_timeout_ms": REBALANCE, "subscribed_topic_names": ["orders"], "owned": {}}


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (request("", 0, **JOIN), "MemberId can't be empty."),
        (request("", 3, version=0), "MemberId can't be empty."),
        (request("", -1, version=0), "MemberId can't be empty."),
        (request("m", 0, group_id=" ", **JOIN), "GroupId can't be empty."),
        (request("m", 0, instance_id="", **JOIN), "InstanceId can't be empty."),
        (request("m", 0, rack_id=" ", **JOIN), "RackId can't be empty."),
        (request("m", 0, subscribed_topic_names=["orders"], owned={}), "RebalanceTimeoutMs must be provided in first request."),
        (request("m", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["orders"]), "TopicPartitions must be empty when (re-)joining."),
        (
            request("m", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["orders"], owned={ORDERS: [0]}),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            request("m", 0, rebalance_timeout_ms=REBALANCE, owned={}),
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        ),
        (request("m", -2), "InstanceId can't be null."),
        (request("m", -3), "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests(req: Any, message: str) -> None:
    cluster = Cluster()
    response = cluster.heartbeat(req)
    assert (response.error_code, response.error_message) == (INVALID_REQUEST, message)
    assert response.member_id is None and cluster.records == [] and cluster.manager.groups == {}


def test_unsupported_assignor() -> None:
    cluster = Cluster(assignors=("uniform",))
    response = cluster.heartbeat(request("m", 0, server_assignor="range", **JOIN))
    assert (response.error_code, response.error_message) == (UNSUPPORTED_ASSIGNOR, "ServerAssignor range is not supported. Supported assignors: uniform.")


def test_unknown_group_and_member() -> None:
    cluster = Cluster()
    missing = cluster.heartbeat(request("m", 1))
    assert (missing.error_code, missing.error_message) == (GROUP_ID_NOT_FOUND, f"Consumer group {GROUP} not found.")
    assert cluster.heartbeat(request("m", -1)).error_code == GROUP_ID_NOT_FOUND
    cluster.client("a").heartbeat()
    unknown = cluster.heartbeat(request("m", 1, owned={}))
    assert (unknown.error_code, unknown.error_message) == (UNKNOWN_MEMBER_ID, f"Member m is not a member of group {GROUP}.")
    assert cluster.heartbeat(request("m", -1)).error_code == UNKNOWN_MEMBER_ID


def test_group_max_size() -> None:
    cluster = Cluster(max_size=2)
    cluster.client("a").heartbeat()
    cluster.client("b").heartbeat()
    full = cluster.heartbeat(request("c", 0, **JOIN))
    assert (full.error_code, full.error_message) == (GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of 2 members.")
    assert cluster.heartbeat(request("a", 0, **JOIN)).error_code == NONE, "members already in are not turned away"


def test_group_id_held_by_a_classic_group() -> None:
    classic = {"busy", "idle"}
    deleted: list[str] = []

    def delete_if_empty(group_id: str) -> list[Record] | None:
        if group_id != "idle":
            return None
        classic.discard(group_id)
        deleted.append(group_id)
        return [(("classic-tombstone", group_id), None)]

    cluster = Cluster(is_other_group=lambda g: g in classic, delete_empty_classic_group=delete_if_empty)
    busy = cluster.heartbeat(request("m", 0, group_id="busy", **JOIN))
    assert (busy.error_code, busy.error_message) == (GROUP_ID_NOT_FOUND, "Group busy is not a consumer group")
    assert cluster.heartbeat(request("m", 3, group_id="busy")).error_code == GROUP_ID_NOT_FOUND
    assert cluster.manager.describe(["busy"], {})[0].error_message == "Group busy is not a consumer group."
    idle = cluster.heartbeat(request("m", 0, group_id="idle", **JOIN))
    assert idle.error_code == NONE and deleted == ["idle"]
    assert cluster.records[0] == (("classic-tombstone", "idle"), None)


def test_v0_clients_get_a_member_id_from_the_coordinator() -> None:
    cluster = Cluster()
    response = cluster.heartbeat(request("", 0, version=0, **JOIN))
    assert response.error_code == NONE and response.member_id == "generated-1"


# -- admin, loading ---------------------------------------------------------------------------------


def test_describe_list_and_delete() -> None:
    cluster = Cluster()
    a, b = cluster.client("a"), cluster.client("b", instance_id="i-b")
    cluster.settle()
    [described, missing] = cluster.manager.describe([GROUP, "nope"], {ORDERS: "orders"})
    assert (missing.error_code, missing.error_message) == (GROUP_ID_NOT_FOUND, "Group nope not found.")
    assert (described.group_state, described.group_epoch, described.assignment_epoch, described.assignor_name) == ("Stable", 2, 2, "uniform")
    members = {m.member_id: m for m in described.members}
    assert members["b"].instance_id == "i-b" and members["b"].client_host == "/127.0.0.1"
    assert members["a"].subscribed_topic_names == ("orders",)
    assert members["a"].assignment == members["a"].target_assignment
    assert [(tp.topic_name, len(tp.partitions)) for tp in members["a"].assignment] == [("orders", 3)]
    assert cluster.manager.list_groups() == [(GROUP, "Stable")]

    assert cluster.manager.delete_group(GROUP).response == NON_EMPTY_GROUP
    assert cluster.manager.delete_group("nope").response == GROUP_ID_NOT_FOUND
    a.leave()
    b.leave()
    assert cluster.manager.list_groups() == [(GROUP, "Empty")]
    deleted = cluster.run(cluster.manager.delete_group(GROUP))
    assert deleted.response == NONE and all(value is None for _, value in deleted.records)
    assert cluster.manager.groups == {}
    assert replayed(cluster).groups == {}


def test_offset_commits_are_checked_against_the_member_epoch() -> None:
    cluster = Cluster()
    manager = cluster.manager
    assert commit_error(manager, "a", 1) is None and manager.subscribed_topics(GROUP) is None
    a = cluster.client("a")
    cluster.settle()
    assert commit_error(manager, "a", a.epoch) == NONE
    assert commit_error(manager, "a", a.epoch + 1) == STALE_MEMBER_EPOCH
    assert commit_error(manager, "x", a.epoch) == UNKNOWN_MEMBER_ID
    assert commit_error(manager, "", -1) == UNKNOWN_MEMBER_ID, "not while the group has members"
    assert manager.subscribed_topics(GROUP) == {"orders"}
    a.leave()
    assert commit_error(manager, "", -1) == NONE
    assert manager.subscribed_topics(GROUP) == set()


def commit_error(manager: ConsumerGroupManager, member_id: str, epoch: int, partitions: Iterable[tuple[uuid.UUID, int]] = ((ORDERS, 0),), version: int = 9) -> int | None:
    """OffsetCommit's error for these partitions: None when no consumer group has the id."""
    try:
        validator = manager.validate_offset_commit(GROUP, member_id, epoch, transactional=False, version=version)
        if validator is None:
            return None
        for topic_id, partition in partitions:
            validator("orders" if topic_id == ORDERS else "payments", topic_id, partition)
    except GroupError as e:
        return e.error_code
    return NONE


def test_replay_rebuilds_the_same_state_and_on_loaded_rearms_timers() -> None:
    cluster = Cluster()
    a, b = cluster.client("a"), cluster.client("s", instance_id="i-s")
    cluster.settle()
    a.heartbeat(subscribed_topic_names=["orders", "payments"])
    c = cluster.client("c")
    c.heartbeat()
    b.heartbeat()  # b is now revoking
    assert cluster.group.members["s"].state is MemberState.UNREVOKED_PARTITIONS

    loaded = replayed(cluster)
    assert loaded.groups == cluster.manager.groups
    timers = loaded.on_loaded(cluster.now).timers
    revoking = {m for m, member in cluster.group.members.items() if member.state is MemberState.UNREVOKED_PARTITIONS}
    assert "s" in revoking
    assert set(timers) == {ScheduleTimer(session_timeout_key(GROUP, m), cluster.now + SESSION) for m in ("a", "s", "c")} | {
        ScheduleTimer(rebalance_timeout_key(GROUP, m), cluster.now + REBALANCE) for m in revoking
    }

    cluster.settle()
    c.leave()
    assert replayed(cluster).groups == cluster.manager.groups


def test_a_replayed_group_epoch_record_alone_makes_an_empty_group() -> None:
    manager = ConsumerGroupManager()
    manager.replay(ConsumerGroupMetadataKey(group_id="x"), ConsumerGroupMetadataValue(epoch=4))
    assert manager.list_groups() == [("x", "Empty")] and manager.groups["x"].group_epoch == 4
    manager.replay(ConsumerGroupMetadataKey(group_id="x"), None)
    assert manager.groups == {}


# -- the reconciliation state machine on its own ----------------------------------------------------


def test_reconcile_revokes_first_then_assigns_what_is_free() -> None:
    owners = {(ORDERS, 2): 3}  # partition 2 is still owned by someone else at epoch 3

    def epoch_of(topic_id: uuid.UUID, partition: int) -> int:
        return owners.get((topic_id, partition), -1)

    # Partition 0 was given at epoch 1, partition 1 at epoch 3.
    stable = CurrentAssignment(3, 2, MemberState.STABLE, {ORDERS: frozenset({0, 1})}, {}, {ORDERS: {0: 1, 1: 3}})
    assert reconcile(stable, 3, {ORDERS: frozenset({0})}, None, epoch_of) is stable, "reconciled already"

    revoking = reconcile(stable, 4, {ORDERS: frozenset({0, 2})}, {ORDERS: frozenset({0, 1})}, epoch_of)
    # Kept and revoked partitions keep the epoch at which they were given.
    assert revoking == CurrentAssignment(3, 3, MemberState.UNREVOKED_PARTITIONS, {ORDERS: frozenset({0})}, {ORDERS: frozenset({1})}, {ORDERS: {0: 1, 1: 3}})
    assert reconcile(revoking, 4, {ORDERS: frozenset({0, 2})}, None, epoch_of) is revoking, "no owned partitions sent: still owned"
    assert reconcile(revoking, 4, {ORDERS: frozenset({0, 2})}, {ORDERS: frozenset({0, 1})}, epoch_of) is revoking

    waiting = reconcile(revoking, 4, {ORDERS: frozenset({0, 2})}, {ORDERS: frozenset({0})}, epoch_of)
    assert waiting == CurrentAssignment(4, 3, MemberState.UNRELEASED_PARTITIONS, {ORDERS: frozenset({0})}, {}, {ORDERS: {0: 1}})
    del owners[(ORDERS, 2)]
    done = reconcile(waiting, 4, {ORDERS: frozenset({0, 2})}, {ORDERS: frozenset({0})}, epoch_of)
    # Partition 2, newly assigned, takes the target epoch.
    assert done == CurrentAssignment(4, 4, MemberState.STABLE, {ORDERS: frozenset({0, 2})}, {}, {ORDERS: {0: 1, 2: 4}})
    assert done.is_reconciled_to(4)


def test_reconcile_takes_back_a_partition_it_was_revoking_itself() -> None:
    revoking = CurrentAssignment(5, 5, MemberState.UNREVOKED_PARTITIONS, {}, {ORDERS: frozenset({1})}, {ORDERS: {1: 2}})

    def owned_by_this_member(topic_id: uuid.UUID, partition: int) -> int:
        return 5

    # The target changed back before the member revoked: it gets the partition again, as a new
    # assignment at the target epoch (Kafka's computeNextAssignment only keeps assigned partitions).
    assert reconcile(revoking, 6, {ORDERS: frozenset({1})}, {}, owned_by_this_member) == CurrentAssignment(
        6, 5, MemberState.STABLE, {ORDERS: frozenset({1})}, {}, {ORDERS: {1: 6}}
    )


def test_reconcile_of_an_unknown_state_fences_a_member_that_owns_partitions() -> None:
    unknown = CurrentAssignment(2, 1, MemberState.from_value(42), {ORDERS: frozenset({0})})
    assert unknown.state is MemberState.UNKNOWN
    with pytest.raises(FencedMemberEpochError):
        reconcile(unknown, 2, {ORDERS: frozenset({0})}, {ORDERS: frozenset({0})}, lambda t, p: -1)
    assert reconcile(unknown, 2, {ORDERS: frozenset({0})}, {}, lambda t, p: -1).state is MemberState.STABLE
