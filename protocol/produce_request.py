"""ProduceRequest v3–v13 read straight from the frame, records as views into it.

kio copies each partition's records into a new ``bytes`` object, and the broker then needs a
mutable copy to rewrite baseOffset and the leader epoch in place: two copies of every
produced byte before the one ``pwrite``. This reader returns writable memoryviews over the
request frame instead, which the append path patches and writes as they are. Every field
length is checked against the frame, so a malformed request raises ``InvalidRequest`` and
never reads out of bounds. ``tests/unit/test_produce_request.py`` checks it against kio.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from protocol.body_reader import I32, BodyReader

FIRST_FLEXIBLE_VERSION = 9
# KIP-516: from v13 a topic is named by its topic ID, which the handler resolves.
FIRST_TOPIC_ID_VERSION = 13
ZERO_UUID = bytes(16)

_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    # v13 requests carry no name: "" until the handler resolves ``topic_id``, None when no topic has that ID.
    name: str | None
    partition_data: tuple[PartitionProduceData, ...]
    # None below v13, and for the zero UUID.
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def read_produce_request(frame: bytearray | memoryview, offset: int, version: int) -> ProduceRequest:
    """Decode the body that starts at ``offset``; ``frame`` must be writable for in-place rewrites."""
    r = BodyReader(memoryview(frame), offset, version >= FIRST_FLEXIBLE_VERSION, "produce")
    buf = r.buf
    transactional_id = r.string(True, "transactional id")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, r.need(_ACKS_TIMEOUT.size, "acks and timeout"))
    by_id = version >= FIRST_TOPIC_ID_VERSION
    topics = []
    for _ in range(r.count("topics", 2)):
        topic_id = None
        if by_id:
            start = r.need(16, "topic id")
            raw = bytes(buf[start : start + 16])
            name: str | None = ""
            if raw != ZERO_UUID:
                topic_id = uuid.UUID(bytes=raw)
        else:
            name = r.string(False, "topic name")
            assert name is not None
        parts = []
        for _ in range(r.count("partitions", 5)):
            (index,) = I32.unpack_from(buf, r.need(4, "partition index"))
            size = r.length(I32, "records")
            records = None
            if size >= 0:
                start = r.need(size, "records")
                records = buf[start : start + size]
            r.tagged_fields()
            parts.append(PartitionProduceData(index, records))
        r.tagged_fields()
        topics.append(TopicProduceData(name, tuple(parts), topic_id))
    r.tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))
