"""Request header v0–v2 parsing and response header v0–v1 encoding."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.serial.errors import DecodeError
from kio.serial.readers import read_unsigned_varint

from protocol.api_keys import is_flexible, is_known

_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")


class InvalidRequest(Exception):
    """The frame cannot be a Kafka request; the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    try:
        # kio reads only read-only buffers; a view over the frame costs no copy.
        value, size = read_unsigned_varint(memoryview(buf).toreadonly(), pos)
    except (DecodeError, ValueError) as e:
        raise InvalidRequest(f"bad varint: {e}") from None
    return value, pos + size


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise InvalidRequest("tagged field past the end of the frame")
    return pos


def parse_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse the header; the body starts at ``body_offset``.

    Header v2 (flexible requests) adds tagged fields after the client id; the client
    id itself stays a classic nullable string in every version. For an API or
    version we do not serve we stop after the client id: the caller answers or closes.
    """
    if len(frame) < 10:
        raise InvalidRequest("frame shorter than a request header")
    api_key, api_version, correlation_id = _FIXED.unpack_from(frame, 0)
    (length,) = _I16.unpack_from(frame, 8)
    pos = 10
    client_id: str | None = None
    if length >= 0:
        if pos + length > len(frame):
            raise InvalidRequest("client id past the end of the frame")
        client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
        pos += length
    elif length != -1:
        raise InvalidRequest(f"bad client id length {length}")
    if is_known(api_key, api_version) and is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version == 0:
        return struct.pack(">i", correlation_id)
    return struct.pack(">iB", correlation_id, 0)
