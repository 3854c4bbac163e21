"""`__consumer_offsets` record codec: round trips at every version, bytes built by hand from Kafka's
JSON specs, the versions written by default, refusals, tombstones, unknown types, malformed input."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.coordinator_records import (
    ZERO_UUID,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CoordinatorRecord,
    CoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
    TopicPartitions,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_value,
)

TOPIC_ID = uuid.UUID("5f1d6c5e-0d3a-4c8e-9a57-6a2b3c4d5e6f")

# -- byte builders, straight from the wire format -----------------------------------------------------


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(v: str | None) -> bytes:
    """A classic (int16 length) string; -1 is null."""
    if v is None:
        return i16(-1)
    raw = v.encode()
    return i16(len(raw)) + raw


def blob(v: bytes) -> bytes:
    """Classic bytes: an int32 length."""
    return i32(len(v)) + v


def compact_string(v: str | None) -> bytes:
    if v is None:
        return uvarint(0)
    raw = v.encode()
    return uvarint(len(raw) + 1) + raw


def compact_blob(v: bytes) -> bytes:
    return uvarint(len(v) + 1) + v


def compact_count(n: int) -> bytes:
    return uvarint(n + 1)


NO_TAGS = uvarint(0)

# -- strategies -----------------------------------------------------------------------------------


def ints(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


I8, I32, I64 = ints(8), ints(32), ints(64)
TEXT = st.text(max_size=8)
NULLABLE_TEXT = TEXT | st.none()
BLOB = st.binary(max_size=12)
UUIDS = st.uuids() | st.just(ZERO_UUID)


def tuples(s: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(s, max_size=3).map(tuple)


def present_in(version: int, since: int, s: st.SearchStrategy[Any], default: Any, until: int = 0x7FFF) -> st.SearchStrategy[Any]:
    """The field's values where the version carries it, else only its default."""
    return s if since <= version <= until else st.just(default)


def offset_commit_value(v: int) -> st.SearchStrategy[OffsetCommitValue]:
    return st.builds(
        OffsetCommitValue,
        offset=I64,
        leader_epoch=present_in(v, 3, I32, -1),
        metadata=TEXT,
        commit_timestamp=I64,
        expire_timestamp=present_in(v, 1, I64, -1, until=1),
    )


def member_metadata(v: int) -> st.SearchStrategy[MemberMetadata]:
    return st.builds(
        MemberMetadata,
        member_id=TEXT,
        group_instance_id=present_in(v, 3, NULLABLE_TEXT, None),
        client_id=TEXT,
        client_host=TEXT,
        rebalance_timeout=present_in(v, 1, I32, 0),
        session_timeout=I32,
        subscription=BLOB,
        assignment=BLOB,
    )


def group_metadata_value(v: int) -> st.SearchStrategy[GroupMetadataValue]:
    return st.builds(
        GroupMetadataValue,
        protocol_type=TEXT,
        generation=I32,
        protocol=NULLABLE_TEXT,
        leader=NULLABLE_TEXT,
        current_state_timestamp=present_in(v, 2, I64, -1),
        members=tuples(member_metadata(v)),
    )


