"""Valid requests for every API key and version, built from kio's entities (the message specs).

Values come from a ``random.Random`` so that a seed replays a request byte for byte. They are
mostly plausible (the fuzz topics, small partition indexes, short timeouts, real record
batches) so that valid requests reach deep into the handlers, and sometimes extreme (limits
of each integer type, long and non-ASCII strings).
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import random
import struct
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

import crc32c
import lz4.frame
import snappy
import zstandard
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field

from protocol.api_keys import ApiRange, request_schema
from protocol.records import encode_varint
from tests.fuzz.wire import Layout, allows_none, element_type, encode, field_default, wire_fields

_LIMITS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "timedelta_i32": (-(2**31), 2**31 - 1),
    # kio reads an int64 of milliseconds into a timedelta through int64 microseconds: past about
    # 2**53 ms it is a decode error (a connection closed where Kafka would accept the value).
    "timedelta_i64": (-(2**53), 2**53),
}
# Fields that make a broker wait (long polls, rebalances, acks=all): kept short so that a burst
# of valid requests is answered quickly; the mutator still makes them anything.
_WAITS = ("timeout", "max_wait", "rebalance", "session_timeout", "delay")
_STRING_POOL = ("", "a", "fuzz", "consumer", "range", "cooperative-sticky", "PLAINTEXT", "cleanup.policy", "retention.ms", "compact", "1", "ü∂", "x" * 300)
_GROUPS = ("fuzz-group", "fuzz-group-2", "")


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    version: int
    entity: Any
    body: bytes
    layout: Layout


@cache
def _fields(entity: type) -> list[dataclasses.Field[Any]]:
    return wire_fields(entity)


def record_batch(rng: random.Random, count: int | None = None, codec: int | None = None) -> bytes:
    """A valid v2 batch of 1-3 records (sometimes compressed), built by hand with crc32c."""
    n = rng.randint(1, 3) if count is None else count
    records = bytearray()
    for i in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 8))
        value = rng.randbytes(rng.randint(0, 40))
        body = b"\x00" + encode_varint(i) + encode_varint(i) + _bytes_field(key) + _bytes_field(value) + encode_varint(0)
        records += encode_varint(len(body)) + body
    codec = rng.choice((0, 0, 0, 1, 2, 3, 4)) if codec is None else codec
    payload = _compress(codec, bytes(records))
    now = 1_700_000_000_000 + rng.randint(0, 10**9)
    after_crc = struct.pack(">hiqqqhii", codec, n - 1, now, now + n - 1, -1, -1, -1, n) + payload
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        return snappy.compress(data)
    if codec == 3:
        return bytes(lz4.frame.compress(data))
    if codec == 4:
        return zstandard.ZstdCompressor().compress(data)
    return data


def _bytes_field(data: bytes | None) -> bytes:
    return encode_varint(-1) if data is None else encode_varint(len(data)) + data


class RequestGenerator:
    """``request(api_key, version)``: a valid request of that version, from ``rng``."""

    def __init__(self, rng: random.Random, topics: tuple[str, ...]) -> None:
        self.rng = rng
        self.topics = topics

    def request(self, api_key: int, version: int) -> Request:
        entity = self.entity(request_schema(api_key, version))
        body, layout = encode(entity)
        return Request(api_key, version, entity, body, layout)

    def pick(self, apis: dict[int, ApiRange]) -> tuple[int, int]:
        r = apis[self.rng.choice(sorted(apis))]
        return int(r.key), self.rng.randint(r.min_version, r.max_version)

    def entity(self, cls: type) -> Any:
        values = {}
        for f in _fields(cls):
            if "tag" in f.metadata and self.rng.random() < 0.7:
                values[f.name] = field_default(f)
            else:
                values[f.name] = self.value(f)
        return cls(**values)

    def value(self, f: dataclasses.Field[Any]) -> Any:
        rng = self.rng
        kind = classify_field(f)
        nullable = allows_none(f.type)
        if nullable and rng.random() < 0.1:
            return None
        if isinstance(kind, PrimitiveField):
            return self.primitive(f.name, f.metadata["kafka_type"], nullable)
        if isinstance(kind, PrimitiveTupleField):
            item_nullable = allows_none(element_type(f.type))
            return tuple(self.primitive(f.name, f.metadata["kafka_type"], item_nullable) for _ in range(self.count()))
        if isinstance(kind, EntityField):
            return self.entity(kind.type_)
        assert isinstance(kind, EntityTupleField)
        return tuple(self.entity(kind.type_) for _ in range(self.count()))

    def count(self) -> int:
        return self.rng.choice((0, 1, 1, 1, 2, 3))

    def primitive(self, name: str, kafka_type: str, nullable: bool) -> Any:
        rng = self.rng
        if kafka_type == "bool":
            return rng.random() < 0.5
        if kafka_type == "float64":
            return rng.choice((0.0, 1.5, -1.0, 1e300))
        if kafka_type == "uuid":
            return rng.choice((None, uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=1)))
        if kafka_type == "records":
            return record_batch(rng) if not nullable or rng.random() < 0.95 else None
        if kafka_type == "bytes":
            return rng.randbytes(rng.choice((0, 1, 8, 24)))
        if kafka_type == "string":
            return self.string(name)
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2**41) / 1000, datetime.timezone.utc)
        value = self.integer(name, kafka_type)
        if kafka_type.startswith("timedelta"):
            return datetime.timedelta(milliseconds=value)
        return value

    def string(self, name: str) -> str:
        rng = self.rng
        if "topic" in name or name == "name":
            return rng.choice(self.topics) if rng.random() < 0.8 else rng.choice(_STRING_POOL)
        if "group" in name:
            return rng.choice(_GROUPS)
        return rng.choice(_STRING_POOL) if rng.random() < 0.8 else "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 12)))

    def integer(self, name: str, kafka_type: str) -> int:
        rng = self.rng
        low, high = _LIMITS[kafka_type]
        if any(word in name for word in _WAITS):
            return rng.choice((0, 10, 100))
        if name == "acks":
            return rng.choice((-1, 0, 1))
        roll = rng.random()
        if roll < 0.6:
            return max(low, min(high, rng.choice((0, 0, 1, 2, -1))))
        if roll < 0.85:
            return max(low, min(high, rng.randint(-5, 100)))
        if roll < 0.95:
            return rng.choice((low, high, low + 1, high - 1))
        return rng.randint(low, high)
