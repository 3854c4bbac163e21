"""Kafka's LogCleanerManager: which part of a compacted log is dirty, and which log to clean next.

Pure functions over the logs' segment lists and timestamps; they run on the event loop (the
owner of the logs) and take microseconds per log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from storage.unified_log import UnifiedLog


@dataclass(frozen=True, slots=True)
class LogToClean:
    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment's base offset: the cleaner never goes past it
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms has passed for the oldest dirty record

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def first_dirty_offset(plog: UnifiedLog, checkpoint: int | None) -> int:
    """Where the last cleaning stopped, or the log start when that is gone (retention, truncation)."""
    if checkpoint is None or checkpoint < plog.log_start_offset or checkpoint > plog.log_end_offset:
        return plog.log_start_offset
    return checkpoint


def log_to_clean(plog: UnifiedLog, checkpoint: int | None, now_ms: int) -> LogToClean:
    """Kafka's cleanableOffsets and LogToClean: the dirty section, its size, and whether it is overdue."""
    config = plog.config
    first_dirty = first_dirty_offset(plog, checkpoint)
    segments = plog.segments
    # The inactive segments holding offsets at or past the first dirty one.
    dirty = [s for s, nxt in zip(segments, segments[1:]) if nxt.base_offset > first_dirty]
    # Never past the last stable offset (so never past the high watermark): a follower may
    # still truncate what lies above it, and open transactions must keep their records.
    uncleanable = min(plog.active_segment.base_offset, plog.last_stable_offset)
    if config.min_compaction_lag_ms > 0:
        for segment in dirty:
            if segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    # Rounded down to a segment's start: whole segments are cleaned or none of them.
    first_uncleanable = segments[_floor(segments, uncleanable)].base_offset
    first_dirty = min(first_dirty, first_uncleanable)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(s.size for s in dirty if s.base_offset < first_uncleanable)
    overdue = False
    if config.max_compaction_lag_ms < 2**63 - 1:
        stamps = [t for t in (s.first_batch_timestamp for s in dirty) if t is not None and t > 0]
        overdue = bool(stamps) and min(stamps) < now_ms - config.max_compaction_lag_ms
    return LogToClean(plog, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, overdue)


def grab_filthiest_log(
    logs: Iterable[tuple[tuple[str, int], UnifiedLog]],
    checkpoints: dict[tuple[str, int], int],
    latest_delete_horizons: dict[tuple[str, int], int],
    now_ms: int,
) -> tuple[tuple[str, int], LogToClean] | None:
    """Kafka's grabFilthiestCompactedLog: the compacted log with the largest dirty ratio above its
    min.cleanable.dirty.ratio (or overdue by max.compaction.lag.ms); failing that, one whose
    tombstones' delete horizon has passed, so that they go even when nothing else is written."""
    best: tuple[tuple[str, int], LogToClean] | None = None
    horizon_due: tuple[tuple[str, int], LogToClean] | None = None
    for key, plog in logs:
        if not plog.config.compacts:
            continue
        candidate = log_to_clean(plog, checkpoints.get(key), now_ms)
        cleanable = (candidate.needs_compaction_now and candidate.cleanable_bytes > 0) or candidate.cleanable_ratio > plog.config.min_cleanable_dirty_ratio
        if cleanable:
            if best is None or candidate.cleanable_ratio > best[1].cleanable_ratio:
                best = (key, candidate)
        elif horizon_due is None and 0 <= latest_delete_horizons.get(key, -1) <= now_ms:
            horizon_due = (key, candidate)
    return best or horizon_due


def _floor(segments: list, offset: int) -> int:  # type: ignore[type-arg]
    """Index of the segment holding ``offset`` (0 when below them all)."""
    index = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= offset:
            index = i
        else:
            break
    return index
