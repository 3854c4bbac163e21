"""KIP-932's share group offsets admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, and DeleteGroups of a share group) through Kafka 4.4's
kafka-share-groups.sh against one kbroker node with its defaults (share.version 2, as a new Kafka
4.4 cluster).

The expected outputs (``KAFKA_OUTPUTS``) were recorded by running the same ``scenario`` against
Apache Kafka 4.4.0 (one combined node started by benchmarks/apache_kafka.py, share.version 2 by
default) with ``python -m tests.integration.test_share_group_offsets_wire BOOTSTRAP``; running a
Kafka node in the test would double its time. Stack-trace lines ("\\tat ...") are dropped and
--list's lines sorted: the order Kafka lists groups in is its hash map's.

Members only heartbeat (nothing is consumed), so the start offsets come from the share
partitions' initialization (share.auto.offset.reset latest: no start offset until a first fetch,
shown as "-") and from the resets.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from kio.schema.alter_share_group_offsets.v0 import request as alter_v0
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.delete_share_group_offsets.v0 import request as delete_v0
from kio.schema.describe_share_group_offsets.v0 import request as describe_v0
from kio.schema.describe_share_group_offsets.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.read_share_group_state_summary.v1 import request as summary_v1
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_v1
from kio.static.primitive import i8, i32, i64

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, produce_acked
from tests.integration.test_share_coordinator_wire import topic_id
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.test_share_groups_wire import SHARE_GROUP_COMMAND, share_node  # noqa: F401 (a fixture)
from tests.integration.wire import request
from tests.kafka_tools import kafka_tool

GROUP = "offsets-g"
TOPIC = "offsets-t"
OTHER_TOPIC = "offsets-u"
NEW_GROUP = "offsets-new"
WAIT_S = 30.0
RETRIABLE = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator)

# Each step of ``scenario``: the tool's arguments (or a marker), its exit code, its normalized
# standard output and error.
Step = tuple[str, int, str, str]


def heartbeat(bs: str, member_id: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
    return request(bs, heartbeat_v1.ShareGroupHeartbeatRequest(group_id=GROUP, member_id=member_id, member_epoch=i32(epoch), rack_id=None, subscribed_topic_names=topics))


def join_until_assigned(bs: str, member_id: str, partitions: int) -> None:
    """The first heartbeat starts the share partitions' initialization; the member is assigned
    them once it is done."""
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(GROUP,)))
    deadline = time.monotonic() + WAIT_S
    while (answer := heartbeat(bs, member_id, 0, (TOPIC,))).error_code in RETRIABLE:
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    assert answer.error_code == ErrorCode.none, answer
    epoch = answer.member_epoch
    while answer.assignment is None or sum(len(t.partitions) for t in answer.assignment.topic_partitions) < partitions:
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
        answer = heartbeat(bs, member_id, epoch, None)
        assert answer.error_code == ErrorCode.none, answer
        epoch = answer.member_epoch


def normalized(args: tuple[str, ...], output: str) -> str:
    lines = [line for line in output.splitlines() if not line.startswith("\tat ")]
    if args == ("--list",):
        lines.sort()
    return "\n".join(lines)


def scenario(bs: str, tool: Callable[..., Any]) -> list[Step]:
    """The same commands against any broker: a member joins; what a non-empty group refuses; it
    leaves; resets, describes, deletions, and the errors for unknown groups and topics."""
    steps: list[Step] = []

    def run(*args: str) -> None:
        done = tool(*args)
        steps.append((" ".join(args), done.returncode, normalized(args, done.stdout), normalized(args, done.stderr)))

    create_topic(bs, TOPIC, partitions=2)
    create_topic(bs, OTHER_TOPIC, partitions=1)
    produce_acked(bs, TOPIC, [b"a"] * 5, partition=0)
    produce_acked(bs, TOPIC, [b"b"] * 3, partition=1)
    produce_acked(bs, OTHER_TOPIC, [b"c"] * 5, partition=0)
    member = str(uuid.uuid4())
    join_until_assigned(bs, member, 2)
    steps.append(("JOINED", 0, "", ""))
    run("--describe", "--group", GROUP)
    run("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--dry-run")
    run("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--execute")
    run("--delete-offsets", "--group", GROUP, "--topic", TOPIC)
    run("--delete", "--group", GROUP)
    left = heartbeat(bs, member, -1, None)
    steps.append(("LEFT", int(left.error_code), "", ""))

    run("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--dry-run")
    run("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--execute")
    run("--describe", "--group", GROUP)
    run("--reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:1", "--to-offset", "2", "--execute")
    run("--describe", "--group", GROUP, "--offsets")
    run("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-latest", "--execute")
    run("--reset-offsets", "--group", GROUP, "--topic", OTHER_TOPIC, "--to-offset", "3", "--execute")
    run("--describe", "--group", GROUP)
    run("--reset-offsets", "--group", GROUP, "--all-topics", "--to-earliest", "--dry-run")
    run("--reset-offsets", "--group", GROUP, "--topic", "offsets-nosuch", "--to-earliest", "--execute")
    run("--reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:7", "--to-offset", "1", "--execute")

    run("--delete-offsets", "--group", GROUP, "--topic", OTHER_TOPIC)
    run("--describe", "--group", GROUP)
    run("--delete-offsets", "--group", GROUP, "--topic", OTHER_TOPIC)
    run("--delete-offsets", "--group", GROUP, "--topic", "offsets-nosuch")
    run("--describe", "--group", "offsets-nobody")
    run("--delete-offsets", "--group", "offsets-nobody", "--topic", TOPIC)

    run("--reset-offsets", "--group", NEW_GROUP, "--topic", TOPIC, "--to-offset", "1", "--execute")
    run("--describe", "--group", NEW_GROUP)
    run("--list")
    run("--delete", "--group", "offsets-nobody")
    run("--delete", "--group", NEW_GROUP)
    run("--delete", "--group", GROUP)
    run("--list")
    return steps


def test_kafka_share_groups_tool_offsets_as_kafka(share_node: BrokerProcess, kafka_lib: Path) -> None:
    bs = share_node.bootstrap

    def tool(*args: str) -> Any:
        return kafka_tool(kafka_lib, SHARE_GROUP_COMMAND, "--bootstrap-server", bs, *args)

    steps = scenario(bs, tool)
    for got, want in zip(steps, KAFKA_OUTPUTS):
        assert got == want
    assert len(steps) == len(KAFKA_OUTPUTS)
    # --delete-offsets and --delete deleted the share partitions' state on the share coordinator,
    # which now answers for them as for share partitions it never had (start offset -1); they had
    # start offsets 5, 3 (offsets-t) and 3 (offsets-u) before.
    for group_id, topic, partitions in ((GROUP, TOPIC, (0, 1)), (GROUP, OTHER_TOPIC, (0,)), (NEW_GROUP, TOPIC, (0, 1))):
        data = summary_v1.ReadStateSummaryData(topic_id=topic_id(bs, topic), partitions=tuple(summary_v1.PartitionData(partition=i32(p), leader_epoch=i32(0)) for p in partitions))
        [answer] = request(bs, summary_v1.ReadShareGroupStateSummaryRequest(group_id=group_id, topics=(data,))).results
        assert [(int(p.partition), p.error_code, int(p.start_offset)) for p in answer.partitions] == [(p, ErrorCode.none, -1) for p in partitions]


def test_describe_offsets_of_named_and_unknown_topics(share_node: BrokerProcess) -> None:
    """Raw DescribeShareGroupOffsets v0 and v1: a topic Kafka does not know is answered with the
    zero id and start offsets -1; an empty topic list with no topics. Alter and Delete refuse an
    empty group id."""
    bs = share_node.bootstrap
    create_topic(bs, TOPIC, partitions=2)
    join_until_assigned(bs, str(uuid.uuid4()), 2)
    for schema in (describe_v0, describe_v1):
        topics = (schema.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=(i32(1),)), schema.DescribeShareGroupOffsetsRequestTopic(topic_name="nosuch", partitions=(i32(0), i32(3))))
        answer = request(bs, schema.DescribeShareGroupOffsetsRequest(groups=(
            schema.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=topics),
            schema.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=()),
        )))  # fmt: skip
        [named, none] = answer.groups
        assert (named.group_id, named.error_code, none.error_code, none.topics) == (GROUP, ErrorCode.none, ErrorCode.none, ())
        [known, unknown] = named.topics
        assert (known.topic_name, [(p.partition_index, p.start_offset, p.error_code) for p in known.partitions]) == (TOPIC, [(1, -1, ErrorCode.none)])
        # kio decodes Kafka's zero id as None.
        assert (unknown.topic_name, unknown.topic_id) == ("nosuch", None)
        assert [(p.partition_index, p.start_offset, p.leader_epoch, p.error_code) for p in unknown.partitions] == [(0, -1, 0, ErrorCode.none), (3, -1, 0, ErrorCode.none)]
    # An empty group id: Kafka's INVALID_GROUP_ID, with its message.
    partition = alter_v0.AlterShareGroupOffsetsRequestPartition(partition_index=i32(0), start_offset=i64(0))
    altered = request(bs, alter_v0.AlterShareGroupOffsetsRequest(group_id="", topics=(alter_v0.AlterShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=(partition,)),)))
    deleted = request(bs, delete_v0.DeleteShareGroupOffsetsRequest(group_id="", topics=(delete_v0.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC),)))
    for answer in (altered, deleted):
        assert (answer.error_code, answer.error_message, answer.responses) == (ErrorCode.invalid_group_id, "The group id is invalid.", ())


def test_offsets_apis_refused_once_share_version_is_downgraded_to_0(share_node: BrokerProcess) -> None:
    """Advertised at Kafka 4.4's versions whatever share.version is; at share.version 0:
    UNSUPPORTED_VERSION, per group for Describe, with Errors' message for Alter and Delete."""
    bs = share_node.bootstrap
    downgraded = kbroker("features", "--bootstrap-server", bs, "downgrade", "--feature", "share.version=0")
    assert downgraded.stdout == "share.version was downgraded to 0.\n", downgraded.stderr
    await_finalized(bs, "share.version", 0)
    versions = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in versions.api_keys if 90 <= k.api_key <= 92] == [(90, 0, 1), (91, 0, 0), (92, 0, 0)]
    described = request(bs, describe_v1.DescribeShareGroupOffsetsRequest(groups=(describe_v1.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=None),)))
    assert [(g.group_id, g.error_code, g.error_message, g.topics) for g in described.groups] == [("g", ErrorCode.unsupported_version, None, ())]
    partition = alter_v0.AlterShareGroupOffsetsRequestPartition(partition_index=i32(0), start_offset=i64(0))
    altered = request(bs, alter_v0.AlterShareGroupOffsetsRequest(group_id="g", topics=(alter_v0.AlterShareGroupOffsetsRequestTopic(topic_name="t", partitions=(partition,)),)))
    deleted = request(bs, delete_v0.DeleteShareGroupOffsetsRequest(group_id="g", topics=(delete_v0.DeleteShareGroupOffsetsRequestTopic(topic_name="t"),)))
    for answer in (altered, deleted):
        assert (answer.error_code, answer.error_message, answer.responses) == (ErrorCode.unsupported_version, "The version of API is not supported.", ())


