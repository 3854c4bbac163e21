"""KIP-890's hanging-transaction cases against a 3-node kbroker cluster and a 3-node Apache Kafka
4.4 cluster, answer for answer: the same raw Produce, AddPartitionsToTxn, EndTxn and
TxnOffsetCommit requests, each sent where a client would send it (the partition's leader, the
transaction's or the group's coordinator), and what each cluster answers.

tests/integration/test_transactions_kip890.py plays these on one kbroker node; here the leader
and the coordinator are often different nodes, so a leader verifies (or, under transaction
version 2, adds) a partition by asking a remote coordinator, and the markers of an ended
transaction reach the leaders after EndTxn is answered: each step after an EndTxn waits for
DescribeTransactions to show the transaction complete, on both clusters alike.

Both clusters get the same topic, transactional id and group names (so the same coordinator
partitions); producer ids and epochs differ, and answers name an epoch by its distance from the one
InitProducerId gave. Each test asserts Kafka's answers, then that kbroker's are the same, but for
one step kbroker answers differently on purpose: a new transaction reusing an aborted one's
sequence (refused by kbroker, deduplicated by Kafka).

Before any of that, Kafka reads each partition's first batch to learn whether the request is
transactional, and that read refuses some requests as a whole: every partition, a topic ID no topic
has included, TRANSACTIONAL_ID_AUTHORIZATION_FAILED without a transactional id, CORRUPT_MESSAGE with
its iterator's message for a batch length below 14 or a magic outside 0 to 2; under acks=0 the
connection is closed. Refusals of the validation after it are per partition and carry no message.

Last, on the same clusters, the order in which a leader refuses an idempotent (not transactional)
producer's batches while a killed follower shrinks the ISR. Issue 32's fourth long campaign (seed
1513219335) wrote five of confluent-kafka's records twice, and every answer on the way was one Kafka
gives. The retry of a batch already in the log was refused NOT_ENOUGH_REPLICAS while the ISR was
below min.insync.replicas (Kafka's Partition checks the ISR before the log looks for the retry among
the producer's last batches); once the ISR had grown back, a later batch of the same producer on
another partition, read after its refused predecessor, was answered OUT_OF_ORDER_SEQUENCE_NUMBER.
librdkafka took that for skipped sequence numbers, bumped its producer epoch, and sent the refused
batch again from sequence 0, which no broker can recognise as a retry. The last test plays those
steps on one partition: killing node 2 shrinks the ISR once the controller fences it (a broker
session of 4 s, not the default 9 s, on both clusters), and lowering min.insync.replicas stands in
for the ISR growing back."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v13 import request as produce_v13
from kio.schema.txn_offset_commit.v5 import request as txn_commit_v5

from benchmarks.apache_kafka import KafkaReferenceCluster
from broker.coordinator.coordinator_partitioner import partition_for
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import partition_state
from tests.integration.helpers import unique_topic
from tests.integration.test_transactions_kip890 import end_v5_txn, offsets, produce, producer_epoch_on
from tests.integration.test_transactions_wire import add, describe, init
from tests.integration.txn_helpers import values_of
from broker.wire_client import encode_request, recv_exact
from protocol.records import build_batch
from tests.integration.wire import request

TIMEOUT_S = 60.0
# Fewer internal partitions than the 50 of both defaults: created faster, and the same on both.
# A broker session of 4 s, not 9: the last test waits for the controller to fence a killed node.
OVERRIDES = {
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
}
Cluster = KafkaCluster | KafkaReferenceCluster
Answers = list[Any]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[dict[str, Cluster]]:
    """Both clusters, started side by side (each mostly waits on its own start-up)."""
    root = tmp_path_factory.mktemp("kip890-against-kafka")
    both: dict[str, Cluster] = {
        "kbroker": KafkaCluster(root / "kbroker", combined=3, overrides=OVERRIDES),
        "kafka": KafkaReferenceCluster(root / "kafka", kafka_lib, nodes=3, overrides=OVERRIDES),
    }
    failures: dict[str, BaseException] = {}

    def start(name: str) -> None:
        try:
            both[name].start()
        except BaseException as e:  # noqa: BLE001 - raised below, once both have finished
            failures[name] = e

    threads = [threading.Thread(target=start, args=(name,)) for name in both]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for name, failure in failures.items():
            raise AssertionError(f"the {name} cluster did not start") from failure
        yield both
    finally:
        for c in both.values():
            c.close()


def side_by_side(clusters: dict[str, Cluster], steps: Callable[[Cluster, str], Answers], tag: str) -> dict[str, Answers]:
    """``steps`` against both clusters at once, both given the name ``tag``; each cluster's answers."""
    results: dict[str, Answers | BaseException] = {}

    def play(name: str) -> None:
        try:
            results[name] = steps(clusters[name], tag)
        except BaseException as e:  # noqa: BLE001 - reported below, after both have finished
            results[name] = e

    threads = [threading.Thread(target=play, args=(name,)) for name in clusters]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for name, result in results.items():
        if isinstance(result, BaseException):
            raise AssertionError(f"the steps against {name} failed") from result
    return results  # type: ignore[return-value]


