"""ApiVersions: the broker's supported version ranges, the KIP-511 fallback, and v5's check of
the cluster and node the client means to reach (KIP-1242)."""

from __future__ import annotations

import datetime
import struct
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i64
from kio.static.protocol import ResponsePayload

from protocol.api_keys import SUPPORTED_APIS, ApiKey, ApiRange, response_schema
from protocol.entities import build
from protocol.frame import encode_size
from protocol.headers import response_header


@dataclass(frozen=True, slots=True)
class FeatureInfo:
    """What a broker's ApiVersions (v3+) says of features: the levels it supports, and the levels
    finalized in the metadata log with the metadata offset they are as of (their epoch)."""

    supported: Mapping[str, tuple[int, int]]
    finalized: Mapping[str, int]
    finalized_epoch: int


def api_versions_response(version: int, apis: dict[int, ApiRange] = SUPPORTED_APIS, features: FeatureInfo | None = None) -> ResponsePayload:
    """The ranges of the listener's API table: a controller listener lists only the controller's APIs."""
    schema = response_schema(18, version)
    module = sys.modules[schema.__module__]
    keys = tuple(
        module.ApiVersion(api_key=i16(r.key), min_version=i16(r.min_version), max_version=i16(r.max_version))
        for r in sorted(apis.values(), key=lambda r: r.key)
    )
    kwargs: dict[str, object] = {"error_code": ErrorCode.none, "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = datetime.timedelta(0)
    if version >= 3 and features is not None:
        # Before v4 a supported range starting at 0 is left out: older clients refuse it.
        kwargs["supported_features"] = tuple(
            module.SupportedFeatureKey(name=name, min_version=i16(low), max_version=i16(high))
            for name, (low, high) in sorted(features.supported.items())
            if version >= 4 or low > 0
        )
        kwargs["finalized_features_epoch"] = i64(features.finalized_epoch)
        kwargs["finalized_features"] = tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=i16(level), min_version_level=i16(level))
            for name, level in sorted(features.finalized.items())
            if level > 0
        )
    return schema(**kwargs)


# KIP-1242: from v5 a client names the cluster and node it means to reach, both or neither.
FIRST_TARGET_VERSION = 5
NO_NODE_ID = -1


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The cluster and node a broker is: what a v5 request's ClusterId and NodeId must name."""

    cluster_id: str
    node_id: int


def api_versions_answer(
    version: int, request: Any, apis: dict[int, ApiRange] = SUPPORTED_APIS, features: FeatureInfo | None = None, identity: NodeIdentity | None = None
) -> ResponsePayload:
    """Kafka 4.4's handleApiVersionsRequest. v5 naming only one of cluster and node is invalid
    (ApiVersionsRequest.isValid: INVALID_REQUEST, on any listener). A broker (``identity``) that
    is not the cluster and node named answers REBOOTSTRAP_REQUIRED, so the client looks for the
    cluster again; a controller listener does not check (ControllerApis), nor does a SASL
    listener before the client authenticated (the authenticator answers: SaslServerAuthenticator),
    nor a request that names neither."""
    if version >= FIRST_TARGET_VERSION:
        cluster_id, node_id = request.cluster_id, request.node_id
        if (cluster_id is None) != (node_id == NO_NODE_ID):
            return api_versions_error(version, ErrorCode.invalid_request)
        if identity is not None and cluster_id is not None and (cluster_id != identity.cluster_id or node_id != identity.node_id):
            return api_versions_error(version, ErrorCode.rebootstrap_required)
    return api_versions_response(version, apis, features)


def api_versions_error(version: int, error: ErrorCode) -> ResponsePayload:
    """Kafka's ApiVersionsRequest.getErrorResponse for an error other than UNSUPPORTED_VERSION:
    the error and (v1+) the throttle time, no API ranges, no features."""
    return build(response_schema(18, version), error_code=error, api_keys=(), throttle_time=0)


def unsupported_version_fallback(correlation_id: int, apis: dict[int, ApiRange] = SUPPORTED_APIS) -> bytes:
    """KIP-511: a complete v0 body with UNSUPPORTED_VERSION, so the client can retry at a version we
    know. As Kafka's ApiVersionsRequest.getErrorResponse, it lists ApiVersions' own range alone:
    the retry's answer lists the rest."""
    ranges = [apis[ApiKey.API_VERSIONS]]
    body = struct.pack(">hi", ErrorCode.unsupported_version.value, len(ranges))
    body += b"".join(struct.pack(">hhh", r.key, r.min_version, r.max_version) for r in ranges)
    header = response_header(correlation_id, 0)
    return encode_size(len(header) + len(body)) + header + body
