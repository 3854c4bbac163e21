"""LogSegment: one `.log` file of whole v2 batches plus its `.index` and `.timeindex`.

The `.log` file stays open (``fd``) for the segment's whole life: reads hand out regions of
it that the network layer sends with ``os.sendfile``. Only batch headers are ever read on
the append and fetch paths.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

import structlog

from protocol.record_batch import BATCH_LENGTH, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, InvalidBatch, is_crc_valid, iter_headers, read_header
from storage.abstract_index import CorruptIndexError
from storage.batch_records import record_timestamps
from storage.errors import KafkaStorageError
from storage.fetch_data_info import FetchDataInfo, FileRegion
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log_config import LogConfig
from storage.offset_index import OffsetIndex
from storage.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from storage.transaction_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    # producer_state_manager reaches this module through its snapshots.
    from storage.producer_state_manager import CompletedTxn

log = structlog.get_logger(__name__)

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)

MAX_BATCH_SIZE = 2**31 - 1
_UNKNOWN = TimestampOffset(NO_TIMESTAMP, -1)
_I32 = struct.Struct(">i")


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def offset_from_file(path: Path) -> int:
    """The base offset a segment file is named after; ValueError for any other file."""
    prefix = path.name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{path.name} is not named after an offset")
    return int(prefix)


def header_at(fd: int, end: int, position: int) -> BatchHeader | None:
    """The v2 header of the batch at ``position`` of a file ending at ``end``, or None if unreadable.

    The header is parsed from its own 61 bytes, so its ``position`` field is 0, not ``position``.
    """
    if end - position < HEADER_SIZE:
        return None
    try:
        return read_header(os.pread(fd, HEADER_SIZE, position))
    except InvalidBatch:
        return None


def scan_batches(fd: int, end: int, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch from ``position``; stops at anything unreadable or partial."""
    while True:
        header = header_at(fd, end, position)
        if header is None or position + header.size > end:
            return
        yield position, header
        position += header.size


def whole_batches(region: FileRegion, max_batches: int) -> FileRegion:
    """``region`` without the partial batch a read's byte limit may have cut at its end.

    Walks the batch lengths from the region's start (it starts on a batch); the region comes
    back as it is when it ends on a batch boundary or holds more than ``max_batches`` whole
    batches (then a cut tail is a small share of it), and empty when even its first batch
    is cut. Batches in a segment were validated when appended, so their lengths are trusted.
    """
    end = region.position + region.length
    position = region.position
    for _ in range(max_batches):
        if end - position < LOG_OVERHEAD:
            break
        raw = os.pread(region.fd, _I32.size, position + BATCH_LENGTH)
        if len(raw) < _I32.size:
            break
        (length,) = _I32.unpack(raw)
        following = position + LOG_OVERHEAD + length
        if length <= 0 or following > end:
            break
        position = following
    else:
        return region
    if position == end:
        return region
    return FileRegion(region.fd, region.position, position - region.position)


