"""Dynamic broker configs: which changes a receiving broker refuses, with Apache Kafka 4.4's
messages, how a broker's effective config is layered, and the receiving broker's check that a
broker resource names itself before it forwards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.config import load_config
from broker.dynamic_broker_config import CurrentConfig, DynamicBrokerConfig, DynamicLayers, InvalidDynamicConfigError, validate_dynamic_broker_config
from broker.handlers.forwarding import ForwardAlterConfigsHandler
from protocol.api_keys import ApiKey, request_schema, response_schema
from protocol.entities import build, nested
from protocol.messages import encode_body

BROKER, TOPIC = 4, 2


def current(**props: str) -> CurrentConfig:
    config = load_config(None, {"log.dirs": "./data", "node.id": "1", **props})
    return CurrentConfig(config, config)


NO_LAYERS = DynamicLayers({}, {})

# Apache Kafka 4.4's answers (INVALID_REQUEST) to the same changes, sent with confluent-kafka's
# incremental_alter_configs to a one-node Kafka 4.4 whose num.io.threads is 2.
KAFKA_REFUSALS = [
    ({"log.dirs": "/tmp/x"}, True, "Cannot update these configs dynamically: [log.dirs]"),
    ({"log.cleaner.threads": "abc"}, True, "Invalid value abc for configuration log.cleaner.threads: Not a number of type INT"),
    (
        {"num.io.threads": "100"},
        True,
        "Invalid value org.apache.kafka.common.config.ConfigException: Dynamic thread count update validation failed for num.io.threads=100, "
        "value should not be greater than double the current value 2 for configuration Invalid dynamic configuration",
    ),
    ({"num.io.threads": "0"}, True, "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
    (
        {"ssl.keystore.location": "/x"},
        True,
        "These security configs can be dynamically updated only per-listener using the listener prefix: [ssl.keystore.location]",
    ),
    ({"min.insync.replicas": "0"}, True, "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ({"log.cleaner.threads": "-1"}, True, "Invalid value -1 for configuration log.cleaner.threads: Value must be at least 0"),
    (
        {"log.cleaner.threads": "3"},
        True,
        "Invalid value org.apache.kafka.common.config.ConfigException: Log cleaner threads cannot be increased to more than double the current value 1 "
        "for configuration Invalid dynamic configuration",
    ),
    ({"leader.replication.throttled.rate": "fast"}, True, "Invalid value fast for configuration leader.replication.throttled.rate: Not a number of type LONG"),
    ({"follower.replication.throttled.rate": "-1"}, False, "Invalid value -1 for configuration follower.replication.throttled.rate: Value must be at least 0"),
    (
        {"listener.name.external.ssl.keystore.location": "/x"},
        False,
        "Cannot update these configs at default cluster level, broker id must be specified: [listener.name.external.ssl.keystore.location]",
    ),
]


@pytest.mark.parametrize(("props", "per_broker", "message"), KAFKA_REFUSALS)
def test_a_change_kafka_refuses_is_refused_with_kafkas_message(props: dict[str, str], per_broker: bool, message: str) -> None:
    with pytest.raises(InvalidDynamicConfigError) as refused:
        validate_dynamic_broker_config(props, per_broker, current(**{"num.io.threads": "2"}), NO_LAYERS)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "props",
    [
        {"log.retention.ms": "3600000"},
        {"foo.bar": "1"},  # unknown: Kafka keeps it for plugins
        {"num.replica.fetchers": "2"},
        {"message.max.bytes": "2000000"},
        {"max.connections.per.ip": "100"},
        {"log.cleanup.policy": "delete,compact"},
        {"leader.replication.throttled.rate": "1048576", "follower.replication.throttled.rate": "0"},
        {"log.cleaner.threads": "2", "unclean.leader.election.enable": "true", "log.cleaner.min.cleanable.ratio": "0.1"},
        {"log.preallocate": "true", "compression.zstd.level": "5"},  # Kafka's, with no kbroker setting: kept
        {},
    ],
)
def test_a_change_kafka_takes_is_taken(props: dict[str, str]) -> None:
    validate_dynamic_broker_config(props, True, current(), NO_LAYERS)
    validate_dynamic_broker_config(props, False, current(), NO_LAYERS)


def test_a_thread_count_is_checked_against_the_brokers_current_one() -> None:
    """The rule is about the value in effect, dynamic defaults included."""
    now = current(**{"num.replica.fetchers": "4"})
    validate_dynamic_broker_config({"num.replica.fetchers": "8"}, True, now, NO_LAYERS)
    with pytest.raises(InvalidDynamicConfigError, match="value should be at least half the current value 4"):
        validate_dynamic_broker_config({"num.replica.fetchers": "1"}, True, now, NO_LAYERS)


def test_the_effective_config_takes_the_brokers_own_over_the_default_over_the_file() -> None:
    static = load_config(None, {"log.dirs": "./data", "node.id": "1", "log.retention.ms": "1000", "log.cleaner.threads": "2"})
    layers = DynamicLayers({"log.retention.ms": "2000", "message.max.bytes": "5000"}, {"log.retention.ms": "3000", "foo.bar": "x"})
    effective = layers.effective(static)
    assert (effective.log_retention_ms, effective.message_max_bytes, effective.log_cleaner_threads) == (3000, 5000, 2)
    assert effective.topic_defaults()["retention.ms"] == "3000"
    assert DynamicLayers({}, {}).effective(static) is static


def test_a_broker_leaves_out_a_value_it_cannot_apply_and_keeps_the_rest() -> None:
    """Set through a controller, which checks only the resource name."""
    from broker.metadata.metadata_image import BROKER_RESOURCE

    static = load_config(None, {"log.dirs": "./data", "node.id": "1"})
    dynamic = DynamicBrokerConfig(1, static)
    seen: list[tuple[int, int]] = []
    dynamic.add_reconfigurable("probe", lambda old, new: seen.append((old.message_max_bytes, new.message_max_bytes)))

    class Image:
        configs = {(BROKER_RESOURCE, ""): {"message.max.bytes": "5000", "log.cleaner.threads": "abc"}, (BROKER_RESOURCE, "1"): {"min.insync.replicas": "0"}}

    dynamic.on_metadata_update(None, Image())  # type: ignore[arg-type]
    assert dynamic.config.message_max_bytes == 5000 and dynamic.config.log_cleaner_threads == 1 and dynamic.config.min_insync_replicas == 1
    assert seen == [(1048588, 5000)]
    assert dynamic.source_of("message.max.bytes") == 3 and dynamic.source_of("min.insync.replicas") == 2 and dynamic.source_of("log.dirs") == 4
    dynamic.on_metadata_update(None, Image())  # type: ignore[arg-type]
    assert len(seen) == 1  # nothing changed, nothing reconfigured


class Channel:
    """The controller: every forwarded resource answered NONE."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append(request)
        schema = response_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
        item = nested(schema, "AlterConfigsResourceResponse")
        return build(
            schema,
            throttle_time=0,
            responses=tuple(build(item, error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name) for r in request.resources),
        )


