"""KIP-890 across nodes: partition leaders ask a transaction coordinator on another broker
(AddPartitionsToTxn v5, the broker-to-broker batched form) to verify a transaction's partitions,
or, under transaction version 2, to add them; three combined nodes, RF=3."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4

from broker.coordinator.coordinator_partitioner import partition_for
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import TIMEOUT_S, create, partition_state
from tests.cluster.test_transaction_failover import TXN_CLUSTER_OVERRIDES
from tests.integration import test_transactions_java as java
from tests.integration.helpers import unique_topic
from tests.integration.test_transactions_kip890 import end_v5_txn, produce
from tests.integration.test_transactions_wire import add, describe, init
from tests.integration.wire import request

PARTITIONS = 3
TXN_PARTITIONS = 50  # transaction.state.log.num.partitions
# A leader waits for a transaction's previous markers this long (Kafka's 100 ms by default), so
# that a loaded machine's slow markers do not make the next transaction's first produce fail.
CLUSTER_OVERRIDES = {**TXN_CLUSTER_OVERRIDES, "add.partitions.to.txn.retry.backoff.max.ms": "10000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("txn-verification"), combined=3, overrides=CLUSTER_OVERRIDES)
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
    request(cluster.bootstrap, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,)))  # creates __transaction_state
    txn_partition = partition_for(transactional_id, TXN_PARTITIONS)

    def leader() -> int | None:
        found = partition_state(cluster.bootstrap, TRANSACTION_STATE_TOPIC, txn_partition)[0]
        return found if found in cluster.nodes else None

    return cluster.nodes[wait_until("a transaction coordinator", leader, TIMEOUT_S)].bootstrap


def read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []

    def probe() -> bool | None:
        values.extend(m.value().decode() for m in consumer.consume(500, 0.5) if m.error() is None)
        return len(values) >= expected or None

    try:
        wait_until(f"{expected} committed records of {topic}", probe, TIMEOUT_S)
        values.extend(m.value().decode() for m in consumer.consume(500, 1.0) if m.error() is None)
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
