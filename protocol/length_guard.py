"""Check every length prefix of a request body before kio decodes it, nulls included.

kio's native reader reserves memory for an array's declared count before it reads a
single element; a 13-byte Metadata request declaring 2^32 topics makes it ask for 32 GiB
and the allocation failure aborts the whole process, which no exception handler can
catch. So each body is first walked field by field (its layout taken from the same kio
entity classes) and refused when an array, string or bytes field claims more than the
bytes left. The walk reads only length prefixes and skips over everything else: it costs
O(fields), never O(bytes), and allocates nothing.

It also refuses null (length -1) where the message spec allows none: kio reads a null
array into None whatever the spec says, and a handler iterating ``request.topics`` then
fails with a TypeError instead of the client getting its connection closed, as Kafka's
generated readers do ("non-nullable field ... was serialized as null").
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from types import NoneType, UnionType
from typing import Any, Callable, Union, get_args, get_origin

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field, is_optional
from kio.serial.readers import compact_array_reader, legacy_array_reader, read_compact_array_length, read_legacy_array_length

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "error_code": 2,  # responses only: the node-to-node client checks answers too
    "uint16": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# (buffer, position, end) -> position after the field; raises LengthError.
Step = Callable[[memoryview, int, int], int]


class LengthError(ValueError):
    pass


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    for _ in range(5):
        if pos >= end:
            raise LengthError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise LengthError("varint longer than 5 bytes")


def _length(buf: memoryview, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix: compact (uvarint of length + 1) or int16/int32; -1 means null."""
    if flexible:
        raw, pos = _uvarint(buf, pos, end)
        return raw - 1, pos
    size = _I32.size if wide else _I16.size
    if pos + size > end:
        raise LengthError("truncated length")
    (value,) = (_I32 if wide else _I16).unpack_from(buf, pos)
    return value, pos + size


def _fixed(size: int) -> Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        if pos + size > end:
            raise LengthError("body ends inside a field")
        return pos + size

    return step


def _null(what: str) -> LengthError:
    return LengthError(f"null {what} where the spec allows none")


def _sized(flexible: bool, wide: bool, nullable: bool) -> Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        length, pos = _length(buf, pos, end, flexible, wide)
        if length == -1 and not nullable:
            raise _null("string or bytes")
        if length < -1 or pos + max(length, 0) > end:
            raise LengthError(f"length {length} exceeds the {end - pos} bytes left")
        return pos + max(length, 0)

    return step


def _array(element: Step | int, flexible: bool, nullable: bool) -> Step:
    """An array; elements of a fixed size are skipped over in one step."""
    min_size = element if isinstance(element, int) else 1

    def step(buf: memoryview, pos: int, end: int) -> int:
        count, pos = _length(buf, pos, end, flexible, wide=True)
        if count == -1 and not nullable:
            raise _null("array")
        if count < -1 or count * max(min_size, 1) > end - pos:
            raise LengthError(f"array of {count} elements cannot fit in the {end - pos} bytes left")
        if isinstance(element, int):
            return pos + max(count, 0) * element
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return step


def _nullable_struct(struct_step: Step | int) -> Step:
    """A nullable struct (KIP-893, DescribeTopicPartitions' cursor): an int8 marker, -1 for null, then the struct."""
    inner = _fixed(struct_step) if isinstance(struct_step, int) else struct_step

    def step(buf: memoryview, pos: int, end: int) -> int:
        if pos >= end:
            raise LengthError("body ends inside a field")
        marker = buf[pos]
        return pos + 1 if marker == 0xFF else inner(buf, pos + 1, end)

    return step


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> Step | int:
    """A fixed-size type is its size in bytes; a sized one a step reading its length prefix."""
    if kafka_type in _FIXED_SIZES:
        return _FIXED_SIZES[kafka_type]
    if kafka_type == "string":
        return _sized(flexible, wide=False, nullable=nullable)
    if kafka_type in ("bytes", "records"):
        return _sized(flexible, wide=True, nullable=nullable)
    raise LengthError(f"unknown kafka type {kafka_type}")


