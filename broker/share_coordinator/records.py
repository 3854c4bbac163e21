"""The records of ``__share_group_state``: Kafka 4.4's ShareSnapshotKey/Value and
ShareUpdateKey/Value (share-coordinator/src/main/resources/common/message/), sans-IO.

A key is an int16 record type (0: ShareSnapshot, 1: ShareUpdate) and, never flexible, the group
id, the topic id and the partition. A value is an int16 version (0, the only one) and a flexible
body: a snapshot holds a share partition's whole state, an update the state batches written since
the last snapshot. Kafka 4.2 (KIP-1226) added the tagged DeliveryCompleteCount (tag 0, default -1)
to both. A ShareSnapshot key with no value is the tombstone of a deleted share partition.

The bytes are Kafka's, so ``kafka-dump-log --share-group-state-decoder`` reads our segments and we
replay Kafka's; the codec is the group coordinator records' (``broker.group.coordinator_records``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from broker.group.coordinator_records import (
    CoordinatorRecordError,
    Field,
    UnknownRecordType,
    decode_body,
    encode_versioned,
    read_version,
    register_structs,
)

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1
VALUE_VERSION = 0
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1  # the JSON default: a value written before Kafka 4.2

_KEY_FIELDS = (Field("group_id", "string"), Field("topic_id", "uuid"), Field("partition", "int32"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotKey:
    FIELDS: ClassVar[tuple[Field, ...]] = _KEY_FIELDS
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUpdateKey:
    FIELDS: ClassVar[tuple[Field, ...]] = _KEY_FIELDS
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareStateBatch:
    """ShareSnapshotValue.StateBatch and ShareUpdateValue.StateBatch, which are laid out alike.
    ``delivery_state`` is the raw int8 (0 Available, 2 Acknowledged, 3 Archiving, 4 Archived)."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("first_offset", "int64"),
        Field("last_offset", "int64"),
        Field("delivery_state", "int8"),
        Field("delivery_count", "int16"),
    )
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("snapshot_epoch", "int32"),
        Field("state_epoch", "int32"),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64"),
        Field("delivery_complete_count", "int32", tag=0),
        Field("create_timestamp", "int64"),
        Field("write_timestamp", "int64"),
        Field("state_batches", "[]ShareStateBatch"),
    )
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[ShareStateBatch, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUpdateValue:
    """No state epoch and no timestamps: an update only ever follows a snapshot that has them.
    A start offset of -1 leaves the snapshot's as it is."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("snapshot_epoch", "int32"),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64"),
        Field("delivery_complete_count", "int32", tag=0),
        Field("state_batches", "[]ShareStateBatch"),
    )
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    state_batches: tuple[ShareStateBatch, ...]


register_structs(ShareStateBatch)

ShareCoordinatorKey: TypeAlias = ShareSnapshotKey | ShareUpdateKey
ShareCoordinatorValue: TypeAlias = ShareSnapshotValue | ShareUpdateValue


@dataclass(frozen=True, slots=True)
class ShareCoordinatorRecord:
    key: ShareCoordinatorKey
    value: ShareCoordinatorValue | None  # None: a tombstone


_RECORD_TYPES: dict[int, tuple[type[Any], type[Any]]] = {
    SHARE_SNAPSHOT_RECORD_TYPE: (ShareSnapshotKey, ShareSnapshotValue),
    SHARE_UPDATE_RECORD_TYPE: (ShareUpdateKey, ShareUpdateValue),
}


def encode_key(key: ShareCoordinatorKey) -> bytes:
    record_type = SHARE_SNAPSHOT_RECORD_TYPE if isinstance(key, ShareSnapshotKey) else SHARE_UPDATE_RECORD_TYPE
    return encode_versioned(record_type, key, 0, False)


def encode_value(value: ShareCoordinatorValue) -> bytes:
    """Raises CoordinatorRecordError (a ValueError) for a field out of its wire type's range."""
    return encode_versioned(VALUE_VERSION, value, VALUE_VERSION, True)


def encode_record(record: ShareCoordinatorRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record of the topic (None: a tombstone)."""
    return encode_key(record.key), None if record.value is None else encode_value(record.value)


def decode_record(key: bytes | memoryview, value: bytes | memoryview | None) -> ShareCoordinatorRecord:
    """One record of ``__share_group_state``; a None value is a tombstone.

    Raises UnknownRecordType for a record type we do not read (the loader skips it, as Kafka's
    does) and CoordinatorRecordError for anything malformed."""
    record_type = read_version(key, "key")
    layouts = _RECORD_TYPES.get(record_type)
    if layouts is None:
        raise UnknownRecordType(record_type)
    key_cls, value_cls = layouts
    decoded_key = decode_body(key_cls, 0, False, key)
    if value is None:
        return ShareCoordinatorRecord(decoded_key, None)
    version = read_version(value, "value")
    if version != VALUE_VERSION:
        raise CoordinatorRecordError(f"{value_cls.__name__} has no version {version}")
    return ShareCoordinatorRecord(decoded_key, decode_body(value_cls, version, True, value))
