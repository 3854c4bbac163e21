"""Builds v2 record batches for storage tests (a test helper, independent of protocol/records.py).

Records follow Kafka's v2 layout: length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, keyLength varint, key, valueLength varint, value, header count varint,
headers (key length varint, key, value length varint, value); varints are zigzag encoded.
"""

from __future__ import annotations

import struct
from typing import Iterator, Sequence

import crc32c

from protocol.compression import compress, decompress
from protocol.record_batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, iter_headers

_HEADER = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = struct.Struct(">hiqqqhii")

Header = tuple[bytes, bytes | None]


def varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> bytes:
    body = bytearray(b"\x00")
    body += varint(timestamp_delta) + varint(offset_delta) + _bytes_field(key) + _bytes_field(value) + varint(len(headers))
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey + _bytes_field(hvalue)
    return varint(len(body)) + bytes(body)


def make_batch(
    values: Sequence[bytes | None] = (b"value",),
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | None = None,
    base_timestamp: int = 1_700_000_000_000,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    compression: int = 0,
    headers: Sequence[Header] = (),
    offset_deltas: Sequence[int] | None = None,
) -> bytearray:
    """One valid batch; timestamps default to base_timestamp, base_timestamp + 1, ..."""
    count = len(values)
    ts = list(timestamps) if timestamps is not None else [base_timestamp + i for i in range(count)]
    deltas = list(offset_deltas) if offset_deltas is not None else list(range(count))
    first_ts = ts[0] if ts else base_timestamp
    records = b"".join(
        encode_record(deltas[i], ts[i] - first_ts, keys[i] if keys else None, values[i], headers) for i in range(count)
    )
    if compression:
        records = compress(compression, records)
    attrs = attributes | compression
    max_ts = max(ts) if ts else -1
    after_crc = _AFTER_CRC.pack(attrs, deltas[-1] if deltas else 0, first_ts, max_ts, producer_id, producer_epoch, base_sequence, count) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return bytearray(struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc)


def concat(*batches: bytes | bytearray) -> bytearray:
    out = bytearray()
    for batch in batches:
        out += batch
    return out


def decode_records(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record of every whole batch in ``data``."""
    buf = bytes(data)
    for header in iter_headers(buf):
        payload = buf[header.position + HEADER_SIZE : header.position + header.size]
        if header.compression:
            payload = decompress(header.compression, payload)
        pos = 0
        for _ in range(header.records_count):
            length, pos = _read_varint(payload, pos)
            end = pos + length
            pos += 1
            ts_delta, pos = _read_varint(payload, pos)
            off_delta, pos = _read_varint(payload, pos)
            key, pos = _read_bytes(payload, pos)
            value, pos = _read_bytes(payload, pos)
            timestamp = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else header.base_timestamp + ts_delta
            yield header.base_offset + off_delta, timestamp, key, value
            pos = end


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    return buf[pos : pos + length], pos + length


class FakeClock:
    """A settable millisecond clock for Log/LogManager's ``now_ms``."""

    def __init__(self, now: int = 1_700_000_010_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now
