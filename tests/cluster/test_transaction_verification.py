"""KIP-890 across nodes: partition leaders ask a transaction coordinator on another broker
(AddPartitionsToTxn v5, the broker-to-broker batched form) to verify a transaction's partitions,
or, under transaction version 2, to add them; three combined nodes, RF=3. Each node serves its
request metrics, which say which versions a client spoke."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import TIMEOUT_S, admin, create, partition_state
from tests.cluster.test_transaction_failover import TXN_CLUSTER_OVERRIDES
from tests.integration import test_transactions_java as java
from tests.integration.helpers import unique_topic
from tests.integration.test_prometheus_metrics import scrape
from tests.integration.test_transactions_kip890 import end_v5_txn, produce
from tests.integration.test_transactions_wire import add, describe, init
from tests.integration.wire import request
from tests.ports import free_ports

PARTITIONS = 3
TXN_PARTITIONS = 50  # transaction.state.log.num.partitions
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions
# A leader waits for a transaction's previous markers this long (Kafka's 100 ms by default), so
# that a loaded machine's slow markers do not make the next transaction's first produce fail.
CLUSTER_OVERRIDES = {**TXN_CLUSTER_OVERRIDES, "add.partitions.to.txn.retry.backoff.max.ms": "10000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    metrics = {node_id: {"metrics.listener": f"http://127.0.0.1:{port}"} for node_id, port in enumerate(free_ports(3), start=1)}
    c = KafkaCluster(tmp_path_factory.mktemp("txn-verification"), combined=3, overrides=CLUSTER_OVERRIDES, node_overrides=metrics)
    try:
        yield c.start()
    finally:
        c.close()


def leaders(cluster: KafkaCluster, topic: str) -> dict[int, str]:
    """Each partition's leader's bootstrap, once every partition has a full ISR."""
    for p in range(PARTITIONS):
        wait_until(f"{topic}-{p} in sync", lambda p=p: len(partition_state(cluster.bootstrap, topic, p)[1]) == 3 or None, TIMEOUT_S)  # type: ignore[misc]
    return {p: cluster.nodes[partition_state(cluster.bootstrap, topic, p)[0]].bootstrap for p in range(PARTITIONS)}


def coordinator_of(cluster: KafkaCluster, transactional_id: str) -> str:
    return cluster.nodes[coordinator_id(cluster, 1, transactional_id)].bootstrap


def coordinator_id(cluster: KafkaCluster, key_type: int, key: str) -> int:
    """The node coordinating a group (key type 0) or a transactional id (1): its partition's leader."""
    request(cluster.bootstrap, find_v4.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,)))  # creates the topic
    topic, partitions = (TRANSACTION_STATE_TOPIC, TXN_PARTITIONS) if key_type == 1 else (GROUP_METADATA_TOPIC, OFFSETS_PARTITIONS)

    def leader() -> int | None:
        found = partition_state(cluster.bootstrap, topic, partition_for(key, partitions))[0]
        return found if found in cluster.nodes else None

    return wait_until(f"the coordinator of {key}", leader, TIMEOUT_S)


