"""Partition data replicated across three brokers: followers copy their leader, the ISR follows
them, acks=all waits for min.insync.replicas, and killing the leader (SIGKILL) loses no
acknowledged record."""

from __future__ import annotations

import datetime
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_producers.v0.request import TopicRequest as DescribeProducersTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from broker.server import CONTROLLED_SHUTDOWN_TIMEOUT_S
from broker.wire_client import encode_request, request
from tests.cluster.cluster import KafkaCluster, leader_id, wait_until
from tests.integration.helpers import unique_topic

TIMEOUT_S = 60.0
# Short enough for a test to see a dead follower leave the ISR and a dead broker fenced.
FAST_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    # Committed offsets replicated like any partition: a coordinator's death loses none.
    "offsets.topic.replication.factor": "3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("replication"), combined=3, overrides=FAST_FAILOVER)
    try:
        yield c.start()
    finally:
        c.close()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create(bootstrap: str, name: str, partitions: int = 1, min_isr: int = 2) -> None:
    client = admin(bootstrap)
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_isr)})
    client.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)


def partition_state(bootstrap: str, name: str, partition: int = 0) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) as Metadata shows them."""
    meta = admin(bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name].partitions[partition]
    return meta.leader, tuple(sorted(meta.isrs))


def produce(bootstrap: str, name: str, values: list[bytes], acks: str = "all") -> list[tuple[int, int, bytes]]:
    """Send every value and return (partition, offset, value) of those the cluster acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all", "message.timeout.ms": 30000})
    acked: list[tuple[int, int, bytes]] = []

    def done(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for value in values:
        producer.produce(name, value=value, on_delivery=done)
        producer.poll(0)
    producer.flush(TIMEOUT_S)
    return acked


@contextmanager
def producing(bootstrap: str, name: str, prefix: bytes, per_batch: int) -> Iterator[list[tuple[int, int, bytes]]]:
    """An acks=all producer sending batches of ``per_batch`` records (40 at most) in a thread; the
    list of what was acknowledged so far, until the block ends and the thread is joined."""
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def keep_producing() -> None:
        batch = 0
        while not stop.is_set() and batch < 40:
            acked.extend(produce(bootstrap, name, [prefix + b"%d-%d" % (batch, i) for i in range(per_batch)]))
            batch += 1

    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        yield acked
    finally:
        stop.set()
        writer.join(TIMEOUT_S)


def read_all(bootstrap: str, name: str, partitions: int, expected: int, conf: dict[str, str] | None = None) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False, "auto.offset.reset": "earliest", **(conf or {})})
    consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
    values: list[tuple[int, int, bytes]] = []

    def probe() -> bool | None:
        values.extend((m.partition(), m.offset(), m.value()) for m in consumer.consume(500, 0.5) if m.error() is None)
        return len(values) >= expected or None

    try:
        wait_until(f"{expected} records of {name}", probe, TIMEOUT_S)
    finally:
        consumer.close()
    return values


def test_followers_replicate_and_the_isr_holds_all_three(cluster: KafkaCluster) -> None:
    name = unique_topic("rep")
    create(cluster.bootstrap, name)
    acked = produce(cluster.bootstrap, name, [b"r%d" % i for i in range(500)])
    assert len(acked) == 500
    leader, isr = wait_until("a full ISR", lambda: (s := partition_state(cluster.bootstrap, name)) and len(s[1]) == 3 and s, TIMEOUT_S)
    assert isr == (1, 2, 3)
    # Every replica's log holds the records, each at the leader's offsets.
    for node in cluster.brokers:
        directory = node.data_dir / f"{name}-0"
        assert wait_until(f"node {node.node_id}'s copy", lambda d=directory: sum(f.stat().st_size for f in d.glob("*.log")) > 500 * 10 or None, TIMEOUT_S)
    assert sorted(read_all(cluster.bootstrap, name, 1, 500)) == sorted(acked)


