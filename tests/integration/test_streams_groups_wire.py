"""KIP-1071's streams groups on the wire: raw StreamsGroupHeartbeat and StreamsGroupDescribe (v0, and
KIP-1331's v1) against one node with Kafka 4.4's defaults, which finalize streams.version 1, and
after streams.version is downgraded to 0; ListGroups, DescribeGroups, OffsetCommit/OffsetFetch of a
streams member and the group id shared with the other group types.

The topology is a word count's: one subtopology reading the source topic, with a compacted
changelog topic the coordinator has created (one partition per source partition). Internal topics
that cannot be created (the controller refuses them; the member may not CREATE them, on
test_acls.py's ACL-enabled node) are named in the status as Kafka 4.4 names them."""

from __future__ import annotations

import datetime
import itertools
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource, ResourcePatternType, ResourceType
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.consumer_group_heartbeat.v0 import request as consumer_heartbeat_v0
from kio.schema.describe_groups.v6 import request as describe_groups_v6
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.list_groups.v5 import request as list_groups_v5
from kio.schema.offset_fetch.v9 import request as offset_fetch_v9
from kio.schema.streams_group_describe.v0 import request as describe_v0
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_v0
from kio.static.primitive import i8, i16, i32

from benchmarks.streams_groups import compile_word_count
from protocol.schema.streams_group_describe.v1 import request as describe_v1
from protocol.schema.streams_group_heartbeat.v1 import request as heartbeat_v1
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic
from tests.integration.test_acls import Secured, acl, add_acls, existing_topics, sasl_socket, secured  # noqa: F401  (the fixture)
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.wire import exchange, request
from tests import streams_jars

STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89
GROUP = "wordcount-app"
SOURCE = "streams-words"
CHANGELOG = f"{GROUP}-counts-changelog"
WAIT_S = 30.0
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS = 1, 3
RETRIABLE = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator)


def topology(source: str = SOURCE) -> heartbeat_v0.Topology:
    changelog = heartbeat_v0.TopicInfo(
        name=CHANGELOG, partitions=i32(0), replication_factor=i16(0), topic_configs=(heartbeat_v0.KeyValue(key="cleanup.policy", value="compact"),)
    )
    sub = heartbeat_v0.Subtopology(
        subtopology_id="0",
        source_topics=(source,),
        source_topic_regex=(),
        state_changelog_topics=(changelog,),
        repartition_sink_topics=(),
        repartition_source_topics=(),
        copartition_groups=(),
    )
    return heartbeat_v0.Topology(epoch=i32(0), subtopologies=(sub,))


def tasks(partitions: set[int]) -> tuple[heartbeat_v0.TaskIds, ...]:
    return (heartbeat_v0.TaskIds(subtopology_id="0", partitions=tuple(i32(p) for p in sorted(partitions))),) if partitions else ()


def heartbeat(bs: str, member_id: str, epoch: int, owned: set[int] | None = None, *, join: bool = False, source: str = SOURCE, version: int = 0) -> Any:
    """A heartbeat at ``version``: v1's request is v0's (the answer differs)."""
    joining = {"topology": topology(source), "rebalance_timeout": datetime.timedelta(seconds=30), "process_id": str(uuid.uuid4()), "client_tags": ()} if join else {"client_tags": None}
    no_tasks = () if join else None
    return request(
        bs,
        (heartbeat_v1 if version else heartbeat_v0).StreamsGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=member_id,
            member_epoch=i32(epoch),
            endpoint_information_epoch=i32(0),
            active_tasks=tasks(owned) if owned is not None else no_tasks,
            standby_tasks=() if owned is not None or join else None,
            warmup_tasks=() if owned is not None or join else None,
            task_offsets=None,
            task_end_offsets=None,
            **joining,
        ),
    )


def join(bs: str, member_id: str, source: str = SOURCE) -> Any:
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(GROUP,)))
    deadline = time.monotonic() + WAIT_S
    while (answer := heartbeat(bs, member_id, 0, join=True, source=source)).error_code in RETRIABLE:
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    return answer


def describe(bs: str, *group_ids: str) -> Any:
    return request(bs, describe_v0.StreamsGroupDescribeRequest(group_ids=group_ids, include_authorized_operations=False))