def read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    """Every committed value of ``topic``, read to each partition's last stable offset: anything
    past ``expected`` would be a duplicate or an aborted record."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    at_end: set[int] = set()

    def probe() -> bool | None:
        for m in consumer.consume(500, 0.5):
            if m.error() is None:
                values.append(m.value().decode())
                at_end.discard(m.partition())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
        return (len(values) >= expected and len(at_end) == PARTITIONS) or None

    try:
        wait_until(f"{expected} committed records of {topic}, read to its end", probe, TIMEOUT_S)
    finally:
        consumer.close()
    return values


def test_leaders_verify_with_a_remote_coordinator(cluster: KafkaCluster) -> None:
    topic, txn = unique_topic("remote-verify"), unique_topic("remote-vtx")
    create(cluster.bootstrap, topic, partitions=PARTITIONS)
    led_by = leaders(cluster, topic)
    coordinator = coordinator_of(cluster, txn)
    assert set(led_by.values()) - {coordinator}, "every partition is led by the coordinator"

    def initialised() -> tuple[int, int, int] | None:
        answer = init(coordinator, txn)  # COORDINATOR_LOAD_IN_PROGRESS while the partition loads
        return answer if answer[0] == ErrorCode.none else None

    _, pid, epoch = wait_until("InitProducerId", initialised, TIMEOUT_S)

    # Version 1: no AddPartitionsToTxn, so every leader is told the partition is not in the transaction.
    for p, leader in led_by.items():
        assert produce(leader, 9, txn, topic, pid, epoch, 0, b"x", partition=p) == ErrorCode.invalid_txn_state
    assert add(coordinator, txn, pid, epoch, {topic: tuple(range(PARTITIONS))}) == {(topic, p): ErrorCode.none for p in range(PARTITIONS)}
    for p, leader in led_by.items():
        assert produce(leader, 9, txn, topic, pid, epoch, 0, f"v1-{p}".encode(), partition=p) == ErrorCode.none
    assert request(coordinator, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True)).error_code == ErrorCode.none
    # Once the markers are written (EndTxn answers before the remote ones are), a late batch at
    # each leader is refused: nothing is left open.
    wait_until("the markers written", lambda: describe(coordinator, txn)[0].transaction_state == "CompleteCommit" or None, TIMEOUT_S)
    for p, leader in led_by.items():
        assert produce(leader, 9, txn, topic, pid, epoch, 1, b"late", partition=p) == ErrorCode.invalid_txn_state

    # Version 2: the leaders have the remote coordinator add their partitions.
    for p, leader in led_by.items():
        assert produce(leader, 12, txn, topic, pid, epoch, 1, f"v2-{p}".encode(), partition=p) == ErrorCode.none
    [state] = describe(coordinator, txn)
    assert sorted(p for t in state.topics for p in t.partitions) == list(range(PARTITIONS))
    assert end_v5_txn(coordinator, txn, pid, epoch, commit=True) == (ErrorCode.none, pid, epoch + 1)
    assert sorted(read_committed(cluster.bootstrap, topic, 2 * PARTITIONS)) == sorted([f"v1-{p}" for p in range(PARTITIONS)] + [f"v2-{p}" for p in range(PARTITIONS)])


def test_the_next_transaction_begins_while_the_last_ones_markers_are_written(cluster: KafkaCluster) -> None:
    """Issue 32: a transaction version 2 producer begins its next transaction as soon as EndTxn
    answers, before the coordinator on another node has written the markers. Its first batch
    must be appended, not refused (NOT_ENOUGH_REPLICAS, as it was, or CONCURRENT_TRANSACTIONS):
    franz-go retries either only after a metadata refresh, 5 s later. The leader retries the add (CONCURRENT_TRANSACTIONS) until the
    markers are in, as Kafka's does."""
    topic, txn = unique_topic("next-txn"), unique_topic("next-tx")
    create(cluster.bootstrap, topic, partitions=PARTITIONS)
    led_by = leaders(cluster, topic)
    coordinator = coordinator_of(cluster, txn)
    remote = [(p, b) for p, b in led_by.items() if b != coordinator]
    assert remote, "every partition is led by the coordinator"
    partition, leader = remote[0]

    def initialised() -> tuple[int, int, int] | None:
        answer = init(coordinator, txn)
        return answer if answer[0] == ErrorCode.none else None

    _, pid, epoch = wait_until("InitProducerId", initialised, TIMEOUT_S)
    for i in range(5):
        assert produce(leader, 12, txn, topic, pid, epoch, 0, f"t{i}".encode(), partition=partition) == ErrorCode.none, f"transaction {i}"
        error, pid, epoch = end_v5_txn(coordinator, txn, pid, epoch, commit=True)
        assert error == ErrorCode.none
    assert sorted(read_committed(cluster.bootstrap, topic, 5)) == [f"t{i}" for i in range(5)]