def known_everywhere(cluster: Cluster, topic: str) -> None:
    """Wait until every node's metadata has ``topic`` with a leader for each partition: a coordinator
    answers UNKNOWN_TOPIC_OR_PARTITION for a partition its own metadata does not have yet, on both."""
    ask = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )

    def led(bootstrap: str) -> bool:
        [t] = request(bootstrap, ask).topics
        return t.error_code == ErrorCode.none and bool(t.partitions) and all(p.leader_id >= 0 for p in t.partitions)

    for node in cluster.nodes.values():
        wait_until(f"{topic} in the metadata of node {node.node_id}", lambda node=node: led(node.bootstrap) or None, TIMEOUT_S)  # type: ignore[misc]


def coordinator(cluster: Cluster, key_type: int, key: str) -> str:
    """The bootstrap of the node coordinating a group (key type 0) or a transactional id (1), as
    FindCoordinator names it once the internal topic is there and known to every node."""

    def found() -> str | None:
        [c] = request(cluster.bootstrap, find_v4.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))).coordinators
        return cluster.nodes[c.node_id].bootstrap if c.error_code == ErrorCode.none else None

    bootstrap = wait_until(f"the coordinator of {key}", found, TIMEOUT_S)
    known_everywhere(cluster, "__transaction_state" if key_type == 1 else "__consumer_offsets")
    return bootstrap


def new_topic(cluster: Cluster, name: str) -> str:
    """A topic of one partition on all three nodes, fully in sync and known to every node; its leader's bootstrap."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    client.create_topics([NewTopic(name, 1, 3)], operation_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)

    def in_sync() -> int | None:
        leader, isr = partition_state(cluster.bootstrap, name)
        return leader if len(isr) == 3 else None

    leader = wait_until(f"{name} in sync", in_sync, TIMEOUT_S)
    known_everywhere(cluster, name)
    return cluster.nodes[leader].bootstrap


def producer(coordinator_bs: str, txn: str) -> tuple[int, int]:
    """InitProducerId, asked again while the coordinator loads its partition."""

    def initialised() -> tuple[int, int] | None:
        error, pid, epoch = init(coordinator_bs, txn)
        return (pid, epoch) if error == ErrorCode.none else None

    return wait_until("InitProducerId", initialised, TIMEOUT_S)


def completed(coordinator_bs: str, txn: str) -> str:
    """The transaction's state once its markers are written (EndTxn is answered before they are)."""

    def state() -> str | None:
        found: str = describe(coordinator_bs, txn)[0].transaction_state
        return found if found.startswith("Complete") else None

    return wait_until(f"{txn} complete", state, TIMEOUT_S)


def opened(cluster: Cluster, name: str) -> tuple[str, str, str, str, int, int]:
    """Topic ``name`` and transactional id ``name``-tx: (topic, id, leader, coordinator, producer id, epoch)."""
    topic, txn = name, f"{name}-tx"
    leader = new_topic(cluster, topic)
    coordinator_bs = coordinator(cluster, 1, txn)
    pid, epoch = producer(coordinator_bs, txn)
    return topic, txn, leader, coordinator_bs, pid, epoch


def aborted_batch(cluster: Cluster, name: str) -> tuple[Answers, tuple[str, str, str, str, int, int]]:
    """Topic ``name``, its partition holding one aborted transaction: its batch of sequence 0 and the
    ABORT marker. The answers on the way, and what ``opened`` returns."""
    opening = topic, txn, leader, coordinator_bs, pid, epoch = opened(cluster, name)
    answers: Answers = [
        add(coordinator_bs, txn, pid, epoch, {topic: (0,)})[(topic, 0)],
        produce(leader, 9, txn, topic, pid, epoch, 0, b"aborted"),
        request(coordinator_bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=False)).error_code,
        completed(coordinator_bs, txn),
        offsets(leader, topic),
    ]
    return answers, opening