def read_next_offset_of_file(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a segment file, without opening it as a segment."""
    fd = os.open(path, os.O_RDONLY)
    try:
        next_offset = base_offset
        for _, header in scan_batches(fd, os.fstat(fd).st_size):
            next_offset = header.next_offset
        return next_offset
    finally:
        os.close(fd)


class LogOffsetPosition(NamedTuple):
    """Where a batch lives: ``offset`` is the batch's LAST offset (as in Kafka), then its byte position and size."""

    offset: int
    position: int
    size: int


class SegmentOffsetOverflowError(KafkaStorageError):
    """An offset too far from the base offset to be stored in the int32 index entries."""


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        roll_jitter_ms: int = 0,
        initial_file_size: int = 0,
        suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        stem = str(directory / filename_prefix(base_offset))
        self.log_path = Path(stem + LOG_FILE_SUFFIX + suffix)
        log_existed = self.log_path.exists()
        index_path = Path(stem + INDEX_FILE_SUFFIX + suffix)
        time_index_path = Path(stem + TIME_INDEX_FILE_SUFFIX + suffix)
        self.indexes_missing = not index_path.exists() or not time_index_path.exists()
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if log_existed:
                self.size = os.fstat(self.fd).st_size
            else:
                self.size = 0
                if initial_file_size > 0:
                    os.posix_fallocate(self.fd, 0, initial_file_size)
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_size)
            self.time_index = TimeIndex(time_index_path, base_offset, max_index_size)
            # Aborted transactions whose markers are in this segment; the file appears with the first.
            self.txn_index = TransactionIndex(Path(stem + TXN_INDEX_FILE_SUFFIX + suffix), base_offset)
        except BaseException:
            os.close(self.fd)
            raise
        # Timestamp of the first batch, for time-based rolling; loaded lazily from the file.
        self.rolling_based_timestamp: int | None = None
        self._max_timestamp_and_offset: TimestampOffset | None = None
        self.bytes_since_last_index_entry = max(0, self.size - self.offset_index.last_entry.position)

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, *, suffix: str = "") -> "LogSegment":
        jitter = random.randrange(min(config.segment_jitter_ms, config.segment_ms)) if config.segment_jitter_ms else 0
        return cls(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            created_ms=now_ms,
            roll_jitter_ms=jitter,
            initial_file_size=config.initial_file_size,
            suffix=suffix,
        )

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log_path})"

    # -- timestamps -------------------------------------------------------------------------------

    def read_max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        if self._max_timestamp_and_offset is None:
            self._max_timestamp_and_offset = self.time_index.last_entry
        return self._max_timestamp_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.read_max_timestamp_and_offset_so_far().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """The last offset of the first batch that carried the segment's max timestamp."""
        return self.read_max_timestamp_and_offset_so_far().offset

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """The max record timestamp, or the file's mtime when no record carries one (Kafka's rule)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    @property
    def first_batch_timestamp(self) -> int | None:
        self._load_first_batch_timestamp()
        ts = self.rolling_based_timestamp
        return ts if ts is not None and ts >= 0 else None

    def _load_first_batch_timestamp(self) -> None:
        if self.rolling_based_timestamp is None and self.size > 0:
            header = self._header_at(0)
            if header is not None:
                self.rolling_based_timestamp = header.max_timestamp

    # -- rolling ----------------------------------------------------------------------------------

    def time_waiting_to_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's timeWaitedForRoll: from the first batch's timestamp if it has one, else from creation."""
        self._load_first_batch_timestamp()
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(
        self,
        max_segment_bytes: int,
        max_segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        reached_roll_ms = self.time_waiting_to_roll(now_ms, max_timestamp_in_messages) > max_segment_ms - self.roll_jitter_ms
        return (
            self.size > max_segment_bytes - messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.offset_index.can_append_offset(max_offset_in_messages)
        )

    def on_become_inactive_segment(self) -> None:
        """Record the final max timestamp, write the index files out and trim a preallocated log file."""
        ts = self.read_max_timestamp_and_offset_so_far()
        self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log()

    def _trim_log(self) -> None:
        if os.fstat(self.fd).st_size > self.size:
            os.ftruncate(self.fd, self.size)

    # -- append -----------------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        records: memoryview | bytes | bytearray,
        batches: Sequence[tuple[int, int, int]] | None = None,
    ) -> None:
        """Write already-validated batches with one write, then add sparse index entries.

        ``batches`` lists (size, last offset, max timestamp) per batch, in order; the caller
        usually has them from validation, otherwise they are read from the batch headers.
        An index entry is added for a batch when more than index.interval.bytes were
        written since the previous entry; it points at the start of that batch.
        """
        view = memoryview(records).cast("B")
        if not view.nbytes:
            return
        if not self.offset_index.can_append_offset(largest_offset):
            raise SegmentOffsetOverflowError(f"offset {largest_offset} is too far from the base offset of {self}")
        if batches is None:
            batches = [(h.size, h.last_offset, h.max_timestamp) for h in iter_headers(view)]
        position = self.size
        if position == 0:
            self.rolling_based_timestamp = max_timestamp
        self._write_at(position, view)
        self.size = position + view.nbytes
        ts, ts_offset = self.read_max_timestamp_and_offset_so_far()
        for size, last_offset, batch_max_timestamp in batches:
            if batch_max_timestamp > ts:
                ts, ts_offset = batch_max_timestamp, last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes and not self._indexes_full():
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(ts, ts_offset)
                self.bytes_since_last_index_entry = 0
            position += size
            self.bytes_since_last_index_entry += size
        if max_timestamp > ts:
            ts, ts_offset = max_timestamp, offset_of_max_timestamp
        self._max_timestamp_and_offset = TimestampOffset(ts, ts_offset)

    def _indexes_full(self) -> bool:
        # A multi-batch append can want more entries than are left; the skipped ones only
        # make lookups scan further, and the next append rolls.
        return self.offset_index.is_full() or self.time_index.is_full()

    def _write_at(self, position: int, view: memoryview) -> None:
        written = 0
        try:
            while written < view.nbytes:
                written += os.pwrite(self.fd, view[written:], position + written)
        except OSError:
            # Leave the file ending on a batch boundary so the next append and reads stay sane.
            os.ftruncate(self.fd, position)
            raise

    # -- reading ----------------------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader | None:
        return header_at(self.fd, self.size, position)

    def batch_headers(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from ``start_position``; stops at anything unreadable."""
        return scan_batches(self.fd, self.size, start_position)

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The batch holding the first offset >= ``offset``: index lookup, then a header scan."""
        mapping = self.offset_index.lookup(offset)
        for position, header in self.batch_headers(max(mapping.position, starting_position)):
            if header.last_offset >= offset:
                return LogOffsetPosition(header.last_offset, position, header.size)
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False) -> FetchDataInfo | None:
        """Kafka's LogSegment.read: a region from the batch holding ``start_offset``.

        At most ``max_size`` bytes (so the region may end inside a batch) and never past
        ``max_position``; with ``min_one_message`` the first batch is returned whole even when
        it is larger than ``max_size``. None when no batch here reaches ``start_offset``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from {self}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        limit = self.size if max_position is None else max_position
        adjusted_max_size = max(max_size, found.size) if min_one_message else max_size
        fetch_size = min(limit - found.position, adjusted_max_size)
        if fetch_size <= 0:
            return FetchDataInfo(start_offset)
        return FetchDataInfo(start_offset, [FileRegion(self.fd, found.position, fetch_size)], adjusted_max_size < found.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the segment's log end); scans from the last index entry."""
        next_offset = self.base_offset
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        for _, header in self.batch_headers(start):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record with timestamp >= ``timestamp`` at or after ``starting_offset``.

        The time index narrows the scan; the one batch that can hold the answer is then
        decoded (decompressed if needed) to name the exact record. The epoch is the batch's
        partition leader epoch (-1 when it has none).
        """
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for batch_position, header in self.batch_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = self.read_batch(batch_position, header.size)
            for offset, record_timestamp in record_timestamps(header, batch):
                if record_timestamp >= timestamp and offset >= starting_offset:
                    return record_timestamp, offset, header.partition_leader_epoch
        return None

    # -- recovery and truncation ------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when the indexes cannot serve this log as they are."""
        if self.indexes_missing and self.size > 0:
            raise CorruptIndexError(f"index files of {self.log_path} are missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()

    def recover(self, max_message_size: int = MAX_BATCH_SIZE, leader_epoch_cache: LeaderEpochCache | None = None) -> int:
        """Re-validate every batch, rebuild both indexes, cut the log after the last valid batch.

        A batch is valid when its header parses as magic 2, its size is sane and at most
        ``max_message_size``, its CRC32C matches and its offsets follow the previous batch.
        Returns the number of bytes truncated (a torn or corrupt tail).
        """
        self.offset_index.reset()
        self.time_index.reset()
        ts, ts_offset = _UNKNOWN
        valid = 0
        last_index_entry = 0
        next_offset = self.base_offset
        problem: str | None = None
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as mm:
                view = memoryview(mm)
                try:
                    while self.size - valid >= LOG_OVERHEAD:
                        (length,) = _I32.unpack_from(view, valid + 8)
                        if length < HEADER_SIZE - LOG_OVERHEAD or length + LOG_OVERHEAD > max_message_size:
                            problem = f"batch length {length}"
                            break
                        if valid + LOG_OVERHEAD + length > self.size:
                            problem = "partial batch"
                            break
                        header = read_header(view, valid)
                        if not is_crc_valid(view, header):
                            problem = "CRC mismatch"
                            break
                        if header.base_offset < next_offset or not self.offset_index.can_append_offset(header.last_offset):
                            problem = f"batch offsets {header.base_offset}..{header.last_offset} out of order"
                            break
                        if header.max_timestamp > ts:
                            ts, ts_offset = header.max_timestamp, header.last_offset
                        if valid - last_index_entry > self.index_interval_bytes and not self._indexes_full():
                            self.offset_index.append(header.last_offset, valid)
                            self.time_index.maybe_append(ts, ts_offset)
                            last_index_entry = valid
                        valid += header.size
                        next_offset = header.next_offset
                        epoch = header.partition_leader_epoch
                        if leader_epoch_cache is not None and epoch >= 0 and epoch > leader_epoch_cache.latest_epoch:
                            leader_epoch_cache.assign(epoch, header.base_offset)
                    else:
                        if self.size > valid:
                            problem = "partial batch header"
                except InvalidBatch as e:
                    problem = str(e)
                finally:
                    view.release()
        truncated = self.size - valid
        self.txn_index.truncate_to(next_offset)
        if truncated:
            log.warning("log_segment.invalid_bytes", segment=str(self.log_path), position=valid, truncated_bytes=truncated, reason=problem)
            os.ftruncate(self.fd, valid)
            self.size = valid
        self.offset_index.trim_to_valid_size()
        self._max_timestamp_and_offset = TimestampOffset(ts, ts_offset)
        self.time_index.maybe_append(ts, ts_offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self.bytes_since_last_index_entry = valid - last_index_entry
        self.rolling_based_timestamp = None
        self.indexes_missing = False
        return truncated

    def update_txn_index(self, txn: CompletedTxn, last_stable_offset: int) -> None:
        """Index an aborted transaction whose marker is in this segment."""
        # A replay after a restart may meet markers whose entries are already in the file.
        if txn.is_aborted and txn.last_offset > self.txn_index.last_offset:
            self.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Remove every batch ending at or after ``offset`` (whole batches); returns the bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = 0
        if mapping is not None:
            removed = self.size - mapping.position
            os.ftruncate(self.fd, mapping.position)
            self.size = mapping.position
        if self.size == 0:
            if now_ms is not None:
                self.created_ms = now_ms
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = max(0, self.size - self.offset_index.last_entry.position)
        if self.max_timestamp_so_far >= 0:
            self._max_timestamp_and_offset = self._read_largest_timestamp()
        return removed

    def _read_largest_timestamp(self) -> TimestampOffset:
        """The last time index entry, or a larger timestamp found in the batches after it."""
        best = self.time_index.last_entry
        start = self.offset_index.lookup(best.offset).position
        for _, header in self.batch_headers(start):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    # -- durability and lifecycle -----------------------------------------------------------------

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Record the final max timestamp, trim the files to their content and close them."""
        try:
            if self._max_timestamp_and_offset is not None:
                ts = self._max_timestamp_and_offset
                self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
            self.offset_index.close()
            self.time_index.close()
            self._trim_log()
        finally:
            self.close_handlers()

    def close_handlers(self) -> None:
        """Release the maps and the fd without writing anything (deleted or failed segments)."""
        self.offset_index.close_handler()
        self.time_index.close_handler()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        return self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        def renamed(path: Path) -> Path:
            base = path.name.removesuffix(old_suffix) if old_suffix else path.name
            return path.with_name(base + new_suffix)

        new_log_path = renamed(self.log_path)
        if self.log_path.exists():
            os.rename(self.log_path, new_log_path)
        self.log_path = new_log_path
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def rename_to_deleted(self) -> None:
        self.change_file_suffixes("", DELETED_FILE_SUFFIX)

    def delete(self) -> None:
        """Close the segment's handles and remove its files."""
        self.close_handlers()
        for path in self.paths:
            path.unlink(missing_ok=True)
