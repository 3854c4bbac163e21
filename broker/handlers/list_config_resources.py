"""ListConfigResources (74; ListClientMetricsResources before Kafka 4.1, KIP-1142), as Kafka 4.4's
KafkaApis answers it: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED; v0 lists
client metrics subscriptions only, v1 the resource types asked (every one when none is): groups
with configs, client metrics subscriptions, broker loggers and brokers (the live brokers on the
client's listener) and topics, in that order; a type the version does not know is UNSUPPORTED_VERSION."""

from __future__ import annotations

from typing import Callable

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import (
    BROKER_LOGGER_RESOURCE,
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
)
from broker.security.standard_acl import AclOperation
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

V0_TYPES = frozenset({CLIENT_METRICS_RESOURCE})
V1_TYPES = frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE})


class ListConfigResourcesHandler:
    def __init__(self, metadata: MetadataCache, subscriptions: Callable[[], list[str]], auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._subscriptions = subscriptions
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LIST_CONFIG_RESOURCES, ctx.version)
        resource_cls = nested(schema, "ConfigResource")
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
            return build(schema, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, config_resources=())
        supported = V0_TYPES if ctx.version == 0 else V1_TYPES
        wanted = set(getattr(request, "resource_types", ()) or supported)
        if not wanted <= supported:
            return build(schema, throttle_time=0, error_code=ErrorCode.unsupported_version, config_resources=())
        image = self._metadata.image
        found: list[tuple[str, int]] = []
        if GROUP_RESOURCE in wanted:
            found += [(name, GROUP_RESOURCE) for kind, name in sorted(image.configs) if kind == GROUP_RESOURCE]
        if CLIENT_METRICS_RESOURCE in wanted:
            found += [(name, CLIENT_METRICS_RESOURCE) for name in sorted(self._subscriptions())]
        brokers = [str(b.node_id) for b in self._metadata.alive_brokers(ctx.client.listener)]
        if BROKER_LOGGER_RESOURCE in wanted:
            found += [(b, BROKER_LOGGER_RESOURCE) for b in brokers]
        if BROKER_RESOURCE in wanted:
            found += [(b, BROKER_RESOURCE) for b in brokers]
        if TOPIC_RESOURCE in wanted:
            found += [(name, TOPIC_RESOURCE) for name in sorted(image.topics)]
        resources = tuple(build(resource_cls, resource_name=name, resource_type=kind) for name, kind in found)
        return build(schema, throttle_time=0, error_code=ErrorCode.none, config_resources=resources)


__all__ = ["ListConfigResourcesHandler"]
