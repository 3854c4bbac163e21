"""Metadata log retention: Kafka's KafkaMetadataLog.maybeClean, shared by the file and memory logs.

The log before the latest snapshot is kept until ``metadata.max.retention.bytes`` or
``metadata.max.retention.ms`` lets it go (-1: no limit of that kind). Cleaning walks the
snapshots oldest first: while the oldest breaks a limit, it is deleted and the log start moves
to the next snapshot, dropping the segments wholly below it. The size limit counts the whole
log plus every snapshot; the time limit compares a snapshot's last contained log timestamp
(its SnapshotHeaderRecord) with now. The latest snapshot is never deleted, so the log start
only ever moves to a snapshot.

One bound is kbroker's: the log start never passes ``max_offset``, the Raft core's high
watermark and what it has delivered to its listener, so a listener is never left below the log
start with a snapshot it has not been handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import structlog

from protocol.record_batch import LOG_OVERHEAD
from protocol.records import iter_batches, iter_records
from raft.control_records import ControlRecordType, decode_control_record
from raft.replicated_log import OffsetAndEpoch, RawSnapshotReader

log = structlog.get_logger(__name__)

_BATCH_LENGTH = slice(8, 12)


@dataclass(frozen=True, slots=True)
class MetadataRetention:
    """``max_bytes`` is metadata.max.retention.bytes, ``max_ms`` metadata.max.retention.ms; -1 disables either."""

    max_bytes: int = 100 * 1024 * 1024
    max_ms: int = 7 * 24 * 60 * 60 * 1000

    def __post_init__(self) -> None:
        if self.max_bytes < -1 or self.max_ms < -1:
            raise ValueError(f"metadata retention limits must be -1 or more: bytes {self.max_bytes}, ms {self.max_ms}")


class CleanableLog(Protocol):
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """The frozen snapshots, oldest first."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None: ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool: ...

    def size_in_bytes(self) -> int:
        """The log's records, not counting its snapshots."""
        ...


def last_contained_log_timestamp(reader: RawSnapshotReader) -> int:
    """Kafka's Snapshots.lastContainedLogTimestamp: from the SnapshotHeaderRecord that opens every snapshot."""
    head = reader.read(0, LOG_OVERHEAD)
    first_batch = reader.read(0, LOG_OVERHEAD + int.from_bytes(head[_BATCH_LENGTH], "big", signed=True))
    for header, view in iter_batches(first_batch):
        if header.is_control:
            for record in iter_records(view, header):
                control = decode_control_record(record)
                if control.type is ControlRecordType.SNAPSHOT_HEADER:
                    return int(control.message.last_contained_log_timestamp)
    raise ValueError(f"snapshot {reader.snapshot_id} does not start with a SnapshotHeaderRecord")


def maybe_clean(metadata_log: CleanableLog, retention: MetadataRetention, now_ms: int, max_offset: int) -> bool:
    """Delete what the retention limits let go, the size limit first, then the time limit; True if anything went."""
    cleaned = False
    if retention.max_bytes >= 0:
        cleaned |= _clean_retention_size(metadata_log, retention.max_bytes, max_offset)
    if retention.max_ms >= 0:
        cleaned |= _clean_retention_ms(metadata_log, retention.max_ms, now_ms, max_offset)
    return cleaned


def _clean_retention_size(metadata_log: CleanableLog, max_bytes: int, max_offset: int) -> bool:
    sizes = {}
    for snapshot_id in metadata_log.snapshot_ids():
        reader = metadata_log.read_snapshot(snapshot_id)
        if reader is not None:
            sizes[snapshot_id] = reader.size_in_bytes()
    snapshots_size = sum(sizes.values())

    def breach(snapshot_id: OffsetAndEpoch) -> dict[str, int] | None:
        nonlocal snapshots_size
        size = sizes.get(snapshot_id)
        log_size = metadata_log.size_in_bytes()
        if size is None or log_size + snapshots_size <= max_bytes:
            return None
        reason = {"log_size": log_size, "snapshots_size": snapshots_size, "retention_bytes": max_bytes}
        snapshots_size -= size
        return reason

    return _clean_snapshots(metadata_log, breach, max_offset)


def _clean_retention_ms(metadata_log: CleanableLog, max_ms: int, now_ms: int, max_offset: int) -> bool:
    def breach(snapshot_id: OffsetAndEpoch) -> dict[str, int] | None:
        reader = metadata_log.read_snapshot(snapshot_id)
        if reader is None:
            return None
        timestamp = last_contained_log_timestamp(reader)
        if now_ms - timestamp <= max_ms:
            return None
        return {"now_ms": now_ms, "snapshot_timestamp": timestamp, "retention_ms": max_ms}

    return _clean_snapshots(metadata_log, breach, max_offset)


def _clean_snapshots(metadata_log: CleanableLog, breach: Callable[[OffsetAndEpoch], dict[str, int] | None], max_offset: int) -> bool:
    """Kafka's cleanSnapshots: oldest first, each breaching snapshot goes with the log up to the next one."""
    snapshot_ids = metadata_log.snapshot_ids()
    cleaned = False
    for snapshot_id, next_snapshot_id in zip(snapshot_ids, snapshot_ids[1:]):
        if next_snapshot_id.offset > max_offset:
            break
        reason = breach(snapshot_id)
        if reason is None:
            break
        if not metadata_log.delete_before_snapshot(next_snapshot_id):
            break
        log.info("raft.snapshot_retention_breached", snapshot=str(snapshot_id), log_start_offset=next_snapshot_id.offset, **reason)
        cleaned = True
    return cleaned


__all__ = ["CleanableLog", "MetadataRetention", "last_contained_log_timestamp", "maybe_clean"]
