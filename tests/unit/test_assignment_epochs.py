"""Per-partition assignment epochs in consumer groups (Kafka 4.4, KIP-1251): how reconciliation
sets them, how they are written to and replayed from ``__consumer_offsets``, and how an offset
commit from an older member epoch is checked against them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from broker.group.consumer_group import (
    NONE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNSUPPORTED_VERSION,
    ConsumerGroupManager,
    GroupError,
)
from broker.group.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    TopicPartitions,
    decode_record,
    encode_key,
    encode_value,
)
from broker.group.current_assignment_builder import MemberState
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import ILLEGAL_GENERATION, GroupConfig
from broker.group.offset_metadata_manager import OFFSET_METADATA_TOO_LARGE, PartitionCommit
from tests.unit.test_consumer_group import GROUP, ORDERS, PAYMENTS, REBALANCE, Cluster, commit_error, replayed, request

NOW = 1_000_000


def epochs_of(manager: ConsumerGroupManager, member_id: str) -> dict[uuid.UUID, dict[int, int]]:
    return {t: dict(ps) for t, ps in manager.groups[GROUP].members[member_id].assignment.assignment_epochs.items()}


def refusal(manager: ConsumerGroupManager, member_id: str, epoch: int, topic_id: uuid.UUID | None, partition: int) -> str | None:
    """The message a commit of one partition is refused with; None when it is accepted."""
    validator = manager.validate_offset_commit(GROUP, member_id, epoch, transactional=False, version=10)
    assert validator is not None
    try:
        validator("orders" if topic_id == ORDERS else "payments", topic_id, partition)
    except GroupError as e:
        assert e.error_code == STALE_MEMBER_EPOCH
        return e.message
    return None


def grown_cluster() -> tuple[Cluster, Any]:
    """Member a got all of orders at epoch 1, then all of payments at epoch 2 when it subscribed to it."""
    cluster = Cluster()
    a = cluster.client("a")
    cluster.settle()
    assert a.epoch == 1
    a.topics = ("orders", "payments")
    a.heartbeat(subscribed_topic_names=["orders", "payments"])
    cluster.settle()
    assert a.epoch == 2
    return cluster, a


# -- reconciliation ------------------------------------------------------------------------------


def test_newly_assigned_partitions_take_the_target_epoch_and_kept_ones_keep_theirs() -> None:
    cluster, _ = grown_cluster()
    assert epochs_of(cluster.manager, "a") == {ORDERS: dict.fromkeys(range(6), 1), PAYMENTS: dict.fromkeys(range(3), 2)}


def test_partitions_being_revoked_keep_their_epoch_and_new_owners_get_the_new_epoch() -> None:
    cluster, a = grown_cluster()
    b = cluster.client("b", topics=("orders", "payments"))
    b.heartbeat()  # group epoch 3: a must give half of its partitions up
    a.heartbeat()
    member = cluster.group.members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == 2
    revoking = member.assignment.partitions_pending_revocation
    assert revoking and all(member.assignment.assignment_epoch(t, p) == {ORDERS: 1, PAYMENTS: 2}[t] for t, ps in revoking.items() for p in ps)
    # Still at epoch 2, a commits what it is revoking; from epoch 1 only what it held at epoch 1.
    assert refusal(cluster.manager, "a", 2, PAYMENTS, min(revoking[PAYMENTS])) is None
    assert refusal(cluster.manager, "a", 1, ORDERS, min(revoking[ORDERS])) is None
    assert refusal(cluster.manager, "a", 1, PAYMENTS, min(revoking[PAYMENTS])) is not None
    cluster.settle()
    assert epochs_of(cluster.manager, "a") == {t: dict.fromkeys(ps, {ORDERS: 1, PAYMENTS: 2}[t]) for t, ps in cluster.group.members["a"].assigned_partitions.items()}
    assert epochs_of(cluster.manager, "b") == {t: dict.fromkeys(ps, 3) for t, ps in cluster.group.members["b"].assigned_partitions.items()}


# -- the commit validator ----------------------------------------------------------------------------


def test_an_older_epoch_commits_only_partitions_held_since_that_epoch() -> None:
    cluster, _ = grown_cluster()
    manager = cluster.manager
    assert refusal(manager, "a", 2, PAYMENTS, 0) is None, "the current epoch: no per-partition check"
    assert refusal(manager, "a", 2, PAYMENTS, 7) is None, "not even for a partition the member does not hold"
    assert refusal(manager, "a", 1, ORDERS, 3) is None
    assert refusal(manager, "a", 1, PAYMENTS, 0) == "Received member epoch 1 is older than assignment epoch 2 for partition payments-0."
    assert refusal(manager, "a", 1, ORDERS, 9) == "Partition orders-9 is not assigned or pending revocation for member."
    assert refusal(manager, "a", 1, None, 0) == "Partition payments-0 is not assigned or pending revocation for member."
    assert refusal(manager, "a", 0, ORDERS, 0) == "Received member epoch 0 is older than assignment epoch 1 for partition orders-0."


def test_whole_request_errors() -> None:
    cluster, _ = grown_cluster()
    manager = cluster.manager
    with pytest.raises(GroupError) as newer:
        manager.validate_offset_commit(GROUP, "a", 3, transactional=False, version=10)
    assert (newer.value.error_code, newer.value.message) == (STALE_MEMBER_EPOCH, "Received member epoch 3 is newer than current member epoch 2.")
    with pytest.raises(GroupError) as unknown:
        manager.validate_offset_commit(GROUP, "x", 2, transactional=False, version=10)
    assert (unknown.value.error_code, unknown.value.message) == (UNKNOWN_MEMBER_ID, "Member x is not a member of group g.")
    assert commit_error(manager, "a", 2, version=8) == UNSUPPORTED_VERSION, "consumer-protocol members commit with v9+"
    assert manager.validate_offset_commit(GROUP, "a", 2, transactional=True, version=3) is not None, "TxnOffsetCommit has no such rule"


def offsets_shard() -> tuple[GroupCoordinatorShard, Cluster]:
    """A shard whose consumer group went through ``grown_cluster``'s records."""
    cluster, _ = grown_cluster()
    s = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=10, offsets_retention_ms=60_000)
    for key, value in cluster.records:
        s.replay(key, value, 0)
    return s, cluster


