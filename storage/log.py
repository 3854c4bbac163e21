"""Log: one partition's segments, appended to as leader, read as file regions, trimmed by retention."""

from __future__ import annotations

import base64
import bisect
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import structlog

from protocol.record_batch import (
    InvalidBatch,
    UnsupportedMagic,
    is_crc_valid,
    iter_headers,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from protocol.records import iter_records
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log_config import LogConfig
from storage.log_segment import FileRegion, LogSegment

log = structlog.get_logger()

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    records_count: int
    valid_bytes: int


@dataclass(slots=True)
class FetchDataInfo:
    fetch_offset: int
    regions: list[FileRegion] = field(default_factory=list)


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    topic, _, partition = directory.name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{directory.name} is not a <topic>-<partition> directory")
    return topic, int(partition)


class Log:
    def __init__(self, directory: Path, config: LogConfig, topic_id: uuid.UUID | None, now_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self.topic_id = topic_id
        self.topic_partition = parse_topic_partition(directory)
        self._now_ms = now_ms
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self._pending_deletes: list[LogSegment] = []
        self.leader_epoch_cache = LeaderEpochCache(directory / "leader-epoch-checkpoint")
        self._log = log.bind(topic=self.topic_partition[0], partition=self.topic_partition[1])

    # -- opening and recovery ----------------------------------------------------------

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
    ) -> "Log":
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config, topic_id, now_ms)
        plog._load_partition_metadata()
        plog._load_segments(recovery_point, had_clean_shutdown)
        plog.log_start_offset = max(log_start_offset, plog.segments[0].base_offset)
        plog.recovery_point = min(max(recovery_point, plog.log_start_offset), plog.log_end_offset)
        if had_clean_shutdown:
            plog.recovery_point = plog.log_end_offset
        plog.leader_epoch_cache.truncate_from_end(plog.log_end_offset)
        return plog

    def _load_partition_metadata(self) -> None:
        path = self.dir / "partition.metadata"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("topic_id:"):
                    raw = line.split(":", 1)[1].strip()
                    stored = uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
                    if self.topic_id is None:
                        self.topic_id = stored
        if self.topic_id is not None:
            encoded = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
            text = f"version: 0\ntopic_id: {encoded}\n"
            if not path.exists() or path.read_text() != text:
                tmp = path.with_name("partition.metadata.tmp")
                tmp.write_text(text)
                os.replace(tmp, path)

    def _load_segments(self, recovery_point: int, had_clean_shutdown: bool) -> None:
        for path in self.dir.iterdir():
            if path.suffix in (".deleted", ".cleaned", ".tmp"):
                path.unlink()
            elif path.suffix == ".swap":
                os.replace(path, path.with_suffix(""))
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        if not bases:
            bases = [0]
        now = self._now_ms()
        for base in bases:
            self._add_segment(LogSegment(self.dir, base, self.config.index_interval_bytes, self.config.max_index_entries, now))
        for i, segment in enumerate(self.segments):
            needs_recovery = not had_clean_shutdown and (i + 1 == len(self.segments) or self.segments[i + 1].base_offset > recovery_point)
            if needs_recovery or not segment.offset_index.sane(segment.size) or (segment.size and len(segment.offset_index) == 0 and segment.size > self.config.index_interval_bytes):
                truncated = segment.recover()
                if truncated:
                    self._log.warning("log.recovery.truncated", segment=segment.base_offset, bytes=truncated)
                    for later in self.segments[i + 1 :]:
                        later.close()
                        later.delete_files()
                    del self.segments[i + 1 :]
                    del self._base_offsets[i + 1 :]
                    break
            else:
                segment.load_tail()
        if not had_clean_shutdown:
            self._log.info("log.recovered", log_end_offset=self.log_end_offset, segments=len(self.segments))

    def _add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    # -- properties ---------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # -- append ---------------------------------------------------------------------------

    def append_as_leader(self, records: memoryview, leader_epoch: int) -> LogAppendInfo:
        """Validate the batches from their headers, assign offsets in place, write once."""
        config = self.config
        headers = []
        position = 0
        end = len(records)
        try:
            for header in iter_headers(records):
                headers.append(header)
                position = header.position + header.size
            if position != end:
                read_header(records, position)
                raise CorruptRecordError(f"{end - position} trailing bytes do not form a whole batch")
        except UnsupportedMagic as e:
            raise UnsupportedForMessageFormatError(str(e)) from None
        except InvalidBatch as e:
            raise CorruptRecordError(str(e)) from None
        if not headers:
            raise CorruptRecordError("no record batch in the request")
        for header in headers:
            if header.size > config.max_message_bytes:
                raise RecordTooLargeError(f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}")
            if header.records_count != header.last_offset_delta + 1:
                raise InvalidRecordError("record count does not match the last offset delta")
            if not is_crc_valid(records, header):
                raise CorruptRecordError("record batch CRC mismatch")

        now = self._now_ms()
        log_append_time = now if config.message_timestamp_type == "LogAppendTime" else -1
        next_offset = self.log_end_offset
        first_offset = next_offset
        max_ts, offset_of_max = -1, first_offset
        count = 0
        batches: list[tuple[int, int, int, int]] = []
        for header in headers:
            set_base_offset(records, header, next_offset)
            set_partition_leader_epoch(records, header, leader_epoch)
            batch_max_ts = header.max_timestamp
            if log_append_time >= 0:
                set_log_append_time(records, header, log_append_time)
                batch_max_ts = log_append_time
            last = next_offset + header.last_offset_delta
            if batch_max_ts > max_ts:
                max_ts, offset_of_max = batch_max_ts, last
            batches.append((header.position, last, batch_max_ts, header.size))
            count += header.records_count
            next_offset = last + 1

        self._maybe_roll(end, now)
        self.active_segment.append(records, batches, now)
        self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self.unflushed_messages += count
        if self.unflushed_messages >= config.flush_messages:
            self.flush()
        return LogAppendInfo(first_offset, next_offset - 1, max_ts, offset_of_max, log_append_time, self.log_start_offset, count, end)

    def append_as_follower(self, records: memoryview) -> LogAppendInfo:
        """Append batches whose offsets were assigned by a leader, checking CRC and contiguity."""
        headers = list(iter_headers(records))
        if not headers:
            raise CorruptRecordError("no record batch")
        expected = self.log_end_offset
        batches = []
        max_ts, offset_of_max, count = -1, expected, 0
        for header in headers:
            if header.base_offset < expected:
                raise InvalidRecordError(f"batch at offset {header.base_offset} is below the log end {expected}")
            if not is_crc_valid(records, header):
                raise CorruptRecordError("record batch CRC mismatch")
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            batches.append((header.position, header.last_offset, header.max_timestamp, header.size))
            count += header.records_count
            expected = header.next_offset
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        valid = headers[-1].position + headers[-1].size
        now = self._now_ms()
        self._maybe_roll(valid, now, base_offset=headers[0].base_offset)
        self.active_segment.append(records[:valid], batches, now)
        self.unflushed_messages += count
        return LogAppendInfo(headers[0].base_offset, headers[-1].last_offset, max_ts, offset_of_max, -1, self.log_start_offset, count, valid)

    def _maybe_roll(self, incoming: int, now: int, base_offset: int | None = None) -> None:
        if self.active_segment.should_roll(incoming, self.config.segment_bytes, self.config.segment_ms, now):
            self.roll(base_offset)

    def roll(self, base_offset: int | None = None) -> LogSegment:
        new_base = self.log_end_offset if base_offset is None else base_offset
        active = self.active_segment
        if active.size == 0 and active.base_offset == new_base:
            return active
        active.flush()
        segment = LogSegment(self.dir, new_base, self.config.index_interval_bytes, self.config.max_index_entries, self._now_ms())
        self._add_segment(segment)
        self._log.debug("log.rolled", segment=new_base)
        return segment

    # -- read -------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
        end = self.log_end_offset
        if start_offset > end or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside the log range [{self.log_start_offset}, {end}] of {self.topic_partition}"
            )
        upper = end if max_offset is None else min(max_offset, end)
        if start_offset >= upper:
            return FetchDataInfo(start_offset)
        i = self._segment_index(start_offset)
        while i < len(self.segments):
            segment = self.segments[i]
            max_position = segment.size
            if upper < segment.next_offset:
                found = segment.translate_offset(upper)
                if found is not None:
                    max_position = found[0]
            region = segment.read(start_offset, max_length, max_position, min_one_message)
            if region is not None:
                return FetchDataInfo(start_offset, [region] if region.length > 0 else [])
            i += 1
        return FetchDataInfo(start_offset)

    # -- offsets by time --------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, target: int) -> tuple[int, int, int] | None:
        cache = self.leader_epoch_cache
        if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return (-1, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset))
        if target == LATEST_TIMESTAMP:
            return (-1, self.log_end_offset, cache.latest_epoch)
        if target == LATEST_TIERED_TIMESTAMP:
            # No tiered storage: Kafka answers the local log start minus one.
            return (-1, self.log_start_offset - 1, cache.epoch_for_offset(self.log_start_offset))
        if target == MAX_TIMESTAMP:
            best = max(self.segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp < 0:
                return None
            return self._record_at_or_after(best, best.max_timestamp, exact=True)
        for segment in self.segments:
            if segment.max_timestamp >= target:
                return self._record_at_or_after(segment, target, exact=False)
        return None

    def _record_at_or_after(self, segment: LogSegment, target: int, exact: bool) -> tuple[int, int, int] | None:
        start = segment.time_index.lookup(target)
        found = segment.translate_offset(start)
        position = found[0] if found else 0
        for pos, header in segment.iter_batch_headers(position):
            if header.max_timestamp < target or header.base_offset < self.log_start_offset and header.last_offset < self.log_start_offset:
                continue
            batch = os.pread(segment.fd, header.size, pos)
            for record in iter_records(batch):
                if record.offset < self.log_start_offset:
                    continue
                if (record.timestamp == target) if exact else (record.timestamp >= target):
                    return (record.timestamp, record.offset, self.leader_epoch_cache.epoch_for_offset(record.offset))
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- retention ----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        now = self._now_ms()
        config = self.config
        doomed: list[LogSegment] = []
        if config.retention_ms >= 0:
            for segment in self.segments:
                if segment.size > 0 and now - segment.largest_timestamp > config.retention_ms:
                    doomed.append(segment)
                else:
                    break
        if config.retention_bytes >= 0:
            excess = self.size_in_bytes - config.retention_bytes
            for segment in self.segments[len(doomed) : -1]:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                doomed.append(segment)
        for i, segment in enumerate(self.segments[len(doomed) : -1], start=len(doomed)):
            if self.segments[i + 1].base_offset <= self.log_start_offset:
                doomed.append(segment)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            # Every segment is past retention: roll so the log keeps an (empty) active segment.
            self.roll()
        self._delete_segments(doomed)
        return len(doomed)

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        now = self._now_ms()
        gone = {id(s) for s in doomed}
        self.segments = [s for s in self.segments if id(s) not in gone]
        self._base_offsets = [s.base_offset for s in self.segments]
        new_start = max(self.log_start_offset, self.segments[0].base_offset)
        if new_start != self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        for segment in doomed:
            segment.rename_to_deleted()
            segment.deleted_at_ms = now
            self._pending_deletes.append(segment)
        self._log.info("log.segments_deleted", count=len(doomed), log_start_offset=self.log_start_offset)

    def delete_pending_segments(self, force: bool = False) -> None:
        """Close and unlink deleted segments once no in-flight fetch can still be reading them."""
        now = self._now_ms()
        keep = []
        for segment in self._pending_deletes:
            assert segment.deleted_at_ms is not None
            if force or now - segment.deleted_at_ms >= self.config.file_delete_delay_ms:
                segment.close()
                segment.delete_files()
            else:
                keep.append(segment)
        self._pending_deletes = keep

    def maybe_increment_log_start_offset(self, new_offset: int) -> None:
        if new_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"cannot move the log start offset past the log end {self.log_end_offset}")
        if new_offset > self.log_start_offset:
            self.log_start_offset = new_offset
            self.leader_epoch_cache.truncate_from_start(new_offset)
            self.delete_old_segments()

    # -- truncation (replication) -----------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        i = self._segment_index(offset)
        for segment in self.segments[i + 1 :]:
            segment.close()
            segment.delete_files()
        del self.segments[i + 1 :]
        del self._base_offsets[i + 1 :]
        self.segments[i].truncate_to(offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)

    # -- durability and lifecycle -------------------------------------------------------------------

    def flush(self) -> None:
        for segment in self.segments:
            if segment.base_offset >= self.recovery_point or segment is self.active_segment or segment.next_offset > self.recovery_point:
                segment.flush()
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = self._now_ms()

    def close(self) -> None:
        self.delete_pending_segments(force=True)
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