TARGET_PARTITIONS = st.builds(TopicPartition, topic_id=UUIDS, partitions=tuples(I32))
HELD_PARTITIONS = st.builds(TopicPartitions, topic_id=UUIDS, partitions=tuples(I32), assignment_epochs=tuples(I32) | st.none())
CLASSIC_MEMBER = st.builds(
    ClassicMemberMetadata,
    session_timeout_ms=I32,
    supported_protocols=tuples(st.builds(ClassicProtocol, name=TEXT, metadata=BLOB)),
)
KIP_848_VALUES: dict[type, st.SearchStrategy[Any]] = {
    ConsumerGroupMetadataValue: st.builds(ConsumerGroupMetadataValue, epoch=I32),
    ConsumerGroupPartitionMetadataValue: st.builds(
        ConsumerGroupPartitionMetadataValue,
        topics=tuples(
            st.builds(
                TopicMetadata,
                topic_id=UUIDS,
                topic_name=TEXT,
                num_partitions=I32,
                partition_metadata=tuples(st.builds(PartitionMetadata, partition=I32, racks=tuples(TEXT))),
            )
        ),
    ),
    ConsumerGroupMemberMetadataValue: st.builds(
        ConsumerGroupMemberMetadataValue,
        instance_id=NULLABLE_TEXT,
        rack_id=NULLABLE_TEXT,
        client_id=TEXT,
        client_host=TEXT,
        subscribed_topic_names=tuples(TEXT),
        subscribed_topic_regex=NULLABLE_TEXT,
        rebalance_timeout_ms=I32,
        server_assignor=NULLABLE_TEXT,
        classic_member_metadata=CLASSIC_MEMBER | st.none(),
    ),
    ConsumerGroupTargetAssignmentMetadataValue: st.builds(ConsumerGroupTargetAssignmentMetadataValue, assignment_epoch=I32),
    ConsumerGroupTargetAssignmentMemberValue: st.builds(ConsumerGroupTargetAssignmentMemberValue, topic_partitions=tuples(TARGET_PARTITIONS)),
    ConsumerGroupCurrentMemberAssignmentValue: st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        member_epoch=I32,
        previous_member_epoch=I32,
        state=I8,
        assigned_partitions=tuples(HELD_PARTITIONS),
        partitions_pending_revocation=tuples(HELD_PARTITIONS),
    ),
}
KEYS: dict[type, st.SearchStrategy[Any]] = {
    OffsetCommitKey: st.builds(OffsetCommitKey, group=TEXT, topic=TEXT, partition=I32),
    GroupMetadataKey: st.builds(GroupMetadataKey, group=TEXT),
    ConsumerGroupMetadataKey: st.builds(ConsumerGroupMetadataKey, group_id=TEXT),
    ConsumerGroupPartitionMetadataKey: st.builds(ConsumerGroupPartitionMetadataKey, group_id=TEXT),
    ConsumerGroupMemberMetadataKey: st.builds(ConsumerGroupMemberMetadataKey, group_id=TEXT, member_id=TEXT),
    ConsumerGroupTargetAssignmentMetadataKey: st.builds(ConsumerGroupTargetAssignmentMetadataKey, group_id=TEXT),
    ConsumerGroupTargetAssignmentMemberKey: st.builds(ConsumerGroupTargetAssignmentMemberKey, group_id=TEXT, member_id=TEXT),
    ConsumerGroupCurrentMemberAssignmentKey: st.builds(ConsumerGroupCurrentMemberAssignmentKey, group_id=TEXT, member_id=TEXT),
}
# (key class, record type Kafka writes, value class, version -> value strategy, every value version)
LAYOUTS: list[tuple[type, int, type, Callable[[int], st.SearchStrategy[Any]], range]] = [
    (OffsetCommitKey, 1, OffsetCommitValue, offset_commit_value, range(5)),
    (GroupMetadataKey, 2, GroupMetadataValue, group_metadata_value, range(5)),
    (ConsumerGroupMetadataKey, 3, ConsumerGroupMetadataValue, lambda v: KIP_848_VALUES[ConsumerGroupMetadataValue], range(1)),
    (ConsumerGroupPartitionMetadataKey, 4, ConsumerGroupPartitionMetadataValue, lambda v: KIP_848_VALUES[ConsumerGroupPartitionMetadataValue], range(1)),
    (ConsumerGroupMemberMetadataKey, 5, ConsumerGroupMemberMetadataValue, lambda v: KIP_848_VALUES[ConsumerGroupMemberMetadataValue], range(1)),
    (
        ConsumerGroupTargetAssignmentMetadataKey,
        6,
        ConsumerGroupTargetAssignmentMetadataValue,
        lambda v: KIP_848_VALUES[ConsumerGroupTargetAssignmentMetadataValue],
        range(1),
    ),
    (
        ConsumerGroupTargetAssignmentMemberKey,
        7,
        ConsumerGroupTargetAssignmentMemberValue,
        lambda v: KIP_848_VALUES[ConsumerGroupTargetAssignmentMemberValue],
        range(1),
    ),
    (
        ConsumerGroupCurrentMemberAssignmentKey,
        8,
        ConsumerGroupCurrentMemberAssignmentValue,
        lambda v: KIP_848_VALUES[ConsumerGroupCurrentMemberAssignmentValue],
        range(1),
    ),
]
VERSIONED = [(key_cls, value_cls, strategy, v) for key_cls, _, value_cls, strategy, versions in LAYOUTS for v in versions]
ANY_RECORD = st.one_of(
    [st.tuples(KEYS[key_cls], strategy(v), st.just(v)) for key_cls, _, strategy, v in VERSIONED]  # (key, value, version)
)