def test_a_librdkafka_producer_commits_across_the_cluster(cluster: KafkaCluster) -> None:
    """A transaction version 1 client with verification on every leader.

    Each transaction's records are flushed before it ends. Without the flush, an abort called
    while the previous commit's markers are still being written sends EndTxn(abort) once an
    AddPartitionsToTxn has been answered CONCURRENT_TRANSACTIONS; the coordinator answers it
    CONCURRENT_TRANSACTIONS as Kafka's does (tests/unit/test_transaction_coordinator.py), where it
    used to answer INVALID_TXN_STATE, fatal to librdkafka (docs/design/transactions.md, "An abort
    right after a commit")."""
    topic, txn = unique_topic("rdkafka-verify"), unique_topic("rdkafka-vtx")
    create(cluster.bootstrap, topic, partitions=PARTITIONS)
    leaders(cluster, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    for attempt, commit in (("a", True), ("b", False), ("c", True)):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, value=f"{attempt}{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(TIMEOUT_S) == 0
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
    assert sorted(read_committed(cluster.bootstrap, topic, 60)) == sorted([f"a{i}" for i in range(30)] + [f"c{i}" for i in range(30)])


def test_the_java_client_on_transaction_version_2_across_the_cluster(cluster: KafkaCluster, kafka_lib: Path) -> None:
    """Kafka's copier: its sink's partitions and its group's offsets partition are added to each
    transaction by their leaders, mostly on other brokers than the coordinator."""
    source, sink, group, txn = unique_topic("java-src"), unique_topic("java-sink"), unique_topic("java-g"), unique_topic("java-tx")
    create(cluster.bootstrap, source)
    create(cluster.bootstrap, sink, partitions=PARTITIONS)
    leaders(cluster, sink)
    java.fill(cluster.bootstrap, source, java.RECORDS)
    java.copy_transactionally(kafka_lib, cluster.bootstrap, source, sink, group, txn, java.RECORDS)
    copied = read_committed(cluster.bootstrap, sink, java.RECORDS)
    assert sorted(copied, key=lambda v: int(v[1:])) == [f"v{i}" for i in range(java.RECORDS)]


def test_the_java_client_copies_exactly_once_across_a_coordinator_kill(cluster: KafkaCluster, kafka_lib: Path) -> None:
    """The consume-transform-produce loop of issue #17 on transaction version 2: the copier's
    transaction coordinator is killed (SIGKILL) mid-copy; the next one, reading the epochs and
    the transaction version from the replicated ``__transaction_state``, carries on, and
    read_committed sees each record exactly once."""
    source, sink, group, txn = unique_topic("java-src"), unique_topic("java-sink"), unique_topic("java-g"), unique_topic("java-tx")
    create(cluster.bootstrap, source)
    create(cluster.bootstrap, sink, partitions=PARTITIONS)
    leaders(cluster, sink)
    java.fill(cluster.bootstrap, source, java.RECORDS)
    coordinator = next(n for n in cluster.brokers if n.bootstrap == coordinator_of(cluster, txn))
    survivor = next(n for n in cluster.brokers if n is not coordinator)
    progress: list[str] = []
    copier = subprocess.Popen(java.copier_command(kafka_lib, survivor.bootstrap, source, sink, group, txn, java.RECORDS), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=lambda: progress.extend(copier.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until("a few transactions copied", lambda: any('"totalProcessed":2' in line for line in progress) or None, TIMEOUT_S)
        assert copier.poll() is None, "the copy ended before the coordinator could be killed"
        coordinator.warm_up()  # its next interpreter imports the broker while it is down
        coordinator.kill()
        try:
            assert copier.wait(java.COPY_TIMEOUT_S) == 0, "".join(progress[-20:]) + (copier.stderr.read() if copier.stderr else "")
        finally:
            coordinator.launch()
            coordinator.await_started()
    finally:
        if copier.poll() is None:
            copier.kill()
            copier.wait()
    copied = read_committed(survivor.bootstrap, sink, java.RECORDS)
    assert sorted(copied, key=lambda v: int(v[1:])) == [f"v{i}" for i in range(java.RECORDS)]


def create_led_by(cluster: KafkaCluster, topic: str, partitions: int, leader: int) -> None:
    """``topic`` at RF=3, min ISR 2, its partition 0 led by ``leader`` (the first replica of an
    assignment is its preferred leader) and the others by the other nodes in turn."""
    order = [leader, *(n for n in cluster.nodes if n != leader)]
    assignment = [order[p % 3 :] + order[: p % 3] for p in range(partitions)]
    new = NewTopic(topic, num_partitions=partitions, replica_assignment=assignment, config={"min.insync.replicas": "2"})
    client = admin(cluster.bootstrap)  # held: a collected client fails its futures
    client.create_topics([new], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S)


def led_and_in_sync(cluster: KafkaCluster, topic: str, leader: int) -> None:
    wait_until(f"{topic}-0 led by node {leader} with a full ISR", lambda: partition_state(cluster.bootstrap, topic) == (leader, tuple(sorted(cluster.nodes))) or None, TIMEOUT_S)


def requests_answered(cluster: KafkaCluster, node_id: int) -> dict[tuple[str, int], float]:
    """(request name, version) -> requests the node answered since it started (its request metrics)."""
    props = dict(line.split("=", 1) for line in cluster.nodes[node_id].config_file.read_text().splitlines() if "=" in line)
    counts: dict[tuple[str, int], float] = {}
    for (name, labels), value in scrape(int(props["metrics.listener"].rsplit(":", 1)[1])).items():
        tags = dict(labels)
        if name == "kafka_network_requestmetrics_requests_total":
            counts[(tags["request"], int(tags["version"]))] = value
    return counts


def processed(progress: list[str]) -> int:
    """Records the copier has committed so far, from the JSON status line it prints each loop."""
    return max((json.loads(line).get("totalProcessed", 0) for line in list(progress) if line.startswith("{")), default=0)


def test_the_java_client_copies_exactly_once_across_a_partition_leader_kill(cluster: KafkaCluster, kafka_lib: Path) -> None:
    """Issue 35: Kafka's copier on transaction version 2 while the node leading both its input
    partition and its output partition (neither its transaction nor its group coordinator) is
    SIGKILLed mid-copy and started again once a transaction has committed without it (the copy
    usually still going). The producer sends its batches again to the output's new leader, which
    has the coordinator add the partition (or the copier aborts and copies again from its
    committed offset), and the consumer fetches from the input's new leader; read_committed sees
    each record exactly once. Transaction version 2 is what the client spoke: the coordinator
    answered its EndTxn at v5 only (Kafka's client caps it at v4 under version 1,
    EndTxnRequest.Builder), at least one per transaction, and got no AddOffsetsToTxn and no
    client AddPartitionsToTxn (v4 and below)."""
    source, sink, group, txn = unique_topic("java-src"), unique_topic("java-sink"), unique_topic("java-g"), unique_topic("java-tx")
    coordinator, group_coordinator = coordinator_id(cluster, 1, txn), coordinator_id(cluster, 0, group)
    victim = next(n for n in cluster.brokers if n.node_id not in {coordinator, group_coordinator})
    create_led_by(cluster, source, 1, victim.node_id)
    create_led_by(cluster, sink, PARTITIONS, victim.node_id)
    led_and_in_sync(cluster, source, victim.node_id)
    led_and_in_sync(cluster, sink, victim.node_id)
    java.fill(cluster.bootstrap, source, java.RECORDS)
    survivors = ",".join(n.bootstrap for n in cluster.brokers if n is not victim)
    before = requests_answered(cluster, coordinator)
    progress: list[str] = []
    copier = subprocess.Popen(java.copier_command(kafka_lib, survivors, source, sink, group, txn, java.RECORDS), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=lambda: progress.extend(copier.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until("a few transactions copied", lambda: processed(progress) >= 2 * java.PER_TRANSACTION or None, TIMEOUT_S)
        assert copier.poll() is None, "the copy ended before the leader could be killed"
        victim.warm_up()
        killed_at = processed(progress)
        victim.kill()
        try:
            # The copy goes on under the new leaders before the node comes back.
            wait_until("a transaction committed without the killed leader", lambda: processed(progress) > killed_at or copier.poll() is not None or None, TIMEOUT_S)
            victim.launch()
            assert copier.wait(java.COPY_TIMEOUT_S) == 0, "".join(progress[-20:]) + (copier.stderr.read() if copier.stderr else "")
        finally:
            if not victim.running:
                victim.launch()
            victim.await_started()
    finally:
        if copier.poll() is None:
            copier.kill()
            copier.wait()
    after = requests_answered(cluster, coordinator)
    spoken = {key: after.get(key, 0) - before.get(key, 0) for key in after if after.get(key, 0) != before.get(key, 0)}
    assert {v for (name, v) in spoken if name == "EndTxn"} == {5}, spoken
    assert spoken[("EndTxn", 5)] >= java.RECORDS // java.PER_TRANSACTION, spoken
    assert not [key for key in spoken if key[0] == "AddOffsetsToTxn" or key[0] == "AddPartitionsToTxn" and key[1] < 5], spoken

    copied = read_committed(cluster.bootstrap, sink, java.RECORDS)
    assert sorted(copied, key=lambda v: int(v[1:])) == [f"v{i}" for i in range(java.RECORDS)]
    # The killed node is back in both partitions' ISR: the module's cluster is whole again.
    for topic in (source, sink):
        wait_until(f"{topic}-0 in sync", lambda topic=topic: len(partition_state(cluster.bootstrap, topic)[1]) == 3 or None, TIMEOUT_S)  # type: ignore[misc]
