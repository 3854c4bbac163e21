"""Transaction marker batches, checked byte by byte against Kafka's layout."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.control_records import (
    ControlRecordType,
    EndTxnMarker,
    build_control_batch,
    decode_control_key,
    decode_end_txn_marker,
    encode_control_key,
    encode_end_txn_marker,
    read_marker,
)
from protocol.record_batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    is_crc_valid,
    read_header,
)
from protocol.records import InvalidRecordError, iter_records


@given(
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
    commit=st.booleans(),
    timestamp=st.integers(0, 2**50),
)
def test_marker_batch_layout(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int) -> None:
    batch = build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, timestamp)
    header = read_header(batch)
    assert header.magic == 2 and header.is_control and header.is_transactional
    assert header.attributes == CONTROL_MASK | TRANSACTIONAL_MASK
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (producer_id, producer_epoch, -1, 1)
    assert header.base_timestamp == header.max_timestamp == timestamp
    assert is_crc_valid(batch, header)
    assert header.crc == crc32c.crc32c(batch[21:])
    (record,) = list(iter_records(batch, header))
    # Kafka's ControlRecordType key (version 0, type) and EndTransactionMarker value (version 0, epoch).
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, coordinator_epoch)
    assert read_marker(batch, header) == EndTxnMarker(commit, coordinator_epoch)


def test_key_and_value_codecs() -> None:
    assert decode_control_key(encode_control_key(ControlRecordType.ABORT)) is ControlRecordType.ABORT
    assert decode_end_txn_marker(encode_end_txn_marker(-5)) == -5
    # A later marker version may carry more fields after the epoch.
    assert decode_end_txn_marker(struct.pack(">hi", 1, 9) + b"more") == 9


@pytest.mark.parametrize(
    "key",
    [b"", b"\x00\x00\x00", struct.pack(">hh", -1, 0), struct.pack(">hh", 0, 7)],
)
def test_bad_control_keys_are_refused(key: bytes) -> None:
    with pytest.raises(InvalidRecordError):
        decode_control_key(key)


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x00\x00", struct.pack(">hi", -1, 0)])
def test_bad_marker_values_are_refused(value: bytes) -> None:
    with pytest.raises(InvalidRecordError):
        decode_end_txn_marker(value)
