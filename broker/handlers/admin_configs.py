"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers."""

from __future__ import annotations

import json
from typing import Callable, Protocol

from kio.schema.errors import ErrorCode

from broker.dynamic_broker_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    SECURITY_CONFIGS,
    DynamicBrokerConfig,
    is_dynamic,
    kafka_default,
)
from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS, KAFKA_TOPIC_CONFIGS
from broker.controller.controller_logic import AlterConfigsResult
from broker.controller.quorum_controller import ConfigResource
from broker.auth_helper import CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, AuthHelper
from broker.handlers.client_metrics_configs import describe_client_metrics
from broker.handlers.group_configs import describe_group
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.logging_controller import LOGGING_CONTROLLER
from broker.metadata.metadata_image import BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from storage.log_cleaner import CLEANER_STATS_KEY
from storage.log_config import ALL_TOPIC_CONFIG_SYNONYMS

TOPIC = 2
BROKER = 4

SOURCE_TOPIC_CONFIG = 1
DYNAMIC_BROKER_LOGGER_CONFIG = 6

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST, TYPE_PASSWORD = 1, 2, 3, 5, 6, 7, 9
# DescribeConfigs' config_type of each of Kafka's ConfigDef types.
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8, "PASSWORD": 9}


class ConfigController(Protocol):
    """The QuorumController call the Alter handlers make."""

    async def alter_configs(self, resources: list[ConfigResource], incremental: bool, validate_only: bool, forwarded: bool = True) -> list[AlterConfigsResult]: ...


