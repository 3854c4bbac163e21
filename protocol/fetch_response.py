"""FetchResponse v4–v17, encoded around file regions so record bytes never enter Python.

kio would need the records as ``bytes``; here each partition's records stay whatever the
log handed us (a region of a segment file, sent later with ``sendfile``), and only the
framing around them is built in Python.
"""

from __future__ import annotations

import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from kio.serial.writers import write_unsigned_varint

from protocol.frame import encode_size
from protocol.headers import response_header

FIRST_FLEXIBLE = 12


class Region(Protocol):
    """Anything with a length whose bytes the transport sends itself (a file region)."""

    @property
    def length(self) -> int: ...


Chunk = bytes | bytearray | Region


@dataclass(slots=True)
class FetchPartitionResult:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: list[Chunk] = field(default_factory=list)

    @property
    def records_size(self) -> int:
        return sum(len(r) if isinstance(r, (bytes, bytearray)) else r.length for r in self.records)


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[FetchPartitionResult]


def _uvarint(value: int) -> bytes:
    out = io.BytesIO()
    write_unsigned_varint(out, value)
    return out.getvalue()


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else struct.pack(">i", n)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[FetchTopicResult],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> list[Chunk]:
    """The whole response frame as chunks: bytes to write and regions to sendfile."""
    flexible = version >= FIRST_FLEXIBLE
    chunks: list[Chunk] = []
    head = bytearray(response_header(correlation_id, 1 if flexible else 0))
    head += struct.pack(">i", throttle_time_ms)
    if version >= 7:
        head += struct.pack(">hi", error_code, session_id)
    head += _array_len(len(topics), flexible)
    for topic in topics:
        if version >= 13:
            head += topic.topic_id.bytes
        else:
            head += _string(topic.name, flexible)
        head += _array_len(len(topic.partitions), flexible)
        for p in topic.partitions:
            head += struct.pack(">ihqq", p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                head += struct.pack(">q", p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                head += _uvarint(0) if flexible else struct.pack(">i", -1)
            else:
                head += _array_len(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    head += struct.pack(">qq", producer_id, first_offset)
                    if flexible:
                        head.append(0)
            if version >= 11:
                head += struct.pack(">i", p.preferred_read_replica)
            size = p.records_size
            head += _uvarint(size + 1) if flexible else struct.pack(">i", size)
            for r in p.records:
                if isinstance(r, (bytes, bytearray)):
                    head += r
                else:
                    chunks.append(bytes(head))
                    chunks.append(r)
                    head = bytearray()
            if flexible:
                head.append(0)
        if flexible:
            head.append(0)
    if flexible:
        head.append(0)
    chunks.append(bytes(head))
    total = sum(len(c) if isinstance(c, (bytes, bytearray)) else c.length for c in chunks)
    chunks.insert(0, encode_size(total))
    return chunks
