"""FetchResponse v4–v17, encoded around file regions so record bytes never enter Python.

kio would need the records as ``bytes``; here each partition's records stay whatever the
log handed us (a region of a segment file, sent later with ``sendfile``), and only the
framing around them is built in Python. ``encode_response_chunks`` frames any other kio
answer the same way (ShareFetch): kio writes it, and a ``SplicedRecords`` value in a records
field is spliced in as its regions.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.serial import entity_writer

from protocol.api_keys import response_header_version
from protocol.headers import response_header
from protocol.primitives import array_length, current_leader_field, node_endpoints_field, string, uvarint

FIRST_FLEXIBLE = 12
FIRST_LEADER_HINT_VERSION = 16


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
    # KIP-320, tagged field 0 from v12: (epoch, end offset) where a follower's log diverged.
    diverging_epoch: tuple[int, int] | None = None
    # KIP-951, tagged field 1 from v12 (clients read it from v16): (leader id, leader epoch) with
    # NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH.
    current_leader: tuple[int, int] | None = None

    @property
    def records_size(self) -> int:
        return chunks_size(self.records)


def chunks_size(chunks: Iterable[Chunk]) -> int:
    return sum(len(c) if isinstance(c, (bytes, bytearray)) else c.length for c in chunks)


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[FetchPartitionResult]


_I16_I32 = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
# Tag 0, 13 bytes: EpochEndOffset (epoch, end offset) and its own empty tagged fields.
_DIVERGING_EPOCH = struct.Struct(">BBiqB")


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[FetchTopicResult],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
) -> list[Chunk]:
    """The whole response frame as chunks: bytes to write and regions to sendfile.

    The frame size shares the first chunk with the header, and all the bytes between two
    regions form one chunk: every chunk is a socket write (and, with TCP_NODELAY, a packet
    of its own), so a one-region response costs three writes, not four.
    """
    flexible = version >= FIRST_FLEXIBLE
    chunks: list[Chunk] = []
    # Room for the frame size, filled in once the total is known.
    frame_start = head = bytearray(_I32.size)
    head += response_header(correlation_id, 1 if flexible else 0)
    head += _I32.pack(throttle_time_ms)
    if version >= 7:
        head += _I16_I32.pack(error_code, session_id)
    head += array_length(len(topics), flexible)
    regions_size = 0
    for topic in topics:
        if version >= 13:
            head += topic.topic_id.bytes
        else:
            head += string(topic.name, flexible)
        head += array_length(len(topic.partitions), flexible)
        for p in topic.partitions:
            head += _PARTITION_HEAD.pack(
                p.partition, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                head += uvarint(0) if flexible else _I32.pack(-1)
            else:
                head += array_length(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head.append(0)
            if version >= 11:
                head += _I32.pack(p.preferred_read_replica)
            size = p.records_size
            head += uvarint(size + 1) if flexible else _I32.pack(size)
            head, spliced = _splice(chunks, head, p.records)
            regions_size += spliced
            if flexible:
                tagged: list[bytes] = []
                if p.diverging_epoch is not None:
                    tagged.append(_DIVERGING_EPOCH.pack(0, _DIVERGING_EPOCH.size - 2, p.diverging_epoch[0], p.diverging_epoch[1], 0))
                if p.current_leader is not None and version >= FIRST_LEADER_HINT_VERSION:
                    tagged.append(current_leader_field(1, *p.current_leader))
                head += uvarint(len(tagged))
                for f in tagged:
                    head += f
        if flexible:
            head.append(0)
    if version >= FIRST_LEADER_HINT_VERSION and node_endpoints:
        head.append(1)
        head += node_endpoints_field(node_endpoints)
    elif flexible:
        head.append(0)
    return _closed(chunks, head, frame_start, regions_size)


def _splice(chunks: list[Chunk], head: bytearray, records: Iterable[Chunk]) -> tuple[bytearray, int]:
    """``records`` after ``head``: bytes copied into it, each region a chunk of its own between
    two heads. Returns the head to go on writing into and the size of the regions."""
    regions_size = 0
    for r in records:
        if isinstance(r, (bytes, bytearray)):
            head += r
        else:
            chunks.append(head)
            chunks.append(r)
            regions_size += r.length
            head = bytearray()
    return head, regions_size


def _closed(chunks: list[Chunk], head: bytearray, frame_start: bytearray, regions_size: int) -> list[Chunk]:
    """The frame's chunks with the last head, its size written into ``frame_start``'s first four bytes."""
    chunks.append(head)
    written = sum(len(c) for c in chunks if isinstance(c, bytearray))
    _I32.pack_into(frame_start, 0, written + regions_size - _I32.size)
    return chunks


class SplicedRecords:
    """A records field of a kio entity whose bytes are not copied into the frame: regions go out
    with sendfile (copied on TLS listeners), bytes are written in place."""

    __slots__ = ("chunks", "_size")

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = chunks
        self._size = chunks_size(chunks)

    def __len__(self) -> int:
        # kio writes the length prefix from len(), then the value with the buffer's write.
        return self._size


class _FrameWriter:
    """kio's output buffer for a frame of chunks."""

    __slots__ = ("chunks", "head", "regions_size")

    def __init__(self, head: bytearray) -> None:
        self.chunks: list[Chunk] = []
        self.head = head
        self.regions_size = 0

    def write(self, data: bytes | SplicedRecords) -> int:
        if isinstance(data, SplicedRecords):
            self.head, spliced = _splice(self.chunks, self.head, data.chunks)
            self.regions_size += spliced
        else:
            self.head += data
        return len(data)


def encode_response_chunks(api_key: int, version: int, correlation_id: int, body: Any) -> list[Chunk]:
    """A kio response's whole frame as chunks, its ``SplicedRecords`` fields spliced in."""
    frame_start = bytearray(_I32.size)
    frame_start += response_header(correlation_id, response_header_version(api_key, version))
    out = _FrameWriter(frame_start)
    # kio's entity_writer is cached per entity type.
    entity_writer(type(body))(out, body)
    return _closed(out.chunks, out.head, frame_start, out.regions_size)