def a_late_batch_after_an_abort(cluster: Cluster, name: str) -> Answers:
    answers, (topic, txn, leader, coordinator_bs, pid, epoch) = aborted_batch(cluster, name)
    return answers + [
        produce(leader, 9, txn, topic, pid, epoch, 1, b"late"),  # same producer, same epoch, next sequence
        offsets(leader, topic),
        [(s.transaction_state, s.topics) for s in describe(coordinator_bs, txn)],
    ]


def a_batch_outside_its_transaction(cluster: Cluster, name: str) -> Answers:
    topic, txn, leader, coordinator_bs, pid, epoch = opened(cluster, name)
    answers: Answers = [
        produce(leader, 9, txn, topic, pid, epoch, 0, b"a"),
        produce(leader, 11, txn, topic, pid, epoch, 0, b"a"),  # Produce v11 knows TRANSACTION_ABORTABLE
        produce(leader, 9, None, topic, pid, epoch, 0, b"a"),  # no transactional id to verify with
        offsets(leader, topic),
        add(coordinator_bs, txn, pid, epoch, {topic: (0,)})[(topic, 0)],
        produce(leader, 9, txn, topic, pid, epoch - 1 if epoch else epoch + 1, 0, b"a"),  # an epoch the coordinator does not hold
        produce(leader, 9, txn, topic, pid, epoch, 0, b"a"),
        produce(leader, 9, txn, topic, pid, epoch, 1, b"b"),
        request(coordinator_bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True)).error_code,
        completed(coordinator_bs, txn),
    ]
    return answers + [offsets(leader, topic)]


def a_new_transaction_reusing_an_aborted_ones_sequence(cluster: Cluster, name: str) -> Answers:
    answers, (topic, txn, leader, coordinator_bs, pid, epoch) = aborted_batch(cluster, name)
    return answers + [
        add(coordinator_bs, txn, pid, epoch, {topic: (0,)})[(topic, 0)],
        produce(leader, 9, txn, topic, pid, epoch, 0, b"new"),
        offsets(leader, topic),
    ]


def ended(coordinator_bs: str, txn: str, pid: int, epoch: int, at_epoch: int, commit: bool) -> tuple[ErrorCode, bool, int]:
    """EndTxn v5 at ``at_epoch``: (error, whether it answered ``pid``, its epoch's distance from ``epoch``)."""
    error, answered_pid, answered_epoch = end_v5_txn(coordinator_bs, txn, pid, at_epoch, commit)
    return error, answered_pid == pid, answered_epoch - epoch


def ends_with_no_transaction_open(cluster: Cluster, name: str) -> Answers:
    topic, txn, leader, coordinator_bs, pid, epoch = opened(cluster, name)

    def end(at_epoch: int, commit: bool) -> tuple[ErrorCode, bool, int]:
        return ended(coordinator_bs, txn, pid, epoch, at_epoch, commit)

    def end_version_1(at_epoch: int, commit: bool) -> ErrorCode:
        return request(coordinator_bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=at_epoch, committed=commit)).error_code

    return [
        end(epoch - 1, commit=False),  # Empty takes no retry
        end(epoch, commit=True),
        end(epoch, commit=False),  # an empty transaction's abort
        completed(coordinator_bs, txn),
        end(epoch + 1, commit=True),
        end(epoch, commit=True),
        end(epoch, commit=False),  # its retry
        end(epoch + 1, commit=False),  # aborted again
        completed(coordinator_bs, txn),
        end_version_1(epoch + 2, commit=False),  # EndTxn v3 at the current epoch
        end_version_1(epoch + 2, commit=True),
        offsets(leader, topic),
        [(s.transaction_state, s.topics) for s in describe(coordinator_bs, txn)],
    ]