def describe_with_topology_description(bs: str, *group_ids: str) -> Any:
    return request(bs, describe_v1.StreamsGroupDescribeRequest(group_ids=group_ids, include_authorized_operations=False, include_topology_description=True))


def active(answer: Any) -> set[int] | None:
    return None if answer.active_tasks is None else {p for t in answer.active_tasks for p in t.partitions}


def streams_apis(bs: str) -> list[tuple[int, int, int]]:
    r = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in r.api_keys if k.api_key in (STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE)]


@pytest.fixture
def node(broker_factory: StartBroker) -> BrokerProcess:
    """A node with Kafka 4.4's defaults: a new cluster at 4.4-IV2 finalizes streams.version 1."""
    started = broker_factory({})
    await_finalized(started.bootstrap, "streams.version", 1)
    return started


def set_streams_version(bs: str, level: int) -> None:
    action, done = ("downgrade", "downgraded") if level == 0 else ("upgrade", "upgraded")
    answer = kbroker("features", "--bootstrap-server", bs, action, "--feature", f"streams.version={level}")
    assert answer.stdout == f"streams.version was {done} to {level}.\n", answer.stderr
    await_finalized(bs, "streams.version", level)


def test_streams_groups_off_at_streams_version_0(node: BrokerProcess) -> None:
    """Served by default at v0-1, as by Kafka 4.4, whatever streams.version; once it is downgraded to
    0, both APIs answer as a Kafka 4.4 node downgraded so did: UNSUPPORTED_VERSION with no message,
    an empty Status (and v1's AcceptableRecoveryLag -1), every described group in request order;
    upgraded back to 1, a member joins."""
    bs = node.bootstrap
    assert streams_apis(bs) == [(STREAMS_GROUP_HEARTBEAT, 0, 1), (STREAMS_GROUP_DESCRIBE, 0, 1)]
    set_streams_version(bs, 0)
    assert streams_apis(bs) == [(STREAMS_GROUP_HEARTBEAT, 0, 1), (STREAMS_GROUP_DESCRIBE, 0, 1)]
    for version, lag in ((0, 0), (1, -1)):
        refused = heartbeat(bs, str(uuid.uuid4()), 0, join=True, version=version)
        assert (refused.error_code, refused.error_message, refused.member_id, refused.status, refused.acceptable_recovery_lag) == (ErrorCode.unsupported_version, None, "", (), lag)
    assert [(g.group_id, g.error_code) for g in describe(bs, "a", "b").groups] == [("a", ErrorCode.unsupported_version), ("b", ErrorCode.unsupported_version)]
    described_groups = describe_with_topology_description(bs, "b", "a").groups
    assert [(g.group_id, g.error_code, g.topology_description_status, g.assignor_name) for g in described_groups] == [
        ("b", ErrorCode.unsupported_version, 0, None),
        ("a", ErrorCode.unsupported_version, 0, None),
    ]
    set_streams_version(bs, 1)
    member = str(uuid.uuid4())
    joined = join(bs, member)
    assert (joined.error_code, joined.member_id) == (ErrorCode.none, member), joined


def wait_topic(bs: str, name: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bs})
    deadline = time.monotonic() + WAIT_S
    while (topic := admin.list_topics(timeout=5).topics.get(name)) is None or topic.error is not None:
        assert time.monotonic() < deadline, f"{name} was never created"
        time.sleep(0.2)
    return topic


def settle(bs: str, members: dict[str, tuple[int, set[int]]]) -> dict[str, tuple[int, set[int]]]:
    """Heartbeat every member with what it owns until every task is owned, by one member each
    when there are as many members as tasks, and none's tasks or epoch move."""
    deadline = time.monotonic() + WAIT_S
    while True:
        moved = False
        for member_id, (epoch, owned) in list(members.items()):
            hb = heartbeat(bs, member_id, epoch, owned)
            assert hb.error_code == ErrorCode.none, hb
            now = active(hb)
            new = (hb.member_epoch, owned if now is None else now)
            moved |= new != members[member_id]
            members[member_id] = new
        owned = [o for _, o in members.values()]
        if not moved and set().union(*owned) == {0, 1} and (len(members) == 1 or all(owned)):
            return members
        assert time.monotonic() < deadline, members
        time.sleep(0.2)


