"""What a leader answers from its log through Partition (ListOffsets, OffsetForLeaderEpoch,
DeleteRecords, DescribeProducers), and the one leader check of ReplicaManager.leader_partition."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import MappingProxyType
from typing import cast

import pytest

from broker.metadata.metadata_image import MetadataImage, PartitionRegistration, TopicImage
from broker.partition import (
    HIGH_WATERMARK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    Partition,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from broker.replica_manager import ReplicaManager
from protocol.record_batch import TRANSACTIONAL_MASK
from storage.errors import OffsetOutOfRangeError
from storage.log_manager import LogManager
from tests.unit.batch_factory import make_batch
from tests.unit.partitions import sole_leader
from tests.unit.test_fetch_handler import open_log

LATEST, EARLIEST = -1, -2


def leader(tmp_path: Path, leader_epoch: int = 3) -> Partition:
    partition = sole_leader("t", 0, open_log(tmp_path / "t-0"), leader_epoch=leader_epoch)
    partition.append_records_to_leader(memoryview(make_batch([b"a", b"b", b"c"])))
    return partition


def test_list_offsets_latest_is_the_high_watermark_or_the_last_stable_offset(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    open_txn = make_batch([b"t"], producer_id=7, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL_MASK)
    partition.append_records_to_leader(memoryview(open_txn))  # offset 3, an open transaction
    assert partition.high_watermark == 4
    assert partition.fetch_offset_for_timestamp(LATEST, READ_UNCOMMITTED, -1) == (-1, 4, 3)
    assert partition.fetch_offset_for_timestamp(LATEST, READ_COMMITTED, 3) == (-1, 3, 3)
    assert partition.fetch_offset_for_timestamp(EARLIEST, READ_UNCOMMITTED, -1) == (-1, 0, 3)
    with pytest.raises(FencedLeaderEpochError):
        partition.fetch_offset_for_timestamp(LATEST, READ_UNCOMMITTED, 2)
    with pytest.raises(UnknownLeaderEpochError):
        partition.last_offset_for_leader_epoch(4, 3)
    assert partition.last_offset_for_leader_epoch(3, 3) == (3, 4)
    assert [entry.producer_id for entry in partition.active_producers()] == [7]


def test_delete_records_stops_at_the_high_watermark(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    partition.log.update_high_watermark(2)
    with pytest.raises(OffsetOutOfRangeError):
        partition.delete_records_on_leader(3)
    assert partition.delete_records_on_leader(1) == 1
    assert partition.delete_records_on_leader(HIGH_WATERMARK) == 2
    assert partition.log.log_start_offset == 2


def test_a_follower_answers_none_of_them(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    partition.make_follower(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2, leader_epoch=4, partition_epoch=4))
    for call in (
        lambda: partition.fetch_offset_for_timestamp(LATEST, READ_UNCOMMITTED, -1),
        lambda: partition.last_offset_for_leader_epoch(-1, 3),
        lambda: partition.delete_records_on_leader(HIGH_WATERMARK),
    ):
        with pytest.raises(NotLeaderOrFollowerError):
            call()
    assert partition.log.log_start_offset == 0
    # DescribeProducers, as in Kafka, reads any replica's producer state.
    assert partition.active_producers() == partition.log.producer_state.active_producers()


def test_leader_partition_is_the_one_leader_check(tmp_path: Path) -> None:
    rm = ReplicaManager(1, cast(LogManager, None), dict)
    partition = leader(tmp_path)
    rm.partitions[("t", 0)] = partition
    image = MetadataImage()
    assert rm.leader_partition("t", 0, image) is partition
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.leader_partition("t", 1, image)
    registration = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2, leader_epoch=4, partition_epoch=4)
    partition.make_follower(registration)
    with_topic = MetadataImage(topics=MappingProxyType({"t": TopicImage("t", uuid.uuid4(), {0: registration})}))
    with pytest.raises(NotLeaderOrFollowerError):
        rm.leader_partition("t", 0, with_topic)
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.leader_partition("t", 0, image)


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_latest_offset_not_available(tmp_path: Path) -> None:
    """Kafka's fetchOffsetForTimestamp: a follower elected with records past its high watermark
    (its old leader's high watermark had moved on) would tell a client an end below the one it
    was shown; until its followers catch up it answers OFFSET_NOT_AVAILABLE, retriable. A replica
    asking (no isolation level) gets the log end."""
    partition = sole_leader("t", 0, open_log(tmp_path / "t-0"), node_id=1, leader_epoch=3)
    partition.append_records_to_leader(memoryview(make_batch([b"a", b"b", b"c", b"d"])))
    partition.make_follower(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2, leader_epoch=4, partition_epoch=1))
    partition.log.update_high_watermark(2)  # what the follower last heard from its leader
    partition.make_leader(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=5, partition_epoch=2), 0)
    assert partition.high_watermark == 2 and partition.leader_epoch_start_offset == 4
    with pytest.raises(OffsetNotAvailableError):
        partition.fetch_offset_for_timestamp(LATEST, READ_UNCOMMITTED, -1)
    assert partition.fetch_offset_for_timestamp(LATEST, None, -1) == (-1, 4, 5)
    assert partition.fetch_offset_for_timestamp(EARLIEST, READ_UNCOMMITTED, -1) == (-1, 0, 3)
