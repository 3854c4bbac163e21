"""Kafka's compression codecs: round trips, the framings real clients write, corrupt input."""

from __future__ import annotations

import gzip
import random
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from protocol.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_HEADER,
    XERIAL_MAGIC,
    CompressionError,
    CompressionType,
    codec_from_name,
    compress,
    decompress,
)

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]
# Compressible but not trivial: text-like bytes spanning several snappy/lz4 blocks.
SAMPLE = bytes(random.Random(7).choice(b"kafka broker record batch \x00\x01") for _ in range(150_000))


def test_codec_ids_are_kafkas() -> None:
    assert [int(c) for c in CompressionType] == [0, 1, 2, 3, 4]
    assert [c.name for c in CompressionType] == ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"]


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", 0), ("uncompressed", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), ("ZSTD", 4), (" Gzip ", 1)],
)
def test_codec_from_name(name: str, codec: int) -> None:
    assert codec_from_name(name) == codec


@pytest.mark.parametrize("name", ["producer", "brotli", "", "lz4frame"])
def test_codec_from_unknown_name(name: str) -> None:
    with pytest.raises(CompressionError):
        codec_from_name(name)


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000) | st.binary(max_size=40).map(lambda b: b * 2000))
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data
    assert decompress(codec, memoryview(compressed)) == data
    assert decompress(int(codec), bytearray(compressed)) == data


@pytest.mark.parametrize(("codec", "level"), [(1, 1), (1, 9), (3, 1), (3, 12), (4, 1), (4, 19), (4, -5), (2, 5), (0, 3)])
def test_levels(codec: int, level: int) -> None:
    assert decompress(codec, compress(codec, SAMPLE, level)) == SAMPLE


def test_large_inputs_span_blocks() -> None:
    for codec in COMPRESSED:
        compressed = compress(codec, SAMPLE)
        assert len(compressed) < len(SAMPLE)
        assert decompress(codec, compressed) == SAMPLE


def test_gzip_writes_gzip_and_reads_members() -> None:
    assert compress(1, b"x")[:2] == b"\x1f\x8b"
    assert decompress(1, gzip.compress(SAMPLE, compresslevel=1)) == SAMPLE
    assert decompress(1, gzip.compress(b"first ") + gzip.compress(b"second")) == b"first second"
    assert decompress(1, kafka_codec.gzip_encode(SAMPLE)) == SAMPLE


def _xerial_blocks(data: bytes) -> list[int]:
    """The block lengths of a xerial stream, checked to fill it exactly."""
    assert data.startswith(XERIAL_HEADER)
    pos, sizes = len(XERIAL_HEADER), []
    for _ in range(len(data)):
        if pos == len(data):
            return sizes
        (size,) = struct.unpack_from(">i", data, pos)
        sizes.append(size)
        pos += 4 + size
    raise AssertionError("unreachable")


def test_snappy_writes_xerial_framing() -> None:
    compressed = compress(2, SAMPLE)
    assert compressed[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", compressed, 8) == (1, 1)
    assert len(_xerial_blocks(compressed)) == -(-len(SAMPLE) // XERIAL_BLOCK_SIZE)
    assert compress(2, b"") == XERIAL_HEADER
    assert decompress(2, XERIAL_HEADER) == b""
    assert kafka_codec.snappy_decode(compressed) == SAMPLE


def test_snappy_reads_xerial_and_raw() -> None:
    assert decompress(2, snappy.compress(SAMPLE)) == SAMPLE
    assert decompress(2, kafka_codec.snappy_encode(SAMPLE, xerial_compatible=True)) == SAMPLE
    assert decompress(2, kafka_codec.snappy_encode(SAMPLE, xerial_compatible=False)) == SAMPLE
    small_blocks = kafka_codec.snappy_encode(SAMPLE, xerial_compatible=True, xerial_blocksize=1000)
    assert len(_xerial_blocks(small_blocks)) > 100
    assert decompress(2, small_blocks) == SAMPLE


def test_lz4_writes_kafkas_frame() -> None:
    compressed = compress(3, SAMPLE)
    assert compressed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = compressed[4], compressed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks: Kafka's Java reader needs them
    assert not flg & 0x08 and not flg & 0x04 and not flg & 0x10  # no content size or checksums
    assert (bd >> 4) & 0x07 == 4  # 64 KB blocks
    info = lz4.frame.get_frame_info(compressed)
    assert info["block_linked"] is False and info["content_size"] == 0
    assert kafka_codec.lz4_decode(compressed) == SAMPLE


def test_lz4_reads_any_frame() -> None:
    linked = lz4.frame.compress(SAMPLE, block_linked=True, content_checksum=True, store_size=True, block_checksum=True)
    assert decompress(3, linked) == SAMPLE
    assert decompress(3, lz4.frame.compress(SAMPLE, block_size=lz4.frame.BLOCKSIZE_MAX4MB)) == SAMPLE
    assert decompress(3, kafka_codec.lz4_encode(SAMPLE)) == SAMPLE
    assert decompress(3, lz4.frame.compress(b"ab") + lz4.frame.compress(b"cd")) == b"abcd"


def test_zstd_reads_frames_without_content_size() -> None:
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(SAMPLE)
    assert zstandard.get_frame_parameters(no_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(4, no_size) == SAMPLE
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(SAMPLE[:70_000]) + streamed.compress(SAMPLE[70_000:]) + streamed.flush()
    assert decompress(4, frame) == SAMPLE
    assert decompress(4, compress(4, b"ab") + no_size) == b"ab" + SAMPLE
    assert decompress(4, kafka_codec.zstd_encode(SAMPLE)) == SAMPLE
    assert kafka_codec.zstd_decode(compress(4, SAMPLE)) == SAMPLE


@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_input_raises(codec: CompressionType) -> None:
    good = compress(codec, SAMPLE)
    bad_inputs = [
        b"",
        b"garbage, not compressed data at all",
        good[: len(good) // 2],
        good[:-3],
        good[:20] + bytes(b ^ 0x5A for b in good[20:60]) + good[60:],
    ]
    for bad in bad_inputs:
        with pytest.raises(CompressionError):
            decompress(codec, bad)


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_trailing_garbage_raises(codec: CompressionType) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, compress(codec, SAMPLE) + b"trailing junk")


def test_corrupt_xerial_framing_raises() -> None:
    good = compress(2, SAMPLE)
    for bad in [XERIAL_HEADER[:12], good + b"\x00\x00", good + struct.pack(">i", 1000) + b"abc", XERIAL_HEADER + struct.pack(">i", -4)]:
        with pytest.raises(CompressionError):
            decompress(2, bad)


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_arbitrary_bytes_decompress_or_raise_compression_error(codec: CompressionType, data: bytes) -> None:
    try:
        decompress(codec, data)
    except CompressionError:
        pass


def test_unknown_codec_id_raises() -> None:
    for codec in (5, 7, -1):
        with pytest.raises(CompressionError):
            compress(codec, b"data")
        with pytest.raises(CompressionError):
            decompress(codec, b"data")
    assert issubclass(CompressionError, ValueError)