def test_streams_group_membership(node: BrokerProcess) -> None:
    bs = node.bootstrap
    first, second = str(uuid.uuid4()), str(uuid.uuid4())

    # No source topic yet: the group is NOT_READY and assigns nothing.
    a = join(bs, first)
    assert (a.error_code, a.member_id, a.member_epoch) == (ErrorCode.none, first, 1), a
    # v0 carries AcceptableRecoveryLagLegacy, which Kafka 4.4 leaves at 0.
    assert a.heartbeat_interval.total_seconds() == 5 and a.acceptable_recovery_lag == 0
    assert active(a) == set()
    # Kafka 4.4 also says ASSIGNMENT_DELAYED (5) here: kbroker has no initial rebalance delay.
    assert (MISSING_SOURCE_TOPICS, f"Source topics {SOURCE} are missing.") in [(s.status_code, s.status_detail) for s in a.status]
    [group] = describe(bs, GROUP).groups
    assert (group.error_code, group.group_state) == (ErrorCode.none, "NotReady")
    assert [(s.subtopology_id, [(t.name, t.partitions) for t in s.state_changelog_topics]) for s in group.topology.subtopologies] == [("0", [(CHANGELOG, 0)])]

    # The source topic appears: the changelog is missing, and the coordinator creates it with the
    # source's partition count and the topology's configs (the heartbeats go on meanwhile).
    create_topic(bs, SOURCE, partitions=2)
    deadline = time.monotonic() + WAIT_S
    statuses = []
    while True:
        b = heartbeat(bs, first, a.member_epoch, set())
        assert b.error_code == ErrorCode.none, b
        statuses.append([s.status_code for s in b.status or ()])
        if active(b) or (b.status is not None and not any(s.status_code in (MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS) for s in b.status)):
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.5)
    assert any(MISSING_INTERNAL_TOPICS in codes for codes in statuses), statuses
    assert len(wait_topic(bs, CHANGELOG).partitions) == 2
    admin = AdminClient({"bootstrap.servers": bs})
    [config] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, CHANGELOG)]).values()
    assert config.result(timeout=10)["cleanup.policy"].value == "compact"

    # Ready: the only member gets both tasks.
    members = settle(bs, {first: (b.member_epoch, active(b) or set())})
    epoch, owned = members[first]
    assert owned == {0, 1}

    # A second member: the first gives up a task, which then goes to the second.
    c = join(bs, second)
    assert c.error_code == ErrorCode.none and c.member_epoch >= epoch, c
    members = settle(bs, {first: members[first], second: (c.member_epoch, active(c) or set())})
    assert sorted(len(owned) for _, owned in members.values()) == [1, 1]
    assert members[first][1] | members[second][1] == {0, 1}
    [epoch] = {e for e, _ in members.values()}

    # Kafka 4.4 answers the groups in the order of their coordinator partitions' results, not the request's.
    described_groups = {g.group_id: g for g in describe(bs, GROUP, "nobody").groups}
    group, unknown = described_groups[GROUP], described_groups["nobody"]
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch) == (ErrorCode.none, "Stable", epoch, epoch), (group, epoch)
    assert group.topology is not None and group.topology.epoch == 0
    [sub] = group.topology.subtopologies
    assert (sub.subtopology_id, sub.source_topics, [(t.name, t.partitions) for t in sub.state_changelog_topics]) == ("0", (SOURCE,), [(CHANGELOG, 2)])
    described = {m.member_id: {p for t in m.assignment.active_tasks for p in t.partitions} for m in group.members}
    assert described == {m: owned for m, (_, owned) in members.items()}
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.group_id_not_found, "Group nobody not found.")
    # v1 (KIP-1331), as Kafka 4.4 without a topology description plugin answers it: no description
    # kept (NOT_STORED, 1) for the group it described, the assignor named; an empty id is
    # INVALID_GROUP_ID, answered before the groups described.
    empty, *others = describe_with_topology_description(bs, GROUP, "nobody", "").groups
    assert (empty.group_id, empty.error_code, empty.error_message, empty.topology_description_status, empty.assignor_name) == ("", ErrorCode.invalid_group_id, None, 0, None)
    assert {g.group_id: (g.error_code, g.topology_description, g.topology_description_status, g.assignor_name) for g in others} == {
        GROUP: (ErrorCode.none, None, 1, "sticky"),
        "nobody": (ErrorCode.group_id_not_found, None, 0, None),
    }
    v1 = heartbeat(bs, first, epoch, members[first][1], version=1)
    assert (v1.error_code, v1.member_epoch, v1.acceptable_recovery_lag, v1.topology_description_required) == (ErrorCode.none, epoch, 10000, False)

    listed = request(bs, list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=("streams",)))
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [(GROUP, "streams", "Stable", "streams")]
    assert request(bs, list_groups_v5.ListGroupsRequest(states_filter=("Empty",), types_filter=("streams",))).groups == ()
    [classic] = request(bs, describe_groups_v6.DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=False)).groups
    assert (classic.error_code, classic.error_message) == (ErrorCode.group_id_not_found, f"Group {GROUP} is not a classic group.")

    # OffsetFetch from a member checks its epoch, as StreamsGroup.validateOffsetFetch does.
    stale = request(
        bs,
        offset_fetch_v9.OffsetFetchRequest(
            groups=(offset_fetch_v9.OffsetFetchRequestGroup(group_id=GROUP, member_id=first, member_epoch=i32(epoch + 9), topics=None),), require_stable=False
        ),
    )
    assert stale.groups[0].error_code == ErrorCode.stale_member_epoch

    # The id belongs to the streams group: a consumer group heartbeat is refused.
    consumer = request(
        bs,
        consumer_heartbeat_v0.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=str(uuid.uuid4()), member_epoch=i32(0), rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(SOURCE,), topic_partitions=()
        ),
    )
    # Kafka 4.4's message ends with a period; kbroker's consumer groups (broker/group/consumer_group.py) leave it out.
    assert consumer.error_code == ErrorCode.group_id_not_found and consumer.error_message.rstrip(".") == f"Group {GROUP} is not a consumer group", consumer

    # Errors: a wrong epoch is fenced; an empty member id and an internal source topic are refused.
    assert heartbeat(bs, first, epoch + 7, members[first][1]).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(bs, "", 0, join=True).error_code == ErrorCode.invalid_request
    bad = heartbeat(bs, str(uuid.uuid4()), 0, join=True, source="__consumer_offsets")
    assert (bad.error_code, bad.error_message) == (
        ErrorCode.streams_invalid_topology,
        "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited.",
    )

    # The second member leaves; the group goes on with one. v1's leave answer has no recovery lag (-1).
    left = heartbeat(bs, second, -1, version=1)
    assert (left.error_code, left.member_id, left.member_epoch, left.acceptable_recovery_lag) == (ErrorCode.none, second, -1, -1)
    [group] = describe(bs, GROUP).groups
    assert [m.member_id for m in group.members] == [first]

    # A restarted node rebuilds the group from its records (types 17, 19-23) in __consumer_offsets.
    before = group
    node.restart()
    deadline = time.monotonic() + WAIT_S
    while (reloaded := describe(bs, GROUP).groups[0]).error_code in RETRIABLE:
        assert time.monotonic() < deadline, reloaded
        time.sleep(0.2)
    assert (reloaded.error_code, reloaded.group_epoch, reloaded.assignment_epoch) == (ErrorCode.none, before.group_epoch, before.assignment_epoch)
    assert [(m.member_id, m.member_epoch, m.assignment) for m in reloaded.members] == [(m.member_id, m.member_epoch, m.assignment) for m in before.members]
    again = heartbeat(bs, first, before.members[0].member_epoch, {p for t in before.members[0].assignment.active_tasks for p in t.partitions})
    # The leave moved the group epoch past the assignment's: the reloaded coordinator computes the
    # new target, and the remaining member gets both tasks at that epoch.
    assert before.group_epoch == before.assignment_epoch + 1
    assert (again.error_code, again.member_epoch, active(again)) == (ErrorCode.none, before.group_epoch, {0, 1}), again


