"""Just enough of the v2 record format to find record timestamps, or null keys, inside one batch.

ListOffsets by time (and MAX_TIMESTAMP) must name the exact record, which means looking
inside a batch; a produce to a compacted topic must find the records without a key. Both
read only each record's length and the fields before the key; keys, values and headers are
skipped over.
"""

from __future__ import annotations

from typing import Iterator

from protocol.compression import CompressionError, decompress
from protocol.record_batch import HEADER_SIZE, BatchHeader
from protocol.records import InvalidRecordError, decode_varlong
from storage.errors import CorruptRecordError


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Kafka's zigzag varint/varlong; returns (value, position after it)."""
    try:
        return decode_varlong(buf, pos)
    except InvalidRecordError as e:
        raise CorruptRecordError(str(e)) from None


def _records_section(header: BatchHeader, batch: bytes | memoryview) -> bytes | memoryview:
    payload = batch[HEADER_SIZE : header.size]
    if header.compression:
        try:
            return decompress(header.compression, payload)
        except CompressionError as e:
            raise CorruptRecordError(f"cannot decompress the batch at offset {header.base_offset}: {e}") from None
    return payload


def _record_prefixes(header: BatchHeader, batch: bytes | memoryview) -> Iterator[tuple[int, int, int]]:
    """(timestamp delta, offset delta, key length) of each record, the rest of it skipped."""
    payload = _records_section(header, batch)
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > len(payload):
            raise CorruptRecordError(f"record of {length} bytes overruns the batch at offset {header.base_offset}")
        pos += 1  # attributes
        timestamp_delta, pos = read_varint(payload, pos)
        offset_delta, pos = read_varint(payload, pos)
        key_length, _ = read_varint(payload, pos)
        yield timestamp_delta, offset_delta, key_length
        pos = end


def record_timestamps(header: BatchHeader, batch: bytes) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of every record in ``batch`` (the whole batch, header included).

    LogAppendTime batches stamp every record with the batch's max timestamp, as Kafka's
    DefaultRecord does. Compressed batches are decompressed here (one batch, off the hot path).
    """
    for timestamp_delta, offset_delta, _ in _record_prefixes(header, batch):
        timestamp = header.max_timestamp if header.is_log_append_time else header.base_timestamp + timestamp_delta
        yield header.base_offset + offset_delta, timestamp


def keyless_record_indexes(header: BatchHeader, batch: bytes | memoryview) -> list[int]:
    """The index in ``batch`` of every record whose key is null (a compacted topic refuses them)."""
    return [index for index, (_, _, key_length) in enumerate(_record_prefixes(header, batch)) if key_length < 0]
