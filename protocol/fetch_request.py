"""FetchRequest v4–v18 read straight from the frame.

Every consumer and follower sends one of these per round trip, and kio's generic path (a
length walk, then entities built field by field) was the largest Python cost of serving a
fetch after the sendfile itself; a consumer's first fetch also paid for loading kio's schema
of its version. This reader unpacks each version's fixed fields with one ``struct`` per
level. Fields a version does not carry get Kafka's defaults, so the handler reads every
version alike. ``tests/unit/test_fetch_request.py`` checks it against kio.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from protocol.body_reader import I32, BodyReader

FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13
FIRST_REPLICA_STATE_VERSION = 15

# Top-level tags (v12+) and the partition tags (v17+, v18+) of FetchRequest.json.
_CLUSTER_ID_TAG = 0
_REPLICA_STATE_TAG = 1
_REPLICA_DIRECTORY_ID_TAG = 0
_HIGH_WATERMARK_TAG = 1
# FetchPartition.HighWatermark's default: the fetcher does not send one (KIP-1166).
NO_HIGH_WATERMARK = 2**63 - 1

_REPLICA_STATE = struct.Struct(">iq")
_I64 = struct.Struct(">q")


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    replica_directory_id: uuid.UUID | None = None
    high_watermark: int = NO_HIGH_WATERMARK  # a Raft follower's, v18+


class FetchTopic(NamedTuple):
    """``topic`` up to v12, ``topic_id`` from v13 (the other one is None)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[FetchPartition, ...]


class ForgottenTopic(NamedTuple):
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


class FetchRequest(NamedTuple):
    """``replica_id``/``replica_epoch`` come from ReplicaState from v15 on, as Kafka's FetchRequest.replicaId() does."""

    cluster_id: str | None
    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str


def _head_layout(version: int) -> struct.Struct:
    replica = "i" if version < FIRST_REPLICA_STATE_VERSION else ""
    session = "ii" if version >= 7 else ""
    return struct.Struct(f">{replica}iiib{session}")


def _partition_layout(version: int) -> struct.Struct:
    leader_epoch = "i" if version >= 9 else ""
    last_fetched_epoch = "i" if version >= 12 else ""
    log_start = "q" if version >= 5 else ""
    return struct.Struct(f">i{leader_epoch}q{last_fetched_epoch}{log_start}i")


_HEADS = {v: _head_layout(v) for v in range(4, 19)}
_PARTITIONS = {v: _partition_layout(v) for v in range(4, 19)}


def _partition(version: int, values: tuple[int, ...]) -> FetchPartition:
    """A partition of a version before 12 (the flexible ones have all six fixed fields)."""
    if version >= 9:
        index, leader_epoch, fetch_offset, log_start, max_bytes = values
        return FetchPartition(index, leader_epoch, fetch_offset, -1, log_start, max_bytes)
    if version >= 5:
        index, fetch_offset, log_start, max_bytes = values
        return FetchPartition(index, -1, fetch_offset, -1, log_start, max_bytes)
    index, fetch_offset, max_bytes = values
    return FetchPartition(index, -1, fetch_offset, -1, -1, max_bytes)


def _topic(r: BodyReader, version: int) -> tuple[str | None, uuid.UUID | None]:
    if version >= FIRST_TOPIC_ID_VERSION:
        return None, r.uuid("topic id")
    return r.string(False, "topic name"), None


def read_fetch_request(frame: bytearray | memoryview, offset: int, version: int) -> FetchRequest:
    """Decode the body that starts at ``offset`` of a Fetch ``version`` (4–18) request."""
    if version not in _HEADS:
        raise ValueError(f"no reader for fetch v{version}")
    r = BodyReader(memoryview(frame), offset, version >= FIRST_FLEXIBLE_VERSION, "fetch")
    try:
        return _read(r, version)
    except struct.error as e:  # a fixed-size group of fields ran past the end of the frame
        raise r.invalid(str(e)) from None


def _read(r: BodyReader, version: int) -> FetchRequest:
    flexible = r.flexible
    head = r.fixed(_HEADS[version], "request fields")
    if version >= FIRST_REPLICA_STATE_VERSION:
        replica_id = -1
        max_wait_ms, min_bytes, max_bytes, isolation_level, *session = head
    else:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, *session = head
    session_id, session_epoch = session if session else (0, -1)

    topics = []
    for _ in range(r.count("topics", 2)):
        name, topic_id = _topic(r, version)
        topics.append(FetchTopic(name, topic_id, _partitions(r, version)))
        r.tagged_fields()

    forgotten = []
    if version >= 7:
        for _ in range(r.count("forgotten topics", 2)):
            name, topic_id = _topic(r, version)
            indexes = tuple(I32.unpack_from(r.buf, r.need(4, "forgotten partition"))[0] for _ in range(r.count("forgotten partitions", 4)))
            r.tagged_fields()
            forgotten.append(ForgottenTopic(name, topic_id, indexes))

    rack_id = ""
    if version >= 11:
        rack_id = r.string(False, "rack id") or ""

    cluster_id = None
    replica_epoch = -1
    if flexible:
        tags = r.tagged_field_positions()
        if _CLUSTER_ID_TAG in tags:
            cluster_id = r.at(*tags[_CLUSTER_ID_TAG]).string(True, "cluster id")
        if _REPLICA_STATE_TAG in tags and version >= FIRST_REPLICA_STATE_VERSION:
            state = r.at(*tags[_REPLICA_STATE_TAG])
            replica_id, replica_epoch = state.fixed(_REPLICA_STATE, "replica state")
            state.tagged_fields()
    return FetchRequest(
        cluster_id,
        replica_id,
        replica_epoch,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        tuple(topics),
        tuple(forgotten),
        rack_id,
    )


def _partitions(r: BodyReader, version: int) -> tuple[FetchPartition, ...]:
    """One topic's partitions; the hot loop of the reader (a consumer of 64 partitions sends 64)."""
    layout = _PARTITIONS[version]
    unpack, size = layout.unpack_from, layout.size
    buf = r.buf
    n = r.count("partitions", size + r.flexible)
    pos = r.pos
    partitions = []
    if not r.flexible:
        # count() checked that all n fixed-size partitions fit in the frame.
        for _ in range(n):
            partitions.append(_partition(version, unpack(buf, pos)))
            pos += size
        r.pos = pos
        return tuple(partitions)
    for _ in range(n):
        values = unpack(buf, pos)
        pos += size
        if pos < r.end and buf[pos] == 0:
            pos += 1  # no tagged fields, as clients send it
            partitions.append(FetchPartition(*values))
            continue
        r.pos = pos
        partition = FetchPartition(*values)
        tags = r.tagged_field_positions()
        if _REPLICA_DIRECTORY_ID_TAG in tags and version >= 17:
            directory = r.at(*tags[_REPLICA_DIRECTORY_ID_TAG]).uuid("replica directory id")
            partition = partition._replace(replica_directory_id=directory)
        if _HIGH_WATERMARK_TAG in tags and version >= 18:
            high_watermark = r.at(*tags[_HIGH_WATERMARK_TAG]).fixed(_I64, "high watermark")[0]
            partition = partition._replace(high_watermark=high_watermark)
        partitions.append(partition)
        pos = r.pos
    r.pos = pos
    return tuple(partitions)
