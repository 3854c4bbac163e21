"""EnvelopeHandler: a request a broker forwards to the controller on its client's behalf.

Kafka's brokers forward admin requests in an Envelope (KIP-590) that carries the request's own
bytes, the client's principal (DefaultPrincipalData, version-prefixed) and the client's address;
the controller answers the inner request as if that client had sent it, authorized for that
principal, and wraps the answer the same way. Only a principal with CLUSTER_ACTION (a broker)
may send one, and only forwardable APIs may be inside (Kafka's EnvelopeUtils): a malformed
principal is PRINCIPAL_DESERIALIZATION_FAILURE, an inner header that cannot be read or an API
the controller does not serve at that version UNSUPPORTED_VERSION, an API that is never
forwarded or an unreadable address INVALID_REQUEST, each in the Envelope's own error code.

As in Kafka 4.4, the inner request is counted in RequestMetrics as if its client had sent it
(under its own name, version and size, its answer's error codes too) and the Envelope that
carried it not at all; a refused Envelope is counted under Envelope (broker/metrics/request_metrics.py).
"""

from __future__ import annotations

import inspect
import io
import ipaddress
import struct
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

import structlog
from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from broker.kafka_apis import RequestContext
from broker.metrics.request_errors import ErrorCounts, count_response
from broker.network import ClientInfo, Response
from protocol.api_keys import CONTROLLER_APIS, ApiKey, is_supported
from protocol.headers import InvalidRequest, parse_request_header
from protocol.messages import decode_request, encode_response

if TYPE_CHECKING:
    from broker.metrics.request_metrics import RequestChannelMetrics

log = structlog.get_logger(__name__)

NOT_LEADER = ErrorCode.not_leader_or_follower

# Kafka's forwardable APIs that kbroker's controller serves: what a broker forwards to it, a
# kbroker broker as itself, a Kafka broker in an Envelope.
FORWARDABLE_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.DESCRIBE_QUORUM,
        ApiKey.UPDATE_FEATURES,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.UNREGISTER_CONTROLLER,
        ApiKey.ADD_RAFT_VOTER,
        ApiKey.REMOVE_RAFT_VOTER,
    }
)
_VERSION_PREFIX = struct.Struct(">h")
_read_principal = entity_reader(DefaultPrincipalData)
_write_principal = entity_writer(DefaultPrincipalData)

InnerHandler = Callable[[RequestContext, Any], Any]


class EnvelopeError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_principal(data: bytes | None) -> str:
    """`Type:name` from DefaultKafkaPrincipalBuilder's serialized form."""
    if data is None or len(data) < _VERSION_PREFIX.size:
        raise EnvelopeError(ErrorCode.principal_deserialization_failure, "Failed to deserialize client principal from envelope")
    (version,) = _VERSION_PREFIX.unpack_from(data)
    try:
        if version != 0:
            raise ValueError(f"principal data version {version}")
        principal, _ = _read_principal(memoryview(data).toreadonly(), _VERSION_PREFIX.size)
    except Exception as e:  # kio raises several types for bytes that are not a principal
        raise EnvelopeError(ErrorCode.principal_deserialization_failure, f"Failed to deserialize client principal from envelope: {e}") from None
    return f"{principal.type_}:{principal.name}"


def serialize_principal(principal: str) -> bytes:
    """What a forwarding broker puts in an Envelope (the inverse of parse_principal)."""
    kind, _, name = principal.partition(":")
    out = io.BytesIO()
    out.write(_VERSION_PREFIX.pack(0))
    _write_principal(out, DefaultPrincipalData(type_=kind, name=name, token_authenticated=False))
    return out.getvalue()


def parse_client_address(data: bytes) -> str:
    try:
        return str(ipaddress.ip_address(data))
    except ValueError:
        raise EnvelopeError(ErrorCode.invalid_request, "Failed to parse client address from envelope") from None


class LocalController(Protocol):
    async def handle(self, body: Any) -> Any: ...


