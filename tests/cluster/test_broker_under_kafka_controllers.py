"""A kbroker broker-only node under an Apache Kafka 4.4 controller-only node (issue 36, M2): it
follows Kafka's __cluster_metadata as an observer, registers with the feature ranges Kafka's
controller checks, heartbeats, is fenced and unfenced by Kafka's controller as Kafka's own brokers
are, serves clients on the partitions Kafka's controller places on it, and follows the
`kafka-features upgrade` Kafka's controller carries out from the 3.9-IV0 the cluster was formatted at.

Kafka is the oracle for the broker's liveness: its controller's log says when it fenced the broker
and when it granted the unfence, and which Fetch version the broker's Raft client sent (its
request log); its kafka-metadata-quorum tool lists the broker as an observer of the quorum with
its lag, and its kafka-features tool what is finalized and what it refuses.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, DescribeClusterResult, NewTopic

from benchmarks.apache_kafka import LOG4J2_PROPERTIES, KafkaNode, KafkaReferenceCluster
from benchmarks.mixed_cluster import kbroker_broker
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
# The release the controller is formatted at: kraft.version 0 and every feature but metadata.version
# off, so that `upgrade --release-version 4.4` moves all seven. The answers expected are those Kafka
# 4.4's controller gives with a Kafka broker registered instead (same commands, run by hand).
FORMATTED_AT = "3.9-IV0"
RAFT_CLIENT_ID = f"kbroker-{BROKER_ID}-raft"
# Kafka's request log (DEBUG) names each request's api key, version and client id.
REQUEST_LOG = re.compile(r'"requestApiKey":(\d+),"requestApiVersion":(\d+),"correlationId":-?\d+,"clientId":"([^"]*)"')
FETCH, API_VERSIONS = 1, 18


@dataclass
class Mixed:
    kafka: KafkaReferenceCluster
    controller: KafkaNode
    broker: BrokerProcess
    lib: Path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[Mixed]:
    root = tmp_path_factory.mktemp("under-kafka")
    overrides = {
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        # The controller supports metadata.version 4.5-IV0 (in development) and kbroker's broker
        # does not: asked for it, the controller refuses it on the broker's registered range.
        "unstable.feature.versions.enable": "true",
    }
    kafka = KafkaReferenceCluster(root / "kafka", kafka_lib, nodes=0, controllers=1, overrides=overrides)
    request_log = LOG4J2_PROPERTIES.replace("logger.request.level = WARN", "logger.request.level = DEBUG")
    assert request_log != LOG4J2_PROPERTIES
    kafka.log4j_config.write_text(request_log)
    controller = kafka.controllers[0]
    # One broker: the internal topics Kafka's controller is asked to create must fit on it.
    internal = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0"}
    broker = kbroker_broker(root / "kbroker", BROKER_ID, f"{controller.node_id}@{controller.controller_bootstrap}", internal)
    assert broker.config_file is not None
    try:
        # Kafka's format and start-up are JVM starts: kbroker is formatted (in process, with
        # Kafka's cluster id) and launched meanwhile, and finds the quorum once it is up.
        with ThreadPoolExecutor(1) as pool:
            kafka_formatted = pool.submit(kafka.format, {controller.node_id: ("--release-version", FORMATTED_AT)})
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


def requests_from(m: Mixed, client_id: str, since: int = 0) -> Counter[tuple[int, int]]:
    """(api key, version): the requests Kafka's controller logged from ``client_id``, past offset ``since`` of its log."""
    return Counter((int(key), int(version)) for key, version, client in REQUEST_LOG.findall(controller_log(m), since) if client == client_id)


def features(m: Mixed, *bootstrap: str) -> dict[str, str]:
    """kafka-features describe: each feature's FinalizedVersionLevel, asked of a controller or a broker."""
    done = kafka_tool(m.lib, "org.apache.kafka.tools.FeatureCommand", *bootstrap, "describe")
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(re.findall(r"Feature: (\S+).*FinalizedVersionLevel: (\S+)", done.stdout))


