"""A bounds-checked cursor over a request body, for the bodies read by hand (Produce, Fetch).

Every length and count is checked against the bytes left before anything is sliced or
allocated, so a malformed body raises ``InvalidRequest`` and never reads out of bounds.
"""

from __future__ import annotations

import struct
import uuid

from protocol.headers import InvalidRequest, read_uvarint, skip_tagged_fields

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")

_ZERO_UUID = bytes(16)


class BodyReader:
    __slots__ = ("buf", "flexible", "pos", "end", "api")

    def __init__(self, buf: memoryview, pos: int, flexible: bool, api: str) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.flexible = flexible
        self.api = api

    def invalid(self, problem: str) -> InvalidRequest:
        return InvalidRequest(f"{self.api} request: {problem}")

    def need(self, n: int, what: str) -> int:
        """Consume ``n`` bytes; their start."""
        start = self.pos
        if n < 0 or start + n > self.end:
            raise self.invalid(f"{what} of {n} bytes past the end of the frame")
        self.pos = start + n
        return start

    def fixed(self, layout: struct.Struct, what: str) -> tuple[int, ...]:
        return layout.unpack_from(self.buf, self.need(layout.size, what))

    def length(self, legacy: struct.Struct, what: str) -> int:
        """A length or count; -1 means null. Flexible versions store it plus one as a uvarint."""
        if self.flexible:
            pos = self.pos
            if pos < self.end and self.buf[pos] < 0x80:
                self.pos = pos + 1  # a one-byte varint: short strings, small arrays
                return self.buf[pos] - 1
            value, self.pos = read_uvarint(self.buf, pos)
            return value - 1
        return int(legacy.unpack_from(self.buf, self.need(legacy.size, what))[0])

    def string(self, nullable: bool, what: str) -> str | None:
        size = self.length(I16, what)
        if size < 0:
            if nullable:
                return None
            raise self.invalid(f"null {what}")
        start = self.need(size, what)
        try:
            return str(self.buf[start : start + size], "utf-8")
        except UnicodeDecodeError as e:
            raise self.invalid(f"{what} is not UTF-8") from e

    def uuid(self, what: str) -> uuid.UUID | None:
        """A UUID; the all-zero one reads as None, as kio reads it."""
        start = self.need(16, what)
        raw = bytes(self.buf[start : start + 16])
        return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)

    def count(self, what: str, min_item_size: int) -> int:
        """An array's element count, refused when that many elements cannot fit in what is left."""
        n = self.length(I32, what)
        if n < 0:
            # Kafka refuses null arrays in these requests too.
            raise self.invalid(f"null {what}")
        if n * min_item_size > self.end - self.pos:
            raise self.invalid(f"{n} {what} cannot fit in the frame")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            if self.pos < self.end and self.buf[self.pos] == 0:
                self.pos += 1  # the usual case: no tagged fields
            else:
                self.pos = skip_tagged_fields(self.buf, self.pos)

    def tagged_field_positions(self) -> dict[int, tuple[int, int]]:
        """Tag -> (start, size) of each tagged field's value; the cursor moves past them all."""
        if self.pos < self.end and self.buf[self.pos] == 0:
            self.pos += 1  # the usual case: no tagged fields
            return {}
        count, self.pos = read_uvarint(self.buf, self.pos)
        fields: dict[int, tuple[int, int]] = {}
        for _ in range(count):
            tag, self.pos = read_uvarint(self.buf, self.pos)
            size, self.pos = read_uvarint(self.buf, self.pos)
            fields[tag] = (self.need(size, f"tagged field {tag}"), size)
        return fields

    def at(self, start: int, size: int) -> "BodyReader":
        """A reader over ``size`` bytes from ``start`` (a tagged field's value)."""
        sub = BodyReader(self.buf, start, self.flexible, self.api)
        sub.end = start + size
        return sub
