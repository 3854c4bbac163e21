"""KRaft metadata records: the values stored in `__cluster_metadata`.

A record value is ``frame version (uvarint 1) | apiKey (uvarint) | version (uvarint) |
body``; every metadata record is flexible, so the body uses compact strings and arrays
and ends with a tagged-fields section. Keys are null.

Each record class lists its fields in the order of Kafka's JSON spec
(metadata/src/main/resources/common/metadata/*.json) as ``Field`` entries; one codec walks
those lists with kio's native readers and its writers. Python attributes are the
snake_case of the JSON names. A field with a JSON default, a tagged field, or one that
older versions lack has that default in Python, so decoding an old version or a record
without a tagged field fills it.
"""

from __future__ import annotations

import functools
import io
import struct
import uuid
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar, NamedTuple

from kio._kio_native import (
    read_boolean,
    read_compact_string,
    read_compact_string_nullable,
    read_float64,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_uint16,
    read_unsigned_varint,
)
from kio.serial.errors import BufferUnderflow, SerialError
from kio.serial.readers import read_compact_string_as_bytes
from kio.serial.writers import (
    compact_array_writer,
    write_boolean,
    write_compact_string,
    write_float64,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_nullable_compact_string,
    write_tagged_field,
    write_uint16,
    write_unsigned_varint,
    write_uuid,
)

from protocol.length_guard import bounded_array_reader

FRAME_VERSION = 1
ZERO_UUID = uuid.UUID(int=0)
_UUID_SIZE = 16
# Distinct ids kept decoded: topic ids, directory ids and incarnation ids of a large cluster.
_INTERNED_UUIDS = 1 << 16

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[io.BytesIO, Any], None]


class MetadataRecordError(ValueError):
    """A metadata record value that cannot be decoded (or a record that cannot be encoded)."""


class Field(NamedTuple):
    name: str
    kind: str  # the JSON type: "int32", "string", "uuid", "[]int32", "[]BrokerEndpoint", ...
    since: int = 0  # first version that carries the field
    tag: int | None = None  # None: a regular field
    nullable: bool = False


class _Plan(NamedTuple):
    regular: tuple[tuple[str, Reader, Writer], ...]
    tagged: tuple[tuple[int, str, Reader, Writer, Any], ...]  # sorted by tag
    by_tag: dict[int, tuple[str, Reader]]
    absent: tuple[tuple[str, Any], ...]  # fields this version lacks, with their defaults


@functools.lru_cache(maxsize=_INTERNED_UUIDS)
def _interned_uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=raw)


def _read_uuid(buf: Any, offset: int) -> tuple[uuid.UUID, int]:
    # Not kio's read_uuid: it reads the all-zero UUID as None, which metadata records use as a
    # value (Uuid.ZERO_UUID, DirectoryId.MIGRATING). The same few ids (a topic's, the brokers'
    # directories) recur in every PartitionRecord, and building a UUID costs more than the rest
    # of such a record: one object per distinct id keeps loading a large snapshot fast and small.
    raw = bytes(buf[offset : offset + _UUID_SIZE])
    if len(raw) != _UUID_SIZE:
        raise BufferUnderflow("Buffer is exhausted")
    return _interned_uuid(raw), _UUID_SIZE


_PRIMITIVES: dict[str, tuple[Reader, Writer]] = {
    "bool": (read_boolean, write_boolean),
    "int8": (read_int8, write_int8),
    "int16": (read_int16, write_int16),
    "int32": (read_int32, write_int32),
    "int64": (read_int64, write_int64),
    "uint16": (read_uint16, write_uint16),
    "uuid": (_read_uuid, write_uuid),
    "bytes": (read_compact_string_as_bytes, write_compact_string),
    "float64": (read_float64, write_float64),
}


def _not_null(name: str, reader: Reader) -> Reader:
    def read(buf: Any, offset: int) -> tuple[Any, int]:
        value, size = reader(buf, offset)
        if value is None:
            raise MetadataRecordError(f"non-nullable field {name} was serialized as null")
        return value, size

    return read


