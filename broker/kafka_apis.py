"""Request dispatch: one handler per API, answers encoded in the request's version."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import structlog
from kio.static.protocol import ResponsePayload

from broker.handlers.api_versions import unsupported_version_fallback
from broker.network import ClientInfo, CloseConnection, Response
from protocol.api_keys import SUPPORTED_APIS, ApiKey, ApiRange, is_supported
from protocol.headers import RequestHeader
from protocol.messages import decode_request, encode_response

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    client: ClientInfo
    # The request's frame in bytes, header included: what a produce quota counts.
    size: int = 0

    @property
    def version(self) -> int:
        return self.header.api_version


HandlerResult = ResponsePayload | Response
Handler = Callable[[RequestContext, Any], "HandlerResult | Awaitable[HandlerResult]"]


class KafkaApis:
    """The dispatch of one listener; ``apis`` is its table (client listeners, or a controller's)."""

    def __init__(self, handlers: dict[ApiKey, Handler], apis: dict[int, ApiRange] = SUPPORTED_APIS) -> None:
        missing = set(apis) - set(handlers)
        if missing:
            raise ValueError(f"no handler for api keys {sorted(missing)}")
        self._handlers = handlers
        self._apis = apis

    def dispatch(self, header: RequestHeader, frame: bytearray, client: ClientInfo) -> Response | Awaitable[Response]:
        key, version = header.api_key, header.api_version
        if not is_supported(key, version, self._apis):
            if key == ApiKey.API_VERSIONS:
                return [unsupported_version_fallback(header.correlation_id, self._apis)]
            # Kafka cannot parse such a request either and drops the connection.
            raise CloseConnection(f"unsupported api key {key} version {version}")
        request = decode_request(key, version, frame, header.body_offset)
        ctx = RequestContext(header, client, len(frame))
        result = self._handlers[ApiKey(key)](ctx, request)
        if inspect.isawaitable(result):
            return self._finish(ctx, result)
        return self._encode(ctx, result)

    async def _finish(self, ctx: RequestContext, pending: Awaitable[HandlerResult]) -> Response:
        return self._encode(ctx, await pending)

    @staticmethod
    def _encode(ctx: RequestContext, result: HandlerResult) -> Response:
        if result is None or isinstance(result, list):
            return result
        return [encode_response(ctx.header.api_key, ctx.version, ctx.header.correlation_id, result)]
