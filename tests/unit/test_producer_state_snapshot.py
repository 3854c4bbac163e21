"""Producer state snapshot files in Kafka's ProducerSnapshot format, with kbroker's batch trailer."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.producer_state_manager import ProducerStateManager
from storage.producer_state_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_path,
)

HEAD = 10  # Version int16, Crc uint32, entry count int32
ENTRY = 46  # Kafka's ProducerEntry, version 1

# 00000000000000000012.snapshot written by Apache Kafka 4.4 (one node, clean shutdown) after an
# idempotent producer sent 7 records one batch each, and a transactional one committed 3 records
# and left a fourth (offset 11) in an open transaction.
KAFKA_WRITTEN = bytes.fromhex(
    "0001c337d409000000020000000000000000000000000006000000000000000600000000000001a22758ad5c"
    "ffffffffffffffffffffffff0000000000000001000000000003000000000000000b00000000000001a22758c6c5"
    "00000000000000000000000b"
)


def kafka_layout(entries: list[tuple[int, int, int, int, int, int, int, int]]) -> bytes:
    """A snapshot as Kafka's writer lays it out (no trailer), from ProducerSnapshot.json's fields:
    ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp, CoordinatorEpoch,
    CurrentTxnFirstOffset."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def old_kbroker_layout(entries: list[SnapshotEntry]) -> bytes:
    """kbroker's layout before it wrote Kafka's, under the same version number."""
    body = bytearray(struct.pack(">i", len(entries)))
    for producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches in entries:
        body += struct.pack(">qhiqqb", producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, len(batches))
        for batch in batches:
            body += struct.pack(">iqiq", *batch)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + bytes(body)


def with_crc(data: bytes) -> bytes:
    """``data`` with its CRC made right again: a damage only the structure can catch."""
    return data[:2] + struct.pack(">I", crc32c.crc32c(data[6:])) + data[6:]


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, int, int]:
    last_offset = draw(st.integers(0, 2**62))
    return (draw(st.integers(0, 2**31 - 1)), last_offset, draw(st.integers(0, min(last_offset, 2**31 - 1))), draw(st.integers(-1, 2**62)))


snapshot_entries = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(-1, 2**15 - 1),
        st.integers(-1, 2**31 - 1),
        st.integers(-1, 2**62),
        st.integers(-1, 2**62),
        st.lists(batches(), max_size=5),
    ),
    max_size=20,
)