def _classes() -> list[type]:
    out: list[type] = []
    for key_cls, _, value_cls, _, _ in LAYOUTS:
        out += [key_cls, value_cls]
    return out + [MemberMetadata, PartitionMetadata, TopicMetadata, ClassicProtocol, ClassicMemberMetadata, TopicPartition, TopicPartitions]


# -- round trips --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_layout_lists_every_field_in_order(cls: type) -> None:
    assert [f.name for f in cls.FIELDS] == [f.name for f in dataclasses.fields(cls)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("key_cls", "value_cls", "strategy", "version"),
    VERSIONED,
    ids=[f"{value_cls.__name__}-v{v}" for _, value_cls, _, v in VERSIONED],
)
@settings(max_examples=60)
@given(data=st.data())
def test_round_trip_at_every_version(key_cls: type, value_cls: type, strategy: Callable[[int], Any], version: int, data: st.DataObject) -> None:
    key = data.draw(KEYS[key_cls])
    value = data.draw(strategy(version))
    value_bytes = encode_value(value, version)
    assert value_bytes[:2] == i16(version)
    decoded = decode_record(encode_key(key), value_bytes)
    assert decoded == CoordinatorRecord(key, value)
    hash(decoded)  # tuples all the way down


@pytest.mark.parametrize(("key_cls", "record_type"), [(k, t) for k, t, *_ in LAYOUTS], ids=lambda x: getattr(x, "__name__", str(x)))
@given(data=st.data())
def test_keys_round_trip_and_tombstones(key_cls: type, record_type: int, data: st.DataObject) -> None:
    key = data.draw(KEYS[key_cls])
    key_bytes = encode_key(key)
    assert key_bytes[:2] == i16(record_type)
    assert decode_record(key_bytes, None) == CoordinatorRecord(key, None)
    assert decode_record(memoryview(bytearray(key_bytes)), None) == CoordinatorRecord(key, None)


# -- bytes written out by hand from the JSON specs ------------------------------------------------------


def test_offset_commit_key_v1_and_v0() -> None:
    body = string("my-group") + string("orders") + i32(7)
    key = OffsetCommitKey(group="my-group", topic="orders", partition=7)
    assert encode_key(key) == i16(1) + body
    assert decode_record(i16(1) + body, None).key == key
    assert decode_record(i16(0) + body, None).key == key  # older brokers' type 0: same layout


def test_offset_commit_value_v1_bytes() -> None:
    # v1: offset int64, metadata string, commitTimestamp int64, expireTimestamp int64
    raw = i16(1) + i64(42) + string("meta") + i64(1_000) + i64(2_000)
    value = OffsetCommitValue(offset=42, metadata="meta", commit_timestamp=1_000, expire_timestamp=2_000)
    assert encode_value(value) == raw  # an explicit expiry is written as v1 by default
    assert decode_record(encode_key(OffsetCommitKey(group="g", topic="t", partition=0)), raw).value == value


def test_offset_commit_value_v3_bytes() -> None:
    # v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
    raw = i16(3) + i64(42) + i32(5) + string("") + i64(1_000)
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="", commit_timestamp=1_000)
    assert encode_value(value) == raw
    assert decode_record(encode_key(OffsetCommitKey(group="g", topic="t", partition=0)), raw).value == value


def test_offset_commit_value_v0_and_flexible_v4_bytes() -> None:
    key = encode_key(OffsetCommitKey(group="g", topic="t", partition=0))
    v0 = i16(0) + i64(42) + string("m") + i64(1_000)
    assert decode_record(key, v0).value == OffsetCommitValue(offset=42, metadata="m", commit_timestamp=1_000)
    v4 = i16(4) + i64(42) + i32(5) + compact_string("m") + i64(1_000) + NO_TAGS
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1_000)
    assert decode_record(key, v4).value == value
    assert encode_value(value, 4) == v4


