"""Mutations of valid requests into hostile ones.

Each mutation takes a valid request and returns a whole frame (size prefix included) and the
mutation's name. The structure-aware ones use the request's layout (``tests/fuzz/wire.py``) to
aim at length prefixes, nulls, fixed fields, tagged-field sections and record batches; the
blind ones flip bits, cut, splice and relabel frames.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Callable

import crc32c

from protocol.api_keys import KNOWN_APIS, is_flexible
from tests.fuzz.generate import Request, record_batch
from tests.fuzz.wire import FIXED, I32, Prefix, length_prefix, request_header, uvarint

_INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
# Counts and lengths no honest client sends: below null, off the end, the limits of each width.
_HOSTILE_LENGTHS = (-2, -3, -(2**15), -(2**31), 2**15 - 1, 2**16 - 1, 2**31 - 1, 2**32 - 2, 1_000_000, 65_536)
# Batch header offsets (protocol/record_batch.py's, restated: the fuzzer does not import the code under test).
_BATCH_LENGTH, _MAGIC, _CRC, _ATTRIBUTES, _LAST_OFFSET_DELTA, _RECORDS_COUNT, _BATCH_HEADER = 8, 16, 17, 21, 23, 57, 61
_UNKNOWN_API_KEYS = (-1, 4, 5, 6, 7, 17, 99, 1000, 32767, -32768)


@dataclass(frozen=True, slots=True)
class Mutant:
    frame: bytes  # size prefix included
    mutation: str


class Mutator:
    """``mutate(request, other)``: ``other`` is a second valid request, for splicing."""

    def __init__(self, rng: random.Random, client_id: str = "fuzz") -> None:
        self.rng = rng
        self.client_id = client_id
        self._mutations: list[tuple[str, Callable[[Request, Request, int], bytes], int]] = [
            ("valid", self._valid, 4),
            ("bit-flip", self._bit_flip, 10),
            ("byte-set", self._byte_set, 6),
            ("truncate", self._truncate, 6),
            ("trailing-garbage", self._trailing_garbage, 3),
            ("hostile-length", self._hostile_length, 14),
            ("null", self._null, 12),
            ("fixed-field-edge", self._fixed_edge, 6),
            ("splice", self._splice, 5),
            ("wrong-api-key", self._wrong_api_key, 4),
            ("wrong-version", self._wrong_version, 6),
            ("tagged-garbage", self._tagged_garbage, 8),
            ("bad-record-batch", self._bad_records, 8),
            ("bad-header", self._bad_header, 4),
            ("frame-size", self._frame_size, 2),
        ]
        self.names = [m[0] for m in self._mutations]
        self._weights = [m[2] for m in self._mutations]

    def mutate(self, request: Request, other: Request, correlation_id: int) -> Mutant:
        index = self.rng.choices(range(len(self._mutations)), self._weights)[0]
        name, mutation, _ = self._mutations[index]
        return Mutant(mutation(request, other, correlation_id), name)

    # -- helpers ------------------------------------------------------------------------------------

    def header(self, request: Request, correlation_id: int, api_key: int | None = None, version: int | None = None) -> bytes:
        key = request.api_key if api_key is None else api_key
        v = request.version if version is None else version
        flexible = key in KNOWN_APIS and KNOWN_APIS[key].min_version <= v <= KNOWN_APIS[key].max_version and is_flexible(key, v)
        return request_header(key, v, correlation_id, self.client_id, flexible)

    @staticmethod
    def framed(payload: bytes) -> bytes:
        return I32.pack(len(payload)) + payload

    def _frame(self, request: Request, correlation_id: int, body: bytes | None = None) -> bytes:
        return self.framed(self.header(request, correlation_id) + (request.body if body is None else body))

    def _prefixes(self, request: Request, kinds: tuple[str, ...] | None = None) -> list[Prefix]:
        return [p for p in request.layout.prefixes if kinds is None or p.kind in kinds]

    # -- the mutations ------------------------------------------------------------------------------

    def _valid(self, request: Request, other: Request, cid: int) -> bytes:
        return self._frame(request, cid)

    def _bit_flip(self, request: Request, other: Request, cid: int) -> bytes:
        payload = bytearray(self.header(request, cid) + request.body)
        for _ in range(self.rng.choice((1, 1, 2, 4, 8))):
            bit = self.rng.randrange(len(payload) * 8)
            payload[bit // 8] ^= 1 << (bit % 8)
        return self.framed(bytes(payload))

    def _byte_set(self, request: Request, other: Request, cid: int) -> bytes:
        header = self.header(request, cid)
        body = bytearray(request.body)
        if not body:
            return self.framed(header + bytes([self.rng.choice(_INTERESTING_BYTES)]))
        for _ in range(self.rng.choice((1, 2, 3))):
            body[self.rng.randrange(len(body))] = self.rng.choice(_INTERESTING_BYTES)
        return self.framed(header + bytes(body))

    def _truncate(self, request: Request, other: Request, cid: int) -> bytes:
        payload = self.header(request, cid) + request.body
        return self.framed(payload[: self.rng.randrange(len(payload))])

    def _trailing_garbage(self, request: Request, other: Request, cid: int) -> bytes:
        return self._frame(request, cid, request.body + self.rng.randbytes(self.rng.randint(1, 16)))

    def _hostile_length(self, request: Request, other: Request, cid: int) -> bytes:
        prefixes = self._prefixes(request)
        if not prefixes:
            return self._truncate(request, other, cid)
        p = self.rng.choice(prefixes)
        body = request.body
        if p.kind == "struct":
            value = bytes([self.rng.choice((0x00, 0x02, 0x7F, 0x80, 0xFE))])
        else:
            current = self._current_length(body, p)
            n = self.rng.choice(_HOSTILE_LENGTHS + (current + 1, current - 1 if current > 0 else -2, current * 2 + 7))
            if p.flexible and self.rng.random() < 0.2:
                value = b"\xff" * self.rng.randint(5, 9) + b"\x01"  # a varint longer than five bytes
            elif p.flexible:
                value = uvarint(n + 1 if n >= -1 else (n + 1) & 0xFFFFFFFF)
            else:
                value = length_prefix(max(-(2**15), min(2**15 - 1, n)) if p.kind == "string" else max(-(2**31), min(2**31 - 1, n)), False, p.kind != "string")
        return self._frame(request, cid, body[: p.pos] + value + body[p.pos + p.size :])

    @staticmethod
    def _current_length(body: bytes, p: Prefix) -> int:
        raw = body[p.pos : p.pos + p.size]
        if p.flexible:
            value = shift = 0
            for byte in raw:
                value |= (byte & 0x7F) << shift
                shift += 7
            return value - 1
        return int(struct.unpack(">h" if len(raw) == 2 else ">i", raw)[0])

    def _null(self, request: Request, other: Request, cid: int) -> bytes:
        """-1 where the spec allows none (mostly), or where it does (the field's value then dangles)."""
        prefixes = [p for p in self._prefixes(request) if p.kind != "struct"]
        if not prefixes:
            return self._hostile_length(request, other, cid)
        refused = [p for p in prefixes if not p.nullable]
        p = self.rng.choice(refused if refused and self.rng.random() < 0.85 else prefixes)
        keep_value = self.rng.random() < 0.5  # null, then the old value's bytes as garbage
        end = p.pos + p.size if keep_value or p.kind == "array" else p.value_end
        null = length_prefix(-1, p.flexible, p.kind != "string")
        return self._frame(request, cid, request.body[: p.pos] + null + request.body[end:])

    def _fixed_edge(self, request: Request, other: Request, cid: int) -> bytes:
        fields = request.layout.fixed
        if not fields:
            return self._bit_flip(request, other, cid)
        f = self.rng.choice(fields)
        if f.kafka_type in FIXED and f.kafka_type not in ("bool", "float64"):
            bits = f.size * 8
            edge = self.rng.choice((0, -1, 1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
            if f.kafka_type == "uint16":
                edge &= 0xFFFF
            value = FIXED[f.kafka_type].pack(edge)
        else:
            value = bytes(self.rng.choice((0, 2, 0x7F, 0xFF)) for _ in range(f.size))
        body = request.body
        return self._frame(request, cid, body[: f.pos] + value + body[f.pos + f.size :])

    def _splice(self, request: Request, other: Request, cid: int) -> bytes:
        a = self._frame(request, cid)
        b = self._frame(other, cid + 1)
        roll = self.rng.random()
        if roll < 0.4:
            # The head of one request and the tail of another under one size.
            payload = a[4 : 4 + self.rng.randrange(1, len(a) - 3)] + b[4 + self.rng.randrange(len(b) - 4) :]
            return self.framed(payload)
        if roll < 0.7:
            # Both frames under the first's size: the second becomes trailing bytes of the first.
            return self.framed(a[4:] + b)
        # The size covers less than the first frame: its tail is read as the next frame's size.
        cut = self.rng.randrange(10, max(11, len(a) - 4))
        return I32.pack(cut) + a[4:] + b

    def _wrong_api_key(self, request: Request, other: Request, cid: int) -> bytes:
        if self.rng.random() < 0.5:
            key = self.rng.choice(_UNKNOWN_API_KEYS)
        else:
            key = self.rng.choice(sorted(KNOWN_APIS))
        return self.framed(self.header(request, cid, api_key=key) + request.body)

    def _wrong_version(self, request: Request, other: Request, cid: int) -> bytes:
        r = KNOWN_APIS[request.api_key]
        roll = self.rng.random()
        if roll < 0.6:
            # Another served version of the same API: flexible read as legacy and back.
            version = self.rng.randint(r.min_version, r.max_version)
        else:
            version = self.rng.choice((r.max_version + 1, r.min_version - 1, -1, 127, 32767, -32768))
        return self.framed(self.header(request, cid, version=version) + request.body)

    def _tagged_garbage(self, request: Request, other: Request, cid: int) -> bytes:
        sections = request.layout.tag_sections
        if not sections:
            return self._wrong_version(request, other, cid)
        section = self.rng.choice(sections)
        roll = self.rng.random()
        if roll < 0.25:
            garbage = uvarint(self.rng.choice((1, 2, 127, 2**31, 2**32 - 1)))  # a count, no fields
        else:
            fields = []
            for _ in range(self.rng.randint(1, 3)):
                tag = self.rng.choice((0, 1, 2, 3, 10000, 2**31 - 1))
                value = self.rng.randbytes(self.rng.choice((0, 1, 4, 9, 16)))
                size = len(value) if roll < 0.8 else self.rng.choice((len(value) + 1, 2**20, 2**32 - 1))
                fields.append(uvarint(tag) + uvarint(size) + value)
            garbage = uvarint(len(fields)) + b"".join(fields)
        body = request.body
        return self._frame(request, cid, body[: section.pos] + garbage + body[section.end :])

    def _bad_records(self, request: Request, other: Request, cid: int) -> bytes:
        slots = self._prefixes(request, ("records",))
        if not slots:
            return self._hostile_length(request, other, cid)
        p = self.rng.choice(slots)
        batch = bytearray(record_batch(self.rng))
        kind = self.rng.choice(("crc", "batch-length", "magic", "compression", "count", "offset-delta", "truncated", "two-batches", "garbage-payload", "base-offset", "tiny"))
        fix_crc = kind != "crc" and self.rng.random() < 0.7
        if kind == "crc":
            batch[self.rng.randrange(_CRC + 4, len(batch))] ^= 1 << self.rng.randrange(8)
        elif kind == "batch-length":
            struct.pack_into(">i", batch, _BATCH_LENGTH, self.rng.choice((-1, 0, 13, 14, len(batch), len(batch) * 3, 2**31 - 1)))
        elif kind == "magic":
            batch[_MAGIC] = self.rng.choice((0, 1, 3, 0xFF))
        elif kind == "compression":
            batch[_ATTRIBUTES + 1] = (batch[_ATTRIBUTES + 1] & ~0x07) | self.rng.choice((1, 2, 3, 4, 5, 6, 7))
        elif kind == "count":
            struct.pack_into(">i", batch, _RECORDS_COUNT, self.rng.choice((0, -1, 2**31 - 1, 10_000)))
        elif kind == "offset-delta":
            struct.pack_into(">i", batch, _LAST_OFFSET_DELTA, self.rng.choice((-1, 5, 2**31 - 1)))
        elif kind == "truncated":
            batch = batch[: self.rng.randrange(len(batch))]
        elif kind == "two-batches":
            batch += record_batch(self.rng)
        elif kind == "garbage-payload":
            batch[_BATCH_HEADER:] = self.rng.randbytes(max(1, len(batch) - _BATCH_HEADER))
        elif kind == "base-offset":
            struct.pack_into(">q", batch, 0, self.rng.choice((1, -1, 2**63 - 1)))
        else:
            batch = batch[: self.rng.choice((0, 1, 12, 17, 21))]
        if fix_crc and len(batch) >= _BATCH_HEADER:
            struct.pack_into(">I", batch, _CRC, crc32c.crc32c(bytes(batch[_ATTRIBUTES:])))
        body = request.body
        new = length_prefix(len(batch), p.flexible, wide=True) + bytes(batch)
        return self._frame(request, cid, body[: p.pos] + new + body[p.value_end :])

    def _bad_header(self, request: Request, other: Request, cid: int) -> bytes:
        header = bytearray(self.header(request, cid))
        roll = self.rng.random()
        if roll < 0.4:
            struct.pack_into(">h", header, 8, self.rng.choice((-2, -(2**15), 2**15 - 1, len(self.client_id) + 1, 200)))
        elif roll < 0.6:
            header[10 : 10 + len(self.client_id)] = b"\xff\xfe\xc3\x28"[: len(self.client_id)].ljust(len(self.client_id), b"\x80")
        elif is_flexible(request.api_key, request.version):
            header[-1:] = self.rng.choice((b"\x01", b"\x02\x00\x00", b"\x01\x00\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01"))
        else:
            header = header[: self.rng.randrange(len(header))]
        return self.framed(bytes(header) + request.body)

    def _frame_size(self, request: Request, other: Request, cid: int) -> bytes:
        payload = self.header(request, cid) + request.body
        size = self.rng.choice((len(payload) + 1, len(payload) + 1000, len(payload) - 1, 0, -1, 2**31 - 1, 100 * 1024 * 1024 + 1))
        return struct.pack(">i", size) + payload