KAFKA_OUTPUTS: list[Step] = [
    ('JOINED', 0, '', ''),
    ('--describe --group offsets-g', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-g       offsets-t       0          -             -\noffsets-g       offsets-t       1          -             -', ''),
    ('--reset-offsets --group offsets-g --topic offsets-t --to-earliest --dry-run', 1, '', "Share group 'offsets-g' is not empty."),
    ('--reset-offsets --group offsets-g --topic offsets-t --to-earliest --execute', 1, '', "Share group 'offsets-g' is not empty."),
    ('--delete-offsets --group offsets-g --topic offsets-t', 0, '\nError: The group is not empty.\n\nTOPIC           STATUS\noffsets-t       Error: The group is not empty.', ''),
    ('--delete --group offsets-g', 0, "\nError: Deletion of some share groups failed:\n* Group 'offsets-g' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: Share group 'offsets-g' is not EMPTY.", ''),
    ('LEFT', 0, '', ''),
    ('--reset-offsets --group offsets-g --topic offsets-t --to-earliest --dry-run', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-t       1          0\noffsets-g       offsets-t       0          0', ''),
    ('--reset-offsets --group offsets-g --topic offsets-t --to-earliest --execute', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-t       1          0\noffsets-g       offsets-t       0          0', ''),
    ('--describe --group offsets-g', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-g       offsets-t       0          0             5\noffsets-g       offsets-t       1          0             3', ''),
    ('--reset-offsets --group offsets-g --topic offsets-t:1 --to-offset 2 --execute', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-t       1          2', ''),
    ('--describe --group offsets-g --offsets', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-g       offsets-t       0          0             5\noffsets-g       offsets-t       1          2             1', ''),
    ('--reset-offsets --group offsets-g --topic offsets-t --to-latest --execute', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-t       1          3\noffsets-g       offsets-t       0          5', ''),
    ('--reset-offsets --group offsets-g --topic offsets-u --to-offset 3 --execute', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-u       0          3', ''),
    ('--describe --group offsets-g', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-g       offsets-t       0          5             0\noffsets-g       offsets-t       1          3             0\noffsets-g       offsets-u       0          3             2', ''),
    ('--reset-offsets --group offsets-g --all-topics --to-earliest --dry-run', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-g       offsets-t       1          0\noffsets-g       offsets-t       0          0\noffsets-g       offsets-u       0          0', ''),
    ('--reset-offsets --group offsets-g --topic offsets-nosuch --to-earliest --execute', 0, '\nError: Executing share group command failed due to This server does not host this topic-partition.', 'org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host this topic-partition.'),
    ('--reset-offsets --group offsets-g --topic offsets-t:7 --to-offset 1 --execute', 0, '\nError: Executing share group command failed due to The partitions "offsets-t-7" do not exist', 'org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partitions "offsets-t-7" do not exist'),
    ('--delete-offsets --group offsets-g --topic offsets-u', 0, '\nTOPIC           STATUS\noffsets-u       Successful', ''),
    ('--describe --group offsets-g', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-g       offsets-t       0          5             0\noffsets-g       offsets-t       1          3             0', ''),
    ('--delete-offsets --group offsets-g --topic offsets-u', 0, '\nTOPIC           STATUS\noffsets-u       Error: There is no offset information to delete.', ''),
    ('--delete-offsets --group offsets-g --topic offsets-nosuch', 0, '\nTOPIC           STATUS\noffsets-nosuch  Error: This server does not host this topic-partition.', ''),
    ('--describe --group offsets-nobody', 0, '\nError: Executing share group command failed due to org.apache.kafka.common.errors.GroupIdNotFoundException: Group offsets-nobody not found.', 'java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.GroupIdNotFoundException: Group offsets-nobody not found.\nCaused by: org.apache.kafka.common.errors.GroupIdNotFoundException: Group offsets-nobody not found.'),
    ('--delete-offsets --group offsets-nobody --topic offsets-t', 0, '\nError: Group offsets-nobody not found.\n\nTOPIC           STATUS\noffsets-t       Error: Group offsets-nobody not found.', ''),
    ('--reset-offsets --group offsets-new --topic offsets-t --to-offset 1 --execute', 0, '\nGROUP           TOPIC           PARTITION  NEW-OFFSET\noffsets-new     offsets-t       1          1\noffsets-new     offsets-t       0          1', ''),
    ('--describe --group offsets-new', 0, '\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG\noffsets-new     offsets-t       0          1             4\noffsets-new     offsets-t       1          1             2', ''),
    ('--list', 0, 'offsets-g\noffsets-new', ''),
    ('--delete --group offsets-nobody', 0, "\nError: Deletion of some share groups failed:\n* Group 'offsets-nobody' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException: Group 'offsets-nobody' is not a share group.", ''),
    ('--delete --group offsets-new', 0, "Deletion of requested share groups ('offsets-new') was successful.", ''),
    ('--delete --group offsets-g', 0, "Deletion of requested share groups ('offsets-g') was successful.", ''),
    ('--list', 0, '', ''),
]


if __name__ == "__main__":
    from benchmarks.apache_kafka import fetch_jars

    lib = fetch_jars()
    print(json.dumps(scenario(sys.argv[1], lambda *a: kafka_tool(lib, SHARE_GROUP_COMMAND, "--bootstrap-server", sys.argv[1], *a)), indent=1))
