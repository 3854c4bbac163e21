"""KIP-932's ShareFetch and ShareAcknowledge against one node with its defaults (share.version 2,
as a new Kafka 4.4 cluster finalizes; a 1 s share heartbeat): confluent-kafka's ShareConsumer and
Kafka 4.4's console share consumer read every record of a 3-partition topic, two consumers of one
group splitting them; and raw requests walk the record states (release, reject, lock timeout, the
delivery count limit) and the share session errors.

Every wait is bounded; nothing asserted depends on timing beyond what the broker guarantees (a
record's acquisition lock expires no earlier than its duration)."""

from __future__ import annotations

import datetime
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.share_acknowledge.v1 import request as ack_v1
from kio.schema.share_acknowledge.v2 import request as ack_v2
from kio.schema.share_fetch.v1 import request as fetch_v1
from kio.schema.share_fetch.v2 import request as fetch_v2
from kio.schema.share_group_describe.v1 import request as describe_v1
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_v1
from kio.static.primitive import i8, i32, i64

from tests.integration.conftest import BrokerProcess, StartBroker, retire
from tests.integration.helpers import create_topic, produce_acked
from tests.integration.test_cli import kbroker
from tests.integration.test_features import await_finalized
from tests.integration.wire import exchange, request
from tests.kafka_tools import ToolJvm

WAIT_S = 30.0
# The raw test's acquisition locks: long enough for its few requests between an acquisition and
# its acknowledgement on a busy machine, short enough to wait for their expiry twice.
LOCK_MS = 6000
GROUP_RESOURCE = 32
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
ACCEPT, RELEASE, REJECT = 1, 2, 3


# A member is assigned the share partitions initialized after it joined at its next heartbeat: at
# the 5 s default interval a new member waits up to 5 s for its first record.
FAST_SHARE_HEARTBEAT = {"group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}


def share_node_with(start: StartBroker, props: dict[str, str]) -> BrokerProcess:
    node = start({**FAST_SHARE_HEARTBEAT, **props})
    await_finalized(node.bootstrap, "share.version", 2)
    return node


@pytest.fixture(scope="module")
def share_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for the module's tests that leave share.version alone, each with its own topics and groups."""
    directory = tmp_path_factory.mktemp("share-node")
    node = share_node_with(lambda props: BrokerProcess(directory / "data", props).start(), {})
    yield node
    retire(node)


@pytest.fixture
def short_lock_node(broker_factory: StartBroker) -> BrokerProcess:
    """group.share.record.lock.duration.ms below the 15 s a group config may go down to."""
    return share_node_with(broker_factory, {"group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000"})


def set_group_configs(bs: str, group: str, configs: dict[str, str]) -> None:
    resource = alter_v1.AlterConfigsResource(
        resource_type=i8(GROUP_RESOURCE),
        resource_name=group,
        configs=tuple(alter_v1.AlterableConfig(name=k, config_operation=i8(0), value=v) for k, v in configs.items()),
    )
    answer = request(bs, alter_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False))
    assert [r.error_code for r in answer.responses] == [ErrorCode.none], answer