def transaction_version_2(cluster: Cluster, name: str) -> Answers:
    topic, txn, leader, coordinator_bs, pid, epoch = opened(cluster, name)
    group = f"{name}-group"
    group_coordinator = coordinator(cluster, 0, group)

    def partitions() -> list[tuple[str, tuple[int, ...]]]:
        [state] = describe(coordinator_bs, txn)
        return sorted((t.topic, tuple(t.partitions)) for t in state.topics)

    def end(at_epoch: int, commit: bool) -> tuple[ErrorCode, bool, int]:
        return ended(coordinator_bs, txn, pid, epoch, at_epoch, commit)

    commit = txn_commit_v5.TxnOffsetCommitRequest(
        transactional_id=txn,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        topics=(txn_commit_v5.TxnOffsetCommitRequestTopic(name=topic, partitions=(txn_commit_v5.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7, committed_metadata=""),)),),
    )
    answers: Answers = [
        produce(leader, 12, txn, topic, pid, epoch, 0, b"committed"),  # the leader adds the partition
        [s.transaction_state for s in describe(coordinator_bs, txn)],
        partitions(),
        [p.error_code for t in request(group_coordinator, commit).topics for p in t.partitions],
        partitions(),  # the group's __consumer_offsets partition joined
        end(epoch, commit=True),
        completed(coordinator_bs, txn),
        producer_epoch_on(leader, topic, pid) - epoch,  # the COMMIT marker's epoch
        end(epoch, commit=True),  # a retry, named with the epoch it was sent with
        end(epoch, commit=False),
        produce(leader, 12, txn, topic, pid, epoch, 1, b"zombie"),
        produce(leader, 12, txn, topic, pid, epoch + 1, 0, b"aborted"),
        end(epoch + 1, commit=False),
        completed(coordinator_bs, txn),
        end(epoch + 1, commit=False),
        end(epoch + 2, commit=False),  # the same epoch again is no retry under version 2
        offsets(leader, topic),
        values_of(leader, topic, "read_committed", 1),
    ]
    fetched = request(
        group_coordinator,
        fetch_v8.OffsetFetchRequest(
            groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
            require_stable=True,
        ),
    )
    return answers + [[(p.committed_offset, p.error_code) for g in fetched.groups for t in g.topics for p in t.partitions]]


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    ask = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    [t] = request(bootstrap, ask).topics
    return t.topic_id


def refusals(cluster: Cluster, name: str) -> Answers:
    """Produce requests refused as a whole before any partition is looked at (Kafka's
    hasTransactionalRecords reads each partition's first batch), and one refused per partition.
    Each answer: (topic, known?, partition, error, message) per partition, sorted, since Kafka's
    error response lists partitions in a HashMap's order; topic IDs differ between the clusters."""
    leader = new_topic(cluster, name)
    known = topic_id(leader, name)
    plain = bytes(build_batch([(None, b"v", (), 0)]))
    transactional = bytes(build_batch([(None, b"v", (), 0)], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True))
    short = bytearray(plain)
    struct.pack_into(">i", short, 8, 5)  # a batch length below Kafka's 14
    magic_3 = bytearray(plain)
    magic_3[16] = 3
    magic_minus = bytearray(plain)
    magic_minus[16] = 0x80

    def by_id(partitions: list[tuple[uuid.UUID, bytes]], txn: str | None = None) -> list[Any]:
        topics = tuple(
            produce_v13.TopicProduceData(topic_id=tid, partition_data=(produce_v13.PartitionProduceData(index=0, records=records),)) for tid, records in partitions
        )
        r = request(leader, produce_v13.ProduceRequest(transactional_id=txn, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=topics))
        return sorted((t.topic_id == known, p.index, p.error_code, p.error_message) for t in r.responses for p in t.partition_responses)

    def by_name(partitions: list[tuple[str, bytes]]) -> list[Any]:
        topics = tuple(
            produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=0, records=records),)) for topic, records in partitions
        )
        r = request(leader, produce_v9.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=topics))
        return sorted((t.name == name, p.index, p.error_code, p.error_message) for t in r.responses for p in t.partition_responses)

    def closed_under_acks_0() -> bool:
        body = produce_v9.ProduceRequest(
            transactional_id=None,
            acks=0,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(produce_v9.TopicProduceData(name=name, partition_data=(produce_v9.PartitionProduceData(index=0, records=bytes(short)),)),),
        )
        host, port = leader.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
            sock.sendall(encode_request(body))
            try:
                recv_exact(sock, 4)
            except (ConnectionError, EOFError):
                return True
            return False

    elsewhere = uuid.uuid4()
    return [
        by_id([(known, transactional), (elsewhere, plain)]),  # no transactional id: every partition refused
        by_id([(known, transactional), (elsewhere, bytes(short))]),  # the first transactional batch ends the look
        by_id([(known, plain), (elsewhere, bytes(short))]),
        by_name([(name, plain), (f"{name}-nowhere", bytes(magic_3))]),
        by_name([(name, bytes(magic_minus))]),
        by_name([(name, plain + plain)]),  # refused for its partition alone, by the validation after
        closed_under_acks_0(),
        offsets(leader, name),
    ]


