"""Issue 36, M1 on three nodes: the directories of a three-node Apache Kafka 4.4 cluster served by three
kbroker nodes, and given back to Kafka.

The conversion is offline: every Kafka node is stopped cleanly, a kbroker node starts on each one's own
server.properties and log directory (same node ids, ports and static quorum), and later Kafka starts again
on what kbroker left. Between, kbroker must read everything Kafka wrote: the metadata log and its
snapshot (topics, replica assignments, ISR and ELR, leader epochs, the quorum state of three voters),
partition logs with their leader-epoch checkpoints, producer snapshots and transaction indexes, and the
RF=3 internal topics (committed offsets in __consumer_offsets, transactional ids in
__transaction_state). Kafka must then read what kbroker wrote, including a log left by a SIGKILL on the
node that was the last in sync. One chain of process starts: Kafka, kbroker, Kafka.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from benchmarks.apache_kafka import COMBINED, KafkaReferenceCluster, start_nodes
from tests.cluster.cluster import ClusterNode, NodeSpec, wait_until
from tests.integration.conftest import BrokerProcess, retire

TOPIC = "orders"
PARTITIONS = 3
GROUP = "takeover-group"
TXN_ID = "takeover-txn"
TIMEOUT_S = 60.0
INTERNAL_TOPICS = {"__consumer_offsets": 5, "__transaction_state": 5}
# Broker sessions of 4 s (heartbeats every 500 ms), as kbroker's single-node tests have: the node killed
# last is refused registration (DUPLICATE_BROKER_REGISTRATION) by the restarted Kafka controller until
# its session ends. Five partitions per internal topic instead of Kafka's 50: every start of three JVMs
# on a busy 2-core machine spent seconds on the 100 empty logs.
OVERRIDES = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": str(INTERNAL_TOPICS["__consumer_offsets"]),
    "transaction.state.log.num.partitions": str(INTERNAL_TOPICS["__transaction_state"]),
}
# A record as consumers see it: (partition, offset, key, value).
Record = tuple[int, int, bytes | None, bytes | None]
# The leader epoch of each record's batch, by (partition, offset).
Epochs = dict[tuple[int, int], int]


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a destroyed client fails its futures
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(TIMEOUT_S)


def produce(bootstrap: str, prefix: str, count: int) -> list[Record]:
    """``count`` acks=all records of an idempotent producer, spread over the partitions; as acknowledged."""
    acked: list[Record] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        producer.produce(
            TOPIC, key=f"{prefix}-k{i}".encode(), value=f"{prefix}-v{i}".encode(), partition=i % PARTITIONS,
            on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset(), msg.key(), msg.value())) if err is None else None,
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert len(acked) == count
    return acked


def transactions(bootstrap: str, prefix: str, committed: int, aborted: int) -> list[Record]:
    """A committed then an aborted transaction of TXN_ID over the partitions; the committed records."""
    out: dict[bool, list[Record]] = {True: [], False: []}
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    for commit, count in ((True, committed), (False, aborted)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(
                TOPIC, value=f"{prefix}-{'c' if commit else 'a'}{i}".encode(), partition=i % PARTITIONS,
                on_delivery=lambda err, msg, c=commit: out[c].append((msg.partition(), msg.offset(), msg.key(), msg.value())) if err is None else None,
            )
        assert producer.flush(TIMEOUT_S) == 0
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
    assert len(out[True]) == committed and len(out[False]) == aborted
    return out[True]


def read_committed(bootstrap: str) -> tuple[list[Record], Epochs]:
    """Every record a read_committed consumer sees up to each partition's end, and its batch's leader epoch."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "takeover-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    records: list[Record] = []
    epochs: Epochs = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                error = m.error()
                if error is None:
                    records.append((m.partition(), m.offset(), m.key(), m.value()))
                    epochs[(m.partition(), m.offset())] = m.leader_epoch()
                    at_end.discard(m.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise AssertionError(error)
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, f"partitions {set(range(PARTITIONS)) - at_end} not read to their end in {TIMEOUT_S}s"
    return sorted(records), epochs


def read_with_kafka_python(bootstrap: str, count: int) -> list[Record]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    try:
        consumer.assign([KafkaPythonPartition(TOPIC, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        records: list[Record] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(500).items():
                records.extend((tp.partition, m.offset, m.key, m.value) for m in messages)
        return sorted(records)
    finally:
        consumer.close()


def assert_epochs_never_go_back(epochs: Epochs) -> None:
    for p in range(PARTITIONS):
        in_order = [epoch for (partition, _), epoch in sorted(epochs.items()) if partition == p]
        assert in_order == sorted(in_order), f"partition {p}: leader epochs {in_order}"


def commit(bootstrap: str, offsets: dict[int, int]) -> None:
    """A simple consumer's commit, asked again while the group coordinator is being found or loaded
    (librdkafka does not retry a synchronous commit answered NOT_COORDINATOR)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    to_commit = [TopicPartition(TOPIC, p, o) for p, o in offsets.items()]
    try:
        wait_until("the offsets committed", lambda: consumer.commit(offsets=to_commit, asynchronous=False), TIMEOUT_S, interval_s=0.5)
    finally:
        consumer.close()


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)}
    finally:
        consumer.close()


def watermarks(bootstrap: str) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "takeover-reader"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=TIMEOUT_S) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def topic_leaders(bootstrap: str) -> dict[int, int]:
    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=TIMEOUT_S).topics[TOPIC].partitions
    return {p: m.leader for p, m in partitions.items() if m.leader >= 0}


def fully_replicated(bootstrap: str) -> Callable[[], bool]:
    """Every partition of the topic and of the internal topics led, and all three replicas in its ISR."""
    def probe() -> bool:
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).topics
        counts = {TOPIC: PARTITIONS, **INTERNAL_TOPICS}
        partitions = [m for t in counts for m in topics[t].partitions.values()]
        return len(partitions) == sum(counts.values()) and all(m.leader in (1, 2, 3) and sorted(m.isrs) == [1, 2, 3] for m in partitions)

    return probe


def problems_logged(node: BrokerProcess) -> list[dict[str, object]]:
    """Error lines, and warnings about a file kbroker could not read as it found it."""
    words = ("corrupt", "unknown", "malformed", "unreadable", "unexpected")
    return [
        e for e in node.log_events()
        if e.get("level") in ("error", "critical")
        or (e.get("level") == "warning" and any(w in str(e).lower() for w in words) and not _metadata_index_rebuilt(e))
    ]


def _metadata_index_rebuilt(event: dict[str, object]) -> bool:
    # Kafka recovers the metadata log at every start and leaves its active segment's offset index
    # at the preallocated size; kbroker rebuilds it, as Kafka's recovery does.
    return event.get("event") == "log.index_rebuilt" and event.get("topic") == "__cluster_metadata"


def assert_quorum_states_kafka_can_resume(data_dirs: list[Path]) -> None:
    """A voter that stored L as leader of epoch E needs L to have stored itself so, or a later epoch:
    Kafka 4.4 starts a voter that stored "E, no leader, voted for itself" as a candidate of E, and
    halts when a follower answers its Vote naming it leader of E."""
    stored = {}
    for data_dir in data_dirs:
        state = json.loads((data_dir / "__cluster_metadata-0" / "quorum-state").read_text())
        node_id = int(dict(line.split("=", 1) for line in (data_dir / "meta.properties").read_text().splitlines() if "=" in line)["node.id"])
        stored[node_id] = (state["leaderEpoch"], state["leaderId"])
    for node_id, (epoch, leader) in stored.items():
        if leader >= 0 and leader != node_id:
            assert stored[leader][0] > epoch or stored[leader] == (epoch, leader), stored


def test_a_kafka_cluster_taken_over_by_kbroker_and_given_back(tmp_path: Path, kafka_lib: Path) -> None:
    kafka = KafkaReferenceCluster(tmp_path / "cluster", kafka_lib, nodes=3, overrides=OVERRIDES)
    kbroker = {
        node_id: ClusterNode(NodeSpec(node_id, COMBINED, node.client_port, node.controller_port), node.data_dir, node.config_file)
        for node_id, node in kafka.nodes.items()
    }
    try:
        # 1. Kafka 4.4: a topic of three partitions led by three nodes, records, transactions, offsets.
        kafka.start()
        for process in kbroker.values():
            process.warm_up()  # the interpreters kbroker starts in later, importing meanwhile
        bootstrap = kafka.bootstrap
        create_topic(bootstrap)
        leaders = wait_until("the topic's leaders", lambda: topic_leaders(bootstrap) or None, TIMEOUT_S)
        assert sorted(leaders.values()) == [1, 2, 3], leaders
        expected = produce(bootstrap, "kafka", 300)
        expected += transactions(bootstrap, "kafka-txn", committed=30, aborted=12)
        commit(bootstrap, {0: 50, 1: 51, 2: 52})
        wait_until("every replica in sync under Kafka", fully_replicated(bootstrap), TIMEOUT_S)
        kafka_marks = watermarks(bootstrap)
        records, kafka_epochs = read_committed(bootstrap)
        assert records == sorted(expected)
        for node in kafka.nodes.values():  # Kafka's controlled shutdowns, all at once
            assert node.proc is not None
            node.proc.terminate()
        for node in kafka.nodes.values():
            node.stop(TIMEOUT_S)

        # 2. kbroker on each node's own server.properties and directory.
        for process in kbroker.values():
            process.launch()
        for process in kbroker.values():
            process.await_started()
        bootstrap = ",".join(p.bootstrap for p in kbroker.values())
        assert sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).brokers) == [1, 2, 3]
        wait_until("every replica back in the ISR under kbroker", fully_replicated(bootstrap), TIMEOUT_S)
        assert watermarks(bootstrap) == kafka_marks
        records, epochs = read_committed(bootstrap)
        assert records == sorted(expected)
        assert epochs == kafka_epochs  # the batches as Kafka's leaders stamped them
        assert read_with_kafka_python(bootstrap, len(expected)) == sorted(expected)
        assert committed(bootstrap) == {0: 50, 1: 51, 2: 52}
        # New writes go on from each partition's end; the transactional id Kafka knew goes on too.
        written = produce(bootstrap, "kbroker", 60)
        written += transactions(bootstrap, "kbroker-txn", committed=15, aborted=6)
        assert all(offset >= kafka_marks[p][1] for p, offset, _, _ in written)
        expected += written
        records, kbroker_epochs = read_committed(bootstrap)
        assert records == sorted(expected)
        assert_epochs_never_go_back(kbroker_epochs)
        kbroker_marks = watermarks(bootstrap)
        commit(bootstrap, {p: high for p, (_, high) in kbroker_marks.items()})
        # Two nodes stop cleanly, one after the other; the last, alone in every ISR by then, is killed.
        kbroker[1].stop()
        kbroker[2].stop()
        kbroker[3].kill()
        for node_id, process in kbroker.items():
            assert problems_logged(process) == [], f"node {node_id}"
        assert_quorum_states_kafka_can_resume([node.data_dir for node in kafka.nodes.values()])

        # 3. Kafka again, on what kbroker left.
        start_nodes(kafka.nodes.values())
        bootstrap = kafka.bootstrap
        wait_until("every replica back in the ISR under Kafka", fully_replicated(bootstrap), TIMEOUT_S)
        assert watermarks(bootstrap) == kbroker_marks
        records, epochs = read_committed(bootstrap)
        assert records == sorted(expected)
        assert epochs == kbroker_epochs
        assert committed(bootstrap) == {p: high for p, (_, high) in kbroker_marks.items()}
        expected += produce(bootstrap, "kafka-again", 30)
        expected += transactions(bootstrap, "kafka-again-txn", committed=9, aborted=3)
        records, epochs = read_committed(bootstrap)
        assert records == sorted(expected)
        assert_epochs_never_go_back(epochs)
    finally:
        for process in kbroker.values():
            process.drop_standby()
            retire(process)
        kafka.close()
