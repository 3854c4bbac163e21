"""The streams group records of `__consumer_offsets` (KIP-1071), as Kafka 4.4 writes them, sans-IO.

Record types (the key's int16, Kafka's CoordinatorRecordType): 17 StreamsGroupMetadata, 19
StreamsGroupMemberMetadata, 20 StreamsGroupTargetAssignmentMetadata, 21
StreamsGroupTargetAssignmentMember, 22 StreamsGroupCurrentMemberAssignment, 23 StreamsGroupTopology
(18, the partition metadata, was dropped before streams groups went stable: 4.4 keeps a metadata
hash in the group's record). Keys are never flexible; every value has version 0 only and is
flexible. The layouts are the JSON specs in the 4.4 group-coordinator jar
(common/message/StreamsGroup*.json), encoded with the codec of ``coordinator_records``.

Two kinds that the other group records never needed are added here: ``uint16`` (the endpoint's
port) and a nullable struct in a regular (untagged) field, which Kafka marks with an int8, -1 for
null and 1 for present (StreamsGroupMemberMetadataValue.UserEndpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from kio.serial.readers import read_int8, read_uint16
from kio.serial.writers import Writable, write_int8, write_uint16
from kio.static.primitive import i8

from broker.group.coordinator_records import (
    CoordinatorRecordError,
    Field,
    GroupIdKey,
    GroupMemberKey,
    Reader,
    UnknownRecordType,
    Writer,
    decode_body,
    encode_versioned,
    read_version,
    register_kind,
    register_structs,
    struct_codec,
)

STREAMS_GROUP_METADATA = 17
STREAMS_GROUP_MEMBER_METADATA = 19
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
STREAMS_GROUP_TOPOLOGY = 23
RECORD_TYPES = frozenset({17, 19, 20, 21, 22, 23})
VALUE_VERSION = 0
NO_TOPOLOGY_EPOCH = -1  # the JSON default of the metadata's topology epochs


# -- keys -------------------------------------------------------------------------------------------


class StreamsGroupMetadataKey(GroupIdKey):
    __slots__ = ()


class StreamsGroupTopologyKey(GroupIdKey):
    __slots__ = ()


class StreamsGroupMemberMetadataKey(GroupMemberKey):
    __slots__ = ()


class StreamsGroupTargetAssignmentMetadataKey(GroupIdKey):
    __slots__ = ()


class StreamsGroupTargetAssignmentMemberKey(GroupMemberKey):
    __slots__ = ()


class StreamsGroupCurrentMemberAssignmentKey(GroupMemberKey):
    __slots__ = ()


# -- nested structs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LastAssignmentConfig:
    """StreamsGroupMetadataValue.LastAssignmentConfig: an assignment config the last target used."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("key", "string"), Field("value", "string"))
    key: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsTopicConfig:
    """StreamsGroupTopologyValue.TopicConfig."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("key", "string"), Field("value", "string"))
    key: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsTopicInfo:
    """StreamsGroupTopologyValue.TopicInfo: an internal topic; 0 partitions or replication factor
    means "not set" (always 0 partitions for a changelog topic)."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("name", "string"),
        Field("partitions", "int32"),
        Field("replication_factor", "int16"),
        Field("topic_configs", "[]StreamsTopicConfig"),
    )
    name: str
    partitions: int
    replication_factor: int
    topic_configs: tuple[StreamsTopicConfig, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CopartitionGroup:
    """StreamsGroupTopologyValue.Subtopology.CopartitionGroup: indexes into the subtopology's arrays."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("source_topics", "[]int16"),
        Field("source_topic_regex", "[]int16"),
        Field("repartition_source_topics", "[]int16"),
    )
    source_topics: tuple[int, ...]
    source_topic_regex: tuple[int, ...]
    repartition_source_topics: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subtopology:
    """StreamsGroupTopologyValue.Subtopology."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("subtopology_id", "string"),
        Field("source_topics", "[]string"),
        Field("source_topic_regex", "[]string"),
        Field("state_changelog_topics", "[]StreamsTopicInfo"),
        Field("repartition_sink_topics", "[]string"),
        Field("repartition_source_topics", "[]StreamsTopicInfo"),
        Field("copartition_groups", "[]CopartitionGroup"),
    )
    subtopology_id: str
    source_topics: tuple[str, ...]
    source_topic_regex: tuple[str, ...]
    state_changelog_topics: tuple[StreamsTopicInfo, ...]
    repartition_sink_topics: tuple[str, ...]
    repartition_source_topics: tuple[StreamsTopicInfo, ...]
    copartition_groups: tuple[CopartitionGroup, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """StreamsGroupMemberMetadataValue.Endpoint: where the member serves interactive queries."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("host", "string"), Field("port", "uint16"))
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyValue:
    """StreamsGroupMemberMetadataValue.KeyValue: a client tag."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("key", "string"), Field("value", "string"))
    key: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskIds:
    """StreamsGroupTargetAssignmentMemberValue.TaskIds: the tasks of one subtopology."""

    FIELDS: ClassVar[tuple[Field, ...]] = (Field("subtopology_id", "string"), Field("partitions", "[]int32"))
    subtopology_id: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskIdsWithEpochs:
    """StreamsGroupCurrentMemberAssignmentValue.TaskIds: ``assignment_epochs`` (tagged, active tasks
    only) gives, index for index, the epoch at which the member got each task."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("subtopology_id", "string"),
        Field("partitions", "[]int32"),
        Field("assignment_epochs", "[]int32", nullable=True, tag=0),
    )
    subtopology_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


# -- values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupMetadataValue:
    """The group epoch and the hash of the topics it reads and writes, plus what 4.4 tracks of the
    topology: the epoch last validated against the metadata, the assignment configs of the last
    target, and the state of the topology description plugin (-1: none)."""

    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("epoch", "int32"),
        Field("metadata_hash", "int64"),
        Field("validated_topology_epoch", "int32", tag=0),
        Field("last_assignment_configs", "[]LastAssignmentConfig", nullable=True, tag=1),
        Field("stored_description_topology_epoch", "int32", tag=2),
        Field("failed_description_topology_epoch", "int32", tag=3),
    )
    epoch: int
    metadata_hash: int
    validated_topology_epoch: int = NO_TOPOLOGY_EPOCH
    last_assignment_configs: tuple[LastAssignmentConfig, ...] | None = None
    stored_description_topology_epoch: int = NO_TOPOLOGY_EPOCH
    failed_description_topology_epoch: int = NO_TOPOLOGY_EPOCH


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTopologyValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("epoch", "int32"), Field("subtopologies", "[]Subtopology"))
    epoch: int
    subtopologies: tuple[Subtopology, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupMemberMetadataValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("instance_id", "string", nullable=True),
        Field("rack_id", "string", nullable=True),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout_ms", "int32"),
        Field("topology_epoch", "int32"),
        Field("process_id", "string"),
        Field("user_endpoint", "Endpoint?"),
        Field("client_tags", "[]KeyValue"),
    )
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int = -1
    topology_epoch: int
    process_id: str
    user_endpoint: Endpoint | None = None
    client_tags: tuple[KeyValue, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTargetAssignmentMetadataValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("assignment_epoch", "int32"), Field("assignment_timestamp", "int64", tag=0))
    assignment_epoch: int
    assignment_timestamp: int = 0  # Kafka 4.3+ (KIP-1263): when the assignment was computed


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTargetAssignmentMemberValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("active_tasks", "[]TaskIds"),
        Field("standby_tasks", "[]TaskIds"),
        Field("warmup_tasks", "[]TaskIds"),
    )
    active_tasks: tuple[TaskIds, ...]
    standby_tasks: tuple[TaskIds, ...]
    warmup_tasks: tuple[TaskIds, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupCurrentMemberAssignmentValue:
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Field("active_tasks", "[]TaskIdsWithEpochs"),
        Field("standby_tasks", "[]TaskIdsWithEpochs"),
        Field("warmup_tasks", "[]TaskIdsWithEpochs"),
        Field("active_tasks_pending_revocation", "[]TaskIdsWithEpochs"),
        Field("standby_tasks_pending_revocation", "[]TaskIdsWithEpochs"),
        Field("warmup_tasks_pending_revocation", "[]TaskIdsWithEpochs"),
    )
    member_epoch: int
    previous_member_epoch: int
    state: int
    active_tasks: tuple[TaskIdsWithEpochs, ...]
    standby_tasks: tuple[TaskIdsWithEpochs, ...]
    warmup_tasks: tuple[TaskIdsWithEpochs, ...]
    active_tasks_pending_revocation: tuple[TaskIdsWithEpochs, ...]
    standby_tasks_pending_revocation: tuple[TaskIdsWithEpochs, ...]
    warmup_tasks_pending_revocation: tuple[TaskIdsWithEpochs, ...]


StreamsGroupKey: TypeAlias = (
    StreamsGroupMetadataKey
    | StreamsGroupTopologyKey
    | StreamsGroupMemberMetadataKey
    | StreamsGroupTargetAssignmentMetadataKey
    | StreamsGroupTargetAssignmentMemberKey
    | StreamsGroupCurrentMemberAssignmentKey
)
StreamsGroupValue: TypeAlias = (
    StreamsGroupMetadataValue
    | StreamsGroupTopologyValue
    | StreamsGroupMemberMetadataValue
    | StreamsGroupTargetAssignmentMetadataValue
    | StreamsGroupTargetAssignmentMemberValue
    | StreamsGroupCurrentMemberAssignmentValue
)

_RECORD_TYPES: dict[int, tuple[type[Any], type[Any]]] = {
    STREAMS_GROUP_METADATA: (StreamsGroupMetadataKey, StreamsGroupMetadataValue),
    STREAMS_GROUP_MEMBER_METADATA: (StreamsGroupMemberMetadataKey, StreamsGroupMemberMetadataValue),
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA: (StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMetadataValue),
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER: (StreamsGroupTargetAssignmentMemberKey, StreamsGroupTargetAssignmentMemberValue),
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT: (StreamsGroupCurrentMemberAssignmentKey, StreamsGroupCurrentMemberAssignmentValue),
    STREAMS_GROUP_TOPOLOGY: (StreamsGroupTopologyKey, StreamsGroupTopologyValue),
}
_WRITTEN_RECORD_TYPE: dict[type[Any], int] = {key: record_type for record_type, (key, _) in _RECORD_TYPES.items()}
# The key classes, for dispatching a record to this codec.
STREAMS_GROUP_KEY_TYPES: tuple[type[Any], ...] = tuple(_WRITTEN_RECORD_TYPE)


# -- the two extra kinds ------------------------------------------------------------------------------


def _nullable_struct(reader: Reader, writer: Writer) -> tuple[Reader, Writer]:
    def read(buf: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_int8(buf, offset)
        if marker < 0:
            return None, size
        value, used = reader(buf, offset + size)
        return value, size + used

    def write(out: Writable, value: Any) -> None:
        if value is None:
            write_int8(out, i8(-1))
        else:
            write_int8(out, i8(1))
            writer(out, value)

    return read, write


register_structs(LastAssignmentConfig, StreamsTopicConfig, StreamsTopicInfo, CopartitionGroup, Subtopology, Endpoint, KeyValue, TaskIds, TaskIdsWithEpochs)
register_kind("uint16", read_uint16, write_uint16)
# Every streams value is version 0 and flexible, so the endpoint's codec is fixed too.
register_kind("Endpoint?", *_nullable_struct(*struct_codec(Endpoint, VALUE_VERSION, True)))


# -- the API ------------------------------------------------------------------------------------------


def is_streams_record_type(record_type: int) -> bool:
    return record_type in RECORD_TYPES


def encode_key(key: StreamsGroupKey) -> bytes:
    return encode_versioned(_WRITTEN_RECORD_TYPE[type(key)], key, 0, False)


def encode_value(value: StreamsGroupValue) -> bytes:
    """Raises CoordinatorRecordError (a ValueError) for a field out of its wire type's range."""
    return encode_versioned(VALUE_VERSION, value, VALUE_VERSION, True)


def decode_key(key: bytes | memoryview) -> StreamsGroupKey:
    record_type = read_version(key, "key")
    layouts = _RECORD_TYPES.get(record_type)
    if layouts is None:
        raise UnknownRecordType(record_type)
    decoded: StreamsGroupKey = decode_body(layouts[0], 0, False, key)
    return decoded


def decode_record(key: bytes | memoryview, value: bytes | memoryview | None) -> tuple[StreamsGroupKey, StreamsGroupValue | None]:
    """A streams group record; a None value is a tombstone. Raises UnknownRecordType for another
    record type and CoordinatorRecordError for anything malformed."""
    decoded_key = decode_key(key)
    if value is None:
        return decoded_key, None
    value_cls = _RECORD_TYPES[_WRITTEN_RECORD_TYPE[type(decoded_key)]][1]
    version = read_version(value, "value")
    if version != VALUE_VERSION:
        raise CoordinatorRecordError(f"{value_cls.__name__} has no version {version}")
    return decoded_key, decode_body(value_cls, VALUE_VERSION, True, value)
