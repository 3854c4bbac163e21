"""Kafka's Cleaner: the copying half of log compaction, run off the event loop.

``clean_log`` takes a picture of a log taken on the event loop (``CleanSpec``: segment file
paths, sizes and the clean/dirty bounds), builds the offset map over the dirty section, then
recopies the segments from the log start up to the map's last offset, in groups that fit one
segment, into ``<base>.log.cleaned`` files (indexes included) named after each group's first
segment. It touches no live ``UnifiedLog`` object and returns what it wrote (``CleanResult``): the
owner of the log swaps the groups in (``Log.replace_cleaned_segments``). Being a plain
function over picklable values, it runs the same in a cleaner thread or a worker process.

What a record keeps (Kafka's LogCleaner.shouldRetainRecord): past the map, everything; a
record without a key, never; otherwise only the latest offset of its key, and a tombstone (null
value) only until its batch's delete horizon. A batch holding a tombstone that is kept gets its
delete horizon (now + delete.retention.ms, KIP-534) when it has none. A batch losing every record
is dropped, unless it is the last batch of its producer id in the log: then an empty batch keeps
the producer's last sequence (Kafka's RETAIN_EMPTY). Offsets are never renumbered.

Transactions (Kafka's CleanedTransactionMetadata): the batches of aborted transactions (known
from the transaction indexes) are dropped and never enter the map; committed ones are cleaned
like any other. An ABORT marker stays while batches of its transaction were still there when
the pass began (its entry goes to the cleaned segment's transaction index); a marker with no
batch of its transaction left is kept until its delete horizon, then dropped.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import structlog

from protocol.control_records import read_marker
from protocol.record_batch import DELETE_HORIZON_MASK, BatchHeader, read_header
from protocol.records import Record, build_retained_batch, iter_records
from storage.log_segment import CLEANED_FILE_SUFFIX, LogSegment, scan_batches
from storage.offset_map import OffsetMap
from storage.transaction_index import AbortedTxn, TransactionIndex

log = structlog.get_logger(__name__)

INT_MAX = 2**31 - 1
_INDEX_ENTRY_BYTES = 8
_TIME_INDEX_ENTRY_BYTES = 12


class CleanAborted(Exception):
    """The log changed under the cleaner (a segment went away) or the cleaner is stopping."""


class Throttler:
    """Kafka's Throttler: sleeps whenever more than ``bytes_per_second`` went through in a check window."""

    def __init__(self, bytes_per_second: float, check_interval_s: float = 0.3, sleep: Callable[[float], None] = time.sleep) -> None:
        self.bytes_per_second = bytes_per_second
        self.check_interval_s = check_interval_s
        self._sleep = sleep
        self._period_start = time.monotonic()
        self._observed = 0
        self.slept_s = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.bytes_per_second <= 0 or self.bytes_per_second == float("inf"):
            return
        self._observed += nbytes
        now = time.monotonic()
        elapsed = now - self._period_start
        if elapsed < self.check_interval_s:
            return
        wanted = self._observed / self.bytes_per_second
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            self.slept_s += wanted - elapsed
        self._period_start = time.monotonic()
        self._observed = 0


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One inactive segment as the event loop saw it when the clean was planned."""

    base_offset: int
    end_offset: int  # the next segment's base offset
    path: str
    size: int
    last_modified_ms: int
    index_bytes: int
    time_index_bytes: int


@dataclass(frozen=True, slots=True)
class CleanSpec:
    directory: str
    segments: tuple[SegmentFile, ...]  # from the log start up to the first uncleanable offset
    later_paths: tuple[str, ...]  # the segments after them, active included: read for producer ids only
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    max_index_bytes: int
    index_interval_bytes: int
    map_memory_bytes: int
    map_load_factor: float
    io_max_bytes_per_second: float
    aborted_txns: tuple[AbortedTxn, ...] = ()  # every aborted transaction starting below the first uncleanable offset


@dataclass(slots=True)
class CleanerStats:
    """Kafka's CleanerStats, as the last cleaning of a log left them."""

    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    map_entries: int = 0
    map_utilization: float = 0.0
    tombstones_removed: int = 0
    throttled_s: float = 0.0
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One ``.cleaned`` segment at ``base_offset`` standing for the old segments at ``old_base_offsets``."""

    base_offset: int
    old_base_offsets: tuple[int, ...]
    end_offset: int  # the first offset past the group: the next segment's base offset


@dataclass(slots=True)
class CleanResult:
    end_offset: int  # the new cleaner checkpoint: everything below it is clean
    groups: list[CleanedGroup] = field(default_factory=list)
    stats: CleanerStats = field(default_factory=CleanerStats)
    max_delete_horizon_ms: int = -1


def clean_log(spec: CleanSpec, should_stop: Callable[[], bool] | None = None) -> CleanResult:
    """Clean what ``spec`` describes into ``.cleaned`` segment files; see the module docstring.

    Raises CleanAborted when a segment file is gone (retention or a truncation took it) or
    ``should_stop`` says so; the ``.cleaned`` files written so far are removed then.
    """
    started = time.monotonic()
    stats = CleanerStats()
    throttler = Throttler(spec.io_max_bytes_per_second)
    stop = should_stop or (lambda: False)
    fds = _open_all(spec.segments)
    written: list[CleanedGroup] = []
    try:
        offset_map = OffsetMap(spec.map_memory_bytes, spec.map_load_factor)
        _build_offset_map(spec, fds, offset_map, stats, throttler, stop)
        end_offset = max(offset_map.latest_offset + 1, spec.first_dirty_offset)
        last_of_producer = _last_batch_of_each_producer(spec, fds)
        result = CleanResult(end_offset, written, stats)
        to_clean = [s for s in spec.segments if s.base_offset < end_offset]
        # One tracker for the whole pass: a transaction's batches and its marker may be in different groups.
        txns = _TransactionTracker(list(spec.aborted_txns))
        for group in group_segments_by_size(to_clean, spec.segment_bytes, spec.max_index_bytes):
            if stop():
                raise CleanAborted("the cleaner is stopping")
            horizon = _clean_group(spec, group, fds, offset_map, last_of_producer, txns, stats, throttler, stop)
            result.max_delete_horizon_ms = max(result.max_delete_horizon_ms, horizon)
            written.append(CleanedGroup(group[0].base_offset, tuple(s.base_offset for s in group), group[-1].end_offset))
        stats.map_entries = offset_map.size
        stats.map_utilization = offset_map.utilization
        stats.throttled_s = throttler.slept_s
        stats.elapsed_s = time.monotonic() - started
        return result
    except BaseException:
        for done in written:
            remove_cleaned_files(Path(spec.directory), done.base_offset)
        raise
    finally:
        for fd in fds.values():
            os.close(fd)


def group_segments_by_size(segments: list[SegmentFile], max_size: int, max_index_bytes: int) -> Iterator[list[SegmentFile]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose log and indexes fit one segment and
    whose offsets stay within int32 of the group's base offset."""
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size, index_size, time_index_size = segments[i].size, segments[i].index_bytes, segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            nxt = segments[i]
            if (
                log_size + nxt.size > max_size
                or index_size + nxt.index_bytes > max_index_bytes
                or time_index_size + nxt.time_index_bytes > max_index_bytes
                or nxt.end_offset - 1 - group[0].base_offset > INT_MAX
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_index_size += nxt.time_index_bytes
            i += 1
        yield group


def remove_cleaned_files(directory: Path, base_offset: int) -> None:
    for path in directory.glob(f"{base_offset:020d}.*{CLEANED_FILE_SUFFIX}"):
        path.unlink(missing_ok=True)


def _open_all(segments: tuple[SegmentFile, ...]) -> dict[int, int]:
    fds: dict[int, int] = {}
    try:
        for segment in segments:
            fds[segment.base_offset] = os.open(segment.path, os.O_RDONLY)
    except FileNotFoundError as e:
        for fd in fds.values():
            os.close(fd)
        raise CleanAborted(f"segment file gone: {e.filename}") from None
    return fds


def _build_offset_map(spec: CleanSpec, fds: dict[int, int], offset_map: OffsetMap, stats: CleanerStats, throttler: Throttler, stop: Callable[[], bool]) -> None:
    """Kafka's buildOffsetMap over [first dirty, first uncleanable), stopping at the batch that does not fit."""
    start, end = spec.first_dirty_offset, spec.first_uncleanable_offset
    txns = _TransactionTracker([t for t in spec.aborted_txns if t.last_offset >= start])
    for segment in spec.segments:
        if stop():
            raise CleanAborted("the cleaner is stopping")
        fd = fds[segment.base_offset]
        for position, header in scan_batches(fd, segment.size):
            if header.last_offset < start:
                continue
            if header.base_offset >= end:
                return
            if header.is_control:
                txns.on_control_batch(header, os.pread(fd, header.size, position))
                offset_map.update_latest_offset(header.last_offset)
                continue
            if txns.on_batch(header):  # aborted: its keys must not hide older records
                offset_map.update_latest_offset(header.last_offset)
                continue
            if header.records_count > offset_map.room:
                if offset_map.size == 0:
                    raise CleanAborted(f"a batch of {header.records_count} records does not fit an offset map of {offset_map.max_entries} entries")
                return
            batch = os.pread(fd, header.size, position)
            throttler.maybe_throttle(header.size)
            stats.map_bytes_read += header.size
            for record in iter_records(batch, header):
                stats.map_messages_read += 1
                if record.key is not None and record.offset >= start:
                    offset_map.put(record.key, record.offset)
            offset_map.update_latest_offset(header.last_offset)


def _last_batch_of_each_producer(spec: CleanSpec, fds: dict[int, int]) -> dict[int, int]:
    """The last offset of each producer id's last data batch in the whole log (headers only):
    Kafka's lastDataOffset of the active producers, which markers do not move."""
    last: dict[int, int] = {}

    def scan(fd: int, size: int) -> None:
        for _, header in scan_batches(fd, size):
            if header.has_producer_id and not header.is_control:
                last[header.producer_id] = header.last_offset

    for segment in spec.segments:
        scan(fds[segment.base_offset], segment.size)
    for path in spec.later_paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            scan(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return last


class _TransactionTracker:
    """Kafka's CleanedTransactionMetadata: which transactions the batches being read belong to."""

    def __init__(self, aborted: list[AbortedTxn], cleaned_index: TransactionIndex | None = None) -> None:
        self._aborted = collections.deque(sorted(aborted, key=lambda t: t.first_offset))
        self._ongoing_committed: set[int] = set()
        # producer id -> (its aborted transaction, whether a batch of it was read)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self.cleaned_index = cleaned_index  # where the ABORT markers kept get their entries

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction (it goes)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[header.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, batch: bytes) -> bool:
        """A control batch was read; True when no batch of its transaction is left (it may go)."""
        self._consume_aborted_up_to(header.last_offset)
        marker = read_marker(batch, header)
        if marker is None:
            return True  # emptied by an earlier cleaning
        if marker.commit:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        txn, seen = self._ongoing_aborted.pop(header.producer_id, (None, False))
        if txn is not None and seen:
            if self.cleaned_index is not None:
                self.cleaned_index.append(txn)
            return False
        return True


class _BatchWriter:
    """Buffers retained batches and appends them to the cleaned segment in large writes."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, segment: LogSegment, throttler: Throttler, stats: CleanerStats) -> None:
        self._segment = segment
        self._throttler = throttler
        self._stats = stats
        self._buf = bytearray()
        self._batches: list[tuple[int, int, int]] = []
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1

    def add(self, batch: bytes, header: BatchHeader) -> None:
        self._buf += batch
        self._batches.append((len(batch), header.last_offset, header.max_timestamp))
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = header.max_timestamp, header.last_offset
        if len(self._buf) >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        last_offset = self._batches[-1][1]
        self._segment.append(last_offset, self._max_timestamp, self._offset_of_max_timestamp, self._buf, self._batches)
        self._throttler.maybe_throttle(len(self._buf))
        self._stats.bytes_written += len(self._buf)
        self._buf = bytearray()
        self._batches = []
        self._max_timestamp = self._offset_of_max_timestamp = -1


def _clean_group(
    spec: CleanSpec,
    group: list[SegmentFile],
    fds: dict[int, int],
    offset_map: OffsetMap,
    last_of_producer: dict[int, int],
    txns: _TransactionTracker,
    stats: CleanerStats,
    throttler: Throttler,
    stop: Callable[[], bool],
) -> int:
    """Write one group's ``.cleaned`` segment; returns the largest delete horizon it set (-1 for none)."""
    directory = Path(spec.directory)
    cleaned = LogSegment(
        directory,
        group[0].base_offset,
        index_interval_bytes=spec.index_interval_bytes,
        max_index_size=spec.max_index_bytes,
        created_ms=spec.now_ms,
        suffix=CLEANED_FILE_SUFFIX,
    )
    max_horizon = -1
    txns.cleaned_index = cleaned.txn_index
    try:
        writer = _BatchWriter(cleaned, throttler, stats)
        for segment in group:
            if stop():
                raise CleanAborted("the cleaner is stopping")
            fd = fds[segment.base_offset]
            for position, header in scan_batches(fd, segment.size):
                batch = os.pread(fd, header.size, position)
                throttler.maybe_throttle(header.size)
                stats.bytes_read += header.size
                stats.messages_read += header.records_count
                retained = _filter_batch(spec, header, batch, offset_map, last_of_producer, txns, stats)
                if retained is None:
                    continue
                out, out_header, horizon = retained
                max_horizon = max(max_horizon, horizon)
                stats.messages_written += out_header.records_count
                writer.add(out, out_header)
        writer.flush()
        cleaned.on_become_inactive_segment()
        cleaned.flush()
        cleaned.close()
        # Kafka keeps the last modified time of the replaced files: time-based retention of
        # records without timestamps goes by it.
        mtime_ns = group[-1].last_modified_ms * 1_000_000
        os.utime(cleaned.log_path, ns=(mtime_ns, mtime_ns))
    except BaseException:
        cleaned.close_handlers()
        remove_cleaned_files(directory, group[0].base_offset)
        raise
    return max_horizon


def _filter_batch(
    spec: CleanSpec,
    header: BatchHeader,
    batch: bytes,
    offset_map: OffsetMap,
    last_of_producer: dict[int, int],
    txns: _TransactionTracker,
    stats: CleanerStats,
) -> tuple[bytes, BatchHeader, int] | None:
    """What the cleaned segment gets for one batch: (bytes, their header, delete horizon or -1), or None."""
    has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    horizon_passed = has_horizon and spec.now_ms >= header.base_timestamp
    records = list(iter_records(batch, header))
    if header.is_control:
        # A marker no batch needs any more stays until its delete horizon (set now if it has none).
        can_discard = txns.on_control_batch(header, batch)
        kept = [] if can_discard and horizon_passed else records
        needs_horizon = can_discard and not has_horizon
    else:
        aborted = txns.on_batch(header)
        kept = [] if aborted else [r for r in records if _retain(spec, r, offset_map, horizon_passed)]
        if horizon_passed and not aborted:
            kept_offsets = {r.offset for r in kept}
            stats.tombstones_removed += sum(1 for r in records if r.value is None and r.offset not in kept_offsets)
        needs_horizon = not has_horizon and any(r.value is None for r in kept)
    if not kept and not (header.has_producer_id and last_of_producer.get(header.producer_id) == header.last_offset):
        return None  # also an empty batch kept earlier for a producer that has written since
    live_horizon = header.base_timestamp if has_horizon and not horizon_passed else -1
    if len(kept) == len(records) and not needs_horizon:
        return batch, header, live_horizon
    if needs_horizon:
        live_horizon = spec.now_ms + spec.delete_retention_ms
    out = build_retained_batch(header, kept, live_horizon if needs_horizon else (header.base_timestamp if has_horizon else None))
    return out, read_header(out), live_horizon


def _retain(spec: CleanSpec, record: Record, offset_map: OffsetMap, horizon_passed: bool) -> bool:
    if record.offset >= spec.first_dirty_offset and record.offset > offset_map.latest_offset:
        return True  # dirty, but past what the map covers
    if record.key is None:
        return False
    if record.offset < offset_map.get(record.key):
        return False
    return record.value is not None or not horizon_passed
