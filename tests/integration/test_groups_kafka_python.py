"""Consumer groups with kafka-python 3.0.12, against Apache Kafka 4.x's behaviour.

kafka-python's JoinGroup goes through the KIP-394 round trip (MEMBER_ID_REQUIRED, then a second
JoinGroup with the member id the broker handed out). Producers run with enable_idempotence=False
(InitProducerId is a later issue).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaProducer

from tests.integration.conftest import BrokerProcess
from tests.integration.group_helpers import (
    KafkaPythonMember,
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
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all", linger_ms=2)
    try:
        futures = [producer.send(topic, value=v, partition=p) for p, values in by_partition.items() for v in values]
        producer.flush(30)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(10)


def test_three_consumers_split_six_partitions_exactly_once(group_broker) -> None:
    scenario_three_members_split_six_partitions(group_broker.bootstrap, KafkaPythonMember, produce)


def test_fourth_consumer_on_three_partitions_sits_idle(group_broker) -> None:
    scenario_fourth_member_idle(group_broker.bootstrap, KafkaPythonMember)


def test_closed_consumer_partitions_move_in_one_rebalance(group_broker) -> None:
    scenario_closed_member_partitions_move(group_broker.bootstrap, KafkaPythonMember, produce)


def test_two_groups_each_receive_every_record(group_broker) -> None:
    scenario_two_groups_each_get_everything(group_broker.bootstrap, KafkaPythonMember, produce)


def test_resume_at_committed_offsets_after_broker_restart(group_broker: BrokerProcess) -> None:
    # The module's broker (its own would cost a start); the module's last test, so nothing runs
    # on it after the restart.
    scenario_resume_after_broker_restart(group_broker, KafkaPythonMember, produce=produce)