def incremental(*resources: tuple[int, str]) -> Any:
    schema = request_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    resource_cls, config_cls = nested(schema, "AlterConfigsResource"), nested(schema, "AlterableConfig")
    config = build(config_cls, name="leader.replication.throttled.rate", config_operation=0, value="10")
    return build(schema, validate_only=False, resources=tuple(build(resource_cls, resource_type=t, resource_name=n, configs=(config,)) for t, n in resources))


class Ctx:
    version = 1


def test_a_broker_resource_must_name_the_receiving_broker() -> None:
    channel = Channel()
    handler = ForwardAlterConfigsHandler(ApiKey.INCREMENTAL_ALTER_CONFIGS, channel, 2)  # type: ignore[arg-type]
    answer = asyncio.run(handler(Ctx(), incremental((BROKER, "3"), (BROKER, "2"), (TOPIC, "t"), (BROKER, ""), (BROKER, "x"))))  # type: ignore[arg-type]
    encode_body(answer)
    assert [(r.resource_name, r.error_code, r.error_message) for r in answer.responses] == [
        ("3", ErrorCode.invalid_request, "Unexpected broker id, expected 2, but received 3"),
        ("2", ErrorCode.none, None),
        ("t", ErrorCode.none, None),
        ("", ErrorCode.none, None),
        ("x", ErrorCode.invalid_request, "Node id must be an integer, but it is: x"),
    ]
    [forwarded] = channel.sent
    assert [r.resource_name for r in forwarded.resources] == ["2", "t", ""]
    # Nothing left to forward: answered here alone.
    only_refused = asyncio.run(handler(Ctx(), incremental((BROKER, "1"))))  # type: ignore[arg-type]
    assert [r.error_code for r in only_refused.responses] == [ErrorCode.invalid_request] and len(channel.sent) == 1
