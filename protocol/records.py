"""Records inside v2 batches: full decoding and building, for tools, tests, the metadata log
and the cleaner. Never used on the produce or fetch path, which keep batches as bytes.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterator, Sequence

import crc32c

from protocol.compression import compress, decompress
from protocol.record_batch import (
    ATTRIBUTES,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    iter_headers,
    read_header,
)

Header = tuple[str, bytes | None]


class InvalidRecordError(ValueError):
    pass


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def encode_varint(value: int) -> bytes:
    """Zigzag varint (Kafka's signed varint/varlong)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidRecordError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise InvalidRecordError("field runs past the end of the record")
    return bytes(buf[pos : pos + length]), pos + length


def iter_records(batch: bytes | memoryview, header: BatchHeader | None = None) -> Iterator[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    if header is None:
        header = read_header(batch)
    start = header.position + HEADER_SIZE
    body = batch[start : header.position + header.size]
    data = decompress(header.compression, body) if header.compression else body
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    pos = 0
    for _ in range(header.records_count):
        length, pos = decode_varint(data, pos)
        end = pos + length
        if end > len(data):
            raise InvalidRecordError("record runs past the end of the batch")
        pos += 1  # attributes
        ts_delta, pos = decode_varint(data, pos)
        offset_delta, pos = decode_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        count, pos = decode_varint(data, pos)
        headers = []
        for _ in range(count):
            hkey, pos = _read_bytes(data, pos)
            hvalue, pos = _read_bytes(data, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))
        if pos != end:
            raise InvalidRecordError("record length does not match its fields")
        timestamp = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        yield Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))


def iter_batches(buf: bytes | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    view = memoryview(buf)
    for header in iter_headers(view):
        yield header, view[header.position : header.position + header.size]


def _encode_bytes(value: bytes | None) -> bytes:
    return encode_varint(-1) if value is None else encode_varint(len(value)) + value


RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type_log_append: bool = False,
) -> bytes:
    """A complete v2 batch of (key, value, headers, timestamp) records, CRC included."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base_ts = records[0][3]
    max_ts = max(r[3] for r in records)
    body = bytearray()
    for delta, (key, value, headers, ts) in enumerate(records):
        rec = bytearray(b"\x00")
        rec += encode_varint(ts - base_ts)
        rec += encode_varint(delta)
        rec += _encode_bytes(key)
        rec += _encode_bytes(value)
        rec += encode_varint(len(headers))
        for hkey, hvalue in headers:
            rec += _encode_bytes(hkey.encode())
            rec += _encode_bytes(hvalue)
        body += encode_varint(len(rec)) + rec
    payload = compress(compression, bytes(body)) if compression else bytes(body)
    attributes = compression
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    tail = struct.pack(">hiqqqhii", attributes, len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records)) + payload
    crc = crc32c.crc32c(tail)
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    head = struct.pack(">qiibI", base_offset, length, partition_leader_epoch, 2, crc)
    assert len(head) == ATTRIBUTES
    return head + tail


def build_control_batch(
    kind: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    key = struct.pack(">hh", 0, int(kind))
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value, (), ts)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    if record.key is None or len(record.key) < 4 or record.value is None or len(record.value) < 6:
        raise InvalidRecordError("not a control record")
    _, kind = struct.unpack_from(">hh", record.key)
    _, coordinator_epoch = struct.unpack_from(">hi", record.value)
    return ControlRecordType(kind), coordinator_epoch
