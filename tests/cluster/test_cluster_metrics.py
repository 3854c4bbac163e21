"""metrics.listener on every node of a three-node cluster: the cluster-level series a Kafka dashboard
reads across nodes (docs/metrics.md) agree with each other, and a SIGKILLed broker shows in them
as it does in Kafka's (under-replicated partitions on the leaders, a fenced broker on the active
controller, errors in ErrorsPerSec)."""

from __future__ import annotations

import urllib.request
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.helpers import unique_topic
from tests.ports import free_ports

TIMEOUT_S = 60.0
PARTITIONS = 3
# Short enough for a killed broker to be fenced and to leave the ISR within the test's waits.
FAST_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    ports = free_ports(3)
    c = KafkaCluster(
        tmp_path_factory.mktemp("cluster-metrics"),
        combined=3,
        overrides=FAST_FAILOVER,
        node_overrides={i + 1: {"metrics.listener": f"http://127.0.0.1:{port}"} for i, port in enumerate(ports)},
    )
    try:
        yield c.start()
    finally:
        c.close()


def scrape(cluster: KafkaCluster, node_id: int) -> Samples:
    props = dict(line.split("=", 1) for line in cluster.nodes[node_id].config_file.read_text().splitlines() if "=" in line)
    with urllib.request.urlopen(f"{props['metrics.listener']}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def gauge(samples: Samples, name: str) -> float:
    value = samples.get((name, frozenset()))
    assert value is not None, f"{name} missing"
    return value


def running(cluster: KafkaCluster) -> dict[int, Samples]:
    return {node_id: scrape(cluster, node_id) for node_id, node in cluster.nodes.items() if node.running}


def active_controller(cluster: KafkaCluster) -> tuple[int, dict[int, Samples]] | None:
    """(the one node reporting ActiveControllerCount 1, every running node's samples), once exactly one does."""
    by_node = running(cluster)
    active = [n for n, s in by_node.items() if gauge(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1]
    others = [n for n, s in by_node.items() if gauge(s, "kafka_controller_kafkacontroller_activecontrollercount") == 0]
    if len(active) != 1 or len(others) != len(by_node) - 1:
        return None
    return active[0], by_node


def create_topic(cluster: KafkaCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
    # min.insync.replicas=3: once a replica is gone an acks=all produce is refused, NOT_ENOUGH_REPLICAS.
    topic = NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "3"})
    admin.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)


def test_one_active_controller_one_raft_leader_and_no_under_replicated_partitions(cluster: KafkaCluster) -> None:
    topic = unique_topic("metrics-rf3")
    create_topic(cluster, topic)

    def agreed() -> dict[int, Samples] | None:
        found = active_controller(cluster)
        if found is None:
            return None
        active, by_node = found
        leaders = {gauge(s, "kafka_server_raftmetrics_current_leader") for s in by_node.values()}
        epochs = {gauge(s, "kafka_server_raftmetrics_current_epoch") for s in by_node.values()}
        # Combined nodes: the Raft leader is the active controller.
        if leaders != {active} or len(epochs) != 1:
            return None
        if any(gauge(s, "kafka_server_replicamanager_partitioncount") < PARTITIONS for s in by_node.values()):
            return None
        if sum(gauge(s, "kafka_server_replicamanager_leadercount") for s in by_node.values()) < PARTITIONS:
            return None
        if any(gauge(s, "kafka_server_replicamanager_underreplicatedpartitions") != 0 for s in by_node.values()):
            return None
        return by_node

    by_node = wait_until("one active controller, one Raft leader and epoch, every replica in sync", agreed, TIMEOUT_S, 0.5)
    assert len(by_node) == 3
    active, _ = active_controller(cluster) or (None, {})
    assert active is not None
    on_active = by_node[active]
    assert gauge(on_active, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert gauge(on_active, "kafka_controller_kafkacontroller_activebrokercount") == 3
    assert gauge(on_active, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    # ErrorsPerSec counts successes too (NONE), as Kafka's errorCounts() does: the admin client
    # began with ApiVersions on the brokers it reached.
    assert any(s.get(("kafka_network_requestmetrics_errors_total", frozenset({("request", "ApiVersions"), ("error", "NONE")})), 0) > 0 for s in by_node.values())


def test_a_killed_broker_shows_on_the_leaders_and_on_the_active_controller(cluster: KafkaCluster) -> None:
    topic = unique_topic("metrics-kill")
    create_topic(cluster, topic)
    found = wait_until("one active controller", lambda: active_controller(cluster), TIMEOUT_S, 0.5)
    active = found[0]
    # A broker that is not the active controller: the quorum keeps its leader, and what is
    # measured is the fencing of a broker, not a controller failover.
    victim = next(n for n in cluster.nodes if n != active)
    survivors = [n for n in cluster.nodes if n != victim]
    wait_until(
        "every replica in sync before the kill",
        lambda: all(gauge(scrape(cluster, n), "kafka_server_replicamanager_underreplicatedpartitions") == 0 for n in cluster.nodes),
        TIMEOUT_S,
        0.5,
    )

    cluster.nodes[victim].kill()

    def victim_fenced() -> bool:
        found = active_controller(cluster)
        return found is not None and gauge(found[1][found[0]], "kafka_controller_kafkacontroller_fencedbrokercount") == 1

    wait_until(f"node {victim} fenced on the active controller", victim_fenced, TIMEOUT_S, 0.5)

    def leaders_under_replicated() -> dict[int, Samples] | None:
        by_node = {n: scrape(cluster, n) for n in survivors}
        leading = {n: s for n, s in by_node.items() if gauge(s, "kafka_server_replicamanager_leadercount") > 0}
        # Every partition of the topic had a replica on the victim: all of them lost one.
        if sum(gauge(s, "kafka_server_replicamanager_leadercount") for s in leading.values()) < PARTITIONS:
            return None
        if not all(gauge(s, "kafka_server_replicamanager_underreplicatedpartitions") > 0 for s in leading.values()):
            return None
        return by_node

    by_node = wait_until("under-replicated partitions on every surviving leader", leaders_under_replicated, TIMEOUT_S, 0.5)
    assert sum(gauge(s, "kafka_server_replicamanager_underreplicatedpartitions") for s in by_node.values()) >= PARTITIONS

    # An acks=all produce into an ISR of two with min.insync.replicas=3 is refused by its leader.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 5000, "socket.timeout.ms": 5000})
    failures: list[KafkaException | None] = []
    producer.produce(topic, b"refused", partition=0, on_delivery=lambda err, _msg: failures.append(err))
    producer.flush(TIMEOUT_S)
    assert failures and failures[0] is not None, "the produce was not refused"

    def refused_counted() -> bool:
        return any(
            s.get(("kafka_network_requestmetrics_errors_total", frozenset({("request", "Produce"), ("error", "NOT_ENOUGH_REPLICAS")})), 0) > 0
            for s in (scrape(cluster, n) for n in survivors)
        )

    wait_until("ErrorsPerSec{request=Produce,error=NOT_ENOUGH_REPLICAS} on the leader", refused_counted, TIMEOUT_S, 0.5)
