"""KafkaMetadataLog: the Raft log ``__cluster_metadata-0`` on ``storage.unified_log.UnifiedLog``, with its snapshots.

The log is opened here, not by the LogManager, as Kafka does: the LogManager's retention, the
cleaner and the recovery-point checkpoints never touch it. Segments go only when a snapshot
covers them and ``metadata.max.retention.bytes``/``.ms`` let them go (``maybe_clean``, in
``raft.snapshot_retention``). Like Kafka it is opened as after an unclean shutdown, from
offset 0, every time: recovery re-validates every batch and cuts a torn tail, which costs
little because snapshots keep the log short. The high watermark lives in memory only (Kafka
does not checkpoint the Raft one); the Raft core learns it again from the quorum.

Reads hand back bytes (copied out of the segment), not file regions, so segments removed by
truncation or snapshot deletion are unlinked at once: no in-flight sendfile can need them.
"""

from __future__ import annotations

import os
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import structlog

from protocol.record_batch import LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, BatchHeader, InvalidBatch, iter_headers, read_header
from raft.file_snapshots import FileRawSnapshotReader, FileRawSnapshotWriter, delete_snapshot, list_snapshot_paths, snapshot_path
from raft.replicated_log import LogAppendInfo, LogFetchInfo, OffsetAndEpoch, ValidationKind, ValidOffsetAndEpoch
from raft.snapshot_retention import MetadataRetention, maybe_clean
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    UnexpectedAppendOffsetError,
)
from storage.leader_epoch_cache import UNDEFINED_EPOCH
from storage.producer_state_manager import AppendOrigin
from storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception
from storage.unified_log import UnifiedLog, wall_clock_ms
from storage.log_config import LogConfig

log = structlog.get_logger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES
_BATCH_LENGTH_OFFSET = 8


def metadata_log_dir(metadata_log_dir: Path) -> Path:
    """The partition folder inside ``metadata.log.dir`` (or the first of ``log.dirs``)."""
    return metadata_log_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}"


