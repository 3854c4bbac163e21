"""NetworkClient against a real kbroker process: round trips, pipelining, a broker restart."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Coroutine

import pytest
import uvloop
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8.request import MetadataRequest as MetadataRequestV8
from kio.schema.metadata.v8.request import MetadataRequestTopic as MetadataRequestTopicV8
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from broker.network_client import DisconnectError, NetworkClient
from protocol.api_keys import SUPPORTED_APIS, ApiKey
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import unique_topic

RUN_TIMEOUT_S = 60.0


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return uvloop.run(asyncio.wait_for(coro, RUN_TIMEOUT_S))


def destination(broker: BrokerProcess) -> tuple[str, int]:
    return ("127.0.0.1", broker.port)


def versions(i: int = 0) -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="kbroker-network-client", client_software_version=f"0.{i}")


def test_api_versions_round_trip(module_broker: BrokerProcess) -> None:
    async def main() -> None:
        net = NetworkClient("it-api-versions", request_timeout_ms=10_000)
        try:
            response = await net.send(destination(module_broker), versions())
        finally:
            net.close()
            await net.wait_closed()
        assert response.error_code == ErrorCode.none
        served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        expected = SUPPORTED_APIS[ApiKey.API_VERSIONS]
        assert served[ApiKey.API_VERSIONS] == (expected.min_version, expected.max_version)

    run(main())


def test_create_topics_then_metadata_flexible_and_classic(module_broker: BrokerProcess) -> None:
    topic = unique_topic("netclient")

    async def main() -> None:
        net = NetworkClient("it-admin", request_timeout_ms=15_000)
        try:
            created = await net.send(destination(module_broker), CreateTopicsRequest(
                topics=(CreatableTopic(name=TopicName(topic), num_partitions=i32(3), replication_factor=i16(1), assignments=(), configs=()),),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            ))
            [result] = created.topics
            assert (result.name, result.error_code) == (topic, ErrorCode.none)

            flexible = await net.send(destination(module_broker), MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False,
            ))
            classic = await net.send(destination(module_broker), MetadataRequestV8(
                topics=(MetadataRequestTopicV8(name=TopicName(topic)),),
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
            ))
            for response in (flexible, classic):
                assert [int(b.port) for b in response.brokers] == [module_broker.port]
                [described] = response.topics
                assert (described.name, described.error_code, len(described.partitions)) == (topic, ErrorCode.none, 3)
            assert net.is_connected(destination(module_broker))
        finally:
            net.close()
            await net.wait_closed()

    run(main())


def test_a_thousand_pipelined_api_versions(module_broker: BrokerProcess) -> None:
    async def main() -> None:
        net = NetworkClient("it-pipelined", request_timeout_ms=30_000)
        try:
            responses = await asyncio.gather(*(net.send(destination(module_broker), versions(i)) for i in range(1000)))
        finally:
            net.close()
            await net.wait_closed()
        assert all(r.error_code == ErrorCode.none for r in responses)
        assert len({len(r.api_keys) for r in responses}) == 1

    run(main())


def test_reconnects_to_a_restarted_broker(broker_factory: StartBroker) -> None:
    broker = broker_factory()

    async def main() -> None:
        net = NetworkClient("it-restart", request_timeout_ms=10_000, reconnect_backoff_ms=50, reconnect_backoff_max_ms=500)
        loop = asyncio.get_running_loop()
        try:
            assert (await net.send(destination(broker), versions())).error_code == ErrorCode.none
            await loop.run_in_executor(None, broker.kill)
            deadline = loop.time() + 10
            while net.is_connected(destination(broker)):
                assert loop.time() < deadline, "the killed broker's connection never dropped"
                await asyncio.sleep(0.01)
            with pytest.raises(DisconnectError):  # refused: nobody listens on the port
                await net.send(destination(broker), versions(), timeout_ms=2_000)
            await loop.run_in_executor(None, broker.start)
            response = await net.send(destination(broker), versions(), timeout_ms=10_000)
            assert response.error_code == ErrorCode.none and net.is_connected(destination(broker))
        finally:
            net.close()
            await net.wait_closed()

    run(main())
