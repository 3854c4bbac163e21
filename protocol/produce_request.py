"""ProduceRequest v3–v11 read straight from the frame, records as views into it.

kio copies each partition's records into a new ``bytes`` object, and the broker then needs a
mutable copy to rewrite baseOffset and the leader epoch in place: two copies of every
produced byte before the one ``pwrite``. This reader returns writable memoryviews over the
request frame instead, which the append path patches and writes as they are. Every field
length is checked against the frame, so a malformed request raises ``InvalidRequest`` and
never reads out of bounds. ``tests/unit/test_produce_request.py`` checks it against kio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.headers import InvalidRequest, read_uvarint, skip_tagged_fields

FIRST_FLEXIBLE_VERSION = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


class _Reader:
    __slots__ = ("buf", "flexible", "pos", "end")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.flexible = flexible

    def need(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise InvalidRequest(f"produce request: {what} of {n} bytes past the end of the frame")
        self.pos = start + n
        return start

    def length(self, legacy: struct.Struct, what: str) -> int:
        """A length or count; -1 means null. Flexible versions store it plus one as a uvarint."""
        if self.flexible:
            value, self.pos = read_uvarint(self.buf, self.pos)
            return value - 1
        return int(legacy.unpack_from(self.buf, self.need(legacy.size, what))[0])

    def string(self, nullable: bool, what: str) -> str | None:
        size = self.length(_I16, what)
        if size < 0:
            if nullable:
                return None
            raise InvalidRequest(f"produce request: null {what}")
        start = self.need(size, what)
        try:
            return str(self.buf[start : start + size], "utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequest(f"produce request: {what} is not UTF-8") from e

    def count(self, what: str, min_item_size: int) -> int:
        n = self.length(_I32, what)
        if n < 0:
            # Kafka rejects null arrays in Produce too.
            raise InvalidRequest(f"produce request: null {what}")
        if n * min_item_size > self.end - self.pos:
            raise InvalidRequest(f"produce request: {n} {what} cannot fit in the frame")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.buf, self.pos)


def read_produce_request(frame: bytearray | memoryview, offset: int, version: int) -> ProduceRequest:
    """Decode the body that starts at ``offset``; ``frame`` must be writable for in-place rewrites."""
    r = _Reader(memoryview(frame), offset, version >= FIRST_FLEXIBLE_VERSION)
    buf = r.buf
    transactional_id = r.string(True, "transactional id")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, r.need(_ACKS_TIMEOUT.size, "acks and timeout"))
    topics = []
    for _ in range(r.count("topics", 2)):
        name = r.string(False, "topic name")
        assert name is not None
        parts = []
        for _ in range(r.count("partitions", 5)):
            (index,) = _I32.unpack_from(buf, r.need(4, "partition index"))
            size = r.length(_I32, "records")
            records = None
            if size >= 0:
                start = r.need(size, "records")
                records = buf[start : start + size]
            r.tagged_fields()
            parts.append(PartitionProduceData(index, records))
        r.tagged_fields()
        topics.append(TopicProduceData(name, tuple(parts)))
    r.tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))
