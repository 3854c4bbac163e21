"""The records inside v2 batches, fully decoded and built.

For the places that need every record: tests, the CLI consumer, the metadata log and the
log cleaner. The produce and fetch paths never come here; they keep batches as bytes and
look only at the fixed header (protocol/record_batch.py).

A record inside a batch (DefaultRecord in Kafka)::

    length          varint   bytes after this field
    attributes      int8     unused
    timestampDelta  varlong  from the batch's baseTimestamp
    offsetDelta     varint   from the batch's baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         (keyLength varint, key utf-8, valueLength varint (-1 null), value)*

Varints are zigzag-encoded (protobuf's sint32/sint64). The records section is compressed
as a whole when the batch names a codec.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import BinaryIO, Iterator, Protocol, Sequence

import crc32c
from kio.records.readers import read_signed_compact_string_as_bytes_nullable
from kio.records.writers import write_signed_compact_bytes
from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong
from kio.serial.writers import write_signed_varint, write_signed_varlong

from protocol.compression import CompressionType, compress, decompress
from protocol.record_batch import (
    ATTRIBUTES,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    iter_headers,
    read_header,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

MAGIC_V2 = 2

# Every field of the fixed header, CRC included (as zero until computed).
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_MARKER = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_RECORD_VERSION = 0
END_TXN_MARKER_VERSION = 0

Header = tuple[str, bytes | None]


class InvalidRecordError(ValueError):
    """Record data that does not decode: lengths past the end, bad varints, wrong sizes."""


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


class RecordLike(Protocol):
    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[Header]: ...

    @property
    def timestamp(self) -> int: ...


RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]


def write_varint(out: BinaryIO, value: int) -> None:
    """Append ``value`` (an int32) as a zigzag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    write_signed_varint(out, value)


def write_varlong(out: BinaryIO, value: int) -> None:
    """Append ``value`` (an int64) as a zigzag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    write_signed_varlong(out, value)


def encode_varint(value: int) -> bytes:
    out = io.BytesIO()
    write_varint(out, value)
    return out.getvalue()


def encode_varlong(value: int) -> bytes:
    out = io.BytesIO()
    write_varlong(out, value)
    return out.getvalue()


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint (int32, at most 5 bytes) at ``pos`` and the position after it."""
    try:
        value, size = read_signed_varint(buf, pos)
    except (DecodeError, ValueError) as e:
        raise InvalidRecordError(f"bad varint at {pos}: {e}") from None
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidRecordError(f"varint at {pos} overflows int32")
    return value, pos + size


def decode_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varlong (int64, at most 10 bytes) at ``pos`` and the position after it."""
    try:
        value, size = read_signed_varlong(buf, pos)
    except (DecodeError, ValueError) as e:
        raise InvalidRecordError(f"bad varlong at {pos}: {e}") from None
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidRecordError(f"varlong at {pos} overflows int64")
    return value, pos + size


def _read_nullable_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    try:
        value, size = read_signed_compact_string_as_bytes_nullable(buf, pos)
    except (DecodeError, ValueError) as e:
        raise InvalidRecordError(f"bad length-prefixed field at {pos}: {e}") from None
    return value, pos + size


def iter_records(batch: bytes | memoryview, header: BatchHeader | None = None) -> Iterator[Record]:
    """Every record of one batch, decompressing the records section if needed.

    ``batch`` starts at the batch's first byte; ``header`` (read from ``batch`` when not
    given) supplies the fields, and its ``position`` is ignored, so headers from
    ``iter_batches`` or ``iter_headers`` over a larger buffer fit. The CRC is not checked
    here (``record_batch.is_crc_valid`` does that). Raises InvalidRecordError for records
    that do not decode, CompressionError for a records section that does not decompress.
    """
    if header is None:
        header = read_header(batch)
    if len(batch) < header.size:
        raise InvalidRecordError(f"batch of {header.size} bytes cut at {len(batch)}")
    section = memoryview(batch)[HEADER_SIZE : header.size]
    # A memoryview, so that slicing out each record does not copy the rest.
    data = memoryview(decompress(header.compression, section)) if header.compression else section
    log_append_time = header.is_log_append_time
    pos = 0
    for _ in range(header.records_count):
        record, pos = _read_record(data, pos, header, log_append_time)
        yield record
    if pos != len(data):
        raise InvalidRecordError(f"{len(data) - pos} bytes left after the batch's {header.records_count} records")


def _read_record(data: memoryview, pos: int, header: BatchHeader, log_append_time: bool) -> tuple[Record, int]:
    length, start = decode_varint(data, pos)
    end = start + length
    if length < 0 or end > len(data):
        raise InvalidRecordError(f"record of {length} bytes at {start} runs past the records section ({len(data)} bytes)")
    body = data[:end]  # so that no field reads into the next record
    pos = start + 1  # attributes: no record-level attribute is defined
    timestamp_delta, pos = decode_varlong(body, pos)
    offset_delta, pos = decode_varint(body, pos)
    key, pos = _read_nullable_bytes(body, pos)
    value, pos = _read_nullable_bytes(body, pos)
    count, pos = decode_varint(body, pos)
    if count < 0:
        raise InvalidRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        header_key, pos = _read_nullable_bytes(body, pos)
        if header_key is None:
            raise InvalidRecordError("null header key")
        header_value, pos = _read_nullable_bytes(body, pos)
        # Java's String(bytes, UTF_8) replaces malformed sequences rather than failing.
        headers.append((header_key.decode("utf-8", "replace"), header_value))
    if pos != end:
        raise InvalidRecordError(f"record declares {length} bytes but its fields take {pos - start}")
    timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)), end


def iter_batches(buf: bytes | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each whole batch in ``buf`` with a view of its bytes; a trailing partial batch is skipped.

    A header's ``position`` is where its batch starts in ``buf``.
    """
    view = memoryview(buf)
    for header in iter_headers(view):
        yield header, view[header.position : header.position + header.size]


