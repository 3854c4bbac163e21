"""KIP-1191's dead-letter queue for share groups on one node with its defaults: with
share.version 2 (a new cluster's level, as Kafka 4.4's) and a group naming errors.deadletterqueue.topic.name, a REJECTed record and one
RELEASEd at share.delivery.count.limit land on the DLQ topic with Kafka 4.4's headers (and, with
errors.deadletterqueue.copy.record.enable, the original key and value); the ACCEPTed ones do not.
With share.version downgraded to 1 nothing is written.

The expected headers are those Apache Kafka 4.4 wrote for this same scenario (``dlq_scenario``,
run once against ``benchmarks/apache_kafka.py``'s node, where share.version 2 is the default):
the six ``__dlq.errors.*`` headers in this order, the record's timestamp its DLQ write time.

Every wait is bounded."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consume, create_topic
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.test_share_fetch_wire import ACCEPT, REJECT, RELEASE, RawShareMember, acquired, join_assigned, set_group_configs, topic_id

WAIT_S = 30.0
DLQ_ENABLE = {"errors.deadletterqueue.group.enable": "true"}
DLQRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


def share_node(start: StartBroker, level: int) -> BrokerProcess:
    """A new node (share.version 2), its share.version downgraded to ``level`` if below."""
    node = start()
    await_finalized(node.bootstrap, "share.version", 2)
    if level < 2:
        downgraded = kbroker("features", "--bootstrap-server", node.bootstrap, "downgrade", "--feature", f"share.version={level}")
        assert downgraded.stdout == f"share.version was downgraded to {level}.\n", downgraded.stderr
        await_finalized(node.bootstrap, "share.version", level)
    return node


def produce_keyed(bs: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0


def acquire_until(member: RawShareMember, offsets: set[int], acks: dict[int, list[tuple[int, int, int]]] | None = None) -> dict[int, int]:
    """Fetch until ``offsets`` are acquired; their delivery counts."""
    got: dict[int, int] = {}
    deadline = time.monotonic() + WAIT_S
    while not offsets <= set(got):
        for first, last, count in acquired(member.fetch(acks=acks)):
            got.update(dict.fromkeys(range(first, last + 1), count))
        acks = None
        assert time.monotonic() < deadline, got
    return got


def archive_two(bs: str, group: str, topic: str, dlq_topic: str, copy: bool) -> None:
    """Four records: 0 accepted, 1 rejected, 2 released twice (share.delivery.count.limit 2: archived
    at the second), 3 released once then accepted."""
    create_topic(bs, topic, partitions=1)
    create_topic(bs, dlq_topic, partitions=1, configs=DLQ_ENABLE)
    set_group_configs(
        bs,
        group,
        {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "2",
            "errors.deadletterqueue.topic.name": dlq_topic,
            "errors.deadletterqueue.copy.record.enable": str(copy).lower(),
        },
    )
    produce_keyed(bs, topic, 4)
    member = RawShareMember(bs, group, topic_id(bs, topic))
    try:
        join_assigned(bs, group, member.member_id, topic, 1)
        assert acquire_until(member, {0, 1, 2, 3}) == {0: 1, 1: 1, 2: 1, 3: 1}
        again = acquire_until(member, {2, 3}, acks={0: [(0, 0, ACCEPT), (1, 1, REJECT), (2, 3, RELEASE)]})
        assert again == {2: 2, 3: 2}
        answer = member.acknowledge({0: [(2, 2, RELEASE), (3, 3, ACCEPT)]})
        assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0], answer
    finally:
        member.close()


def dlq_scenario(bs: str, group: str, topic: str, dlq_topic: str, copy: bool) -> list[DLQRecord]:
    """``archive_two``, then the DLQ topic's records (the two expected, and no third within a second)."""
    archive_two(bs, group, topic, dlq_topic, copy)
    messages = consume(bs, dlq_topic, 0, 0, 2, timeout_s=WAIT_S)
    messages += consume(bs, dlq_topic, 0, 2, 1, timeout_s=1)
    return [(m.key(), m.value(), [(k, bytes(v)) for k, v in (m.headers() or [])]) for m in messages]


def expected(group: str, topic: str, copy: bool) -> list[DLQRecord]:
    """What Kafka 4.4 wrote for ``dlq_scenario``."""

    def headers(offset: int, count: int, message: str) -> list[tuple[str, bytes]]:
        return [
            ("__dlq.errors.topic", topic.encode()),
            ("__dlq.errors.partition", b"0"),
            ("__dlq.errors.offset", str(offset).encode()),
            ("__dlq.errors.group", group.encode()),
            ("__dlq.errors.delivery.count", str(count).encode()),
            ("__dlq.errors.message", message.encode()),
        ]

    return [
        (b"k1" if copy else None, b"v1" if copy else None, headers(1, 1, "Offset rejected by client.")),
        (b"k2" if copy else None, b"v2" if copy else None, headers(2, 2, "Offset delivery count exceeded the threshold.")),
    ]


def test_rejected_and_exhausted_records_go_to_the_dlq(broker_factory: StartBroker) -> None:
    bs = share_node(broker_factory, 2).bootstrap
    for group, copy in (("dlq-g", False), ("dlq-copy-g", True)):
        assert dlq_scenario(bs, group, f"{group}-src", f"dlq.{group}", copy) == expected(group, f"{group}-src", copy)


def test_no_dlq_below_share_version_2(broker_factory: StartBroker) -> None:
    bs = share_node(broker_factory, 1).bootstrap
    archive_two(bs, "dlq-v1-g", "dlq-v1-src", "dlq.dlq-v1-g", copy=False)
    assert consume(bs, "dlq.dlq-v1-g", 0, 0, 1, timeout_s=3) == []


def run_against_kafka() -> Any:
    """The reference run: ``python -m tests.integration.test_share_group_dlq`` prints what Kafka 4.4 wrote."""
    import tempfile
    from pathlib import Path

    from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars

    with tempfile.TemporaryDirectory() as root, KafkaReferenceCluster(Path(root), fetch_jars(), nodes=1) as cluster:
        cluster.start()
        cluster.await_started(1)
        for copy in (False, True):
            group = "dlq-copy-g" if copy else "dlq-g"
            got = dlq_scenario(cluster.bootstrap, group, f"{group}-src", f"dlq.{group}", copy)
            print(copy, got)
            print("same as expected():", got == expected(group, f"{group}-src", copy))


if __name__ == "__main__":
    run_against_kafka()
