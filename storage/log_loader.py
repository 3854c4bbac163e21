"""LogLoader: what opening a partition's log directory does (Kafka's LogLoader).

It removes the leftovers of interrupted deletions, writes and cleanings, completes a cleaner's
swap a crash interrupted, opens every segment (rebuilding missing or corrupt indexes), recovers
the segments past the recovery point after an unclean shutdown, and rebuilds the producer
state from its newest trustworthy snapshot.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import structlog

from protocol.record_batch import BatchHeader
from storage.abstract_index import CorruptIndexError, InvalidIndexEntryError
from storage.errors import StorageError
from storage.leader_epoch_cache import LeaderEpochCache
from storage.local_log import SWAP_END_FILE_SUFFIX, LocalLog, read_swap_end
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
from storage.producer_state_manager import AppendOrigin, ProducerStateManager

log = structlog.get_logger(__name__)


class LogLoader:
    def __init__(
        self,
        local_log: LocalLog,
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        now_ms: Callable[[], int],
        *,
        had_clean_shutdown: bool,
        recovery_point: int,
        log_start_offset: int,
    ) -> None:
        self._local = local_log
        self._dir = local_log.dir
        self._leader_epoch_cache = leader_epoch_cache
        self._producer_state = producer_state
        self._now_ms = now_ms
        self._clean = had_clean_shutdown
        self._recovery_point = recovery_point
        self._log_start_offset = log_start_offset
        self._log = log.bind(topic=local_log.topic_partition[0], partition=local_log.topic_partition[1])

    def load(self) -> int:
        """Fill the LocalLog with the directory's segments, its log end offset and recovery point,
        the leader epoch cache and the producer state; returns the log start offset."""
        local = self._local
        # One listing serves every step: with 10,000 partitions a listing and a stat per file
        # per step were a third of start-up.
        names, swap_files = self._remove_temp_files_and_collect_swap_files(self._file_names())
        if swap_files or any(name.endswith(SWAP_END_FILE_SUFFIX) for name in names):
            self._complete_swaps(swap_files)
            names = self._file_names()
        rebuilt, cut_by_rebuild = self._load_segment_files(names)
        # After a crash, snapshots taken past the flushed segments may describe data that is gone.
        unflushed_from = None
        if not self._clean and local.segments:
            unflushed_from = local.segments[local.floor_index(self._recovery_point)].base_offset
        new_recovery_point, log_end_offset, recovered, truncated = self._recover_log()
        local.update_log_end_offset(log_end_offset)
        local.recovery_point = new_recovery_point
        log_start_offset = max(self._log_start_offset, local.segments[0].base_offset)
        self._leader_epoch_cache.truncate_from_end(log_end_offset)
        self._leader_epoch_cache.truncate_from_start(log_start_offset)
        rebuild_producer_state(
            self._producer_state, local, log_start_offset, log_end_offset if unflushed_from is None else min(unflushed_from, log_end_offset), self._now_ms()
        )
        # Per log only when something happened to it; LogManager sums up the rest.
        notable = not self._clean or recovered or truncated or rebuilt
        (self._log.info if notable else self._log.debug)(
            "log.loaded",
            clean_shutdown=self._clean,
            segments=len(local.segments),
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            recovery_point=new_recovery_point,
            segments_recovered=recovered,
            bytes_truncated=cut_by_rebuild + truncated,
            indexes_rebuilt=len(rebuilt),
            producers=len(self._producer_state.producers),
        )
        return log_start_offset

    def _file_names(self) -> list[str]:
        with os.scandir(self._dir) as entries:
            return [entry.name for entry in entries if entry.is_file()]

    def _remove_temp_files_and_collect_swap_files(self, names: list[str]) -> tuple[list[str], list[Path]]:
        """Delete leftovers of interrupted deletions, writes and cleanings: (the names left, the .swap files to complete)."""
        kept: list[str] = []
        swaps: list[str] = []
        cleaned: list[str] = []
        for name in names:
            if name.endswith((DELETED_FILE_SUFFIX, ".tmp")):
                (self._dir / name).unlink()
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
                (self._dir / name).unlink()
                kept.remove(name)
            else:
                valid.append(self._dir / name)
        for name in cleaned:
            (self._dir / name).unlink()
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
            end = max(read_next_offset_of_file(path, base), read_swap_end(self._dir / (filename_prefix(base) + SWAP_END_FILE_SUFFIX)))
            high = end if high is None else max(high, end)
        if low is not None and high is not None:
            for path in self._dir.iterdir():
                name = path.name
                if path.is_file() and name.endswith((LOG_FILE_SUFFIX, *INDEX_SUFFIXES)) and low <= _offset_or(path, -1) < high:
                    self._log.info("log.replaced_segment_deleted", file=name)
                    path.unlink()
        for path in self._dir.iterdir():
            if path.is_file() and path.name.endswith(SWAP_FILE_SUFFIX):
                os.rename(path, path.with_name(path.name.removesuffix(SWAP_FILE_SUFFIX)))
            elif path.is_file() and path.name.endswith(SWAP_END_FILE_SUFFIX):
                path.unlink()

    def _load_segment_files(self, names: list[str]) -> tuple[set[int], int]:
        """Open every segment; rebuild the indexes of those whose index files are missing or corrupt.
        Returns their base offsets and the bytes the rebuilds cut: a rebuild reads the segment
        through and drops a torn tail, which the recovery after it then no longer sees."""
        rebuilt: set[int] = set()
        cut = 0
        now = self._now_ms()
        present = set(names)
        config = self._local.config
        for name in sorted(names):
            if name.endswith(INDEX_SUFFIXES):
                base = _offset_or(Path(name), -1)
                if base >= 0 and filename_prefix(base) + LOG_FILE_SUFFIX not in present:
                    self._log.warning("log.orphaned_index_deleted", file=name)
                    (self._dir / name).unlink()
            elif name.endswith(LOG_FILE_SUFFIX) and _offset_or(Path(name), -1) >= 0:
                segment = LogSegment.open(self._dir, offset_from_file(Path(name)), config, now)
                try:
                    segment.sanity_check()
                except CorruptIndexError as e:
                    self._log.warning("log.index_rebuilt", segment=segment.base_offset, reason=str(e))
                    # No leader epochs from here: segments are met in file-name order, and after a
                    # crash the recovery below assigns them in offset order from the recovery point.
                    cut += segment.recover(MAX_BATCH_SIZE)
                    rebuilt.add(segment.base_offset)
                self._local.add_segment(segment)
        return rebuilt, cut

    def _recover_log(self) -> tuple[int, int, int, int]:
        """Kafka's recoverLog; returns (recovery point, log end offset, segments recovered, bytes truncated)."""
        local = self._local
        recovery_point, log_start_offset = self._recovery_point, self._log_start_offset
        recovered = 0
        truncated = 0
        if not self._clean and local.segments:
            unflushed = local.segments[local.floor_index(recovery_point) :]
            for i, segment in enumerate(unflushed):
                try:
                    truncated = segment.recover(MAX_BATCH_SIZE, self._leader_epoch_cache)
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
                    local.remove_segments(remaining)
                    for later in remaining:
                        later.delete()
                    break
        log_end_offset: int | None = None
        if local.segments:
            log_end_offset = local.segments[-1].read_next_offset()
            if log_end_offset < log_start_offset:
                self._log.warning("log.all_segments_deleted", log_end_offset=log_end_offset, log_start_offset=log_start_offset)
                doomed = list(local.segments)
                local.remove_segments(doomed)
                for segment in doomed:
                    segment.delete()
                self._leader_epoch_cache.clear()
                log_end_offset = None
        if not local.segments:
            local.add_segment(LogSegment.open(self._dir, log_start_offset, local.config, self._now_ms()))
        if self._clean and log_end_offset is not None:
            return log_end_offset, log_end_offset, recovered, truncated
        end = log_end_offset if log_end_offset is not None else local.segments[-1].read_next_offset()
        return min(recovery_point, end), end, recovered, truncated


