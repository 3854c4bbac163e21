"""A minimal Kafka wire client: one kio request entity out, its response entity back.

For the CLI's requests that the confluent-kafka AdminClient cannot send as needed (a
DescribeConfigs naming its keys), and for the tests that speak the protocol directly.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from protocol.api_keys import is_flexible, response_header_version, response_schema

TIMEOUT_S = 10.0


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def request(bootstrap: str, body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> Any:
    """Send ``body`` (a kio request entity; its class gives the API key and version) and decode the answer."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        return exchange(sock, body, correlation_id, client_id)


def encode_request(body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    """A whole request frame: size, header and ``body``."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    header_cls = RequestHeaderV2 if is_flexible(api_key, version) else RequestHeaderV1
    out = io.BytesIO()
    header = header_cls(request_api_key=i16(api_key), request_api_version=i16(version), correlation_id=i32(correlation_id), client_id=client_id)
    entity_writer(header_cls)(out, header)
    entity_writer(type(body))(out, body)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def exchange(sock: socket.socket, body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> Any:
    """``request`` on a connection the caller holds (a SASL exchange spans several requests)."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    sock.sendall(encode_request(body, correlation_id, client_id))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = memoryview(recv_exact(sock, size)).toreadonly()
    (got_correlation,) = struct.unpack_from(">i", frame)
    if got_correlation != correlation_id:
        raise ConnectionError(f"response for correlation id {got_correlation}, expected {correlation_id}")
    offset = 4
    if response_header_version(api_key, version) >= 1:
        offset += 1  # no tagged fields in our response headers: one zero count byte
    response, _ = entity_reader(response_schema(api_key, version))(frame, offset)
    return response
