"""The records of `__consumer_offsets`: Kafka's group coordinator key and value layouts (sans-IO).

The group coordinator keeps committed offsets and group state as key/value records in the
compacted topic `__consumer_offsets`; a new coordinator rebuilds its memory by replaying them.
We write exactly Kafka's bytes, so a partition written by Kafka replays here (and back), and the
tools that read this topic understand ours.

A key starts with an int16 that names the record type (Kafka calls it the key version): 0 and 1
an offset commit, 2 a classic group, 3-8 the KIP-848 consumer group records, 10-15 the KIP-932
share group records as Kafka 4.4 lays them out (type 9, the share group partition metadata, was
dropped before share groups went stable; 4.4 keeps a metadata hash in the group's record
instead). The value starts with its own int16 version. The layouts are Kafka 4.0's JSON specs in
group-coordinator/src/main/resources/common/message/, plus the tagged AssignmentEpochs that Kafka
4.4 adds to the current member assignment: below a layout's first flexible version,
strings, bytes and arrays carry int16/int32 lengths; from it on they are compact (uvarint length + 1)
and every struct ends with a tagged-fields section.

Each dataclass lists its layout as ``FIELDS`` in the JSON order, with the snake_case of the JSON
names; one codec walks those lists with kio's primitive readers and writers. A field with a JSON
default, a tagged field, or one that some versions lack has that default in Python: decoding a
version without the field fills it, and encoding a version that cannot carry a non-default value
refuses rather than silently dropping it.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, NamedTuple, TypeAlias

from kio.serial.errors import SerialError
from kio.serial.readers import (
    compact_array_reader,
    legacy_array_reader,
    read_compact_array_length,
    read_compact_string,
    read_compact_string_as_bytes,
    read_compact_string_nullable,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_legacy_array_length,
    read_legacy_bytes,
    read_legacy_string,
    read_nullable_legacy_string,
    read_unsigned_varint,
    read_uuid,
)
from kio.serial.writers import (
    Writable,
    compact_array_writer,
    legacy_array_writer,
    write_compact_string,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_legacy_bytes,
    write_legacy_string,
    write_nullable_compact_string,
    write_nullable_legacy_string,
    write_tagged_field,
    write_unsigned_varint,
    write_uuid,
)
from kio.static.primitive import i16, i32, uvarint

ZERO_UUID = uuid.UUID(int=0)
NO_TIMESTAMP = -1
_LAST = 0x7FFF  # "versions": "N+" runs to the last version an int16 can name
_MAX_STRING = 0x7FFF  # Kafka's readers refuse longer strings even where the length is a varint

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[Writable, Any], None]


class CoordinatorRecordError(ValueError):
    """Bytes that are not a coordinator record, or a record that cannot be encoded as asked."""


class UnknownRecordType(CoordinatorRecordError):
    """A key whose record type we do not read (streams groups, regular expressions, later
    types): the loader skips the record, as Kafka's does."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown coordinator record type {record_type}")
        self.record_type = record_type


class Field(NamedTuple):
    name: str
    kind: str  # the JSON type: "int32", "string", "bytes", "uuid", "[]int32", "[]MemberMetadata", ...
    since: int = 0  # first version that carries the field
    until: int = _LAST  # last version that carries it
    nullable: bool = False
    tag: int | None = None  # None: a regular field


# -- keys -------------------------------------------------------------------------------------------
# Key bodies are never flexible and their layout does not depend on the record type.


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("group", "string"), Field("topic", "string"), Field("partition", "int32"))
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("group", "string"),)
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupIdKey:
    """The body of a key that names a group (KIP-848, KIP-932 and KIP-1071 records). Each record's
    key is a subclass that adds nothing: the class tells the record type, the body is the same."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("group_id", "string"),)
    group_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMemberKey:
    """The body of a key that names a member of a group, likewise."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("group_id", "string"), Field("member_id", "string"))
    group_id: str
    member_id: str


class ConsumerGroupMetadataKey(GroupIdKey):
    __slots__ = ()


class ConsumerGroupPartitionMetadataKey(GroupIdKey):
    __slots__ = ()


