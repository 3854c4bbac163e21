"""Who may read and write a KIP-848 group's offsets, over the wire against a real broker, as Kafka
4.4 answers: OffsetFetch v9+ naming a member is answered only for the member at its current epoch
(else the group's error, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH, with no topics), while an
admin's fetch (null member id, epoch -1) and v8 (no member) are answered; a TxnOffsetCommit
naming no member goes into the group with members only with generation -1."""

from __future__ import annotations

import uuid

from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.offset_fetch.v9 import request as offset_fetch_v9
from kio.schema.offset_fetch.v10 import request as offset_fetch_v10
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3
from kio.static.primitive import i8, i32, i64

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.test_assignment_epochs_wire import commit_v10, heartbeat
from tests.integration.test_kafka44_versions import commit_topic, topic_id
from tests.integration.test_transactions_wire import init
from tests.integration.wire import request

# What a group refused for its member answers: its error, no offsets.
Refused = tuple[int, dict[int, int]]


def fetch_v10(bootstrap: str, group: str, tid: uuid.UUID, member_id: str | None, epoch: int, require_stable: bool = False) -> Refused:
    asked = offset_fetch_v10.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=(i32(0), i32(1)))
    body = offset_fetch_v10.OffsetFetchRequest(
        groups=(offset_fetch_v10.OffsetFetchRequestGroup(group_id=group, member_id=member_id, member_epoch=i32(epoch), topics=(asked,)),), require_stable=require_stable
    )
    [answer] = request(bootstrap, body).groups
    return answer.error_code, {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def fetch_v9_all(bootstrap: str, groups: dict[str, tuple[str | None, int]]) -> dict[str, Refused]:
    """Every offset of each group (topics null), each group with its member."""
    body = offset_fetch_v9.OffsetFetchRequest(
        groups=tuple(offset_fetch_v9.OffsetFetchRequestGroup(group_id=g, member_id=m, member_epoch=i32(e), topics=None) for g, (m, e) in groups.items()),
        require_stable=False,
    )
    return {a.group_id: (a.error_code, {p.partition_index: p.committed_offset for t in a.topics for p in t.partitions}) for a in request(bootstrap, body).groups}


def fetch_v8(bootstrap: str, group: str, topic: str) -> Refused:
    asked = offset_fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(i32(0), i32(1)))
    body = offset_fetch_v8.OffsetFetchRequest(groups=(offset_fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(asked,)),), require_stable=False)
    [answer] = request(bootstrap, body).groups
    return answer.error_code, {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def txn_commit(bootstrap: str, transactional_id: str, pid: int, epoch: int, group: str, topic: str, generation: int) -> list[int]:
    part = txn_commit_v3.TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(11), committed_leader_epoch=i32(-1), committed_metadata="")
    body = txn_commit_v3.TxnOffsetCommitRequest(
        transactional_id=transactional_id,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=i32(generation),
        member_id="",
        group_instance_id=None,
        topics=(txn_commit_v3.TxnOffsetCommitRequestTopic(name=topic, partitions=(part,)),),
    )
    return [p.error_code for t in request(bootstrap, body).topics for p in t.partitions]


def test_offsets_are_read_by_the_current_member_or_an_admin_and_written_with_no_member_only_at_generation_minus_1(module_broker: BrokerProcess) -> None:
    bs, group, other_group, member = module_broker.bootstrap, unique_topic("fetch-group"), unique_topic("fetch-other"), str(uuid.uuid4())
    topic = unique_topic("fetch-topic")
    create_topic(bs, topic, partitions=2)
    tid = topic_id(bs, topic)
    assert wait_for(lambda: request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group, other_group))).coordinators[0].error_code == 0)
    epoch = heartbeat(bs, group, member, 0, [topic], {}).member_epoch
    assert epoch >= 1
    assert commit_v10(bs, group, member, epoch, commit_topic(tid, (0, 5), (1, 6))) == {tid: {0: ErrorCode.none, 1: ErrorCode.none}}
    offsets = {0: 5, 1: 6}

    # The member at its epoch, an admin (null member id, epoch -1), and v8, which names no member.
    assert fetch_v10(bs, group, tid, member, epoch) == (ErrorCode.none, offsets)
    assert fetch_v10(bs, group, tid, member, epoch, require_stable=True) == (ErrorCode.none, offsets)
    assert fetch_v10(bs, group, tid, None, -1) == (ErrorCode.none, offsets)
    assert fetch_v8(bs, group, topic) == (ErrorCode.none, offsets)
    # Any other epoch, older or newer, and any other member: the group's error, with no topics.
    assert fetch_v10(bs, group, tid, member, epoch - 1) == (ErrorCode.stale_member_epoch, {})
    assert fetch_v10(bs, group, tid, member, epoch + 1, require_stable=True) == (ErrorCode.stale_member_epoch, {})
    assert fetch_v10(bs, group, tid, str(uuid.uuid4()), epoch) == (ErrorCode.unknown_member_id, {})
    assert fetch_v10(bs, group, tid, "", -1) == (ErrorCode.unknown_member_id, {}), "only a null member id is an admin's"
    assert fetch_v10(bs, group, tid, None, epoch) == (ErrorCode.unknown_server_error, {}), "Kafka's member lookup fails on a null id"
    # Groups are checked one by one: a group nobody knows has nothing to check.
    assert fetch_v9_all(bs, {group: (member, epoch - 1), other_group: (member, 0)}) == {group: (ErrorCode.stale_member_epoch, {}), other_group: (ErrorCode.none, {})}
    assert fetch_v9_all(bs, {group: (member, epoch)}) == {group: (ErrorCode.none, offsets)}

    # A producer naming no member: Kafka's defaults only, generation -1.
    transactional_id = unique_topic("fetch-txn")
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(transactional_id,)))
    producer: list[tuple[int, int]] = []

    def initialised() -> bool:
        # The first use of the transaction coordinator may find its partition still loading.
        error, pid, producer_epoch = init(bs, transactional_id)
        producer.append((pid, producer_epoch))
        return error == ErrorCode.none

    assert wait_for(initialised)
    pid, producer_epoch = producer[-1]
    added = request(bs, add_offsets_v3.AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=producer_epoch, group_id=group))
    assert added.error_code == ErrorCode.none
    assert txn_commit(bs, transactional_id, pid, producer_epoch, group, topic, -2) == [ErrorCode.unknown_member_id]
    assert txn_commit(bs, transactional_id, pid, producer_epoch, group, topic, -1) == [ErrorCode.none]