def rebuild_producer_state(state: ProducerStateManager, local: LocalLog, log_start_offset: int, trusted_up_to: int, now_ms: int) -> None:
    """Kafka's rebuildProducerState: load the newest snapshot at or below ``trusted_up_to`` and
    replay batch headers from it to the log end."""
    state.truncate_and_reload(log_start_offset, trusted_up_to)
    # Kafka's loadFromSnapshot leaves out the snapshot's producers idle past producer.id.expiration.ms
    # (by their last batch's timestamp), open transactions kept; producers the replay finds stay.
    state.remove_expired_producers(now_ms, state.producer_id_expiration_ms)
    start, end = state.map_end_offset, local.log_end_offset
    replayed = 0
    if start < end:
        for segment in local.segments[local.floor_index(start) :]:
            position = segment.offset_index.lookup(start).position if segment.base_offset <= start else 0
            for batch_position, header in segment.batch_headers(position):
                if header.last_offset < start or not header.has_producer_id:
                    continue
                _replay_batch(state, local.topic_partition, segment, batch_position, header)
                replayed += 1
    state.map_end_offset = end
    if replayed:
        topic, partition = local.topic_partition
        log.info("log.producer_state_rebuilt", topic=topic, partition=partition, from_offset=start, to_offset=end, batches=replayed)


def _replay_batch(state: ProducerStateManager, topic_partition: tuple[str, int], segment: LogSegment, position: int, header: BatchHeader) -> None:
    info = state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
    try:
        completed = info.append(header, lambda: segment.read_batch(position, header.size), header.base_offset)
    except (StorageError, ValueError) as e:
        topic, partition = topic_partition
        log.warning("log.producer_state_replay_skipped", topic=topic, partition=partition, offset=header.base_offset, error=str(e))
        return
    state.update(info)
    if completed is not None:
        segment.update_txn_index(completed, state.complete_txn(completed))


def _offset_or(path: Path, default: float) -> float:
    try:
        return offset_from_file(path)
    except ValueError:
        return default
