"""LogSegment: one `.log` file of whole batches plus its offset and time indexes."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from protocol.record_batch import HEADER_SIZE, BatchHeader, InvalidBatch, is_crc_valid, iter_headers, read_header
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes of a segment file to be sent as they are (``os.sendfile``)."""

    fd: int
    position: int
    length: int


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, max_index_entries: int, created_ms: int) -> None:
        self.base_offset = base_offset
        self.directory = directory
        stem = segment_name(base_offset)
        self.log_path = directory / f"{stem}.log"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(directory / f"{stem}.index", base_offset, max_index_entries)
        self.time_index = TimeIndex(directory / f"{stem}.timeindex", base_offset, max_index_entries)
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        self.first_append_ms: int | None = None
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.next_offset = base_offset
        self.deleted_at_ms: int | None = None

    # -- writing --------------------------------------------------------------------

    def append(self, records: memoryview | bytes, batches: list[tuple[int, int, int, int]], now_ms: int) -> None:
        """Write ``records`` in one call; ``batches`` gives (relative position, last offset, max timestamp) per batch."""
        position = self.size
        written = os.write(self.fd, records)
        if written != len(records):
            raise OSError(f"short write to {self.log_path}: {written} of {len(records)}")
        if self.first_append_ms is None:
            self.first_append_ms = now_ms
        for rel_pos, last_offset, max_ts, size in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last_offset, position + rel_pos)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size
        self.size += len(records)
        self.next_offset = batches[-1][1] + 1

    def should_roll(self, incoming: int, segment_bytes: int, segment_ms: int, now_ms: int) -> bool:
        if self.size == 0:
            return False
        if self.size + incoming > segment_bytes:
            return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        started = self.first_append_ms if self.first_append_ms is not None else self.created_ms
        return now_ms - started > segment_ms

    # -- reading --------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader | None:
        data = os.pread(self.fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        try:
            header = read_header(data)
        except InvalidBatch:
            return None
        return header

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        while position < self.size:
            header = self._header_at(position)
            if header is None:
                return None
            if header.last_offset >= offset:
                return position, header
            position += header.size
        return None

    def read(self, start_offset: int, max_size: int, max_position: int, min_one_message: bool) -> FileRegion | None:
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        if position >= max_position:
            return FileRegion(self.fd, position, 0)
        size = max(max_size, header.size) if min_one_message else max_size
        return FileRegion(self.fd, position, min(max_position - position, size))

    def iter_batch_headers(self, start_position: int = 0) -> list[tuple[int, BatchHeader]]:
        out = []
        position = start_position
        while position < self.size:
            header = self._header_at(position)
            if header is None:
                break
            out.append((position, header))
            position += header.size
        return out

    # -- recovery -------------------------------------------------------------------

    def load_tail(self) -> None:
        """After a clean shutdown: find the next offset and max timestamp from the index tail."""
        _, position = self.offset_index.lookup(2**63 - 1)
        self.next_offset = self.base_offset
        ts, ts_offset = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = ts, ts_offset
        for _, header in self.iter_batch_headers(position):
            self.next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        if self.next_offset == self.base_offset and position > 0:
            self.next_offset = self.offset_index.last_offset + 1

    def recover(self) -> int:
        """Re-validate every batch, rebuild both indexes, cut a torn or corrupt tail.

        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.next_offset = self.base_offset
        valid = 0
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as mm:
                view = memoryview(mm)
                try:
                    for header in iter_headers(view):
                        if header.base_offset < self.next_offset or not is_crc_valid(view, header):
                            break
                        self.append_index_entries(header)
                        valid = header.position + header.size
                except InvalidBatch:
                    pass
                finally:
                    view.release()
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self.fd, valid)
            self.size = valid
        return truncated

    def append_index_entries(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, header.position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.size
        self.next_offset = header.next_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that ends at or after ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.recover_tail_state()
        return removed

    def recover_tail_state(self) -> None:
        self.max_timestamp = -1
        self.next_offset = self.base_offset
        for _, header in self.iter_batch_headers():
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset

    # -- lifecycle ------------------------------------------------------------------

    @property
    def largest_timestamp(self) -> int:
        """Kafka uses the file's mtime when no record carries a timestamp."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        os.close(self.fd)

    def rename_to_deleted(self) -> None:
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if path.exists():
                path.rename(path.with_name(path.name + ".deleted"))

    def delete_files(self) -> None:
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            for candidate in (path, path.with_name(path.name + ".deleted")):
                candidate.unlink(missing_ok=True)