# -- internal topics that cannot be created -----------------------------------------------------------

# The detail texts are what an Apache Kafka 4.4.0 node (one node, its defaults; with SASL_PLAINTEXT,
# StandardAuthorizer and the same ACLs for the second test) answered to the same heartbeats. The
# creation errors and the refused topics come in the order of Kafka's HashMaps, not sorted.
KAFKA_POLICY_FAILED = (
    "Internal topics are missing: policy-app-store-changelog; Creation failed: policy-app-store-changelog "
    "(Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete)."
)
RF3_FAILED = (
    "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because only 1 broker(s) "
    "are registered or some brokers have all their log directories cordoned."
)
KAFKA_FIVE_FAILED = (
    "Creation failed: failing-app-unknown-changelog (Unknown topic config name: no.such.config), "
    "failing-app-policy-changelog (Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete), "
    f"failing-app-most-changelog ({RF3_FAILED}) and 2 more."
)
ACL_CHANGELOGS = ("acl-app-counts-changelog", "acl-app-totals-changelog", "acl-app-avg-changelog")
KAFKA_UNAUTHORIZED = "Unauthorized to CREATE on topics acl-app-avg-changelog, acl-app-counts-changelog."


def changelog(name: str, replication_factor: int = 0, configs: Mapping[str, str] | None = None) -> heartbeat_v0.TopicInfo:
    kvs = tuple(heartbeat_v0.KeyValue(key=k, value=v) for k, v in (configs or {}).items())
    return heartbeat_v0.TopicInfo(name=name, partitions=i32(0), replication_factor=i16(replication_factor), topic_configs=kvs)


