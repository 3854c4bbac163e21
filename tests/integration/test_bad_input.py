"""Malformed input over raw sockets: the broker answers with a Kafka error or closes that one
connection, and keeps serving everyone else with the log intact.

Frames are built here by hand with struct (independently of the broker's own protocol code).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import consume, consumer, create_topic, poll_messages, produce_acked, unique_topic, watermarks

IO_TIMEOUT_S = 10.0
API_PRODUCE, API_LIST_OFFSETS, API_METADATA, API_VERSIONS = 0, 2, 3, 18
UNSUPPORTED_VERSION, CORRUPT_MESSAGE, INVALID_RECORD = 35, 2, 87


# ---- wire helpers ------------------------------------------------------------------------------

def kstring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def compact_string(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


def header_v1(api_key: int, version: int, correlation_id: int) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + kstring("bad-input-test")


def header_v2(api_key: int, version: int, correlation_id: int) -> bytes:
    return header_v1(api_key, version, correlation_id) + uvarint(0)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def connect(broker: BrokerProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=IO_TIMEOUT_S)
    s.settimeout(IO_TIMEOUT_S)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    deadline = time.monotonic() + IO_TIMEOUT_S
    while len(buf) < n:
        assert time.monotonic() < deadline, f"timed out after {len(buf)}/{n} bytes"
        chunk = s.recv(n - len(buf))
        assert chunk, f"connection closed after {len(buf)}/{n} bytes"
        buf += chunk
    return bytes(buf)


def read_response(s: socket.socket, correlation_id: int) -> bytes:
    """One response frame; returns what follows the v0 response header (the correlation id)."""
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    body = recv_exact(s, size)
    (got,) = struct.unpack_from(">i", body)
    assert got == correlation_id
    return body[4:]


def closed_by_broker(s: socket.socket) -> tuple[bool, bytes]:
    """(True, data) if the broker closed the connection within the timeout; data = whatever it sent first."""
    data = bytearray()
    deadline = time.monotonic() + IO_TIMEOUT_S
    for _ in range(10_000):
        if time.monotonic() > deadline:
            return False, bytes(data)
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True, bytes(data)
        except socket.timeout:
            return False, bytes(data)
        if not chunk:
            return True, bytes(data)
        data += chunk
    return False, bytes(data)


def send_ignoring_reset(s: socket.socket, data: bytes) -> None:
    try:
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass


# ---- a v2 record batch, built by hand ----------------------------------------------------------

def encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytes([0]) + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += uvarint(0)  # no headers
    return varint(len(body)) + body


def record_batch(records: list[tuple[bytes | None, bytes | None]], base_ts: int, last_offset_delta: int | None = None, count: int | None = None, magic: int = 2) -> bytes:
    """A v2 batch with a correct CRC; last_offset_delta / count override the header fields."""
    encoded = b"".join(encode_record(i, i, k, v) for i, (k, v) in enumerate(records))
    delta = len(records) - 1 if last_offset_delta is None else last_offset_delta
    n = len(records) if count is None else count
    # attributes .. recordsCount, the part the CRC covers before the records
    tail = struct.pack(">hiqqqhii", 0, delta, base_ts, base_ts + len(records) - 1, -1, -1, -1, n) + encoded
    crc = crc32c.crc32c(tail)
    batch_length = 4 + 1 + 4 + len(tail)  # partitionLeaderEpoch + magic + crc + the rest
    return struct.pack(">qiibI", 0, batch_length, -1, magic, crc) + tail


def produce_v3(topic: str, partition: int, records: bytes, correlation_id: int, acks: int = -1) -> bytes:
    body = kstring(None) + struct.pack(">hi", acks, 10_000)
    body += struct.pack(">i", 1) + kstring(topic) + struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records
    return frame(header_v1(API_PRODUCE, 3, correlation_id) + body)


def parse_produce_v3(body: bytes) -> list[tuple[str, int, int, int]]:
    """[(topic, partition, error_code, base_offset)]"""
    out = []
    pos = 0
    (n_topics,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(n_topics):
        (name_len,) = struct.unpack_from(">h", body, pos)
        name = body[pos + 2 : pos + 2 + name_len].decode()
        pos += 2 + name_len
        (n_parts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(n_parts):
            index, error, base_offset, _log_append_time = struct.unpack_from(">ihqq", body, pos)
            pos += 22
            out.append((name, index, error, base_offset))
    return out


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    error, count = struct.unpack_from(">hi", body)
    keys = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", body, 6 + 6 * i)
        keys[key] = (lo, hi)
    assert len(body) == 6 + 6 * count, "trailing bytes after the v0 body"
    return error, keys


# ---- a well-behaved client that runs alongside the bad ones --------------------------------------

@dataclass
class Bystander:
    broker: BrokerProcess
    topic: str
    producer: Producer
    consumer: Consumer
    expected: list[bytes] = field(default_factory=list)

    def produce(self, value: bytes) -> int:
        offsets: list[int] = []
        self.producer.produce(self.topic, value=value, partition=0, on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
        assert self.producer.flush(15) == 0
        assert offsets == [len(self.expected)], f"{value!r} delivered at {offsets}, expected {len(self.expected)}"
        self.expected.append(value)
        return offsets[0]

    def assert_healthy(self, label: str) -> None:
        assert self.broker.running, f"broker died after {label}:\n{self.broker.tail()}"
        offset = self.produce(f"after-{label}".encode())
        (live,) = poll_messages(self.consumer, 1)  # the long-lived consumer sees it too
        assert (live.offset(), live.value()) == (offset, self.expected[-1])
        got = consume(self.broker.bootstrap, self.topic, 0, 0, len(self.expected))
        assert [m.value() for m in got] == self.expected, "earlier records changed"


@pytest.fixture(scope="module")
def bystander(module_broker: BrokerProcess) -> Iterator[Bystander]:
    topic = unique_topic("bystander")
    create_topic(module_broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "acks": "all", "linger.ms": 0})
    live = consumer(module_broker.bootstrap)
    b = Bystander(module_broker, topic, producer, live)
    for i in range(50):
        b.produce(f"before-{i}".encode())
    live.assign([TopicPartition(topic, 0, 0)])
    assert [m.offset() for m in poll_messages(live, 50)] == list(range(50))
    yield b
    live.close()


# ---- the bad inputs -----------------------------------------------------------------------------

def test_truncated_frame_then_client_close(module_broker: BrokerProcess, bystander: Bystander) -> None:
    s = connect(module_broker)
    s.sendall(struct.pack(">i", 100) + header_v1(API_METADATA, 1, 1)[:6])
    s.close()
    bystander.assert_healthy("truncated")


CLOSING_INPUTS = {
    "negative-size": struct.pack(">i", -1) + b"\x00" * 16,
    "very-negative-size": struct.pack(">i", -2_000_000_000) + b"\x00" * 16,
    # 200 MB announced (> 100 MB socket.request.max.bytes), little sent: closed on the size alone.
    "over-socket-request-max-bytes": struct.pack(">i", 200 * 1024 * 1024) + header_v1(API_METADATA, 1, 7),
    "int32-max-size": struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
    "http-request": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # "GET " reads as a 1.2 GB size
    "frame-shorter-than-a-header": frame(b"abc"),
    "unknown-api-key": frame(header_v1(9999, 0, 42) + b"\x00" * 8),
    "unsupported-produce-version": frame(header_v1(API_PRODUCE, 99, 43) + b"\x00" * 8),
    "unsupported-metadata-version": frame(header_v1(API_METADATA, 200, 44) + b"\x00" * 8),
    # 2^32 - 2 topics in 13 bytes: kio alone would reserve 32 GiB and abort the process.
    "huge-array-count": frame(header_v2(API_METADATA, 12, 45) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8),
    "huge-legacy-array-count": frame(header_v1(API_METADATA, 4, 46) + struct.pack(">i", 2**31 - 1) + b"\x00" * 8),
}


@pytest.mark.parametrize("payload", list(CLOSING_INPUTS.values()), ids=list(CLOSING_INPUTS))
def test_bad_frame_closes_only_that_connection(module_broker: BrokerProcess, bystander: Bystander, payload: bytes, request: pytest.FixtureRequest) -> None:
    other = connect(module_broker)  # an idle connection opened before: it must survive
    s = connect(module_broker)
    send_ignoring_reset(s, payload)
    closed, data = closed_by_broker(s)
    s.close()
    assert closed and data == b"", (closed, data)
    other.sendall(frame(header_v1(API_VERSIONS, 0, 77)))
    error, keys = parse_api_versions_v0(read_response(other, 77))
    assert error == 0 and API_PRODUCE in keys
    other.close()
    bystander.assert_healthy(request.node.callspec.id)


def test_garbage_body_gets_error_or_close(module_broker: BrokerProcess, bystander: Bystander) -> None:
    rng = random.Random(1234)
    for attempt in range(5):
        s = connect(module_broker)
        # A real header (Metadata v1) followed by a body that cannot parse: an array of
        # a billion topics, then noise.
        body = struct.pack(">i", 1_000_000_000) + bytes(rng.randrange(256) for _ in range(40))
        send_ignoring_reset(s, frame(header_v1(API_METADATA, 1, 100 + attempt) + body))
        closed, data = closed_by_broker(s)
        s.close()
        if not closed:
            # Not closed: then it must have answered with a response frame for our request.
            assert len(data) >= 8 and struct.unpack_from(">ii", data) [1] == 100 + attempt, data[:64]
    bystander.assert_healthy("garbage-body")


def test_api_versions_unsupported_version_gets_v0_body(module_broker: BrokerProcess, bystander: Bystander) -> None:
    s = connect(module_broker)
    body = compact_string("bad-input-test") + compact_string("1.0") + uvarint(0)
    s.sendall(frame(header_v2(API_VERSIONS, 127, 5) + body))
    error, keys = parse_api_versions_v0(read_response(s, 5))
    assert error == UNSUPPORTED_VERSION
    # KIP-511, as Kafka 4.4 answers: ApiVersions' own range alone, for the client's retry.
    assert list(keys) == [API_VERSIONS] and keys[API_VERSIONS][0] == 0 and keys[API_VERSIONS][1] >= 3

    # The connection stays usable: a client retries at a version the broker listed.
    s.sendall(frame(header_v1(API_VERSIONS, 0, 6)))
    error0, keys0 = parse_api_versions_v0(read_response(s, 6))
    assert error0 == 0 and keys0[API_VERSIONS] == keys[API_VERSIONS]
    assert API_PRODUCE in keys0 and API_METADATA in keys0
    assert all(lo <= hi for lo, hi in keys0.values())
    s.close()
    bystander.assert_healthy("api-versions-v127")


def test_produce_with_bad_crc_gets_corrupt_message(module_broker: BrokerProcess, bystander: Bystander) -> None:
    now = int(time.time() * 1000)
    good = record_batch([(b"k1", b"hand-built-1"), (None, b"hand-built-2")], now)
    s = connect(module_broker)
    # The hand-built batch is valid: the broker takes it (this also checks the builder).
    s.sendall(produce_v3(bystander.topic, 0, good, 11))
    [(topic, partition, error, base_offset)] = parse_produce_v3(read_response(s, 11))
    assert (topic, partition, error, base_offset) == (bystander.topic, 0, 0, len(bystander.expected))
    bystander.expected += [b"hand-built-1", b"hand-built-2"]
    (m1,) = poll_messages(bystander.consumer, 1)
    (m2,) = poll_messages(bystander.consumer, 1)
    assert [(m1.key(), m1.value()), (m2.key(), m2.value())] == [(b"k1", b"hand-built-1"), (None, b"hand-built-2")]

    victim = unique_topic("victim")
    create_topic(module_broker.bootstrap, victim)
    corrupt = bytearray(record_batch([(b"k1", b"will-be-flipped")], now))
    corrupt[-5] ^= 0xFF  # inside the value: covered by the CRC, sizes unchanged
    for acks in (-1, 1):
        s.sendall(produce_v3(victim, 0, bytes(corrupt), 20 + acks, acks=acks))
        [(topic, partition, error, _)] = parse_produce_v3(read_response(s, 20 + acks))
        assert (topic, partition, error) == (victim, 0, CORRUPT_MESSAGE)
    s.close()
    assert watermarks(module_broker.bootstrap, victim) == (0, 0)
    bystander.assert_healthy("bad-crc")


def invalid_batches(now: int) -> dict[str, bytes]:
    one = [(b"k", b"v")]
    return {
        # Kafka's ProduceRequest.validateRecords: exactly one v2 batch per partition.
        "two-batches": record_batch(one, now) + record_batch(one, now),
        "magic-1": record_batch(one, now, magic=1),
        "no-batch": b"",
        # Kafka's LogValidator.validateBatch: the offset range must match the record count.
        "offset-range-beyond-count": record_batch([(None, b"a"), (None, b"b")], now, last_offset_delta=4),
        "zero-count": record_batch(one, now, last_offset_delta=0, count=0),
    }


@pytest.mark.parametrize("case", ["two-batches", "magic-1", "no-batch", "offset-range-beyond-count", "zero-count"])
def test_produce_with_invalid_batch_gets_invalid_record(module_broker: BrokerProcess, bystander: Bystander, case: str) -> None:
    victim = unique_topic("victim")
    create_topic(module_broker.bootstrap, victim)
    before = [b"v0", b"v1", b"v2"]
    produce_acked(module_broker.bootstrap, victim, before)
    s = connect(module_broker)
    s.sendall(produce_v3(victim, 0, invalid_batches(int(time.time() * 1000))[case], 31))
    [(topic, partition, error, _)] = parse_produce_v3(read_response(s, 31))
    s.close()
    marks = watermarks(module_broker.bootstrap, victim)
    log_after = (marks, [m.value() for m in consume(module_broker.bootstrap, victim, 0, 0, marks[1])])
    bystander.assert_healthy(case)
    assert (topic, partition, error) == (victim, 0, INVALID_RECORD), f"{case}: error {error}, log after: {log_after}"
    assert log_after == ((0, 3), before), f"{case}: the log changed: {log_after}"


def test_acks_zero_produce_with_bad_crc_closes_connection(module_broker: BrokerProcess, bystander: Bystander) -> None:
    """With acks=0 there is no response to carry the error: Kafka closes the connection instead."""
    victim = unique_topic("victim")
    create_topic(module_broker.bootstrap, victim)
    corrupt = bytearray(record_batch([(b"k1", b"will-be-flipped")], int(time.time() * 1000)))
    corrupt[-5] ^= 0xFF
    s = connect(module_broker)
    s.sendall(produce_v3(victim, 0, bytes(corrupt), 41, acks=0))
    closed, data = closed_by_broker(s)
    s.close()
    assert watermarks(module_broker.bootstrap, victim) == (0, 0)
    bystander.assert_healthy("acks0-bad-crc")
    assert closed and data == b"", (closed, data)


def test_many_random_garbage_connections_while_producing(module_broker: BrokerProcess, bystander: Bystander) -> None:
    rng = random.Random(42)
    payloads = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(60)]
    errors: list[BaseException] = []

    def spray(chunk: list[bytes]) -> None:
        try:
            for p in chunk:
                s = connect(module_broker)
                send_ignoring_reset(s, p)
                s.close()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=spray, args=(payloads[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for i in range(20):
        bystander.produce(f"during-spray-{i}".encode())
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    for _ in range(20):
        poll_messages(bystander.consumer, 1)
    bystander.assert_healthy("garbage-spray")


def test_list_offsets_with_null_topics_closes_with_one_warning(module_broker: BrokerProcess, bystander: Bystander) -> None:
    """The fuzzer's first find: topics null (-1, which the spec does not allow) reached the
    handler as None and failed with a TypeError traceback at error level. Kafka's reader
    refuses it and the connection is closed; one warning names the request and the reason."""
    correlation_id = 0x5EED
    s = connect(module_broker)
    s.sendall(frame(header_v1(API_LIST_OFFSETS, 1, correlation_id) + struct.pack(">ii", -1, -1)))
    closed, data = closed_by_broker(s)
    s.close()
    assert closed and data == b"", (closed, data)
    bystander.assert_healthy("list-offsets-null-topics")
    refused = [e for e in module_broker.events_named("connection.closed_bad_request") if e.get("correlation_id") == correlation_id]
    assert len(refused) == 1, refused
    assert refused[0]["level"] == "warning" and "null array" in refused[0]["reason"], refused
    assert (refused[0]["api_key"], refused[0]["api_version"], refused[0]["peer"].split(":")[0]) == (API_LIST_OFFSETS, 1, "127.0.0.1")
    assert [e for e in module_broker.log_events() if e.get("level") in ("error", "critical")] == []


def test_requests_before_a_refused_one_are_answered_then_closed(module_broker: BrokerProcess, bystander: Bystander) -> None:
    """Kafka reads one request at a time per connection, so a client that pipelines a good
    request and then garbage gets the good one's answer before the close. The fuzzer saw the
    broker drop such answers: the refusal closed the connection with answers still owed."""
    s = connect(module_broker)
    s.sendall(frame(header_v1(API_VERSIONS, 0, 61)) + frame(header_v1(API_LIST_OFFSETS, 1, 62) + struct.pack(">ii", -1, -1)))
    error, keys = parse_api_versions_v0(read_response(s, 61))
    assert error == 0 and API_PRODUCE in keys
    closed, data = closed_by_broker(s)
    s.close()
    assert closed and data == b"", (closed, data)
    bystander.assert_healthy("answer-then-close")


def test_request_before_an_oversized_frame_is_answered_then_closed(module_broker: BrokerProcess, bystander: Bystander) -> None:
    s = connect(module_broker)
    s.sendall(frame(header_v1(API_VERSIONS, 0, 63)) + struct.pack(">i", -1) + b"\x00" * 8)
    error, keys = parse_api_versions_v0(read_response(s, 63))
    assert error == 0 and API_PRODUCE in keys
    closed, data = closed_by_broker(s)
    s.close()
    assert closed and data == b"", (closed, data)
    bystander.assert_healthy("answer-then-oversized")


def test_acks_zero_failure_after_a_waiting_request_still_answers_it(module_broker: BrokerProcess, bystander: Bystander) -> None:
    """A CreateTopics (answered later, by the controller) then an acks=0 produce with a bad CRC,
    pipelined: the produce's failure closes the connection, but only after the CreateTopics
    answer is out. The fuzzer saw that answer dropped: both became ready in one write pass and
    the close discarded what was queued but not yet sent."""
    victim = unique_topic("victim")
    create_topic(module_broker.bootstrap, victim)
    created = unique_topic("created")
    create_v2 = struct.pack(">i", 1) + kstring(created) + struct.pack(">ihii", 1, 1, 0, 0) + struct.pack(">ib", 10_000, 0)
    corrupt = bytearray(record_batch([(b"k1", b"will-be-flipped")], int(time.time() * 1000)))
    corrupt[-5] ^= 0xFF
    s = connect(module_broker)
    s.sendall(frame(header_v1(19, 2, 71) + create_v2) + produce_v3(victim, 0, bytes(corrupt), 72, acks=0))
    body = read_response(s, 71)
    (throttle, count) = struct.unpack_from(">ii", body)
    assert count == 1
    closed, data = closed_by_broker(s)
    s.close()
    assert closed and data == b"", (closed, data)
    bystander.assert_healthy("acks0-after-create-topics")
