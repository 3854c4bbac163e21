"""Kafka's size-prefixed frames, decoded from a byte stream without I/O."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

DEFAULT_BUFFER_SIZE = 64 * 1024


class FrameTooLarge(Exception):
    """A frame announced a size over ``socket.request.max.bytes`` (or a negative one).

    ``complete`` holds the frames received whole before it: they are still requests to answer.
    """

    def __init__(self, message: str, complete: list[bytearray]) -> None:
        super().__init__(message)
        self.complete = complete


class FrameDecoder:
    """Turns received bytes into whole frames (without their 4-byte size).

    The caller receives into ``buffer()`` and reports the count with ``received(n)``. Small
    frames are sliced out of one reusable staging buffer. A frame that does not fit there gets
    a buffer of its own as soon as its size is known, and the rest of it is received straight
    into that buffer: a produce request of megabytes is copied once, by the kernel, instead of
    being appended to a growing buffer and sliced out of it. The size is checked before
    anything is allocated for it, so a client that announces a huge request costs only a
    closed connection.
    """

    def __init__(self, max_frame_size: int, buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        # Public: a SASL listener lowers it to sasl.server.max.receive.size until a client is authenticated.
        self.max_frame_size = max_frame_size
        self._staging = bytearray(buffer_size)
        self._view = memoryview(self._staging)
        self._start = 0
        self._end = 0
        self._frame: bytearray | None = None
        self._filled = 0

    def buffer(self) -> memoryview:
        """Where the next bytes should be received (never past the frame being filled)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._end == len(self._staging):
            pending = self._end - self._start
            self._staging[:pending] = self._view[self._start : self._end]
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def received(self, n: int) -> list[bytearray]:
        """``n`` bytes arrived in the last ``buffer()``; returns the frames they completed."""
        if self._frame is not None:
            self._filled += n
            if self._filled < len(self._frame):
                return []
            done, self._frame = self._frame, None
            return [done]
        self._end += n
        frames: list[bytearray] = []
        staging, start, end = self._staging, self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(staging, start)
            if size < 0 or size > self.max_frame_size:
                raise FrameTooLarge(f"frame size {size} outside 0..{self.max_frame_size}", frames)
            if end - start - 4 >= size:
                frames.append(staging[start + 4 : start + 4 + size])
                start += 4 + size
                continue
            if 4 + size > len(staging):
                have = end - start - 4
                frame = bytearray(size)
                frame[:have] = self._view[start + 4 : end]
                self._frame, self._filled = frame, have
                start = end
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        """Copy ``data`` in as if it had been received (tests and tools; sockets use ``buffer``)."""
        frames: list[bytearray] = []
        view = memoryview(data).cast("B")
        while view.nbytes:
            target = self.buffer()
            n = min(len(target), view.nbytes)
            target[:n] = view[:n]
            view = view[n:]
            frames.extend(self.received(n))
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for frames not complete yet."""
        return self._filled if self._frame is not None else self._end - self._start


def encode_size(size: int) -> bytes:
    return _SIZE.pack(size)