def test_every_replica_describes_the_partitions_producers(cluster: KafkaCluster) -> None:
    """DescribeProducers is answered by followers too, as Kafka answers it: `kafka-transactions.sh
    find-hanging --broker-id N` asks one broker about every partition it hosts."""
    name = unique_topic("producers")
    create(cluster.bootstrap, name)
    assert len(produce(cluster.bootstrap, name, [b"p%d" % i for i in range(10)])) == 10
    leader, _ = wait_until("a full ISR", lambda: (s := partition_state(cluster.bootstrap, name)) and len(s[1]) == 3 and s, TIMEOUT_S)

    def producers(node_bootstrap: str) -> tuple[int, tuple[tuple[int, int], ...]]:
        body = DescribeProducersRequest(topics=(DescribeProducersTopic(name=name, partition_indexes=(0,)),))
        [partition] = request(node_bootstrap, body).topics[0].partitions
        return partition.error_code, tuple((p.producer_id, p.last_sequence) for p in partition.active_producers)

    expected = producers(cluster.nodes[leader].bootstrap)
    assert expected[0] == 0 and len(expected[1]) == 1 and expected[1][0][1] == 9
    for node in cluster.brokers:
        if node.node_id != leader:
            wait_until(f"follower {node.node_id}'s producer state", lambda n=node: producers(n.bootstrap) == expected or None, TIMEOUT_S)  # type: ignore[misc]


def test_killing_the_leader_under_acks_all_loses_no_acknowledged_record(cluster: KafkaCluster) -> None:
    name = unique_topic("kill")
    create(cluster.bootstrap, name, partitions=3)
    wait_until("full ISRs", lambda: all(len(partition_state(cluster.bootstrap, name, p)[1]) == 3 for p in range(3)) or None, TIMEOUT_S)
    leader, _ = partition_state(cluster.bootstrap, name, 0)
    survivor = next(n for n in cluster.brokers if n.node_id != leader)
    with producing(survivor.bootstrap, name, b"k", 100) as acked:
        wait_until("some records acknowledged", lambda: len(acked) >= 300 or None, TIMEOUT_S)
        cluster.nodes[leader].kill()
        # Its next run's interpreter imports the broker while the failover is waited for, so that
        # the restart below does not wait for that too (ClusterNode.warm_up); so in the tests below.
        cluster.nodes[leader].warm_up()
        wait_until("a new leader for partition 0", lambda: partition_state(survivor.bootstrap, name, 0)[0] not in (leader, -1) or None, TIMEOUT_S)
        wait_until("more records acknowledged after the failover", lambda: len(acked) >= 900 or None, TIMEOUT_S)
    # Every acknowledged record is there, at the offset it was acknowledged with, once.
    records = read_all(survivor.bootstrap, name, 3, len(acked))
    missing = set(acked) - set(records)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    values = [v for _, _, v in records]
    assert len(set(values)) == len(values), "a record was duplicated"
    cluster.nodes[leader].launch()
    cluster.nodes[leader].await_started()
    wait_until("the restarted broker back in every ISR", lambda: all(leader in partition_state(survivor.bootstrap, name, p)[1] for p in range(3)) or None, TIMEOUT_S)


def test_acks_all_is_refused_below_min_insync_replicas(cluster: KafkaCluster) -> None:
    name = unique_topic("minisr")
    create(cluster.bootstrap, name, min_isr=3)
    wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, name)[1]) == 3 or None, TIMEOUT_S)
    assert len(produce(cluster.bootstrap, name, [b"before"])) == 1
    leader, _ = partition_state(cluster.bootstrap, name)
    follower = next(n for n in cluster.brokers if n.node_id != leader)
    follower.kill()
    follower.warm_up()
    try:
        wait_until("the dead follower out of the ISR", lambda: follower.node_id not in partition_state(cluster.bootstrap, name)[1] or None, TIMEOUT_S)
        bootstrap = cluster.nodes[leader].bootstrap
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 3000, "retries": 0})
        errors: list[KafkaError] = []
        producer.produce(name, value=b"refused", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(TIMEOUT_S)
        assert errors and errors[0] is not None
        assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), errors[0]
        # acks=1 still goes through: only acks=all needs min.insync.replicas.
        assert len(produce(bootstrap, name, [b"acks1"], acks="1")) == 1
    finally:
        follower.launch()
        follower.await_started()
    wait_until("the ISR whole again", lambda: len(partition_state(cluster.bootstrap, name)[1]) == 3 or None, TIMEOUT_S)
    assert len(produce(cluster.bootstrap, name, [b"after"])) == 1


