"""Decode request bodies and encode response bodies through kio's entities (Produce and Fetch requests by hand)."""

from __future__ import annotations

import io
from functools import cache
from typing import Any, Callable

from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from protocol.api_keys import ApiKey, request_schema, response_header_version, response_schema
from protocol.fetch_request import FetchRequest, read_fetch_request
from protocol.frame import encode_size
from protocol.headers import InvalidRequest, response_header
from protocol.length_guard import LengthError, check_lengths
from protocol.produce_request import ProduceRequest, read_produce_request


@cache
def _reader(api_key: int, version: int) -> Callable[[Any, int], Any]:
    return entity_reader(request_schema(api_key, version))


@cache
def _writer(schema: type) -> Callable[[Any, Any], None]:
    return entity_writer(schema)


def decode_request(api_key: int, version: int, frame: bytearray | memoryview, offset: int) -> RequestPayload | ProduceRequest | FetchRequest:
    """The request body as a kio entity; Produce and Fetch by their own readers (protocol/produce_request.py, protocol/fetch_request.py)."""
    if api_key == ApiKey.PRODUCE:
        return read_produce_request(frame, offset, version)
    if api_key == ApiKey.FETCH:
        return read_fetch_request(frame, offset, version)
    view = memoryview(frame).toreadonly()
    try:
        check_lengths(request_schema(api_key, version), view, offset)
    except LengthError as e:
        raise InvalidRequest(f"cannot decode api {api_key} v{version}: {e}") from None
    try:
        request, _ = _reader(api_key, version)(view, offset)
    except InvalidRequest:
        raise
    except Exception as e:  # kio raises several types for malformed input
        raise InvalidRequest(f"cannot decode api {api_key} v{version}: {e}") from e
    return request


def encode_body(body: ResponsePayload) -> bytes:
    out = io.BytesIO()
    _writer(type(body))(out, body)
    return out.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, body: ResponsePayload) -> bytes:
    """A whole response frame: size, header and body."""
    header = response_header(correlation_id, response_header_version(api_key, version))
    payload = encode_body(body)
    return encode_size(len(header) + len(payload)) + header + payload


def response_frame(api_key: int, version: int, correlation_id: int, payload: bytes) -> list[bytes]:
    """A whole response frame around a body encoded earlier (sent as two chunks, not copied)."""
    header = response_header(correlation_id, response_header_version(api_key, version))
    return [encode_size(len(header) + len(payload)) + header, payload]


def response_type(api_key: int, version: int) -> type[ResponsePayload]:
    return response_schema(api_key, version)