def test_group_metadata_key_v2_bytes() -> None:
    assert encode_key(GroupMetadataKey(group="my-group")) == i16(2) + string("my-group")
    assert decode_record(i16(2) + string("my-group"), None).key == GroupMetadataKey(group="my-group")


def test_group_metadata_value_v3_one_static_member_bytes() -> None:
    subscription = b"\x00\x01\x00\x00\x00\x01\x00\x06orders"
    assignment = b"\x00\x01\x00\x00\x00\x01"
    raw = (
        i16(3)
        + string("consumer")  # protocolType
        + i32(5)  # generation
        + string("range")  # protocol
        + string("member-1")  # leader
        + i64(1_700_000_000_000)  # currentStateTimestamp (v2+)
        + i32(1)  # members
        + string("member-1")  # memberId
        + string("instance-1")  # groupInstanceId (v3+)
        + string("client-1")  # clientId
        + string("/10.0.0.1")  # clientHost
        + i32(300_000)  # rebalanceTimeout (v1+)
        + i32(45_000)  # sessionTimeout
        + blob(subscription)
        + blob(assignment)
    )
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader="member-1",
        current_state_timestamp=1_700_000_000_000,
        members=(
            MemberMetadata(
                member_id="member-1",
                group_instance_id="instance-1",
                client_id="client-1",
                client_host="/10.0.0.1",
                rebalance_timeout=300_000,
                session_timeout=45_000,
                subscription=subscription,
                assignment=assignment,
            ),
        ),
    )
    assert encode_value(value) == raw
    assert decode_record(i16(2) + string("g"), raw).value == value


def test_group_metadata_value_v0_empty_group_with_nulls() -> None:
    raw = i16(0) + string("") + i32(0) + string(None) + string(None) + i32(0)
    value = GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None, members=())
    assert decode_record(i16(2) + string("g"), raw).value == value
    assert encode_value(value, 0) == raw


def test_consumer_group_current_member_assignment_bytes() -> None:
    key_raw = i16(8) + string("g") + string("m")
    raw = (
        i16(0)
        + i32(10)  # MemberEpoch
        + i32(9)  # PreviousMemberEpoch
        + i8(1)  # State
        + compact_count(1)  # AssignedPartitions
        + TOPIC_ID.bytes
        + compact_count(2)
        + i32(0)
        + i32(2)
        + NO_TAGS  # end of the TopicPartitions struct
        + compact_count(0)  # PartitionsPendingRevocation
        + NO_TAGS
    )
    key = ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m")
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=10,
        previous_member_epoch=9,
        state=1,
        assigned_partitions=(TopicPartitions(topic_id=TOPIC_ID, partitions=(0, 2)),),
        partitions_pending_revocation=(),
    )
    assert encode_key(key) == key_raw
    assert encode_value(value) == raw
    assert decode_record(key_raw, raw) == CoordinatorRecord(key, value)


def test_consumer_group_current_member_assignment_with_assignment_epochs() -> None:
    # Kafka 4.4 (KIP-1251): TopicPartitions' tagged AssignmentEpochs (tag 0, nullable []int32),
    # in both lists; written only when set.
    epochs = compact_count(2) + i32(7) + i32(10)
    revoking_epochs = compact_count(1) + i32(3)
    raw = (
        i16(0)
        + i32(10)  # MemberEpoch
        + i32(9)  # PreviousMemberEpoch
        + i8(1)  # State
        + compact_count(1)  # AssignedPartitions
        + TOPIC_ID.bytes
        + compact_count(2)
        + i32(0)
        + i32(2)
        + uvarint(1)  # one tagged field
        + uvarint(0)  # tag 0: AssignmentEpochs
        + uvarint(len(epochs))
        + epochs
        + compact_count(1)  # PartitionsPendingRevocation
        + TOPIC_ID.bytes
        + compact_count(1)
        + i32(5)
        + uvarint(1)
        + uvarint(0)
        + uvarint(len(revoking_epochs))
        + revoking_epochs
        + NO_TAGS
    )
    key_raw = i16(8) + string("g") + string("m")
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=10,
        previous_member_epoch=9,
        state=1,
        assigned_partitions=(TopicPartitions(topic_id=TOPIC_ID, partitions=(0, 2), assignment_epochs=(7, 10)),),
        partitions_pending_revocation=(TopicPartitions(topic_id=TOPIC_ID, partitions=(5,), assignment_epochs=(3,)),),
    )
    assert encode_value(value) == raw
    assert decode_record(key_raw, raw).value == value
    # A record from before 4.4 has no tagged field: it reads back with null epochs.
    older = dataclasses.replace(
        value,
        assigned_partitions=(TopicPartitions(topic_id=TOPIC_ID, partitions=(0, 2)),),
        partitions_pending_revocation=(TopicPartitions(topic_id=TOPIC_ID, partitions=(5,)),),
    )
    older_raw = (
        i16(0)
        + i32(10)
        + i32(9)
        + i8(1)
        + compact_count(1)
        + TOPIC_ID.bytes
        + compact_count(2)
        + i32(0)
        + i32(2)
        + NO_TAGS
        + compact_count(1)
        + TOPIC_ID.bytes
        + compact_count(1)
        + i32(5)
        + NO_TAGS
        + NO_TAGS
    )
    assert encode_value(older) == older_raw
    assert decode_record(key_raw, older_raw).value == older


