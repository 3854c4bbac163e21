"""Record batch v2 headers, read and rewritten in place.

This is the hot path: a batch stays a ``memoryview`` over the bytes it arrived in.
Only the fixed 61-byte header is looked at; records are never decoded here.

Layout (all big-endian)::

    0  baseOffset            int64       35 maxTimestamp     int64
    8  batchLength           int32       43 producerId       int64
    12 partitionLeaderEpoch  int32       51 producerEpoch    int16
    16 magic                 int8        53 baseSequence     int32
    17 crc                   uint32      57 recordsCount     int32
    21 attributes            int16       61 records...
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64

The CRC32C covers everything from ``attributes`` to the end of the batch, so
``baseOffset`` and ``partitionLeaderEpoch`` can be rewritten without touching it.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import crc32c

BASE_OFFSET = 0
BATCH_LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted in batchLength

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class InvalidBatch(Exception):
    """The bytes are not a well-formed v2 record batch (Kafka: CORRUPT_MESSAGE)."""


class UnsupportedMagic(InvalidBatch):
    """A message set of magic 0 or 1; produce v3+ only carries magic 2."""


class BatchHeader(NamedTuple):
    """The decoded fixed header of one batch; ``position`` is its start in the buffer.

    A NamedTuple, not a frozen dataclass: every produce, fetch and recovery decodes one per
    batch, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) took
    most of segment recovery's time."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: memoryview | bytes, position: int = 0) -> BatchHeader:
    """Decode the header at ``position``; raises InvalidBatch when it cannot be one."""
    if len(buf) - position < HEADER_SIZE:
        if len(buf) - position >= MAGIC + 1 and buf[position + MAGIC] in (0, 1):
            raise UnsupportedMagic("message format v0/v1 is not supported")
        raise InvalidBatch("batch shorter than the v2 header")
    fields = _HEADER.unpack_from(buf, position)
    header = BatchHeader(position, *fields)
    if header.magic != 2:
        if header.magic in (0, 1):
            raise UnsupportedMagic(f"message format v{header.magic} is not supported")
        raise InvalidBatch(f"unknown magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"batch length {header.batch_length} below the header size")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidBatch("negative record count or offset delta")
    return header


def compute_crc(buf: memoryview | bytes, header: BatchHeader) -> int:
    start = header.position + ATTRIBUTES
    return crc32c.crc32c(buf[start : header.position + header.size])


def is_crc_valid(buf: memoryview | bytes, header: BatchHeader) -> bool:
    return compute_crc(buf, header) == header.crc


def iter_headers(buf: memoryview | bytes, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
    """Walk consecutive batches; stops before a batch that does not fit in ``end``.

    A trailing partial batch (the client's ``max_bytes`` cut or a torn write) is
    simply not yielded; callers decide whether that is an error.
    """
    limit = len(buf) if end is None else end
    while limit - position >= LOG_OVERHEAD:
        (length,) = _I32.unpack_from(buf, position + BATCH_LENGTH)
        if length < HEADER_SIZE - LOG_OVERHEAD or position + LOG_OVERHEAD + length > limit:
            return
        header = read_header(buf, position)
        yield header
        position += header.size


# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: a smaller size field cannot be any batch.
_MIN_BATCH_LENGTH = 14
ZSTD = 4
ZSTD_MIN_PRODUCE_VERSION = 7


class InvalidProduceRecords(ValueError):
    """Kafka's ProduceRequest.validateRecords refusing one partition's records."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def validate_produce_records(buf: memoryview | bytes, version: int) -> None:
    """Produce v3+ carries exactly one magic-2 batch per partition, zstd only from v7.

    Kafka walks the batches with its batch iterator, which stops at a batch that does
    not fit; it counts whole batches only and reads just the size and magic fields.
    Raises InvalidProduceRecords with INVALID_RECORD (87), CORRUPT_MESSAGE (2) or
    UNSUPPORTED_COMPRESSION_TYPE (76).
    """
    if version < 3:
        return
    batches = 0
    first_magic = first_attributes = -1
    position, end = 0, len(buf)
    while end - position >= LOG_OVERHEAD:
        (length,) = _I32.unpack_from(buf, position + BATCH_LENGTH)
        if length < _MIN_BATCH_LENGTH:
            raise InvalidProduceRecords(2, f"Record size {length} is less than the minimum record overhead ({_MIN_BATCH_LENGTH})")
        if position + LOG_OVERHEAD + length > end:
            break
        if batches == 0:
            first_magic = buf[position + MAGIC]
            if first_magic == 2 and length + LOG_OVERHEAD >= HEADER_SIZE:
                (first_attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES)
        batches += 1
        position += LOG_OVERHEAD + length
    if batches == 0:
        raise InvalidProduceRecords(87, f"Produce requests with version {version} must have at least one record batch per partition")
    if first_magic != 2:
        raise InvalidProduceRecords(87, f"Produce requests with version {version} are only allowed to contain record batches with magic version 2")
    if version < ZSTD_MIN_PRODUCE_VERSION and first_attributes & COMPRESSION_MASK == ZSTD:
        raise InvalidProduceRecords(76, f"Produce requests with version {version} are not allowed to use ZStandard compression")
    if batches > 1:
        raise InvalidProduceRecords(87, f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition")


def set_base_offset(buf: memoryview | bytearray, header: BatchHeader, base_offset: int) -> None:
    _I64.pack_into(buf, header.position + BASE_OFFSET, base_offset)


def set_partition_leader_epoch(buf: memoryview | bytearray, header: BatchHeader, epoch: int) -> None:
    _I32.pack_into(buf, header.position + PARTITION_LEADER_EPOCH, epoch)


def set_log_append_time(buf: memoryview | bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` and refresh its CRC (both are covered)."""
    _I16.pack_into(buf, header.position + ATTRIBUTES, header.attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, header.position + MAX_TIMESTAMP, timestamp_ms)
    start = header.position + ATTRIBUTES
    _U32.pack_into(buf, header.position + CRC, crc32c.crc32c(buf[start : header.position + header.size]))
