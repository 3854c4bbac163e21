"""AlterPartition through the controller listener and the ControllerChannel: encoded requests in,
encoded answers out, answered only once the ISR change is committed; NOT_CONTROLLER while inactive."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from broker.controller.controller_apis import ControllerApis
from broker.controller.controller_logic import CreatableTopic
from broker.controller_channel import ControllerChannel, is_not_controller
from broker.metadata.metadata_image import PartitionRegistration
from protocol.api_keys import SUPPORTED_APIS, ApiKey, request_schema, response_schema
from protocol.entities import build, nested
from protocol.messages import decode_request, encode_body
from tests.unit.quorum_controller_fakes import FakeQuorum, Node, registration, run, settle
from tests.unit.test_controller_apis import Ctx, setup, versions

VERSIONS = versions(ApiKey.ALTER_PARTITION)


def alter_partition(version: int, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, isr: dict[int, int]) -> Any:
    """A leader's request for partition 0 at leader and partition epoch 0; ``isr`` maps each member to its broker epoch."""
    schema = request_schema(ApiKey.ALTER_PARTITION, version)
    partition_cls = nested(schema, "PartitionData")
    if version >= 3:
        state_cls = nested(schema, "BrokerState")
        members: dict[str, Any] = {"new_isr_with_epochs": tuple(build(state_cls, broker_id=b, broker_epoch=e) for b, e in isr.items())}
    else:
        members = {"new_isr": tuple(isr)}
    partition = build(partition_cls, partition_index=0, leader_epoch=0, leader_recovery_state=0, partition_epoch=0, **members)
    topic = build(nested(schema, "TopicData"), topic_id=topic_id, partitions=(partition,))
    return build(schema, broker_id=broker_id, broker_epoch=broker_epoch, topics=(topic,))


@dataclass
class Cluster:
    quorum: FakeQuorum
    node: Node
    apis: ControllerApis
    epochs: dict[int, int]
    topic_id: uuid.UUID

    def partition(self) -> PartitionRegistration:
        return self.node.loader.image.topics["t"].partitions[0]


async def cluster() -> Cluster:
    """Node 1 the active controller; brokers 1-3 registered and unfenced; topic t on all three, led by 1."""
    quorum, nodes, apis = setup(1)
    quorum.elect(1)
    controller = nodes[1].controller
    epochs = {b: (await controller.register_broker(registration(b))).broker_epoch for b in (1, 2, 3)}
    for b, epoch in epochs.items():
        await controller.broker_heartbeat(b, epoch, quorum.committed[-1].last_offset, False, False)
    [created] = await controller.create_topics([CreatableTopic("t", -1, -1, {0: [1, 2, 3]}, {})], validate_only=False)
    assert created.error_code == ErrorCode.none
    return Cluster(quorum, nodes[1], apis[1], epochs, nodes[1].loader.image.topics["t"].topic_id)


def test_alter_partition_is_served_to_controllers_only() -> None:
    assert ApiKey.ALTER_PARTITION not in SUPPORTED_APIS
    assert VERSIONS == range(2, 4)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_encoded_request_round_trips_to_an_encoded_answer(version: int) -> None:
    async def scenario() -> None:
        c = await cluster()
        wire = encode_body(alter_partition(version, 1, c.epochs[1], c.topic_id, {1: c.epochs[1], 2: c.epochs[2]}))
        request = decode_request(ApiKey.ALTER_PARTITION, version, bytearray(wire), 0)
        response = await c.apis.handlers()[ApiKey.ALTER_PARTITION](Ctx(version), request)  # type: ignore[arg-type]
        answer, _ = entity_reader(response_schema(ApiKey.ALTER_PARTITION, version))(memoryview(encode_body(response)), 0)
        assert answer == response and answer.error_code == ErrorCode.none
        [topic] = answer.topics
        [p] = topic.partitions
        assert topic.topic_id == c.topic_id
        new_state = (p.partition_index, p.error_code, p.leader_id, p.leader_epoch, p.isr, p.leader_recovery_state, p.partition_epoch)
        assert new_state == (0, ErrorCode.none, 1, 0, (1, 2), 0, 1)
        # Answered after the commit: the image already holds the state the answer names.
        assert (c.partition().isr, c.partition().partition_epoch) == ((1, 2), 1)

    run(scenario())


def test_the_answer_waits_for_the_commit() -> None:
    async def scenario() -> None:
        c = await cluster()
        c.quorum.auto_commit = False
        pending = asyncio.create_task(c.apis.handle(alter_partition(3, 1, c.epochs[1], c.topic_id, {1: c.epochs[1], 3: -1})))
        await settle()
        assert not pending.done() and len(c.quorum.pending) == 1
        assert c.partition().isr == (1, 2, 3)
        c.quorum.commit()
        response = await pending
        assert response.topics[0].partitions[0].isr == (1, 3) == c.partition().isr

    run(scenario())


def test_a_stale_broker_epoch_is_the_top_level_error() -> None:
    async def scenario() -> None:
        c = await cluster()
        response = await c.apis.handle(alter_partition(3, 1, c.epochs[1] + 1, c.topic_id, {1: c.epochs[1]}))
        assert (response.error_code, response.topics) == (ErrorCode.stale_broker_epoch, ())
        encode_body(response)

    run(scenario())


def test_an_empty_request_is_answered_at_once_even_by_an_inactive_controller() -> None:
    async def scenario() -> None:
        quorum, nodes, _ = setup(1, 2)
        quorum.elect(2)
        reply = await nodes[1].controller.alter_partition(1, 0, [])
        assert (reply.error_code, reply.topics) == (ErrorCode.none, [])

    run(scenario())


@pytest.mark.parametrize("version", VERSIONS)
def test_an_inactive_controller_answers_not_controller(version: int) -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1, 2)
        quorum.elect(2)
        response = await apis[1].handle(alter_partition(version, 1, 0, uuid.UUID(int=5), {1: 0}))
        assert type(response) is response_schema(ApiKey.ALTER_PARTITION, version)
        assert (response.error_code, response.topics) == (ErrorCode.not_controller, ())
        assert is_not_controller(response)
        encode_body(response)

    run(scenario())


class NoNetwork:
    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        raise AssertionError("the local controller is active: no request goes over the network")


class NoLeader:
    def leader_endpoint(self) -> tuple[int, str, int] | None:
        return None


def test_a_broker_s_controller_channel_gets_the_answer() -> None:
    async def scenario() -> None:
        c = await cluster()
        channel = ControllerChannel(NoNetwork(), NoLeader(), c.apis, request_timeout_ms=2000, retry_backoff_ms=10)  # type: ignore[arg-type]
        response = await channel.send(alter_partition(3, 2, c.epochs[2], c.topic_id, {2: c.epochs[2]}))
        assert type(response) is response_schema(ApiKey.ALTER_PARTITION, 3)
        # Broker 2 does not lead the partition.
        assert response.error_code == ErrorCode.none and response.topics[0].partitions[0].error_code == ErrorCode.invalid_request

    run(scenario())