def test_consumer_group_member_metadata_with_classic_member_tagged_field() -> None:
    classic = (
        uvarint(1)  # non-null
        + i32(45_000)  # SessionTimeoutMs
        + compact_count(1)  # SupportedProtocols
        + compact_string("range")
        + compact_blob(b"sub")
        + NO_TAGS
        + NO_TAGS
    )
    raw = (
        i16(0)
        + compact_string("instance-1")  # InstanceId
        + compact_string(None)  # RackId
        + compact_string("client")  # ClientId
        + compact_string("/10.0.0.1")  # ClientHost
        + compact_count(2)
        + compact_string("a")
        + compact_string("b")  # SubscribedTopicNames
        + compact_string(None)  # SubscribedTopicRegex
        + i32(300_000)  # RebalanceTimeoutMs
        + compact_string("uniform")  # ServerAssignor
        + uvarint(1)  # one tagged field
        + uvarint(0)  # tag 0: ClassicMemberMetadata
        + uvarint(len(classic))
        + classic
    )
    value = ConsumerGroupMemberMetadataValue(
        instance_id="instance-1",
        rack_id=None,
        client_id="client",
        client_host="/10.0.0.1",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=300_000,
        server_assignor="uniform",
        classic_member_metadata=ClassicMemberMetadata(session_timeout_ms=45_000, supported_protocols=(ClassicProtocol(name="range", metadata=b"sub"),)),
    )
    key_raw = i16(5) + string("g") + string("m")
    assert encode_value(value) == raw
    assert decode_record(key_raw, raw).value == value
    # Without the tagged field: no tagged fields at all, and null when read back.
    plain = dataclasses.replace(value, classic_member_metadata=None)
    assert encode_value(plain) == raw[: raw.index(b"uniform") + len(b"uniform")] + NO_TAGS
    assert decode_record(key_raw, encode_value(plain)).value == plain


def test_unknown_tagged_fields_are_skipped() -> None:
    # Kafka 4.1 adds MetadataHash (tag 0, int64) to ConsumerGroupMetadataValue; 4.x adds tags to TopicPartitions.
    raw = i16(0) + i32(7) + uvarint(1) + uvarint(0) + uvarint(8) + i64(123)
    assert decode_record(i16(3) + string("g"), raw).value == ConsumerGroupMetadataValue(epoch=7)
    assignment_epochs = compact_count(1) + i32(4)
    nested = (
        i16(0)
        + compact_count(1)
        + TOPIC_ID.bytes
        + compact_count(1)
        + i32(3)
        + uvarint(1)
        + uvarint(0)
        + uvarint(len(assignment_epochs))
        + assignment_epochs
        + NO_TAGS
    )
    assert decode_record(i16(7) + string("g") + string("m"), nested).value == ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=(TopicPartition(topic_id=TOPIC_ID, partitions=(3,)),)
    )


# -- what is written by default, and what is refused ----------------------------------------------------


