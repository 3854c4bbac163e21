"""ProduceResponse v3–v13 written straight to bytes.

One response per produce request, and librdkafka sends one request per partition batch: with
many partitions this is the broker's most frequent response, and building kio entities for it
cost more than the append itself. The layout is the spec's; KIP-951's tagged fields (a
partition's CurrentLeader, the response's NodeEndpoints) are written from v10 when a partition
answers NOT_LEADER_OR_FOLLOWER with a known leader, as Kafka does. From v13 (KIP-516) a topic
is named by its topic ID, as the request named it.
``tests/unit/test_produce_response.py`` decodes the output with kio.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Protocol

from protocol.frame import encode_size
from protocol.headers import response_header
from protocol.primitives import array_length, current_leader_field, node_endpoints_field, string

FIRST_FLEXIBLE_VERSION = 9
FIRST_LEADER_HINT_VERSION = 10
FIRST_TOPIC_ID_VERSION = 13
_ZERO_UUID = bytes(16)

_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihq")  # index, error code, base offset
_I64 = struct.Struct(">q")


class PartitionResult(Protocol):
    """What the append reported for one partition (broker.replica_manager.ProduceResult)."""

    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def record_errors(self) -> Sequence[tuple[int, str | None]]: ...
    @property
    def current_leader(self) -> tuple[int, int] | None: ...


def encode_produce_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str, uuid.UUID | None, Sequence[tuple[int, PartitionResult]]]],
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
) -> bytes:
    """The whole frame (size, response header, body) for (topic name, topic id, [(partition, result)])
    triples; ``node_endpoints`` (id, host, port, rack) of the leaders the results name."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    hints = version >= FIRST_LEADER_HINT_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    parts: list[bytes] = [array_length(len(topics), flexible)]
    append = parts.append
    for name, topic_id, partitions in topics:
        if by_id:
            append(topic_id.bytes if topic_id is not None else _ZERO_UUID)
        else:
            append(string(name, flexible))
        append(array_length(len(partitions), flexible))
        for index, p in partitions:
            append(_PARTITION.pack(index, p.error_code, p.base_offset))
            append(_I64.pack(p.log_append_time))
            if version >= 5:
                append(_I64.pack(p.log_start_offset))
            if version >= 8:
                append(array_length(len(p.record_errors), flexible))
                for batch_index, message in p.record_errors:
                    append(_I32.pack(batch_index))
                    append(string(message, flexible))
                    if flexible:
                        append(b"\x00")
                append(string(p.error_message, flexible))
            if hints and p.current_leader is not None:
                append(b"\x01" + current_leader_field(0, *p.current_leader))
            elif flexible:
                append(b"\x00")
        if flexible:
            append(b"\x00")
    append(_I32.pack(throttle_time_ms))
    if hints and node_endpoints:
        append(b"\x01" + node_endpoints_field(node_endpoints))
    elif flexible:
        append(b"\x00")
    header = response_header(correlation_id, 1 if flexible else 0)
    body_size = len(header) + sum(map(len, parts))
    return b"".join([encode_size(body_size), header, *parts])
