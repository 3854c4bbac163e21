"""A minimal Kafka wire client for tests: one kio request entity out, its response entity back."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from protocol.api_keys import is_flexible, response_header_version, response_schema

TIMEOUT_S = 10.0


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def request(bootstrap: str, body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> Any:
    """Send ``body`` (a kio request entity; its class gives the API key and version) and decode the answer."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    header_cls = RequestHeaderV2 if is_flexible(api_key, version) else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(body))(out, body)
    payload = out.getvalue()
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        frame = memoryview(_recv_exact(sock, size)).toreadonly()
    (got_correlation,) = struct.unpack_from(">i", frame)
    assert got_correlation == correlation_id
    offset = 4
    if response_header_version(api_key, version) >= 1:
        offset += 1  # no tagged fields in our response headers: one zero count byte
    response, _ = entity_reader(response_schema(api_key, version))(frame, offset)
    return response