def test_default_versions_are_kafka_4_0s() -> None:
    commit = OffsetCommitValue(offset=1, leader_epoch=2, metadata="", commit_timestamp=3)
    assert encode_value(commit)[:2] == i16(3)
    assert encode_value(dataclasses.replace(commit, leader_epoch=-1, expire_timestamp=9))[:2] == i16(1)
    assert encode_value(GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None, members=()))[:2] == i16(3)
    assert encode_value(ConsumerGroupMetadataValue(epoch=1))[:2] == i16(0)
    assert encode_key(OffsetCommitKey(group="g", topic="t", partition=0))[:2] == i16(1)


MEMBER = MemberMetadata(member_id="m", client_id="c", client_host="h", session_timeout=1, subscription=b"", assignment=b"")
EMPTY_GROUP = GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None, members=())
COMMIT = OffsetCommitValue(offset=1, metadata="", commit_timestamp=3)


@pytest.mark.parametrize(
    ("value", "version"),
    [
        (dataclasses.replace(COMMIT, expire_timestamp=9), 3),  # only v1 has expireTimestamp
        (dataclasses.replace(COMMIT, expire_timestamp=9), 4),
        (dataclasses.replace(COMMIT, expire_timestamp=9, leader_epoch=2), None),  # v1 has no leaderEpoch
        (dataclasses.replace(COMMIT, leader_epoch=2), 2),
        (dataclasses.replace(EMPTY_GROUP, current_state_timestamp=5), 1),
        (dataclasses.replace(EMPTY_GROUP, members=(dataclasses.replace(MEMBER, group_instance_id="i"),)), 2),
        (dataclasses.replace(EMPTY_GROUP, members=(dataclasses.replace(MEMBER, rebalance_timeout=5),)), 0),
        (COMMIT, 5),  # no such version
        (COMMIT, -1),
        (ConsumerGroupMetadataValue(epoch=1), 1),
        (dataclasses.replace(COMMIT, offset=2**63), None),  # out of int64
        (ConsumerGroupCurrentMemberAssignmentValue(member_epoch=1, previous_member_epoch=0, state=128, assigned_partitions=(), partitions_pending_revocation=()), None),
        (dataclasses.replace(COMMIT, metadata=None), None),  # type: ignore[arg-type]  # not nullable
        (dataclasses.replace(COMMIT, metadata="x" * 40_000), 3),  # over an int16 length
        (dataclasses.replace(COMMIT, metadata="x" * 40_000), 4),  # Kafka reads no longer compact string
    ],
)
def test_refuses_what_a_version_cannot_carry(value: Any, version: int | None) -> None:
    with pytest.raises(CoordinatorRecordError):
        encode_value(value, version)


def test_refuses_out_of_range_key_fields() -> None:
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey(group="g", topic="t", partition=2**31))


# -- unknown types and malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize("record_type", [-1, 9, 16, 17, 0x7FFF])
def test_unknown_record_types(record_type: int) -> None:
    for value in (None, b"", b"\x00\x00anything"):
        with pytest.raises(UnknownRecordType) as raised:
            decode_record(i16(record_type) + string("g"), value)
        assert raised.value.record_type == record_type
        assert isinstance(raised.value, CoordinatorRecordError)


