"""KIP-932's share group membership on the wire: raw ShareGroupHeartbeat and ShareGroupDescribe
(and the offset APIs refusing a share group's id) against one node with its defaults, which
serves them and finalizes share.version 2 as a new Kafka 4.4 cluster does, and what it answers
once share.version is downgraded to 0.

A member's first heartbeat starts the share coordinator's initialization of the topic's share
partitions, so it is assigned nothing; the test waits for the assignment that follows before it
looks at epochs, so that nothing it asserts depends on how fast the initialization is."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.list_groups.v5 import request as list_groups_v5
from kio.schema.share_group_describe.v1 import request as describe_v1
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_v1
from kio.static.primitive import i8, i32

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic
from tests.integration.test_assignment_epochs_wire import commit_v9
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.test_offset_member_checks_wire import fetch_v8
from tests.integration.wire import request
from tests.kafka_tools import kafka_tool

SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE = 76, 77
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
GROUP = "share-g"
TOPIC = "share-t"
WAIT_S = 30.0


def share_group_apis(bs: str) -> list[tuple[int, int, int]]:
    r = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in r.api_keys if k.api_key in (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE)]


def heartbeat(bs: str, member_id: str, epoch: int, topics: tuple[str, ...] | None = (TOPIC,)) -> Any:
    return request(bs, heartbeat_v1.ShareGroupHeartbeatRequest(group_id=GROUP, member_id=member_id, member_epoch=i32(epoch), rack_id=None, subscribed_topic_names=topics))


def describe(bs: str, *group_ids: str) -> Any:
    return request(bs, describe_v1.ShareGroupDescribeRequest(group_ids=group_ids, include_authorized_operations=False))


def join(bs: str, member_id: str) -> Any:
    """FindCoordinator first, as a client does: it creates the offsets topic, which may still be
    loading when the first heartbeats arrive."""
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(GROUP,)))
    deadline = time.monotonic() + WAIT_S
    while (answer := heartbeat(bs, member_id, 0)).error_code in (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator):
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    return answer


@pytest.fixture
def share_node(broker_factory: StartBroker) -> BrokerProcess:
    """A new node of its own, with its defaults: share.version 2, as a new Kafka 4.4 cluster."""
    node = broker_factory()
    await_finalized(node.bootstrap, "share.version", 2)
    return node


def assigned(answer: Any) -> set[int]:
    return {p for t in answer.assignment.topic_partitions for p in t.partitions} if answer.assignment is not None else set()


def test_two_members_join_a_share_group(share_node: BrokerProcess) -> None:
    bs = share_node.bootstrap
    assert share_group_apis(bs) == [(SHARE_GROUP_HEARTBEAT, 1, 1), (SHARE_GROUP_DESCRIBE, 1, 1)]
    create_topic(bs, TOPIC, partitions=2)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())

    a = join(bs, first)
    assert (a.error_code, a.error_message, a.member_id, a.member_epoch) == (ErrorCode.none, None, first, 1)
    assert a.heartbeat_interval.total_seconds() == 5
    # The join is what starts the share coordinator's initialization of the topic's partitions,
    # so nothing is assignable yet.
    assert a.assignment is not None and a.assignment.topic_partitions == ()
    # Once they are initialized, the next heartbeat bumps the group epoch and assigns both.
    epoch, deadline = a.member_epoch, time.monotonic() + WAIT_S
    while True:
        hb = heartbeat(bs, first, epoch, None)
        assert hb.error_code == ErrorCode.none, hb
        epoch = hb.member_epoch
        if hb.assignment is not None and assigned(hb) == {0, 1}:
            break
        assert time.monotonic() < deadline, hb
        time.sleep(0.2)
    b = heartbeat(bs, second, 0)
    assert (b.error_code, b.member_id, b.member_epoch) == (ErrorCode.none, second, epoch + 1)
    # Two members, two partitions: one each (the SimpleAssignor shares a partition only between more members than partitions).
    assert len(assigned(b)) == 1
    # The first member catches up with the group epoch and gives up the other partition.
    again = heartbeat(bs, first, epoch, None)
    assert (again.error_code, again.member_epoch, assigned(again)) == (ErrorCode.none, epoch + 1, {0, 1} - assigned(b))
    fenced = heartbeat(bs, first, epoch + 7, None)
    assert fenced.error_code == ErrorCode.fenced_member_epoch

    [group, unknown] = describe(bs, GROUP, "nobody").groups
    assert (group.error_code, group.group_id, group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        ErrorCode.none, GROUP, "Stable", epoch + 1, epoch + 1, "simple",
    )
    members = {m.member_id: m for m in group.members}
    assert set(members) == {first, second}
    assert all(m.member_epoch == epoch + 1 and m.subscribed_topic_names == (TOPIC,) and m.client_id == "wire-test" for m in members.values())
    assert sorted(p for m in members.values() for t in m.assignment.topic_partitions for p in t.partitions) == [0, 1]
    assert (unknown.group_id, unknown.error_code, unknown.error_message) == ("nobody", ErrorCode.group_id_not_found, "Group nobody not found.")

    listed = request(bs, list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=("share",)))
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [(GROUP, "share", "Stable", "share")]
    assert GROUP not in [g.group_id for g in request(bs, list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=("consumer", "classic"))).groups]

    left = heartbeat(bs, second, -1, None)
    assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, second, -1)
    [group] = describe(bs, GROUP).groups
    assert [m.member_id for m in group.members] == [first] and group.group_epoch == epoch + 2

    # As Kafka 4.4's ShareGroup.validateOffsetCommit/Fetch: OffsetCommit, the admin's (-1) as a
    # member's, fails every partition with GROUP_ID_NOT_FOUND; OffsetFetch answers no offsets, no error.
    assert commit_v9(bs, GROUP, "", -1, TOPIC, 0, 1) == {0: ErrorCode.group_id_not_found, 1: ErrorCode.group_id_not_found}
    assert commit_v9(bs, GROUP, first, epoch + 1, TOPIC, 0) == {0: ErrorCode.group_id_not_found}
    assert fetch_v8(bs, GROUP, TOPIC) == (ErrorCode.none, {0: -1, 1: -1})
    [still] = describe(bs, GROUP).groups
    assert (still.error_code, [m.member_id for m in still.members]) == (ErrorCode.none, [first])


def test_kafka_share_groups_tool_lists_and_describes_members(share_node: BrokerProcess, kafka_lib: Path) -> None:
    """Kafka 4.4's kafka-share-groups.sh: --list, --describe --state and --members; --describe of
    the offsets (DescribeShareGroupOffsets) is tests/integration/test_share_group_offsets_wire.py's."""
    bs = share_node.bootstrap
    create_topic(bs, TOPIC, partitions=2)
    member = str(uuid.uuid4())
    assert join(bs, member).error_code == ErrorCode.none

    def tool(*args: str) -> Any:
        return kafka_tool(kafka_lib, SHARE_GROUP_COMMAND, "--bootstrap-server", bs, *args)

    listed = tool("--list")
    assert (listed.returncode, listed.stdout) == (0, f"{GROUP}\n")
    members = tool("--describe", "--group", GROUP, "--members")
    assert members.returncode == 0
    assert members.stdout.splitlines()[1:] == [
        "GROUP           CONSUMER-ID                          HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT",
        f"{GROUP:<15} {member} /127.0.0.1      wire-test       0            ",
    ]
    state = tool("--describe", "--group", GROUP, "--state")
    assert state.returncode == 0
    [header, row] = state.stdout.splitlines()[1:]
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"] and row.split()[-2:] == ["Stable", "1"]


