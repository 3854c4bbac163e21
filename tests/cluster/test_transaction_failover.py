"""A transaction coordinator killed with SIGKILL loses nothing it answered: with
``__transaction_state`` at RF=3 and min.isr 2, its writes are acknowledged only once replicated,
so the next coordinator (a survivor, leader of the same partition) carries on the producer's
transactions, and a read_committed consumer sees each committed one exactly once."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.coordinator.coordinator_partitioner import partition_for
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import FAST_FAILOVER, TIMEOUT_S, create, partition_state
from tests.integration.helpers import unique_topic

API_TIMEOUT_S = 30.0
# FAST_FAILOVER: the dead broker fenced, and its partitions moved, within seconds.
TXN_CLUSTER_OVERRIDES = {**FAST_FAILOVER, "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("txn-failover"), combined=3, overrides=TXN_CLUSTER_OVERRIDES)
    try:
        yield c.start()
    finally:
        c.close()


def high_watermark(bootstrap: str, name: str) -> int:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("hw")})
    try:
        return int(probe.get_watermark_offsets(TopicPartition(name, 0), timeout=10, cached=False)[1])
    finally:
        probe.close()


def run_transaction(producer: Producer, name: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(name, value=value, partition=0)
    producer.commit_transaction(API_TIMEOUT_S)


def run_transaction_until_committed(producer: Producer, name: str, values: list[bytes], transactional_id: str, bootstrap: str) -> Producer:
    """Commit ``values`` in one transaction while the coordinator fails over, as an application
    would: a retriable error retries the commit, an abortable one aborts and starts again, a
    fatal one takes a new producer (init_transactions fences the old one). librdkafka finds the
    new coordinator by itself (FindCoordinator again on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
    or a lost connection), so the first attempt normally goes through. Returns the producer."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            run_transaction(producer, name, values)
            return producer
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if time.monotonic() > deadline:
                raise
            if error.fatal():
                producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
                producer.init_transactions(API_TIMEOUT_S)
            elif error.txn_requires_abort():
                producer.abort_transaction(API_TIMEOUT_S)
            elif error.retriable():
                try:
                    producer.commit_transaction(API_TIMEOUT_S)
                    return producer
                except KafkaException:
                    producer.abort_transaction(API_TIMEOUT_S)
            else:
                raise


def read_committed(bootstrap: str, name: str, expected: int) -> list[bytes]:
    """Every committed value of partition 0: waits for ``expected``, then reads on to the high
    watermark, so that any extra is seen."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, 0, 0)])
    values: list[bytes] = []

    def probe() -> bool | None:
        values.extend(m.value() for m in consumer.consume(500, 0.5) if m.error() is None)
        return len(values) >= expected or None

    try:
        wait_until(f"{expected} committed records of {name}", probe, TIMEOUT_S)
        # Then on to the end of the partition as it is now, past every marker: a record committed
        # twice or of an aborted attempt would be before it.
        end = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10, cached=False)[1]

        def at_end() -> bool | None:
            values.extend(m.value() for m in consumer.consume(500, 0.1) if m.error() is None)
            return consumer.position([TopicPartition(name, 0)])[0].offset >= end or None

        wait_until(f"{name} read to offset {end}", at_end, TIMEOUT_S)
    finally:
        consumer.close()
    return values


def test_transactions_go_on_after_the_coordinator_is_killed(cluster: KafkaCluster) -> None:
    name, transactional_id = unique_topic("txn"), unique_topic("txn-id")
    create(cluster.bootstrap, name)  # RF=3, min.insync.replicas=2
    wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, name, 0)[1]) == 3 or None, TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)  # creates __transaction_state on its FindCoordinator

    a = [b"a%d" % i for i in range(10)]
    run_transaction(producer, name, a)  # EndTxn is answered once PrepareCommit is on the ISR
    # The coordinator is the leader of the id's __transaction_state partition.
    txn_partition = partition_for(transactional_id, 50)
    coordinator, isr = partition_state(cluster.bootstrap, TRANSACTION_STATE_TOPIC, txn_partition)
    assert len(isr) == 3, isr
    # A's marker replicated (the high watermark past records 0-9 and the marker at 10): markers are
    # the data partition's business, not the coordinator's, and are not what this test is about.
    wait_until("A's marker replicated", lambda: high_watermark(cluster.bootstrap, name) >= len(a) + 1 or None, TIMEOUT_S)

    # Not started again: the module's only test, its cluster goes with it.
    cluster.nodes[coordinator].kill()
    survivor = next(n for n in cluster.brokers if n.node_id != coordinator)
    b = [b"b%d" % i for i in range(10)]
    producer = run_transaction_until_committed(producer, name, b, transactional_id, cluster.bootstrap)
    new_coordinator, _ = partition_state(survivor.bootstrap, TRANSACTION_STATE_TOPIC, txn_partition)
    assert new_coordinator not in (coordinator, -1)
    producer.flush(API_TIMEOUT_S)
    # Each committed record once, in order; no record of an aborted attempt.
    assert read_committed(survivor.bootstrap, name, len(a) + len(b)) == a + b