def changelogs_topology(source: str, changelogs: Sequence[heartbeat_v0.TopicInfo]) -> heartbeat_v0.Topology:
    sub = heartbeat_v0.Subtopology(
        subtopology_id="0",
        source_topics=(source,),
        source_topic_regex=(),
        state_changelog_topics=tuple(changelogs),
        repartition_sink_topics=(),
        repartition_source_topics=(),
        copartition_groups=(),
    )
    return heartbeat_v0.Topology(epoch=i32(0), subtopologies=(sub,))


def owning_nothing(group: str, member_id: str, epoch: int, joining: heartbeat_v0.Topology | None = None) -> heartbeat_v0.StreamsGroupHeartbeatRequest:
    """A v0 heartbeat of a member of ``group`` that owns no task; ``joining``: the topology it joins with."""
    joined = {"topology": joining, "rebalance_timeout": datetime.timedelta(seconds=30), "process_id": str(uuid.uuid4()), "client_tags": ()} if joining else {"client_tags": None}
    return heartbeat_v0.StreamsGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=i32(epoch),
        endpoint_information_epoch=i32(0),
        active_tasks=(),
        standby_tasks=(),
        warmup_tasks=(),
        task_offsets=None,
        task_end_offsets=None,
        **joined,
    )


def missing_internal_topics(answer: Any) -> str:
    """The MISSING_INTERNAL_TOPICS status's detail ("" without one)."""
    return next((s.status_detail for s in answer.status or () if s.status_code == MISSING_INTERNAL_TOPICS), "")


def heartbeat_until(send: Callable[[Any], Any], group: str, member_id: str, joining: heartbeat_v0.Topology, told: Callable[[str], bool]) -> Any:
    """Join ``group`` with ``joining`` (again while the coordinator loads or new ACLs reach the
    authorizer), then heartbeat until the MISSING_INTERNAL_TOPICS detail is ``told``: that answer."""
    deadline = time.monotonic() + WAIT_S
    waiting = (*RETRIABLE, ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed)
    while (answer := send(owning_nothing(group, member_id, 0, joining))).error_code in waiting:
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    while not told(missing_internal_topics(answer)):
        assert answer.error_code == ErrorCode.none and time.monotonic() < deadline, answer
        time.sleep(0.2)
        answer = send(owning_nothing(group, member_id, answer.member_epoch))
    return answer


