"""KRaft metadata record codec: round trips, hand-built old versions, malformed input, Kafka's specs."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata.metadata_records import (
    RECORD_TYPES,
    ZERO_UUID,
    BrokerEndpoint,
    BrokerFeature,
    EntityData,
    ConfigRecord,
    Field,
    MetadataRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_metadata_record,
)

METADATA_SPECS = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "metadata"
STRUCTS = {"BrokerEndpoint": BrokerEndpoint, "BrokerFeature": BrokerFeature, "ControllerEndpoint": BrokerEndpoint, "ControllerFeature": BrokerFeature, "EntityData": EntityData}
INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
TOPIC_ID = uuid.UUID("5f1d6c5e-0d3a-4c8e-9a57-6a2b3c4d5e6f")


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact_string(value: str) -> bytes:
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def int32_array(values: list[int]) -> bytes:
    return uvarint(len(values) + 1) + b"".join(struct.pack(">i", v) for v in values)


def value_strategy(kind: str, nullable: bool) -> st.SearchStrategy[Any]:
    if kind.startswith("[]"):
        base: st.SearchStrategy[Any] = st.lists(value_strategy(kind[2:], False), max_size=4).map(tuple)
    elif kind in STRUCTS:
        base = record_strategy(STRUCTS[kind])
    elif kind in INT_RANGES:
        bits = INT_RANGES[kind]
        base = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif kind == "uint16":
        base = st.integers(0, 65535)
    elif kind == "bool":
        base = st.booleans()
    elif kind == "uuid":
        base = st.uuids() | st.just(ZERO_UUID)
    elif kind == "string":
        base = st.text(max_size=12)
    elif kind == "bytes":
        base = st.binary(max_size=24)
    elif kind == "float64":
        base = st.floats(allow_nan=False)
    else:
        raise AssertionError(kind)
    return (base | st.none()) if nullable else base


def record_strategy(cls: type) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{f.name: value_strategy(f.kind, f.nullable) for f in cls.FIELDS})  # type: ignore[attr-defined]


def at_version(record: MetadataRecord, version: int) -> MetadataRecord:
    """The record as a reader of ``version`` sees it: fields that version lacks at their defaults."""
    defaults = {f.name: f.default for f in dataclasses.fields(record) if f.default is not dataclasses.MISSING}  # type: ignore[arg-type]
    return dataclasses.replace(record, **{f.name: defaults[f.name] for f in record.FIELDS if f.since > version})  # type: ignore[type-var]


@pytest.mark.parametrize("cls", list(RECORD_TYPES.values()), ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_record_type_round_trips_at_every_version(cls: type[MetadataRecord], data: st.DataObject) -> None:
    record = data.draw(record_strategy(cls))
    assert decode_metadata_record(record.encode()) == record
    assert decode_metadata_record(memoryview(record.encode())) == record
    for version in range(cls.VERSION + 1):
        old = at_version(record, version)
        assert decode_metadata_record(old.encode(version)) == old


def test_encode_writes_the_frame_and_the_latest_version() -> None:
    value = TopicRecord(name="orders", topic_id=TOPIC_ID).encode()
    assert value == b"\x01\x02\x00" + compact_string("orders") + TOPIC_ID.bytes + b"\x00"
    assert NoOpRecord().encode() == b"\x01\x14\x00\x00"
    assert PartitionRecord(topic_id=TOPIC_ID, replicas=(1,), isr=(1,)).encode()[:3] == b"\x01\x03\x02"


def test_tagged_fields_are_written_only_when_not_default_and_in_tag_order() -> None:
    record = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, directories=(ZERO_UUID,), leader=3, isr=(1, 3))
    value = record.encode()
    body = value[3 + 4 + 16 :]
    assert body[0] == 3  # isr, leader, directories
    assert body[1:3] == b"\x00\x09"  # tag 0, 9 bytes
    leader_at = 3 + 9
    assert body[leader_at : leader_at + 2] == b"\x01\x04" and body[leader_at + 2 : leader_at + 6] == struct.pack(">i", 3)
    assert body[leader_at + 6] == 8  # directories, tag 8, after tags 0 and 1
    bare = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID).encode()
    assert bare.endswith(b"\x00") and len(bare) == 3 + 4 + 16 + 1


def test_decodes_a_hand_built_partition_record_v0() -> None:
    value = (
        b"\x01\x03\x00"
        + struct.pack(">i", 2)
        + TOPIC_ID.bytes
        + int32_array([1, 2])
        + int32_array([1])
        + int32_array([])
        + int32_array([])
        + struct.pack(">iii", 1, 4, 5)
        + b"\x01\x00\x01\x01"  # one tagged field: LeaderRecoveryState (tag 0) = 1
    )
    assert decode_metadata_record(value) == PartitionRecord(
        partition_id=2,
        topic_id=TOPIC_ID,
        replicas=(1, 2),
        isr=(1,),
        leader=1,
        leader_recovery_state=1,
        leader_epoch=4,
        partition_epoch=5,
    )


def test_decodes_a_hand_built_register_broker_record_v0() -> None:
    incarnation = uuid.UUID(int=7)
    endpoint = compact_string("PLAINTEXT") + compact_string("localhost") + struct.pack(">Hh", 9092, 0) + b"\x00"
    value = (
        b"\x01\x00\x00"
        + struct.pack(">i", 1)
        + incarnation.bytes
        + struct.pack(">q", 42)
        + uvarint(2)
        + endpoint
        + uvarint(1)  # no features
        + b"\x00"  # rack null
        + b"\x00"  # not fenced
        + b"\x00"
    )
    assert decode_metadata_record(value) == RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=incarnation,
        broker_epoch=42,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092, security_protocol=0),),
        rack=None,
        fenced=False,
    )


def test_decodes_a_hand_built_partition_change_record_v0_and_skips_unknown_tags() -> None:
    value = (
        b"\x01\x05\x00"
        + struct.pack(">i", 0)
        + TOPIC_ID.bytes
        + b"\x03"
        + b"\x00\x05"
        + int32_array([2])  # tag 0: Isr
        + b"\x01\x04"
        + struct.pack(">i", -1)  # tag 1: Leader = NO_LEADER
        + b"\x1e\x02\xab\xcd"  # tag 30: unknown, skipped
    )
    assert decode_metadata_record(value) == PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(2,), leader=-1)


def test_encoding_an_old_version_refuses_fields_it_cannot_carry() -> None:
    record = PartitionRecord(topic_id=TOPIC_ID, replicas=(1,), isr=(1,), directories=(ZERO_UUID,))
    with pytest.raises(MetadataRecordError, match="directories"):
        record.encode(0)
    with pytest.raises(MetadataRecordError):
        record.encode(3)
    with pytest.raises(MetadataRecordError):
        ConfigRecord(resource_type=300, resource_name="t", name="k", value="v").encode()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"", "malformed"),
        (b"\x00\x02\x00", "frame version"),
        (b"\x01\x63\x00\x00", "unknown metadata record type 99"),
        (b"\x01\x02\x01" + compact_string("t") + TOPIC_ID.bytes + b"\x00", "newer"),
        (b"\x01\x02\x00" + compact_string("t") + TOPIC_ID.bytes + b"\x00\x00", "garbage"),
        (b"\x01\x02\x00" + compact_string("t") + TOPIC_ID.bytes[:5], "malformed"),
        (b"\x01\x02\x00\x00" + TOPIC_ID.bytes + b"\x00", "malformed"),  # null non-nullable string
        (b"\x01\x09\x00" + TOPIC_ID.bytes + b"\x01\x00\x05\x00", "past the end"),
        (b"\x01\x03\x00" + b"\x00" * 4 + TOPIC_ID.bytes + b"\x00", "serialized as null"),
        (
            b"\x01\x03\x00" + b"\x00" * 4 + TOPIC_ID.bytes + int32_array([]) * 4 + b"\x00" * 12 + b"\x01\x00\x02\x01\x00",
            "took 1",
        ),
    ],
)
def test_malformed_values_raise_metadata_record_error(value: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_metadata_record(value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.sampled_from(sorted(RECORD_TYPES)))
def test_garbage_only_ever_raises_metadata_record_error(tail: bytes, api_key: int) -> None:
    for value in (tail, b"\x01" + bytes([api_key]) + b"\x00" + tail):
        try:
            decode_metadata_record(value)
        except MetadataRecordError:
            pass


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_valid_value_is_refused(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from([c for c in RECORD_TYPES.values() if c.FIELDS]))
    value = data.draw(record_strategy(cls)).encode()
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(value[:cut])


# --- Kafka's JSON specs ------------------------------------------------------------


def spec_text(name: str) -> str | None:
    """Kafka 4.4's own spec (common/metadata/ in its kafka-metadata jar) when its jars are cached,
    else the older copy in ../shared/kafka-protocol/metadata; None when neither has the record."""
    from benchmarks.apache_kafka import cached_lib

    lib = cached_lib()
    jar = None if lib is None else next(iter(sorted(lib.glob("kafka-metadata-*.jar"))), None)
    if jar is not None:
        with zipfile.ZipFile(jar) as z:
            try:
                return z.read(f"common/metadata/{name}.json").decode()
            except KeyError:
                return None
    path = METADATA_SPECS / f"{name}.json"
    return path.read_text() if path.is_file() else None


def load_spec(name: str) -> dict[str, Any]:
    text = spec_text(name)
    if text is None:
        pytest.skip(f"no spec of {name} here")
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))
    return json.loads(text)  # type: ignore[no-any-return]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def first_version(versions: str) -> int:
    return int(versions.rstrip("+").split("-")[0])


def implicit_default(kind: str) -> Any:
    if kind.startswith("[]"):
        return ()
    return {"bool": False, "uuid": ZERO_UUID, "string": ""}.get(kind, 0)


def explicit_default(kind: str, text: str) -> Any:
    if text == "null":
        return None
    if kind == "bool":
        return text == "true"
    return int(text)


def check_fields(cls: type, spec_fields: list[dict[str, Any]]) -> None:
    ours: tuple[Field, ...] = cls.FIELDS  # type: ignore[attr-defined]
    assert [f.name for f in ours] == [snake(s["name"]) for s in spec_fields], cls.__name__
    attributes = [f.name for f in dataclasses.fields(cls) if f.name != "record_version"]  # the version to write: not a field
    assert attributes == [f.name for f in ours], f"{cls.__name__}: attribute order"
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for f, s in zip(ours, spec_fields):
        where = f"{cls.__name__}.{f.name}"
        assert f.kind == s["type"], where
        assert f.since == first_version(s["versions"]), where
        assert f.tag == (int(s["tag"]) if "tag" in s else None), where
        if "taggedVersions" in s:
            assert first_version(s["taggedVersions"]) == f.since, where
        assert f.nullable == ("nullableVersions" in s), where
        if f.nullable:
            assert first_version(s["nullableVersions"]) == f.since, where
        if "default" in s:
            assert defaults[f.name] == explicit_default(f.kind, s["default"]), where
        elif f.tag is not None or f.since > 0:
            assert defaults[f.name] == implicit_default(f.kind), where
        if f.kind.startswith("[]") and f.kind[2:] in STRUCTS:
            check_fields(STRUCTS[f.kind[2:]], s["fields"])


@pytest.mark.parametrize("cls", list(RECORD_TYPES.values()), ids=lambda c: c.__name__)
def test_records_agree_with_kafka_specs(cls: type[MetadataRecord]) -> None:
    spec = load_spec(cls.__name__)
    assert spec["type"] == "metadata"
    assert spec["apiKey"] == cls.API_KEY
    assert spec["flexibleVersions"] == "0+"
    assert spec["validVersions"].split("-")[-1] == str(cls.VERSION)
    check_fields(cls, spec["fields"])
