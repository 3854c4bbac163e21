"""Kafka's size-prefixed frames, decoded from a byte stream without I/O."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    """A frame announced a size over ``socket.request.max.bytes`` (or a negative one)."""


class FrameDecoder:
    """Accumulates bytes and yields whole frames (without their 4-byte size).

    The size is checked before any of the body is buffered, so a client that
    announces a huge request costs us nothing but a closed connection.
    """

    def __init__(self, max_frame_size: int) -> None:
        self._max = max_frame_size
        self._buf = bytearray()

    def feed(self, data: bytes | memoryview) -> list[bytearray]:
        buf = self._buf
        buf += data
        frames: list[bytearray] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self._max:
                raise FrameTooLarge(f"frame size {size} outside 0..{self._max}")
            if end - pos - 4 < size:
                break
            frames.append(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def encode_size(size: int) -> bytes:
    return _SIZE.pack(size)