def produce_batch(bootstrap: str, topic: str, partition: int, batch: bytes, timeout_s: float = 10) -> tuple[ErrorCode, int]:
    """An acks=all Produce of one batch: its error and the base offset it was written at (-1 if none)."""
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=timeout_s),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=partition, records=batch),)),),
    )
    [answer] = [p for t in request(bootstrap, body).responses for p in t.partition_responses]
    return ErrorCode(answer.error_code), int(answer.base_offset)


def idempotent(pid: int, epoch: int, sequence: int, count: int) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(None, f"seq-{sequence + i}".encode(), (), now) for i in range(count)], producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def answered(leader: str, topic: str, expect: ErrorCode, what: str) -> None:
    """Wait until a plain acks=all batch to partition 1 is answered ``expect`` (partition 0 holds
    the producer's records); a second's timeout, as the batches wait for a follower meanwhile."""
    probe = build_batch([(None, b"probe", (), int(time.time() * 1000))])
    wait_until(what, lambda: produce_batch(leader, topic, 1, probe, timeout_s=1)[0] == expect, TIMEOUT_S)


def set_min_isr(leader: str, topic: str, value: str) -> None:
    client = AdminClient({"bootstrap.servers": leader})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(15)


def idempotent_producer(bootstrap: str) -> tuple[int, int]:
    """An idempotent producer's id and epoch, asked again while the broker is still getting its
    first block of ids (Kafka answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
    ask = init_producer_id_v4.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1), producer_id=-1, producer_epoch=-1)

    def given() -> tuple[int, int] | None:
        r = request(bootstrap, ask)
        return (int(r.producer_id), int(r.producer_epoch)) if r.error_code == ErrorCode.none else None

    return wait_until("an idempotent producer id", given, TIMEOUT_S)


def idempotent_refusals(cluster: Cluster, topic: str) -> Answers:
    """The answers of node 1, leading both partitions of ``topic`` replicated on nodes 1 and 2 with
    min.insync.replicas 2, to one idempotent producer's batches, before and after node 2 is killed."""
    leader = cluster.nodes[1].bootstrap
    client = AdminClient({"bootstrap.servers": leader})
    new = NewTopic(topic, num_partitions=2, replica_assignment=[[1, 2], [1, 2]], config={"min.insync.replicas": "2"})
    client.create_topics([new])[topic].result(15)
    answered(leader, topic, ErrorCode.none, "node 1 leading with both replicas in sync")
    pid, epoch = idempotent_producer(leader)
    answers: Answers = [produce_batch(leader, topic, 0, idempotent(pid, epoch, 0, 3))]
    cluster.nodes[2].kill()
    answered(leader, topic, ErrorCode.not_enough_replicas, "node 2 out of the ISR")
    answers += [
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 0, 3)),  # the retry of a batch in the log
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 3, 2)),
    ]
    set_min_isr(leader, topic, "1")
    answered(leader, topic, ErrorCode.none, "min.insync.replicas 1 applied")
    return answers + [
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 5, 1)),  # sent behind the refused one
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 0, 3)),
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 3, 2)),
        produce_batch(leader, topic, 0, idempotent(pid, epoch, 5, 1)),
    ]


def differences(answers: dict[str, Answers]) -> dict[int, tuple[Any, Any]]:
    """Where kbroker's answers differ from Kafka's: step -> (kbroker's, Kafka's)."""
    kbroker, kafka = answers["kbroker"], answers["kafka"]
    assert len(kbroker) == len(kafka)
    return {i: (ours, theirs) for i, (ours, theirs) in enumerate(zip(kbroker, kafka)) if ours != theirs}


NONE = ErrorCode.none
ABORTED = [NONE, NONE, NONE, "CompleteAbort", (2, 2)]  # the batch and its ABORT marker


def test_a_late_batch_after_an_abort_is_refused_as_kafka_refuses_it(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, a_late_batch_after_an_abort, unique_topic("late"))
    assert answers["kafka"] == ABORTED + [ErrorCode.invalid_txn_state, (2, 2), [("CompleteAbort", ())]]
    assert differences(answers) == {}


def test_a_batch_outside_its_transaction_is_refused_as_kafka_refuses_it(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, a_batch_outside_its_transaction, unique_topic("outside"))
    assert answers["kafka"] == [
        ErrorCode.invalid_txn_state,
        ErrorCode.transaction_abortable,
        ErrorCode.transactional_id_authorization_failed,
        (0, 0),
        NONE,
        ErrorCode.invalid_producer_epoch,
        NONE,
        NONE,
        NONE,
        "CompleteCommit",
        (3, 3),
    ]
    assert differences(answers) == {}


