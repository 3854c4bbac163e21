"""A kbroker broker-only node under an Apache Kafka 4.4 controller-only node (issue 36, M2): it
follows Kafka's __cluster_metadata as an observer, registers with the feature ranges Kafka's
controller checks, heartbeats, is fenced and unfenced by Kafka's controller as Kafka's own brokers
are, and serves clients on the partitions Kafka's controller places on it.

Kafka is the oracle for the broker's liveness: its controller's log says when it fenced the broker
and when it granted the unfence, and its kafka-metadata-quorum tool lists the broker as an
observer of the quorum with its lag.
"""

from __future__ import annotations

import contextlib
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, DescribeClusterResult, NewTopic

from benchmarks.apache_kafka import KafkaNode, KafkaReferenceCluster
from broker.cli import main as kbroker_main
from tests.cluster.cluster import wait_until
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import unique_topic
from tests.kafka_tools import kafka_tool

TIMEOUT_S = 30.0
BROKER_ID = 9
PARTITIONS = 3
RECORDS = [(b"k%d" % i, b"v%d" % i) for i in range(300)]
# Kafka's controller fences a broker that missed its heartbeats for this long, and refuses a
# restarted broker's registration (DUPLICATE_BROKER_REGISTRATION) until then: 9 s by default.
SESSION_TIMEOUT_MS = 4000


