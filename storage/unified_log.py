"""UnifiedLog: one partition's log as replication sees it (Kafka's UnifiedLog, no tiered storage).

It owns what is more than segments: the log start offset, the high watermark, the leader epoch
cache, the producer state and the last stable offset. Appends are checked by the LogValidator;
a leader's then get their offsets written into the caller's buffer, a follower's keep the
leader's. The bytes go to disk through LocalLog with one write; reads answer with regions of
segment files. Opening a directory is the LogLoader's job.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Concatenate, Iterator, ParamSpec, Protocol, Sequence, TypeVar

import structlog

from protocol.record_batch import NO_TIMESTAMP, BatchHeader, iter_headers, set_base_offset, set_log_append_time, set_partition_leader_epoch
from storage.batch_records import record_timestamps
from storage.errors import InconsistentTopicIdError, InvalidRecordError, OffsetOutOfRangeError, RecordBatchTooLargeError, UnexpectedAppendOffsetError
from storage.fetch_data_info import FetchDataInfo
from storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.local_log import LocalLog
from storage.log_config import LogConfig
from storage.log_dir_failure_channel import LogDirFailureChannel
from storage.log_loader import LogLoader, rebuild_producer_state
from storage.log_segment import LogSegment
from storage.log_validator import LogValidator
from storage.partition_metadata import PARTITION_METADATA_FILE, PartitionMetadataFile
from storage.producer_state_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS, AppendOrigin, CompletedTxn, ProducerAppendInfo, ProducerStateManager, VerificationGuard

log = structlog.get_logger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


P = ParamSpec("P")
R = TypeVar("R")


def _handles_io(what: str) -> Callable[[Callable[Concatenate[UnifiedLog, P], R]], Callable[Concatenate[UnifiedLog, P], R]]:
    """Kafka's UnifiedLog.maybeHandleIOException around a method: on an offline log dir it fails
    fast, and an OSError takes the dir offline (LogDirFailureChannel) and raises KafkaStorageError."""

    def decorate(method: Callable[Concatenate[UnifiedLog, P], R]) -> Callable[Concatenate[UnifiedLog, P], R]:
        @functools.wraps(method)
        def guarded(self: UnifiedLog, *args: P.args, **kwargs: P.kwargs) -> R:
            channel = self.failure_channel
            channel.check_online(self.parent_dir)
            try:
                return method(self, *args, **kwargs)
            except OSError as e:
                raise channel.io_failed(self.parent_dir, f"Error while {what} {self._tp} in dir {self.parent_dir}", e) from e

        return guarded

    return decorate


class LogListener(Protocol):
    """Told when a log gets work for the periodic jobs, so that they visit the logs that have
    some rather than every log each time (a node may hold tens of thousands)."""

    def on_roll(self, plog: UnifiedLog) -> None:
        """A segment was rolled: the ones before it await their fsync."""

    def on_segments_scheduled_for_deletion(self, plog: UnifiedLog) -> None:
        """Segments were renamed to .deleted: they await file.delete.delay.ms."""

    def on_config_changed(self, plog: UnifiedLog) -> None:
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


class UnifiedLog:
    def __init__(
        self,
        local_log: LocalLog,
        log_start_offset: int,
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        partition_metadata_file: PartitionMetadataFile,
        topic_id: uuid.UUID | None,
        listener: LogListener | None,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        self._local = local_log
        # The log dir this partition's folder is in: what an I/O error takes offline.
        self.parent_dir = local_log.dir.parent
        # Kafka's tests give each log a channel of its own; a broker shares one across its logs.
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self.log_start_offset = log_start_offset
        # Below it every record is on enough replicas to survive an election; the partition
        # leader moves it, a follower takes its leader's, and replication-offset-checkpoint keeps it.
        self.high_watermark = 0
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.partition_metadata_file = partition_metadata_file
        self.topic_id = topic_id
        self.topic_partition = local_log.topic_partition
        self._tp = local_log.tp
        self._validator = LogValidator(local_log.tp)
        self._now_ms = local_log.now_ms
        self._listener = listener
        self._log = log.bind(topic=self.topic_partition[0], partition=self.topic_partition[1])

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
        failure_channel: LogDirFailureChannel | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> UnifiedLog:
        try:
            directory.mkdir(parents=True)
            created = True
        except FileExistsError:
            created = False
        local = LocalLog(directory, config, now_ms)
        epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT_FILE, created=created)
        producer_state = ProducerStateManager(local.tp, directory, created=created, producer_id_expiration_ms=producer_id_expiration_ms)
        metadata_file = PartitionMetadataFile(directory / PARTITION_METADATA_FILE)
        try:
            if created:
                # A folder made just now holds nothing to load, recover or replay: one empty segment.
                local.add_segment(LogSegment.open(directory, log_start_offset, config, now_ms()))
                local.update_log_end_offset(log_start_offset)
                local.recovery_point = log_start_offset
                producer_state.truncate_fully_and_start_at(log_start_offset)
                if topic_id is not None:
                    metadata_file.record(topic_id)
                log.debug("log.created", topic=local.topic_partition[0], partition=local.topic_partition[1], log_start_offset=log_start_offset)
            else:
                topic_id = _check_topic_id(metadata_file, topic_id, directory)
                loader = LogLoader(
                    local,
                    epochs,
                    producer_state,
                    now_ms,
                    had_clean_shutdown=had_clean_shutdown,
                    recovery_point=recovery_point,
                    log_start_offset=log_start_offset,
                )
                log_start_offset = loader.load()
        except BaseException:
            local.close_handlers()
            raise
        return cls(local, log_start_offset, epochs, producer_state, metadata_file, topic_id, listener, failure_channel)

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        self.topic_id = topic_id
        self.partition_metadata_file.record(topic_id)

    # -- what LocalLog holds ----------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._local.dir

    @property
    def config(self) -> LogConfig:
        return self._local.config

    def update_config(self, config: LogConfig) -> None:
        self._local.config = config
        if self._listener is not None:
            self._listener.on_config_changed(self)

    @property
    def segments(self) -> list[LogSegment]:
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

    @property
    def unflushed_messages(self) -> int:
        return self._local.log_end_offset - self._local.recovery_point

    @property
    def pending_deletes(self) -> int:
        return self._local.pending_deletes

    # -- append ---------------------------------------------------------------------------------------------

    @_handles_io("appending records to")
    def append_as_leader(
        self, records: memoryview, leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT, verification_guard: VerificationGuard | None = None
    ) -> LogAppendInfo:
        """Validate the batches of a produce request, assign their offsets in place, write them once.

        ``records`` must be writable (a memoryview over a bytearray): baseOffset,
        partitionLeaderEpoch and, for LogAppendTime topics, the timestamp and CRC are
        rewritten in it. Nothing is written when any batch is invalid. ``verification_guard``
        (KIP-890): what the produce path's transaction verification gave it, None when it
        does not verify.
        """
        if records.readonly:
            records = memoryview(bytearray(records))
        config = self._local.config
        now = self._now_ms()
        headers = self._validator.validate_as_leader(records, config, leader_epoch, origin, now)
        if not headers:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        valid_bytes = len(records)
        if valid_bytes > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"message batch size is {valid_bytes} bytes in append to partition {self._tp} which exceeds the maximum configured segment size of {config.segment_bytes}"
            )
        log_append_time = now if config.message_timestamp_type == "LogAppendTime" else -1
        first_offset = next_offset = self._local.log_end_offset
        max_timestamp, offset_of_max_timestamp = NO_TIMESTAMP, -1
        records_count = 0
        batches: list[tuple[int, int, int]] = []
        producers: dict[int, ProducerAppendInfo] | None = None
        completed: list[CompletedTxn] = []
        # One pass assigns offsets in place and checks producer state: the produce hot path.
        for header in headers:
            if header.producer_id >= 0:
                if producers is None:
                    producers = {}
                duplicate = self._analyze_producer_batch(records, header, next_offset, origin, producers, completed, verification_guard)
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
        self.producer_state.map_end_offset = self._local.log_end_offset
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._maybe_flush_by_messages()
        return LogAppendInfo(
            first_offset, next_offset - 1, max_timestamp, offset_of_max_timestamp, log_append_time, self.log_start_offset, records_count, valid_bytes
        )

    @_handles_io("appending records as a follower to")
    def append_as_follower(self, records: memoryview | bytes) -> LogAppendInfo:
        """Append batches whose offsets a leader assigned (replication, the Raft follower).

        A trailing partial batch (a fetch cut by max bytes) is dropped, as Kafka does; the
        first batch must start at or past the log end.
        """
        view = memoryview(records).cast("B")
        headers, position = self._validator.validate_as_follower(view)
        if not headers:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0, 0)
        first, last = headers[0].base_offset, headers[-1].last_offset
        log_end_offset = self._local.log_end_offset
        if first < log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"unexpected offset in append to {self._tp}: first offset {first} is less than the next offset {log_end_offset}", first, last
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
                self._analyze_producer_batch(view, header, header.base_offset, AppendOrigin.REPLICATION, producers, completed, None)
        self._append(view[:position], batches, first, last, max_timestamp, offset_of_max_timestamp, self._now_ms())
        self._update_producer_state(producers, completed)
        self.producer_state.map_end_offset = self._local.log_end_offset
        for header in headers:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        self._maybe_flush_by_messages()
        return LogAppendInfo(first, last, max_timestamp, offset_of_max_timestamp, -1, self.log_start_offset, sum(h.records_count for h in headers), position)

    def _analyze_producer_batch(
        self,
        records: memoryview,
        header: BatchHeader,
        base_offset: int,
        origin: AppendOrigin,
        producers: dict[int, ProducerAppendInfo],
        completed: list[CompletedTxn],
        verification_guard: VerificationGuard | None,
    ) -> LogAppendInfo | None:
        """ProducerStateManager.analyze_batch on the append's bytes: a client's retry is answered
        with where its batch went (the returned info), and nothing is appended."""
        producer_id = header.producer_id
        position = header.position
        try:
            duplicate = self.producer_state.analyze_batch(
                header, lambda: records[position : position + header.size], base_offset, origin, producers, completed, verification_guard
            )
        except ValueError as e:
            raise InvalidRecordError(f"invalid control batch from producer {producer_id} in {self._tp}: {e}") from None
        if duplicate is None:
            return None
        self._log.debug("log.duplicate_batch", producer_id=producer_id, first_sequence=header.base_sequence, offset=duplicate.first_offset)
        return LogAppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset, -1, self.log_start_offset, 0, 0)

    def _update_producer_state(self, producers: dict[int, ProducerAppendInfo], completed: list[CompletedTxn]) -> None:
        state = self.producer_state
        for info in producers.values():
            state.update(info)
        for txn in completed:
            self.active_segment.update_txn_index(txn, state.complete_txn(txn))

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
        # As Kafka's append, which begins with maybeFlushMetadataFile: once a log holds records its
        # topic id is on disk. A Kafka node opening the dir after a crash sets a log without one
        # aside as a stray, its records with it. A no-op but for a log's first append (the
        # log-flush job writes the file of a log nobody appends to).
        self.partition_metadata_file.maybe_flush()
        local = self._local
        config = local.config
        if local.segments[-1].should_roll(config.segment_bytes, config.max_segment_ms, len(records), max_timestamp, last_offset, now):
            self.roll(first_offset)
        local.append(last_offset, max_timestamp, offset_of_max_timestamp, records, batches)

    def _maybe_flush_by_messages(self) -> None:
        if self.unflushed_messages >= self._local.config.flush_messages:
            self.flush()

    @_handles_io("rolling a segment of")
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        before = self._local.segments[-1]
        segment = self._local.roll(expected_next_offset)
        if segment is before:
            return segment
        # The state covers everything below the new segment: after a crash only the segments
        # from here on are replayed.
        self.producer_state.take_snapshot()
        if self._listener is not None:
            self._listener.on_roll(self)
        return segment

    # -- read -------------------------------------------------------------------------------------------------

    @_handles_io("reading")
    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
        """Regions holding the batches from ``start_offset``, never reaching ``max_offset`` (exclusive).

        At most one segment's region is returned; a caller wanting more reads again from the
        offset after it. Raises OffsetOutOfRangeError below the log start or past the log end.
        """
        return self._local.read(start_offset, max_length, max_offset, min_one_message, self.log_start_offset)

    def batches(self, start_offset: int, end_offset: int | None = None, chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every whole batch holding offsets from ``start_offset`` up to ``end_offset`` (the log end by default).

        For the loaders that replay a log into memory (the metadata image, group
        coordinators); it copies the bytes, so it is never the fetch path. The first batch may
        start below ``start_offset``: callers skip the records they do not want.
        """
        offset = max(start_offset, self.log_start_offset)
        end = self._local.log_end_offset if end_offset is None else end_offset
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

    def fetch_upper_bound(self, fetch_offset: int) -> int:
        """Where the segment a fetch from ``fetch_offset`` reads ends (the next segment's base, or the log end)."""
        return self._local.fetch_upper_bound(fetch_offset)

    # -- transactions -------------------------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when every transaction is complete."""
        return self.producer_state.first_unstable_offset

    @property
    def last_stable_offset(self) -> int:
        """Below it every record is replicated and every transaction decided, its marker replicated:
        min(first unstable offset, high watermark)."""
        first_unstable = self.producer_state.first_unstable_offset
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction overlapping [start_offset, upper_offset)."""
        return self._local.collect_aborted_transactions(start_offset, upper_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired_producers(now_ms, expiration_ms)

    # -- offsets by time and epoch (ListOffsets, OffsetForLeaderEpoch) ---------------------------------------

    @_handles_io("fetching offset by timestamp for")
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
            return NO_TIMESTAMP, self._local.log_end_offset, cache.latest_epoch
        if target_timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return NO_TIMESTAMP, -1, UNDEFINED_EPOCH
        if target_timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record()
        for segment in self._local.segments:
            if segment.largest_timestamp >= target_timestamp:
                return segment.find_offset_by_timestamp(target_timestamp, self.log_start_offset)
        return None

    def _max_timestamp_record(self) -> tuple[int, int, int] | None:
        segments = self._local.segments
        best = segments[0]
        for segment in segments[1:]:
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
        epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self._local.log_end_offset)
        if offset == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return epoch, offset

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept between the log start and the log end; returns it."""
        self.high_watermark = min(max(offset, self.log_start_offset), self._local.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return self.high_watermark

    # -- retention ----------------------------------------------------------------------------------------------

    @_handles_io("deleting segments for")
    def delete_old_segments(self) -> int:
        """Delete segments past retention.ms / retention.bytes (when cleanup.policy has delete)
        and those wholly below the log start offset. Returns how many were deleted.

        Only segments wholly below the high watermark go: what a new leader may still need, or
        a consumer has not been allowed to read, is never deleted. When every segment is due,
        the log rolls first so it keeps an empty active segment.
        """
        upper = self.high_watermark
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
        segments = self._local.segments
        deletable: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper_bound = nxt.base_offset if nxt is not None else self._local.log_end_offset
            last_and_empty = nxt is None and segment.size == 0
            if upper >= upper_bound and not last_and_empty and predicate(segment, nxt):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self.roll()
        new_start = self._local.segments[len(deletable)].base_offset
        self._increment_log_start_offset(new_start)
        self._delete_segments(deletable)
        self.producer_state.delete_snapshots_before(new_start)
        self._log.info("log.segments_deleted", reason=reason, count=len(deletable), log_start_offset=self.log_start_offset)
        return len(deletable)

    @_handles_io("increasing log start offset for")
    def maybe_increment_log_start_offset(self, new_offset: int) -> None:
        """DeleteRecords, a follower taking its leader's, the metadata log's snapshots: move the log
        start forward, never past the high watermark.

        The segments it leaves wholly behind go at the next ``delete_old_segments``.
        """
        if new_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset of {self._tp} to {new_offset} since it is larger than the high watermark {self.high_watermark}"
            )
        self._increment_log_start_offset(new_offset)

    def _increment_log_start_offset(self, new_offset: int) -> None:
        if new_offset <= self.log_start_offset:
            return
        self.log_start_offset = new_offset
        self._local.recovery_point = max(self._local.recovery_point, new_offset)
        self.leader_epoch_cache.truncate_from_start(new_offset)

    def _delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        self._local.remove_and_delete_segments(doomed)
        self._deletion_scheduled(doomed)

    def _deletion_scheduled(self, doomed: Sequence[LogSegment]) -> None:
        if doomed and self._listener is not None:
            self._listener.on_segments_scheduled_for_deletion(self)

    @_handles_io("deleting pending segments for")
    def delete_pending_segments(self, now_ms: int | None = None) -> int:
        """Close and unlink deleted segments whose file.delete.delay.ms has passed; returns how many."""
        return self._local.delete_pending_segments(now_ms)

    # -- truncation (replication) and cleaning ------------------------------------------------------------------

    @_handles_io("truncating")
    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything from ``target_offset`` on (a follower diverged); False when nothing was past it."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self._tp} to a negative offset {target_offset}")
        if target_offset >= self._local.log_end_offset:
            # Nothing to cut, but an epoch this replica marked at its log end when it led, and
            # never wrote a record in, must go: left behind, it is the follower's last fetched
            # epoch, which the leader never had, and every fetch diverges again (as Kafka's
            # UnifiedLog.truncateTo does).
            self.leader_epoch_cache.truncate_from_end(self._local.log_end_offset)
            return False
        self._log.info("log.truncating", target_offset=target_offset, log_end_offset=self._local.log_end_offset)
        if self._local.segments[0].base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        self._deletion_scheduled(self._local.truncate_to(target_offset))
        self.high_watermark = min(self.high_watermark, target_offset)
        self.leader_epoch_cache.truncate_from_end(target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        rebuild_producer_state(self.producer_state, self._local, self.log_start_offset, target_offset, self._now_ms())
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return True

    @_handles_io("truncating the entire log")
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        self._log.info("log.truncate_fully", new_offset=new_offset)
        self._deletion_scheduled(self._local.truncate_fully_and_start_at(new_offset))
        self.high_watermark = new_offset
        self.log_start_offset = new_offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    @_handles_io("replacing cleaned segments of")
    def replace_cleaned_segments(self, old: Sequence[LogSegment], end_offset: int, on_step: Callable[[str], None] | None = None) -> LogSegment:
        """Swap the log cleaner's ``.cleaned`` segment in for ``old`` (see LocalLog.replace_segments)."""
        new = self._local.replace_segments(old, end_offset, on_step)
        self._deletion_scheduled(old)
        return new

    # -- durability and lifecycle ------------------------------------------------------------------------------

    @_handles_io("flushing")
    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding [recovery point, up_to) and move the recovery point to ``up_to``
        (default: the log end)."""
        self.partition_metadata_file.maybe_flush()
        self.leader_epoch_cache.flush()
        self._local.flush(self._local.log_end_offset if up_to is None else up_to)

    @_handles_io("flushing rolled segments of")
    def flush_rolled_segments(self) -> bool:
        """Flush segments rolled since the last flush (Kafka schedules this right after a roll)."""
        rolled = self._local.rolled_unflushed_up_to
        if rolled is None:
            return False
        self.flush(rolled)
        return True

    def close(self) -> None:
        """Snapshot the producer state at the log end, trim and close every segment; deleted ones still pending are unlinked now."""
        self.producer_state.take_snapshot(sync=True)
        self._local.close()
        self.leader_epoch_cache.flush()
        self.partition_metadata_file.maybe_flush()

    def close_handlers(self) -> None:
        """Release every fd and map without writing (the log is being deleted)."""
        self._local.close_handlers()

    def delete(self) -> None:
        self._local.delete()

    def __repr__(self) -> str:
        return f"UnifiedLog({self._tp}, log_start_offset={self.log_start_offset}, log_end_offset={self.log_end_offset}, segments={len(self.segments)})"


def _check_topic_id(metadata_file: PartitionMetadataFile, topic_id: uuid.UUID | None, directory: Path) -> uuid.UUID | None:
    """The topic id the directory's partition.metadata names, refusing one that differs from ``topic_id``."""
    stored = metadata_file.read()
    if stored is not None and topic_id is not None and stored != topic_id:
        raise InconsistentTopicIdError(f"{directory} belongs to topic id {stored}, not {topic_id}")
    if topic_id is None:
        return stored
    if stored is None:
        metadata_file.record(topic_id)
    return topic_id
