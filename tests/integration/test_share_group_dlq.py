"""KIP-1191's dead-letter queue for share groups on one node with its defaults: with
share.version 2 (a new cluster's level, as Kafka 4.4's) and a group naming errors.deadletterqueue.topic.name, a REJECTed record and one
RELEASEd at share.delivery.count.limit land on the DLQ topic with Kafka 4.4's headers (and, with
errors.deadletterqueue.copy.record.enable, the original key and value); the ACCEPTed ones do not.
With share.version downgraded to 1 nothing is written. A rejected record is ARCHIVING until its
DLQ write lands or is given up on (a DLQ topic without errors.deadletterqueue.group.enable is
refused at once): only then ARCHIVED, and the group's start offset (DescribeShareGroupOffsets)
passes it (``archived_after_dlq``, run on both). kbroker's share coordinator has the new start
offset with the ARCHIVED write; Kafka 4.4's with the state change after it (Kafka writes the start
offset of before each change), so more records are accepted until it shows.

The expected headers are those Apache Kafka 4.4 wrote for this same scenario (``dlq_scenario``,
run once against ``benchmarks/apache_kafka.py``'s node, where share.version 2 is the default):
the six ``__dlq.errors.*`` headers in this order, the record's timestamp its DLQ write time.

Every wait is bounded."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from kio.schema.describe_share_group_offsets.v0 import request as offsets_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.static.primitive import i8, i32

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consume, create_topic
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.test_share_fetch_wire import ACCEPT, REJECT, RELEASE, RawShareMember, acquired, join_assigned, set_group_configs, topic_id
from tests.integration.wire import request

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


def share_start_offset(bs: str, group: str, topic: str) -> int | None:
    """The group's start offset of ``topic``-0 (DescribeShareGroupOffsets at its coordinator), None
    while unknown."""
    [c] = request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))).coordinators
    if c.error_code != ErrorCode.none:
        return None
    topics = (offsets_v0.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(i32(0),)),)
    answer = request(f"{c.host}:{c.port}", offsets_v0.DescribeShareGroupOffsetsRequest(groups=(offsets_v0.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics),)))
    found = [int(p.start_offset) for g in answer.groups for t in g.topics for p in t.partitions if p.error_code == ErrorCode.none]
    return found[0] if found else None


def accept_more_until_past(bs: str, member: RawShareMember, group: str, topic: str, offset: int, next_offset: int) -> bool:
    """Until the group's start offset is past ``offset``, produce and ACCEPT one record at a time
    from ``next_offset``; False if it is not within WAIT_S (``offset`` stuck)."""
    producer = Producer({"bootstrap.servers": bs, "acks": "all"})
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if (share_start_offset(bs, group, topic) or 0) > offset:
            return True
        producer.produce(topic, value=b"more", partition=0)
        assert producer.flush(WAIT_S) == 0
        acquire_until(member, {next_offset})
        answer = member.acknowledge({0: [(next_offset, next_offset, ACCEPT)]})
        assert answer.error_code == 0, answer
        next_offset += 1
    return False


def archived_after_dlq(bs: str, group: str, enabled_on_topic: bool) -> tuple[int, bool]:
    """Two records, 0 REJECTed and 1 accepted, the group's DLQ topic taking writes or (not
    ``enabled_on_topic``) refusing them. Returns how many DLQ records there are, and whether the
    group's start offset then passes record 0."""
    topic, dlq_topic = f"{group}-src", f"dlq.{group}"
    create_topic(bs, topic, partitions=1)
    create_topic(bs, dlq_topic, partitions=1, configs=DLQ_ENABLE if enabled_on_topic else None)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq_topic})
    produce_keyed(bs, topic, 2)
    member = RawShareMember(bs, group, topic_id(bs, topic))
    try:
        join_assigned(bs, group, member.member_id, topic, 1)
        acquire_until(member, {0, 1})
        answer = member.acknowledge({0: [(0, 0, REJECT), (1, 1, ACCEPT)]})
        assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0], answer
        dlq_records = len(consume(bs, dlq_topic, 0, 0, 1, timeout_s=WAIT_S if enabled_on_topic else 1))
        passed = accept_more_until_past(bs, member, group, topic, 0, 2)
        return dlq_records + len(consume(bs, dlq_topic, 0, 1, 1, timeout_s=1)), passed
    finally:
        member.close()


def test_the_start_offset_passes_a_rejected_record_once_its_dlq_write_is_done(broker_factory: StartBroker) -> None:
    bs = share_node(broker_factory, 2).bootstrap
    assert archived_after_dlq(bs, "dlq-landed-g", enabled_on_topic=True) == (1, True)
    assert archived_after_dlq(bs, "dlq-refused-g", enabled_on_topic=False) == (0, True)


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
        for enabled in (True, False):
            print("archived_after_dlq:", enabled, archived_after_dlq(cluster.bootstrap, f"dlq-archived-{enabled}-g", enabled))


if __name__ == "__main__":
    run_against_kafka()
