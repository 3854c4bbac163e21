"""Offset commits from an older member epoch (Kafka 4.4, KIP-1251), over the wire against a real
broker: a KIP-848 member is given topic one at epoch 1 and topic two at epoch 2; a commit still
carrying epoch 1 is accepted for topic one and refused with STALE_MEMBER_EPOCH for topic two, by
OffsetCommit v10 (topic IDs) and v9 (names) alike, and again after the broker restarts and its
coordinator replays the assignment epochs from ``__consumer_offsets``."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.consumer_group_heartbeat.v1 import request as heartbeat_v1
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.offset_commit.v9 import request as offset_commit_v9
from kio.schema.offset_commit.v10 import request as offset_commit_v10
from kio.schema.offset_fetch.v10 import request as offset_fetch_v10
from kio.static.primitive import i8, i32, i64

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.test_kafka44_versions import COORDINATOR_ERRORS, commit_topic, errors_by_topic, topic_id
from tests.integration.wire import request

NONE, STALE_MEMBER_EPOCH = 0, 113
SECOND = datetime.timedelta(seconds=1)


def heartbeat(bootstrap: str, group: str, member_id: str, epoch: int, topics: list[str], owned: dict[uuid.UUID, list[int]]) -> heartbeat_v1.ConsumerGroupHeartbeatResponse:
    body = heartbeat_v1.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=i32(epoch),
        rebalance_timeout=30 * SECOND,
        subscribed_topic_names=tuple(topics),
        topic_partitions=tuple(heartbeat_v1.TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in ps)) for t, ps in owned.items()),
    )
    answer = request(bootstrap, body)
    assert answer.error_code == NONE, answer
    return answer


def commit_v10(bootstrap: str, group: str, member_id: str, epoch: int, *topics: offset_commit_v10.OffsetCommitRequestTopic) -> dict[uuid.UUID | None, dict[int, int]]:
    body = offset_commit_v10.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=i32(epoch), member_id=member_id, group_instance_id=None, topics=topics)
    return errors_by_topic(request(bootstrap, body).topics)


def commit_v9(bootstrap: str, group: str, member_id: str, epoch: int, name: str, *partitions: int) -> dict[int, int]:
    parts = tuple(offset_commit_v9.OffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(9), committed_leader_epoch=i32(-1), committed_metadata="") for p in partitions)
    body = offset_commit_v9.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=i32(epoch), member_id=member_id, group_instance_id=None, topics=(offset_commit_v9.OffsetCommitRequestTopic(name=name, partitions=parts),)
    )
    [answer] = request(bootstrap, body).topics
    return {p.partition_index: p.error_code for p in answer.partitions}


def committed(bootstrap: str, group: str, tid: uuid.UUID) -> dict[int, int]:
    asked = offset_fetch_v10.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=(i32(0), i32(1)))
    group_request = offset_fetch_v10.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=i32(-1), topics=(asked,))
    [answer] = request(bootstrap, offset_fetch_v10.OffsetFetchRequest(groups=(group_request,), require_stable=False)).groups
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def test_an_older_epoch_commits_the_partitions_it_held_then(broker_factory: StartBroker) -> None:
    broker: BrokerProcess = broker_factory()
    bs, group, member = broker.bootstrap, unique_topic("epochs-group"), str(uuid.uuid4())
    one, two = unique_topic("epochs-one"), unique_topic("epochs-two")
    for name in (one, two):
        create_topic(bs, name, partitions=2)
    one_id, two_id = topic_id(bs, one), topic_id(bs, two)
    assert wait_for(lambda: request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))).coordinators[0].error_code == NONE)

    joined = heartbeat(bs, group, member, 0, [one], {})
    assert joined.member_epoch == 1 and joined.assignment is not None
    assert {a.topic_id: sorted(a.partitions) for a in joined.assignment.topic_partitions} == {one_id: [0, 1]}
    grown = heartbeat(bs, group, member, 1, [one, two], {one_id: [0, 1]})
    assert grown.member_epoch == 2 and grown.assignment is not None
    assert {a.topic_id: sorted(a.partitions) for a in grown.assignment.topic_partitions} == {one_id: [0, 1], two_id: [0, 1]}

    def answers_at_epoch_1() -> None:
        # Topic one was assigned at epoch 1: an epoch-1 commit in flight when the epoch moved on is kept.
        assert commit_v10(bs, group, member, 1, commit_topic(one_id, (0, 5), (1, 6))) == {one_id: {0: NONE, 1: NONE}}
        # Topic two came at epoch 2: refused, and one refused partition refuses the whole request.
        assert commit_v10(bs, group, member, 1, commit_topic(two_id, (0, 7))) == {two_id: {0: STALE_MEMBER_EPOCH}}
        assert commit_v10(bs, group, member, 1, commit_topic(one_id, (0, 8)), commit_topic(two_id, (1, 8))) == {
            one_id: {0: STALE_MEMBER_EPOCH},
            two_id: {1: STALE_MEMBER_EPOCH},
        }
        # v9 names the topics; the coordinator resolves their IDs as Kafka's KafkaApis does.
        assert commit_v9(bs, group, member, 1, one, 0, 1) == {0: NONE, 1: NONE}
        assert commit_v9(bs, group, member, 1, two, 0) == {0: STALE_MEMBER_EPOCH}

    answers_at_epoch_1()
    assert commit_v10(bs, group, member, 2, commit_topic(two_id, (0, 3), (1, 4))) == {two_id: {0: NONE, 1: NONE}}
    assert commit_v10(bs, group, member, 3, commit_topic(one_id, (0, 1))) == {one_id: {0: STALE_MEMBER_EPOCH}}, "newer than the member's epoch"
    assert committed(bs, group, one_id) == {0: 9, 1: 9} and committed(bs, group, two_id) == {0: 3, 1: 4}

    # A new coordinator rebuilds the epochs from the ConsumerGroupCurrentMemberAssignment records.
    broker.restart()

    def loaded() -> bool:
        body = offset_commit_v10.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=i32(2), member_id=member, group_instance_id=None, topics=(commit_topic(one_id, (0, 9)),))
        return all(p.error_code not in COORDINATOR_ERRORS for t in request(bs, body).topics for p in t.partitions)

    assert wait_for(loaded, timeout_s=30)
    answers_at_epoch_1()