def _codec(f: Field) -> tuple[Reader, Writer]:
    if f.kind == "string":
        if f.nullable:
            return read_compact_string_nullable, write_nullable_compact_string
        return read_compact_string, write_compact_string
    if f.kind.startswith("[]"):
        item = f.kind[2:]
        struct_cls = _STRUCTS.get(item)
        if struct_cls is not None:
            item_reader, item_writer = _struct_codec(struct_cls)
        else:
            item_reader, item_writer = _PRIMITIVES[item]
        reader = bounded_array_reader(item_reader, flexible=True)
        return (reader if f.nullable else _not_null(f.name, reader)), compact_array_writer(item_writer)
    return _PRIMITIVES[f.kind]


def _struct_codec(cls: type) -> tuple[Reader, Writer]:
    def read(buf: Any, offset: int) -> tuple[Any, int]:
        return _read_body(cls, 0, buf, offset)

    def write(out: io.BytesIO, value: Any) -> None:
        _write_body(out, value, 0)

    return read, write


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


@functools.cache
def _plan(cls: type, version: int) -> _Plan:
    defaults = _defaults(cls)
    regular: list[tuple[str, Reader, Writer]] = []
    tagged: list[tuple[int, str, Reader, Writer, Any]] = []
    absent: list[tuple[str, Any]] = []
    for f in cls.FIELDS:  # type: ignore[attr-defined]
        if version < f.since:
            absent.append((f.name, defaults[f.name]))
            continue
        reader, writer = _codec(f)
        if f.tag is None:
            regular.append((f.name, reader, writer))
        else:
            tagged.append((f.tag, f.name, reader, writer, defaults[f.name]))
    tagged.sort(key=lambda t: t[0])
    return _Plan(tuple(regular), tuple(tagged), {t[0]: (t[1], t[2]) for t in tagged}, tuple(absent))


def _write_body(out: io.BytesIO, obj: Any, version: int) -> None:
    plan = _plan(type(obj), version)
    for name, default in plan.absent:
        if getattr(obj, name) != default:
            raise MetadataRecordError(f"{type(obj).__name__} version {version} cannot carry a non-default {name}")
    for name, _, writer in plan.regular:
        writer(out, getattr(obj, name))
    present = [(tag, writer, getattr(obj, name)) for tag, name, _, writer, default in plan.tagged if getattr(obj, name) != default]
    write_unsigned_varint(out, len(present))
    for tag, writer, value in present:
        write_tagged_field(out, tag, writer, value)


def _read_body(cls: type, version: int, buf: Any, offset: int) -> tuple[Any, int]:
    plan = _plan(cls, version)
    start = offset
    values: dict[str, Any] = {}
    for name, reader, _ in plan.regular:
        values[name], size = reader(buf, offset)
        offset += size
    count, size = read_unsigned_varint(buf, offset)
    offset += size
    for _ in range(count):
        tag, size = read_unsigned_varint(buf, offset)
        offset += size
        length, size = read_unsigned_varint(buf, offset)
        offset += size
        if offset + length > len(buf):
            raise MetadataRecordError(f"tagged field {tag} of {cls.__name__} runs past the end of the record")
        known = plan.by_tag.get(tag)
        if known is not None:
            name, reader = known
            values[name], used = reader(buf, offset)
            if used != length:
                raise MetadataRecordError(f"tagged field {name} of {cls.__name__} is {length} bytes but its value took {used}")
        offset += length
    return cls(**values), offset - start


