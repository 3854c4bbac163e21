"""v2 records: build/decode round trips through every codec, varints, control batches,
malformed input, and agreement with a real client's encoder and decoder (kafka-python)."""

from __future__ import annotations

import random
import struct
from typing import Sequence

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from protocol.compression import CompressionError, CompressionType, compress
from protocol.record_batch import BATCH_LENGTH, HEADER_SIZE, LOG_OVERHEAD, RECORDS_COUNT, is_crc_valid, read_header, set_log_append_time
from protocol.records import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    ControlRecordType,
    InvalidRecordError,
    Record,
    RecordInput,
    build_batch,
    build_control_batch,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_batches,
    iter_records,
    parse_control_record,
)

CODECS = list(CompressionType)
# One megabyte, half random and half repetitive, so that every codec has real work.
BIG_VALUE = random.Random(3).randbytes(1 << 19) + b"0123456789abcdef" * (1 << 15)

headers_strategy = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)
timestamps = st.integers(-1, 2**45) | st.sampled_from([0, 1, 2**41, 1_700_000_000_000])
records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=50),
        st.none() | st.just(b"") | st.binary(max_size=300),
        headers_strategy,
        timestamps,
    ),
    min_size=1,
    max_size=20,
)


def expected(records: Sequence[RecordInput], base_offset: int) -> list[Record]:
    return [Record(base_offset + i, ts, key, value, tuple(tuple(h) for h in headers)) for i, (key, value, headers, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
@settings(max_examples=60, deadline=None)
@given(
    records=records_strategy,
    big=st.sampled_from([False] * 11 + [True]),
    base_offset=st.integers(0, 2**62),
    producer=st.sampled_from([(-1, -1, -1), (0, 0, 0), (2**40, 32767, INT32_MAX - 30)]),
    is_transactional=st.booleans(),
    leader_epoch=st.integers(-1, INT32_MAX),
)
def test_build_then_decode_every_codec(
    codec: CompressionType,
    records: list[RecordInput],
    big: bool,
    base_offset: int,
    producer: tuple[int, int, int],
    is_transactional: bool,
    leader_epoch: int,
) -> None:
    if big:
        event("a 1 MB value")
        key, _, headers, ts = records[len(records) // 2]
        records[len(records) // 2] = (key, BIG_VALUE, headers, ts)
    producer_id, producer_epoch, base_sequence = producer
    batch = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=leader_epoch,
    )
    header = read_header(batch)
    assert is_crc_valid(batch, header)
    assert header.size == len(batch) and header.magic == 2 and header.compression == codec
    assert header.records_count == len(records) and header.last_offset_delta == len(records) - 1
    assert header.base_offset == base_offset and header.partition_leader_epoch == leader_epoch
    assert header.base_timestamp == records[0][3] and header.max_timestamp == max(r[3] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == is_transactional and not header.is_control and not header.is_log_append_time
    assert list(iter_records(memoryview(batch))) == expected(records, base_offset)


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_one_megabyte_values(codec: CompressionType) -> None:
    records: list[RecordInput] = [(b"a", BIG_VALUE, [("h", b"1")], 5), (None, b"", (), 6), (b"b", BIG_VALUE[::-1], (), 4)]
    batch = build_batch(records, base_offset=3, compression=codec)
    assert is_crc_valid(batch, read_header(batch))
    assert list(iter_records(batch)) == expected(records, 3)


def test_records_and_tuples_build_the_same_batch() -> None:
    records = [Record(99, 10 + i, b"k%d" % i, None if i % 2 else b"v", (("h", None), ("é", b"x"))) for i in range(5)]
    as_tuples = [(r.key, r.value, r.headers, r.timestamp) for r in records]
    assert build_batch(records, base_offset=7) == build_batch(as_tuples, base_offset=7)


def test_build_batch_rejects_what_kafka_cannot_hold() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([(None, b"v", (), INT64_MAX), (None, b"v", (), INT64_MIN)])  # delta beyond int64
    with pytest.raises(ValueError):
        build_batch([(None, b"v", (), 0)], producer_id=2**63)
    with pytest.raises(CompressionError):
        build_batch([(None, b"v", (), 0)], compression=6)


def test_log_append_time_stamps_every_record_with_the_max_timestamp() -> None:
    records = [(None, b"a", (), 100), (None, b"b", (), 300), (None, b"c", (), 200)]
    batch = build_batch(records, timestamp_type_log_append=True, compression=CompressionType.LZ4)
    header = read_header(batch)
    assert header.is_log_append_time and header.max_timestamp == 300
    assert [r.timestamp for r in iter_records(batch)] == [300, 300, 300]
    rewritten = bytearray(build_batch(records, compression=CompressionType.ZSTD))
    set_log_append_time(rewritten, read_header(rewritten), 5555)
    assert is_crc_valid(rewritten, read_header(rewritten))
    assert [r.timestamp for r in iter_records(rewritten)] == [5555] * 3


def test_iter_batches_walks_consecutive_batches() -> None:
    batches = [build_batch([(b"k", b"v%d" % i, (), 1000 + i)] * (i + 1), base_offset=10 * i, compression=i) for i in range(5)]
    buf = b"".join(batches)
    walked = list(iter_batches(buf + batches[0][:-1]))  # a trailing partial batch is skipped
    assert [h.position for h, _ in walked] == [sum(len(b) for b in batches[:i]) for i in range(5)]
    for i, (header, view) in enumerate(walked):
        assert bytes(view) == batches[i] and header.compression == i
        records = list(iter_records(view, header))  # the header's position is ignored
        assert [r.offset for r in records] == list(range(10 * i, 10 * i + i + 1))
        assert {r.value for r in records} == {b"v%d" % i}
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(batches[0][:HEADER_SIZE])) == []


def test_empty_and_null_fields() -> None:
    records = [(b"", b"", [("", b"")], 0), (None, None, [("k", None)], 0)]
    for codec in CODECS:
        assert list(iter_records(build_batch(records, compression=codec))) == expected(records, 0)


# --- varints ---------------------------------------------------------------------------

VARINT_ENCODINGS = [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"), (300, "d804"), (-300, "d704"), (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f")]


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_ENCODINGS)
def test_varint_known_encodings(value: int, hex_bytes: str) -> None:
    assert encode_varint(value).hex() == hex_bytes
    assert encode_varlong(value).hex() == hex_bytes  # zigzag agrees for values that fit int32
    assert decode_varint(bytes.fromhex(hex_bytes), 0) == (value, len(hex_bytes) // 2)


@pytest.mark.parametrize(("value", "hex_bytes"), [(INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01"), (2**31, "8080808010")])
def test_varlong_edges(value: int, hex_bytes: str) -> None:
    assert encode_varlong(value).hex() == hex_bytes
    assert decode_varlong(bytes.fromhex(hex_bytes), 0) == (value, len(hex_bytes) // 2)


@settings(max_examples=100)
@given(value=st.integers(INT32_MIN, INT32_MAX) | st.sampled_from([0, -1, INT32_MIN, INT32_MAX]), prefix=st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert 1 <= len(encoded) <= 5
    buf = memoryview(prefix + encoded + b"\xff\x01")
    assert decode_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@settings(max_examples=100)
@given(value=st.integers(INT64_MIN, INT64_MAX) | st.sampled_from([0, -1, INT64_MIN, INT64_MAX]))
def test_varlong_round_trip_and_kafka_python_agrees(value: int) -> None:
    encoded = encode_varlong(value)
    assert 1 <= len(encoded) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded
    assert kafka_decode_varint(encoded, 0) == (value, len(encoded))


def test_varint_range_and_malformed_input() -> None:
    for value in (INT32_MAX + 1, INT32_MIN - 1):
        with pytest.raises(ValueError):
            encode_varint(value)
    for value in (INT64_MAX + 1, INT64_MIN - 1):
        with pytest.raises(ValueError):
            encode_varlong(value)
    bad_varints = [b"", b"\x80", b"\xff\xff", b"\xff\xff\xff\xff\xff\x01", b"\xff\xff\xff\xff\x7f"]
    for bad in bad_varints:
        with pytest.raises(InvalidRecordError):
            decode_varint(bad, 0)
    for bad in [b"", b"\x80", b"\xff" * 10 + b"\x01"]:
        with pytest.raises(InvalidRecordError):
            decode_varlong(bad, 0)
    with pytest.raises(InvalidRecordError):
        decode_varint(b"\x02", 1)


# --- control batches -------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_control_batch_round_trip(kind: ControlRecordType) -> None:
    batch = build_control_batch(kind, producer_id=4242, producer_epoch=7, coordinator_epoch=19, timestamp=1_700_000_000_123, base_offset=55, partition_leader_epoch=3)
    header = read_header(batch)
    assert is_crc_valid(batch, header)
    assert header.is_control and header.is_transactional and header.compression == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (55, 3, 1)
    (record,) = iter_records(batch)
    assert record.offset == 55 and record.timestamp == 1_700_000_000_123
    assert record.key == struct.pack(">hh", 0, kind) and record.value == struct.pack(">hi", 0, 19)
    assert parse_control_record(record) == (kind, 19)
    (theirs,) = list(DefaultRecordBatch(batch))
    assert isinstance(theirs, ControlRecord) and theirs.type == kind and theirs.commit == (kind is ControlRecordType.COMMIT)


def test_parse_control_record_rejects_other_records() -> None:
    bad = [
        Record(0, 0, None, struct.pack(">hi", 0, 1)),
        Record(0, 0, b"\x00\x00", struct.pack(">hi", 0, 1)),
        Record(0, 0, struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 1)),  # KRaft's KRAFT_VERSION
        Record(0, 0, struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)),
        Record(0, 0, struct.pack(">hh", 0, 1), None),
        Record(0, 0, struct.pack(">hh", 0, 0), b"\x00\x00\x00"),
    ]
    for record in bad:
        with pytest.raises(InvalidRecordError):
            parse_control_record(record)


# --- malformed record data -------------------------------------------------------------


def with_section(section: bytes, records_count: int, codec: int = 0) -> bytes:
    """A batch header (from a real batch) around an arbitrary records section."""
    payload = compress(codec, section) if codec else section
    out = bytearray(build_batch([(None, b"x", (), 0)], compression=codec)[:HEADER_SIZE]) + payload
    struct.pack_into(">i", out, BATCH_LENGTH, HEADER_SIZE - LOG_OVERHEAD + len(payload))
    struct.pack_into(">i", out, RECORDS_COUNT, records_count)
    return bytes(out)


def raw_record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


def v(value: int) -> bytes:
    return encode_varint(value)


GOOD_RECORD = raw_record(b"\x00", v(0), v(0), v(1), b"k", v(1), b"v", v(0))
MALFORMED_SECTIONS = {
    "record past the end": (v(100) + b"\x00" * 5, 1),
    "negative record length": (v(-2) + b"\x00" * 5, 1),
    "truncated varint": (b"\x80", 1),
    "empty record": (v(0), 1),
    "key past the record": (raw_record(b"\x00", v(0), v(0), v(50), b"abc"), 1),
    "negative key length": (raw_record(b"\x00", v(0), v(0), v(-5), v(-1), v(0)), 1),
    "value spills into the next record": (raw_record(b"\x00", v(0), v(0), v(-1), v(12), b"v") + GOOD_RECORD, 2),
    "negative header count": (raw_record(b"\x00", v(0), v(0), v(-1), v(-1), v(-1)), 1),
    "null header key": (raw_record(b"\x00", v(0), v(0), v(-1), v(-1), v(1), v(-1), v(-1)), 1),
    "length longer than the fields": (raw_record(b"\x00", v(0), v(0), v(-1), v(-1), v(0), b"\x00"), 1),
    "fewer records than counted": (GOOD_RECORD, 2),
    "bytes after the last record": (GOOD_RECORD + GOOD_RECORD, 1),
}


@pytest.mark.parametrize("codec", [0, 4])
@pytest.mark.parametrize("case", list(MALFORMED_SECTIONS))
def test_malformed_records_raise(case: str, codec: int) -> None:
    section, count = MALFORMED_SECTIONS[case]
    assert [r.value for r in iter_records(with_section(GOOD_RECORD, 1, codec))] == [b"v"]
    with pytest.raises(InvalidRecordError):
        list(iter_records(with_section(section, count, codec)))


def test_cut_batch_and_corrupt_compression_raise() -> None:
    batch = build_batch([(None, b"value" * 100, (), 0)], compression=CompressionType.GZIP)
    header = read_header(batch)
    with pytest.raises(InvalidRecordError):
        list(iter_records(batch[:-1], header))
    corrupt = batch[:HEADER_SIZE] + b"\x1f\x8b" + bytes(len(batch) - HEADER_SIZE - 2)
    with pytest.raises(CompressionError):
        list(iter_records(corrupt))


@settings(max_examples=100, deadline=None)
@given(
    records=records_strategy,
    codec=st.sampled_from([0, 0, 0, 1, 2, 3, 4]),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    count_change=st.integers(-1, 1),
)
def test_damaged_sections_decode_or_raise_value_errors(records: list[RecordInput], codec: int, flips: list[tuple[int, int]], count_change: int) -> None:
    section = bytearray(build_batch(records)[HEADER_SIZE:])
    for index, mask in flips:
        section[index % len(section)] ^= mask
    batch = with_section(bytes(section), max(0, len(records) + count_change), codec)
    try:
        list(iter_records(batch))
    except (InvalidRecordError, CompressionError):
        pass


# --- a real client's bytes (kafka-python) ---------------------------------------------


def kafka_python_batch(codec: int, records: Sequence[RecordInput], producer: tuple[int, int, int, bool] | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    if producer is not None:
        builder.set_producer_state(*producer)
    for offset, (key, value, headers, ts) in enumerate(records):
        assert builder.append(offset, timestamp=ts, key=key, value=value, headers=list(headers)) is not None
    return bytes(builder.build())


CLIENT_RECORDS: list[RecordInput] = [
    (b"key-%d" % i if i % 3 else None, (b"value %d " % i) * (i * 20) if i % 4 else None, [("trace", b"abc"), ("none", None)] if i % 2 else [], 1_700_000_000_000 + 7 * i)
    for i in range(40)
]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_decode_what_kafka_python_writes(codec: CompressionType) -> None:
    batch = kafka_python_batch(codec, CLIENT_RECORDS)
    header = read_header(batch)
    assert header.compression == codec and is_crc_valid(batch, header)
    assert list(iter_records(batch)) == expected(CLIENT_RECORDS, 0)
    idempotent = kafka_python_batch(codec, CLIENT_RECORDS[:3], producer=(77, 2, 1000, True))
    header = read_header(idempotent)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.is_transactional) == (77, 2, 1000, True)
    assert list(iter_records(idempotent)) == expected(CLIENT_RECORDS[:3], 0)


def assert_kafka_python_reads(batch: bytes, records: Sequence[RecordInput], base_offset: int, codec: int) -> None:
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.compression_type, theirs.records_count) == (base_offset, codec, len(records))
    decoded = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in theirs]
    assert decoded == [(base_offset + i, ts, key, value, [tuple(h) for h in headers]) for i, (key, value, headers, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_kafka_python_decodes_what_we_write(codec: CompressionType) -> None:
    batch = build_batch(CLIENT_RECORDS, base_offset=1234, compression=codec, producer_id=9, producer_epoch=0, base_sequence=0)
    assert_kafka_python_reads(batch, CLIENT_RECORDS, 1234, codec)
    theirs = DefaultRecordBatch(batch)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 0, 0)


@settings(max_examples=50, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**40))
def test_kafka_python_decodes_arbitrary_batches(records: list[RecordInput], codec: CompressionType, base_offset: int) -> None:
    assert_kafka_python_reads(build_batch(records, base_offset=base_offset, compression=codec), records, base_offset, codec)
