"""The console's pure parts: bootstrap parsing, how bytes are shown, a classic member's
assignment bytes, and the HTTP routes that need no cluster (tests/integration/test_console.py
runs the whole console against a real cluster)."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment, TopicPartition
from kio.serial import entity_writer
from kio.static.primitive import i32

from broker.console.collector import MAX_SHOWN_BYTES, Collector, decode_assignment, parse_bootstrap, render_bytes
from broker.console.server import ConsoleServer


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("127.0.0.1:9092, localhost:9093,") == [("127.0.0.1", 9092), ("localhost", 9093)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "host", "host:port"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_render_bytes() -> None:
    assert render_bytes(None) is None
    assert render_bytes("é".encode()) == {"size": 2, "text": "é", "hex": "c3a9", "truncated": False}
    assert render_bytes(b"\xff\x00")["text"] is None  # type: ignore[index]
    big = render_bytes(b"a" * (MAX_SHOWN_BYTES - 1) + "é".encode() + b"b")
    assert big is not None and big["truncated"] and big["text"] == "a" * (MAX_SHOWN_BYTES - 1) and big["size"] == MAX_SHOWN_BYTES + 2


def test_decode_assignment() -> None:
    out = io.BytesIO()
    out.write((3).to_bytes(2, "big"))
    entity_writer(ConsumerProtocolAssignment)(out, ConsumerProtocolAssignment(assigned_partitions=(TopicPartition(topic="t", partitions=(i32(2), i32(0))),), user_data=None))
    assert decode_assignment(out.getvalue()) == [("t", [0, 2])]
    assert decode_assignment(b"") == [] and decode_assignment(b"\x00\x00\xff") == []


def test_routes_without_a_cluster() -> None:
    server = ConsoleServer(Collector([("127.0.0.1", 1)]))

    async def run() -> None:
        status, kind, body = await server.route("GET", "/")
        assert status == 200 and kind.startswith("text/html") and b"/static/app.js" in body
        assert (await server.route("GET", "/static/app.js"))[0] == 200
        assert (await server.route("GET", "/static/../server.py"))[0] == 404
        assert (await server.route("POST", "/api/state"))[0] == 405
        status, _, body = await server.route("GET", "/api/brokers")
        assert status == 200 and json.loads(body) == []
        status, _, body = await server.route("GET", "/api/messages")
        assert status == 400 and "topic" in json.loads(body)["error"]
        status, _, body = await server.route("GET", "/api/messages?topic=t")
        assert status == 404 and json.loads(body)["error"] == "no topic t"

    asyncio.run(run())