@dataclass
class Mixed:
    kafka: KafkaReferenceCluster
    controller: KafkaNode
    broker: BrokerProcess
    lib: Path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[Mixed]:
    root = tmp_path_factory.mktemp("under-kafka")
    kafka = KafkaReferenceCluster(root / "kafka", kafka_lib, nodes=0, controllers=1, overrides={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    controller = kafka.controllers[0]
    broker = BrokerProcess(root / "kbroker" / "data")
    broker.data_dir.mkdir(parents=True)
    broker.config_file = root / "kbroker" / "server.properties"
    props = {
        "node.id": str(BROKER_ID),
        "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": f"{controller.node_id}@{controller.controller_bootstrap}",
        "log.dirs": str(broker.data_dir),
        "broker.heartbeat.interval.ms": "500",
        # One broker: the internal topics Kafka's controller is asked to create must fit on it.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
    }
    broker.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    try:
        # Kafka's format and start-up are JVM starts: kbroker is formatted (in process, with
        # Kafka's cluster id) and launched meanwhile, and finds the quorum once it is up.
        with ThreadPoolExecutor(1) as pool:
            kafka_formatted = pool.submit(kafka.format)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = kbroker_main(["storage", "format", "--cluster-id", kafka.cluster_id, "--config", str(broker.config_file), "--no-initial-controllers"])
            assert code == 0, out.getvalue()
            broker.launch()
            kafka_formatted.result()
        kafka.launch(controller.node_id)
        kafka.await_started(controller.node_id)
        broker.await_started()
        yield Mixed(kafka, controller, broker, kafka_lib)
    finally:
        retire(broker)
        kafka.close()


def quorum_replication(m: Mixed) -> dict[int, dict[str, str]]:
    """kafka-metadata-quorum describe --replication against Kafka's controller, by node id."""
    done = kafka_tool(m.lib, "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller", m.controller.controller_bootstrap, "describe", "--replication")
    assert done.returncode == 0, done.stdout + done.stderr
    header, *rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    return {int(row[0]): dict(zip(header, row)) for row in rows}


def caught_up_observer(m: Mixed) -> dict[str, str] | None:
    row = quorum_replication(m).get(BROKER_ID)
    return row if row is not None and row["Status"] == "Observer" and int(row["Lag"]) == 0 else None


def controller_log(m: Mixed) -> str:
    return m.controller.log_path.read_text(errors="replace")


def describe_cluster(bootstrap: str) -> DescribeClusterResult:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer: a collected client fails its futures
    return admin.describe_cluster(request_timeout=10).result(timeout=15)


def read_all(bootstrap: str, topic: str, partitions: int, group: str | None = None) -> list[tuple[bytes, bytes]]:
    """Every record of ``topic`` from the start; with ``group``, its position committed at the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group or unique_topic("reader"), "auto.offset.reset": "earliest", "enable.auto.commit": False})
    if group is None:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    else:
        consumer.subscribe([topic])
    seen: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(seen) < len(RECORDS) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.key(), msg.value()))
        if group is not None:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return sum(tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S))
    finally:
        consumer.close()


def test_registered_unfenced_and_an_observer_of_kafkas_quorum(mixed: Mixed) -> None:
    described = describe_cluster(mixed.broker.bootstrap)
    assert described.cluster_id == mixed.kafka.cluster_id
    assert [n.id for n in described.nodes] == [BROKER_ID]
    log = controller_log(mixed)
    assert f"The request from broker {BROKER_ID} to unfence has been granted" in log
    # The NoOpRecords Kafka's controller writes every 500 ms make a lag of one or two records
    # come and go: an observer that keeps fetching shows 0 again within a fetch.
    row = wait_until("broker 9 an observer with lag 0", lambda: caught_up_observer(mixed), TIMEOUT_S)
    assert row["DirectoryId"] != "AAAAAAAAAAAAAAAAAAAAAA"


@dataclass
class Served:
    """A topic created through Kafka's controller, its records produced and read back by a group."""

    topic: str
    group: str
    placement: dict[int, tuple[int, list[int], list[int]]]  # partition: leader, replicas, ISR
    consumed: list[tuple[bytes, bytes]]
    committed: int


@pytest.fixture(scope="module")
def served(mixed: Mixed) -> Served:
    bootstrap = mixed.broker.bootstrap
    topic, group = unique_topic("under-kafka"), unique_topic("g")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S + 10)
    described = wait_until(
        f"{topic} with a leader for every partition",
        lambda: (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None and len(t.partitions) == PARTITIONS
        and all(p.leader >= 0 for p in t.partitions.values()) and t,
        TIMEOUT_S,
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for key, value in RECORDS:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(TIMEOUT_S) == 0
    consumed = read_all(bootstrap, topic, PARTITIONS, group)
    placement = {p.id: (p.leader, p.replicas, p.isrs) for p in described.partitions.values()}
    return Served(topic, group, placement, consumed, committed(bootstrap, group, topic, PARTITIONS))


def test_a_topic_created_through_kafkas_controller_takes_and_serves_records(served: Served) -> None:
    assert served.placement == {p: (BROKER_ID, [BROKER_ID], [BROKER_ID]) for p in range(PARTITIONS)}
    assert sorted(served.consumed) == sorted(RECORDS)
    assert served.committed == len(RECORDS)


def test_a_sigkilled_broker_is_fenced_by_kafkas_controller_then_unfenced_and_serves_its_records(mixed: Mixed, served: Served) -> None:
    topic, group = served.topic, served.group
    epoch = mixed.broker.events_named("broker.registered", current_run=True)[-1]["broker_epoch"]
    mixed.broker.kill()
    fenced = f"Fencing broker {BROKER_ID} at epoch {epoch} because its session has timed out"
    wait_until("Kafka's controller fencing broker 9", lambda: fenced in controller_log(mixed), SESSION_TIMEOUT_MS / 1000 + TIMEOUT_S)
    granted_before = controller_log(mixed).count(f"The request from broker {BROKER_ID} to unfence has been granted")
    mixed.broker.launch()
    mixed.broker.await_started()
    (registered,) = mixed.broker.events_named("broker.registered", current_run=True)
    assert registered["broker_epoch"] > epoch
    assert controller_log(mixed).count(f"The request from broker {BROKER_ID} to unfence has been granted") == granted_before + 1
    assert [n.id for n in describe_cluster(mixed.broker.bootstrap).nodes] == [BROKER_ID]
    assert sorted(read_all(mixed.broker.bootstrap, topic, PARTITIONS)) == sorted(RECORDS)
    assert committed(mixed.broker.bootstrap, group, topic, PARTITIONS) == len(RECORDS)
    wait_until("broker 9 an observer with lag 0 again", lambda: caught_up_observer(mixed), TIMEOUT_S)