@given(snapshot_entries)
def test_round_trip_keeps_every_retained_batch(entries: list[SnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


@given(snapshot_entries)
def test_the_entries_are_what_kafka_writes_and_read_alone_give_the_last_batch(entries: list[SnapshotEntry]) -> None:
    data = encode_snapshot(entries)
    kafka_part = with_crc(data[: HEAD + ENTRY * len(entries)])
    expected = [
        (pid, epoch, *(batches[-1][:3] if batches else (-1, -1, 0)), last_ts, coordinator_epoch, txn_first)
        for pid, epoch, coordinator_epoch, txn_first, last_ts, batches in entries
    ]
    assert kafka_part == kafka_layout(expected)
    assert decode_snapshot(kafka_part) == [
        (pid, epoch, coordinator_epoch, txn_first, last_ts, [(*batches[-1][:3], last_ts)] if batches else [])
        for pid, epoch, coordinator_epoch, txn_first, last_ts, batches in entries
    ]
    # Kafka's CRC covers the whole file, trailer included.
    assert struct.unpack_from(">I", data, 2)[0] == crc32c.crc32c(data[6:])


def test_a_snapshot_written_by_kafka_is_read() -> None:
    assert decode_snapshot(KAFKA_WRITTEN) == [
        (0, 0, -1, -1, 1795956452700, [(6, 6, 0, 1795956452700)]),
        (1, 0, 0, 11, 1795956459205, [(3, 11, 0, 1795956459205)]),
    ]


def test_a_kafka_file_with_a_producer_that_has_no_batch_is_read() -> None:
    data = kafka_layout([(5, 3, -1, -1, 0, 1234, 7, -1), (6, 0, 41, 99, 9, 5678, -1, 90)])
    assert decode_snapshot(data) == [(5, 3, 7, -1, 1234, []), (6, 0, -1, 90, 5678, [(41, 99, 9, 5678)])]


@given(snapshot_entries.filter(bool), st.data())
def test_a_flipped_bit_anywhere_is_refused(entries: list[SnapshotEntry], data: st.DataObject) -> None:
    damaged = bytearray(encode_snapshot(entries))
    damaged[data.draw(st.integers(0, len(damaged) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(damaged))


ENTRIES: list[SnapshotEntry] = [
    (1000, 2, -1, -1, 1_700_000_000_900, [(4, 10, 4, 1_700_000_000_100), (9, 15, 4, 1_700_000_000_900)]),
    (1001, 0, 3, 20, 1_700_000_001_000, [(0, 20, 0, 1_700_000_001_000)]),
    (1002, 5, 4, -1, 1_700_000_002_000, []),
]


def test_a_truncated_file_is_refused() -> None:
    data = encode_snapshot(ENTRIES)
    for length in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(data[:length])


def test_a_truncated_file_is_refused_by_its_structure_too() -> None:
    data = encode_snapshot(ENTRIES)
    entries_end = HEAD + ENTRY * len(ENTRIES)
    for length in range(HEAD, len(data)):
        if length == entries_end:
            continue  # exactly Kafka's layout: a valid file, read with the last batches only
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(with_crc(data[:length]))


def test_unknown_bytes_after_the_entries_are_refused() -> None:
    kafka = kafka_layout([(5, 3, 1, 10, 0, 1234, 7, -1)])
    with pytest.raises(CorruptSnapshotError, match="unknown bytes"):
        decode_snapshot(with_crc(kafka + b"KBRK\x00"))


def test_a_trailer_that_disagrees_with_its_entry_is_refused() -> None:
    data = bytearray(encode_snapshot(ENTRIES[:1]))
    data[-24 + 3] ^= 1  # the trailer's last batch's lastSequence
    with pytest.raises(CorruptSnapshotError, match="disagrees"):
        decode_snapshot(with_crc(bytes(data)))


@pytest.mark.parametrize("damage", [b"", b"\x00\x01", b"\x00\x02" + b"\x00" * 8, with_crc(b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff")])
def test_bad_headers_are_refused(damage: bytes) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage)


# Producer states as kbroker held them: real clock timestamps, a producer's open transaction
# starts at or before its last batch, a transaction version 2 producer may have no batch left.
@st.composite
def realistic_entries(draw: st.DrawFn) -> SnapshotEntry:
    timestamps = st.integers(10**12, 4 * 10**12)
    kept: list[tuple[int, int, int, int]] = []
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 5))):
        delta = draw(st.integers(0, 10_000))
        offset += delta + draw(st.integers(0, 10**6))
        kept.append((draw(st.integers(0, 2**31 - 1)), offset, delta, draw(timestamps)))
    txn_first = draw(st.sampled_from([-1, *(b[1] - b[2] for b in kept)]))
    return (draw(st.integers(0, 2**40)), draw(st.integers(0, 2**15 - 1)), draw(st.integers(-1, 10**4)), txn_first, draw(timestamps), kept)


@given(st.lists(realistic_entries(), min_size=1, max_size=24))
def test_the_old_kbroker_layout_is_refused(entries: list[SnapshotEntry]) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(old_kbroker_layout(entries))


def test_an_old_layout_file_as_long_as_kafkas_is_refused() -> None:
    # 8 producers holding 5 batches: 31 * 8 + 24 * 5 = 46 * 8 bytes, the length of 8 Kafka entries.
    entries: list[SnapshotEntry] = [
        (100 + i, 1, 0, -1, 1_700_000_000_000 + i, [(i, 1000 + i, 0, 1_700_000_000_000 + i)] if i < 5 else []) for i in range(8)
    ]
    data = old_kbroker_layout(entries)
    assert len(data) == HEAD + ENTRY * 8
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data)


def test_an_old_layout_snapshot_costs_a_replay_from_the_log_start(tmp_path: Path) -> None:
    entries: list[SnapshotEntry] = [(1000, 0, -1, -1, 1_700_000_000_000, [(0, 0, 0, 1_700_000_000_000), (1, 1, 0, 1_700_000_000_001)])]
    snapshot_path(tmp_path, 2).write_bytes(old_kbroker_layout(entries))
    state = ProducerStateManager("t-0", tmp_path)
    state.truncate_and_reload(0, 2)
    assert state.map_end_offset == 0 and not state.producers  # the log is replayed from 0
    assert not snapshot_path(tmp_path, 2).exists()
