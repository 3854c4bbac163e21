"""Malformed input: the broker answers with a Kafka error or closes that one connection,
keeps serving everyone else, and its logs stay intact."""

from __future__ import annotations

import io
import socket
import struct

import crc32c
import pytest
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_writer

from protocol.records import build_batch
from tests.integration.test_clients import confluent_consume, create_topic
from tests.integration.test_durability import produce_acked


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.settimeout(5)
    return s


def request(api_key: int, version: int, correlation: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_frame(s: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return recv_exact(s, size)


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def is_closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (ConnectionError, socket.timeout):
        return True


@pytest.fixture
def healthy(shared_broker, topic_name: str):  # type: ignore[no-untyped-def]
    create_topic(shared_broker.bootstrap, topic_name)
    produce_acked(shared_broker.bootstrap, topic_name, [b"before"])

    def check() -> None:
        produce_acked(shared_broker.bootstrap, topic_name, [b"after"])
        values = [m.value() for m in confluent_consume(shared_broker.bootstrap, topic_name, 0, 0, 2, timeout_s=10)]
        assert values[0] == b"before" and values[-1] == b"after"

    return check


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 100) + b"short",  # truncated frame, then close
        struct.pack(">i", -5) + b"xxxx",  # negative size
        struct.pack(">i", 2**31 - 1) + b"xxxx",  # absurd size
        struct.pack(">i", 3) + b"abc",  # frame shorter than a header
        bytes(range(256)) * 4,  # garbage
        request(9999, 0, 1),  # unknown API key
        request(0, 99, 1),  # unsupported Produce version
        request(3, 12, 1, b"\xff\xff\xff"),  # Metadata body that does not decode
    ],
)
def test_bad_frames_close_only_that_connection(shared_broker, healthy, payload: bytes) -> None:
    bystander = connect(shared_broker.bootstrap)
    s = connect(shared_broker.bootstrap)
    s.sendall(payload)
    if payload.startswith(struct.pack(">i", 100)):
        s.shutdown(socket.SHUT_WR)
    assert is_closed(s)
    bystander.sendall(request(18, 0, 5))
    assert struct.unpack(">ih", read_frame(bystander)[:6]) == (5, 0)
    healthy()


def test_api_versions_unknown_version_gets_full_v0_fallback(shared_broker) -> None:
    s = connect(shared_broker.bootstrap)
    s.sendall(request(18, 127, 9))
    frame = read_frame(s)
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation, error) == (9, 35) and count >= 15
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0] for i in range(count)}
    assert {0, 1, 2, 3, 18, 19} <= keys and len(frame) == 10 + 6 * count
    s.sendall(request(18, 0, 10))  # the same connection carries on
    assert struct.unpack(">ih", read_frame(s)[:6]) == (10, 0)


def test_bad_crc_is_corrupt_message_and_log_stays_intact(shared_broker, healthy, topic_name: str) -> None:
    batch = bytearray(build_batch([(b"k", b"value", (), 1000)]))
    batch[-3] ^= 0xFF  # inside the value: covered by the CRC
    assert crc32c.crc32c(bytes(batch[21:])) != struct.unpack_from(">I", batch, 17)[0]
    req = ProduceRequest(transactional_id=None, acks=1, timeout=__import__("datetime").timedelta(seconds=5),
                         topic_data=(TopicProduceData(name=topic_name, partition_data=(PartitionProduceData(index=0, records=bytes(batch)),)),))
    buf = io.BytesIO()
    entity_writer(ProduceRequest)(buf, req)
    s = connect(shared_broker.bootstrap)
    s.sendall(request(0, 7, 11, buf.getvalue()))
    frame = read_frame(s)
    # v7 response: correlation, topics[1]: name, partitions[1]: index, error_code ...
    name_len = struct.unpack_from(">h", frame, 8)[0]
    index, error = struct.unpack_from(">ih", frame, 10 + name_len + 4)
    assert (index, error) == (0, 2)  # CORRUPT_MESSAGE
    healthy()
