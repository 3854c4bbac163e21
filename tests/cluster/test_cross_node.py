"""Wave-1 features with their pieces on different nodes of three combined processes: partitions
led by every broker, group and transaction coordinators elsewhere, markers over the network,
idempotence, compaction and retention on each leader."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.helpers import unique_topic

TIMEOUT_S = 30.0
FAST_LOG_JOBS = {
    "log.retention.check.interval.ms": "500",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
    # Each node's cleaner copies in its own thread: the worker process of the default executor is
    # spawned (an interpreter importing the broker, at low priority) on a node's first cleaning,
    # which on a busy machine held the first compaction back 13 s. tests/integration/test_compaction.py
    # and the cleaner's unit tests run that executor.
    "log.cleaner.executor": "thread",
    # The transaction and offsets topics spread over the three nodes, so coordinators differ.
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("cross"), combined=3, overrides=FAST_LOG_JOBS)
    try:
        yield c.start()
    finally:
        c.close()


def create(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> dict[int, int]:
    """Create the topic; its partition → leader map once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    futures[name].result(timeout=TIMEOUT_S)

    def leaders() -> dict[int, int] | None:
        md = admin.list_topics(name, timeout=10).topics[name]
        found = {p.id: p.leader for p in md.partitions.values()}
        return found if len(found) == partitions and all(leader > 0 for leader in found.values()) else None

    return wait_until(f"leaders for {name}", leaders, TIMEOUT_S)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, **extra: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` up to each partition's end (its high watermark, or last stable
    offset under read_committed): anything past ``expected`` would be a duplicate or an aborted record."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "enable.auto.commit": False, "enable.partition.eof": True, **extra})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while (len(out) < expected or len(at_end) < partitions) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        c.close()
    return out


def coordinator(bootstrap: str, key_type: str, key: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if key_type == "group":
        return admin.describe_consumer_groups([key])[key].result(timeout=TIMEOUT_S).coordinator.id
    raise ValueError(key_type)


def test_a_transaction_over_partitions_on_all_three_brokers_commits_and_aborts_atomically(cluster: KafkaCluster) -> None:
    topic = unique_topic("txn3")
    leaders = create(cluster.bootstrap, topic, 3)
    assert set(leaders.values()) == {1, 2, 3}
    group = unique_topic("txn-group")
    producer = Producer({"bootstrap.servers": cluster.nodes[1].bootstrap, "transactional.id": unique_topic("tid"), "transaction.timeout.ms": 30000})
    producer.init_transactions(TIMEOUT_S)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"committed-%d" % i, partition=i % 3)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], _group_metadata(cluster, group), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"aborted-%d" % i, partition=i % 3)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)

    producer.begin_transaction()
    producer.produce(topic, value=b"last", partition=2)
    producer.commit_transaction(TIMEOUT_S)

    for node in cluster.nodes.values():
        values = [v for _, _, _, v in read_all(node.bootstrap, topic, 3, 31, **{"isolation.level": "read_committed"})]
        assert sorted(values) == sorted([b"committed-%d" % i for i in range(30)] + [b"last"]), f"through node {node.node_id}"
    # read_uncommitted sees the aborted records too; read_committed on every partition saw none.
    assert len(read_all(cluster.bootstrap, topic, 3, 61, **{"isolation.level": "read_uncommitted"})) == 61

    c = Consumer({"bootstrap.servers": cluster.nodes[3].bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
    finally:
        c.close()
    assert committed[0].offset == 7


def _group_metadata(cluster: KafkaCluster, group: str):  # type: ignore[no-untyped-def]
    """The consumer group metadata send_offsets_to_transaction needs, from a consumer of that group."""
    c = Consumer({"bootstrap.servers": cluster.nodes[2].bootstrap, "group.id": group})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def test_a_group_resumes_from_offsets_committed_to_a_coordinator_on_another_node(cluster: KafkaCluster) -> None:
    topic = unique_topic("grp3")
    leaders = create(cluster.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    group = unique_topic("resume")

    def consume(count: int, bootstrap: str) -> list[bytes]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while len(got) < count and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
                    if len(got) == count:
                        c.commit(asynchronous=False)
        finally:
            c.close()
        return got

    first = consume(120, cluster.nodes[1].bootstrap)
    group_coordinator = coordinator(cluster.bootstrap, "group", group)
    # Three leaders, one coordinator: at least two partitions live elsewhere.
    assert sum(1 for leader in leaders.values() if leader != group_coordinator) >= 2
    rest = consume(180, cluster.nodes[3].bootstrap)
    assert len(first) == 120 and len(rest) == 180
    assert sorted(first + rest, key=int) == [b"%d" % i for i in range(300)]


def test_idempotent_producers_write_each_record_once_to_three_leaders(cluster: KafkaCluster) -> None:
    topic = unique_topic("idem3")
    create(cluster.bootstrap, topic, 3)
    producers = [Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True, "linger.ms": 2}) for node in cluster.nodes.values()]
    for n, producer in enumerate(producers):
        for i in range(500):
            producer.produce(topic, value=b"%d-%d" % (n, i), partition=i % 3)
    for producer in producers:
        assert producer.flush(TIMEOUT_S) == 0
    got = read_all(cluster.bootstrap, topic, 3, 1500)
    assert sorted(v for _, _, _, v in got) == sorted(b"%d-%d" % (n, i) for n in range(3) for i in range(500))
    for partition in range(3):
        offsets = [o for p, o, _, _ in got if p == partition]
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition} has gaps or duplicates"


def test_compaction_and_retention_run_on_each_leader(cluster: KafkaCluster) -> None:
    compacted = unique_topic("cmp3")
    create(cluster.bootstrap, compacted, 3, {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"})
    retained = unique_topic("ret3")
    create(cluster.bootstrap, retained, 3, {"segment.bytes": "2000", "retention.bytes": "4000"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "batch.size": 1000, "linger.ms": 0})
    for i in range(3000):
        producer.produce(compacted, key=b"k%d" % (i % 30), value=b"v%d" % i, partition=i % 3)
        producer.produce(retained, value=b"r%06d" % i, partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    time.sleep(1.2)
    # A record under a new key rolls the active segment, so the old ones become cleanable.
    for partition in range(3):
        producer.produce(compacted, key=b"sentinel", value=b"s", partition=partition)
    assert producer.flush(TIMEOUT_S) == 0

    def compacted_down() -> list[tuple[int, int, bytes | None, bytes | None]] | None:
        got = read_all(cluster.bootstrap, compacted, 3, 33)
        return got if len(got) == 33 else None

    latest = wait_until("every leader compacting its partition", compacted_down, 90)
    assert {(p, k): v for p, _, k, v in latest} == {
        **{(i % 3, b"k%d" % (i % 30)): b"v%d" % i for i in range(2970, 3000)},
        **{(p, b"sentinel"): b"s" for p in range(3)},
    }

    def trimmed() -> bool:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("wm")})
        try:
            return all(c.get_watermark_offsets(TopicPartition(retained, p), timeout=10)[0] > 0 for p in range(3))
        finally:
            c.close()

    assert wait_until("retention deleting old segments on every leader", trimmed, 60)
