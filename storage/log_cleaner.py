"""Kafka's LogCleaner: background threads that compact the logs whose cleanup.policy has compact.

Each cleaner thread loops: on the logs' owner (the event loop) it picks the filthiest log
and takes a picture of it (``CleanSpec``); it copies off the loop (``storage.cleaner.clean_log``,
in the thread itself or in a worker process, ``log.cleaner.executor``); back on the owner it
swaps the cleaned segments in, group by group, if the segments they replace are still there,
and moves the log's cleaner checkpoint. Nothing the loop runs waits for a cleaner thread.

``run_on_owner`` runs a function where the logs may be touched and returns its result
(the broker passes one that hops onto the event loop and waits); storage knows no asyncio.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Callable, Literal, Protocol, TypeVar

import structlog

from storage.cleaner import CleanAborted, CleanerStats, CleanResult, CleanSpec, SegmentFile, clean_log, remove_cleaned_files
from storage.cleaner_checkpoint import CleanerCheckpoint
from storage.cleaner_manager import LogToClean, grab_filthiest_log, log_to_clean
from storage.errors import KafkaStorageError
from storage.log_dir_failure_channel import maybe_handle_io_exception
from storage.unified_log import UnifiedLog
from storage.log_segment import LogSegment

log = structlog.get_logger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]
SWAP_STEPS = ("before_commit", "committed", "old_deleted")
# Not a config: the log cleaner's state of each partition of a topic (JSON of describe_cleaning),
# what Kafka shows as cleaner metrics. A DescribeConfigs of a topic returns it only when it names
# it (`kbroker topics describe` does), so Kafka tools listing a topic's configs never see it.
CLEANER_STATS_KEY = "kbroker.log.cleaner.partition.stats"


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The log.cleaner.* broker properties (Kafka's names and defaults)."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    executor: Literal["thread", "process"] = "process"
    # Test only: sleep this long on the loop at one step of a swap, so a test can kill the broker there.
    test_swap_pause_ms: int = 0
    test_swap_pause_step: str = "committed"


@dataclass(frozen=True, slots=True)
class CleaningSummary:
    """The last cleaning of one log, for `kbroker topics describe` and DescribeLogDirs."""

    finished_ms: int
    dirty_ratio_before: float
    end_offset: int
    segments_before: int
    segments_after: int
    stats: CleanerStats


class RunOnOwner(Protocol):
    """Runs ``fn`` where the logs live (the event loop) and returns its result to the calling thread."""

    def __call__(self, fn: Callable[[], T]) -> T: ...


class CleanerOwner(Protocol):
    """What the cleaner needs from the log manager."""

    log_dirs: list[Path]

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None: ...

    def all_log_items(self) -> list[tuple[TopicPartition, UnifiedLog]]: ...


@dataclass(slots=True)
class _Plan:
    key: TopicPartition
    plog: UnifiedLog
    spec: CleanSpec
    segments: dict[int, LogSegment]  # the segments the spec names, by base offset
    dirty_ratio: float


class LogCleaner:
    def __init__(self, owner: CleanerOwner, config: CleanerConfig, run_on_owner: RunOnOwner, now_ms: Callable[[], int]) -> None:
        self._owner = owner
        self.config = config
        self._run_on_owner = run_on_owner
        self._now_ms = now_ms
        self._checkpoint_lock = threading.Lock()
        # Kafka's cleaner-offset-checkpoint is per log dir: each file covers the logs of its dir.
        self.checkpoints: dict[TopicPartition, int] = {k: v for d in owner.log_dirs for k, v in CleanerCheckpoint(d).read().items()}
        self._in_progress: set[TopicPartition] = set()
        self._latest_delete_horizons: dict[TopicPartition, int] = {}
        self._uncleanable: set[TopicPartition] = set()
        self.summaries: dict[TopicPartition, CleaningSummary] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: Pool | None = None
        self._pool_lock = threading.Lock()

    # -- lifecycle (called by the owner) ------------------------------------------------------------------

    def startup(self) -> None:
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("log_cleaner.started", threads=self.config.threads, executor=self.config.executor)

    def shutdown(self) -> None:
        """Stop the threads; a cleaning in a worker process is abandoned (its .cleaned files go at the next start)."""
        self._stopping.set()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.terminate()
        for thread in self._threads:
            thread.join()
        self._threads = []
        if self._pool is not None:
            self._pool.join()
            self._pool = None

    def reconfigure(self, config: CleanerConfig) -> None:
        """Kafka's LogCleaner.reconfigure (dynamic log.cleaner.* configs): the threads stop and start
        again with ``config``; checkpoints and summaries stay. Blocks as ``shutdown`` does."""
        self.shutdown()
        self.config = config
        self._stopping = threading.Event()
        self.startup()

    # -- the owner's side: what the loop asks --------------------------------------------------------------

    def describe(self, key: TopicPartition, plog: UnifiedLog) -> dict[str, object]:
        """The log's dirty ratio now and its last cleaning (what Kafka's cleaner metrics show)."""
        return describe_cleaning(plog, self.checkpoints.get(key), self.summaries.get(key), self._now_ms())

    def forget(self, key: TopicPartition) -> None:
        """The log was deleted: its checkpoint goes too (Kafka's updateCheckpoints on delete)."""
        self.checkpoints.pop(key, None)
        self._latest_delete_horizons.pop(key, None)
        self.summaries.pop(key, None)
        self._uncleanable.discard(key)

    # -- the cleaner threads -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                cleaned = self.clean_filthiest_log()
            except KafkaStorageError as e:
                log.warning("log_cleaner.failed", error=str(e))
                cleaned = False
            except Exception:
                log.exception("log_cleaner.failed")
                cleaned = False
            if not cleaned:
                self._stopping.wait(self.config.backoff_ms / 1000)

    def clean_filthiest_log(self) -> bool:
        """One pass of a cleaner thread; False when no log needed cleaning."""
        plan = self._run_on_owner(self._plan)
        if plan is None:
            return False
        result: CleanResult | None = None
        failed = False
        try:
            result = self._execute(plan.spec)
        except CleanAborted as e:
            log.info("log_cleaner.aborted", topic=plan.key[0], partition=plan.key[1], reason=str(e))
        except OSError as e:
            # Kafka's cleaner: an I/O error takes the log's dir offline, logged once by the channel.
            plog = plan.plog
            plog.failure_channel.maybe_add_offline_log_dir(plog.parent_dir, f"Failed to clean up log for {plan.key[0]}-{plan.key[1]} in dir {plog.parent_dir}", e)
            failed = True
        except Exception:
            log.exception("log_cleaner.failed_cleaning", topic=plan.key[0], partition=plan.key[1])
            failed = True
        finally:
            checkpoints = self._run_on_owner(lambda: self._finish(plan, result, failed))
        if checkpoints is not None:
            # Written here, not on the loop: it fsyncs. Two threads may write in turn; the file
            # is replaced atomically, and every copy is a superset of what was cleaned before it.
            plog = plan.plog
            with self._checkpoint_lock, maybe_handle_io_exception(plog.failure_channel, plog.parent_dir, f"Error while writing cleaner offsets checkpoint in dir {plog.parent_dir}"):
                CleanerCheckpoint(plog.parent_dir).write(checkpoints)
        return True

    def _execute(self, spec: CleanSpec) -> CleanResult:
        if self.config.executor == "thread":
            return clean_log(spec, self._stopping.is_set)
        with self._pool_lock:
            if self._pool is None:
                # Spawned on the first cleaning, not at start-up: most brokers never compact much.
                self._pool = multiprocessing.get_context("spawn").Pool(self.config.threads, initializer=_lower_priority)
            pending = self._pool.apply_async(_clean_when_started, (spec, time.time()))
        while True:
            try:
                return pending.get(timeout=0.5)
            except multiprocessing.TimeoutError:
                if self._stopping.is_set():
                    raise CleanAborted("the cleaner is stopping") from None

    # -- on the owner ----------------------------------------------------------------------------------------

    def _plan(self) -> _Plan | None:
        if self._stopping.is_set():
            return None
        now = self._now_ms()
        busy = self._in_progress | self._uncleanable
        picked = grab_filthiest_log(
            ((k, plog) for k, plog in self._owner.all_log_items() if k not in busy), self.checkpoints, self._latest_delete_horizons, now
        )
        if picked is None:
            return None
        key, to_clean = picked
        self._in_progress.add(key)
        return self._plan_for(key, to_clean, now)

    def _plan_for(self, key: TopicPartition, to_clean: LogToClean, now: int) -> _Plan:
        plog = to_clean.log
        config = plog.config
        segments = plog.segments
        chosen = [s for s in segments[:-1] if s.base_offset < to_clean.first_uncleanable_offset]
        files = tuple(
            SegmentFile(
                s.base_offset,
                nxt.base_offset,
                str(s.log_path),
                s.size,
                s.last_modified_ms,
                s.offset_index.entries * 8,
                s.time_index.entries * 12,
            )
            for s, nxt in zip(chosen, segments[1:])
        )
        spec = CleanSpec(
            directory=str(plog.dir),
            segments=files,
            later_paths=tuple(str(s.log_path) for s in segments[len(chosen) :]),
            first_dirty_offset=to_clean.first_dirty_offset,
            first_uncleanable_offset=to_clean.first_uncleanable_offset,
            now_ms=now,
            delete_retention_ms=config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            max_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            map_memory_bytes=self.config.dedupe_buffer_size // self.config.threads,
            map_load_factor=self.config.io_buffer_load_factor,
            io_max_bytes_per_second=self.config.io_max_bytes_per_second / self.config.threads,
            # An ABORT marker may sit past the cleaned segments (in the active one): every index is read.
            aborted_txns=tuple(
                sorted((t for s in segments for t in s.txn_index.entries if t.first_offset < to_clean.first_uncleanable_offset), key=lambda t: t.first_offset)
            ),
        )
        log.info(
            "log_cleaner.cleaning",
            topic=key[0],
            partition=key[1],
            first_dirty_offset=to_clean.first_dirty_offset,
            first_uncleanable_offset=to_clean.first_uncleanable_offset,
            dirty_ratio=round(to_clean.cleanable_ratio, 3),
            overdue=to_clean.needs_compaction_now,
        )
        return _Plan(key, plog, spec, {s.base_offset: s for s in chosen}, to_clean.cleanable_ratio)

    def _finish(self, plan: _Plan, result: CleanResult | None, failed: bool) -> dict[TopicPartition, int] | None:
        """Swap the cleaned groups in; the checkpoints to write when the log moved on."""
        self._in_progress.discard(plan.key)
        key, plog = plan.key, plan.plog
        swapped = self._owner.get_log(*key) is plog
        if failed and swapped:
            # Kafka's uncleanable partitions: not tried again until a restart (a deleted log is not one).
            log.warning("log_cleaner.log_uncleanable", topic=key[0], partition=key[1])
            self._uncleanable.add(key)
        if result is None:
            return None
        before = len(plog.segments)
        for group in result.groups:
            if swapped and not self._stopping.is_set():
                old = [plan.segments[b] for b in group.old_base_offsets]
                try:
                    plog.replace_cleaned_segments(old, group.end_offset, self._swap_step)
                    continue
                except KafkaStorageError as e:  # the log moved on (retention, truncation): this pass is void
                    log.info("log_cleaner.swap_skipped", topic=key[0], partition=key[1], segment=group.base_offset, reason=str(e))
                    swapped = False
            remove_cleaned_files(plog.dir, group.base_offset)
        if not swapped:
            return None
        self.checkpoints[key] = result.end_offset
        self._latest_delete_horizons[key] = result.max_delete_horizon_ms
        self.summaries[key] = CleaningSummary(self._now_ms(), plan.dirty_ratio, result.end_offset, before, len(plog.segments), result.stats)
        stats = result.stats
        log.info(
            "log_cleaner.cleaned",
            topic=key[0],
            partition=key[1],
            end_offset=result.end_offset,
            segments_before=before,
            segments_after=len(plog.segments),
            map_bytes_read=stats.map_bytes_read,
            map_messages_read=stats.map_messages_read,
            bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written,
            messages_read=stats.messages_read,
            messages_written=stats.messages_written,
            map_entries=stats.map_entries,
            map_utilization=round(stats.map_utilization, 4),
            tombstones_removed=stats.tombstones_removed,
            elapsed_s=round(stats.elapsed_s, 3),
            throttled_s=round(stats.throttled_s, 3),
        )
        return {k: v for k, v in self.checkpoints.items() if (other := self._owner.get_log(*k)) is not None and other.parent_dir == plog.parent_dir}

    def _swap_step(self, step: str) -> None:
        if self.config.test_swap_pause_ms and step == self.config.test_swap_pause_step:
            log.warning("log_cleaner.test_pause", step=step, pause_ms=self.config.test_swap_pause_ms)
            time.sleep(self.config.test_swap_pause_ms / 1000)


def _clean_when_started(spec: CleanSpec, submitted_s: float) -> CleanResult:
    """In a worker process: the cleaning's "now" is when it starts, not when it was planned. A
    worker spawned (niced) on a busy machine can start seconds later, and the delete horizon it
    gives the tombstones it keeps (now + delete.retention.ms) must run from the cleaning that
    makes them visible, not from before the wait."""
    waited_ms = max(0, int((time.time() - submitted_s) * 1000))
    return clean_log(replace(spec, now_ms=spec.now_ms + waited_ms))


def _lower_priority() -> None:
    """Cleaner worker processes yield the CPU to the broker's event loop (background work, as Kafka's
    cleaner threads are throttled rather than prioritised)."""
    os.nice(10)


def describe_cleaning(plog: UnifiedLog, checkpoint: int | None, summary: CleaningSummary | None, now_ms: int) -> dict[str, object]:
    to_clean = log_to_clean(plog, checkpoint, now_ms)
    last: dict[str, object] | None = None
    if summary is not None:
        stats = summary.stats
        last = {
            "finished_ms": summary.finished_ms,
            "dirty_ratio_before": round(summary.dirty_ratio_before, 4),
            "end_offset": summary.end_offset,
            "segments_before": summary.segments_before,
            "segments_after": summary.segments_after,
            "bytes_read": stats.bytes_read,
            "bytes_written": stats.bytes_written,
            "messages_read": stats.messages_read,
            "messages_written": stats.messages_written,
            "tombstones_removed": stats.tombstones_removed,
            "elapsed_s": round(stats.elapsed_s, 3),
        }
    return {"dirty_ratio": round(to_clean.cleanable_ratio, 4), "first_dirty_offset": to_clean.first_dirty_offset, "last_cleaning": last}
