"""LocalLog: a partition's segments on disk; append, roll, read, truncate, flush and delete them.

It knows offsets only as positions in files: the log start offset, the high watermark, leader
epochs and producer state belong to UnifiedLog, which drives it. Reads answer with regions of
segment files (for sendfile); appends write a validated buffer to the active segment in one write.
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import structlog

from storage.checkpoints import fsync_dir
from storage.errors import KafkaStorageError, OffsetOutOfRangeError
from storage.fetch_data_info import FetchDataInfo
from storage.log_config import LogConfig
from storage.log_flush_stats import LOG_FLUSH_STATS
from storage.log_segment import CLEANED_FILE_SUFFIX, INDEX_SUFFIXES, LOG_FILE_SUFFIX, SWAP_FILE_SUFFIX, LogSegment, filename_prefix

log = structlog.get_logger(__name__)

# Beside a cleaner's .swap: the end of the segments it replaces (kbroker's own, not Kafka's).
SWAP_END_FILE_SUFFIX = ".swapend"
# A future log's folder: a replica moving to this log dir (AlterReplicaLogDirs).
FUTURE_DIR_SUFFIX = "-future"


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    """``<topic>-<partition>``, or a future log's ``<topic>-<partition>.<unique id>-future`` (a replica
    moving to this log dir): the partition follows the LAST '-' (topic names may contain '-')."""
    name = directory.name
    if name.endswith(FUTURE_DIR_SUFFIX):
        name = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")[0]
    topic, _, partition = name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{directory.name} is not a <topic>-<partition> directory")
    return topic, int(partition)


class LocalLog:
    def __init__(self, directory: Path, config: LogConfig, now_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self.topic_partition = parse_topic_partition(directory)
        self.tp = f"{self.topic_partition[0]}-{self.topic_partition[1]}"
        self.now_ms = now_ms
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.recovery_point = 0
        self._log_end_offset = 0
        self.last_flush_ms = now_ms()
        # Segments rolled but not yet fsynced (Kafka schedules this flush right after a roll).
        self.rolled_unflushed_up_to: int | None = None
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._log = log.bind(topic=self.topic_partition[0], partition=self.topic_partition[1])

    # -- segment bookkeeping ----------------------------------------------------------------------------

    def add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    def remove_segments(self, doomed: Sequence[LogSegment]) -> None:
        gone = {id(s) for s in doomed}
        self.segments = [s for s in self.segments if id(s) not in gone]
        self._base_offsets = [s.base_offset for s in self.segments]

    def floor_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the first one when it is below them all)."""
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    def remove_and_delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Take segments out of the log and rename them .deleted now; close and unlink them after
        file.delete.delay.ms (a sendfile may be in flight)."""
        self.remove_segments(doomed)
        deadline = self.now_ms() + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.rename_to_deleted()
            self._pending_deletes.append((deadline, segment))

    def update_log_end_offset(self, offset: int) -> None:
        self._log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)

    # -- append, roll, read -------------------------------------------------------------------------------

    def append(self, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int, records: memoryview, batches: list[tuple[int, int, int]]) -> None:
        # An OSError goes up to UnifiedLog, whose LogDirFailureChannel takes the dir offline.
        self.segments[-1].append(last_offset, max_timestamp, offset_of_max_timestamp, records, batches)
        self._log_end_offset = last_offset + 1

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        new_offset = max(expected_next_offset or 0, self._log_end_offset)
        active = self.segments[-1]
        if new_offset == active.base_offset:
            if active.size == 0:
                return active
            raise KafkaStorageError(f"trying to roll a new segment at {new_offset} for {self.tp} while a non-empty one starts there")
        if new_offset < active.base_offset:
            raise KafkaStorageError(f"trying to roll a new segment at {new_offset} below the active segment {active.base_offset} of {self.tp}")
        for suffix in (LOG_FILE_SUFFIX, *INDEX_SUFFIXES):
            stale = self.dir / (filename_prefix(new_offset) + suffix)
            if stale.exists():
                self._log.warning("log.stale_segment_file_deleted", file=stale.name)
                stale.unlink()
        active.on_become_inactive_segment()
        segment = LogSegment.open(self.dir, new_offset, self.config, self.now_ms())
        self.add_segment(segment)
        self.rolled_unflushed_up_to = max(self.rolled_unflushed_up_to or 0, new_offset)
        self._log.info("log.rolled", segment=new_offset)
        return segment

    def read(self, start_offset: int, max_length: int, max_offset: int | None, min_one_message: bool, log_start_offset: int) -> FetchDataInfo:
        """Regions holding the batches from ``start_offset``, never reaching ``max_offset`` (exclusive).

        At most one segment's region is returned; a caller wanting more reads again from the
        offset after it. Raises OffsetOutOfRangeError below the log start or past the log end.
        """
        end = self._log_end_offset
        if start_offset > end or start_offset < log_start_offset:
            raise OffsetOutOfRangeError(
                f"received request for offset {start_offset} for partition {self.tp}, but we only have log segments in the range {log_start_offset} to {end}"
            )
        upper = end if max_offset is None else min(max_offset, end)
        if start_offset >= upper:
            return FetchDataInfo(start_offset)
        i = self.floor_index(start_offset)
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

    def fetch_upper_bound(self, fetch_offset: int) -> int:
        """Where the segment a fetch from ``fetch_offset`` reads ends (the next segment's base, or the log end)."""
        i = self.floor_index(fetch_offset)
        return self._base_offsets[i + 1] if i + 1 < len(self._base_offsets) else self._log_end_offset

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction overlapping [start_offset, upper_offset)."""
        aborted: list[tuple[int, int]] = []
        for segment in self.segments[self.floor_index(start_offset) :]:
            result = segment.txn_index.collect_aborted(start_offset, upper_offset)
            aborted.extend((txn.producer_id, txn.first_offset) for txn in result.aborted)
            if result.complete:
                break
        return aborted

    # -- truncation and cleaning ----------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> list[LogSegment]:
        """Drop every offset from ``target_offset`` on, which the first segment holds or precedes; returns the segments deleted."""
        doomed = [s for s in self.segments if s.base_offset > target_offset]
        self.remove_and_delete_segments(doomed)
        self.segments[-1].truncate_to(target_offset, self.now_ms())
        self.update_log_end_offset(target_offset)
        return doomed

    def truncate_fully_and_start_at(self, new_offset: int) -> list[LogSegment]:
        """Delete every segment and start an empty one at ``new_offset``; returns the segments deleted."""
        doomed = list(self.segments)
        self.remove_and_delete_segments(doomed)
        self.add_segment(LogSegment.open(self.dir, new_offset, self.config, self.now_ms()))
        self._log_end_offset = new_offset
        self.recovery_point = new_offset
        self.rolled_unflushed_up_to = None
        return doomed

    def replace_segments(self, old: Sequence[LogSegment], end_offset: int, on_step: Callable[[str], None] | None = None) -> LogSegment:
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
            raise KafkaStorageError(f"segments {[s.base_offset for s in old]} of {self.tp} are no longer consecutive inactive segments")
        step = on_step or (lambda _name: None)
        base = old[0].base_offset
        end_file = self.dir / (filename_prefix(base) + SWAP_END_FILE_SUFFIX)
        _write_swap_end(end_file, end_offset)
        new = LogSegment.open(self.dir, base, self.config, self.now_ms(), suffix=CLEANED_FILE_SUFFIX)
        step("before_commit")
        new.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        fsync_dir(self.dir)
        step("committed")
        self.segments[first : first + len(old)] = [new]
        self._base_offsets = [s.base_offset for s in self.segments]
        self.remove_and_delete_segments(old)
        step("old_deleted")
        # No fsync from here on: a crash that loses these renames finds the .swap, which recovery completes.
        new.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        end_file.unlink()
        self._log.info("log.cleaned_segment_swapped", segment=base, replaced=len(old), size=new.size)
        return new

    # -- durability and lifecycle ------------------------------------------------------------------------------

    def flush(self, up_to: int) -> None:
        """fsync the segments holding [recovery point, up_to) and move the recovery point to ``up_to``."""
        offset = min(up_to, self._log_end_offset)
        self.last_flush_ms = self.now_ms()
        if offset > self.recovery_point:
            started = time.perf_counter()
            start = self.floor_index(self.recovery_point)
            flushed = [s for s in self.segments[start:] if s.base_offset < offset]
            for segment in flushed:
                segment.flush()
            if any(s.base_offset >= self.recovery_point for s in flushed):
                fsync_dir(self.dir)
            self.recovery_point = offset
            LOG_FLUSH_STATS.update((time.perf_counter() - started) * 1000.0)  # LogFlushRateAndTimeMs
        rolled = self.rolled_unflushed_up_to
        if rolled is not None and (rolled <= self.recovery_point or rolled > self._log_end_offset):
            self.rolled_unflushed_up_to = None

    def delete_pending_segments(self, now_ms: int | None = None) -> int:
        """Close and unlink deleted segments whose file.delete.delay.ms has passed; returns how many."""
        now = self.now_ms() if now_ms is None else now_ms
        due = [segment for deadline, segment in self._pending_deletes if deadline <= now]
        self._pending_deletes = [(deadline, segment) for deadline, segment in self._pending_deletes if deadline > now]
        for segment in due:
            segment.delete()
        return len(due)

    def close(self) -> None:
        """Trim and close every segment; deleted ones still pending are unlinked now."""
        for _, segment in self._pending_deletes:
            segment.delete()
        self._pending_deletes = []
        for segment in self.segments:
            segment.close()

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

    # -- properties ---------------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)


def _write_swap_end(path: Path, end_offset: int) -> None:
    with open(path, "w") as f:
        f.write(str(end_offset))
        f.flush()
        os.fsync(f.fileno())


def read_swap_end(path: Path) -> int:
    """The end offset a swap recorded; -1 when the file is missing or unreadable (the swap's own end then)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -1