class MetadataRecord:
    """Base of every metadata record: ``encode()`` gives the whole record value."""

    __slots__ = ()
    API_KEY: ClassVar[int]
    VERSION: ClassVar[int]  # the highest version: decode reads 0..VERSION, encode writes VERSION
    FIELDS: ClassVar[tuple[Field, ...]]

    def encode(self, version: int | None = None) -> bytes:
        """The record value at ``version``; by default the record's own ``record_version`` (the one
        the metadata.version it was made under implies, for the records that carry one), else
        VERSION. Never a version too old to carry the fields set: then the lowest one that can."""
        if version is None:
            version = getattr(self, "record_version", None)
            if version is None:
                version = self.VERSION
            version = max(version, self.lowest_version())
        if not 0 <= version <= self.VERSION:
            raise MetadataRecordError(f"{type(self).__name__} has no version {version}")
        out = io.BytesIO()
        write_unsigned_varint(out, FRAME_VERSION)
        write_unsigned_varint(out, self.API_KEY)
        write_unsigned_varint(out, version)
        try:
            _write_body(out, self, version)
        except (struct.error, SerialError, TypeError) as e:
            raise MetadataRecordError(f"cannot encode {type(self).__name__}: {e}") from e
        return out.getvalue()

    def lowest_version(self) -> int:
        """The lowest version whose fields hold every non-default value of this record."""
        return max((since for name, since, default in _versioned_fields(type(self)) if getattr(self, name) != default), default=0)


@functools.cache
def _versioned_fields(cls: type) -> tuple[tuple[str, int, Any], ...]:
    defaults = _defaults(cls)
    return tuple((f.name, f.since, defaults[f.name]) for f in cls.FIELDS if f.since > 0)  # type: ignore[attr-defined]


