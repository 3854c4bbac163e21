"""A replica of one partition on one broker: broker/partition.py's Partition itself, over a simulated log.

Partition runs on the simulation's virtual clock and a SimulatedPartitionLog; this module holds
only what stands between it and the simulated network, as the broker's request layer does:
the follower fetch as a message (ReplicaFetcher builds it from the log), the leader's answer
(ReplicaManager.read_for_follower: Partition's read, its errors as codes, the records the read's
region stands for), a produce (ReplicaManager.append: Partition's append, errors as codes), the
ListOffsets a follower answered OFFSET_OUT_OF_RANGE asks its leader, and DeleteRecords.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from broker.partition import ACKS_ALL, HIGH_WATERMARK, Partition
from replication.follower_fetch_state import EpochEndOffset
from replication.partition_state import AlterPartitionIntent
from storage.errors import StorageError
from storage.unified_log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tests.simulation.simulated_disk import ReplicatedRecord

TopicPartition = tuple[str, int]
SimPartition = Partition[Sequence[Any], Sequence[ReplicatedRecord]]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    tp: TopicPartition
    replica_id: int
    broker_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    records: tuple[ReplicatedRecord, ...] = ()
    # -1 with an error, as the broker's FetchPartitionResult answers one.
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging: EpochEndOffset | None = None
    # The digest of the leader's records in [digest_from, fetch offset), from the later of the two
    # log starts (below them records are deleted): the follower's must match it before it appends.
    digest_from: int = 0
    digest: int = 0


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    """The leader's log start and end (ListOffsets EARLIEST and LATEST) as a follower asks them."""

    error_code: int
    log_start_offset: int = -1
    end_offset: int = -1


def fetch_request(partition: SimPartition, node_id: int, broker_epoch: int) -> FetchRequest:
    """ReplicaFetcher's request for one partition: from the log end, with the latest epoch it knows (KIP-320)."""
    plog = partition.log
    return FetchRequest(partition.key, node_id, broker_epoch, plog.log_end_offset, plog.leader_epoch_cache.latest_epoch, plog.log_start_offset, partition.leader_epoch)


def read_for_follower(partition: SimPartition, request: FetchRequest, max_records: int, now_ms: int) -> tuple[FetchResponse, AlterPartitionIntent | None]:
    try:
        read, outcome = partition.read_for_follower(
            request.replica_id,
            request.broker_epoch,
            request.fetch_offset,
            request.last_fetched_epoch,
            request.log_start_offset,
            request.current_leader_epoch,
            max_records,
            now_ms,
        )
    except StorageError as e:
        return FetchResponse(e.error_code), None
    if read.diverging_epoch is not None:
        return FetchResponse(0, (), read.high_watermark, read.log_start_offset, EpochEndOffset(*read.diverging_epoch)), None
    plog = partition.log
    records = tuple(r for region in read.info.regions for r in plog.records_in(region))
    digest_from = max(plog.log_start_offset, request.log_start_offset)
    return FetchResponse(0, records, read.high_watermark, read.log_start_offset, None, digest_from, plog.digest(digest_from, request.fetch_offset)), outcome.alter_isr


def list_offsets_for_follower(partition: SimPartition, current_leader_epoch: int) -> ListOffsetsResponse:
    try:
        [(_, start, _), (_, end, _)] = [
            partition.fetch_offset_for_timestamp(timestamp, None, current_leader_epoch)  # type: ignore[misc]
            for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)
        ]
    except StorageError as e:
        return ListOffsetsResponse(e.error_code)
    return ListOffsetsResponse(0, start, end)


def delete_records(partition: SimPartition) -> tuple[int, int]:
    """(error, the new low watermark) of DeleteRecords up to the high watermark."""
    try:
        return 0, partition.delete_records_on_leader(HIGH_WATERMARK)
    except StorageError as e:
        return e.error_code, -1


def append_to_leader(partition: SimPartition, values: Sequence[Any], acks_all: bool) -> tuple[int, int, int]:
    """(error, base offset, last offset) of a produce."""
    try:
        info = partition.append_records_to_leader(values, required_acks=ACKS_ALL if acks_all else 1)
    except StorageError as e:
        return e.error_code, -1, -1
    return 0, info.first_offset, info.last_offset