class LocalControllerChannel:
    """A ControllerChannel whose controller is this process: what ForwardToControllerHandler
    authorizes for an Envelope's principal goes straight to ControllerApis."""

    def __init__(self, apis: LocalController) -> None:
        self._apis = apis

    def send(self, body: Any, timeout_ms: int | None = None) -> Awaitable[Any]:
        return self._apis.handle(body)


class EnvelopeHandler:
    """``handlers``: how the controller answers each forwardable API for the inner principal
    (authorized for it, as a controller listener's own request would be). ``request_metrics``:
    the listener's, where the inner request is counted."""

    def __init__(self, handlers: dict[ApiKey, InnerHandler], request_metrics: RequestChannelMetrics | None = None) -> None:
        self._handlers = handlers
        self._request_metrics = request_metrics

    def __call__(self, ctx: RequestContext, request: Any) -> EnvelopeResponse | Awaitable[Response]:
        # Unwrapped during dispatch, as Kafka's EnvelopeUtils does on the request handler thread:
        # the connection's timing of this request then goes to the inner request's metrics.
        try:
            principal = parse_principal(request.request_principal)
            address = parse_client_address(request.client_host_address)
            frame = bytearray(request.request_data)
            try:
                header = parse_request_header(frame)
            except InvalidRequest as e:
                raise EnvelopeError(ErrorCode.unsupported_version, f"Failed to parse request header from envelope: {e}") from None
            key = header.api_key
            if key not in FORWARDABLE_APIS:
                raise EnvelopeError(ErrorCode.invalid_request, f"API {key} is not enabled or is not eligible for forwarding")
            if not is_supported(key, header.api_version, CONTROLLER_APIS):
                raise EnvelopeError(ErrorCode.unsupported_version, f"API {key} version {header.api_version} is not served")
            try:
                inner = decode_request(key, header.api_version, frame, header.body_offset)
            except InvalidRequest as e:
                raise EnvelopeError(ErrorCode.unsupported_version, f"Failed to parse forwarded request with header {header}: {e}") from None
        except EnvelopeError as e:
            log.warning("envelope.refused", broker=ctx.client.principal, error=e.code.name, reason=str(e))
            return EnvelopeResponse(response_data=None, error_code=e.code)
        metrics = self._request_metrics
        errors = None if metrics is None else metrics.note_forwarded(key, header.api_version, len(frame) - header.body_offset)
        client = ClientInfo(ctx.client.connection_id, header.client_id, f"{address}:0", ctx.client.listener, principal)
        return self._answer(ctx, RequestContext(header, client, len(frame), errors), inner)

    async def _answer(self, ctx: RequestContext, inner_ctx: RequestContext, inner: Any) -> Response:
        """The Envelope's answer, encoded here so that KafkaApis counts nothing under Envelope
        (Kafka's Request.buildResponseSend wraps the inner answer after it was counted)."""
        header = inner_ctx.header
        result: Any = self._handlers[ApiKey(header.api_key)](inner_ctx, inner)
        if inspect.isawaitable(result):
            result = await result
        codes: ErrorCounts = {}
        count_response(codes, header.api_key, result)
        if inner_ctx.errors is not None:
            for code, n in codes.items():
                inner_ctx.errors[code] = inner_ctx.errors.get(code, 0) + n
        if (NOT_LEADER if header.api_key == ApiKey.DESCRIBE_QUORUM else ErrorCode.not_controller) in codes:
            # Kafka's shouldReturnNotController: the forwarding broker's channel looks only at the
            # Envelope's own error to find the new active controller and send the request again.
            envelope = EnvelopeResponse(response_data=None, error_code=ErrorCode.not_controller)
        else:
            response = encode_response(header.api_key, header.api_version, header.correlation_id, result)
            # The inner answer's header and body, without the frame's size.
            envelope = EnvelopeResponse(response_data=response[4:], error_code=ErrorCode.none)
        return [encode_response(ApiKey.ENVELOPE, ctx.version, ctx.header.correlation_id, envelope)]


__all__ = ["EnvelopeHandler", "FORWARDABLE_APIS", "LocalControllerChannel", "parse_principal", "serialize_principal"]