def _record_version() -> Any:
    """The version to write a record at, set by the controller from the finalized metadata.version
    (None: VERSION); decoding sets the version read. Not part of the record's equality."""
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("name", "string"),
        Field("host", "string"),
        Field("port", "uint16"),
        Field("security_protocol", "int16"),
    )
    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFeature:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("name", "string"),
        Field("min_supported_version", "int16"),
        Field("max_supported_version", "int16"),
    )
    name: str
    min_supported_version: int
    max_supported_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityData:
    """One part of a client quota entity: its type (user, client-id, ip) and name (None: the default)."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("entity_type", "string"), Field("entity_name", "string", nullable=True))
    entity_type: str
    entity_name: str | None


# RegisterControllerRecord's ControllerEndpoint and ControllerFeature have the fields of
# BrokerEndpoint and BrokerFeature: the same classes read and write them.
_STRUCTS: dict[str, type] = {
    "BrokerEndpoint": BrokerEndpoint,
    "BrokerFeature": BrokerFeature,
    "ControllerEndpoint": BrokerEndpoint,
    "ControllerFeature": BrokerFeature,
    "EntityData": EntityData,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord(MetadataRecord):
    """v3 from metadata.version 3.7-IV2 (log_dirs), v4 from 4.3-IV0 (cordoned_log_dirs: None until
    the broker tells)."""

    API_KEY: ClassVar[int] = 0
    VERSION: ClassVar[int] = 4
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("broker_id", "int32"),
        Field("is_migrating_zk_broker", "bool", since=2),
        Field("incarnation_id", "uuid"),
        Field("broker_epoch", "int64"),
        Field("end_points", "[]BrokerEndpoint"),
        Field("features", "[]BrokerFeature"),
        Field("rack", "string", nullable=True),
        Field("fenced", "bool"),
        Field("in_controlled_shutdown", "bool", since=1),
        Field("log_dirs", "[]uuid", since=3, tag=0),
        Field("cordoned_log_dirs", "[]uuid", since=4, tag=1, nullable=True),
    )
    broker_id: int
    is_migrating_zk_broker: bool = False
    incarnation_id: uuid.UUID
    broker_epoch: int
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None = None
    record_version: int | None = _record_version()


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("broker_id", "int32"), Field("broker_epoch", "int64"))
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("name", "string"), Field("topic_id", "uuid"))
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 3
    VERSION: ClassVar[int] = 2
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("partition_id", "int32"),
        Field("topic_id", "uuid"),
        Field("replicas", "[]int32"),
        Field("isr", "[]int32"),
        Field("removing_replicas", "[]int32"),
        Field("adding_replicas", "[]int32"),
        Field("leader", "int32"),
        Field("leader_recovery_state", "int8", tag=0),
        Field("leader_epoch", "int32"),
        Field("partition_epoch", "int32"),
        Field("directories", "[]uuid", since=1),
        Field("eligible_leader_replicas", "[]int32", since=2, tag=1, nullable=True),
        Field("last_known_elr", "[]int32", since=2, tag=2, nullable=True),
    )
    partition_id: int = -1
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_recovery_state: int = 0
    leader_epoch: int = -1
    partition_epoch: int = -1
    directories: tuple[uuid.UUID, ...] = ()
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    record_version: int | None = _record_version()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("name", "string"),
        Field("value", "string", nullable=True),
    )
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord(MetadataRecord):
    """Changes to one partition; every tagged field left at its default means "unchanged"."""

    API_KEY: ClassVar[int] = 5
    VERSION: ClassVar[int] = 2
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("partition_id", "int32"),
        Field("topic_id", "uuid"),
        Field("isr", "[]int32", tag=0, nullable=True),
        Field("leader", "int32", tag=1),
        Field("replicas", "[]int32", tag=2, nullable=True),
        Field("removing_replicas", "[]int32", tag=3, nullable=True),
        Field("adding_replicas", "[]int32", tag=4, nullable=True),
        Field("leader_recovery_state", "int8", tag=5),
        Field("directories", "[]uuid", since=1, tag=8, nullable=True),
        Field("eligible_leader_replicas", "[]int32", since=2, tag=6, nullable=True),
        Field("last_known_elr", "[]int32", since=2, tag=7, nullable=True),
    )
    partition_id: int = -1
    topic_id: uuid.UUID
    isr: tuple[int, ...] | None = None
    leader: int = -2  # NO_LEADER_CHANGE; -1 is NO_LEADER
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    directories: tuple[uuid.UUID, ...] | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    record_version: int | None = _record_version()


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("id", "int32"), Field("epoch", "int64"))
    id: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("id", "int32"), Field("epoch", "int64"))
    id: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_id", "uuid"),)
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord(MetadataRecord):
    """One quota of one client quota entity set, or removed."""

    API_KEY: ClassVar[int] = 14
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("entity", "[]EntityData"), Field("key", "string"), Field("value", "float64"), Field("remove", "bool"))
    entity: tuple[EntityData, ...]
    key: str
    value: float = 0.0
    remove: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); the
    salted password itself is never stored, only the keys derived from it."""

    API_KEY: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("name", "string"),
        Field("mechanism", "int8"),
        Field("salt", "bytes"),
        Field("stored_key", "bytes"),
        Field("server_key", "bytes"),
        Field("iterations", "int32"),
    )
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 22
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("name", "string"), Field("mechanism", "int8"))
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord(MetadataRecord):
    """One ACL, by an id the controller chose (codes as broker/security/standard_acl.py)."""

    API_KEY: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("id", "uuid"),
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("pattern_type", "int8"),
        Field("principal", "string"),
        Field("host", "string"),
        Field("operation", "int8"),
        Field("permission_type", "int8"),
    )
    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 19
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("id", "uuid"),)
    id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 12
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("name", "string"), Field("feature_level", "int16"))
    name: str
    feature_level: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("broker_id", "int32"),
        Field("broker_epoch", "int64"),
        Field("next_producer_id", "int64"),
    )
    broker_id: int
    broker_epoch: int = -1
    next_producer_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord(MetadataRecord):
    """Written, as by Kafka, at the lowest version that holds what changed: v0 a fencing, v1 a
    controlled shutdown, v2 the log directories, v3 the cordoned ones (metadata.version 4.3-IV0)."""

    API_KEY: ClassVar[int] = 17
    VERSION: ClassVar[int] = 3
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("broker_id", "int32"),
        Field("broker_epoch", "int64"),
        Field("fenced", "int8", tag=0),
        Field("in_controlled_shutdown", "int8", since=1, tag=1),
        Field("log_dirs", "[]uuid", since=2, tag=2),
        Field("cordoned_log_dirs", "[]uuid", since=3, tag=3, nullable=True),
    )
    broker_id: int
    broker_epoch: int
    fenced: int = 0  # -1 unfenced, 0 no change, 1 fenced
    in_controlled_shutdown: int = 0  # 0 no change, 1 in controlled shutdown
    log_dirs: tuple[uuid.UUID, ...] = ()  # empty: no change
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None = None  # None: no change
    record_version: int | None = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 20
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 23
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("name", "string", tag=0, nullable=True),)
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 24
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 25
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("reason", "string", tag=0, nullable=True),)
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearElrRecord(MetadataRecord):
    """Empties the eligible leader replicas of one topic's partitions, or of every topic (name "")."""

    API_KEY: ClassVar[int] = 28
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_name", "string"),)
    topic_name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecord(MetadataRecord):
    """A controller's registration (KIP-919, metadata.version 3.7-IV0): its endpoints and the
    feature ranges it supports."""

    API_KEY: ClassVar[int] = 27
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("controller_id", "int32"),
        Field("incarnation_id", "uuid"),
        Field("zk_migration_ready", "bool"),
        Field("end_points", "[]ControllerEndpoint"),
        Field("features", "[]ControllerFeature"),
    )
    controller_id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool = False
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterControllerRecord(MetadataRecord):
    """A controller's registration removed (metadata.version 4.4-IV2)."""

    API_KEY: ClassVar[int] = 29
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("controller_id", "int32"),)
    controller_id: int