def test_internal_topics_whose_creation_failed_are_named_in_the_status(node: BrokerProcess) -> None:
    """A changelog topic the controller refuses (a cleanup.policy Kafka does not know, an unknown
    config, a replication factor of 3 on one node) stays missing, and the heartbeats after the
    attempt say why, three topics at most, in Kafka 4.4's words."""
    bs = node.bootstrap
    create_topic(bs, "failing-words", partitions=2)
    send = lambda body: request(bs, body)  # noqa: E731
    failing = lambda detail: "; Creation failed: " in detail  # noqa: E731
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("policy-app", "failing-app")))

    policy = changelogs_topology("failing-words", [changelog("policy-app-store-changelog", configs={"cleanup.policy": "bogus"})])
    answer = heartbeat_until(send, "policy-app", str(uuid.uuid4()), policy, failing)
    assert missing_internal_topics(answer) == KAFKA_POLICY_FAILED

    five = changelogs_topology(
        "failing-words",
        [
            changelog("failing-app-policy-changelog", configs={"cleanup.policy": "bogus"}),
            changelog("failing-app-replicas-changelog", replication_factor=3),
            changelog("failing-app-unknown-changelog", configs={"no.such.config": "1"}),
            changelog("failing-app-more-changelog", replication_factor=3),
            changelog("failing-app-most-changelog", replication_factor=3),
        ],
    )
    answer = heartbeat_until(send, "failing-app", str(uuid.uuid4()), five, failing)
    summary, told = missing_internal_topics(answer).split("; ", 1)
    assert told == KAFKA_FIVE_FAILED
    # As Kafka, in the order of its HashMap of the topics to create.
    assert summary == "Internal topics are missing: failing-app-unknown-changelog, failing-app-policy-changelog, failing-app-most-changelog and 2 additional topics"
    assert not {t for t in AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics if t.startswith(("policy-app", "failing-app"))}


def test_a_member_that_may_not_create_its_internal_topics_is_told_and_none_is_created(secured: Secured) -> None:  # noqa: F811
    """On tests/integration/test_acls.py's node (SASL_PLAINTEXT with PLAIN users, StandardAuthorizer),
    alice may READ the group and DESCRIBE its topics, and CREATE only one of its three changelog
    topics: as Kafka 4.4, the coordinator creates none of them (not even that one), and the status
    names the others; once she may CREATE them all, they are created."""
    s = secured
    alice = "User:alice"
    await_finalized(s.plain, "streams.version", 1)
    create_topic(s.plain, "acl-words", partitions=2)
    add_acls(
        s,
        acl(ResourceType.GROUP, "acl-app", alice, AclOperation.READ),
        acl(ResourceType.TOPIC, "acl-words", alice, AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, "acl-app", alice, AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.TOPIC, "acl-app-totals-changelog", alice, AclOperation.CREATE),
    )
    joining = changelogs_topology("acl-words", [changelog(name) for name in ACL_CHANGELOGS])
    member = str(uuid.uuid4())
    with sasl_socket(s, "alice") as sock:
        ids = itertools.count(10)
        send = lambda body: exchange(sock, body, next(ids))  # noqa: E731
        send(find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("acl-app",)))
        answer = heartbeat_until(send, "acl-app", member, joining, lambda detail: "Unauthorized" in detail)
        for _ in range(3):
            assert answer.error_code == ErrorCode.none and missing_internal_topics(answer).split("; ", 1)[1] == KAFKA_UNAUTHORIZED, answer
            time.sleep(0.3)
            answer = send(owning_nothing("acl-app", member, answer.member_epoch))
        assert not set(ACL_CHANGELOGS) & existing_topics(s)

        # Allowed to CREATE them all (once the ACL reaches the authorizer): the next heartbeats have them created.
        add_acls(s, acl(ResourceType.TOPIC, "acl-app", alice, AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED))
        deadline = time.monotonic() + WAIT_S
        while missing_internal_topics(answer):
            assert answer.error_code == ErrorCode.none and time.monotonic() < deadline, answer
            time.sleep(0.3)
            answer = send(owning_nothing("acl-app", member, answer.member_epoch))
    assert set(ACL_CHANGELOGS) <= existing_topics(s)


# -- a real Kafka Streams 4.4 application ------------------------------------------------------------