def topic_id(bs: str, topic: str) -> uuid.UUID:
    answer = request(
        bs,
        metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    [t] = answer.topics
    assert t.topic_id is not None
    return t.topic_id


def join_assigned(bs: str, group: str, member_id: str, topic: str, partitions: int) -> None:
    """Heartbeat until the member is assigned all ``partitions``: their share partitions are then
    initialized at the share coordinator. FindCoordinator first, as a client does: it creates the
    offsets topic."""
    request(bs, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
    deadline = time.monotonic() + WAIT_S
    epoch = 0
    while True:
        answer = request(
            bs,
            heartbeat_v1.ShareGroupHeartbeatRequest(
                group_id=group, member_id=member_id, member_epoch=i32(epoch), rack_id=None, subscribed_topic_names=(topic,) if epoch == 0 else None
            ),
        )
        if answer.error_code == ErrorCode.none:
            epoch = int(answer.member_epoch)
            if answer.assignment is not None and sum(len(t.partitions) for t in answer.assignment.topic_partitions) == partitions:
                return
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


class RawShareMember:
    """One share consumer over raw ShareFetch/ShareAcknowledge v1 requests on its own connection:
    its share session lives as long as the connection."""

    def __init__(self, bs: str, group: str, tid: uuid.UUID, member_id: str | None = None) -> None:
        self.bs, self.group, self.tid = bs, group, tid
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        host, port = bs.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self._correlation = 0

    def send(self, body: Any) -> Any:
        self._correlation += 1
        return exchange(self.sock, body, self._correlation)

    def close(self) -> None:
        self.sock.close()

    def fetch(self, acks: dict[int, list[tuple[int, int, int]]] | None = None, partitions: tuple[int, ...] = (0,), max_wait_ms: int = 2000, epoch: int | None = None, max_records: int = 500) -> Any:
        acks = acks or {}
        parts = tuple(
            fetch_v1.FetchPartition(
                partition_index=i32(p),
                acknowledgement_batches=tuple(fetch_v1.AcknowledgementBatch(first_offset=i64(f), last_offset=i64(l), acknowledge_types=(i8(t),)) for f, l, t in acks.get(p, ())),
            )
            for p in partitions
        )
        used = self.epoch if epoch is None else epoch
        answer = self.send(
            fetch_v1.ShareFetchRequest(
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=i32(used),
                max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=i32(1),
                max_bytes=i32(1 << 20),
                max_records=i32(max_records),
                batch_size=i32(max_records),
                topics=(fetch_v1.FetchTopic(topic_id=self.tid, partitions=parts),) if parts else (),
                forgotten_topics_data=(),
            ),
        )
        if epoch is None and answer.error_code == ErrorCode.none:
            self.epoch = 1 if used == 0 else used + 1
        return answer

    def acknowledge(self, acks: dict[int, list[tuple[int, int, int]]], epoch: int | None = None) -> Any:
        used = self.epoch if epoch is None else epoch
        answer = self.send(
            ack_v1.ShareAcknowledgeRequest(
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=i32(used),
                topics=(
                    ack_v1.AcknowledgeTopic(
                        topic_id=self.tid,
                        partitions=tuple(
                            ack_v1.AcknowledgePartition(
                                partition_index=i32(p),
                                acknowledgement_batches=tuple(ack_v1.AcknowledgementBatch(first_offset=i64(f), last_offset=i64(l), acknowledge_types=(i8(t),)) for f, l, t in batches),
                            )
                            for p, batches in acks.items()
                        ),
                    ),
                ),
            ),
        )
        if epoch is None and answer.error_code == ErrorCode.none and used > 0:
            self.epoch = used + 1
        return answer


def acquired(answer: Any, partition: int = 0) -> list[tuple[int, int, int]]:
    assert answer.error_code == ErrorCode.none, answer
    return [
        (int(r.first_offset), int(r.last_offset), int(r.delivery_count))
        for t in answer.responses
        for p in t.partitions
        if p.partition_index == partition
        for r in p.acquired_records
    ]


def partition_of(answer: Any, partition: int = 0) -> Any:
    [found] = [p for t in answer.responses for p in t.partitions if p.partition_index == partition]
    return found


def fetch_until(member: RawShareMember, predicate: Any, **kw: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = member.fetch(**kw)
        if predicate(answer):
            return answer
        assert time.monotonic() < deadline, answer
        kw.pop("acks", None)


def test_record_states_and_session_errors_on_the_wire(short_lock_node: BrokerProcess) -> None:
    bs = short_lock_node.bootstrap
    group, topic = "raw-share-g", "raw-share-t"
    create_topic(bs, topic, partitions=1)
    # share.delivery.count.limit at its minimum, 2: a second release archives.
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2"})
    produce_acked(bs, topic, [b"v%d" % i for i in range(6)], linger_ms=0)
    tid = topic_id(bs, topic)
    a = RawShareMember(bs, group, tid)
    b = RawShareMember(bs, group, tid)
    join_assigned(bs, group, a.member_id, topic, 1)
    versions = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {(int(k.api_key), int(k.min_version), int(k.max_version)) for k in versions.api_keys if k.api_key in (78, 79)} == {(78, 1, 2), (79, 1, 2)}

    # Bad session epochs: none open yet; acknowledging on opening; ShareAcknowledge at 0.
    assert a.fetch(epoch=3).error_code == ErrorCode.share_session_not_found
    assert a.fetch(epoch=-1).error_code == ErrorCode.share_session_not_found
    assert a.acknowledge({0: [(0, 0, ACCEPT)]}, epoch=0).error_code == ErrorCode.invalid_share_session_epoch
    assert a.fetch(acks={0: [(0, 0, ACCEPT)]}, epoch=0).error_code == ErrorCode.invalid_request

    first = fetch_until(a, lambda r: bool(acquired(r)))
    records = acquired(first)
    assert records[0][0] == 0 and records[-1][1] == 5 and all(count == 1 for _, _, count in records)
    assert len(partition_of(first).records) > 0
    assert first.acquisition_lock_timeout == datetime.timedelta(milliseconds=LOCK_MS)
    # The session moves on: a stale epoch is refused, the right one continues.
    assert a.fetch(epoch=5, max_wait_ms=0).error_code == ErrorCode.invalid_share_session_epoch
    assert a.acknowledge({0: [(0, 0, ACCEPT)]}, epoch=7).error_code == ErrorCode.invalid_share_session_epoch

    # b holds nothing: acknowledging a's records is INVALID_RECORD_STATE, and they stay a's.
    assert acquired(b.fetch(max_wait_ms=200)) == []
    denied = b.acknowledge({0: [(1, 1, ACCEPT)]})
    assert partition_of(denied).error_code == ErrorCode.invalid_record_state

    # 0 accepted, 1 released (redelivered with count 2), 2 rejected (never again), 3-5 released.
    answer = a.acknowledge({0: [(0, 0, ACCEPT), (1, 1, RELEASE), (2, 2, REJECT), (3, 5, RELEASE)]})
    assert answer.error_code == ErrorCode.none and partition_of(answer).error_code == ErrorCode.none
    again = acquired(fetch_until(b, lambda r: bool(acquired(r))))
    offsets = {o for f, l, _ in again for o in range(f, l + 1)}
    assert offsets == {1, 3, 4, 5} and all(count == 2 for _, _, count in again), again

    # Released at delivery count 2 = share.delivery.count.limit: archived, not redelivered. The
    # release goes in a ShareFetch's acknowledgements, applied before it fetches.
    released = b.fetch(acks={0: [(1, 1, RELEASE), (3, 3, RELEASE)]}, max_wait_ms=300)
    assert partition_of(released).acknowledge_error_code == ErrorCode.none
    assert acquired(released) == []
    # b leaves 4-5 unacknowledged and a takes a new record, 6, which it does not acknowledge
    # either: when their locks expire, 4-5 (count 2) are archived and 6 goes to b, delivered twice.
    produce_acked(bs, topic, [b"late"], linger_ms=0)
    late = acquired(fetch_until(a, lambda r: bool(acquired(r))))
    assert late == [(6, 6, 1)]
    started = time.monotonic()
    redelivered = acquired(fetch_until(b, lambda r: bool(acquired(r)), max_wait_ms=LOCK_MS + 2000))
    assert redelivered == [(6, 6, 2)] and time.monotonic() - started >= LOCK_MS / 1000 - 1
    assert acquired(b.fetch(acks={0: [(6, 6, ACCEPT)]}, max_wait_ms=300)) == []

    # A closed connection ends its share session, and what its member held goes back.
    produce_acked(bs, topic, [b"orphan"], linger_ms=0)
    assert acquired(fetch_until(a, lambda r: bool(acquired(r)))) == [(7, 7, 1)]
    a.close()
    assert acquired(fetch_until(b, lambda r: bool(acquired(r)))) == [(7, 7, 2)]

    # Unknown topic ids are UNKNOWN_TOPIC_ID in the answer; -1 closes the session after its
    # acknowledgements, and a session closed is not found.
    stranger = RawShareMember(bs, group, uuid.uuid4())
    unknown = stranger.fetch(max_wait_ms=0)
    assert partition_of(unknown).error_code == ErrorCode.unknown_topic_id
    closing = b.fetch(acks={0: [(7, 7, ACCEPT)]}, epoch=-1, partitions=(0,))
    assert closing.error_code == ErrorCode.none and partition_of(closing).acknowledge_error_code == ErrorCode.none
    assert acquired(closing) == []
    assert b.fetch(epoch=-1, partitions=()).error_code == ErrorCode.share_session_not_found

    # share.version back to 0: both requests are UNSUPPORTED_VERSION.
    downgraded = kbroker("features", "--bootstrap-server", bs, "downgrade", "--feature", "share.version=0")
    assert downgraded.returncode == 0, downgraded.stderr
    await_finalized(bs, "share.version", 0)
    assert stranger.fetch(max_wait_ms=0, epoch=0).error_code == ErrorCode.unsupported_version
    assert stranger.acknowledge({}, epoch=1).error_code == ErrorCode.unsupported_version
    for member in (b, stranger):
        member.close()


def split_between_two(bs: str, group: str) -> bool:
    """Whether the group's two members hold the topic's 3 partitions between them, each some and
    none twice: what each then fetches is its own."""
    answer = request(bs, describe_v1.ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False))
    [described] = answer.groups
    counts = [sum(len(t.partitions) for t in m.assignment.topic_partitions) if m.assignment is not None else 0 for m in described.members]
    return len(counts) == 2 and min(counts) >= 1 and sum(counts) == 3


def produce_spread(bs: str, topic: str, count: int) -> set[str]:
    values = [f"m-{i}" for i in range(count)]
    for partition in range(3):
        produce_acked(bs, topic, [v.encode() for v in values[partition::3]], partition=partition)
    return set(values)


def test_two_confluent_share_consumers_split_the_records(share_node: BrokerProcess) -> None:
    bs = share_node.bootstrap
    group, topic = "confluent-share-g", "confluent-share-t"
    create_topic(bs, topic, partitions=3)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    consumers = [ShareConsumer({"bootstrap.servers": bs, "group.id": group}) for _ in range(2)]
    received: list[list[str]] = [[], []]
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not split_between_two(bs, group):
            assert time.monotonic() < deadline, "the two share consumers were not both assigned partitions"
            for i, c in enumerate(consumers):
                received[i] += [m.value().decode() for m in c.poll(0.2) if m.error() is None]
        expected = produce_spread(bs, topic, 300)
        while sum(map(len, received)) < len(expected):
            assert time.monotonic() < deadline, f"received {sum(map(len, received))} of {len(expected)}"
            for i, c in enumerate(consumers):
                for m in c.poll(0.3):
                    assert m.error() is None, m.error()
                    received[i].append(m.value().decode())
    finally:
        for c in consumers:
            c.close()
    everything = received[0] + received[1]
    assert len(everything) == len(set(everything)), "a record was delivered twice"
    assert set(everything) == expected
    assert all(received), "both consumers of the group got records"


def test_two_kafka_console_share_consumers_split_the_records(share_node: BrokerProcess, kafka_lib: Path) -> None:
    bs = share_node.bootstrap
    group, topic = "console-share-g", "console-share-t"
    create_topic(bs, topic, partitions=3)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    outputs: list[subprocess.CompletedProcess[str] | BaseException] = []
    jvms = [ToolJvm(kafka_lib, Path(tempfile.mkstemp(suffix=".stderr")[1])) for _ in range(2)]

    def consume(jvm: ToolJvm) -> None:
        try:
            rc, out, err = jvm.run(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", bs, "--topic", topic, "--group", group, "--timeout-ms", "12000")
            outputs.append(subprocess.CompletedProcess([], rc, out, err))
        except BaseException as e:  # reported by the assertions below
            outputs.append(e)

    threads = [threading.Thread(target=consume, args=(jvm,)) for jvm in jvms]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + WAIT_S
        while not split_between_two(bs, group):
            assert time.monotonic() < deadline, "the two console share consumers were not both assigned partitions"
            time.sleep(0.2)
        expected = produce_spread(bs, topic, 300)
        for t in threads:
            t.join(60)
    finally:
        for jvm in jvms:
            jvm.close()
    assert len(outputs) == 2 and all(isinstance(o, subprocess.CompletedProcess) for o in outputs), outputs
    lines = [[line for line in o.stdout.splitlines() if line.startswith("m-")] for o in outputs]  # type: ignore[union-attr]
    everything = lines[0] + lines[1]
    assert len(everything) == len(set(everything)), "a record was delivered twice"
    assert set(everything) == expected, [o.stderr[-2000:] for o in outputs]  # type: ignore[union-attr]
    assert all(lines), "both consumers of the group got records"


RENEW = 4


def ack_v2_request(member: RawShareMember, batches: list[tuple[int, int, int]], is_renew_ack: bool) -> Any:
    """A ShareAcknowledge v2 of partition 0 in the member's session (the epoch moves on)."""
    answer = member.send(
        ack_v2.ShareAcknowledgeRequest(
            group_id=member.group,
            member_id=member.member_id,
            share_session_epoch=i32(member.epoch),
            is_renew_ack=is_renew_ack,
            topics=(
                ack_v2.AcknowledgeTopic(
                    topic_id=member.tid,
                    partitions=(
                        ack_v2.AcknowledgePartition(
                            partition_index=i32(0),
                            acknowledgement_batches=tuple(ack_v2.AcknowledgementBatch(first_offset=i64(f), last_offset=i64(l), acknowledge_types=(i8(t),)) for f, l, t in batches),
                        ),
                    ),
                ),
            ),
        )
    )
    if answer.error_code == ErrorCode.none:
        member.epoch += 1
    return answer


def fetch_v2_request(member: RawShareMember, *, max_records: int, acquire_mode: int = 0, renew: list[tuple[int, int, int]] | None = None, max_wait_ms: int = 2000) -> Any:
    """A ShareFetch v2 of partition 0; with ``renew`` a renewing one (IsRenewAck) whose fetch limits are 0 but MaxRecords."""
    partition = fetch_v2.FetchPartition(
        partition_index=i32(0),
        acknowledgement_batches=tuple(fetch_v2.AcknowledgementBatch(first_offset=i64(f), last_offset=i64(l), acknowledge_types=(i8(t),)) for f, l, t in renew or ()),
    )
    answer = member.send(
        fetch_v2.ShareFetchRequest(
            group_id=member.group,
            member_id=member.member_id,
            share_session_epoch=i32(member.epoch),
            max_wait=datetime.timedelta(milliseconds=0 if renew else max_wait_ms),
            min_bytes=i32(0 if renew else 1),
            max_bytes=i32(0 if renew else 1 << 20),
            max_records=i32(max_records),
            batch_size=i32(max_records),
            share_acquire_mode=i8(acquire_mode),
            is_renew_ack=renew is not None,
            topics=(fetch_v2.FetchTopic(topic_id=member.tid, partitions=(partition,)),),
            forgotten_topics_data=(),
        )
    )
    if answer.error_code == ErrorCode.none:
        member.epoch = 1 if member.epoch == 0 else member.epoch + 1
    return answer


def joined_member(bs: str, group: str, topic: str, records: int, linger_ms: int) -> RawShareMember:
    """A 1-partition topic holding ``records`` records and a raw member of ``group`` (earliest) assigned it."""
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    produce_acked(bs, topic, [b"r%d" % i for i in range(records)], linger_ms=linger_ms)
    member = RawShareMember(bs, group, topic_id(bs, topic))
    join_assigned(bs, group, member.member_id, topic, 1)
    return member


def test_renew_acknowledgements_on_the_wire(short_lock_node: BrokerProcess) -> None:
    """KIP-1222 at v2: a renewal restarts the holder's acquisition lock (delivery count unchanged);
    type 4 elsewhere, or by another member, is refused as Kafka 4.4 refuses it."""
    bs = short_lock_node.bootstrap
    a = joined_member(bs, "renew-share-g", "renew-share-t", 3, linger_ms=0)
    b = RawShareMember(bs, a.group, a.tid)

    before_acquire = time.monotonic()
    got = acquired(fetch_until(a, lambda r: bool(acquired(r))))
    assert got and got[0][0] == 0 and got[-1][1] == 2, got
    # Type 4 without IsRenewAck, or below v2, is INVALID_REQUEST for the partition.
    assert partition_of(ack_v2_request(a, [(0, 2, RENEW)], is_renew_ack=False)).error_code == ErrorCode.invalid_request
    assert partition_of(a.acknowledge({0: [(0, 2, RENEW)]})).error_code == ErrorCode.invalid_request
    # A renewing ShareFetch must not ask to fetch.
    assert fetch_v2_request(a, max_records=5, renew=[(0, 2, RENEW)]).error_code == ErrorCode.invalid_request
    # b holds nothing: its renewal is INVALID_RECORD_STATE.
    assert acquired(b.fetch(max_wait_ms=0)) == []
    assert partition_of(ack_v2_request(b, [(0, 2, RENEW)], is_renew_ack=True)).error_code == ErrorCode.invalid_record_state

    time.sleep(max(0.0, before_acquire + LOCK_MS / 2000 - time.monotonic()))
    renew_sent = time.monotonic()
    assert renew_sent < before_acquire + LOCK_MS / 1000, "too slow to renew before the first lock expired"
    renewed = fetch_v2_request(a, max_records=0, renew=[(0, 2, RENEW)])
    assert renewed.error_code == ErrorCode.none and partition_of(renewed).acknowledge_error_code == ErrorCode.none
    # A renewing fetch acquires nothing.
    assert acquired(renewed) == []

    # Past the first deadline, before the renewed one: the records are still a's.
    time.sleep(max(0.0, before_acquire + LOCK_MS / 1000 + 1.0 - time.monotonic()))
    early = b.fetch(max_wait_ms=0)
    if time.monotonic() < renew_sent + LOCK_MS / 1000:
        assert acquired(early) == [], early
    # After the renewed deadline they are redelivered, counted once more for the expiry only.
    again = acquired(fetch_until(b, lambda r: bool(acquired(r))))
    assert time.monotonic() >= renew_sent + LOCK_MS / 1000
    assert {o for f, l, _ in again for o in range(f, l + 1)} == {0, 1, 2} and all(count == 2 for _, _, count in again), again
    for m in (a, b):
        m.close()


def test_record_limit_acquire_mode_on_the_wire(share_node: BrokerProcess) -> None:
    """ShareAcquireMode record_limit (v2): MaxRecords is a hard limit, batches are split; batch
    mode takes whole batches."""
    a = joined_member(share_node.bootstrap, "limit-share-g", "limit-share-t", 10, linger_ms=200)

    deadline = time.monotonic() + WAIT_S
    while not (got := acquired(fetch_v2_request(a, max_records=3, acquire_mode=1))):
        assert time.monotonic() < deadline
    assert got == [(0, 2, 1)], got
    assert acquired(fetch_v2_request(a, max_records=4, acquire_mode=1)) == [(3, 6, 1)]
    # An acquire mode Kafka does not know fails the request (ShareAcquireMode.forId throws).
    assert fetch_v2_request(a, max_records=4, acquire_mode=7).error_code == ErrorCode.unknown_server_error
    a.close()


def transactional_producer(bs: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(WAIT_S)
    return producer


def send_in_transaction(producer: Producer, topic: str, values: list[str], *, commit: bool | None) -> None:
    """``commit`` None leaves the transaction open."""
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v.encode(), partition=0)
    producer.flush(WAIT_S)
    if commit is True:
        producer.commit_transaction(WAIT_S)
    elif commit is False:
        producer.abort_transaction(WAIT_S)


def share_poll_until(consumer: ShareConsumer, received: list[str], done: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"{what}: received {received}"
        for m in consumer.poll(0.3):
            assert m.error() is None, m.error()
            received.append(m.value().decode())


def test_share_isolation_level_read_committed_delivers_committed_records_only(share_node: BrokerProcess) -> None:
    """``share.isolation.level`` (a group config): read_committed share partitions deliver up to
    the last stable offset and skip aborted transactions; read_uncommitted delivers every record
    up to the high watermark, open and aborted transactions' too. Both as Kafka's SharePartition."""
    bs = share_node.bootstrap
    topic = "share-isolation-t"
    create_topic(bs, topic, partitions=1)
    for group, level in (("share-rc-g", "read_committed"), ("share-ru-g", "read_uncommitted")):
        set_group_configs(bs, group, {"share.auto.offset.reset": "earliest", "share.isolation.level": level})
    committed, aborted, late = [f"c-{i}" for i in range(5)], [f"a-{i}" for i in range(5)], [f"o-{i}" for i in range(5)]
    producer = transactional_producer(bs, "share-isolation-txn")
    send_in_transaction(producer, topic, committed, commit=True)
    send_in_transaction(producer, topic, aborted, commit=False)
    send_in_transaction(producer, topic, late, commit=None)
    rc = ShareConsumer({"bootstrap.servers": bs, "group.id": "share-rc-g"})
    ru = ShareConsumer({"bootstrap.servers": bs, "group.id": "share-ru-g"})
    got_rc: list[str] = []
    got_ru: list[str] = []
    try:
        rc.subscribe([topic])
        ru.subscribe([topic])
        share_poll_until(ru, got_ru, lambda: len(got_ru) >= 15, "read_uncommitted")
        assert sorted(got_ru) == sorted(committed + aborted + late)
        share_poll_until(rc, got_rc, lambda: len(got_rc) >= 5, "read_committed")
        # The open transaction holds the last stable offset: nothing past it is delivered yet.
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < quiet_until:
            got_rc += [m.value().decode() for m in rc.poll(0.3) if m.error() is None]
        assert sorted(got_rc) == sorted(committed)
        producer.commit_transaction(WAIT_S)
        share_poll_until(rc, got_rc, lambda: len(got_rc) >= 10, "read_committed after the commit")
        assert sorted(got_rc) == sorted(committed + late), "an aborted record was delivered, or a record twice"
    finally:
        rc.close()
        ru.close()
