"""Kafka's batch compression codecs, keyed by the id in a batch's attributes.

The records section of a v2 batch (everything after the 61-byte header) is compressed
as one unit. Each codec writes what Kafka's Java producer writes and reads what any
client in the wild writes:

- gzip: a gzip stream (several members are read as one, as ``GZIPInputStream`` does).
- snappy: the xerial framing (magic, version, then length-prefixed blocks) on write;
  both that framing and a bare snappy block on read.
- lz4: the LZ4 frame format with independent 64 KB blocks and no content size, the
  settings of Kafka's ``KafkaLZ4BlockOutputStream``; any valid frame on read.
- zstd: a zstd frame; on read, frames without a content size (streaming producers,
  librdkafka) and several concatenated frames.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Version and minimum compatible version, both 1: what xerial's SnappyOutputStream writes.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# The uncompressed size of each block: xerial's default, and so the Java producer's.
XERIAL_BLOCK_SIZE = 32 * 1024

_XERIAL_LENGTH = struct.Struct(">i")


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Corrupt compressed data, or a codec id or name Kafka does not define."""


_NAMES = {
    "none": CompressionType.NONE,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}

# What each library raises on bad input; anything else is a bug and propagates.
_CODEC_ERRORS = (
    OSError,  # gzip.BadGzipFile
    EOFError,  # truncated gzip
    zlib.error,
    snappy.UncompressError,
    RuntimeError,  # lz4.frame
    zstandard.ZstdError,
    ValueError,
)


def codec_from_name(name: str) -> CompressionType:
    """The codec of a ``compression.type`` value (case-insensitive)."""
    try:
        return _NAMES[name.strip().lower()]
    except KeyError:
        raise CompressionError(f"unknown compression type {name!r}") from None


def _codec(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {codec}") from None


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec``; ``level`` None means the library's default.

    snappy has no levels, so ``level`` is ignored for it (and for none).
    """
    kind = _codec(codec)
    try:
        if kind is CompressionType.NONE:
            return bytes(data)
        if kind is CompressionType.GZIP:
            return gzip.compress(data, compresslevel=6 if level is None else level)
        if kind is CompressionType.SNAPPY:
            return _xerial_compress(data)
        if kind is CompressionType.LZ4:
            return lz4.frame.compress(
                data,
                compression_level=0 if level is None else level,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                # Kafka's Java reader decompresses every block on its own.
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    except _CODEC_ERRORS as e:
        raise CompressionError(f"cannot compress with {kind.name.lower()}: {e}") from e


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The bytes ``data`` decompresses to; CompressionError when it is not valid ``codec`` data."""
    kind = _codec(codec)
    try:
        if kind is CompressionType.NONE:
            return bytes(data)
        if len(data) == 0:
            raise CompressionError(f"empty {kind.name.lower()} data")
        if kind is CompressionType.GZIP:
            return gzip.decompress(data)
        if kind is CompressionType.SNAPPY:
            return _snappy_decompress(memoryview(data))
        if kind is CompressionType.LZ4:
            return _lz4_decompress(data)
        return _zstd_decompress(data)
    except CompressionError:
        raise
    except _CODEC_ERRORS as e:
        raise CompressionError(f"corrupt {kind.name.lower()} data: {e}") from e


def _xerial_compress(data: bytes) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = snappy.compress(view[start : start + XERIAL_BLOCK_SIZE])
        out += _XERIAL_LENGTH.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(view: memoryview) -> bytes:
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return snappy.decompress(view)
    if len(view) < len(XERIAL_HEADER):
        raise CompressionError("truncated xerial snappy header")
    out = bytearray()
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if pos + _XERIAL_LENGTH.size > end:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _XERIAL_LENGTH.unpack_from(view, pos)
        pos += _XERIAL_LENGTH.size
        if size <= 0 or pos + size > end:
            raise CompressionError(f"xerial snappy block of {size} bytes with {end - pos} left")
        out += snappy.decompress(view[pos : pos + size])
        pos += size
    return bytes(out)


def _lz4_decompress(data: bytes | memoryview) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while rest:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out += decompressor.decompress(rest)
        if not decompressor.eof:
            raise CompressionError("truncated lz4 frame")
        rest = decompressor.unused_data
    return bytes(out)


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    # A decompressobj, not ZstdDecompressor.decompress: the latter needs the content size
    # in the frame header, which streaming producers leave out.
    out = bytearray()
    rest = bytes(data)
    while rest:
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        out += decompressor.decompress(rest)
        if not decompressor.eof:
            raise CompressionError("truncated zstd frame")
        rest = decompressor.unused_data
    return bytes(out)
