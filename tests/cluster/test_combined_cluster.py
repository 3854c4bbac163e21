"""Three brokers and a quorum of three controllers, as three combined broker+controller processes
and as six processes (three controller-only, three broker-only): one cluster for every stock
client, whichever broker it bootstraps from. Every test runs on both layouts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.static.primitive import i8

from broker import wire_client

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.conftest import REPO
from tests.integration.helpers import unique_topic

TIMEOUT_S = 30.0


LAYOUTS = {"combined": {"combined": 3}, "separate": {"combined": 0, "controllers": 3, "brokers": 3}}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp(request.param), **LAYOUTS[request.param])
    try:
        yield c.start()
    finally:
        c.close()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create(bootstrap: str, name: str, partitions: int, replication_factor: int = 1) -> None:
    client = admin(bootstrap)  # kept alive until the answer: a destroyed client fails its futures
    futures = client.create_topics([NewTopic(name, partitions, replication_factor)], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futures[name].result(timeout=TIMEOUT_S)


def leaders(bootstrap: str, name: str) -> dict[int, int]:
    topic = admin(bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name]
    return {p: meta.leader for p, meta in topic.partitions.items()}


def metadata_quorum(bootstrap_controller: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "broker", "metadata-quorum", "--bootstrap-controller", bootstrap_controller, "describe", *args],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def broker_ids(cluster: KafkaCluster) -> list[int]:
    return sorted(n.node_id for n in cluster.brokers)


def test_every_node_lists_all_three_brokers(cluster: KafkaCluster) -> None:
    for node in cluster.brokers:
        brokers = admin(node.bootstrap).list_topics(timeout=TIMEOUT_S).brokers
        assert sorted(brokers) == broker_ids(cluster)
        assert {(b.host, b.port) for b in brokers.values()} == {("127.0.0.1", n.spec.client_port) for n in cluster.brokers}


def test_topics_created_through_each_node_spread_their_leaders(cluster: KafkaCluster) -> None:
    for node in cluster.brokers:
        name = unique_topic(f"via{node.node_id}")
        create(node.bootstrap, name, partitions=6)
        found = wait_until(f"{name} in every node's metadata", lambda: all(len(leaders(n.bootstrap, name)) == 6 for n in cluster.brokers) or None, TIMEOUT_S)
        assert found
        assert sorted(set(leaders(node.bootstrap, name).values())) == broker_ids(cluster)


def test_replication_factor_three_places_a_replica_on_every_broker(cluster: KafkaCluster) -> None:
    name = unique_topic("rf3")
    create(cluster.bootstrap, name, partitions=3, replication_factor=3)
    topic = admin(cluster.bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name]
    for meta in topic.partitions.values():
        assert sorted(meta.replicas) == broker_ids(cluster)
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication factor"):
        create(cluster.bootstrap, unique_topic("rf4"), partitions=1, replication_factor=4)


def test_confluent_produces_to_three_leaders_and_consumes_through_any_node(cluster: KafkaCluster) -> None:
    name = unique_topic("conf")
    create(cluster.bootstrap, name, partitions=3)
    bootstrap_one = cluster.brokers[0].bootstrap
    producer = Producer({"bootstrap.servers": bootstrap_one, "acks": "all", "enable.idempotence": True})
    acked: list[tuple[int, int]] = []
    for i in range(300):
        producer.produce(name, value=b"v%d" % i, partition=i % 3, on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset())) if err is None else None)
    assert producer.flush(TIMEOUT_S) == 0
    assert len(acked) == 300
    for node in cluster.brokers:
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition(name, p, 0) for p in range(3)])
        values: set[bytes] = set()
        wait_until("every record", lambda: values.update(m.value() for m in consumer.consume(100, 0.5) if m.error() is None) or len(values) == 300 or None, TIMEOUT_S)
        consumer.close()


def test_kafka_python_and_aiokafka_round_trip(cluster: KafkaCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer

    name = unique_topic("kp")
    create(cluster.bootstrap, name, partitions=3)
    producer = KafkaProducer(bootstrap_servers=cluster.brokers[1].bootstrap, acks="all")
    for i in range(90):
        producer.send(name, value=b"kp%d" % i, partition=i % 3)
    producer.flush(TIMEOUT_S)
    producer.close()

    async def aio() -> set[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=cluster.brokers[2].bootstrap)
        await p.start()
        try:
            for i in range(90):
                await p.send_and_wait(name, value=b"aio%d" % i, partition=i % 3)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(name, bootstrap_servers=cluster.brokers[0].bootstrap, auto_offset_reset="earliest", group_id=unique_topic("ag"))
        await c.start()
        seen: set[bytes] = set()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                while len(seen) < 180:
                    batch = await c.getmany(timeout_ms=500)
                    seen.update(m.value for ms in batch.values() for m in ms)
        finally:
            await c.stop()
        return seen

    seen = asyncio.run(aio())
    assert len(seen) == 180
    consumer = KafkaConsumer(name, bootstrap_servers=cluster.brokers[2].bootstrap, auto_offset_reset="earliest", group_id=unique_topic("kg"), consumer_timeout_ms=10000)
    # Read until all 180 arrive, or until 10 s bring none (then the assertion says how many did).
    read: set[bytes] = set()
    for m in consumer:
        read.add(m.value)
        if len(read) == 180:
            break
    assert len(read) == 180
    consumer.close()


def test_kcat_lists_the_cluster_and_reads_back(cluster: KafkaCluster, tmp_path: Path) -> None:
    name = unique_topic("kcat")
    create(cluster.bootstrap, name, partitions=3)
    lines = "\n".join(f"k{i}" for i in range(30)) + "\n"
    subprocess.run(["kcat", "-b", cluster.brokers[0].bootstrap, "-t", name, "-P"], input=lines, text=True, check=True, timeout=TIMEOUT_S)
    listing = subprocess.run(["kcat", "-b", cluster.brokers[1].bootstrap, "-L"], capture_output=True, text=True, check=True, timeout=TIMEOUT_S).stdout
    assert "3 brokers" in listing
    out = subprocess.run(["kcat", "-b", cluster.brokers[2].bootstrap, "-t", name, "-C", "-e", "-o", "beginning"], capture_output=True, text=True, check=True, timeout=TIMEOUT_S)
    assert sorted(out.stdout.split()) == sorted(f"k{i}" for i in range(30))


def test_metadata_quorum_shows_one_leader_and_three_voters(cluster: KafkaCluster) -> None:
    status = metadata_quorum(cluster.controller_bootstrap(1), "--status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["ClusterId"].strip() == cluster.cluster_id
    assert int(fields["LeaderId"]) in (c.node_id for c in cluster.controllers)
    assert "CurrentVoters" in fields
    replication = metadata_quorum(cluster.controller_bootstrap(2), "--replication")
    assert sum(1 for line in replication.splitlines() if "Leader" in line or "Follower" in line) == 3


def describe_controllers(bootstrap_controller: str) -> Any:
    body = DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(2))
    return wire_client.request(bootstrap_controller, body, client_id="controller-registrations-test")


def test_every_controller_registers_and_describe_cluster_lists_them(cluster: KafkaCluster) -> None:
    """KIP-919: each controller registers itself; DescribeCluster sent to any controller lists
    every registered controller at its advertised controller endpoint, and the active one."""
    wanted = sorted((c.node_id, "127.0.0.1", cluster.controller_demux_ports[c.node_id]) for c in cluster.controllers)

    def described(node_id: int) -> Any:
        response = describe_controllers(cluster.controller_bootstrap(node_id))
        listed = sorted((b.broker_id, b.host, b.port) for b in response.brokers)
        return response if response.error_code == 0 and listed == wanted and response.controller_id in (n for n, _, _ in wanted) else None

    for controller in cluster.controllers:
        response = wait_until(f"controller {controller.node_id} lists every registered controller", lambda: described(controller.node_id), TIMEOUT_S)
        assert response.endpoint_type == 2 and response.cluster_id == cluster.cluster_id
        assert all(b.rack is None for b in response.brokers)