def feature_command(m: Mixed, *args: str) -> tuple[int, str]:
    """kafka-features against Kafka's controller: exit code, and what it printed (stdout, then stderr)."""
    done = kafka_tool(m.lib, "org.apache.kafka.tools.FeatureCommand", "--bootstrap-controller", m.controller.controller_bootstrap, *args)
    return done.returncode, done.stdout + done.stderr


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
    # As Kafka's own Raft client: ApiVersions on each connection, then Fetch in the newest version
    # both take (v18, KIP-1166's follower high watermark), whatever the metadata.version (3.9-IV0).
    sent = requests_from(mixed, RAFT_CLIENT_ID)
    assert sent[(API_VERSIONS, 3)] >= 1 and {version for key, version in sent if key == FETCH} == {18}, sent


@dataclass
class Served:
    """A topic created through Kafka's controller, its records produced and read back by a group."""

    topic: str
    group: str
    placement: dict[int, tuple[int, list[int], list[int]]]  # partition: leader, replicas, ISR
    consumed: list[tuple[bytes, bytes]]
    committed: int


def serve(bootstrap: str) -> Served:
    """A new topic created through kbroker (forwarded to Kafka's controller), RECORDS produced to it and consumed by a group."""
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


@pytest.fixture(scope="module")
def served(mixed: Mixed) -> Served:
    return serve(mixed.broker.bootstrap)


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


def test_kafkas_controller_upgrades_the_release_and_kbroker_follows(mixed: Mixed, served: Served) -> None:
    """`kafka-features upgrade --release-version 4.4` from 3.9-IV0 against Kafka's controller, with
    kbroker's broker registered: the controller checks the broker's ranges (refusing 4.5-IV0, which
    kbroker does not support, and naming it), finalizes all seven features and prints what it does
    with a Kafka 4.4 broker registered instead, kbroker applies them (FeatureLevelRecords, the
    KRaftVersionRecord and VotersRecord of kraft.version 1, then PartitionRecord v2 for a new topic)
    and keeps serving; the downgrade Kafka refuses with its own broker is refused alike."""
    assert features(mixed, "--bootstrap-controller", mixed.controller.controller_bootstrap)["metadata.version"] == FORMATTED_AT
    code, out = feature_command(mixed, "upgrade", "--metadata", "4.5-IV0")
    assert code == 1 and f"Invalid update version 34 for feature metadata.version. Broker {BROKER_ID} only supports versions 7-33" in out, out
    log_at_upgrade = len(controller_log(mixed))

    code, out = feature_command(mixed, "upgrade", "--release-version", "4.4")
    upgraded = {"eligible.leader.replicas.version": "1", "group.version": "1", "kraft.version": "1", "metadata.version": "33",
                "share.version": "2", "streams.version": "1", "transaction.version": "2"}
    assert (code, out) == (0, "".join(f"{name} was upgraded to {level}.\n" for name, level in upgraded.items())), out
    finalized = upgraded | {"metadata.version": "4.4-IV2"}
    assert features(mixed, "--bootstrap-controller", mixed.controller.controller_bootstrap) == finalized
    # kbroker's ApiVersions (what kafka-features describe asks a broker) shows what it applied.
    wait_until("kbroker at the upgraded levels", lambda: features(mixed, "--bootstrap-server", mixed.broker.bootstrap) == finalized, TIMEOUT_S)

    # Kafka refuses a downgrade across levels that changed the metadata, whoever is registered.
    code, out = feature_command(mixed, "downgrade", "--metadata", "4.4-IV1")
    assert code == 1 and "Unsupported metadata.version downgrade from 33 to 32. Refusing to perform the requested downgrade because it might delete metadata information." in out, out

    # Still serving: the old topic's records and group offsets, and a topic created at 4.4-IV2.
    assert sorted(read_all(mixed.broker.bootstrap, served.topic, PARTITIONS)) == sorted(RECORDS)
    assert committed(mixed.broker.bootstrap, served.group, served.topic, PARTITIONS) == len(RECORDS)
    after = serve(mixed.broker.bootstrap)
    assert sorted(after.consumed) == sorted(RECORDS) and after.committed == len(RECORDS)
    assert after.placement == {p: (BROKER_ID, [BROKER_ID], [BROKER_ID]) for p in range(PARTITIONS)}
    wait_until("broker 9 an observer with lag 0 at kraft.version 1", lambda: caught_up_observer(mixed), TIMEOUT_S)
    # Kafka's Raft client does not change its Fetch version with metadata.version; neither does kbroker's.
    assert {version for key, version in requests_from(mixed, RAFT_CLIENT_ID, log_at_upgrade) if key == FETCH} == {18}