def _fields(record: RecordInput | RecordLike) -> RecordInput:
    if isinstance(record, tuple):
        return record
    return record.key, record.value, record.headers, record.timestamp


def _write_record(out: io.BytesIO, offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> None:
    body = io.BytesIO()
    body.write(b"\x00")
    write_varlong(body, timestamp_delta)
    write_varint(body, offset_delta)
    write_signed_compact_bytes(body, key)
    write_signed_compact_bytes(body, value)
    write_varint(body, len(headers))
    for header_key, header_value in headers:
        write_signed_compact_bytes(body, header_key.encode("utf-8"))
        write_signed_compact_bytes(body, header_value)
    write_varint(out, body.tell())
    out.write(body.getbuffer())


def build_batch(
    records: Sequence[RecordInput | RecordLike],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type_log_append: bool = False,
) -> bytes:
    """A complete v2 batch (Kafka's MemoryRecordsBuilder), CRC32C included.

    ``records`` are (key, value, headers, timestamp) tuples or objects with those
    attributes (a Record's offset is not used). They get offset deltas 0..n-1;
    baseTimestamp is the first record's timestamp and maxTimestamp the largest.
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    entries = [_fields(r) for r in records]
    base_timestamp = entries[0][3]
    max_timestamp = max(e[3] for e in entries)
    section = io.BytesIO()
    for offset_delta, (key, value, headers, timestamp) in enumerate(entries):
        _write_record(section, offset_delta, timestamp - base_timestamp, key, value, headers)
    payload = compress(compression, section.getvalue()) if compression else section.getvalue()
    attributes = compression
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    out = bytearray(HEADER_SIZE + len(payload))
    try:
        _BATCH_HEADER.pack_into(
            out,
            0,
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            len(entries) - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(entries),
        )
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    out[HEADER_SIZE:] = payload
    _CRC.pack_into(out, CRC, crc32c.crc32c(memoryview(out)[ATTRIBUTES:]))
    return bytes(out)


def build_control_batch(
    kind: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: one COMMIT or ABORT control record in a transactional batch."""
    key = _CONTROL_KEY.pack(CONTROL_RECORD_VERSION, kind)
    value = _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """The marker type and coordinator epoch of a transaction marker record."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise InvalidRecordError("a control record key is 4 bytes: version, type")
    version, kind = _CONTROL_KEY.unpack_from(record.key)
    if version < 0:
        raise InvalidRecordError(f"negative control record version {version}")
    try:
        marker = ControlRecordType(kind)
    except ValueError:
        raise InvalidRecordError(f"control record type {kind} is not a transaction marker") from None
    if record.value is None or len(record.value) < _END_TXN_MARKER.size:
        raise InvalidRecordError("a transaction marker value is 6 bytes: version, coordinatorEpoch")
    marker_version, coordinator_epoch = _END_TXN_MARKER.unpack_from(record.value)
    if marker_version < 0:
        raise InvalidRecordError(f"negative transaction marker version {marker_version}")
    return marker, coordinator_epoch


def build_retained_batch(original: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None = None) -> bytes:
    """What the log cleaner writes for a batch it kept only ``records`` of (Kafka's buildRetainedRecordsInto).

    The batch keeps its base offset, producer id, epoch and base sequence, leader epoch,
    timestamp type, transactional and control flags and codec; each record keeps its offset
    (so deltas may skip) and its timestamp, and the batch keeps its last offset whatever records
    went, as Kafka does, so the producer's last sequence is still right. With ``delete_horizon_ms`` (KIP-534) the base
    timestamp holds the horizon and the batch says so; record timestamps stay what they were,
    their deltas taken from the horizon. No records gives Kafka's empty batch: the header
    alone, uncompressed.
    """
    base_offset = original.base_offset
    attributes = original.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    if records:
        base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
        section = io.BytesIO()
        for record in records:
            _write_record(section, record.offset - base_offset, record.timestamp - base_timestamp, record.key, record.value, record.headers)
        payload = compress(original.compression, section.getvalue()) if original.compression else section.getvalue()
        attributes |= original.compression
        max_timestamp = original.max_timestamp if original.is_log_append_time else max(r.timestamp for r in records)
    else:
        payload = b""
        base_timestamp = original.base_timestamp if delete_horizon_ms is None else delete_horizon_ms
        max_timestamp = original.max_timestamp
    out = bytearray(HEADER_SIZE + len(payload))
    _BATCH_HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        original.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        original.last_offset_delta,
        base_timestamp,
        max_timestamp,
        original.producer_id,
        original.producer_epoch,
        original.base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = payload
    _CRC.pack_into(out, CRC, crc32c.crc32c(memoryview(out)[ATTRIBUTES:]))
    return bytes(out)
