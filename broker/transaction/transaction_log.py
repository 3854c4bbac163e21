"""The records of ``__transaction_state``: Kafka's TransactionLogKey and TransactionLogValue (sans-IO).

A key is an int16 record type (0) and the transactional id; a value an int16 version and
the transaction's metadata. Version 0 is Kafka's classic layout; version 1 is flexible and
adds the tagged fields PreviousProducerId (0), NextProducerId (1) and
ClientTransactionVersion (2). The partitions are null in the Empty state, as Kafka writes
them; a null value is a tombstone (an expired transactional id). The layouts are Kafka
4.0's transaction-coordinator JSON specs, encoded by the group records' codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from broker.group.coordinator_records import (
    CoordinatorRecordError,
    Field,
    UnknownRecordType,
    decode_body,
    encode_versioned,
    read_version,
    register_structs,
)
from broker.transaction.transaction_metadata import TransactionMetadata, TransactionState, TxnTransitMetadata

TRANSACTION_LOG_KEY_TYPE = 0
NO_PRODUCER_ID = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("transactional_id", "string"),)
    transactional_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsSchema:
    """TransactionLogValue.TransactionPartitions: the partitions of one topic in the transaction."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic", "string"), Field("partition_ids", "[]int32"))
    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 1)
    FLEXIBLE_FROM: ClassVar[int] = 1
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("producer_id", "int64"),
        Field("previous_producer_id", "int64", since=1, tag=0),
        Field("next_producer_id", "int64", since=1, tag=1),
        Field("producer_epoch", "int16"),
        Field("transaction_timeout_ms", "int32"),
        Field("transaction_status", "int8"),
        Field("transaction_partitions", "[]PartitionsSchema", nullable=True),
        Field("transaction_last_update_timestamp_ms", "int64"),
        Field("transaction_start_timestamp_ms", "int64"),
        Field("client_transaction_version", "int16", since=1, tag=2),
    )
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[PartitionsSchema, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    client_transaction_version: int = 0


register_structs(PartitionsSchema)


def encode_key(transactional_id: str) -> bytes:
    return encode_versioned(TRANSACTION_LOG_KEY_TYPE, TransactionLogKey(transactional_id=transactional_id), 0, False)


def encode_value(value: TransactionLogValue, version: int | None = None) -> bytes:
    """Version 0 is what Kafka writes for clients on transaction version 1; it cannot carry
    the tagged fields, so a value that sets them (transaction version 2) is written as
    version 1, which is also the default then."""
    if version is None:
        version = 1 if value.client_transaction_version >= 2 else 0
    lowest, highest = TransactionLogValue.VERSIONS
    if not lowest <= version <= highest:
        raise CoordinatorRecordError(f"TransactionLogValue has no version {version}")
    return encode_versioned(version, value, version, version >= TransactionLogValue.FLEXIBLE_FROM)


def decode_key(key: bytes | memoryview) -> str:
    record_type = read_version(key, "key")
    if record_type != TRANSACTION_LOG_KEY_TYPE:
        raise UnknownRecordType(record_type)
    key_obj: TransactionLogKey = decode_body(TransactionLogKey, 0, False, key)
    return key_obj.transactional_id


def decode_value(value: bytes | memoryview) -> TransactionLogValue:
    version = read_version(value, "value")
    lowest, highest = TransactionLogValue.VERSIONS
    if not lowest <= version <= highest:
        raise CoordinatorRecordError(f"TransactionLogValue has no version {version}")
    decoded: TransactionLogValue = decode_body(TransactionLogValue, version, version >= TransactionLogValue.FLEXIBLE_FROM, value)
    try:
        TransactionState(decoded.transaction_status)
    except ValueError:
        raise CoordinatorRecordError(f"unknown transaction status {decoded.transaction_status}") from None
    return decoded


def value_from_transit(transit: TxnTransitMetadata) -> TransactionLogValue:
    """The record a prepared transition writes (Kafka's TransactionLog.valueToBytes)."""
    partitions: tuple[PartitionsSchema, ...] | None = None
    if transit.txn_state is not TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(transit.topic_partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = tuple(PartitionsSchema(topic=t, partition_ids=tuple(p)) for t, p in by_topic.items())
    elif transit.topic_partitions:
        raise CoordinatorRecordError("an Empty transaction has no partitions")
    return TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=int(transit.txn_state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp,
        client_transaction_version=transit.client_transaction_version,
        # Only version 1 values carry these: transaction version 2's producer id hand-over.
        **(
            {"previous_producer_id": transit.last_producer_id, "next_producer_id": transit.next_producer_id}
            if transit.client_transaction_version >= 2
            else {}
        ),
    )


def metadata_from_value(transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
    """A transactional id as replayed from its latest record; the last epoch is not logged."""
    last_producer_id = value.previous_producer_id if value.previous_producer_id != NO_PRODUCER_ID else value.producer_id
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=value.producer_id,
        last_producer_id=last_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=-1,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=TransactionState(value.transaction_status),
        topic_partitions={(p.topic, i) for p in value.transaction_partitions or () for i in p.partition_ids},
        txn_start_timestamp=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
        client_transaction_version=value.client_transaction_version,
        next_producer_id=value.next_producer_id,
    )
