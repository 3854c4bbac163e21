"""KRaft metadata records: the values stored in `__cluster_metadata`.

A record value is ``frame version (uvarint 1) | apiKey (uvarint) | version (uvarint) |
body``, the body in Kafka's flexible encoding (compact strings and arrays, tagged fields).
Each record type below lists its fields as (name, type, first version, tag); one small
codec walks those lists, so adding a record type is adding a list.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

FRAME_VERSION = 1

Spec = tuple[str, str, int, int | None]  # python name, type, first version, tag (None = regular)


class MetadataRecordError(ValueError):
    pass


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Reader:
    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = bytes(buf)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise MetadataRecordError("record truncated")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        result, shift = 0, 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise MetadataRecordError("varint too long")

    def unpack(self, fmt: str) -> Any:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))[0]


_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H", "bool": ">?"}


def _write(kind: str, value: Any, out: bytearray) -> None:
    if kind in _FIXED:
        out += struct.pack(_FIXED[kind], value)
    elif kind == "uuid":
        out += value.bytes
    elif kind in ("string", "string?"):
        if value is None:
            out += _uvarint(0)
        else:
            raw = value.encode()
            out += _uvarint(len(raw) + 1) + raw
    elif kind.startswith("[]"):
        inner = kind[2:].rstrip("?")
        if value is None:
            out += _uvarint(0)
            return
        out += _uvarint(len(value) + 1)
        for item in value:
            if inner in _STRUCTS:
                out += _encode_body(item, _STRUCTS[inner].SPECS, 0)
            else:
                _write(inner, item, out)
    else:
        raise MetadataRecordError(f"unknown field type {kind}")


def _read(kind: str, r: _Reader) -> Any:
    if kind in _FIXED:
        return r.unpack(_FIXED[kind])
    if kind == "uuid":
        return uuid.UUID(bytes=r.take(16))
    if kind in ("string", "string?"):
        n = r.uvarint()
        if n == 0:
            if kind == "string":
                raise MetadataRecordError("null in a non-nullable string")
            return None
        return r.take(n - 1).decode()
    if kind.startswith("[]"):
        inner = kind[2:].rstrip("?")
        n = r.uvarint()
        if n == 0:
            return None if kind.endswith("?") else ()
        if inner in _STRUCTS:
            return tuple(_decode_body(_STRUCTS[inner], r, 0) for _ in range(n - 1))
        return tuple(_read(inner, r) for _ in range(n - 1))
    raise MetadataRecordError(f"unknown field type {kind}")


def _encode_body(obj: Any, specs: list[Spec], version: int) -> bytes:
    out = bytearray()
    tagged: list[tuple[int, bytes]] = []
    for name, kind, since, tag in specs:
        if version < since:
            continue
        value = getattr(obj, name)
        if tag is None:
            _write(kind, value, out)
        elif value != type(obj).__dataclass_fields__[name].default:
            buf = bytearray()
            _write(kind, value, buf)
            tagged.append((tag, bytes(buf)))
    out += _uvarint(len(tagged))
    for tag, buf in tagged:
        out += _uvarint(tag) + _uvarint(len(buf)) + buf
    return bytes(out)


def _decode_body(cls: type, r: _Reader, version: int) -> Any:
    specs: list[Spec] = cls.SPECS  # type: ignore[attr-defined]
    values: dict[str, Any] = {}
    by_tag = {tag: (name, kind) for name, kind, since, tag in specs if tag is not None and version >= since}
    for name, kind, since, tag in specs:
        if tag is None and version >= since:
            values[name] = _read(kind, r)
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        if tag in by_tag:
            name, kind = by_tag[tag]
            values[name] = _read(kind, _Reader(r.take(size)))
        else:
            r.take(size)
    return cls(**values)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    SPECS: ClassVar[list[Spec]] = [("name", "string", 0, None), ("host", "string", 0, None), ("port", "uint16", 0, None), ("security_protocol", "int16", 0, None)]
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    SPECS: ClassVar[list[Spec]] = [("name", "string", 0, None), ("min_supported_version", "int16", 0, None), ("max_supported_version", "int16", 0, None)]
    name: str
    min_supported_version: int
    max_supported_version: int


_STRUCTS: dict[str, type] = {"BrokerEndpoint": BrokerEndpoint, "BrokerFeature": BrokerFeature}


class MetadataRecord:
    API_KEY: ClassVar[int]
    VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    SPECS: ClassVar[list[Spec]]

    def encode(self) -> bytes:
        head = _uvarint(FRAME_VERSION) + _uvarint(self.API_KEY) + _uvarint(self.VERSION)
        return head + _encode_body(self, self.SPECS, self.VERSION)


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 0
    VERSION: ClassVar[int] = 3
    MAX_VERSION: ClassVar[int] = 3
    SPECS: ClassVar[list[Spec]] = [
        ("broker_id", "int32", 0, None),
        ("is_migrating_zk_broker", "bool", 2, None),
        ("incarnation_id", "uuid", 0, None),
        ("broker_epoch", "int64", 0, None),
        ("end_points", "[]BrokerEndpoint", 0, None),
        ("features", "[]BrokerFeature", 0, None),
        ("rack", "string?", 0, None),
        ("fenced", "bool", 0, None),
        ("in_controlled_shutdown", "bool", 1, None),
        ("log_dirs", "[]uuid", 3, 0),
    ]
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    SPECS: ClassVar[list[Spec]] = [("name", "string", 0, None), ("topic_id", "uuid", 0, None)]
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 3
    VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 2
    SPECS: ClassVar[list[Spec]] = [
        ("partition_id", "int32", 0, None),
        ("topic_id", "uuid", 0, None),
        ("replicas", "[]int32", 0, None),
        ("isr", "[]int32", 0, None),
        ("removing_replicas", "[]int32", 0, None),
        ("adding_replicas", "[]int32", 0, None),
        ("leader", "int32", 0, None),
        ("leader_recovery_state", "int8", 0, 0),
        ("leader_epoch", "int32", 0, None),
        ("partition_epoch", "int32", 0, None),
        ("directories", "[]uuid", 1, None),
        ("eligible_leader_replicas", "[]int32?", 2, 1),
        ("last_known_elr", "[]int32?", 2, 2),
    ]
    partition_id: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConfigRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    SPECS: ClassVar[list[Spec]] = [
        ("resource_type", "int8", 0, None),
        ("resource_name", "string", 0, None),
        ("name", "string", 0, None),
        ("value", "string?", 0, None),
    ]
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    SPECS: ClassVar[list[Spec]] = [("topic_id", "uuid", 0, None)]
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 12
    VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    SPECS: ClassVar[list[Spec]] = [("name", "string", 0, None), ("feature_level", "int16", 0, None)]
    name: str
    feature_level: int


RECORD_TYPES: dict[int, type[MetadataRecord]] = {
    cls.API_KEY: cls for cls in (RegisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord, FeatureLevelRecord)
}


def decode_metadata_record(value: bytes | memoryview) -> MetadataRecord:
    r = _Reader(value)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataRecordError(f"unknown metadata frame version {frame}")
    api_key = r.uvarint()
    version = r.uvarint()
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    if version > cls.MAX_VERSION:
        raise MetadataRecordError(f"{cls.__name__} version {version} is newer than {cls.MAX_VERSION}")
    record = _decode_body(cls, r, version)
    if r.pos != len(r.buf):
        raise MetadataRecordError(f"{len(r.buf) - r.pos} trailing bytes after {cls.__name__}")
    return record  # type: ignore[no-any-return]


__all__ = [
    "BrokerEndpoint",
    "BrokerFeature",
    "ConfigRecord",
    "FeatureLevelRecord",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionRecord",
    "RECORD_TYPES",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicRecord",
    "decode_metadata_record",
]