class ConsumerGroupMemberMetadataKey(GroupMemberKey):
    __slots__ = ()


class ConsumerGroupTargetAssignmentMetadataKey(GroupIdKey):
    __slots__ = ()


class ConsumerGroupTargetAssignmentMemberKey(GroupMemberKey):
    __slots__ = ()


class ConsumerGroupCurrentMemberAssignmentKey(GroupMemberKey):
    __slots__ = ()


class ShareGroupMemberMetadataKey(GroupMemberKey):
    __slots__ = ()


class ShareGroupMetadataKey(GroupIdKey):
    __slots__ = ()


class ShareGroupTargetAssignmentMetadataKey(GroupIdKey):
    __slots__ = ()


class ShareGroupTargetAssignmentMemberKey(GroupMemberKey):
    __slots__ = ()


class ShareGroupCurrentMemberAssignmentKey(GroupMemberKey):
    __slots__ = ()


class ShareGroupStatePartitionMetadataKey(GroupIdKey):
    __slots__ = ()


# -- nested structs -----------------------------------------------------------------------------------
# A struct takes the version and flexibility of the value that holds it.


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """GroupMetadataValue.MemberMetadata: one member of a classic group."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("member_id", "string"),
        Field("group_instance_id", "string", since=3, nullable=True),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout", "int32", since=1),
        Field("session_timeout", "int32"),
        Field("subscription", "bytes"),
        Field("assignment", "bytes"),
    )
    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    rebalance_timeout: int = 0  # the JSON gives no default: an int32's is 0
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    """ConsumerGroupPartitionMetadataValue.TopicMetadata.PartitionMetadata."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("partition", "int32"), Field("racks", "[]string"))
    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """ConsumerGroupPartitionMetadataValue.TopicMetadata."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("topic_id", "uuid"),
        Field("topic_name", "string"),
        Field("num_partitions", "int32"),
        Field("partition_metadata", "[]PartitionMetadata"),
    )
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicProtocol:
    """ConsumerGroupMemberMetadataValue.ClassicMemberMetadata.ClassicProtocol."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("name", "string"), Field("metadata", "bytes"))
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMemberMetadata:
    """ConsumerGroupMemberMetadataValue.ClassicMemberMetadata: a member that joined with the classic protocol."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("session_timeout_ms", "int32"), Field("supported_protocols", "[]ClassicProtocol"))
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartition:
    """ConsumerGroupTargetAssignmentMemberValue.TopicPartition."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_id", "uuid"), Field("partitions", "[]int32"))
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitions:
    """ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions. ``assignment_epochs`` (Kafka 4.4,
    KIP-1251) gives, index for index, the epoch at which the member got each partition; records
    written before it have none."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("topic_id", "uuid"),
        Field("partitions", "[]int32"),
        Field("assignment_epochs", "[]int32", nullable=True, tag=0),
    )
    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareTopicPartitions:
    """ShareGroupCurrentMemberAssignmentValue.TopicPartitions: no assignment epochs, unlike the consumer group's."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_id", "uuid"), Field("partitions", "[]int32"))
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitionsInfo:
    """ShareGroupStatePartitionMetadataValue.TopicPartitionsInfo."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_id", "uuid"), Field("topic_name", "string"), Field("partitions", "[]int32"))
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    """ShareGroupStatePartitionMetadataValue.TopicInfo."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_id", "uuid"), Field("topic_name", "string"))
    topic_id: uuid.UUID
    topic_name: str


