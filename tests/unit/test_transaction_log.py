"""``__transaction_state`` records: Kafka's TransactionLogKey/TransactionLogValue layouts, round trips, bad bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group.coordinator_records import CoordinatorRecordError, UnknownRecordType
from broker.transaction.transaction_log import (
    PartitionsSchema,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_from_value,
    value_from_transit,
)
from broker.transaction.transaction_metadata import TransactionState, TxnTransitMetadata

int64 = st.integers(-(2**63), 2**63 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
names = st.text(max_size=40)
partitions = st.lists(st.builds(PartitionsSchema, topic=names, partition_ids=st.lists(int32, max_size=5).map(tuple)), max_size=4).map(tuple)


def values(version: int) -> st.SearchStrategy[TransactionLogValue]:
    tagged = {} if version == 0 else {"previous_producer_id": int64, "next_producer_id": int64, "client_transaction_version": int16}
    return st.builds(
        TransactionLogValue,
        producer_id=int64,
        producer_epoch=int16,
        transaction_timeout_ms=int32,
        transaction_status=st.sampled_from([s.value for s in TransactionState]),
        transaction_partitions=st.none() | partitions,
        transaction_last_update_timestamp_ms=int64,
        transaction_start_timestamp_ms=int64,
        **tagged,
    )


@given(names)
def test_key_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


@given(values(0))
def test_value_v0_round_trip(value: TransactionLogValue) -> None:
    assert decode_value(encode_value(value, 0)) == value


@given(values(1))
def test_value_v1_round_trip(value: TransactionLogValue) -> None:
    assert decode_value(encode_value(value, 1)) == value


def _kafka_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_key_layout() -> None:
    # TransactionLogKey: int16 record type 0, then TransactionalId as an int16-length string.
    assert encode_key("my-txn") == b"\x00\x00" + _kafka_string("my-txn")


def test_value_v0_layout() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        transaction_status=TransactionState.PREPARE_COMMIT,
        transaction_partitions=(PartitionsSchema(topic="out", partition_ids=(0, 2)),),
        transaction_last_update_timestamp_ms=1700000000123,
        transaction_start_timestamp_ms=1700000000000,
    )
    expected = (
        struct.pack(">hqhib", 0, 1000, 3, 60000, 2)
        + struct.pack(">i", 1)
        + _kafka_string("out")
        + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1700000000123, 1700000000000)
    )
    assert encode_value(value, 0) == expected


def test_empty_state_writes_null_partitions() -> None:
    value = TransactionLogValue(
        producer_id=5,
        producer_epoch=0,
        transaction_timeout_ms=1000,
        transaction_status=TransactionState.EMPTY,
        transaction_partitions=None,
        transaction_last_update_timestamp_ms=7,
        transaction_start_timestamp_ms=-1,
    )
    assert encode_value(value, 0) == struct.pack(">hqhibiqq", 0, 5, 0, 1000, 0, -1, 7, -1)
    # Flexible: compact null array (0) and an empty tagged-field section.
    assert encode_value(value, 1) == struct.pack(">hqhib", 1, 5, 0, 1000, 0) + b"\x00" + struct.pack(">qq", 7, -1) + b"\x00"


def test_value_v1_layout_with_tagged_fields() -> None:
    value = TransactionLogValue(
        producer_id=9,
        previous_producer_id=8,
        producer_epoch=1,
        transaction_timeout_ms=100,
        transaction_status=TransactionState.ONGOING,
        transaction_partitions=(PartitionsSchema(topic="t", partition_ids=(4,)),),
        transaction_last_update_timestamp_ms=2,
        transaction_start_timestamp_ms=1,
        client_transaction_version=2,
    )
    body = (
        struct.pack(">hqhib", 1, 9, 1, 100, 1)
        + b"\x02"  # one partitions entry (compact: n + 1)
        + b"\x02t"  # compact string "t"
        + b"\x02" + struct.pack(">i", 4)  # compact []int32
        + b"\x00"  # the entry's tagged fields
        + struct.pack(">qq", 2, 1)
        + b"\x02"  # two tagged fields, by tag: 0 PreviousProducerId, 2 ClientTransactionVersion
        + b"\x00\x08" + struct.pack(">q", 8)
        + b"\x02\x02" + struct.pack(">h", 2)
    )
    assert encode_value(value, 1) == body
    assert decode_value(body) == value


def test_version_0_cannot_carry_tagged_fields() -> None:
    value = TransactionLogValue(
        producer_id=9, previous_producer_id=8, producer_epoch=1, transaction_timeout_ms=100, transaction_status=1,
        transaction_partitions=(), transaction_last_update_timestamp_ms=2, transaction_start_timestamp_ms=1,
    )
    with pytest.raises(CoordinatorRecordError):
        encode_value(value, 0)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        b"\x00\x02" + b"\x00" * 40,  # no version 2
        struct.pack(">hqhib", 0, 1, 1, 1, 9) + struct.pack(">iqq", -1, 0, 0),  # status 9 is no state
        struct.pack(">hqhib", 0, 1, 1, 1, 1) + struct.pack(">i", 1000),  # 1000 entries in no bytes
        struct.pack(">hqhibiqq", 0, 5, 0, 1000, 0, -1, 7, -1) + b"x",  # trailing bytes
    ],
)
def test_malformed_values_raise(raw: bytes) -> None:
    with pytest.raises(CoordinatorRecordError):
        decode_value(raw)


def test_other_record_types_are_unknown() -> None:
    with pytest.raises(UnknownRecordType):
        decode_key(b"\x00\x01" + _kafka_string("x"))
    with pytest.raises(CoordinatorRecordError):
        decode_key(b"\x00\x00\x00\x05ab")


def test_transit_to_value_and_back() -> None:
    transit = TxnTransitMetadata(
        producer_id=3,
        last_producer_id=2,
        producer_epoch=4,
        last_producer_epoch=3,
        txn_timeout_ms=5000,
        txn_state=TransactionState.ONGOING,
        topic_partitions=frozenset({("b", 1), ("a", 0), ("a", 3)}),
        txn_start_timestamp=10,
        txn_last_update_timestamp=20,
    )
    value = value_from_transit(transit)
    assert value.transaction_partitions == (PartitionsSchema(topic="a", partition_ids=(0, 3)), PartitionsSchema(topic="b", partition_ids=(1,)))
    m = metadata_from_value("tx", decode_value(encode_value(value)))
    assert (m.producer_id, m.producer_epoch, m.state, m.topic_partitions, m.txn_start_timestamp, m.txn_last_update_timestamp, m.txn_timeout_ms) == (
        3, 4, TransactionState.ONGOING, {("a", 0), ("a", 3), ("b", 1)}, 10, 20, 5000,
    )
    assert m.last_producer_epoch == -1  # not in the log


def test_empty_transit_writes_no_partitions() -> None:
    transit = TxnTransitMetadata(3, -1, 0, -1, 5000, TransactionState.EMPTY, frozenset(), -1, 20)
    assert value_from_transit(transit).transaction_partitions is None
