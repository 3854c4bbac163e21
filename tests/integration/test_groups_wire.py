"""Group API forms the stock clients seldom send, spoken on the wire: FindCoordinator v0 and the
batched v4+, OffsetCommit v2 with a retention time from a simple consumer, multi-group
OffsetFetch v8, OffsetDelete, DescribeGroups and ListGroups v4's state filter."""

from __future__ import annotations

import datetime

from kio.schema.describe_groups.v0 import request as describe_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0 import request as find_v0
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.list_groups.v4 import request as list_v4
from kio.schema.offset_commit.v2 import request as commit_v2
from kio.schema.offset_delete.v0 import request as delete_v0
from kio.schema.offset_fetch.v8 import request as fetch_v8

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.wire import request


def test_find_coordinator_single_and_batched(module_broker: BrokerProcess) -> None:
    single = request(module_broker.bootstrap, find_v0.FindCoordinatorRequest(key="g-single"))
    assert (single.error_code, single.host, single.port) == (ErrorCode.none, "127.0.0.1", module_broker.port)
    batched = request(module_broker.bootstrap, find_v4.FindCoordinatorRequest(key_type=0, coordinator_keys=("g-a", "g-b")))
    assert [(c.key, c.error_code, c.port) for c in batched.coordinators] == [("g-a", ErrorCode.none, module_broker.port), ("g-b", ErrorCode.none, module_broker.port)]
    unknown_type = request(module_broker.bootstrap, find_v4.FindCoordinatorRequest(key_type=7, coordinator_keys=("x",)))
    assert unknown_type.coordinators[0].error_code == ErrorCode.invalid_request


def test_simple_consumer_offsets_commit_fetch_delete(module_broker: BrokerProcess) -> None:
    group, topic = unique_topic("simple"), unique_topic("t")
    create_topic(module_broker.bootstrap, topic, partitions=2)
    request(module_broker.bootstrap, find_v0.FindCoordinatorRequest(key=group))  # creates __consumer_offsets
    # Partitions 2 of the topic and 0 of a topic that does not exist are answered
    # UNKNOWN_TOPIC_OR_PARTITION and not stored, as Kafka 4.4 answers them.
    parts = tuple(commit_v2.OffsetCommitRequestPartition(partition_index=p, committed_offset=10 + p, committed_metadata=f"m{p}") for p in range(3))
    nowhere = commit_v2.OffsetCommitRequestTopic(name=unique_topic("nowhere"), partitions=parts[:1])
    committed = request(
        module_broker.bootstrap,
        commit_v2.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=datetime.timedelta(hours=1),
            topics=(commit_v2.OffsetCommitRequestTopic(name=topic, partitions=parts), nowhere),
        ),
    )
    assert sorted((t.name, p.partition_index, p.error_code) for t in committed.topics for p in t.partitions) == sorted(
        [(topic, 0, ErrorCode.none), (topic, 1, ErrorCode.none), (topic, 2, ErrorCode.unknown_topic_or_partition), (nowhere.name, 0, ErrorCode.unknown_topic_or_partition)]
    )

    def fetch() -> dict[str, list[tuple[int, int, str]]]:
        response = request(
            module_broker.bootstrap,
            fetch_v8.OffsetFetchRequest(
                groups=(
                    fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=None),
                    fetch_v8.OffsetFetchRequestGroup(group_id="never-committed", topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),
                ),
                require_stable=False,
            ),
        )
        return {g.group_id: [(p.partition_index, p.committed_offset, p.metadata) for t in g.topics for p in t.partitions] for g in response.groups}

    assert fetch() == {group: [(0, 10, "m0"), (1, 11, "m1")], "never-committed": [(0, -1, "")]}
    deleted = request(
        module_broker.bootstrap,
        delete_v0.OffsetDeleteRequest(group_id=group, topics=(delete_v0.OffsetDeleteRequestTopic(name=topic, partitions=(delete_v0.OffsetDeleteRequestPartition(partition_index=0),)),)),
    )
    assert deleted.error_code == ErrorCode.none and [p.error_code for t in deleted.topics for p in t.partitions] == [ErrorCode.none]
    assert fetch()[group] == [(1, 11, "m1")]
    missing = request(module_broker.bootstrap, delete_v0.OffsetDeleteRequest(group_id="no-such-group", topics=()))
    assert missing.error_code == ErrorCode.group_id_not_found


def test_describe_and_list_groups(module_broker: BrokerProcess) -> None:
    group, topic = unique_topic("listed"), unique_topic("t")
    create_topic(module_broker.bootstrap, topic)
    request(module_broker.bootstrap, find_v0.FindCoordinatorRequest(key=group))
    request(
        module_broker.bootstrap,
        commit_v2.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=datetime.timedelta(milliseconds=-1),
            topics=(commit_v2.OffsetCommitRequestTopic(name=topic, partitions=(commit_v2.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=None),)),),
        ),
    )
    [described, unknown] = request(module_broker.bootstrap, describe_v0.DescribeGroupsRequest(groups=(group, "nobody-here"))).groups
    assert (described.error_code, described.group_state, described.members) == (ErrorCode.none, "Empty", ())
    assert (unknown.error_code, unknown.group_state) == (ErrorCode.none, "Dead")
    empty = request(module_broker.bootstrap, list_v4.ListGroupsRequest(states_filter=("empty",)))
    stable = request(module_broker.bootstrap, list_v4.ListGroupsRequest(states_filter=("Stable",)))
    assert group in {g.group_id for g in empty.groups} and group not in {g.group_id for g in stable.groups}