OFFSET_KEY = encode_key(OffsetCommitKey(group="g", topic="t", partition=0))
GROUP_KEY = i16(2) + string("g")
MALFORMED: list[tuple[bytes, bytes | None]] = [
    (OFFSET_KEY + b"\x00", None),  # bytes after the key
    (i16(2), None),  # no body
    (b"\x00", None),  # no record type
    (b"", None),
    (OFFSET_KEY, b""),  # an empty value is not a tombstone
    (OFFSET_KEY, i16(5) + i64(1) + string("") + i64(1)),  # unknown value version
    (OFFSET_KEY, i16(-1)),
    (OFFSET_KEY, i16(0) + i64(1) + string("") + i64(1) + b"\x00"),  # trailing byte
    (OFFSET_KEY, i16(0) + i64(1) + string(None) + i64(1)),  # null where a string must be
    (OFFSET_KEY, i16(0) + i64(1) + i16(-2) + i64(1)),
    (OFFSET_KEY, i16(0) + i64(1) + i16(2) + b"\xff\xfe" + i64(1)),  # not UTF-8
    (GROUP_KEY, i16(3) + string("") + i32(0) + string(None) + string(None) + i64(0) + i32(0x7FFFFFFF)),  # hostile array count
    (GROUP_KEY, i16(3) + string("") + i32(0) + string(None) + string(None) + i64(0) + i32(-1)),  # null array
    (GROUP_KEY, i16(3) + string("") + i32(0) + string(None) + string(None) + i64(0) + i32(-7)),
    (GROUP_KEY, i16(4) + compact_string("") + i32(0) + compact_string(None) + compact_string(None) + i64(0) + uvarint(0xFFFFFFFF)),
    (GROUP_KEY, i16(4) + compact_string("") + i32(0) + compact_string(None) + compact_string(None) + i64(0) + compact_count(0) + uvarint(0xFFFFFFFF)),
    (GROUP_KEY, i16(4) + compact_string("") + i32(0) + compact_string(None) + compact_string(None) + i64(0) + compact_count(0) + b"\xff" * 6),  # varint too long
    (i16(3) + string("g"), i16(0) + i32(7) + uvarint(1) + uvarint(0) + uvarint(0x7FFFFFFF)),  # tagged field past the end
    (i16(3) + string("g"), i16(0) + i32(7) + uvarint(1) + uvarint(5) + uvarint(0x7FFFFFFF) + b"\x00"),
    (i16(3) + string("g"), i16(0) + i32(7) + uvarint(0xFFFFFFFF)),  # hostile tagged-field count
    (i16(3) + string("g"), i16(0) + i32(7) + uvarint(1) + uvarint(5) + uvarint(1)),  # tagged length but no byte
    (i16(4) + string("g"), i16(0) + uvarint(0)),  # null Topics
    (i16(5) + string("g") + string("m"), i16(0) + compact_string(None) * 2 + compact_string("c") + compact_string("h") + compact_count(0) + compact_string(None) + i32(1) + compact_string(None) + uvarint(1) + uvarint(0) + uvarint(9) + uvarint(1) + i32(1) + compact_count(0) + NO_TAGS),  # tagged size != its value's
]


@pytest.mark.parametrize(("key", "value"), MALFORMED)
def test_malformed(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CoordinatorRecordError) as raised:
        decode_record(key, value)
    assert not isinstance(raised.value, UnknownRecordType)


@settings(max_examples=60)
@given(record=ANY_RECORD)
def test_every_truncation_is_malformed(record: tuple[Any, Any, int]) -> None:
    key, value, version = record
    key_bytes, value_bytes = encode_key(key), encode_value(value, version)
    for cut in range(len(key_bytes)):
        with pytest.raises(CoordinatorRecordError) as raised:
            decode_record(key_bytes[:cut], value_bytes)
        assert not isinstance(raised.value, UnknownRecordType)
    for cut in range(len(value_bytes)):
        with pytest.raises(CoordinatorRecordError) as raised:
            decode_record(key_bytes, value_bytes[:cut])
        assert not isinstance(raised.value, UnknownRecordType)


def _decodes_or_refuses(key: bytes, value: bytes | None) -> None:
    try:
        decode_record(key, value)
    except CoordinatorRecordError:  # UnknownRecordType included
        pass


@given(key=st.binary(max_size=40), value=st.none() | st.binary(max_size=80))
def test_garbage_only_raises_record_errors(key: bytes, value: bytes | None) -> None:
    _decodes_or_refuses(key, value)


def key_of_type(record_type: int) -> bytes:
    if record_type < 2:
        return i16(record_type) + string("g") + string("t") + i32(0)
    return i16(record_type) + string("g") + (string("m") if record_type in (5, 7, 8) else b"")


@given(record_type=st.integers(0, 8), version=st.integers(0, 4), body=st.binary(max_size=80))
def test_garbage_bodies_of_known_types_only_raise_record_errors(record_type: int, version: int, body: bytes) -> None:
    key = key_of_type(record_type)
    assert decode_record(key, None).value is None
    _decodes_or_refuses(key, i16(version) + body)


@given(record=ANY_RECORD, position=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_corrupted_records_only_raise_record_errors(record: tuple[Any, Any, int], position: int, byte: int) -> None:
    key, value, version = record
    value_bytes = bytearray(encode_value(value, version))
    value_bytes[position % len(value_bytes)] = byte
    _decodes_or_refuses(encode_key(key), bytes(value_bytes))
