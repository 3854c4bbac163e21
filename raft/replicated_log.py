"""ReplicatedLog: what the Raft core needs from the log it replicates, and the values it trades.

Kafka's raft module defines the same contract (ReplicatedLog, OffsetAndEpoch,
ValidOffsetAndEpoch, LogFetchInfo, RawSnapshotReader/Writer). Two implementations live
beside it: an in-memory log for the deterministic simulation, and the metadata log on
``storage.unified_log.UnifiedLog`` for real nodes. Records travel as record batch v2 bytes: the core never
decodes a batch it only stores or forwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position with the epoch of the record before it; also a snapshot's id (end offset, epoch)."""

    offset: int
    epoch: int


class ValidationKind(Enum):
    VALID = "valid"
    DIVERGING = "diverging"  # the follower must truncate to the given position
    SNAPSHOT = "snapshot"  # the follower is below the log start: fetch the given snapshot


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    kind: ValidationKind
    offset_and_epoch: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class LogFetchInfo:
    """Record batch v2 bytes starting at ``start_offset`` (empty at the log end)."""

    records: bytes
    start_offset: int


class RawSnapshotReader(Protocol):
    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...

    def size_in_bytes(self) -> int: ...

    def read(self, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the snapshot's record batches from byte ``position`` (FetchSnapshot chunks)."""
        ...


class RawSnapshotWriter(Protocol):
    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...

    def append(self, batches: bytes) -> None:
        """Add record batch v2 bytes: whole batches from a snapshot's writer, or a FetchSnapshot chunk."""
        ...

    def freeze(self) -> None:
        """Make the snapshot durable and visible to ``read_snapshot``; nothing may be appended after."""
        ...

    def close(self) -> None:
        """Discard the snapshot unless it was frozen."""
        ...


class ReplicatedLog(Protocol):
    """The Raft log: appends, reads, truncation by epoch, the high watermark, and snapshots.

    Offsets below ``start_offset`` exist only in the latest snapshot. ``flush`` is what makes
    appended data survive a crash: ``last_flushed_offset`` tells how far that reaches, and the
    leader counts its own end offset toward the high watermark only up to it.
    """

    def append_as_leader(self, records: bytes, epoch: int) -> LogAppendInfo:
        """Assign offsets from the log end to the batches in ``records`` and stamp them with ``epoch``."""
        ...

    def append_as_follower(self, records: bytes, epoch: int) -> LogAppendInfo:
        """Append batches that already carry their offsets and epochs (from the leader)."""
        ...

    def read(self, start_offset: int, max_bytes: int) -> LogFetchInfo:
        """Whole batches from ``start_offset`` (at least one batch if any, even above ``max_bytes``)."""
        ...

    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch in the log, or of the latest snapshot when the log is empty past it."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The end offset of the largest epoch <= ``epoch`` in this log, and that epoch (KIP-101's rule)."""
        ...

    def end_offset(self) -> int: ...

    def start_offset(self) -> int: ...

    def initialize_leader_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` starts at the current end offset (a new leader's first act)."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above ``offset``; never below the high watermark."""
        ...

    def truncate_to_latest_snapshot(self) -> bool:
        """Drop the whole log when the latest snapshot is past its end (or diverges); True if it did."""
        ...

    def update_high_watermark(self, offset: int) -> None: ...

    def high_watermark(self) -> int: ...

    def flush(self) -> None: ...

    def last_flushed_offset(self) -> int: ...

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Check a follower's fetch position (its fetch offset and last fetched epoch) against this log."""
        ...

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot at ``snapshot_id`` (offset <= high watermark), None if it exists already."""
        ...

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """As ``create_new_snapshot`` without the high-watermark check: for a follower fetching the leader's."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None: ...

    def latest_snapshot(self) -> RawSnapshotReader | None: ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start to ``snapshot_id.offset``, deleting older segments and snapshots; True if it moved."""
        ...

    def maybe_clean(self, now_ms: int, max_offset: int) -> bool:
        """Kafka's maybeClean: delete the old snapshots, and the log before the next one, that the
        retention limits let go, never moving the log start past ``max_offset``; True if anything went."""
        ...

    def close(self) -> None: ...


__all__ = [
    "LogAppendInfo",
    "LogFetchInfo",
    "OffsetAndEpoch",
    "RawSnapshotReader",
    "RawSnapshotWriter",
    "ReplicatedLog",
    "ValidOffsetAndEpoch",
    "ValidationKind",
]
