"""Many requests in flight on one connection: answers leave in request order whether a handler
answers at once or later, and a client that stops reading gets every byte once it reads again."""

from __future__ import annotations

import datetime
import io
import struct
import time

from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i64

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, produce_acked, unique_topic
from tests.integration.test_bad_input import API_VERSIONS, connect, frame, header_v1, recv_exact

API_FETCH = 1


def fetch_v4(topic: str, offset: int, correlation_id: int, max_wait_ms: int, max_bytes: int = 1 << 20) -> bytes:
    request = FetchRequest(
        replica_id=i32(-1),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(max_bytes)),)),),
    )
    body = io.BytesIO()
    entity_writer(FetchRequest)(body, request)
    return frame(header_v1(API_FETCH, 4, correlation_id) + body.getvalue())


def api_versions_v0(correlation_id: int) -> bytes:
    return frame(header_v1(API_VERSIONS, 0, correlation_id))


def read_frame(s: object) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))  # type: ignore[arg-type]
    return recv_exact(s, size)  # type: ignore[arg-type]


def test_a_waiting_answer_holds_back_the_ones_behind_it(module_broker: BrokerProcess) -> None:
    topic = unique_topic("pipeline")
    create_topic(module_broker.bootstrap, topic)
    with connect(module_broker) as s:
        # A fetch at the log end long-polls for 400 ms; the ApiVersions behind it answers at once
        # inside the broker, yet must reach the client second.
        started = time.monotonic()
        s.sendall(fetch_v4(topic, 0, 1, max_wait_ms=400) + api_versions_v0(2) + api_versions_v0(3))
        ids = [struct.unpack_from(">i", read_frame(s))[0] for _ in range(3)]
        assert ids == [1, 2, 3]
        assert time.monotonic() - started >= 0.35


def test_a_client_that_stops_reading_gets_every_byte_later(module_broker: BrokerProcess) -> None:
    topic = unique_topic("slow-reader")
    create_topic(module_broker.bootstrap, topic)
    produce_acked(module_broker.bootstrap, topic, [bytes([i % 251]) * 10_000 for i in range(400)])  # ~4 MB
    requests = 24
    with connect(module_broker) as s:
        # ~24 MB of answers against a few MB of socket buffers: the broker's sendfile and
        # sendmsg hit EAGAIN, and past queued.max.requests it stops reading requests too.
        s.sendall(b"".join(fetch_v4(topic, 0, i, max_wait_ms=0) for i in range(requests)))
        time.sleep(1.0)
        bodies = [read_frame(s) for _ in range(requests)]
    assert [struct.unpack_from(">i", b)[0] for b in bodies] == list(range(requests))
    assert len(bodies[0]) > 900_000
    assert all(b[4:] == bodies[0][4:] for b in bodies)  # the same bytes each time, none lost
