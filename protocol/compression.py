"""Kafka's batch compression codecs: gzip, snappy (raw and xerial framing), lz4 frame, zstd."""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    pass


_NAMES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def codec_from_name(name: str) -> int:
    try:
        return _NAMES[name.lower()]
    except KeyError:
        raise CompressionError(f"unknown compression type {name}") from None


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    if codec == CompressionType.NONE:
        return data
    if codec == CompressionType.GZIP:
        return gzip.compress(data, compresslevel=6 if level is None else level)
    if codec == CompressionType.SNAPPY:
        # The Java producer writes xerial-framed blocks; every client reads them.
        out = bytearray(XERIAL_HEADER)
        for i in range(0, len(data), XERIAL_BLOCK):
            block = snappy.compress(data[i : i + XERIAL_BLOCK])
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(data)
    if codec == CompressionType.ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    raw = bytes(data)
    try:
        if codec == CompressionType.NONE:
            return raw
        if codec == CompressionType.GZIP:
            return zlib.decompress(raw, 47)  # gzip or zlib header, whichever is there
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(raw)
        if codec == CompressionType.LZ4:
            return lz4.frame.decompress(raw)
        if codec == CompressionType.ZSTD:
            # Frames written by streaming compressors carry no content size.
            return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    except CompressionError:
        raise
    except Exception as e:
        raise CompressionError(f"corrupt {CompressionType(codec).name.lower()} data: {e}") from e
    raise CompressionError(f"unknown compression codec {codec}")


def _snappy_decompress(raw: bytes) -> bytes:
    if not raw.startswith(XERIAL_MAGIC):
        return snappy.decompress(raw)
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise CompressionError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if size < 0 or pos + size > len(raw):
            raise CompressionError("truncated xerial snappy block")
        out += snappy.decompress(raw[pos : pos + size])
        pos += size
    return bytes(out)