def commit(topic_id: uuid.UUID, partition: int, metadata: str = "") -> PartitionCommit:
    return PartitionCommit("orders" if topic_id == ORDERS else "payments", partition, 42, -1, metadata, topic_id)


def test_one_refused_partition_refuses_the_whole_commit() -> None:
    # Kafka's validator throws out of OffsetMetadataManager.commitOffset: the service answers every
    # partition of the request with that error and writes nothing.
    s, _ = offsets_shard()
    answers, records = s.offsets.commit(GROUP, 1, "a", None, -1, [commit(ORDERS, 0)], 10, NOW)
    assert [code for _, code in answers] == [NONE] and len(records) == 1
    answers, records = s.offsets.commit(GROUP, 1, "a", None, -1, [commit(ORDERS, 0), commit(PAYMENTS, 0)], 10, NOW)
    assert [code for _, code in answers] == [STALE_MEMBER_EPOCH, STALE_MEMBER_EPOCH] and records == []


def test_a_partition_with_too_much_metadata_is_answered_before_any_check() -> None:
    s, _ = offsets_shard()
    answers, records = s.offsets.commit(GROUP, 1, "a", None, -1, [commit(ORDERS, 0), commit(PAYMENTS, 0, "x" * 11)], 10, NOW)
    assert [code for _, code in answers] == [NONE, OFFSET_METADATA_TOO_LARGE] and len(records) == 1


