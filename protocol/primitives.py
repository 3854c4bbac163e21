"""Kafka's primitive encodings for the responses written by hand (Produce, Fetch)."""

from __future__ import annotations

import struct

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
