"""Which member may read and write a group's offsets, where Kafka 4.4 checks more than the epoch of
a commit: OffsetFetch v9+ naming a member (ConsumerGroup.validateOffsetFetch), and
TxnOffsetCommit naming none (the shortcuts of ConsumerGroup and ClassicGroup.validateOffsetCommit)."""

from __future__ import annotations

import pytest

from broker.group.classic_group import ClassicGroupState
from broker.group.consumer_group import NONE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNKNOWN_SERVER_ERROR, GroupError
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import REBALANCE_IN_PROGRESS
from broker.group.offset_metadata_manager import PartitionCommit
from tests.unit.test_assignment_epochs import NOW, commit, grown_cluster, offsets_shard
from tests.unit.test_consumer_group import GROUP, ORDERS, Cluster
from tests.unit.test_group_metadata_manager import GROUP as CLASSIC_GROUP
from tests.unit.test_group_metadata_manager import Harness, stable_group_of_two
from tests.unit.test_transaction_offsets import shard

# -- OffsetFetch ----------------------------------------------------------------------------------


def fetch_refusal(member_id: str | None, epoch: int) -> tuple[int, str] | None:
    """How the member ``a`` of ``grown_cluster`` (epoch 2) refuses this fetch; None: it is answered."""
    cluster, _ = grown_cluster()
    try:
        cluster.manager.validate_offset_fetch(GROUP, member_id, epoch)
    except GroupError as e:
        return e.error_code, e.message
    return None


@pytest.mark.parametrize("member_id, epoch", [(None, -1), (None, -7), ("a", 2)], ids=["admin", "admin-any-negative-epoch", "current-member"])
def test_a_fetch_by_an_admin_or_the_current_member_is_answered(member_id: str | None, epoch: int) -> None:
    assert fetch_refusal(member_id, epoch) is None


@pytest.mark.parametrize(
    "member_id, epoch, refusal",
    [
        ("a", 1, (STALE_MEMBER_EPOCH, "The received member epoch 1 does not match the expected member epoch 2.")),
        ("a", 3, (STALE_MEMBER_EPOCH, "The received member epoch 3 does not match the expected member epoch 2.")),
        ("a", -1, (STALE_MEMBER_EPOCH, "The received member epoch -1 does not match the expected member epoch 2.")),
        ("x", 2, (UNKNOWN_MEMBER_ID, "Member x is not a member of group g.")),
        # Only a null member id with a negative epoch is an admin's: an empty id is checked...
        ("", -1, (UNKNOWN_MEMBER_ID, "Member  is not a member of group g.")),
        # ...and a null one with an epoch fails Kafka's member lookup.
        (None, 2, (UNKNOWN_SERVER_ERROR, "A null member id with member epoch 2 names no member of group g.")),
    ],
    ids=["older-epoch", "newer-epoch", "member-with-no-epoch", "unknown-member", "empty-member-id", "null-member-id-with-epoch"],
)
def test_a_fetch_by_anyone_else_is_refused_with_kafka_s_error(member_id: str | None, epoch: int, refusal: tuple[int, str]) -> None:
    # Unlike a commit, a fetch from an older epoch is not looked at partition by partition.
    assert fetch_refusal(member_id, epoch) == refusal


def test_only_a_consumer_group_checks_the_fetching_member() -> None:
    s, _ = offsets_shard()
    assert s.offsets.validate_fetch(GROUP, "a", 1) == STALE_MEMBER_EPOCH
    assert s.offsets.validate_fetch(GROUP, "x", 2) == UNKNOWN_MEMBER_ID
    assert s.offsets.validate_fetch(GROUP, "a", 2) == NONE
    assert s.offsets.validate_fetch("nobody-s-group", "a", 1) == NONE, "no group: Kafka's GroupIdNotFoundException is not an error here"
    h = Harness()
    stable_group_of_two(h)
    assert h.shard.offsets.validate_fetch(CLASSIC_GROUP, "ghost", 99) == NONE, "ClassicGroup.validateOffsetFetch checks only that it is not dead"


# -- TxnOffsetCommit naming no member -----------------------------------------------------------------


def txn_codes(s: GroupCoordinatorShard, generation: int, member_id: str = "", instance_id: str | None = None, version: int = 6, group: str = GROUP) -> list[int]:
    answers, _ = s.offsets.txn_commit(group, generation, member_id, instance_id, [commit(ORDERS, 0)], NOW, version)
    return [code for _, code in answers]


@pytest.mark.parametrize("version", [2, 6])
def test_a_consumer_group_with_members_takes_only_kafka_s_defaults(version: int) -> None:
    s, _ = offsets_shard()
    assert txn_codes(s, -1, version=version) == [NONE]
    # Any other epoch, or an instance id, goes to the member lookup: member "" is nobody. Unlike
    # STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID is what every version hears.
    assert txn_codes(s, -2, version=version) == [UNKNOWN_MEMBER_ID]
    assert txn_codes(s, -5, version=version) == [UNKNOWN_MEMBER_ID]
    assert txn_codes(s, -1, instance_id="i", version=version) == [UNKNOWN_MEMBER_ID]


def test_a_consumer_group_with_no_member_takes_any_negative_epoch() -> None:
    cluster = Cluster()
    a = cluster.client("a")
    cluster.settle()
    a.leave()
    assert not cluster.group.members
    validator = cluster.manager.validate_offset_commit(GROUP, "", -5, transactional=True, version=6)
    assert validator is not None
    validator("orders", ORDERS, 0)  # accepts


def test_a_classic_group_takes_any_negative_generation_from_a_producer_naming_no_member() -> None:
    h = Harness()
    stable_group_of_two(h)
    assert txn_codes(h.shard, -5, group=CLASSIC_GROUP) == [NONE], "ClassicGroup.validateOffsetCommit: transactional, no member, generation < 0"
    assert txn_codes(h.shard, -1, instance_id="i", group=CLASSIC_GROUP) == [UNKNOWN_MEMBER_ID]
    answers, _ = h.shard.offsets.commit(CLASSIC_GROUP, -5, "", None, -1, [PartitionCommit("t", 0, 1, -1, "")], 9, h.now)
    assert [code for _, code in answers] == [UNKNOWN_MEMBER_ID], "an OffsetCommit naming no member is nobody's in a group with members"


def test_a_group_nobody_knows_is_made_by_any_negative_generation() -> None:
    s = shard()
    assert txn_codes(s, -7, group="new") == [NONE]
    assert s.groups.group("new") is not None


def test_a_transactional_commit_is_not_fenced_by_a_rebalance_awaiting_its_assignment() -> None:
    # Kafka's ClassicGroup.validateOffsetCommit answers REBALANCE_IN_PROGRESS to OffsetCommit only.
    h = Harness()
    a, b = stable_group_of_two(h)
    h.join(member_id=b, topics=("t", "u"))
    h.join(member_id=a)
    assert h.group.state is ClassicGroupState.COMPLETING_REBALANCE
    part = [PartitionCommit("t", 0, 14, -1, "")]
    answers, _ = h.shard.offsets.commit(CLASSIC_GROUP, 3, a, None, -1, part, 8, h.now)
    assert [code for _, code in answers] == [REBALANCE_IN_PROGRESS]
    answers, records = h.shard.offsets.txn_commit(CLASSIC_GROUP, 3, a, None, part, h.now, 6)
    assert [code for _, code in answers] == [NONE] and len(records) == 1
