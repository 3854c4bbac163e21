"""Replication throttles (Kafka's leader/follower.replication.throttled.rate and .replicas): a
follower that comes back behind replicates its throttled partition at no more than the limit,
in-sync replicas are not held back, and with the throttle removed it catches up at full speed.

Three combined nodes. The rates are set as the cluster-wide default (IncrementalAlterConfigs on
the broker resource "", sent on the wire: confluent-kafka refuses an empty broker name) and the
replicas in the topic's configs, while the cluster runs. What is asserted:
the throttled catch-up took at least half the time the limit implies, and every record the
leader acknowledged reaches the returned follower.
"""

from __future__ import annotations

import os
import time
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.static.primitive import i8

from broker.controller.configuration_control_manager import OP_DELETE, OP_SET
from broker.dynamic_broker_config import FOLLOWER_REPLICATION_THROTTLED_RATE, LEADER_REPLICATION_THROTTLED_RATE
from broker.metadata.metadata_image import BROKER_RESOURCE
from broker.wire_client import request
from tests.cluster.cluster import ClusterNode, KafkaCluster, leader_id, wait_until
from tests.cluster.test_replication import admin, create, partition_state, produce, read_all
from tests.integration.helpers import unique_topic

TIMEOUT_S = 120.0
RATE = 1_000_000  # bytes/s
BEHIND = 8_000_000  # bytes produced while the follower is away
RECORD = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("replication-throttle"),
        combined=3,
        overrides={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "4000"},
    )
    try:
        yield c.start()
    finally:
        c.close()


def alter(client: AdminClient, resource_type: ConfigResource.Type, name: str, configs: dict[str, str | None]) -> None:
    entries = [
        ConfigEntry(key, value or "", incremental_operation=AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE)
        for key, value in configs.items()
    ]
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    client.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)


