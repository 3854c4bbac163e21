"""Consumer groups with aiokafka, against Apache Kafka 4.x's behaviour.

Each consumer runs its own event loop in its own thread (group_helpers.AiokafkaMember).
Producers run with enable_idempotence=False (InitProducerId is a later issue).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.conftest import BrokerProcess
from tests.integration.group_helpers import (
    GROUP_BROKER_OVERRIDES,
    AiokafkaMember,
    module_group_broker,
    scenario_closed_member_partitions_move,
    scenario_fourth_member_idle,
    scenario_resume_after_broker_restart,
    scenario_three_members_split_six_partitions,
    scenario_two_groups_each_get_everything,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that do not restart theirs."""
    yield from module_group_broker(tmp_path_factory)


def produce(bootstrap: str, topic: str, by_partition: dict[int, list[bytes]]) -> None:
    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all")
        await producer.start()
        try:
            futures = [await producer.send(topic, value=v, partition=p) for p, values in by_partition.items() for v in values]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(send(), 30))


def test_three_consumers_split_six_partitions_exactly_once(group_broker) -> None:
    scenario_three_members_split_six_partitions(group_broker.bootstrap, AiokafkaMember, produce)


def test_fourth_consumer_on_three_partitions_sits_idle(group_broker) -> None:
    scenario_fourth_member_idle(group_broker.bootstrap, AiokafkaMember)


def test_closed_consumer_partitions_move_in_one_rebalance(group_broker) -> None:
    scenario_closed_member_partitions_move(group_broker.bootstrap, AiokafkaMember, produce)


def test_two_groups_each_receive_every_record(group_broker) -> None:
    scenario_two_groups_each_get_everything(group_broker.bootstrap, AiokafkaMember, produce)


def test_resume_at_committed_offsets_after_broker_restart(broker_factory) -> None:
    scenario_resume_after_broker_restart(broker_factory(GROUP_BROKER_OVERRIDES), AiokafkaMember, produce=produce)