RECORD_TYPES: dict[int, type[MetadataRecord]] = {
    cls.API_KEY: cls
    for cls in (
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        TopicRecord,
        PartitionRecord,
        ConfigRecord,
        PartitionChangeRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        RemoveTopicRecord,
        FeatureLevelRecord,
        ProducerIdsRecord,
        BrokerRegistrationChangeRecord,
        UserScramCredentialRecord,
        RemoveUserScramCredentialRecord,
        ClientQuotaRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        NoOpRecord,
        BeginTransactionRecord,
        EndTransactionRecord,
        AbortTransactionRecord,
        ClearElrRecord,
        RegisterControllerRecord,
        UnregisterControllerRecord,
    )
}


def decode_metadata_record(value: bytes | memoryview) -> MetadataRecord:
    """Decode one record value of the metadata log (any version up to the class's VERSION)."""
    try:
        frame, offset = read_unsigned_varint(value, 0)
        if frame != FRAME_VERSION:
            raise MetadataRecordError(f"unknown metadata record frame version {frame}")
        api_key, size = read_unsigned_varint(value, offset)
        offset += size
        version, size = read_unsigned_varint(value, offset)
        offset += size
        cls = RECORD_TYPES.get(api_key)
        if cls is None:
            raise MetadataRecordError(f"unknown metadata record type {api_key}")
        if version > cls.VERSION:
            raise MetadataRecordError(f"{cls.__name__} version {version} is newer than the highest known, {cls.VERSION}")
        record, size = _read_body(cls, version, value, offset)
        offset += size
        if "record_version" in cls.__dataclass_fields__:  # type: ignore[attr-defined]
            object.__setattr__(record, "record_version", version)
    except MetadataRecordError:
        raise
    except (SerialError, ValueError) as e:
        raise MetadataRecordError(f"malformed metadata record: {e}") from e
    if offset != len(value):
        raise MetadataRecordError(f"{len(value) - offset} byte(s) of garbage after {cls.__name__}")
    return record  # type: ignore[no-any-return]


__all__ = [
    "AbortTransactionRecord",
    "AccessControlEntryRecord",
    "BeginTransactionRecord",
    "BrokerEndpoint",
    "BrokerFeature",
    "BrokerRegistrationChangeRecord",
    "ClearElrRecord",
    "ClientQuotaRecord",
    "ConfigRecord",
    "EndTransactionRecord",
    "EntityData",
    "FRAME_VERSION",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "Field",
    "MetadataRecord",
    "MetadataRecordError",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RECORD_TYPES",
    "RegisterBrokerRecord",
    "RegisterControllerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "UnregisterControllerRecord",
    "UserScramCredentialRecord",
    "ZERO_UUID",
    "decode_metadata_record",
]