APP_DIR = Path(__file__).resolve().parents[1] / "streams_app"
LINES = ["the quick brown fox", "jumps over the lazy dog", "The dog barks", "a fox and a dog"]
EXPECTED = Counter(w for line in LINES for w in line.lower().split())


class WordCountApp:
    """tests/streams_app/WordCount.java, compiled against kafka-streams 4.4.0, as one instance."""

    def __init__(self, classes: Path, bs: str, app_id: str, state_dir: Path, guarantee: str) -> None:
        lib = streams_jars.fetch_jars()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256M", f"-Dlog4j2.configurationFile={APP_DIR / 'log4j2.properties'}", "-cp", f"{classes}:{lib}/*", "WordCount",
             bs, app_id, "wc-input", "wc-output", str(state_dir), guarantee, "streams"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_running(self) -> None:
        deadline = time.monotonic() + 90
        while "STATE RUNNING" not in self.lines:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.lines
            time.sleep(0.2)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


def compile_app(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return compile_word_count(streams_jars.fetch_jars(), out)


def final_counts(bs: str, expected: Mapping[str, int]) -> dict[str, int]:
    """The last count of each word on the output topic, once every word has reached its count."""
    c = Consumer({"bootstrap.servers": bs, "group.id": f"reader-{uuid.uuid4()}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["wc-output"])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + 90
    try:
        while any(counts.get(w) != n for w, n in expected.items()):
            assert time.monotonic() < deadline, counts
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            counts[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
        # What else is already there: a later count would be a double count.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                counts[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
    finally:
        c.close()
    return counts


def run_word_count(bs: str, work: Path, instances: int, guarantee: str) -> tuple[dict[str, int], list[list[str]], Any]:
    """Run the word count (``instances`` instances of one application) over LINES: the output's
    counts, what each instance printed, and the group as StreamsGroupDescribe saw it once counted."""
    create_topic(bs, "wc-input", partitions=2)
    create_topic(bs, "wc-output", partitions=2)
    classes = compile_app(work / "classes")
    apps = [WordCountApp(classes, bs, "wordcount", work / f"state{i}", guarantee) for i in range(instances)]
    try:
        for app in apps:
            app.wait_running()
        producer = Producer({"bootstrap.servers": bs})
        for i, line in enumerate(LINES):
            producer.produce("wc-input", key=str(i).encode(), value=line.encode())
        assert producer.flush(30) == 0
        counts = final_counts(bs, EXPECTED)
        [described] = describe(bs, "wordcount").groups
    finally:
        for app in apps:
            app.stop()
    return counts, [app.lines for app in apps], described


@pytest.mark.parametrize("instances,guarantee", [(1, "at_least_once"), (2, "exactly_once_v2")])
def test_kafka_streams_word_count(node: BrokerProcess, tmp_path: Path, instances: int, guarantee: str) -> None:
    """Kafka Streams 4.4 with group.protocol=streams, on a node with Kafka 4.4's defaults (its
    heartbeats at v1): the counts on the output topic are exact, and two instances split the tasks."""
    bs = node.bootstrap
    counts, printed, running = run_word_count(bs, tmp_path, instances, guarantee)
    assert counts == dict(EXPECTED)
    # Two subtopologies (the count reads a repartition topic) of two partitions: four active
    # tasks, each held by one member, every member holding some.
    held = [(t.subtopology_id, p) for m in running.members for t in m.assignment.active_tasks for p in t.partitions]
    assert sorted(held) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    assert len(running.members) == instances and all(m.assignment.active_tasks for m in running.members)
    for lines in printed:
        # Kafka's KafkaStreams moves CREATED -> REBALANCING -> RUNNING (maybe back and forth while
        # the tasks move), then PENDING_SHUTDOWN -> NOT_RUNNING on close.
        assert lines[0] == "STATE REBALANCING" and "STATE RUNNING" in lines, lines
        # NOT_RUNNING comes from a stream thread, CLOSED from main once close() returns: either order.
        assert sorted(lines[-3:]) == ["CLOSED", "STATE NOT_RUNNING", "STATE PENDING_SHUTDOWN"], lines
    [group] = describe(bs, "wordcount").groups
    assert group.error_code == ErrorCode.none and group.group_state == "Empty"
