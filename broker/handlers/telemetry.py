"""GetTelemetrySubscriptions (71) and PushTelemetry (72), KIP-714's client metrics, answered by the
ClientMetricsManager (broker/client_metrics_manager.py), and the publisher that keeps its
subscriptions those of the metadata image (Kafka's DynamicConfigPublisher -> ClientMetricsConfigHandler)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Callable

import structlog
from kio.schema.errors import ErrorCode

from broker.client_metrics_config import ClientAttributes
from broker.client_metrics_manager import ClientMetricsManager
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import CLIENT_METRICS_RESOURCE, MetadataImage
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build

log = structlog.get_logger()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def client_attributes(manager: ClientMetricsManager, ctx: RequestContext) -> ClientAttributes:
    """What the subscriptions' match patterns select on: the request's client id, the connection's
    peer address and port, and the software its ApiVersions named."""
    client = ctx.client
    return ClientAttributes.of(ctx.header.client_id, client.address, manager.client_software(client.connection_id))


class GetTelemetrySubscriptionsHandler:
    def __init__(self, manager: ClientMetricsManager, now_ms: Callable[[], int] = _now_ms) -> None:
        self._manager = manager
        self._now_ms = now_ms

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ctx.version)
        try:
            answer = self._manager.get_telemetry_subscriptions(
                request.client_instance_id, client_attributes(self._manager, ctx), self._now_ms(), ctx.client.connection_id
            )
        except Exception:  # noqa: BLE001 - Kafka's KafkaApis answers INVALID_REQUEST to whatever the manager throws
            log.exception("telemetry.get_subscriptions_failed", client_instance_id=str(request.client_instance_id))
            return _error(schema, ErrorCode.invalid_request)
        if answer.error_code:
            log.debug("telemetry.get_subscriptions_refused", error=ErrorCode(answer.error_code).name, reason=answer.message)
            return _error(schema, answer.error_code)
        return build(
            schema,
            throttle_time=0,
            error_code=ErrorCode.none,
            client_instance_id=answer.client_instance_id,
            subscription_id=answer.subscription_id,
            accepted_compression_types=answer.accepted_compression_types,
            push_interval=datetime.timedelta(milliseconds=answer.push_interval_ms),
            telemetry_max_bytes=answer.telemetry_max_bytes,
            delta_temporality=answer.delta_temporality,
            requested_metrics=answer.requested_metrics,
        )


def _error(schema: type, error_code: int):  # type: ignore[no-untyped-def]
    """Kafka's getErrorResponse: the error, every other field zero or empty."""
    return build(
        schema,
        throttle_time=0,
        error_code=error_code,
        client_instance_id=uuid.UUID(int=0),
        subscription_id=0,
        accepted_compression_types=(),
        push_interval=datetime.timedelta(0),
        telemetry_max_bytes=0,
        delta_temporality=False,
        requested_metrics=(),
    )


class PushTelemetryHandler:
    def __init__(self, manager: ClientMetricsManager, now_ms: Callable[[], int] = _now_ms) -> None:
        self._manager = manager
        self._now_ms = now_ms

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.PUSH_TELEMETRY, ctx.version)
        try:
            error, reason = self._manager.push_telemetry(
                request.client_instance_id,
                request.subscription_id,
                request.terminating,
                request.compression_type,
                request.metrics,
                client_attributes(self._manager, ctx),
                self._now_ms(),
                ctx.client.connection_id,
            )
        except Exception:  # noqa: BLE001 - as above
            log.exception("telemetry.push_failed", client_instance_id=str(request.client_instance_id))
            error, reason = ErrorCode.invalid_request, None
        if error:
            log.debug("telemetry.push_refused", client_instance_id=str(request.client_instance_id), error=ErrorCode(error).name, reason=reason)
            return build(schema, throttle_time=0, error_code=error)
        instance = self._manager.instance(request.client_instance_id)
        push = instance.latest if instance is not None else None
        # A client's first metrics at info, the later ones at debug (one a push interval per client).
        first = instance is not None and instance.pushes == 1 and bool(request.metrics)
        (log.info if first else log.debug)(
            "telemetry.pushed",
            client_instance_id=str(request.client_instance_id),
            client_id=ctx.header.client_id,
            size=len(request.metrics),
            compression_type=request.compression_type,
            terminating=request.terminating,
            metrics=len(push.points) if push is not None else 0,
            sample=sorted({p.name for p in push.points})[:3] if push is not None else [],
        )
        return build(schema, throttle_time=0, error_code=error)


def recording_client_software(manager: ClientMetricsManager, answer: Callable[[RequestContext, object], object]) -> Callable[[RequestContext, object], object]:
    """The ApiVersions handler ``answer``, first noting the client software the request names
    (v3+), which Kafka keeps on the channel for the match patterns."""

    def api_versions(ctx: RequestContext, request: object) -> object:
        name, version = getattr(request, "client_software_name", None), getattr(request, "client_software_version", None)
        manager.record_client_software(ctx.client.connection_id, name, version)
        return answer(ctx, request)

    return api_versions


class ClientMetricsPublisher:
    """Keeps the manager's subscriptions those of the image's CLIENT_METRICS config resources."""

    def __init__(self, manager: ClientMetricsManager) -> None:
        self._manager = manager

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.configs_delta is None and delta.image.configs is image.configs:
            return
        subscriptions = {name: values for (kind, name), values in image.configs.items() if kind == CLIENT_METRICS_RESOURCE}
        if self._manager.update_subscriptions(subscriptions):
            log.info("client_metrics.subscriptions", names=sorted(subscriptions), ignored=self._manager.invalid_subscriptions or None)


__all__ = ["ClientMetricsPublisher", "GetTelemetrySubscriptionsHandler", "PushTelemetryHandler", "client_attributes", "recording_client_software"]
