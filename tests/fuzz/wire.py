"""Request encoding for the fuzzer, written apart from protocol/ so that a bug there is not copied.

``encode`` walks a kio entity and writes it as Kafka does, and it also returns a map of where
every length prefix, fixed-size field and tagged-field section landed: the mutator aims its
hostile lengths, nulls and tagged garbage at those places instead of at random bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field

from protocol.primitives import uvarint

FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
    "timedelta_i32": struct.Struct(">i"),
    "timedelta_i64": struct.Struct(">q"),
    "datetime_i64": struct.Struct(">q"),
}
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Prefix:
    """A length or count prefix: ``kind`` is array, string, bytes, records or struct (a nullable struct's marker)."""

    pos: int
    size: int  # bytes the prefix takes
    kind: str
    flexible: bool
    nullable: bool
    # Where the sized value (a string's bytes, a batch) starts and ends; an array's elements are not tracked.
    value_end: int


@dataclass(frozen=True, slots=True)
class Fixed:
    pos: int
    size: int
    kafka_type: str


@dataclass(frozen=True, slots=True)
class TagSection:
    """A flexible struct's tagged fields: the count at ``pos``, the section ends at ``end``."""

    pos: int
    end: int


@dataclass
class Layout:
    prefixes: list[Prefix] = dataclasses.field(default_factory=list)
    fixed: list[Fixed] = dataclasses.field(default_factory=list)
    tag_sections: list[TagSection] = dataclasses.field(default_factory=list)

    def shifted(self, by: int) -> "Layout":
        return Layout(
            [dataclasses.replace(p, pos=p.pos + by, value_end=p.value_end + by) for p in self.prefixes],
            [dataclasses.replace(f, pos=f.pos + by) for f in self.fixed],
            [TagSection(t.pos + by, t.end + by) for t in self.tag_sections],
        )


def length_prefix(n: int, flexible: bool, wide: bool) -> bytes:
    """A length or count (-1: null) as a version writes it; ``n`` may be hostile (below -1, huge)."""
    if flexible:
        return uvarint((n + 1) & 0xFFFFFFFF)
    return I32.pack(n) if wide else I16.pack(n)


def allows_none(annotation: Any) -> bool:
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def element_type(annotation: Any) -> Any:
    if allows_none(annotation):
        (annotation,) = (a for a in get_args(annotation) if a is not NoneType)
    return get_args(annotation)[0]


def wire_fields(entity: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(entity) if "kafka_type" in f.metadata or isinstance(classify_field(f), (EntityField, EntityTupleField))]


def field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f"tagged field {f.name} without a default"
    return f.default_factory()


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.layout = Layout()

    def primitive(self, kafka_type: str, value: Any, flexible: bool, nullable: bool) -> None:
        out = self.out
        if kafka_type in FIXED:
            if kafka_type.startswith("timedelta"):
                value = int(value / datetime.timedelta(milliseconds=1))
            elif kafka_type == "datetime_i64":
                value = -1 if value is None else int(value.timestamp() * 1000)
            self.layout.fixed.append(Fixed(len(out), FIXED[kafka_type].size, kafka_type))
            out += FIXED[kafka_type].pack(value)
            return
        if kafka_type == "uuid":
            self.layout.fixed.append(Fixed(len(out), 16, kafka_type))
            out += bytes(16) if value is None else value.bytes
            return
        if kafka_type == "string":
            data = None if value is None else value.encode()
            wide, kind = False, "string"
        elif kafka_type in ("bytes", "records"):
            data = None if value is None else bytes(value)
            wide, kind = True, kafka_type
        else:
            raise ValueError(f"unknown kafka type {kafka_type}")
        pos = len(out)
        out += length_prefix(-1 if data is None else len(data), flexible, wide)
        size = len(out) - pos
        if data is not None:
            out += data
        self.layout.prefixes.append(Prefix(pos, size, kind, flexible, nullable, len(out)))

    def array_count(self, n: int | None, flexible: bool, nullable: bool) -> None:
        pos = len(self.out)
        self.out += length_prefix(-1 if n is None else n, flexible, wide=True)
        self.layout.prefixes.append(Prefix(pos, len(self.out) - pos, "array", flexible, nullable, len(self.out)))

    def field(self, f: dataclasses.Field[Any], value: Any, flexible: bool) -> None:
        kind = classify_field(f)
        nullable = allows_none(f.type)
        if isinstance(kind, PrimitiveField):
            self.primitive(f.metadata["kafka_type"], value, flexible, nullable)
        elif isinstance(kind, PrimitiveTupleField):
            self.array_count(None if value is None else len(value), flexible, nullable)
            item_nullable = allows_none(element_type(f.type))
            for item in value or ():
                self.primitive(f.metadata["kafka_type"], item, flexible, item_nullable)
        elif isinstance(kind, EntityField):
            if nullable and "tag" not in f.metadata:
                pos = len(self.out)
                self.out += b"\xff" if value is None else b"\x01"
                self.layout.prefixes.append(Prefix(pos, 1, "struct", flexible, True, pos + 1))
                if value is None:
                    return
            self.entity(value)
        else:
            assert isinstance(kind, EntityTupleField)
            self.array_count(None if value is None else len(value), flexible, nullable)
            for item in value or ():
                self.entity(item)

    def entity(self, entity: Any) -> None:
        cls = type(entity)
        flexible = bool(cls.__flexible__)
        tagged: list[tuple[int, dataclasses.Field[Any], Any]] = []
        for f in wire_fields(cls):
            value = getattr(entity, f.name)
            if "tag" in f.metadata:
                if value != field_default(f):
                    tagged.append((f.metadata["tag"], f, value))
                continue
            self.field(f, value, flexible)
        if not flexible:
            return
        start = len(self.out)
        self.out += uvarint(len(tagged))
        for tag, f, value in sorted(tagged, key=lambda t: t[0]):
            inner = _Writer()
            inner.field(f, value, flexible)
            self.out += uvarint(tag) + uvarint(len(inner.out))
            shift = len(self.out)
            self.out += inner.out
            nested = inner.layout.shifted(shift)
            self.layout.prefixes += nested.prefixes
            self.layout.fixed += nested.fixed
            self.layout.tag_sections += nested.tag_sections
        self.layout.tag_sections.append(TagSection(start, len(self.out)))


def encode(entity: Any) -> tuple[bytes, Layout]:
    """The entity's body bytes and where its fields are."""
    w = _Writer()
    w.entity(entity)
    return bytes(w.out), w.layout


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool) -> bytes:
    """Request header v1, or v2 (v1 plus an empty tagged-field section) for a flexible version."""
    out = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        out += I16.pack(-1)
    else:
        data = client_id.encode()
        out += I16.pack(len(data)) + data
    return out + (b"\x00" if flexible else b"")


def size_prefixed(payload: bytes) -> bytes:
    return I32.pack(len(payload)) + payload