def test_a_new_transaction_reusing_an_aborted_ones_sequence_is_refused_where_kafka_deduplicates_it(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, a_new_transaction_reusing_an_aborted_ones_sequence, unique_topic("reused"))
    assert answers["kafka"] == ABORTED + [NONE, NONE, (2, 2)]
    # Kafka takes the new batch for a retry of the aborted one and acknowledges it unwritten; kbroker
    # refuses it on purpose (issue 32, docs/guarantees.md): nothing is written by either.
    assert differences(answers) == {6: (ErrorCode.out_of_order_sequence_number, NONE)}


def test_transaction_version_2_on_the_wire_as_kafka_answers_it(clusters: dict[str, Cluster]) -> None:
    topic = unique_topic("tv2")
    answers = side_by_side(clusters, transaction_version_2, topic)
    offsets_partition = partition_for(f"{topic}-group", int(OVERRIDES["offsets.topic.num.partitions"]))
    assert answers["kafka"] == [
        NONE,
        ["Ongoing"],
        [(topic, (0,))],
        [NONE],
        [("__consumer_offsets", (offsets_partition,)), (topic, (0,))],
        (NONE, True, 1),
        "CompleteCommit",
        1,
        (NONE, True, 1),
        (ErrorCode.invalid_txn_state, False, -1),
        ErrorCode.invalid_producer_epoch,
        NONE,
        (NONE, True, 2),
        "CompleteAbort",
        (NONE, True, 2),
        (NONE, True, 3),  # an abort at the epoch a completed one answered: a new, empty transaction's
        (4, 4),
        ["committed"],
        [(7, NONE)],
    ]
    assert differences(answers) == {}


def test_ends_with_no_transaction_open_as_kafka_answers_them(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, ends_with_no_transaction_open, unique_topic("empty-end"))
    assert answers["kafka"] == [
        (ErrorCode.producer_fenced, False, -1),
        (ErrorCode.invalid_txn_state, False, -1),
        (NONE, True, 1),
        "CompleteAbort",
        (ErrorCode.invalid_txn_state, False, -1),
        (ErrorCode.invalid_txn_state, False, -1),
        (NONE, True, 1),
        (NONE, True, 2),
        "CompleteAbort",
        NONE,
        ErrorCode.invalid_txn_state,
        (0, 0),
        [("CompleteAbort", ())],
    ]
    assert differences(answers) == {}


def test_produce_refused_as_a_whole_as_kafka_refuses_it(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, refusals, unique_topic("refused"))
    txn_refused = ErrorCode.transactional_id_authorization_failed
    short = "Record size 5 is less than the minimum record overhead (14)"
    assert answers["kafka"][:5] == [
        [(False, 0, txn_refused, None), (True, 0, txn_refused, None)],
        [(False, 0, txn_refused, None), (True, 0, txn_refused, None)],
        [(False, 0, ErrorCode.corrupt_message, short), (True, 0, ErrorCode.corrupt_message, short)],
        [(False, 0, ErrorCode.corrupt_message, "Invalid magic found in record: 3"), (True, 0, ErrorCode.corrupt_message, "Invalid magic found in record: 3")],
        [(True, 0, ErrorCode.corrupt_message, "Invalid magic found in record: -128")],
    ]
    assert answers["kafka"][5][0][2] == ErrorCode.invalid_record
    assert answers["kafka"][6:] == [True, (0, 0)]
    assert differences(answers) == {}


# Last of the module: it kills node 2 of both clusters.
def test_kbroker_refuses_an_idempotent_producers_batches_in_kafkas_order(clusters: dict[str, Cluster]) -> None:
    answers = side_by_side(clusters, idempotent_refusals, unique_topic("refusals"))
    # An ISR below min.insync.replicas refuses even a batch already written, before the log could
    # recognise it; a batch after a refused one is out of order; the retries are then recognised
    # and answered with where they were written.
    assert answers["kafka"] == [
        (NONE, 0),
        (ErrorCode.not_enough_replicas, -1),
        (ErrorCode.not_enough_replicas, -1),
        (ErrorCode.out_of_order_sequence_number, -1),
        (NONE, 0),
        (NONE, 3),
        (NONE, 5),
    ]
    assert differences(answers) == {}