def _allows_none(annotation: Any) -> bool:
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _element_type(annotation: Any) -> Any:
    """``X`` of ``tuple[X, ...]`` or ``tuple[X, ...] | None``."""
    if _allows_none(annotation):
        (annotation,) = (arg for arg in get_args(annotation) if arg is not NoneType)
    return get_args(annotation)[0]


def _field_step(field: dataclasses.Field[Any], flexible: bool) -> Step | int:
    kind = classify_field(field)
    # kio's annotations carry the spec's nullableVersions for this version: ``X | None`` is nullable.
    nullable = _allows_none(field.type)
    if isinstance(kind, PrimitiveField):
        return _primitive(field.metadata["kafka_type"], flexible, nullable)
    if isinstance(kind, PrimitiveTupleField):
        element = _primitive(field.metadata["kafka_type"], flexible, _allows_none(_element_type(field.type)))
        return _array(element, flexible, nullable)
    if isinstance(kind, EntityField):
        if is_optional(field) and "tag" not in field.metadata:
            return _nullable_struct(entity_step(kind.type_))
        return entity_step(kind.type_)
    assert isinstance(kind, EntityTupleField)
    return _array(entity_step(kind.type_), flexible, nullable)


def _is_wire_field(field: dataclasses.Field[Any]) -> bool:
    return "kafka_type" in field.metadata or isinstance(classify_field(field), (EntityField, EntityTupleField))


@cache
def entity_step(entity: type) -> Step | int:
    """The walk of one kio entity class (one message version), compiled once: runs of
    fixed-size fields merge into one bounds check, and a wholly fixed-size, non-flexible
    entity is just its size."""
    flexible = bool(entity.__flexible__)  # type: ignore[attr-defined]
    regular: list[Step | int] = []
    tagged: dict[int, Step | int] = {}
    for field in dataclasses.fields(entity):
        if not _is_wire_field(field):
            continue
        step = _field_step(field, flexible)
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[tag] = step
        elif isinstance(step, int) and regular and isinstance(regular[-1], int):
            regular[-1] += step
        else:
            regular.append(step)
    if not flexible and all(isinstance(step, int) for step in regular):
        return sum(regular)  # type: ignore[arg-type]
    steps = [_fixed(step) if isinstance(step, int) else step for step in regular]
    tag_steps = {tag: _fixed(step) if isinstance(step, int) else step for tag, step in tagged.items()}

    def walk(buf: memoryview, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise LengthError(f"{count} tagged fields cannot fit in the {end - pos} bytes left")
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                if pos + size > end:
                    raise LengthError(f"tagged field of {size} bytes exceeds the {end - pos} bytes left")
                known = tag_steps.get(tag)
                if known is not None:
                    known(buf, pos, pos + size)
                pos += size
        return pos

    return walk


def check_lengths(entity: type, buf: memoryview, offset: int) -> None:
    """Raise LengthError if ``buf[offset:]`` claims more bytes anywhere than it holds."""
    step = entity_step(entity)
    if isinstance(step, int):
        if offset + step > len(buf):
            raise LengthError("body ends inside a field")
    else:
        step(buf, offset, len(buf))


def bounded_array_reader(item_reader: Callable[[Any, int], tuple[Any, int]], flexible: bool) -> Callable[[Any, int], tuple[Any, int]]:
    """kio's array reader behind a count check, for the record codecs that drive kio field by
    field (metadata and coordinator records): every item takes at least a byte, so a count
    larger than the bytes left is refused before kio reserves room for it."""
    read_items = compact_array_reader(item_reader) if flexible else legacy_array_reader(item_reader)
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        length, _ = read_length(buf, offset)
        if length is not None and length > len(buf) - offset:
            raise LengthError(f"array of {length} elements cannot fit in the {len(buf) - offset} bytes left")
        return read_items(buf, offset)  # type: ignore[no-any-return]

    return read
