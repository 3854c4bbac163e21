"""The order in which a leader refuses an idempotent producer's batches, against a 3-node kbroker
cluster and a 3-node Apache Kafka 4.4 cluster, answer for answer.

Issue 32's fourth long campaign (seed 1513219335) wrote five of confluent-kafka's records twice,
and every answer on the way was one Kafka gives. The retry of a batch already in the log was
refused NOT_ENOUGH_REPLICAS while the ISR was below min.insync.replicas (Kafka's Partition checks
the ISR before the log looks for the retry among the producer's last batches); once the ISR had
grown back, a later batch of the same producer on another partition, read after its refused
predecessor, was answered OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka took that for skipped sequence
numbers, bumped its producer epoch, and sent the refused batch again from sequence 0, which no
broker can recognise as a retry. This test plays those steps on one partition: a killed follower
shrinks the ISR, and lowering min.insync.replicas stands in for the ISR growing back."""

from __future__ import annotations

import datetime
import time
import threading
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i16, i32, i64

from benchmarks.apache_kafka import KafkaReferenceCluster
from protocol.records import build_batch
from tests.cluster.cluster import KafkaCluster
from tests.integration.helpers import unique_topic, wait_for
from tests.integration.wire import request

NOT_ENOUGH = ErrorCode.not_enough_replicas
# One answer to a Produce of one batch: its error and the base offset it was written at (-1 if none).
Answer = tuple[ErrorCode, int]


def produce(bootstrap: str, topic: str, partition: int, batch: bytes, timeout_s: float = 10) -> Answer:
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=timeout_s),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=i32(partition), records=batch),)),),
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
    assert wait_for(lambda: produce(leader, topic, 1, probe, timeout_s=1)[0] == expect, timeout_s=60), what


def set_min_isr(leader: str, topic: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": leader})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)


def producer_id(bootstrap: str) -> tuple[int, int]:
    """An idempotent producer's id and epoch, asked again while the broker is still getting its
    first block of ids (Kafka answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
    ask = InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1), producer_id=i64(-1), producer_epoch=i16(-1))
    answers = []
    assert wait_for(lambda: answers.append(request(bootstrap, ask)) or answers[-1].error_code == ErrorCode.none, timeout_s=30), answers[-1]
    return int(answers[-1].producer_id), int(answers[-1].producer_epoch)


def refusals(leader: str, kill_follower: Callable[[], None]) -> list[Answer]:
    """The answers of node 1, leading both partitions of a new topic replicated on nodes 1 and 2
    with min.insync.replicas 2, to one idempotent producer's batches, before and after node 2 is
    killed."""
    topic = unique_topic("refusals")
    admin = AdminClient({"bootstrap.servers": leader})
    new = NewTopic(topic, num_partitions=2, replica_assignment=[[1, 2], [1, 2]], config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(15)
    answered(leader, topic, ErrorCode.none, "node 1 leading with both replicas in sync")
    pid, epoch = producer_id(leader)
    answers = [produce(leader, topic, 0, idempotent(pid, epoch, 0, 3))]
    kill_follower()
    answered(leader, topic, NOT_ENOUGH, "node 2 out of the ISR")
    answers += [
        produce(leader, topic, 0, idempotent(pid, epoch, 0, 3)),  # the retry of a batch in the log
        produce(leader, topic, 0, idempotent(pid, epoch, 3, 2)),
    ]
    set_min_isr(leader, topic, "1")
    answered(leader, topic, ErrorCode.none, "min.insync.replicas 1 applied")
    answers += [
        produce(leader, topic, 0, idempotent(pid, epoch, 5, 1)),  # sent behind the refused one
        produce(leader, topic, 0, idempotent(pid, epoch, 0, 3)),
        produce(leader, topic, 0, idempotent(pid, epoch, 3, 2)),
        produce(leader, topic, 0, idempotent(pid, epoch, 5, 1)),
    ]
    return answers


# What both brokers answer: an ISR below min.insync.replicas refuses even a batch already written,
# before the log could recognise it; a batch after a refused one is out of order; the retries are
# then recognised and answered with where they were written.
EXPECTED = [
    (ErrorCode.none, 0),
    (NOT_ENOUGH, -1),
    (NOT_ENOUGH, -1),
    (ErrorCode.out_of_order_sequence_number, -1),
    (ErrorCode.none, 0),
    (ErrorCode.none, 3),
    (ErrorCode.none, 5),
]


def test_kbroker_refuses_an_idempotent_producers_batches_in_kafkas_order(tmp_path: Path, kafka_lib: Path) -> None:
    kbroker = KafkaCluster(tmp_path / "kbroker", combined=3)
    kafka = KafkaReferenceCluster(tmp_path / "kafka", kafka_lib, nodes=3)
    results: dict[str, list[Answer] | BaseException] = {}

    def play(name: str, cluster: KafkaCluster | KafkaReferenceCluster, leader: Callable[[], str], kill: Callable[[], None]) -> None:
        try:
            cluster.start()
            results[name] = refusals(leader(), kill)
        except BaseException as e:  # noqa: BLE001 - reported below, after both have finished
            results[name] = e

    # Side by side: both mostly wait (start-ups, a fenced broker's session).
    threads = [
        threading.Thread(target=play, args=("kbroker", kbroker, lambda: kbroker.nodes[1].bootstrap, lambda: kbroker.nodes[2].kill())),
        threading.Thread(target=play, args=("kafka", kafka, lambda: kafka.nodes[1].bootstrap, lambda: kafka.kill(2))),
    ]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        kbroker.close()
        kafka.close()
    for name, result in results.items():
        if isinstance(result, BaseException):
            raise AssertionError(f"the steps against {name} failed") from result
    assert results["kafka"] == EXPECTED
    assert results["kbroker"] == results["kafka"]