def test_txn_offset_commit_takes_the_same_path_with_its_version_s_error() -> None:
    s, _ = offsets_shard()
    answers, records = s.offsets.txn_commit(GROUP, 1, "a", None, [commit(ORDERS, 1)], NOW, 6)
    assert [code for _, code in answers] == [NONE] and len(records) == 1
    answers, _ = s.offsets.txn_commit(GROUP, 1, "a", None, [commit(PAYMENTS, 1)], NOW, 6)
    assert [code for _, code in answers] == [STALE_MEMBER_EPOCH]
    answers, _ = s.offsets.txn_commit(GROUP, 1, "a", None, [commit(PAYMENTS, 1)], NOW, 5)
    assert [code for _, code in answers] == [ILLEGAL_GENERATION], "before v6 (KIP-1319) a stale member is an illegal generation"


# -- records and replay -----------------------------------------------------------------------------


def test_the_current_assignment_record_carries_the_epochs_and_a_restart_replays_them() -> None:
    cluster, _ = grown_cluster()
    key, value = [(k, v) for k, v in cluster.records if isinstance(k, ConsumerGroupCurrentMemberAssignmentKey)][-1]
    assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
    assert value.assigned_partitions == (
        TopicPartitions(topic_id=ORDERS, partitions=tuple(range(6)), assignment_epochs=(1,) * 6),
        TopicPartitions(topic_id=PAYMENTS, partitions=(0, 1, 2), assignment_epochs=(2, 2, 2)),
    )
    loaded = replayed(cluster)
    assert loaded.groups[GROUP].members["a"].assignment == cluster.group.members["a"].assignment
    assert refusal(loaded, "a", 1, ORDERS, 0) is None
    assert refusal(loaded, "a", 1, PAYMENTS, 0) == "Received member epoch 1 is older than assignment epoch 2 for partition payments-0."


@pytest.mark.parametrize("epochs", [None, (1, 2)], ids=["absent", "wrong-length"])
def test_a_record_without_usable_epochs_gives_every_partition_the_member_epoch(epochs: tuple[int, ...] | None) -> None:
    manager = ConsumerGroupManager()
    key = ConsumerGroupCurrentMemberAssignmentKey(group_id=GROUP, member_id="a")
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=5,
        previous_member_epoch=4,
        state=int(MemberState.UNREVOKED_PARTITIONS),
        assigned_partitions=(TopicPartitions(topic_id=ORDERS, partitions=(0, 1, 2), assignment_epochs=epochs),),
        partitions_pending_revocation=(TopicPartitions(topic_id=PAYMENTS, partitions=(1,)),),
    )
    decoded = decode_record(encode_key(key), encode_value(value))
    manager.replay(decoded.key, decoded.value)
    assert epochs_of(manager, "a") == {ORDERS: {0: 5, 1: 5, 2: 5}, PAYMENTS: {1: 5}}
    assert refusal(manager, "a", 4, PAYMENTS, 1) == "Received member epoch 4 is older than assignment epoch 5 for partition payments-1."


def test_a_static_member_that_leaves_has_its_epochs_reset_to_zero() -> None:
    # Kafka's consumerGroupStaticMemberGroupLeave: epoch -2, nothing pending, assigned epochs 0.
    cluster = Cluster()
    s = cluster.client("s", instance_id="i-s")
    cluster.settle()
    s.leave(epoch=-2)
    assert epochs_of(cluster.manager, "s") == {ORDERS: dict.fromkeys(range(6), 0)}
    assert epochs_of(replayed(cluster), "s") == {ORDERS: dict.fromkeys(range(6), 0)}
    # The instance comes back as a new member at epoch 0 and takes the partitions with those epochs.
    back = cluster.heartbeat(request("s2", 0, instance_id="i-s", rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["orders"], owned={}))
    assert back.error_code == NONE
    assert epochs_of(cluster.manager, "s2") == {ORDERS: dict.fromkeys(range(6), 0)}
