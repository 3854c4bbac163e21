"""Log: one partition's log, Kafka's UnifiedLog + LocalLog + LogLoader (no tiered storage).

Appends validate batches from their 61-byte headers only (structure, magic, CRC32C, sizes,
counts), assign offsets by rewriting ``baseOffset`` and ``partitionLeaderEpoch`` in place and
write the whole buffer to the active segment with one write. Batches with a producer id are
checked against the partition's producer state (sequences, epochs, transactions) from the
same headers. Reads answer with regions of segment files. Records are decoded only for
ListOffsets by time and for the one record of a transaction marker.
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

import structlog

from protocol.control_records import read_marker
from protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidBatch,
    UnsupportedMagic,
    is_crc_valid,
    iter_headers,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from storage.abstract_index import CorruptIndexError, InvalidIndexEntryError
from storage.batch_records import keyless_record_indexes, record_timestamps
from storage.checkpoints import fsync_dir
from storage.errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
    UnsupportedForMessageFormatError,
)
from storage.fetch_data_info import FetchDataInfo, FileRegion
from storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.log_config import LogConfig
from storage.log_segment import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LOG_FILE_SUFFIX,
    MAX_BATCH_SIZE,
    SWAP_FILE_SUFFIX,
    LogSegment,
    filename_prefix,
    offset_from_file,
    read_next_offset_of_file,
)
from storage.partition_metadata import PARTITION_METADATA_FILE, PartitionMetadataFile
from storage.producer_state_manager import AppendOrigin, CompletedTxn, ProducerAppendInfo, ProducerStateManager, increment_sequence
from storage.transaction_index import AbortedTxn

__all__ = [
    "AppendOrigin",
    "FetchDataInfo",
    "FileRegion",
    "Log",
    "LogAppendInfo",
    "LogListener",
    "parse_topic_partition",
    "wall_clock_ms",
]

log = structlog.get_logger()

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6

_I32 = struct.Struct(">i")
_MIN_BATCH_LENGTH = 49  # HEADER_SIZE - LOG_OVERHEAD
_LEGACY_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
# Beside a cleaner's .swap: the end of the segments it replaces (kbroker's own, not Kafka's).
SWAP_END_FILE_SUFFIX = ".swapend"
_MIN_RECORD_SIZE = 7  # length, attributes, timestamp delta, offset delta, key, value, header count: one byte each


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogListener(Protocol):
    """Told when a log gets work for the periodic jobs, so that they visit the logs that have
    some rather than every log each time (a node may hold tens of thousands)."""

    def on_roll(self, plog: Log) -> None:
        """A segment was rolled: the ones before it await their fsync."""

    def on_segments_scheduled_for_deletion(self, plog: Log) -> None:
        """Segments were renamed to .deleted: they await file.delete.delay.ms."""

    def on_config_changed(self, plog: Log) -> None:
        """A new config, flush.ms included."""


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did. ``offset_of_max_timestamp`` is shallow, as in Kafka: the last
    offset of the first batch carrying ``max_timestamp``. All -1 (and zero counts) when the
    input held no batch."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    records_count: int
    valid_bytes: int


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    """``<topic>-<partition>``: the partition follows the LAST '-' (topic names may contain '-')."""
    topic, _, partition = directory.name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{directory.name} is not a <topic>-<partition> directory")
    return topic, int(partition)


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        topic_id: uuid.UUID | None,
        now_ms: Callable[[], int],
        listener: LogListener | None = None,
        *,
        created: bool = False,
    ) -> None:
        self.dir = directory
        self.config = config
        self.topic_id = topic_id
        self.topic_partition = parse_topic_partition(directory)
        self._now_ms = now_ms
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self._log_end_offset = 0
        # Below it every record is on enough replicas to survive an election; the partition
        # leader moves it, a follower takes its leader's, and replication-offset-checkpoint keeps it.
        self.high_watermark = 0
        self.last_flush_ms = now_ms()
        # Segments rolled but not yet fsynced (Kafka schedules this flush right after a roll).
        self._flush_rolled_up_to: int | None = None
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.leader_epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT_FILE, created=created)
        self.partition_metadata_file = PartitionMetadataFile(directory / PARTITION_METADATA_FILE)
        self.producer_state = ProducerStateManager(f"{self.topic_partition[0]}-{self.topic_partition[1]}", directory, created=created)
        self._log = log.bind(topic=self.topic_partition[0], partition=self.topic_partition[1])
        self._listener = listener

    # -- opening and recovery (Kafka's LogLoader) ---------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None,
        recovery_point: int,
        log_start_offset: int,
        had_clean_shutdown: bool,
        now_ms: Callable[[], int] = wall_clock_ms,
        listener: LogListener | None = None,
    ) -> "Log":
        try:
            directory.mkdir(parents=True)
            created = True
        except FileExistsError:
            created = False
        plog = cls(directory, config, topic_id, now_ms, listener, created=created)
        try:
            if created:
                plog._create(log_start_offset)
            else:
                plog._load_partition_metadata()
                plog._load(recovery_point, log_start_offset, had_clean_shutdown)
        except BaseException:
            plog.close_handlers()
            raise
        return plog

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        self.topic_id = topic_id
        self.partition_metadata_file.record(topic_id)

    def _load_partition_metadata(self) -> None:
        stored = self.partition_metadata_file.read()
        if stored is not None and self.topic_id is not None and stored != self.topic_id:
            raise InconsistentTopicIdError(f"{self.dir} belongs to topic id {stored}, not {self.topic_id}")
        if self.topic_id is None:
            self.topic_id = stored
        elif stored is None:
            self.partition_metadata_file.record(self.topic_id)

    def _create(self, log_start_offset: int) -> None:
        """A folder made just now holds nothing to load, recover or replay: one empty segment."""
        if self.topic_id is not None:
            self.partition_metadata_file.record(self.topic_id)
        self._add_segment(LogSegment.open(self.dir, log_start_offset, self.config, self._now_ms()))
        self.log_start_offset = self.recovery_point = self._log_end_offset = log_start_offset
        self.producer_state.truncate_fully_and_start_at(log_start_offset)
        self._log.debug("log.created", log_start_offset=log_start_offset)

    def _load(self, recovery_point: int, log_start_offset: int, had_clean_shutdown: bool) -> None:
        # One listing serves every step: with 10,000 partitions a listing and a stat per file
        # per step were a third of start-up.
        names, swap_files = self._remove_temp_files_and_collect_swap_files(self._file_names())
        if swap_files or any(name.endswith(SWAP_END_FILE_SUFFIX) for name in names):
            self._complete_swaps(swap_files)
            names = self._file_names()
        rebuilt = self._load_segment_files(names)
        # After a crash, snapshots taken past the flushed segments may describe data that is gone.
        unflushed_from = None
        if not had_clean_shutdown and self.segments:
            unflushed_from = self.segments[self._floor_index(recovery_point)].base_offset
        new_recovery_point, log_end_offset, recovered, truncated = self._recover_log(had_clean_shutdown, recovery_point, log_start_offset)
        self._log_end_offset = log_end_offset
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.recovery_point = new_recovery_point
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._load_producer_state(log_end_offset if unflushed_from is None else min(unflushed_from, log_end_offset))
        # Per log only when something happened to it; LogManager sums up the rest.
        notable = not had_clean_shutdown or recovered or truncated or rebuilt
        (self._log.info if notable else self._log.debug)(
            "log.loaded",
            clean_shutdown=had_clean_shutdown,
            segments=len(self.segments),
            log_start_offset=self.log_start_offset,
            log_end_offset=log_end_offset,
            recovery_point=self.recovery_point,
            segments_recovered=recovered,
            bytes_truncated=truncated,
            indexes_rebuilt=len(rebuilt),
            producers=len(self.producer_state.producers),
        )

    def _file_names(self) -> list[str]:
        with os.scandir(self.dir) as entries:
            return [entry.name for entry in entries if entry.is_file()]

    def _remove_temp_files_and_collect_swap_files(self, names: list[str]) -> tuple[list[str], list[Path]]:
        """Delete leftovers of interrupted deletions, writes and cleanings: (the names left, the .swap files to complete)."""
        kept: list[str] = []
        swaps: list[str] = []
        cleaned: list[str] = []
        for name in names:
            if name.endswith((DELETED_FILE_SUFFIX, ".tmp")):
                (self.dir / name).unlink()
            elif name.endswith(CLEANED_FILE_SUFFIX):
                cleaned.append(name)
            else:
                kept.append(name)
                if name.endswith(SWAP_FILE_SUFFIX):
                    swaps.append(name)
        min_cleaned = min((_offset_or(Path(name), float("inf")) for name in cleaned), default=float("inf"))
        # A .swap at or past the smallest .cleaned offset belongs to a split that never finished.
        valid = []
        for name in swaps:
            if _offset_or(Path(name), float("inf")) >= min_cleaned:
                (self.dir / name).unlink()
                kept.remove(name)
            else:
                valid.append(self.dir / name)
        for name in cleaned:
            (self.dir / name).unlink()
        return kept, valid

    def _complete_swaps(self, swap_files: list[Path]) -> None:
        """Finish a compaction/split swap the crash interrupted: drop what it replaced, rename it in.

        The swap replaced every segment from its base offset up to the end offset the cleaner
        wrote beside it (``.swapend``): the cleaned segment alone may end before the last
        segment it replaced (that one's records were all superseded).
        """
        low, high = None, None
        for path in swap_files:
            if not path.name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX):
                continue
            base = offset_from_file(path)
            self._log.info("log.swap_recovered", file=path.name)
            low = base if low is None else min(low, base)
            end = max(read_next_offset_of_file(path, base), _read_swap_end(self.dir / (filename_prefix(base) + SWAP_END_FILE_SUFFIX)))
            high = end if high is None else max(high, end)
        if low is not None and high is not None:
            for path in self.dir.iterdir():
                name = path.name
                if path.is_file() and name.endswith((LOG_FILE_SUFFIX, *INDEX_SUFFIXES)) and low <= _offset_or(path, -1) < high:
                    self._log.info("log.replaced_segment_deleted", file=name)
                    path.unlink()
        for path in self.dir.iterdir():
            if path.is_file() and path.name.endswith(SWAP_FILE_SUFFIX):
                os.rename(path, path.with_name(path.name.removesuffix(SWAP_FILE_SUFFIX)))
            elif path.is_file() and path.name.endswith(SWAP_END_FILE_SUFFIX):
                path.unlink()

    def _load_segment_files(self, names: list[str]) -> set[int]:
        """Open every segment; rebuild the indexes of those whose index files are missing or corrupt."""
        rebuilt: set[int] = set()
        now = self._now_ms()
        present = set(names)
        for name in sorted(names):
            if name.endswith(INDEX_SUFFIXES):
                base = _offset_or(Path(name), -1)
                if base >= 0 and filename_prefix(base) + LOG_FILE_SUFFIX not in present:
                    self._log.warning("log.orphaned_index_deleted", file=name)
                    (self.dir / name).unlink()
            elif name.endswith(LOG_FILE_SUFFIX) and _offset_or(Path(name), -1) >= 0:
                segment = LogSegment.open(self.dir, offset_from_file(Path(name)), self.config, now)
                try:
                    segment.sanity_check()
                except CorruptIndexError as e:
                    self._log.warning("log.index_rebuilt", segment=segment.base_offset, reason=str(e))
                    # No leader epochs from here: segments are met in file-name order, and after a
                    # crash the recovery below assigns them in offset order from the recovery point.
                    segment.recover(MAX_BATCH_SIZE)
                    rebuilt.add(segment.base_offset)
                self._add_segment(segment)
        return rebuilt

    def _recover_log(self, clean: bool, recovery_point: int, log_start_offset: int) -> tuple[int, int, int, int]:
        """Kafka's recoverLog; returns (recovery point, log end offset, segments recovered, bytes truncated)."""
        recovered = 0
        truncated = 0
        if not clean and self.segments:
            start = self._floor_index(recovery_point)
            unflushed = self.segments[start:]
            for i, segment in enumerate(unflushed):
                try:
                    truncated = segment.recover(MAX_BATCH_SIZE, self.leader_epoch_cache)
                except (InvalidIndexEntryError, OSError) as e:
                    self._log.warning("log.recovery.invalid_offset", segment=segment.base_offset, error=str(e))
                    truncated = segment.truncate_to(segment.base_offset, self._now_ms())
                recovered += 1
                if truncated > 0:
                    remaining = unflushed[i + 1 :]
                    self._log.warning(
                        "log.recovery.truncated",
                        segment=segment.base_offset,
                        bytes=truncated,
                        next_offset=segment.read_next_offset(),
                        later_segments_deleted=len(remaining),
                    )
                    self._remove_segments(remaining)
                    for later in remaining:
                        later.delete()
                    break
        log_end_offset: int | None = None
        if self.segments:
            log_end_offset = self.segments[-1].read_next_offset()
            if log_end_offset < log_start_offset:
                self._log.warning("log.all_segments_deleted", log_end_offset=log_end_offset, log_start_offset=log_start_offset)
                doomed = list(self.segments)
                self._remove_segments(doomed)
                for segment in doomed:
                    segment.delete()
                self.leader_epoch_cache.clear()
                log_end_offset = None
        if not self.segments:
            self._add_segment(LogSegment.open(self.dir, log_start_offset, self.config, self._now_ms()))
        if clean and log_end_offset is not None:
            return log_end_offset, log_end_offset, recovered, truncated
        end = log_end_offset if log_end_offset is not None else self.segments[-1].read_next_offset()
        return min(recovery_point, end), end, recovered, truncated

    # -- producer state (Kafka's LogLoader.rebuildProducerState) ------------------------------------------

    def _load_producer_state(self, trusted_up_to: int) -> None:
        """Load the newest snapshot at or below ``trusted_up_to`` and replay batch headers from it to the log end."""
        state = self.producer_state
        state.truncate_and_reload(self.log_start_offset, trusted_up_to)
        start, end = state.map_end_offset, self._log_end_offset
        replayed = 0
        if start < end:
            for segment in self.segments[self._floor_index(start) :]:
                position = segment.offset_index.lookup(start).position if segment.base_offset <= start else 0
                for batch_position, header in segment.batch_headers(position):
                    if header.last_offset < start or not header.has_producer_id:
                        continue
                    self._replay_batch(segment, batch_position, header)
                    replayed += 1
        state.map_end_offset = end
        if replayed:
            self._log.info("log.producer_state_rebuilt", from_offset=start, to_offset=end, batches=replayed)

    def _replay_batch(self, segment: LogSegment, position: int, header: BatchHeader) -> None:
        info = self.producer_state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
        try:
            completed = self._update_producer(info, header, lambda: segment.read_batch(position, header.size), header.base_offset)
        except (StorageError, ValueError) as e:
            self._log.warning("log.producer_state_replay_skipped", offset=header.base_offset, error=str(e))
            return
        self.producer_state.update(info)
        if completed is not None:
            self._complete_txn(completed, segment)

    @staticmethod
    def _update_producer(info: ProducerAppendInfo, header: BatchHeader, batch: Callable[[], bytes | memoryview], base_offset: int) -> CompletedTxn | None:
        """Validate one batch (assigned ``base_offset``) against its producer's state, Kafka's ProducerAppendInfo.append."""
        if header.is_control:
            marker = read_marker(batch(), header)
            if marker is None:
                return None
            return info.append_end_txn_marker(marker, header.producer_epoch, base_offset, header.max_timestamp)
        last_offset = base_offset + header.last_offset_delta
        last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
        info.append_data_batch(header.producer_epoch, header.base_sequence, last_seq, header.max_timestamp, base_offset, last_offset, header.is_transactional)
        return None

    def _complete_txn(self, txn: CompletedTxn, segment: LogSegment) -> None:
        """Close a transaction whose marker is in ``segment``; an aborted one gets a txn index entry there."""
        last_stable_offset = self.producer_state.complete_txn(txn)
        # A replay after a restart may meet markers whose entries are already in the file.
        if txn.is_aborted and txn.last_offset > segment.txn_index.last_offset:
            segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when every transaction is complete."""
        return self.producer_state.first_unstable_offset

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction overlapping [start_offset, upper_offset)."""
        aborted: list[tuple[int, int]] = []
        for segment in self.segments[self._floor_index(start_offset) :]:
            result = segment.txn_index.collect_aborted(start_offset, upper_offset)
            aborted.extend((txn.producer_id, txn.first_offset) for txn in result.aborted)
            if result.complete:
                break
        return aborted

    def fetch_upper_bound(self, fetch_offset: int) -> int:
        """Where the segment a fetch from ``fetch_offset`` reads ends (the next segment's base, or the log end)."""
        i = self._floor_index(fetch_offset)
        return self._base_offsets[i + 1] if i + 1 < len(self._base_offsets) else self._log_end_offset

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired_producers(now_ms, expiration_ms)

    # -- segment bookkeeping ----------------------------------------------------------------------------

    def _add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    def _remove_segments(self, doomed: Sequence[LogSegment]) -> None:
        gone = {id(s) for s in doomed}
        self.segments = [s for s in self.segments if id(s) not in gone]
        self._base_offsets = [s.base_offset for s in self.segments]

    def _floor_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the first one when it is below them all)."""
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    def _schedule_delete(self, doomed: Sequence[LogSegment]) -> None:
        """Rename to .deleted now; close and unlink after file.delete.delay.ms (a sendfile may be in flight)."""
        deadline = self._now_ms() + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.rename_to_deleted()
            self._pending_deletes.append((deadline, segment))
        if doomed and self._listener is not None:
            self._listener.on_segments_scheduled_for_deletion(self)

    def replace_cleaned_segments(self, old: Sequence[LogSegment], end_offset: int, on_step: Callable[[str], None] | None = None) -> LogSegment:
        """Swap the log cleaner's ``.cleaned`` segment at ``old[0].base_offset`` in for ``old`` (Kafka's replaceSegments).

        ``old`` are consecutive inactive segments and ``end_offset`` the base offset of the one
        after them. The cleaned files become ``.swap`` (the commit point: a crash from then on
        recovers to the new segment, before it to the old ones), the old segments are renamed
        ``.deleted`` (their fds stay open for file.delete.delay.ms, so a sendfile in flight is
        not disturbed) and the ``.swap`` files get their final names. ``on_step`` is told each
        step's name (fault injection for tests).
        """
        first = next((i for i, s in enumerate(self.segments) if s is old[0]), None)
        if first is None or first + len(old) >= len(self.segments) or any(a is not b for a, b in zip(self.segments[first:], old)):
            raise KafkaStorageError(f"segments {[s.base_offset for s in old]} of {self._tp} are no longer consecutive inactive segments")
        step = on_step or (lambda _name: None)
        base = old[0].base_offset
        end_file = self.dir / (filename_prefix(base) + SWAP_END_FILE_SUFFIX)
        _write_swap_end(end_file, end_offset)
        new = LogSegment.open(self.dir, base, self.config, self._now_ms(), suffix=CLEANED_FILE_SUFFIX)
        step("before_commit")
        new.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        fsync_dir(self.dir)
        step("committed")
        self.segments[first : first + len(old)] = [new]
        self._base_offsets = [s.base_offset for s in self.segments]
        self._schedule_delete(old)
        step("old_deleted")
        # No fsync from here on: a crash that loses these renames finds the .swap, which recovery completes.
        new.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        end_file.unlink()
        self._log.info("log.cleaned_segment_swapped", segment=base, replaced=len(old), size=new.size)
        return new

    # -- properties ---------------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self.recovery_point

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        if self._listener is not None:
            self._listener.on_config_changed(self)

    # -- append ---------------------------------------------------------------------------------------------

    def append_as_leader(self, records: memoryview, leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Validate the batches of a produce request, assign their offsets in place, write them once.

        ``records`` must be writable (a memoryview over a bytearray): baseOffset,
        partitionLeaderEpoch and, for LogAppendTime topics, the timestamp and CRC are
        rewritten in it. Nothing is written when any batch is invalid.
        """
        if records.readonly:
            records = memoryview(bytearray(records))
        config = self.config
        now = self._now_ms()
        headers = self._validate_leader_batches(records, leader_epoch, origin, now)
        if not headers:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        valid_bytes = len(records)
        if valid_bytes > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"message batch size is {valid_bytes} bytes in append to partition {self._tp} which exceeds the maximum configured segment size of {config.segment_bytes}"
            )
        log_append_time = now if config.message_timestamp_type == "LogAppendTime" else -1
        first_offset = next_offset = self._log_end_offset
        max_timestamp, offset_of_max_timestamp = NO_TIMESTAMP, -1
        records_count = 0
        batches: list[tuple[int, int, int]] = []
        producers: dict[int, ProducerAppendInfo] | None = None
        completed: list[CompletedTxn] = []
        for header in headers:
            if header.producer_id >= 0:
                if producers is None:
                    producers = {}
                duplicate = self._analyze_producer_batch(records, header, next_offset, origin, producers, completed)
                if duplicate is not None:
                    return duplicate
            set_base_offset(records, header, next_offset)
            set_partition_leader_epoch(records, header, leader_epoch)
            batch_max_timestamp = header.max_timestamp
            if log_append_time >= 0:
                set_log_append_time(records, header, log_append_time)
                batch_max_timestamp = log_append_time
            last = next_offset + header.last_offset_delta
            if batch_max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = batch_max_timestamp, last
            batches.append((header.size, last, batch_max_timestamp))
            records_count += header.records_count
            next_offset = last + 1
        self._append(records, batches, first_offset, next_offset - 1, max_timestamp, offset_of_max_timestamp, now)
        if producers is not None:
            self._update_producer_state(producers, completed)
        self.producer_state.map_end_offset = self._log_end_offset
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._maybe_flush_by_messages()
        return LogAppendInfo(
            first_offset, next_offset - 1, max_timestamp, offset_of_max_timestamp, log_append_time, self.log_start_offset, records_count, valid_bytes
        )

    def _analyze_producer_batch(
        self,
        records: memoryview,
        header: BatchHeader,
        base_offset: int,
        origin: AppendOrigin,
        producers: dict[int, ProducerAppendInfo],
        completed: list[CompletedTxn],
    ) -> LogAppendInfo | None:
        """Kafka's analyzeAndValidateProducerState for one batch about to get ``base_offset``.

        A client's retry of one of the producer's last five batches is answered with where
        that batch went (the returned info), and nothing is appended. Raises the producer
        state errors (sequence gap, stale epoch, ...) that refuse the whole append.
        """
        state = self.producer_state
        producer_id = header.producer_id
        if origin is AppendOrigin.CLIENT:
            last = state.producers.get(producer_id)
            # The next batch in sequence cannot be a retry: only the others are looked up.
            if last is not None and last.batches and header.base_sequence != last.batches[-1].last_seq + 1:
                last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
                duplicate = last.find_duplicate(header.producer_epoch, header.base_sequence, last_seq)
                if duplicate is not None:
                    self._log.debug("log.duplicate_batch", producer_id=producer_id, first_sequence=header.base_sequence, offset=duplicate.first_offset)
                    return LogAppendInfo(
                        duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset, -1, self.log_start_offset, 0, 0
                    )
        info = producers.get(producer_id)
        if info is None:
            info = producers[producer_id] = state.prepare_update(producer_id, origin)
        position = header.position
        try:
            txn = self._update_producer(info, header, lambda: records[position : position + header.size], base_offset)
        except ValueError as e:
            raise InvalidRecordError(f"invalid control batch from producer {producer_id} in {self._tp}: {e}") from None
        if txn is not None:
            completed.append(txn)
        return None

    def _update_producer_state(self, producers: dict[int, ProducerAppendInfo], completed: list[CompletedTxn]) -> None:
        state = self.producer_state
        for info in producers.values():
            state.update(info)
        for txn in completed:
            self._complete_txn(txn, self.active_segment)

    def _validate_leader_batches(self, records: memoryview, leader_epoch: int, origin: AppendOrigin, now: int) -> list[BatchHeader]:
        """Kafka's analyzeAndValidateRecords + LogValidator checks that need only batch headers."""
        config = self.config
        end = len(records)
        headers: list[BatchHeader] = []
        position = 0
        while position < end:
            header = _parse_header(records, position)
            if position + header.size > end:
                raise CorruptRecordError(f"{end - position} trailing bytes do not form a whole batch (its length says {header.size})")
            if origin is AppendOrigin.CLIENT and header.base_offset != 0:
                raise InvalidRecordError(f"the baseOffset of the record batch in the append to {self._tp} should be 0, but it is {header.base_offset}")
            if origin is AppendOrigin.RAFT_LEADER and header.partition_leader_epoch != leader_epoch:
                raise InvalidRecordError(f"batch epoch {header.partition_leader_epoch} does not match the raft leader epoch {leader_epoch}")
            if header.size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"the record batch size in the append to {self._tp} is {header.size} bytes which exceeds the maximum configured value of {config.max_message_bytes}"
                )
            if not is_crc_valid(records, header):
                raise CorruptRecordError(f"record is corrupt (stored crc = {header.crc}) in topic partition {self._tp}")
            if header.records_count <= 0:
                raise InvalidRecordError(f"invalid reported count for record batch: {header.records_count} in topic partition {self._tp}")
            if header.records_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"inconsistent batch offset range [0, {header.last_offset_delta}] and count of records {header.records_count} in topic partition {self._tp}"
                )
            if not header.compression and header.records_count > (header.size - HEADER_SIZE) // _MIN_RECORD_SIZE:
                # Records are not decoded, but an uncompressed batch cannot hold more records than
                # fit in its bytes; a count beyond that would claim offsets for records that are not there.
                raise InvalidRecordError(f"batch of {header.size} bytes cannot hold the {header.records_count} records it claims")
            if origin is AppendOrigin.CLIENT:
                if header.is_control:
                    raise InvalidRecordError(f"clients are not allowed to write control records in topic partition {self._tp}")
                if header.has_producer_id and header.base_sequence < 0:
                    raise InvalidRecordError(f"invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id}")
            if config.message_timestamp_type == "CreateTime" and not header.is_control:
                self._validate_timestamps(header, now)
            if config.compacts and not header.is_control:
                self._validate_keys(records[position : position + header.size].toreadonly(), header)
            headers.append(header)
            position += header.size
        return headers

    def _validate_keys(self, batch: memoryview, header: BatchHeader) -> None:
        """Kafka's LogValidator.validateKey: a compacted topic refuses records without a key (the only
        place an append looks inside a batch, and only for compacted topics)."""
        keyless = keyless_record_indexes(header, batch)
        if keyless:
            message = f"Compacted topic cannot accept message without key in topic partition {self._tp}."
            errors = tuple((index, message) for index in keyless)
            shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')" for index, _ in errors[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors in total, and only showing the first three errors at most: [{shown}]",
                record_errors=errors,
            )

    def _validate_timestamps(self, header: BatchHeader, now: int) -> None:
        """message.timestamp.before/after.max.ms, checked on the batch bounds (records are not decoded).

        The max timestamp bounds every record from above; the base timestamp (the first
        record's) stands in for the oldest one.
        """
        config = self.config
        if header.max_timestamp != NO_TIMESTAMP and header.max_timestamp > now + config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} of a record in {self._tp} is more than message.timestamp.after.max.ms "
                f"({config.message_timestamp_after_max_ms}) ahead of the broker's time {now}"
            )
        if header.base_timestamp != NO_TIMESTAMP and header.base_timestamp < now - config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"timestamp {header.base_timestamp} of a record in {self._tp} is more than message.timestamp.before.max.ms "
                f"({config.message_timestamp_before_max_ms}) behind the broker's time {now}"
            )

    def append_as_follower(self, records: memoryview | bytes) -> LogAppendInfo:
        """Append batches whose offsets a leader assigned (replication, the Raft follower).

        A trailing partial batch (a fetch cut by max bytes) is dropped, as Kafka does; every
        whole batch must have a valid CRC and start past the previous one, the first at or past
        the log end (gaps are allowed: compacted logs replicate with them).
        """
        view = memoryview(records).cast("B")
        end = view.nbytes
        headers: list[BatchHeader] = []
        position = 0
        while end - position >= LOG_OVERHEAD:
            (length,) = _I32.unpack_from(view, position + 8)
            if length < _MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch length {length} at byte {position} is below the v2 header size")
            if position + LOG_OVERHEAD + length > end:
                break
            header = _parse_header(view, position)
            if not is_crc_valid(view, header):
                raise CorruptRecordError(f"record is corrupt (stored crc = {header.crc}) in topic partition {self._tp}")
            if headers and header.base_offset < headers[-1].next_offset:
                raise OffsetsOutOfOrderError(f"out of order offsets: batch at {header.base_offset} follows one ending at {headers[-1].last_offset}")
            headers.append(header)
            position += header.size
        if not headers:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        first, last = headers[0].base_offset, headers[-1].last_offset
        if first < self._log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"unexpected offset in append to {self._tp}: first offset {first} is less than the next offset {self._log_end_offset}", first, last
            )
        if position > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"message batch size is {position} bytes which exceeds the maximum configured segment size of {self.config.segment_bytes}")
        max_timestamp, offset_of_max_timestamp = NO_TIMESTAMP, -1
        for header in headers:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = header.max_timestamp, header.last_offset
        batches = [(h.size, h.last_offset, h.max_timestamp) for h in headers]
        producers: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for header in headers:
            if header.has_producer_id:
                self._analyze_producer_batch(view, header, header.base_offset, AppendOrigin.REPLICATION, producers, completed)
        self._append(view[:position], batches, first, last, max_timestamp, offset_of_max_timestamp, self._now_ms())
        self._update_producer_state(producers, completed)
        self.producer_state.map_end_offset = self._log_end_offset
        for header in headers:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        self._maybe_flush_by_messages()
        return LogAppendInfo(first, last, max_timestamp, offset_of_max_timestamp, -1, self.log_start_offset, sum(h.records_count for h in headers), position)

    def _append(
        self,
        records: memoryview,
        batches: list[tuple[int, int, int]],
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        now: int,
    ) -> None:
        segment = self.active_segment
        if segment.should_roll(self.config.segment_bytes, self.config.max_segment_ms, len(records), max_timestamp, last_offset, now):
            segment = self.roll(first_offset)
        try:
            segment.append(last_offset, max_timestamp, offset_of_max_timestamp, records, batches)
        except OSError as e:
            raise KafkaStorageError(f"error while appending to {segment}: {e}") from e
        self._log_end_offset = last_offset + 1

    def _maybe_flush_by_messages(self) -> None:
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        new_offset = max(expected_next_offset or 0, self._log_end_offset)
        active = self.active_segment
        if new_offset == active.base_offset:
            if active.size == 0:
                return active
            raise KafkaStorageError(f"trying to roll a new segment at {new_offset} for {self._tp} while a non-empty one starts there")
        if new_offset < active.base_offset:
            raise KafkaStorageError(f"trying to roll a new segment at {new_offset} below the active segment {active.base_offset} of {self._tp}")
        for suffix in (LOG_FILE_SUFFIX, *INDEX_SUFFIXES):
            stale = self.dir / (filename_prefix(new_offset) + suffix)
            if stale.exists():
                self._log.warning("log.stale_segment_file_deleted", file=stale.name)
                stale.unlink()
        active.on_become_inactive_segment()
        segment = LogSegment.open(self.dir, new_offset, self.config, self._now_ms())
        self._add_segment(segment)
        # The state covers everything below the new segment: after a crash only the segments
        # from here on are replayed.
        self.producer_state.take_snapshot()
        self._flush_rolled_up_to = max(self._flush_rolled_up_to or 0, new_offset)
        if self._listener is not None:
            self._listener.on_roll(self)
        self._log.info("log.rolled", segment=new_offset)
        return segment

    # -- read -------------------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
        """Regions holding the batches from ``start_offset``, never reaching ``max_offset`` (exclusive).

        At most one segment's region is returned; a caller wanting more reads again from the
        offset after it. Raises OffsetOutOfRangeError below the log start or past the log end.
        """
        end = self._log_end_offset
        if start_offset > end or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"received request for offset {start_offset} for partition {self._tp}, but we only have log segments in the range {self.log_start_offset} to {end}"
            )
        upper = end if max_offset is None else min(max_offset, end)
        if start_offset >= upper:
            return FetchDataInfo(start_offset)
        i = self._floor_index(start_offset)
        while i < len(self.segments):
            segment = self.segments[i]
            segment_end = self._base_offsets[i + 1] if i + 1 < len(self.segments) else end
            max_position = segment.size
            if upper < segment_end:
                found = segment.translate_offset(upper)
                if found is not None:
                    max_position = found.position
            info = segment.read(start_offset, max_length, max_position, min_one_message)
            if info is not None:
                return info
            i += 1
        return FetchDataInfo(start_offset)

    def batches(self, start_offset: int, end_offset: int | None = None, chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every whole batch holding offsets from ``start_offset`` up to ``end_offset`` (the log end by default).

        For the loaders that replay a log into memory (the metadata image, group
        coordinators); it copies the bytes, so it is never the fetch path. The first batch may
        start below ``start_offset``: callers skip the records they do not want.
        """
        offset = max(start_offset, self.log_start_offset)
        end = self._log_end_offset if end_offset is None else end_offset
        while offset < end:
            info = self.read(offset, chunk_bytes, end, True)
            before = offset
            for region in info.regions:
                data = memoryview(os.pread(region.fd, region.length, region.position))
                for header in iter_headers(data):
                    yield header, data[header.position : header.position + header.size]
                    offset = max(offset, header.next_offset)
            if offset == before:
                return

    # -- offsets by time (ListOffsets) ------------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> tuple[int, int, int] | None:
        """Kafka's fetchOffsetByTimestamp: (timestamp, offset, leader epoch), -1 for unknown parts.

        -2 EARLIEST and -4 EARLIEST_LOCAL give the log start offset, -1 LATEST the log end,
        -5 LATEST_TIERED and -6 EARLIEST_PENDING_UPLOAD give offset -1 (no tiered storage, as
        Kafka answers without it). -3 MAX_TIMESTAMP gives the first record carrying the
        largest timestamp. Any other value finds the first record whose timestamp is >= it,
        at or past the log start; None when there is none.
        """
        cache = self.leader_epoch_cache
        if target_timestamp == EARLIEST_TIMESTAMP:
            first = cache.earliest_entry
            epoch = first.epoch if first is not None and first.start_offset <= self.log_start_offset else UNDEFINED_EPOCH
            return NO_TIMESTAMP, self.log_start_offset, epoch
        if target_timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return NO_TIMESTAMP, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset)
        if target_timestamp == LATEST_TIMESTAMP:
            return NO_TIMESTAMP, self._log_end_offset, cache.latest_epoch
        if target_timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return NO_TIMESTAMP, -1, UNDEFINED_EPOCH
        if target_timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record()
        for segment in self.segments:
            if segment.largest_timestamp >= target_timestamp:
                return segment.find_offset_by_timestamp(target_timestamp, self.log_start_offset)
        return None

    def _max_timestamp_record(self) -> tuple[int, int, int] | None:
        best = self.segments[0]
        for segment in self.segments[1:]:
            if segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        timestamp, offset = best.read_max_timestamp_and_offset_so_far()
        position = best.offset_index.lookup(offset).position
        for batch_position, header in best.batch_headers(position):
            if header.max_timestamp == timestamp:
                for record_offset, record_timestamp in record_timestamps(header, best.read_batch(batch_position, header.size)):
                    if record_timestamp == timestamp:
                        return timestamp, record_offset, header.partition_leader_epoch
                return None
        return None

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), or (-1, -1) when unknown."""
        epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self._log_end_offset)
        if offset == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return epoch, offset

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept between the log start and the log end; returns it."""
        self.high_watermark = min(max(offset, self.log_start_offset), self._log_end_offset)
        return self.high_watermark

    # -- retention ----------------------------------------------------------------------------------------------

    def delete_old_segments(self, high_watermark: int | None = None) -> int:
        """Delete segments past retention.ms / retention.bytes (when cleanup.policy has delete)
        and those wholly below the log start offset. Returns how many were deleted.

        Nothing at or above ``high_watermark`` (default: the log end) is deleted. When every
        segment is due, the log rolls first so it keeps an empty active segment.
        """
        upper = self._log_end_offset if high_watermark is None else high_watermark
        deleted = 0
        if self.config.deletes:
            deleted += self._delete_retention_ms_breached(upper)
            deleted += self._delete_retention_size_breached(upper)
        deleted += self._delete_log_start_offset_breached(upper)
        return deleted

    def _delete_retention_ms_breached(self, upper: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        now = self._now_ms()
        return self._delete_segments_while(lambda segment, _next: now - segment.largest_timestamp > retention_ms, upper, "retention.ms")

    def _delete_retention_size_breached(self, upper: int) -> int:
        retention_bytes = self.config.retention_bytes
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return self._delete_segments_while(breached, upper, "retention.bytes")

    def _delete_log_start_offset_breached(self, upper: int) -> int:
        return self._delete_segments_while(
            lambda _segment, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, upper, "log start offset"
        )

    def _delete_segments_while(self, predicate: Callable[[LogSegment, LogSegment | None], bool], upper: int, reason: str) -> int:
        deletable: list[LogSegment] = []
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper_bound = nxt.base_offset if nxt is not None else self._log_end_offset
            last_and_empty = nxt is None and segment.size == 0
            if upper >= upper_bound and not last_and_empty and predicate(segment, nxt):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self.roll()
        new_start = self.segments[len(deletable)].base_offset
        self._increment_log_start_offset(new_start)
        self._remove_segments(deletable)
        self._schedule_delete(deletable)
        self.producer_state.delete_snapshots_before(new_start)
        self._log.info("log.segments_deleted", reason=reason, count=len(deletable), log_start_offset=self.log_start_offset)
        return len(deletable)

    def maybe_increment_log_start_offset(self, new_offset: int) -> None:
        """DeleteRecords: move the log start forward (the broker checks it against the high watermark).

        The segments it leaves wholly behind go at the next ``delete_old_segments``.
        """
        if new_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(f"cannot increment the log start offset of {self._tp} to {new_offset} past the log end offset {self._log_end_offset}")
        self._increment_log_start_offset(new_offset)

    def _increment_log_start_offset(self, new_offset: int) -> None:
        if new_offset <= self.log_start_offset:
            return
        self.log_start_offset = new_offset
        self.recovery_point = max(self.recovery_point, new_offset)
        self.leader_epoch_cache.truncate_from_start(new_offset)

    def delete_pending_segments(self, now_ms: int | None = None) -> int:
        """Close and unlink deleted segments whose file.delete.delay.ms has passed; returns how many."""
        now = self._now_ms() if now_ms is None else now_ms
        due = [segment for deadline, segment in self._pending_deletes if deadline <= now]
        self._pending_deletes = [(deadline, segment) for deadline, segment in self._pending_deletes if deadline > now]
        for segment in due:
            segment.delete()
        return len(due)

    # -- truncation (replication) -----------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything from ``target_offset`` on (a follower diverged); False when nothing was past it."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self._tp} to a negative offset {target_offset}")
        if target_offset >= self._log_end_offset:
            return False
        self._log.info("log.truncating", target_offset=target_offset, log_end_offset=self._log_end_offset)
        if self.segments[0].base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        doomed = [s for s in self.segments if s.base_offset > target_offset]
        self._remove_segments(doomed)
        self._schedule_delete(doomed)
        self.active_segment.truncate_to(target_offset, self._now_ms())
        self._log_end_offset = target_offset
        self.high_watermark = min(self.high_watermark, target_offset)
        self.recovery_point = min(self.recovery_point, target_offset)
        self.leader_epoch_cache.truncate_from_end(target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        self._load_producer_state(target_offset)
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        self._log.info("log.truncate_fully", new_offset=new_offset)
        doomed = list(self.segments)
        self._remove_segments(doomed)
        self._schedule_delete(doomed)
        self._add_segment(LogSegment.open(self.dir, new_offset, self.config, self._now_ms()))
        self._log_end_offset = new_offset
        self.high_watermark = new_offset
        self.recovery_point = new_offset
        self.log_start_offset = new_offset
        self._flush_rolled_up_to = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    # -- durability and lifecycle ------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding [recovery point, up_to) and move the recovery point to ``up_to``
        (default: the log end)."""
        self.partition_metadata_file.maybe_flush()
        self.leader_epoch_cache.flush()
        offset = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
        self.last_flush_ms = self._now_ms()
        if offset > self.recovery_point:
            start = self._floor_index(self.recovery_point)
            flushed = [s for s in self.segments[start:] if s.base_offset < offset]
            for segment in flushed:
                segment.flush()
            if any(s.base_offset >= self.recovery_point for s in flushed):
                fsync_dir(self.dir)
            self.recovery_point = offset
        rolled = self._flush_rolled_up_to
        if rolled is not None and (rolled <= self.recovery_point or rolled > self._log_end_offset):
            self._flush_rolled_up_to = None

    def flush_rolled_segments(self) -> bool:
        """Flush segments rolled since the last flush (Kafka schedules this right after a roll)."""
        if self._flush_rolled_up_to is None:
            return False
        self.flush(self._flush_rolled_up_to)
        return True

    def close(self) -> None:
        """Snapshot the producer state at the log end, trim and close every segment; deleted ones still pending are unlinked now."""
        self.producer_state.take_snapshot(sync=True)
        for _, segment in self._pending_deletes:
            segment.delete()
        self._pending_deletes = []
        for segment in self.segments:
            segment.close()
        self.leader_epoch_cache.flush()
        self.partition_metadata_file.maybe_flush()

    def close_handlers(self) -> None:
        """Release every fd and map without writing (the log is being deleted)."""
        for _, segment in self._pending_deletes:
            segment.close_handlers()
        for segment in self.segments:
            segment.close_handlers()

    def delete(self) -> None:
        self.close_handlers()
        self._pending_deletes = []
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def _tp(self) -> str:
        return f"{self.topic_partition[0]}-{self.topic_partition[1]}"

    def __repr__(self) -> str:
        return f"Log({self._tp}, log_start_offset={self.log_start_offset}, log_end_offset={self._log_end_offset}, segments={len(self.segments)})"


def _parse_header(buf: memoryview, position: int) -> BatchHeader:
    # Like Kafka, a size below the smallest legacy message is corruption whatever the magic byte says.
    if len(buf) - position >= LOG_OVERHEAD and _I32.unpack_from(buf, position + 8)[0] < _LEGACY_RECORD_OVERHEAD:
        raise CorruptRecordError(f"record size {_I32.unpack_from(buf, position + 8)[0]} is less than the minimum record overhead")
    try:
        return read_header(buf, position)
    except UnsupportedMagic as e:
        raise UnsupportedForMessageFormatError(str(e)) from None
    except InvalidBatch as e:
        raise CorruptRecordError(str(e)) from None


def _write_swap_end(path: Path, end_offset: int) -> None:
    with open(path, "w") as f:
        f.write(str(end_offset))
        f.flush()
        os.fsync(f.fileno())


def _read_swap_end(path: Path) -> int:
    """The end offset a swap recorded; -1 when the file is missing or unreadable (the swap's own end then)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -1


def _offset_or(path: Path, default: float) -> float:
    try:
        return offset_from_file(path)
    except ValueError:
        return default