def test_share_groups_refused_once_share_version_is_downgraded_to_0(share_node: BrokerProcess) -> None:
    """Still listed in ApiVersions, as Kafka 4.4 lists them whatever share.version is; at share.version
    0, Kafka 4.4's answers. Back at 2, served again."""
    bs = share_node.bootstrap
    refused = kbroker("features", "--bootstrap-server", bs, "upgrade", "--feature", "share.version=3")
    assert "Invalid update version 3 for feature share.version. Local controller 1 only supports versions 0-2" in refused.stdout
    downgraded = kbroker("features", "--bootstrap-server", bs, "downgrade", "--feature", "share.version=0")
    assert downgraded.stdout == "share.version was downgraded to 0.\n", downgraded.stderr
    await_finalized(bs, "share.version", 0)
    assert share_group_apis(bs) == [(SHARE_GROUP_HEARTBEAT, 1, 1), (SHARE_GROUP_DESCRIBE, 1, 1)]
    answer = heartbeat(bs, str(uuid.uuid4()), 0)
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch, answer.assignment) == (ErrorCode.unsupported_version, None, None, 0, None)
    assert [(g.group_id, g.error_code) for g in describe(bs, "g1", "g2").groups] == [("g1", ErrorCode.unsupported_version), ("g2", ErrorCode.unsupported_version)]
    upgraded = kbroker("features", "--bootstrap-server", bs, "upgrade", "--feature", "share.version=2")
    assert upgraded.stdout == "share.version was upgraded to 2.\n", upgraded.stderr
    await_finalized(bs, "share.version", 2)
    create_topic(bs, TOPIC, partitions=1)
    assert join(bs, str(uuid.uuid4())).error_code == ErrorCode.none