# Kafka's configs of type PASSWORD, also under a listener's prefix: DescribeConfigs names them
# sensitive and shows no value.
SENSITIVE_CONFIGS = frozenset(
    {
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
    # and every other config Kafka 4.4 describes as sensitive
    | {name for name, definition in KAFKA_BROKER_CONFIGS.items() if definition.sensitive}
)


def is_sensitive(name: str) -> bool:
    return name in SENSITIVE_CONFIGS or any(name.endswith("." + key) for key in SENSITIVE_CONFIGS)


def _config_type(name: str, value: str | None) -> int:
    """Kafka 4.4's type of a broker or topic config (a name has the same type in both); a guess
    from the value for the others."""
    definition = KAFKA_TOPIC_CONFIGS.get(name) or KAFKA_BROKER_CONFIGS.get(name)
    if definition is not None:
        return _TYPE_IDS[definition.type]
    if is_sensitive(name):
        return TYPE_PASSWORD
    if name == "cleanup.policy" or name.endswith(".policy"):
        return TYPE_LIST
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    if value is not None:
        try:
            int(value)
            return TYPE_LONG
        except ValueError:
            try:
                float(value)
                return TYPE_DOUBLE
            except ValueError:
                pass
    return TYPE_STRING


class DescribeConfigsHandler:
    def __init__(
        self,
        metadata: MetadataCache,
        dynamic_config: DynamicBrokerConfig,
        describe_cleaning: Callable[[str], dict[int, dict[str, object]]] | None = None,
        auth: AuthHelper | None = None,
    ) -> None:
        self._auth = auth or AuthHelper(None)
        self._metadata = metadata
        self._dynamic = dynamic_config
        self._describe_cleaning = describe_cleaning

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_CONFIGS, ctx.version)
        result_cls = nested(schema, "DescribeConfigsResult")
        entry_cls = nested(schema, "DescribeConfigsResourceResult")
        synonym_cls = nested(schema, "DescribeConfigsSynonym")
        synonyms_wanted = getattr(request, "include_synonyms", False)
        results = []
        for res in request.resources:
            refusal = self._refusal(ctx, res.resource_type, res.resource_name) if self._auth.enabled else None
            if refusal is not None:
                results.append(build(result_cls, error_code=refusal[0], error_message=refusal[1], resource_type=res.resource_type, resource_name=res.resource_name, configs=()))
                continue
            if res.resource_type == CLIENT_METRICS_RESOURCE:  # a subscription (broker/handlers/client_metrics_configs.py)
                subscription = self._metadata.image.configs.get((CLIENT_METRICS_RESOURCE, res.resource_name), {})
                docs = getattr(request, "include_documentation", False)
                results.append(describe_client_metrics(res.resource_name, subscription, res.configuration_keys, synonyms_wanted, docs, result_cls, entry_cls, synonym_cls))
                continue
            if res.resource_type == GROUP_RESOURCE:  # group configs (broker/handlers/group_configs.py)
                overrides = dict(self._metadata.image.configs.get((GROUP_RESOURCE, res.resource_name), {}))
                results.append(describe_group(res.resource_name, overrides, res.configuration_keys, synonyms_wanted, self._broker_synonyms, result_cls, entry_cls, synonym_cls))
                continue
            entries, error, message = self._describe(res.resource_type, res.resource_name)
            keys = res.configuration_keys
            if keys and CLEANER_STATS_KEY in keys and res.resource_type == TOPIC and not error and self._describe_cleaning is not None:
                stats = json.dumps(self._describe_cleaning(res.resource_name))
                entries.append((CLEANER_STATS_KEY, stats, DEFAULT_CONFIG, ((CLEANER_STATS_KEY, stats, DEFAULT_CONFIG),)))
            configs = []
            for name, value, source, synonym_layers in entries:
                if keys is not None and name not in keys:
                    continue
                sensitive = is_sensitive(name) or (res.resource_type == BROKER and self._is_custom(name))
                if sensitive:
                    value = None  # Kafka's PASSWORD configs (and unknown ones): described, never shown
                synonyms = []
                # Kafka describes a logger's level with no synonyms and no type.
                logger = res.resource_type == BROKER_LOGGER_RESOURCE
                if synonyms_wanted and not logger:
                    synonyms.extend(build(synonym_cls, name=n, value=None if sensitive else v, source=src) for n, v, src in synonym_layers)
                # A listener's stores change per listener only; their broker-wide names are not read-only, as in Kafka.
                read_only = name == CLEANER_STATS_KEY or (res.resource_type == BROKER and ((not is_dynamic(name) and name not in SECURITY_CONFIGS) or self._is_custom(name)))
                configs.append(
                    build(
                        entry_cls,
                        name=name,
                        value=value,
                        read_only=read_only,
                        config_source=source,
                        is_sensitive=sensitive,
                        synonyms=tuple(synonyms),
                        config_type=0 if logger else _config_type(name, value),
                        documentation=None,
                    )
                )
            results.append(
                build(
                    result_cls,
                    error_code=error,
                    error_message=message if error else "",  # Kafka leaves the field at its default, ""
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=tuple(configs) if not error else (),
                )
            )
        return build(schema, throttle_time=0, results=tuple(results))

    def _refusal(self, ctx: RequestContext, resource_type: int, name: str) -> tuple[int, str] | None:
        """DESCRIBE_CONFIGS on what the resource is: the cluster for broker-wide ones."""
        if resource_type == TOPIC_RESOURCE:
            allowed, refusal = self._auth.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name), TOPIC_AUTHORIZATION_FAILED
        elif resource_type == GROUP_RESOURCE:
            allowed, refusal = self._auth.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, name), GROUP_AUTHORIZATION_FAILED
        else:
            allowed, refusal = self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS), CLUSTER_AUTHORIZATION_FAILED
        return None if allowed else refusal

    def _describe(self, resource_type: int, name: str):  # type: ignore[no-untyped-def]
        """(name, value, source, its synonyms as Kafka lists them) of each config of the resource."""
        image = self._metadata.image
        dynamic = self._dynamic
        if resource_type == TOPIC:
            if name not in image.topics:
                return [], ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
            overrides = image.topic_config(name)
            out = []
            for key, value in sorted(dynamic.config.effective_topic_config(overrides).items()):
                below = self._topic_synonyms(key)
                if key in overrides:
                    out.append((key, value, SOURCE_TOPIC_CONFIG, ((key, value, SOURCE_TOPIC_CONFIG), *below)))
                else:
                    out.append((key, value, below[0][2] if below else DEFAULT_CONFIG, below))
            return out, 0, None
        if resource_type == BROKER:
            if name == "":
                # The cluster's dynamic defaults alone, as Kafka describes the default resource.
                return [(key, value, DYNAMIC_DEFAULT_BROKER_CONFIG, ((key, value, DYNAMIC_DEFAULT_BROKER_CONFIG),)) for key, value in sorted(dynamic.layers.default.items())], 0, None
            if name != str(self._metadata.node_id):
                return [], ErrorCode.invalid_request, f"Unexpected broker id, expected {self._metadata.node_id} but received {name}"
            # Every config Kafka 4.4 describes (broker/kafka_config_defs.py), kbroker's own, and what is set.
            keys = set(KAFKA_BROKER_CONFIGS) | set(dynamic.static_properties) | set(dynamic.layers.own) | set(dynamic.layers.default)
            return [(key, value, source, ((key, value, source), *self._layers_below(key))) for key in sorted(keys) for value, source in [(dynamic.value_of(key), dynamic.source_of(key))]], 0, None
        if resource_type == BROKER_LOGGER_RESOURCE:
            if not name:
                return [], ErrorCode.invalid_request, "Broker id must not be empty"
            try:
                broker = int(name)
            except ValueError:
                return [], ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"
            if broker != self._metadata.node_id:
                return [], ErrorCode.invalid_request, f"Unexpected broker id, expected {self._metadata.node_id} but received {name}"
            return [(logger, level, DYNAMIC_BROKER_LOGGER_CONFIG, ()) for logger, level in LOGGING_CONTROLLER.loggers().items()], 0, None
        return [], ErrorCode.invalid_request, f"Unsupported resource type {resource_type}"

    def _broker_synonyms(self, key: str) -> list[tuple[str, str | None, int]] | None:
        """A group config's broker setting: its value in effect and the layers below, None if kbroker has no such setting."""
        if kafka_default(key) is None:
            return None
        return [(key, self._dynamic.value_of(key), self._dynamic.source_of(key)), *self._layers_below(key)]

    def _topic_synonyms(self, key: str) -> tuple[tuple[str, str | None, int], ...]:
        """Kafka's synonyms of a topic config below the topic's own value: every layer's value of
        the broker configs behind it (log.retention.ms, .minutes, .hours), the broker's dynamic
        layer first, then the cluster default, server.properties and Kafka's defaults; and, as
        Kafka drops them, none before the first that sets the first of those names (so retention.ms,
        whose log.retention.ms has no default, shows none unless a layer sets log.retention.ms)."""
        names = ALL_TOPIC_CONFIG_SYNONYMS.get(key)
        if names is None:
            return ()
        dynamic = self._dynamic
        static = {n: v for n in names if (v := dynamic.static_properties.get(n)) is not None and dynamic.static_source_of(n) == STATIC_BROKER_CONFIG}
        defaults = {n: v for n in names if (v := _kafka_broker_default(n)) is not None}
        layers = ((dynamic.layers.own, DYNAMIC_BROKER_CONFIG), (dynamic.layers.default, DYNAMIC_DEFAULT_BROKER_CONFIG), (static, STATIC_BROKER_CONFIG), (defaults, DEFAULT_CONFIG))
        found = [(n, str(layer[n]), source) for layer, source in layers for n in names if layer.get(n) is not None]
        while found and found[0][0] != names[0]:
            found.pop(0)
        return tuple(found)

    def _layers_below(self, key: str) -> tuple[tuple[str, str | None, int], ...]:
        """The values ``key`` has below the one in effect: Kafka's synonyms of a broker config."""
        dynamic = self._dynamic
        layers: list[tuple[str, str | None, int]] = []
        if key in dynamic.layers.own and key in dynamic.layers.default:
            layers.append((key, dynamic.layers.default[key], DYNAMIC_DEFAULT_BROKER_CONFIG))
        source = dynamic.source_of(key)
        static = dynamic.static_properties
        if source in (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG) and key in static:
            if dynamic.static_source_of(key) == STATIC_BROKER_CONFIG:
                layers.append((key, static[key], STATIC_BROKER_CONFIG))
        if source != DEFAULT_CONFIG and kafka_default(key) is not None:
            layers.append((key, kafka_default(key), DEFAULT_CONFIG))
        return tuple(layers)

    def _is_custom(self, name: str) -> bool:
        """A broker config kbroker does not know, set dynamically (Kafka stores those for plugins)."""
        return kafka_default(name) is None and not is_dynamic(name) and name not in self._dynamic.static_properties and name not in KAFKA_BROKER_CONFIGS