def test_committed_offsets_survive_the_coordinators_death(cluster: KafkaCluster) -> None:
    name = unique_topic("offsets")
    group = unique_topic("group")
    create(cluster.bootstrap, name)
    assert len(produce(cluster.bootstrap, name, [b"o%d" % i for i in range(100)])) == 100
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    seen: list[int] = []
    wait_until("50 records", lambda: seen.extend(m.offset() for m in consumer.consume(50 - len(seen), 0.5) if m.error() is None) or len(seen) >= 50 or None, TIMEOUT_S)
    # The commit is answered once the offsets partition's followers hold it.
    consumer.commit(offsets=[TopicPartition(name, 0, 50)], asynchronous=False)
    consumer.close()
    # The coordinator is the leader of the group's __consumer_offsets partition.
    coordinator, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, partition_for(group, 50))
    cluster.nodes[coordinator].kill()
    cluster.nodes[coordinator].warm_up()
    survivor = next(n for n in cluster.brokers if n.node_id != coordinator)
    try:
        resumed = Consumer({"bootstrap.servers": survivor.bootstrap, "group.id": group, "enable.auto.commit": False})

        def committed() -> int | None:
            try:
                [tp] = resumed.committed([TopicPartition(name, 0)], timeout=5)
            except Exception:
                return None  # the new coordinator is still being elected or loading
            return tp.offset if tp.offset >= 0 else None

        assert wait_until("the committed offset from the new coordinator", committed, TIMEOUT_S) == 50
        resumed.close()
    finally:
        cluster.nodes[coordinator].launch()
        cluster.nodes[coordinator].await_started()


def test_a_controlled_shutdown_of_the_leader_loses_nothing_and_hands_leadership_over(cluster: KafkaCluster) -> None:
    name = unique_topic("shutdown")
    create(cluster.bootstrap, name)
    wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, name)[1]) == 3 or None, TIMEOUT_S)
    leader, _ = partition_state(cluster.bootstrap, name)
    survivor = next(n for n in cluster.brokers if n.node_id != leader)
    try:
        with producing(survivor.bootstrap, name, b"s", 50) as acked:
            wait_until("some records acknowledged", lambda: len(acked) >= 100 or None, TIMEOUT_S)
            cluster.nodes[leader].warm_up()
            cluster.nodes[leader].stop()  # SIGTERM: a controlled shutdown, which must exit cleanly
            new_leader = wait_until("another leader", lambda: (b := partition_state(survivor.bootstrap, name)[0]) not in (leader, -1) and b, TIMEOUT_S)
            assert new_leader != leader
            count = len(acked)
            wait_until("records acknowledged by the new leader", lambda: len(acked) >= count + 100 or None, TIMEOUT_S)
    finally:
        cluster.nodes[leader].launch()
        cluster.nodes[leader].await_started()
    records = read_all(survivor.bootstrap, name, 1, len(acked))
    assert not set(acked) - set(records)
    assert len({v for _, _, v in records}) == len(records)
    wait_until("the restarted broker back in the ISR", lambda: leader in partition_state(survivor.bootstrap, name)[1] or None, TIMEOUT_S)