# -- values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int] = 4
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("offset", "int64"),
        Field("leader_epoch", "int32", since=3),
        Field("metadata", "string"),
        Field("commit_timestamp", "int64"),
        Field("expire_timestamp", "int64", since=1, until=1),
    )
    offset: int
    leader_epoch: int = -1
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int] = 4
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("protocol_type", "string"),
        Field("generation", "int32"),
        Field("protocol", "string", nullable=True),
        Field("leader", "string", nullable=True),
        Field("current_state_timestamp", "int64", since=2),
        Field("members", "[]MemberMetadata"),
    )
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("epoch", "int32"),)
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topics", "[]TopicMetadata"),)
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("instance_id", "string", nullable=True),
        Field("rack_id", "string", nullable=True),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("subscribed_topic_names", "[]string"),
        Field("subscribed_topic_regex", "string", nullable=True),
        Field("rebalance_timeout_ms", "int32"),
        Field("server_assignor", "string", nullable=True),
        Field("classic_member_metadata", "ClassicMemberMetadata", nullable=True, tag=0),
    )
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("assignment_epoch", "int32"),)
    assignment_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_partitions", "[]TopicPartition"),)
    topic_partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Field("assigned_partitions", "[]TopicPartitions"),
        Field("partitions_pending_revocation", "[]TopicPartitions"),
    )
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupMemberMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("rack_id", "string", nullable=True),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("subscribed_topic_names", "[]string"),
    )
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupMetadataValue:
    """``metadata_hash`` is a regular field here, where the consumer group's (4.1+) is tagged."""

    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("epoch", "int32"), Field("metadata_hash", "int64"))
    epoch: int
    metadata_hash: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupTargetAssignmentMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("assignment_epoch", "int32"), Field("assignment_timestamp", "int64", tag=0))
    assignment_epoch: int
    assignment_timestamp: int = 0  # Kafka 4.3+ (KIP-1263): when the assignment was computed


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupTargetAssignmentMemberValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("topic_partitions", "[]TopicPartition"),)
    topic_partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupCurrentMemberAssignmentValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Field("assigned_partitions", "[]ShareTopicPartitions"),
    )
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[ShareTopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupStatePartitionMetadataValue:
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("initializing_topics", "[]TopicPartitionsInfo"),
        Field("initialized_topics", "[]TopicPartitionsInfo"),
        Field("deleting_topics", "[]TopicInfo"),
    )
    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


CoordinatorKey: TypeAlias = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)
CoordinatorValue: TypeAlias = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    key: CoordinatorKey
    value: CoordinatorValue | None  # None: a tombstone


