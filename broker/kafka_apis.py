"""Request dispatch: one handler per API, answers encoded in the request's version."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import types
from collections.abc import Generator
from dataclasses import dataclass
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog
from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from broker.client_quota_manager import user_name
from broker.client_request_quota_manager import ClientRequestQuotaManager, is_exempt
from broker.handlers.api_versions import unsupported_version_fallback
from broker.metrics.request_errors import ErrorCounts, add, count_response
from broker.network import ClientInfo, CloseConnection, Response, Throttle
from protocol.api_keys import SUPPORTED_APIS, ApiKey, ApiRange, is_supported
from protocol.headers import RequestHeader
from protocol.messages import decode_request, encode_response

if TYPE_CHECKING:
    from broker.metrics.request_metrics import RequestChannelMetrics

log = structlog.get_logger(__name__)
FETCH = int(ApiKey.FETCH)


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    client: ClientInfo
    # The request's frame in bytes, header included: what a produce quota counts.
    size: int = 0
    # metrics.listener: the ErrorsPerSec counts of the request's API. The handlers that encode
    # their own answers (Produce, Fetch, Metadata's cached one) add their codes here; KafkaApis
    # counts the entities the others return.
    errors: ErrorCounts | None = None

    @property
    def version(self) -> int:
        return self.header.api_version


HandlerResult = ResponsePayload | Response
Handler = Callable[[RequestContext, Any], "HandlerResult | Awaitable[HandlerResult]"]


class KafkaApis:
    """The dispatch of one listener; ``apis`` is its table (client listeners, or a controller's).

    With a ``request_quota``, each request of a client that has one is timed (what is counted:
    broker/client_request_quota_manager.py) and a client over it is throttled. ``cluster_action``
    tells whether a request's principal may CLUSTER_ACTION (the brokers' requests are exempt)."""

    def __init__(
        self,
        handlers: dict[ApiKey, Handler],
        apis: dict[int, ApiRange] = SUPPORTED_APIS,
        request_quota: ClientRequestQuotaManager | None = None,
        cluster_action: Callable[[RequestContext], bool] = lambda ctx: True,
        request_metrics: RequestChannelMetrics | None = None,
    ) -> None:
        missing = set(apis) - set(handlers)
        if missing:
            raise ValueError(f"no handler for api keys {sorted(missing)}")
        self._handlers = handlers
        self._apis = apis
        self._request_quota = request_quota
        self._cluster_action = cluster_action
        # metrics.listener: a Fetch is counted as FetchConsumer or FetchFollower, which only its body tells.
        self._request_metrics = request_metrics

    def dispatch(self, header: RequestHeader, frame: bytearray, client: ClientInfo) -> Response | Awaitable[Response]:
        key, version = header.api_key, header.api_version
        if not is_supported(key, version, self._apis):
            if key == ApiKey.API_VERSIONS:
                if self._request_metrics is not None:
                    add(self._request_metrics.for_key(key).errors, ErrorCode.unsupported_version)
                return [unsupported_version_fallback(header.correlation_id, self._apis)]
            # Kafka cannot parse such a request either and drops the connection.
            raise CloseConnection(f"unsupported api key {key} version {version}")
        started = perf_counter_ns()
        request = decode_request(key, version, frame, header.body_offset)
        metrics = self._request_metrics
        if key == FETCH and metrics is not None:
            metrics.note_fetch(request)
        ctx = RequestContext(header, client, len(frame), None if metrics is None else metrics.for_key(key).errors)
        quota = self._request_quota
        timed = quota is not None and quota.enabled and not is_exempt(key, request, lambda: self._cluster_action(ctx))
        result = self._handlers[ApiKey(key)](ctx, request)
        if inspect.isawaitable(result):
            return self._finish(ctx, result, started if timed else None)
        return self._encode(ctx, result, perf_counter_ns() - started if timed else None)

    async def _finish(self, ctx: RequestContext, pending: Awaitable[HandlerResult], started: int | None) -> Response:
        if started is None:
            return self._encode(ctx, await pending, None)
        spent = [perf_counter_ns() - started]
        result = await _timed(pending, spent)
        return self._encode(ctx, result, spent[0])

    def _encode(self, ctx: RequestContext, result: HandlerResult, spent_ns: int | None) -> Response:
        """The answer; ``spent_ns``: the request's time so far when it counts against a request quota."""
        throttle_ms = 0
        if spent_ns is not None:
            assert self._request_quota is not None
            user, client_id = user_name(ctx.client.principal), ctx.header.client_id or ""
            throttle_ms = self._request_quota.record(user, client_id, spent_ns, _now_ms())
        if result is None or isinstance(result, list):
            # Produce and Fetch come encoded with their byte-rate throttle time inside; a longer
            # request-quota throttle still holds the connection (Kafka would also put it in the answer).
            return _held(result, throttle_ms)
        if ctx.errors is not None:
            count_response(ctx.errors, ctx.header.api_key, result)
        started = perf_counter_ns()
        # An answer's own throttle time (a mutation quota's, or the controller's) holds the client too.
        throttle_ms = max(throttle_ms, _throttle_ms(result))
        if throttle_ms and hasattr(result, "throttle_time"):
            result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
        answer: list[Any] = [encode_response(ctx.header.api_key, ctx.version, ctx.header.correlation_id, result)]
        if spent_ns is not None:
            assert self._request_quota is not None
            self._request_quota.record_no_throttle(user_name(ctx.client.principal), ctx.header.client_id or "", perf_counter_ns() - started, _now_ms())
        if throttle_ms:
            answer.append(Throttle(throttle_ms))
        return answer


def _now_ms() -> int:
    return time_ns() // 1_000_000


def _throttle_ms(payload: Any) -> int:
    throttle = getattr(payload, "throttle_time", None)
    return 0 if throttle is None else round(throttle.total_seconds() * 1000)


def _held(response: Response, throttle_ms: int) -> Response:
    """``response`` with the connection held for at least ``throttle_ms`` after it."""
    if not throttle_ms:
        return response
    chunks = list(response or ())
    if chunks and isinstance(chunks[-1], Throttle):
        throttle_ms = max(throttle_ms, chunks.pop().ms)
    return [*chunks, Throttle(throttle_ms)]


@types.coroutine
def _timed(awaitable: Awaitable[HandlerResult], spent: list[int]) -> Generator[Any, Any, HandlerResult]:
    """Await ``awaitable``, adding to ``spent[0]`` the time of each of its steps on the loop: its
    own work, not the time it waits for others."""
    steps = awaitable.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        started = perf_counter_ns()
        try:
            yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            spent[0] += perf_counter_ns() - started
        try:
            sent, thrown = (yield yielded), None
        except GeneratorExit:
            steps.close()  # type: ignore[attr-defined]
            raise
        except BaseException as e:  # noqa: BLE001 - a cancellation goes on to the handler
            sent, thrown = None, e
