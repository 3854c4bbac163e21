"""The share coordinator on the wire, one node with its defaults: FindCoordinator(SHARE)
creates ``__share_group_state`` with Kafka 4.4's configs and names its leader; the five share-group
state APIs round-trip (initialize, write, read back, summary, delete) with Kafka's fencing errors;
and a share group's members get their partitions once the group coordinator has had them
initialized through the persister."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kio.schema.delete_share_group_state.v0 import request as delete_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6 import request as find_v6
from kio.schema.initialize_share_group_state.v0 import request as initialize_v0
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.read_share_group_state.v0 import request as read_v0
from kio.schema.read_share_group_state_summary.v1 import request as summary_v1
from kio.schema.write_share_group_state.v1 import request as write_v1
from kio.static.primitive import i8, i16, i32, i64

from broker.share_coordinator.share_partition_key import SharePartitionKey
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.test_share_groups_wire import heartbeat, join, share_node  # noqa: F401 - the fixture
from tests.integration.wire import request
from tests.kafka_tools import kafka_tool

GROUP = "state-g"
WAIT_S = 30.0
ACKNOWLEDGED = 2


def topic_id(bs: str, name: str) -> uuid.UUID:
    [topic] = request(bs, metadata_v12.MetadataRequest(topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=name),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics
    return topic.topic_id


def until_coordinator(bs: str, key: SharePartitionKey) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        [c] = request(bs, find_v6.FindCoordinatorRequest(key_type=i8(2), coordinator_keys=(key.as_coordinator_key(),))).coordinators
        if c.error_code == ErrorCode.none:
            return c
        assert time.monotonic() < deadline, c
        time.sleep(0.2)


def partition_of(response: Any) -> Any:
    [topic] = response.results
    [partition] = topic.partitions
    return partition


def initialize(bs: str, tid: uuid.UUID, state_epoch: int, start_offset: int) -> Any:
    data = initialize_v0.InitializeStateData(topic_id=tid, partitions=(initialize_v0.PartitionData(partition=i32(0), state_epoch=i32(state_epoch), start_offset=i64(start_offset)),))
    return partition_of(request(bs, initialize_v0.InitializeShareGroupStateRequest(group_id=GROUP, topics=(data,))))


def write(bs: str, tid: uuid.UUID, state_epoch: int, leader_epoch: int, start_offset: int, batches: tuple[tuple[int, int, int, int], ...] = ()) -> Any:
    partition = write_v1.PartitionData(
        partition=i32(0),
        state_epoch=i32(state_epoch),
        leader_epoch=i32(leader_epoch),
        start_offset=i64(start_offset),
        delivery_complete_count=i32(5),
        state_batches=tuple(write_v1.StateBatch(first_offset=i64(f), last_offset=i64(last), delivery_state=i8(s), delivery_count=i16(c)) for f, last, s, c in batches),
    )
    return partition_of(request(bs, write_v1.WriteShareGroupStateRequest(group_id=GROUP, topics=(write_v1.WriteStateData(topic_id=tid, partitions=(partition,)),))))


def read(bs: str, tid: uuid.UUID, leader_epoch: int, group: str = GROUP) -> Any:
    data = read_v0.ReadStateData(topic_id=tid, partitions=(read_v0.PartitionData(partition=i32(0), leader_epoch=i32(leader_epoch)),))
    return partition_of(request(bs, read_v0.ReadShareGroupStateRequest(group_id=group, topics=(data,))))


def test_the_share_group_state_apis_round_trip(share_node: BrokerProcess) -> None:  # noqa: F811
    bs = share_node.bootstrap
    create_topic(bs, "state-t", partitions=1)
    tid = topic_id(bs, "state-t")
    key = SharePartitionKey(GROUP, tid, 0)
    assert until_coordinator(bs, key).node_id == 1
    [state_topic] = request(bs, metadata_v12.MetadataRequest(topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name="__share_group_state"),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics
    assert (state_topic.error_code, state_topic.is_internal, len(state_topic.partitions)) == (ErrorCode.none, True, 50)

    # Nothing to read before InitializeShareGroupState.
    assert (read(bs, tid, 1).error_code, read(bs, tid, 1).error_message) == (ErrorCode.invalid_request, "Read operation on uninitialized share partition not allowed.")
    assert initialize(bs, tid, 0, 10).error_code == ErrorCode.none
    assert write(bs, tid, 0, 1, 10, ((10, 14, ACKNOWLEDGED, 1),)).error_code == ErrorCode.none
    state = read(bs, tid, 1)
    assert (state.error_code, state.state_epoch, state.start_offset) == (ErrorCode.none, 0, 10)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in state.state_batches] == [(10, 14, ACKNOWLEDGED, 1)]

    # A newer leader reads: the older one is fenced.
    assert read(bs, tid, 2).error_code == ErrorCode.none
    fenced = write(bs, tid, 0, 1, 10)
    assert (fenced.error_code, fenced.error_message) == (ErrorCode.fenced_leader_epoch, "The leader epoch in the request is older than the epoch on the broker.")
    assert read(bs, tid, 1).error_code == ErrorCode.fenced_leader_epoch

    # A new state epoch (the group's partitions reset): the old one is fenced.
    assert initialize(bs, tid, 3, 20).error_code == ErrorCode.none
    assert initialize(bs, tid, 2, 20).error_code == ErrorCode.fenced_state_epoch
    assert write(bs, tid, 2, 2, 20).error_code == ErrorCode.fenced_state_epoch

    summary_data = summary_v1.ReadStateSummaryData(topic_id=tid, partitions=(summary_v1.PartitionData(partition=i32(0), leader_epoch=i32(0)),))
    summary = partition_of(request(bs, summary_v1.ReadShareGroupStateSummaryRequest(group_id=GROUP, topics=(summary_data,))))
    assert (summary.error_code, summary.state_epoch, summary.start_offset) == (ErrorCode.none, 3, 20)

    # An unknown topic id is no share partition of this coordinator's cluster.
    unknown = SharePartitionKey(GROUP, uuid.uuid4(), 0)
    until_coordinator(bs, unknown)
    assert read(bs, unknown.topic_id, 0).error_code == ErrorCode.invalid_request  # uninitialized comes first, as in Kafka
    assert initialize(bs, unknown.topic_id, 0, 0).error_code == ErrorCode.unknown_topic_or_partition

    deleted = request(bs, delete_v0.DeleteShareGroupStateRequest(group_id=GROUP, topics=(delete_v0.DeleteStateData(topic_id=tid, partitions=(delete_v0.PartitionData(partition=i32(0)),)),)))
    assert partition_of(deleted).error_code == ErrorCode.none
    assert read(bs, tid, 5).error_code == ErrorCode.invalid_request

    # Every answer above was written to __share_group_state and survives a restart.
    assert initialize(bs, tid, 4, 30).error_code == ErrorCode.none
    share_node.stop()
    share_node.start()
    until_coordinator(bs, key)
    deadline = time.monotonic() + WAIT_S
    while (again := read(bs, tid, 6)).error_code in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
        assert time.monotonic() < deadline, again
        time.sleep(0.2)
    assert (again.error_code, again.state_epoch, again.start_offset) == (ErrorCode.none, 4, 30)


def test_two_share_group_members_are_assigned_every_partition(share_node: BrokerProcess) -> None:  # noqa: F811
    """The group coordinator has the subscribed partitions initialized (InitializeShareGroupState
    through the persister), then the simple assignor hands them out."""
    bs = share_node.bootstrap
    create_topic(bs, "share-t", partitions=4)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    epochs = {first: join(bs, first).member_epoch, second: heartbeat(bs, second, 0).member_epoch}
    assigned: dict[str, set[int]] = {first: set(), second: set()}
    deadline = time.monotonic() + WAIT_S
    while True:
        for member in (first, second):
            answer = heartbeat(bs, member, epochs[member], None)
            assert answer.error_code == ErrorCode.none, answer
            epochs[member] = answer.member_epoch
            if answer.assignment is not None:
                assigned[member] = {p for t in answer.assignment.topic_partitions for p in t.partitions}
        if assigned[first] | assigned[second] == {0, 1, 2, 3} and not assigned[first] & assigned[second] and all(assigned.values()):
            break
        assert time.monotonic() < deadline, assigned
        time.sleep(0.5)