# Record type (the key's int16) -> key and value layouts. Offset commit keys of type 0 come from old
# brokers; the layout is the same and Kafka writes type 1.
_RECORD_TYPES: dict[int, tuple[type[Any], type[Any]]] = {
    0: (OffsetCommitKey, OffsetCommitValue),
    1: (OffsetCommitKey, OffsetCommitValue),
    2: (GroupMetadataKey, GroupMetadataValue),
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    10: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    11: (ShareGroupMetadataKey, ShareGroupMetadataValue),
    12: (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
    13: (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    14: (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
    15: (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
}
_WRITTEN_RECORD_TYPE: dict[type[Any], int] = {key: record_type for record_type, (key, _) in _RECORD_TYPES.items()}
_STRUCTS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        MemberMetadata,
        PartitionMetadata,
        TopicMetadata,
        ClassicProtocol,
        ClassicMemberMetadata,
        TopicPartition,
        TopicPartitions,
        ShareTopicPartitions,
        TopicPartitionsInfo,
        TopicInfo,
    )
}


# -- the codec ----------------------------------------------------------------------------------------


class _Plan(NamedTuple):
    regular: tuple[tuple[str, Reader, Writer], ...]
    tagged: tuple[tuple[int, str, Reader, Writer, Any], ...]  # sorted by tag, with the default that is not written
    absent: tuple[tuple[str, Any], ...]  # fields this version lacks, with their defaults


def _read_uuid(buf: Any, offset: int) -> tuple[uuid.UUID, int]:
    # kio reads the all-zero UUID as None; here it is a value like any other.
    value, size = read_uuid(buf, offset)
    return (ZERO_UUID if value is None else value), size


def _short_string(writer: Writer) -> Writer:
    # Compact lengths could say more, but Kafka's readers refuse a string over 32767 bytes.
    def write(out: Writable, value: str | None) -> None:
        raw = None if value is None else value.encode()
        if raw is not None and len(raw) > _MAX_STRING:
            raise CoordinatorRecordError(f"a string of {len(raw)} bytes is longer than Kafka reads")
        writer(out, raw)

    return write


# Kinds whose codec is the same at every version and flexibility: the fixed-size ones, and those
# that users of the codec add (``register_kind``).
_KINDS: dict[str, tuple[Reader, Writer]] = {
    "int8": (read_int8, write_int8),
    "int16": (read_int16, write_int16),
    "int32": (read_int32, write_int32),
    "int64": (read_int64, write_int64),
    "uuid": (_read_uuid, write_uuid),
}
# (kind, nullable, flexible) -> codec
_VARIABLE: dict[tuple[str, bool, bool], tuple[Reader, Writer]] = {
    ("string", False, False): (read_legacy_string, write_legacy_string),
    ("string", True, False): (read_nullable_legacy_string, write_nullable_legacy_string),
    ("string", False, True): (read_compact_string, _short_string(write_compact_string)),
    ("string", True, True): (read_compact_string_nullable, _short_string(write_nullable_compact_string)),
    ("bytes", False, False): (read_legacy_bytes, write_legacy_bytes),
    ("bytes", False, True): (read_compact_string_as_bytes, write_compact_string),
}


def _array_reader(name: str, item_reader: Reader, flexible: bool) -> Reader:
    read_length = read_compact_array_length if flexible else read_legacy_array_length
    read_items = compact_array_reader(item_reader) if flexible else legacy_array_reader(item_reader)

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        length, _ = read_length(buf, offset)
        if length is None or length < 0:
            raise CoordinatorRecordError(f"non-nullable field {name} was serialized as null")
        # kio reserves room for the whole count up front: a hostile count would abort the process
        # (a failed allocation in native code). Every item takes at least a byte, so a count larger
        # than what is left is malformed anyway.
        if length > len(buf) - offset:
            raise CoordinatorRecordError(f"field {name} claims {length} items in {len(buf) - offset} bytes")
        return read_items(buf, offset)

    return read


def struct_codec(cls: type[Any], version: int, flexible: bool) -> tuple[Reader, Writer]:
    """The reader and writer of a struct of ``cls`` inside a value of this version and flexibility."""

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        return _read_body(cls, version, flexible, buf, offset)

    def write(out: Writable, value: Any) -> None:
        _write_body(out, value, version, flexible)

    return read, write


def _nullable_tagged_struct(reader: Reader, writer: Writer) -> tuple[Reader, Writer]:
    # Inside its tagged field a nullable struct is preceded by a uvarint: 0 for null, 1 for present.
    def read(buf: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_unsigned_varint(buf, offset)
        if marker == 0:
            return None, size
        value, used = reader(buf, offset + size)
        return value, size + used

    def write(out: Writable, value: Any) -> None:
        write_unsigned_varint(out, uvarint(1))
        writer(out, value)

    return read, write


def _nullable_array(reader: Reader, writer: Writer, flexible: bool) -> tuple[Reader, Writer]:
    # A null array has length -1: an int32 before flexible versions, uvarint 0 (length + 1) from them on.
    def read(buf: Any, offset: int) -> tuple[Any, int]:
        if flexible:
            length, size = read_unsigned_varint(buf, offset)
            if length == 0:
                return None, size
        else:
            length, size = read_int32(buf, offset)
            if length == -1:
                return None, size
        return reader(buf, offset)

    def write(out: Writable, value: Any) -> None:
        if value is not None:
            writer(out, value)
        elif flexible:
            write_unsigned_varint(out, uvarint(0))
        else:
            write_int32(out, i32(-1))

    return read, write


def _codec(f: Field, version: int, flexible: bool) -> tuple[Reader, Writer]:
    if f.kind.startswith("[]"):
        item = f.kind[2:]
        item_reader, item_writer = _codec(Field(f.name, item), version, flexible)
        reader = _array_reader(f.name, item_reader, flexible)
        writer = (compact_array_writer if flexible else legacy_array_writer)(item_writer)
        return _nullable_array(reader, writer, flexible) if f.nullable else (reader, writer)
    if f.kind in _STRUCTS:
        reader, writer = struct_codec(_STRUCTS[f.kind], version, flexible)
        return _nullable_tagged_struct(reader, writer) if f.nullable else (reader, writer)
    if f.kind in _KINDS:
        return _KINDS[f.kind]
    return _VARIABLE[(f.kind, f.nullable, flexible)]


def _defaults(cls: type[Any]) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_PLANS: dict[tuple[type[Any], int, bool], _Plan] = {}


def _plan(cls: type[Any], version: int, flexible: bool) -> _Plan:
    plan = _PLANS.get((cls, version, flexible))
    if plan is None:
        plan = _PLANS[(cls, version, flexible)] = _new_plan(cls, version, flexible)
    return plan


def _new_plan(cls: type[Any], version: int, flexible: bool) -> _Plan:
    defaults = _defaults(cls)
    regular: list[tuple[str, Reader, Writer]] = []
    tagged: list[tuple[int, str, Reader, Writer, Any]] = []
    absent: list[tuple[str, Any]] = []
    for f in cls.FIELDS:
        if not f.since <= version <= f.until:
            absent.append((f.name, defaults[f.name]))
            continue
        reader, writer = _codec(f, version, flexible)
        if f.tag is None:
            regular.append((f.name, reader, writer))
        else:
            tagged.append((f.tag, f.name, reader, writer, defaults[f.name]))
    tagged.sort(key=lambda t: t[0])
    return _Plan(tuple(regular), tuple(tagged), tuple(absent))


def _write_body(out: Writable, obj: Any, version: int, flexible: bool) -> None:
    name = type(obj).__name__
    plan = _plan(type(obj), version, flexible)
    for field_name, default in plan.absent:
        if getattr(obj, field_name) != default:
            raise CoordinatorRecordError(f"{name} version {version} cannot carry {field_name}={getattr(obj, field_name)!r}")
    try:
        for field_name, _, writer in plan.regular:
            writer(out, getattr(obj, field_name))
        if flexible:
            present = [(tag, writer, getattr(obj, n)) for tag, n, _, writer, default in plan.tagged if getattr(obj, n) != default]
            write_unsigned_varint(out, uvarint(len(present)))
            for tag, writer, value in present:
                write_tagged_field(out, uvarint(tag), writer, value)
    except (SerialError, struct.error, TypeError) as e:
        # Out-of-range integers, None where null is not allowed, strings too long for an int16 length.
        raise CoordinatorRecordError(f"cannot encode {name} version {version}: {e}") from e


def _read_body(cls: type[Any], version: int, flexible: bool, buf: Any, offset: int) -> tuple[Any, int]:
    plan = _plan(cls, version, flexible)
    start = offset
    values: dict[str, Any] = {}
    for name, reader, _ in plan.regular:
        values[name], size = reader(buf, offset)
        offset += size
    if flexible:
        count, size = read_unsigned_varint(buf, offset)
        offset += size
        for _ in range(count):  # every field takes at least two bytes, so a hostile count soon runs out
            tag, size = read_unsigned_varint(buf, offset)
            offset += size
            length, size = read_unsigned_varint(buf, offset)
            offset += size
            if offset + length > len(buf):
                raise CoordinatorRecordError(f"tagged field {tag} of {cls.__name__} runs past the end of the record")
            # A tag we do not know is a field of a later Kafka version: skipped.
            for known_tag, name, reader, _, _ in plan.tagged:
                if known_tag == tag:
                    values[name], used = reader(buf, offset)
                    if used != length:
                        raise CoordinatorRecordError(f"tagged field {name} of {cls.__name__} is {length} bytes but its value took {used}")
            offset += length
    return cls(**values), offset - start


def _decode(cls: type[Any], version: int, flexible: bool, buf: memoryview, offset: int) -> Any:
    try:
        obj, size = _read_body(cls, version, flexible, buf, offset)
    except CoordinatorRecordError:
        raise
    except (SerialError, ValueError) as e:  # ValueError: kio's over-long varints and negative array lengths
        raise CoordinatorRecordError(f"malformed {cls.__name__} version {version}: {e}") from e
    if offset + size != len(buf):
        raise CoordinatorRecordError(f"{len(buf) - offset - size} bytes after the end of {cls.__name__} version {version}")
    return obj


def _read_version(buf: memoryview, what: str) -> int:
    try:
        version, _ = read_int16(buf, 0)
    except SerialError as e:
        raise CoordinatorRecordError(f"{what} shorter than its version") from e
    return version


def _default_version(value: CoordinatorValue) -> int:
    # What Kafka 4.0's GroupCoordinatorRecordHelpers writes: an offset commit as v1 when it expires at
    # an explicit time (OffsetCommit v2-v4's retention time; only v1 has expireTimestamp), else v3, the
    # highest non-flexible version; a classic group as v3 (GROUP_METADATA_VALUE_VERSION); every KIP-848
    # and KIP-932 record as v0, its only version. The flexible v4 of the first two is read but not written by default.
    if isinstance(value, OffsetCommitValue):
        return 1 if value.expire_timestamp != NO_TIMESTAMP else 3
    if isinstance(value, GroupMetadataValue):
        return 3
    return 0


# -- sharing the codec ----------------------------------------------------------------------------------
# Other coordinators' records (``__transaction_state``) use the same layout rules: they declare their
# dataclasses with FIELDS and encode them through these.


def register_structs(*classes: type[Any]) -> None:
    """Make nested structs known by class name to the ``[]Name`` and ``Name`` field kinds."""
    _STRUCTS.update({cls.__name__: cls for cls in classes})


def register_kind(kind: str, reader: Reader, writer: Writer) -> None:
    """Make a field kind (and ``[]kind``) known whose codec is the same at every version and
    flexibility. A kind already known keeps its codec."""
    _KINDS.setdefault(kind, (reader, writer))


def encode_versioned(prefix: int, body: Any, version: int, flexible: bool) -> bytes:
    """An int16 (a key's record type or a value's version) followed by the body at ``version``."""
    out = io.BytesIO()
    write_int16(out, i16(prefix))
    _write_body(out, body, version, flexible)
    return out.getvalue()


def read_version(buf: bytes | memoryview, what: str) -> int:
    """The leading int16 of a key or value."""
    return _read_version(memoryview(buf).toreadonly(), what)


def decode_body(cls: type[Any], version: int, flexible: bool, buf: bytes | memoryview) -> Any:
    """The body after the leading int16, which must fill the rest of ``buf``."""
    return _decode(cls, version, flexible, memoryview(buf).toreadonly(), 2)


# -- the API ------------------------------------------------------------------------------------------


def encode_key(key: CoordinatorKey) -> bytes:
    """The key bytes: its record type, then its body."""
    return encode_versioned(_WRITTEN_RECORD_TYPE[type(key)], key, 0, False)


def encode_value(value: CoordinatorValue, version: int | None = None) -> bytes:
    """The value bytes at ``version`` (default: the version Kafka 4.0 writes). Raises
    CoordinatorRecordError (a ValueError) if that version cannot carry one of the value's fields."""
    version = _default_version(value) if version is None else version
    lowest, highest = value.VERSIONS
    if not lowest <= version <= highest:
        raise CoordinatorRecordError(f"{type(value).__name__} has no version {version}")
    return encode_versioned(version, value, version, version >= value.FLEXIBLE_FROM)


def decode_record(key: bytes | memoryview, value: bytes | memoryview | None) -> CoordinatorRecord:
    """One record of `__consumer_offsets`; a None value is a tombstone.

    Raises UnknownRecordType for a record type we do not read, and CoordinatorRecordError for
    anything malformed."""
    # kio's readers take read-only buffers only; the view costs no copy.
    key_buf = memoryview(key).toreadonly()
    record_type = _read_version(key_buf, "key")
    layouts = _RECORD_TYPES.get(record_type)
    if layouts is None:
        raise UnknownRecordType(record_type)
    key_cls, value_cls = layouts
    decoded_key = _decode(key_cls, 0, False, key_buf, 2)
    if value is None:
        return CoordinatorRecord(decoded_key, None)
    value_buf = memoryview(value).toreadonly()
    version = _read_version(value_buf, "value")
    lowest, highest = value_cls.VERSIONS
    if not lowest <= version <= highest:
        raise CoordinatorRecordError(f"{value_cls.__name__} has no version {version}")
    return CoordinatorRecord(decoded_key, _decode(value_cls, version, version >= value_cls.FLEXIBLE_FROM, value_buf, 2))