@dataclass(frozen=True, slots=True)
class MetadataLogConfig:
    """Kafka's MetadataLogConfig, from the controller's properties.

    ``segment_bytes`` is metadata.log.segment.bytes, ``segment_ms`` metadata.log.segment.ms;
    ``segment_min_bytes`` (metadata.log.segment.min.bytes) is the floor Kafka enforces, lowered
    only by tests. ``max_batch_size_bytes`` bounds one appended batch. ``retention`` holds
    metadata.max.retention.bytes and metadata.max.retention.ms.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_min_bytes: int = MAX_BATCH_SIZE_BYTES
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    max_batch_size_bytes: int = MAX_BATCH_SIZE_BYTES
    retention: MetadataRetention = MetadataRetention()

    def __post_init__(self) -> None:
        if self.segment_bytes < self.segment_min_bytes:
            raise ValueError(f"cannot set metadata.log.segment.bytes below {self.segment_min_bytes}: {self.segment_bytes}")

    def log_config(self) -> LogConfig:
        return LogConfig.from_properties(
            {
                "segment.bytes": str(self.segment_bytes),
                "segment.ms": str(self.segment_ms),
                "max.message.bytes": str(self.max_batch_size_bytes),
                # Never trimmed by the partition log's own limits: only to a snapshot, by maybe_clean.
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "cleanup.policy": "delete",
                "file.delete.delay.ms": "0",
            }
        )


class KafkaMetadataLog:
    """ReplicatedLog on disk. Create with ``open``."""

    def __init__(
        self, storage_log: UnifiedLog, snapshots: dict[OffsetAndEpoch, FileRawSnapshotReader | None], retention: MetadataRetention = MetadataRetention()
    ) -> None:
        self.log = storage_log
        self.retention = retention
        self.dir = storage_log.dir
        # Frozen snapshots; a reader is opened on first use and kept for the FetchSnapshot chunks that follow.
        self._snapshots = snapshots
        # A snapshot holds only committed records: after a restart the high watermark starts at
        # least there, so no truncation can reach below what a snapshot already covers.
        latest = max(snapshots, default=None)
        covered = min(latest.offset, storage_log.log_end_offset) if latest is not None else 0
        storage_log.update_high_watermark(max(storage_log.log_start_offset, covered))
        self._logger = log.bind(topic=METADATA_TOPIC, partition=METADATA_PARTITION)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: MetadataLogConfig | None = None,
        *,
        topic_id: uuid.UUID = METADATA_TOPIC_ID,
        now_ms: Callable[[], int] = wall_clock_ms,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> "KafkaMetadataLog":
        """Open (or create) the log in ``directory``, the ``__cluster_metadata-0`` folder itself."""
        config = config or MetadataLogConfig()
        storage_log = UnifiedLog.open(
            directory,
            config.log_config(),
            topic_id=topic_id,
            recovery_point=0,
            log_start_offset=0,
            had_clean_shutdown=False,
            now_ms=now_ms,
            failure_channel=failure_channel,
        )
        try:
            metadata_log = cls(storage_log, _recover_snapshots(storage_log), config.retention)
            # A follower may have crashed after freezing a fetched snapshot and before dropping its log.
            metadata_log.truncate_to_latest_snapshot()
        except BaseException:
            storage_log.close_handlers()
            raise
        return metadata_log

    @property
    def topic_partition(self) -> tuple[str, int]:
        return METADATA_TOPIC, METADATA_PARTITION

    @property
    def topic_id(self) -> uuid.UUID | None:
        return self.log.topic_id

    # -- append and read -------------------------------------------------------------------------------

    def append_as_leader(self, records: bytes, epoch: int) -> LogAppendInfo:
        """Offsets from the log end, ``partitionLeaderEpoch`` = ``epoch``.

        A batch that already names another epoch is refused (Kafka refuses a Raft leader's
        batch whose epoch is not the leader's): it was built for an earlier term.
        """
        if not records:
            raise ValueError("attempt to append an empty record set")
        view = memoryview(bytearray(records))
        for header in _whole_batches(view):
            if header.partition_leader_epoch not in (NO_PARTITION_LEADER_EPOCH, epoch):
                raise InvalidRecordError(f"batch at byte {header.position} was built for epoch {header.partition_leader_epoch}, appended in epoch {epoch}")
        # COORDINATOR: the origin that takes control batches (LeaderChange, snapshot markers) and
        # any base offset; CLIENT refuses both, RAFT_LEADER refuses batches not yet stamped.
        info = self.log.append_as_leader(view, epoch, AppendOrigin.COORDINATOR)
        if info.first_offset < 0:
            raise CorruptRecordError("append as leader wrote nothing: no whole batch in the records")
        return LogAppendInfo(info.first_offset, info.last_offset)

    def append_as_follower(self, records: bytes, epoch: int) -> LogAppendInfo:
        """Batches as the leader wrote them: they must start at the log end and follow on without a gap.

        A trailing partial batch (a fetch cut by its size limit) is dropped. CRCs are checked
        by ``UnifiedLog``; batch epochs may not go below the last fetched epoch (the snapshot's on a
        log emptied by one), decrease, or pass ``epoch``, the leader's.
        """
        if not records:
            raise ValueError("attempt to append an empty record set")
        view = memoryview(records).cast("B")
        expected = self.log.log_end_offset
        latest_epoch = self.last_fetched_epoch()
        whole = 0
        for header in _whole_batches(view):
            if header.base_offset != expected:
                if whole == 0:
                    raise UnexpectedAppendOffsetError(
                        f"follower append to {METADATA_TOPIC}-{METADATA_PARTITION} starts at offset {header.base_offset}, not at the log end {expected}",
                        header.base_offset,
                        header.last_offset,
                    )
                raise OffsetsOutOfOrderError(f"batch at offset {header.base_offset} does not follow the previous batch, which ends before {expected}")
            batch_epoch = header.partition_leader_epoch
            if batch_epoch > epoch or batch_epoch < latest_epoch:
                raise InvalidRecordError(f"batch at offset {header.base_offset} has epoch {batch_epoch}: outside [{latest_epoch}, {epoch}]")
            latest_epoch = batch_epoch
            expected = header.next_offset
            whole = header.position + header.size
        if whole == 0:
            raise CorruptRecordError(f"follower append of {view.nbytes} bytes holds no whole batch")
        info = self.log.append_as_follower(view[:whole])
        return LogAppendInfo(info.first_offset, info.last_offset)

    def read(self, start_offset: int, max_bytes: int) -> LogFetchInfo:
        """Whole batches from the one holding ``start_offset``, to at most one segment's end.

        The first batch comes whole even past ``max_bytes``; a batch the limit cuts later is
        left out. Raises OffsetOutOfRangeError outside [start offset, end offset].
        """
        info = self.log.read(start_offset, max(max_bytes, 0), None, True)
        data = b"".join(_pread_fully(region.fd, region.length, region.position) for region in info.regions)
        end = 0
        for header in iter_headers(data):
            end = header.position + header.size
        return LogFetchInfo(data[:end], start_offset)

    # -- offsets and epochs ------------------------------------------------------------------------------

    def end_offset(self) -> int:
        return self.log.log_end_offset

    def start_offset(self) -> int:
        return self.log.log_start_offset

    def last_fetched_epoch(self) -> int:
        """The log's latest epoch; the latest snapshot's when the log is empty past it; 0 for a new log."""
        latest = self.log.leader_epoch_cache.latest_epoch
        if latest != UNDEFINED_EPOCH:
            return latest
        snapshot_id = self.latest_snapshot_id()
        if snapshot_id is None:
            return 0
        if snapshot_id.offset == self.start_offset() == self.end_offset():
            return snapshot_id.epoch
        raise KafkaStorageError(
            f"the log has no last fetched epoch and there is a snapshot {snapshot_id}: expected its end offset to be "
            f"the log's start offset ({self.start_offset()}) and end offset ({self.end_offset()})"
        )

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's endOffsetForEpoch: from the epoch cache, with the earliest snapshot standing in
        for the epochs before the log start, and the log end when the cache knows nothing."""
        found_epoch, found_offset = self.log.end_offset_for_epoch(epoch)
        if found_offset < 0:
            return OffsetAndEpoch(self.end_offset(), self.last_fetched_epoch())
        earliest = self.earliest_snapshot_id()
        if earliest is not None and found_offset == earliest.offset and found_epoch == epoch:
            return earliest
        return OffsetAndEpoch(found_offset, found_epoch)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Kafka's ReplicatedLog.validateOffsetAndEpoch, to the letter.

        Snapshot: the earliest snapshot exists and the fetch offset is below the log start,
        or at it with another epoch than the snapshot's, or the epoch is older than the
        snapshot's. Diverging: this log's end for ``epoch`` names another epoch or ends before
        ``offset``. Otherwise valid.
        """
        start = self.start_offset()
        if start == 0 and offset == 0:
            return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(0, 0))
        earliest = self.earliest_snapshot_id()
        if earliest is not None and (offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch):
            return ValidOffsetAndEpoch(ValidationKind.SNAPSHOT, max(self._snapshots))
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidOffsetAndEpoch(ValidationKind.DIVERGING, end)
        return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(offset, epoch))

    def initialize_leader_epoch(self, epoch: int) -> None:
        """The new leader's epoch starts at the log end; written with the next flush (recovery
        rebuilds it from the batches otherwise)."""
        self.log.leader_epoch_cache.assign(epoch, self.log.log_end_offset)

    # -- truncation -------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.high_watermark:
            raise ValueError(f"attempt to truncate to offset {offset}, which is below the high watermark {self.log.high_watermark}")
        if not self.log.truncate_to(offset):
            # Nothing past it, but an epoch started at the log end (a leader that never wrote
            # in it) must go too, as Kafka's truncateTo always trims the epoch cache.
            self.log.leader_epoch_cache.truncate_from_end(offset)
        self.log.delete_pending_segments()

    def truncate_to_latest_snapshot(self) -> bool:
        """Empty the log and start it at the latest snapshot when that snapshot is ahead of it.

        Ahead means: past the log end, or of a later epoch than the log's latest (Kafka's
        rule), or of a later epoch than the record before it in this log (this log diverged
        below the snapshot's end). Older snapshots go too.
        """
        snapshot_id = self.latest_snapshot_id()
        if snapshot_id is None or not self._snapshot_is_ahead(snapshot_id):
            return False
        self._logger.info("raft.log_truncated_to_snapshot", snapshot=str(snapshot_id), log_end_offset=self.end_offset())
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        self.log.delete_pending_segments()
        self._forget_snapshots_before(snapshot_id)
        return True

    def _snapshot_is_ahead(self, snapshot_id: OffsetAndEpoch) -> bool:
        if snapshot_id.offset > self.end_offset():
            return True
        cache = self.log.leader_epoch_cache
        latest_epoch = max(cache.latest_epoch, 0)
        if snapshot_id.epoch > latest_epoch:
            return True
        if snapshot_id.offset > self.start_offset():
            epoch_before = cache.epoch_for_offset(snapshot_id.offset - 1)
            return epoch_before != UNDEFINED_EPOCH and snapshot_id.epoch > epoch_before
        return False

    # -- high watermark and durability ---------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> None:
        """Kept within [start offset, end offset], as Kafka's UnifiedLog keeps it."""
        bounded = min(max(offset, self.start_offset()), self.end_offset())
        if bounded != offset:
            self._logger.warning("raft.high_watermark_bounded", requested=offset, high_watermark=bounded)
        self.log.update_high_watermark(bounded)

    def high_watermark(self) -> int:
        return self.log.high_watermark

    def flush(self) -> None:
        self.log.flush()

    def last_flushed_offset(self) -> int:
        """Everything below it is fsynced (below the log start: held by a frozen snapshot)."""
        return max(self.log.recovery_point, self.log.log_start_offset)

    # -- snapshots --------------------------------------------------------------------------------------

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotWriter | None:
        """None below the log start or when it exists; ValueError past the high watermark or off the log."""
        if snapshot_id.offset < self.start_offset():
            self._logger.info("raft.snapshot_below_log_start", snapshot=str(snapshot_id), log_start_offset=self.start_offset())
            return None
        if snapshot_id.offset > self.log.high_watermark:
            raise ValueError(f"cannot create a snapshot with an id ({snapshot_id}) greater than the high watermark ({self.log.high_watermark})")
        validation = self.validate_offset_and_epoch(snapshot_id.offset, snapshot_id.epoch)
        if validation.kind is not ValidationKind.VALID:
            raise ValueError(f"snapshot id ({snapshot_id}) is not valid according to the log: {validation}")
        return self.create_new_snapshot_unchecked(snapshot_id)

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotWriter | None:
        if snapshot_id in self._snapshots:
            return None
        return FileRawSnapshotWriter.create(self.dir, snapshot_id, self._on_snapshot_frozen, self._snapshot_io)

    def _snapshot_io(self, what: str) -> AbstractContextManager[None]:
        # A snapshot is a file of the metadata log dir: an OSError writing it takes the dir offline
        # as one of the log's own would, and a failed metadata log dir halts the node (Kafka's rule).
        plog = self.log
        return maybe_handle_io_exception(plog.failure_channel, plog.parent_dir, f"Error while {what} in dir {plog.parent_dir}")

    def _on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshots.setdefault(snapshot_id, None)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader | None:
        if snapshot_id not in self._snapshots:
            return None
        reader = self._snapshots[snapshot_id]
        if reader is None:
            try:
                reader = FileRawSnapshotReader.open(self.dir, snapshot_id)
            except FileNotFoundError:
                self._logger.warning("raft.snapshot_file_missing", snapshot=str(snapshot_id), path=str(snapshot_path(self.dir, snapshot_id)))
                del self._snapshots[snapshot_id]
                return None
            self._snapshots[snapshot_id] = reader
        return reader

    def latest_snapshot(self) -> FileRawSnapshotReader | None:
        snapshot_id = self.latest_snapshot_id()
        return None if snapshot_id is None else self.read_snapshot(snapshot_id)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots, default=None)

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return min(self._snapshots, default=None)

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots)

    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    def maybe_clean(self, now_ms: int, max_offset: int) -> bool:
        return maybe_clean(self, self.retention, now_ms, max_offset)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Kafka's deleteBeforeSnapshot: only for a known snapshot past the log start and not past
        the latest one. Whole segments below the new log start and older snapshots are deleted."""
        latest = self.latest_snapshot_id()
        if latest is None or snapshot_id not in self._snapshots or not self.start_offset() < snapshot_id.offset <= latest.offset:
            return False
        if snapshot_id.offset > self.log.high_watermark:
            raise OffsetOutOfRangeError(f"cannot increment the log start offset to {snapshot_id.offset}: past the high watermark {self.log.high_watermark}")
        self.log.maybe_increment_log_start_offset(snapshot_id.offset)
        segments = self.log.delete_old_segments()
        self.log.delete_pending_segments()
        forgotten = self._forget_snapshots_before(snapshot_id)
        self._logger.info("raft.log_start_moved", log_start_offset=self.start_offset(), segments_deleted=segments, snapshots_deleted=forgotten)
        return True

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> int:
        """Close and delete every snapshot older than ``snapshot_id``; a reader handed out for one fails from now on."""
        expired = sorted(s for s in self._snapshots if s < snapshot_id)
        for old in expired:
            reader = self._snapshots.pop(old)
            if reader is not None:
                reader.close()
            delete_snapshot(self.dir, old)
        return len(expired)

    # -- lifecycle --------------------------------------------------------------------------------------

    def close(self) -> None:
        self.log.flush()
        self.log.close()
        for reader in self._snapshots.values():
            if reader is not None:
                reader.close()
        self._snapshots.clear()

    def __repr__(self) -> str:
        return (
            f"KafkaMetadataLog(start={self.start_offset()}, end={self.end_offset()}, high_watermark={self.log.high_watermark}, "
            f"snapshots={sorted(self._snapshots)})"
        )


def _recover_snapshots(storage_log: UnifiedLog) -> dict[OffsetAndEpoch, FileRawSnapshotReader | None]:
    """Kafka's recoverSnapshots: keep the frozen snapshots from the log start on, delete the rest
    (unfinished ``.part`` files, ``.deleted`` ones, those the log start has passed)."""
    kept: dict[OffsetAndEpoch, FileRawSnapshotReader | None] = {}
    doomed = []
    start = storage_log.log_start_offset
    for found in list_snapshot_paths(storage_log.dir):
        if found.partial or found.deleted or found.snapshot_id.offset < start:
            doomed.append(found)
        else:
            kept[found.snapshot_id] = None
    if start > 0 and not any(s.offset >= start for s in kept):
        raise KafkaStorageError(
            f"inconsistent snapshot state in {storage_log.dir}: the log starts at {start} but no snapshot reaches it (snapshots: {sorted(kept)})"
        )
    for found in doomed:
        found.path.unlink(missing_ok=True)
        log.info("raft.snapshot_file_deleted", file=found.path.name, partial=found.partial)
    if kept:
        log.info("raft.snapshots_recovered", snapshots=[str(s) for s in sorted(kept)], dir=str(storage_log.dir))
    return kept


def _whole_batches(view: memoryview) -> list[BatchHeader]:
    """The headers of the whole batches in ``view``; a trailing partial batch is not one of them."""
    headers: list[BatchHeader] = []
    position = 0
    end = view.nbytes
    while end - position >= LOG_OVERHEAD:
        length = int.from_bytes(view[position + _BATCH_LENGTH_OFFSET : position + LOG_OVERHEAD], "big", signed=True)
        if position + LOG_OVERHEAD + length > end:
            break
        try:
            header = read_header(view, position)
        except InvalidBatch as e:
            raise CorruptRecordError(f"invalid batch at byte {position}: {e}") from None
        headers.append(header)
        position += header.size
    return headers


def _pread_fully(fd: int, length: int, position: int) -> bytes:
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, position)
        if not chunk:
            raise KafkaStorageError(f"segment file ended {length} bytes before the region read from it")
        chunks.append(chunk)
        position += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


__all__ = [
    "KafkaMetadataLog",
    "MAX_BATCH_SIZE_BYTES",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "MetadataLogConfig",
    "metadata_log_dir",
]
