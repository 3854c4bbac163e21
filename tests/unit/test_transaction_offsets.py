"""TxnOffsetCommit in the group coordinator, sans-IO: who may commit in a transaction, and
pending offsets settled per producer by COMMIT and ABORT markers."""

from __future__ import annotations

from broker.group.coordinator_records import OffsetCommitKey, OffsetCommitValue
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import ILLEGAL_GENERATION, NONE, GroupConfig
from broker.group.offset_metadata_manager import OFFSET_METADATA_TOO_LARGE, PartitionCommit

NOW = 1_000_000


def shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=10, offsets_retention_ms=60_000)


def pending(s: GroupCoordinatorShard, producer_id: int, group: str, topic: str, partition: int, offset: int, at: int = 0) -> None:
    """A TxnOffsetCommit record of ``producer_id`` at log offset ``at``."""
    s.offsets.replay_transactional(producer_id, OffsetCommitKey(group=group, topic=topic, partition=partition), OffsetCommitValue(offset=offset, metadata="", commit_timestamp=NOW), at)


def regular(s: GroupCoordinatorShard, group: str, topic: str, partition: int, offset: int | None, at: int) -> None:
    """An OffsetCommit record (None: its tombstone) at log offset ``at``."""
    value = None if offset is None else OffsetCommitValue(offset=offset, metadata="", commit_timestamp=NOW)
    s.replay(OffsetCommitKey(group=group, topic=topic, partition=partition), value, at)


def committed(s: GroupCoordinatorShard, group: str, topic: str, partition: int) -> int | None:
    [(_, _, o)] = s.offsets.fetch(group, [(topic, partition)])
    return None if o is None else o.offset


def test_a_client_with_no_member_commits_into_any_group() -> None:
    s = shard()
    answers, records = s.offsets.txn_commit("g", -1, "", None, [PartitionCommit("t", 0, 5, -1, "m"), PartitionCommit("t", 1, 6, -1, "x" * 11)], NOW)
    assert [code for _, code in answers] == [NONE, OFFSET_METADATA_TOO_LARGE]
    assert [(k.topic, k.partition, v.offset) for k, v in records] == [("t", 0, 5)]
    assert s.groups.group("g") is not None  # a simple group, as Kafka creates


def test_a_member_of_an_unknown_group_is_an_illegal_generation() -> None:
    answers, records = shard().offsets.txn_commit("g", 3, "member-1", None, [PartitionCommit("t", 0, 5, -1, None)], NOW)
    assert [code for _, code in answers] == [ILLEGAL_GENERATION] and records == []


def test_commit_marker_materialises_and_abort_marker_drops_per_producer() -> None:
    s = shard()
    regular(s, "g", "t", 0, 1, at=0)
    pending(s, 7, "g", "t", 0, 10, at=1)
    pending(s, 8, "g", "t", 1, 20, at=2)
    pending(s, 8, "h", "t", 0, 30, at=3)
    assert committed(s, "g", "t", 0) == 1 and s.offsets.has_pending_offset("g", "t", 0)
    assert s.offsets.complete_transaction(8, commit=True) == 2
    assert (committed(s, "g", "t", 1), committed(s, "h", "t", 0)) == (20, 30)
    assert s.offsets.complete_transaction(7, commit=False) == 1
    assert committed(s, "g", "t", 0) == 1 and not s.offsets.has_pending_offset("g", "t", 0)
    assert s.offsets.complete_transaction(9, commit=True) == 0  # a marker for a producer with nothing pending


def test_a_later_pending_offset_of_the_same_partition_wins() -> None:
    s = shard()
    pending(s, 7, "g", "t", 0, 10, at=0)
    pending(s, 7, "g", "t", 0, 11, at=1)
    s.offsets.complete_transaction(7, commit=True)
    assert committed(s, "g", "t", 0) == 11


def test_a_regular_commit_written_during_the_transaction_outlives_its_commit_marker() -> None:
    # Kafka keeps the later record, as compaction of __consumer_offsets would: a reload of the
    # compacted log must find what memory holds.
    s = shard()
    pending(s, 7, "g", "t", 0, 10, at=5)
    regular(s, "g", "t", 0, 3, at=6)
    pending(s, 7, "g", "t", 1, 20, at=7)
    assert s.offsets.complete_transaction(7, commit=True) == 2
    assert (committed(s, "g", "t", 0), committed(s, "g", "t", 1)) == (3, 20)


def test_a_transactional_offset_written_after_a_regular_commit_wins_at_the_marker() -> None:
    s = shard()
    regular(s, "g", "t", 0, 3, at=5)
    pending(s, 7, "g", "t", 0, 10, at=6)
    s.offsets.complete_transaction(7, commit=True)
    assert committed(s, "g", "t", 0) == 10


def test_a_tombstone_deletes_the_offsets_pending_in_open_transactions() -> None:
    s = shard()
    pending(s, 7, "g", "t", 0, 10, at=1)
    pending(s, 7, "g", "t", 1, 11, at=2)
    pending(s, 8, "h", "t", 0, 12, at=3)
    regular(s, "g", "t", 0, None, at=4)
    assert not s.offsets.has_pending_offset("g", "t", 0) and s.offsets.has_pending_offset("g", "t", 1)
    s.offsets.complete_transaction(7, commit=True)
    s.offsets.complete_transaction(8, commit=True)
    assert (committed(s, "g", "t", 0), committed(s, "g", "t", 1), committed(s, "h", "t", 0)) == (None, 11, 12)
