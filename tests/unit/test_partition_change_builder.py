"""PartitionChangeBuilder: Kafka's election rules and the minimal PartitionChangeRecord."""

from __future__ import annotations

import uuid
from typing import Collection

from broker.controller.partition_change_builder import RECOVERING, Election, PartitionChangeBuilder, directory_is_online
from broker.metadata.metadata_image import MIGRATING_DIR, NO_LEADER, NO_LEADER_CHANGE, UNASSIGNED_DIR, PartitionRegistration
from broker.metadata.metadata_records import PartitionChangeRecord

TOPIC = uuid.UUID(int=0x70)
DIR = uuid.UUID(int=0xD1)


def partition(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, **kw: object) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas, isr=isr, leader=leader, leader_epoch=5, partition_epoch=9, directories=(MIGRATING_DIR,) * len(replicas), **kw  # type: ignore[arg-type]
    )


def builder(p: PartitionRegistration, alive: Collection[int]) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(p, TOPIC, 0, lambda b: b in alive, lambda b: UNASSIGNED_DIR)


def change(**kw: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=TOPIC, **kw)  # type: ignore[arg-type]


def test_nothing_to_change_is_no_record() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 1)
    assert builder(p, {1, 2, 3}).build() is None
    assert builder(p, {1, 2, 3}).set_target_isr([1, 2, 3]).build() is None


def test_isr_shrink_keeps_a_valid_leader_without_an_epoch_bump() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 1)
    assert builder(p, {1, 3}).set_target_isr([1, 3]).build() == change(isr=(1, 3))


def test_a_lost_leader_is_replaced_by_the_first_live_isr_member_in_replica_order() -> None:
    p = partition((1, 2, 3), (3, 2, 1), 1)
    assert builder(p, {2, 3}).set_target_isr([3, 2]).build() == change(isr=(3, 2), leader=2)
    # Replicas outside the ISR, and acceptable-but-not-in-ISR ones, never win a clean election.
    p = partition((1, 2, 3), (1, 3), 1)
    assert builder(p, {2, 3}).set_target_isr([3]).build() == change(isr=(3,), leader=3)


def test_the_last_isr_member_stays_and_the_partition_goes_offline() -> None:
    p = partition((1,), (1,), 1)
    assert builder(p, set()).set_target_isr([]).build() == change(leader=NO_LEADER)
    p = partition((1, 2), (1,), 1)
    assert builder(p, {2}).set_target_isr([]).build() == change(leader=NO_LEADER)


def test_unclean_election_takes_any_live_replica_and_marks_it_recovering() -> None:
    p = partition((1, 2, 3), (1,), 1)
    record = builder(p, {3, 2}).set_target_isr([]).set_election(Election.UNCLEAN).build()
    assert record == change(leader=2, isr=(2,), leader_recovery_state=RECOVERING)
    # A clean candidate always wins over an unclean one.
    p = partition((1, 2, 3), (1, 3), 1)
    assert builder(p, {2, 3}).set_target_isr([3]).set_election(Election.UNCLEAN).build() == change(isr=(3,), leader=3)
    # Nobody alive: offline even with unclean election.
    assert builder(partition((1, 2), (1,), 1), set()).set_target_isr([]).set_election(Election.UNCLEAN).build() == change(leader=NO_LEADER)


def test_an_offline_partition_gets_its_isr_member_back_as_leader() -> None:
    p = partition((1, 2), (1,), NO_LEADER)
    assert builder(p, {2}).build() is None  # 2 is not in the ISR
    assert builder(p, {1, 2}).build() == change(leader=1)


def test_preferred_election() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 2)
    assert builder(p, {1, 2, 3}).set_election(Election.PREFERRED).build() == change(leader=1)
    assert builder(p, {2, 3}).set_election(Election.PREFERRED).build() is None  # keeps the valid current leader
    assert builder(p, {3}).set_election(Election.PREFERRED).build() == change(leader=3)
    assert builder(p, set()).set_election(Election.PREFERRED).build() == change(leader=NO_LEADER)


def test_replica_changes_bump_the_leader_epoch_and_set_directories() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 1)
    record = builder(p, {1, 2, 3, 4}).set_target_replicas([1, 2, 4]).set_target_isr([1, 2]).build()
    assert record == change(
        leader=1, isr=(1, 2), replicas=(1, 2, 4), directories=(MIGRATING_DIR, MIGRATING_DIR, UNASSIGNED_DIR)
    )
    grown = builder(p, {1, 2, 3, 4}).set_target_replicas([1, 2, 3, 4]).build()
    assert grown is not None and grown.leader == NO_LEADER_CHANGE and grown.replicas == (1, 2, 3, 4)
    moved = builder(p, {1, 2, 3}).set_directory(2, DIR).build()
    assert moved == change(directories=(MIGRATING_DIR, DIR, MIGRATING_DIR))


def test_stale_eligible_leader_replicas_are_cleared() -> None:
    p = partition((1, 2), (1, 2), 1, elr=(3,))
    assert builder(p, {1, 2}).build() == change(eligible_leader_replicas=())


def test_directory_liveness() -> None:
    assert directory_is_online(DIR, ())
    assert directory_is_online(MIGRATING_DIR, (DIR,)) and directory_is_online(UNASSIGNED_DIR, (DIR,))
    assert directory_is_online(DIR, (DIR,)) and not directory_is_online(uuid.UUID(int=0xD2), (DIR,))
    assert not directory_is_online(uuid.UUID(int=2), (DIR,))


def test_records_apply_to_the_registration_as_kafka_merges_them() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 1)
    record = builder(p, {2, 3}).set_target_isr([2, 3]).build()
    assert record is not None
    after = p.merge(record)
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == (2, (2, 3), 6, 10)
    shrink = builder(after, {2}).set_target_isr([2]).build()
    assert shrink is not None
    again = after.merge(shrink)
    assert (again.leader, again.isr, again.leader_epoch, again.partition_epoch) == (2, (2,), 6, 11)
