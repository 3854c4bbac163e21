"""The replication throttles as dynamic broker configs: which keys and values the controller takes,
and the receiving broker's check that a broker resource names itself before it forwards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.dynamic_broker_config import validate_dynamic_broker_config
from broker.handlers.forwarding import ForwardAlterConfigsHandler
from protocol.api_keys import ApiKey, request_schema, response_schema
from protocol.entities import build, nested
from protocol.messages import encode_body
from storage.log_config import InvalidConfigError

BROKER, TOPIC = 4, 2


def test_the_throttle_rates_are_the_dynamic_broker_configs() -> None:
    validate_dynamic_broker_config({"leader.replication.throttled.rate": "1048576", "follower.replication.throttled.rate": "0"})
    validate_dynamic_broker_config({})
    for configs, message in [
        ({"leader.replication.throttled.rate": "fast"}, "Invalid value fast for configuration leader.replication.throttled.rate: Not a number of type LONG"),
        ({"follower.replication.throttled.rate": "-1"}, "Invalid value -1 for configuration follower.replication.throttled.rate: Value must be at least 0"),
        ({"log.retention.ms": "1"}, "Dynamic broker config log.retention.ms is not supported by this node; set it in server.properties."),
    ]:
        with pytest.raises(InvalidConfigError, match=message):
            validate_dynamic_broker_config(configs)


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