class AlterConfigsHandler:
    """Legacy AlterConfigs: the given set replaces every override of the resource. ``is_forwarded``
    tells a request a broker forwarded from one a client sent straight to the controller."""

    def __init__(self, controller: ConfigController, is_forwarded: Callable[[RequestContext], bool]) -> None:
        self._controller = controller
        self._is_forwarded = is_forwarded

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        resources = [
            ConfigResource(r.resource_type, r.resource_name, [(c.name, 0, c.value) for c in r.configs])
            for r in request.resources
        ]
        results = await self._controller.alter_configs(resources, incremental=False, validate_only=request.validate_only, forwarded=self._is_forwarded(ctx))
        return _alter_response(ApiKey.ALTER_CONFIGS, ctx.version, results)


class IncrementalAlterConfigsHandler:
    def __init__(self, controller: ConfigController, is_forwarded: Callable[[RequestContext], bool]) -> None:
        self._controller = controller
        self._is_forwarded = is_forwarded

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        resources = [
            ConfigResource(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
            for r in request.resources
        ]
        results = await self._controller.alter_configs(resources, incremental=True, validate_only=request.validate_only, forwarded=self._is_forwarded(ctx))
        return _alter_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.version, results)


def _alter_response(api_key: ApiKey, version: int, results):  # type: ignore[no-untyped-def]
    schema = response_schema(api_key, version)
    item_cls = nested(schema, "AlterConfigsResourceResponse")
    out = tuple(
        build(item_cls, error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in results
    )
    return build(schema, throttle_time=0, responses=out)


def _kafka_broker_default(name: str) -> str | None:
    """Kafka 4.4's default of a broker config (None where it has none, as log.retention.ms), or
    kbroker's for a setting Kafka does not have."""
    definition = KAFKA_BROKER_CONFIGS.get(name)
    return kafka_default(name) if definition is None else definition.default