def test_a_broker_cut_off_from_the_controllers_stops_once_its_session_is_over(cluster: KafkaCluster) -> None:
    """SIGTERM to a broker that no controller can hear: its controlled shutdown is never approved,
    and it stops once its heartbeats have gone unanswered for broker.session.timeout.ms (by then the
    controller has fenced it and moved its leaderships) rather than waiting out the whole
    controlled-shutdown timeout. A request it holds (a consumer's fetch long-polling for a minute)
    is not waited for: as Kafka's SocketServer.stopProcessingRequests, it closes the connection at
    once, unanswered, then flushes and checkpoints its logs, so that its next start recovers none.
    Reconnected and started again, it rejoins the ISR, nothing lost."""
    controller = wait_until("an active controller", lambda: leader_id(cluster, 1), TIMEOUT_S)
    victim = cluster.nodes[next(n for n in sorted(cluster.nodes) if n != controller)]
    others = [n for n in sorted(cluster.nodes) if n != victim.node_id]
    survivor = cluster.nodes[others[0]]
    name = unique_topic("cutoff")
    topic = NewTopic(name, num_partitions=1, replica_assignment=[[victim.node_id, *others]], config={"min.insync.replicas": "2"})
    client = admin(cluster.bootstrap)
    client.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)
    wait_until("the victim leading a full ISR", lambda: partition_state(cluster.bootstrap, name) == (victim.node_id, (1, 2, 3)) or None, TIMEOUT_S)
    acked = produce(cluster.bootstrap, name, [b"before-%d" % i for i in range(100)])
    assert len(acked) == 100
    log_end = max(offset for _, offset, _ in acked) + 1
    held_fetch = FetchRequest(
        max_wait=datetime.timedelta(seconds=2 * TIMEOUT_S),
        min_bytes=1 << 20,
        topics=(FetchTopic(topic=name, partitions=(FetchPartition(partition=0, fetch_offset=log_end, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(),
    )
    victim.warm_up()
    started = time.monotonic()
    try:
        cluster.isolate(victim.node_id)
        with socket.create_connection(("127.0.0.1", victim.port), timeout=TIMEOUT_S) as held:
            held.sendall(encode_request(held_fetch, client_id="held-consumer"))
            victim.stop()  # must still exit 0
            assert held.recv(4) == b"", "the held fetch was answered"
        stopped_s = time.monotonic() - started
    finally:
        cluster.heal()
    assert victim.events_named("broker.controlled_shutdown_unanswered", current_run=True), victim.tail()
    assert not victim.events_named("broker.controlled_shutdown_timed_out", current_run=True), victim.tail()
    assert stopped_s < CONTROLLED_SHUTDOWN_TIMEOUT_S
    [closed] = [e for e in victim.events_named("socket_server.connections_closed", current_run=True) if e["listener"] == "PLAINTEXT"]
    assert closed["unanswered"] >= 1, closed
    # Closed as soon as the controlled shutdown gave up, not after waiting for the fetch (the
    # grace this broker had waited, 10 s): seconds apart at most on the busiest machine.
    gave_up = victim.events_named("broker.controlled_shutdown_unanswered", current_run=True)[0]
    assert logged_at(closed) - logged_at(gave_up) < 5.0, victim.tail()
    acked += produce(survivor.bootstrap, name, [b"after-%d" % i for i in range(100)])
    assert len(acked) == 200
    victim.launch()
    victim.await_started()
    assert not victim.events_named("log_manager.recovering", current_run=True), "a clean stop left logs to recover"
    wait_until("the restarted broker back in the ISR", lambda: victim.node_id in partition_state(survivor.bootstrap, name)[1] or None, TIMEOUT_S)
    records = read_all(survivor.bootstrap, name, 1, len(acked))
    assert set(acked) <= set(records)


def logged_at(event: dict[str, object]) -> float:
    return datetime.datetime.fromisoformat(str(event["timestamp"])).timestamp()


def test_a_follower_behind_the_leaders_log_start_starts_over_there(cluster: KafkaCluster) -> None:
    """A follower down while DeleteRecords moved the log start past its log end: the leader answers
    its fetch OFFSET_OUT_OF_RANGE, with no offsets, as Kafka's does. The follower asks the leader's
    log start and end with ListOffsets, as Kafka's fetcher does, empties its log, starts at the
    leader's log start (at the batch holding it) and joins the ISR again."""
    name = unique_topic("oor")
    create(cluster.bootstrap, name)
    wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, name)[1]) == 3 or None, TIMEOUT_S)
    assert len(produce(cluster.bootstrap, name, [b"before-%d" % i for i in range(100)])) == 100
    leader, _ = partition_state(cluster.bootstrap, name)
    follower = next(n for n in cluster.brokers if n.node_id != leader)
    survivor = cluster.nodes[leader]
    follower.kill()
    follower.warm_up()
    try:
        wait_until("the dead follower out of the ISR", lambda: follower.node_id not in partition_state(survivor.bootstrap, name)[1] or None, TIMEOUT_S)
        assert len(produce(survivor.bootstrap, name, [b"after-%d" % i for i in range(200)])) == 200
        client = admin(survivor.bootstrap)  # held: the futures die with their client
        [deleted] = client.delete_records([TopicPartition(name, 0, 250)], request_timeout=TIMEOUT_S).values()
        assert deleted.result(timeout=TIMEOUT_S).low_watermark == 250
    finally:
        follower.launch()
        follower.await_started()
    wait_until("the follower back in the ISR", lambda: follower.node_id in partition_state(survivor.bootstrap, name)[1] or None, TIMEOUT_S)
    assert follower.events_named("replica_fetcher.restarted_out_of_range", current_run=True), follower.tail()
    # Its log starts over at the batch holding offset 250 (as Kafka's, when the leader's log start
    # falls inside a batch): the records it had below are gone.
    segments = sorted(int(f.stem) for f in (follower.data_dir / f"{name}-0").glob("*.log"))
    assert segments and 100 <= segments[0] <= 250, segments
    records = read_all(follower.bootstrap, name, 1, 50)
    assert [v for _, _, v in sorted(records)][:1] == [b"after-150"]
