"""Kafka's primitive encodings for the responses written by hand (Produce, Fetch)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def uvarint(value: int) -> bytes:
    # By hand rather than kio's stream writer: a BytesIO per field cost more than the rest of a header.
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def array_length(n: int, flexible: bool) -> bytes:
    """An array count (-1: null); flexible versions store it plus one as a uvarint."""
    return uvarint(n + 1) if flexible else _I32.pack(n)


def string(value: str | None, flexible: bool) -> bytes:
    """A (nullable) string: int16 length, or length plus one as a uvarint when flexible."""
    if value is None:
        return uvarint(0) if flexible else _I16.pack(-1)
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


_LEADER = struct.Struct(">BBiiB")  # tag, size 9, leader id, leader epoch, no tagged fields


def current_leader_field(tag: int, leader_id: int, leader_epoch: int) -> bytes:
    """KIP-951's CurrentLeader tagged field (LeaderIdAndEpoch) under ``tag``."""
    return _LEADER.pack(tag, _LEADER.size - 2, leader_id, leader_epoch, 0)


def node_endpoints_field(endpoints: Sequence[tuple[int, str, int, str | None]]) -> bytes:
    """KIP-951's NodeEndpoints, tag 0 of a flexible response's body: where the named new
    leaders are, so a client can go there before it refreshes its metadata."""
    body = bytearray(uvarint(len(endpoints) + 1))
    for node_id, host, port, rack in endpoints:
        body += _I32.pack(node_id) + string(host, True) + _I32.pack(port) + string(rack, True) + b"\x00"
    return uvarint(0) + uvarint(len(body)) + body
