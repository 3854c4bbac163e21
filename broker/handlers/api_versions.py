"""ApiVersions: the broker's supported version ranges, and the KIP-511 fallback."""

from __future__ import annotations

import datetime
import struct
import sys

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16
from kio.static.protocol import ResponsePayload

from protocol.api_keys import SUPPORTED_APIS, ApiRange, response_schema
from protocol.frame import encode_size
from protocol.headers import response_header


def api_versions_response(version: int, apis: dict[int, ApiRange] = SUPPORTED_APIS) -> ResponsePayload:
    """The ranges of the listener's API table: a controller listener lists only the controller's APIs."""
    schema = response_schema(18, version)
    ApiVersion = sys.modules[schema.__module__].ApiVersion
    keys = tuple(
        ApiVersion(api_key=i16(r.key), min_version=i16(r.min_version), max_version=i16(r.max_version))
        for r in sorted(apis.values(), key=lambda r: r.key)
    )
    kwargs: dict[str, object] = {"error_code": ErrorCode.none, "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return schema(**kwargs)


def unsupported_version_fallback(correlation_id: int, apis: dict[int, ApiRange] = SUPPORTED_APIS) -> bytes:
    """KIP-511: a complete v0 body with UNSUPPORTED_VERSION, so the client can retry at a version we know."""
    ranges = sorted(apis.values(), key=lambda r: r.key)
    body = struct.pack(">hi", ErrorCode.unsupported_version.value, len(ranges))
    body += b"".join(struct.pack(">hhh", r.key, r.min_version, r.max_version) for r in ranges)
    header = response_header(correlation_id, 0)
    return encode_size(len(header) + len(body)) + header + body
