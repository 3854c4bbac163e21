"""Hundreds of clients connecting at once are all accepted and answered, wave after wave.

The accept loop takes a whole burst from the listen backlog per wake-up, then goes back to
waiting; a second wave checks that it does.
"""

from __future__ import annotations

import io
import socket
import struct

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from broker.wire_client import recv_exact
from tests.integration.conftest import BrokerProcess

CLIENTS = 500
# Per socket operation; generous for a loaded 2-core machine, where a wave once sat seconds in
# the backlog while the accept loop took one connection per loop iteration.
WAVE_TIMEOUT_S = 20.0


def api_versions_frame(correlation_id: int) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out,
        RequestHeader(
            request_api_key=i16(18),
            request_api_version=i16(3),
            correlation_id=i32(correlation_id),
            client_id="many-conns",
        ),
    )
    entity_writer(ApiVersionsRequest)(
        out,
        ApiVersionsRequest(
            client_software_name="many-conns", client_software_version="1"
        ),
    )
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def wave(port: int, first_correlation_id: int) -> None:
    """Connect every client (the kernel completes them into the backlog), send one request on
    each, then read every answer."""
    socks = [
        socket.create_connection(("127.0.0.1", port), timeout=WAVE_TIMEOUT_S)
        for _ in range(CLIENTS)
    ]
    try:
        for i, sock in enumerate(socks):
            sock.sendall(api_versions_frame(first_correlation_id + i))
        for i, sock in enumerate(socks):
            (size,) = struct.unpack(">i", recv_exact(sock, 4))
            (correlation_id,) = struct.unpack_from(">i", recv_exact(sock, size))
            assert correlation_id == first_correlation_id + i
    finally:
        for sock in socks:
            sock.close()


def test_bursts_of_connections_are_all_served(broker: BrokerProcess) -> None:
    wave(broker.port, 0)
    wave(broker.port, CLIENTS)