def produce_behind(bootstrap: str, name: str, total: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "message.timeout.ms": 60000})
    value = os.urandom(RECORD)
    failed: list[object] = []
    for _ in range(total // RECORD):
        producer.produce(name, value, on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0 and not failed


def set_rates(bootstrap: str, rate: int | None) -> None:
    configs = tuple(
        iac.AlterableConfig(name=key, config_operation=i8(OP_SET if rate is not None else OP_DELETE), value=str(rate) if rate is not None else None)
        for key in (LEADER_REPLICATION_THROTTLED_RATE, FOLLOWER_REPLICATION_THROTTLED_RATE)
    )
    body = iac.IncrementalAlterConfigsRequest(
        resources=(iac.AlterConfigsResource(resource_type=i8(BROKER_RESOURCE), resource_name="", configs=configs),), validate_only=False
    )
    [answer] = request(bootstrap, body).responses
    assert answer.error_code == ErrorCode.none, answer.error_message


def follower_away_then_back(cluster: KafkaCluster, name: str, follower: ClusterNode, survivor: str) -> float:
    """Stop ``follower``, produce BEHIND bytes, start it: seconds from its restart to its return to the ISR."""
    follower.stop()
    wait_until("the follower out of the ISR", lambda: follower.node_id not in partition_state(survivor, name)[1] or None, TIMEOUT_S)
    produce_behind(survivor, name, BEHIND)
    started = time.monotonic()
    follower.start()
    wait_until("the follower back in the ISR", lambda: follower.node_id in partition_state(survivor, name)[1] or None, TIMEOUT_S, 0.05)
    return time.monotonic() - started


def test_throttled_follower_catches_up_at_the_limit_and_fast_without_it(cluster: KafkaCluster) -> None:
    name = unique_topic("throttle")
    create(cluster.bootstrap, name, min_isr=1)
    leader, _ = wait_until("a full ISR", lambda: (s := partition_state(cluster.bootstrap, name)) and len(s[1]) == 3 and s, TIMEOUT_S)
    controller = wait_until("the active controller", lambda: leader_id(cluster, leader), TIMEOUT_S)
    follower = next(n for n in cluster.brokers if n.node_id not in (leader, controller))
    survivor = cluster.nodes[leader].bootstrap
    client = admin(survivor)
    set_rates(survivor, RATE)
    alter(
        client,
        ConfigResource.Type.TOPIC,
        name,
        {"leader.replication.throttled.replicas": f"0:{leader}", "follower.replication.throttled.replicas": f"0:{follower.node_id}"},
    )

    throttled_s = follower_away_then_back(cluster, name, follower, survivor)
    # The quota lets through at most one fetch beyond the limit before it holds the partition back.
    assert throttled_s >= 0.5 * BEHIND / RATE, f"caught up {BEHIND:,} bytes in {throttled_s:.1f} s under a {RATE:,} B/s throttle"

    # In sync, the follower is not throttled: acks=all is not held to the (now tenfold lower) limit.
    slow = RATE // 10
    set_rates(survivor, slow)
    producer = Producer({"bootstrap.servers": survivor, "acks": "all", "linger.ms": 20, "message.timeout.ms": 60000})
    value = os.urandom(RECORD)
    started = time.monotonic()
    for _ in range(BEHIND // 2 // RECORD):
        producer.produce(name, value)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert time.monotonic() - started < BEHIND / 2 / slow, "acks=all waited on a throttled in-sync follower"

    set_rates(survivor, None)
    alter(client, ConfigResource.Type.TOPIC, name, {"leader.replication.throttled.replicas": None, "follower.replication.throttled.replicas": None})
    # The same distance without the throttle: it catches up within the wait's bound.
    follower_away_then_back(cluster, name, follower, survivor)


def set_default(bootstrap: str, configs: dict[str, str | None]) -> None:
    """Cluster-wide dynamic defaults (the broker resource "", as kafka-configs --entity-default sends it)."""
    altered = tuple(
        iac.AlterableConfig(name=key, config_operation=i8(OP_SET if value is not None else OP_DELETE), value=value) for key, value in configs.items()
    )
    body = iac.IncrementalAlterConfigsRequest(resources=(iac.AlterConfigsResource(resource_type=i8(BROKER_RESOURCE), resource_name="", configs=altered),), validate_only=False)
    [answer] = request(bootstrap, body).responses
    assert answer.error_code == ErrorCode.none, answer.error_message


def broker_config(node: ClusterNode, key: str) -> tuple[str, int]:
    resource = ConfigResource(ConfigResource.Type.BROKER, str(node.node_id))
    client = admin(node.bootstrap)
    entry = client.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)[key]
    return entry.value, entry.source


def test_a_cluster_wide_default_reaches_every_broker_and_replication_goes_on_with_more_fetchers(cluster: KafkaCluster) -> None:
    """num.replica.fetchers and log.retention.bytes set once for all brokers, applied by each while it
    replicates: partitions move to the fetcher their hash now picks, and acks=all keeps working."""
    name = unique_topic("fetchers")
    create(cluster.bootstrap, name, partitions=4, min_isr=1)
    set_default(cluster.bootstrap, {"num.replica.fetchers": "2", "log.retention.bytes": "100000000"})
    try:
        for node in cluster.brokers:
            wait_until(f"node {node.node_id} taking the default", lambda n=node: broker_config(n, "num.replica.fetchers") == ("2", 3) or None, TIMEOUT_S)  # type: ignore[misc]
        acknowledged = produce(cluster.bootstrap, name, [str(i).encode() for i in range(200)])
        assert len(acknowledged) == 200
        for partition in range(4):
            wait_until(f"partition {partition}'s full ISR", lambda p=partition: len(partition_state(cluster.bootstrap, name, p)[1]) == 3 or None, TIMEOUT_S)  # type: ignore[misc]
        assert sorted(read_all(cluster.bootstrap, name, 4, len(acknowledged))) == sorted(acknowledged)
    finally:
        set_default(cluster.bootstrap, {"num.replica.fetchers": None, "log.retention.bytes": None})
