"""Replication under faults (issue #17): a follower cut off from its leader, a leader stopped
(SIGSTOP) past its session and resumed, two of three replicas down, the last ISR member lost with
and without unclean leader election. Repeated leader kills are the chaos campaign's (tests/chaos).

Three combined nodes; brokers reach each other's inter-broker listener through proxies, so a
test can cut one broker's replica fetches from another while every node still heartbeats to the
controller. What is asserted is what the broker guarantees: every record acknowledged with
acks=all is read back once, at the offset it was acknowledged with, offsets stay dense, and a
leader that has lost its leadership acknowledges nothing. Timing only bounds the waits.
"""

from __future__ import annotations

import datetime
import io
import os
import signal
import socket
import struct
import threading
import time
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.produce.v8 import request as produce_v8
from kio.schema.produce.v8.response import ProduceResponse as ProduceResponseV8
from kio.schema.produce.v9 import request as produce_v9
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from protocol.records import build_batch
from tests.cluster.cluster import ClusterNode, KafkaCluster, leader_id, wait_until
from tests.cluster.test_coordinator_failover import OFFSETS_PARTITIONS, commit_offset, offset_fetch
from tests.cluster.test_fetch_from_follower import fetch
from tests.cluster.test_replication import admin, create, partition_state, produce
from tests.integration.helpers import unique_topic, watermarks
from tests.integration.test_bad_input import frame, header_v1
from tests.integration.test_connection_pipelining import read_frame
from tests.integration.wire import request

API_PRODUCE = 0

TIMEOUT_S = 60.0
LAG_MS = 4000
SESSION_MS = 3000
# How often the active controller looks for leaderless partitions it may elect uncleanly (Kafka's 5 minutes by default).
UNCLEAN_INTERVAL_MS = 4000
Record = tuple[int, int, bytes]  # (partition, offset, value)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("replication-faults"),
        combined=3,
        proxy_inter_broker=True,
        overrides={
            "broker.session.timeout.ms": str(SESSION_MS),
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": str(LAG_MS),
            # A fetch lost in a cut link is given up after this, so a healed follower fetches again soon.
            "replica.socket.timeout.ms": "5000",
            "unclean.leader.election.interval.ms": str(UNCLEAN_INTERVAL_MS),
        },
    )
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(autouse=True)
def whole_cluster(cluster: KafkaCluster) -> Iterator[None]:
    """Each test starts and leaves with every link healed and every node running."""
    yield
    cluster.heal()
    down = [node for node in cluster.nodes.values() if not node.running]
    for node in cluster.nodes.values():
        if node.running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGCONT)
    for node in down:
        node.launch()
    for node in down:
        node.await_started()


class Load:
    """One idempotent acks=all producer writing numbered values in a thread; ``acked`` holds what
    the cluster acknowledged, as (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.acked: list[Record] = []
        self.errors: list[KafkaError] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                # An idempotent producer moves a partition to its new leader only once the requests
                # in flight to the old one are answered or given up (after socket.timeout.ms, 60 s by
                # default): a stopped leader answers none.
                "socket.timeout.ms": 6000,
                "request.timeout.ms": 5000,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}")

    def __enter__(self) -> "Load":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._producer.flush(TIMEOUT_S)

    def _done(self, err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.errors.append(err)

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            # About 200 records a second, and never far ahead of the acknowledgements.
            if len(self._producer) < 500:
                for _ in range(20):
                    self._producer.produce(self.topic, value=b"%s-%d" % (self.topic.encode(), sent), partition=self.partition, on_delivery=self._done)
                    sent += 1
            # poll returns as soon as it has served a delivery report: wait out the 100 ms.
            until = time.monotonic() + 0.1
            while (left := until - time.monotonic()) > 0:
                self._producer.poll(left)

    def wait_for_more(self, count: int, what: str) -> None:
        target = len(self.acked) + count
        wait_until(f"{count} more records acknowledged {what} (errors so far: {self.errors[-3:]})", lambda: len(self.acked) >= target or None, TIMEOUT_S)


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's high watermark; OFFSET_NOT_AVAILABLE (a new leader whose high watermark has
    not reached its epoch's start yet) is retried, as Kafka's own consumer retries it."""

    def probe() -> tuple[int] | None:
        try:
            return (consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)[1],)
        except KafkaException as e:
            if e.args[0].code() == KafkaError.OFFSET_NOT_AVAILABLE:
                return None
            raise

    [end] = wait_until(f"the high watermark of {topic}-{partition}", probe, TIMEOUT_S)
    return end


def read_to_end(bootstrap: str, topic: str, partitions: list[int], isolation_level: str = "read_committed") -> tuple[list[Record], dict[int, int]]:
    """Every record of ``partitions`` below the high watermark, and the high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False, "isolation.level": isolation_level})
    try:
        ends = {p: high_watermark(consumer, topic, p) for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[Record] = []

        def probe() -> bool | None:
            records.extend((m.partition(), m.offset(), m.value()) for m in consumer.consume(500, 0.5) if m.error() is None)
            # The position, not the last record: a transaction's marker may be the last offset.
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            return all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions) or None

        wait_until(f"{topic} read to its high watermarks {ends}", probe, TIMEOUT_S)
    finally:
        consumer.close()
    return [r for r in records if r[1] < ends[r[0]]], ends


def assert_acked_once_at_their_offsets(records: list[Record], acked: list[Record]) -> None:
    """Every acknowledged record is read back at its acknowledged offset; no value twice; offsets dense from 0."""
    missing = set(acked) - set(records)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost or moved, e.g. {sorted(missing)[:5]}"
    values = [v for _, _, v in records]
    assert len(set(values)) == len(values), f"{len(values) - len(set(values))} records duplicated"
    for p in {p for p, _, _ in records}:
        offsets = sorted(o for q, o, _ in records if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense from 0"


def isr(cluster: KafkaCluster, topic: str, partition: int = 0) -> tuple[int, ...]:
    return partition_state(cluster.bootstrap, topic, partition)[1]


def wait_for_isr(cluster: KafkaCluster, topic: str, expected: set[int], partition: int = 0) -> None:
    wait_until(f"the ISR of {topic}-{partition} to be {sorted(expected)}", lambda: set(isr(cluster, topic, partition)) == expected or None, TIMEOUT_S)


def kill(cluster: KafkaCluster, node_id: int) -> None:
    """SIGKILL; the node's next interpreter imports the broker meanwhile (ClusterNode.warm_up), while
    the test waits out the failover, so that its restart does not wait for the import too."""
    cluster.nodes[node_id].kill()
    cluster.nodes[node_id].warm_up()


def restart(cluster: KafkaCluster, node_id: int) -> None:
    cluster.nodes[node_id].launch()
    cluster.nodes[node_id].await_started()


def partition_led_away_from_the_controller(cluster: KafkaCluster, name: str) -> tuple[int, ClusterNode, str]:
    """A new 3-partition topic's partition whose leader is preferably not the active controller (so
    only the broker fails over): (partition, its leader, the other nodes' bootstrap)."""
    create(cluster.bootstrap, name, partitions=3)
    for p in range(3):
        wait_for_isr(cluster, name, {1, 2, 3}, p)
    controller = leader_id(cluster, 1)
    leaders = {p: partition_state(cluster.bootstrap, name, p)[0] for p in range(3)}
    partition = next((p for p, b in leaders.items() if b != controller), 0)
    old = cluster.nodes[leaders[partition]]
    return partition, old, ",".join(n.bootstrap for n in cluster.nodes.values() if n is not old)


def replica_bytes(cluster: KafkaCluster, node_id: int, topic: str, partition: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))


def raw_produce(bootstrap: str, topic: str, partition: int, value: bytes, timeout_ms: int = 5000) -> tuple[int, int]:
    """An acks=all Produce sent to ``bootstrap`` alone: (error code, base offset); a lost connection is a timeout."""
    batch = build_batch([(None, value, (), int(time.time() * 1000))])
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=partition, records=batch),)),),
    )
    try:
        response = request(bootstrap, body)
    except OSError:
        return int(ErrorCode.request_timed_out), -1
    [part] = [p for t in response.responses for p in t.partition_responses]
    return int(part.error_code), int(part.base_offset)


# -- 1. a follower cut off from its leader ------------------------------------------------------


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins_after_healing(cluster: KafkaCluster) -> None:
    name = unique_topic("cut")
    create(cluster.bootstrap, name)
    wait_for_isr(cluster, name, {1, 2, 3})
    leader, _ = partition_state(cluster.bootstrap, name)
    follower = next(n for n in cluster.nodes if n != leader)
    with Load(cluster.bootstrap, name) as load:
        load.wait_for_more(200, "before the cut")
        cut_at = time.monotonic()
        cluster.broker_links[(follower, leader)].cut()
        wait_for_isr(cluster, name, set(cluster.nodes) - {follower})
        left_after_s = time.monotonic() - cut_at
        # Out of the ISR for its fetches only: it still heartbeats, so it stays registered and unfenced.
        assert follower in admin(cluster.bootstrap).list_topics(timeout=TIMEOUT_S).brokers
        # An ISR of two meets min.insync.replicas=2: acks=all goes on without the follower.
        load.wait_for_more(200, "while the follower is cut off")
        assert follower not in isr(cluster, name)
        cluster.broker_links[(follower, leader)].heal()
        wait_for_isr(cluster, name, {1, 2, 3})
        load.wait_for_more(100, "after the follower rejoined")
    print(f"the cut-off follower left the ISR {left_after_s:.1f}s after the cut (replica.lag.time.max.ms={LAG_MS})")
    assert left_after_s < 30, "the follower was not dropped within replica.lag.time.max.ms and the expiration check"
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert_acked_once_at_their_offsets(records, load.acked)


# -- 2. the leader stopped past its session, then resumed ----------------------------------------


def test_a_leader_stopped_past_its_session_is_replaced_and_acknowledges_nothing_after(cluster: KafkaCluster) -> None:
    name = unique_topic("stop")
    partition, old, survivors = partition_led_away_from_the_controller(cluster, name)
    assert old.proc is not None
    stale: list[tuple[bytes, int, int]] = []  # (value, error code, base offset) of Produce sent to the old leader alone

    def to_old_leader(value: bytes) -> None:
        stale.append((value, *raw_produce(old.bootstrap, name, partition, value)))

    with Load(survivors, name, partition) as load:
        load.wait_for_more(200, "before the stop")
        os.kill(old.proc.pid, signal.SIGSTOP)
        try:
            new_leader = wait_until(
                "a new leader", lambda: (b := partition_state(survivors, name, partition)[0]) not in (old.node_id, -1) and b, TIMEOUT_S
            )
            assert new_leader in (1, 2, 3)
            load.wait_for_more(200, "by the new leader")
            # Written to the stopped leader's socket: it finds them when it resumes, before it
            # may have heard of the new leader.
            early = [threading.Thread(target=to_old_leader, args=(b"stale-early-%d" % i,)) for i in range(3)]
            for t in early:
                t.start()
            time.sleep(0.5)
        finally:
            os.kill(old.proc.pid, signal.SIGCONT)
        # And for a while after it resumed, one after the other.
        late_until = time.monotonic() + 3
        while time.monotonic() < late_until:
            to_old_leader(b"stale-late-%d" % len(stale))
        for t in early:
            t.join(TIMEOUT_S)
        wait_until("the old leader back in the ISR", lambda: old.node_id in isr(cluster, name, partition) or None, TIMEOUT_S)
        load.wait_for_more(100, "after the old leader rejoined")
    acked_by_old = [(partition, offset, value) for value, code, offset in stale if code == 0]
    refused = {ErrorCode(code).name for _, code, _ in stale if code != 0}
    print(f"Produce to the resumed old leader: {len(acked_by_old)} acknowledged (by it or a successor), refused with {refused}")
    records, _ = read_to_end(survivors, name, [partition])
    assert_acked_once_at_their_offsets(records, load.acked + acked_by_old)
    # The old leader truncated what it alone had and now holds the new leader's log.
    wait_until(
        "the old leader's copy equal to the new leader's",
        lambda: replica_bytes(cluster, old.node_id, name, partition) == replica_bytes(cluster, new_leader, name, partition) or None,
        TIMEOUT_S,
    )


# -- 3. two of three replicas down ------------------------------------------------------------------


def test_with_two_replicas_down_acks_all_fails_and_consumers_read_to_the_high_watermark(cluster: KafkaCluster) -> None:
    name = unique_topic("two-down")
    create(cluster.bootstrap, name)
    wait_for_isr(cluster, name, {1, 2, 3})
    acked = produce(cluster.bootstrap, name, [b"before-%d" % i for i in range(300)])
    assert len(acked) == 300
    leader, _ = partition_state(cluster.bootstrap, name)
    others = [n for n in cluster.nodes if n != leader]
    for n in others:
        kill(cluster, n)
    bootstrap = cluster.nodes[leader].bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 5000})
    errors: list[KafkaError | None] = []
    for i in range(10):
        producer.produce(name, value=b"refused-%d" % i, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 10
    # Two of three nodes down is also the metadata quorum down: the ISR cannot shrink, so the
    # leader appends and waits for replicas that do not come (a timeout); with a quorum it would
    # refuse with NOT_ENOUGH_REPLICAS.
    codes = {e.code() if e is not None else None for e in errors}
    assert codes <= {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}, codes
    records, ends = read_to_end(bootstrap, name, [0])
    assert ends == {0: 300}, "the high watermark moved with no follower to hold the records"
    assert sorted(records) == sorted(acked)
    for n in others:
        cluster.nodes[n].launch()
    for n in others:
        cluster.nodes[n].await_started()
    wait_for_isr(cluster, name, {1, 2, 3})
    assert len(produce(cluster.bootstrap, name, [b"after"])) == 1


# -- 4. the last ISR member lost: no unclean election unless the topic allows it --------------------


def lose_the_last_isr_member(cluster: KafkaCluster) -> tuple[list[str], int, int, int, str]:
    """Two topics on the same replicas whose partitions' ISR shrank to their leader, which then
    died, the other two replicas running: (topics, dead leader, first, second, the survivors'
    bootstrap). Two, so that one failure of the leader shows both a topic that allows no unclean
    election and one that is then given it."""
    names = [unique_topic("unclean"), unique_topic("unclean")]
    create(cluster.bootstrap, names[0])
    wait_for_isr(cluster, names[0], {1, 2, 3})
    leader, _ = partition_state(cluster.bootstrap, names[0])
    first, second = (n for n in cluster.nodes if n != leader)
    # The same leader and followers: the kills below shrink both ISRs alike.
    topic = NewTopic(names[1], num_partitions=1, replica_assignment=[[leader, first, second]], config={"min.insync.replicas": "2"})
    creator = admin(cluster.bootstrap)  # held: a client dropped before its answer fails the future
    creator.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[names[1]].result(timeout=TIMEOUT_S)
    for name in names:
        wait_for_isr(cluster, name, {1, 2, 3})
        assert partition_state(cluster.bootstrap, name)[0] == leader
        assert len(produce(cluster.bootstrap, name, [b"clean-%d" % i for i in range(100)])) == 100
    # Killed one after the other; each comes back (the metadata quorum needs two of three nodes)
    # cut off from the leader's data, so it stays out of the ISR.
    kill(cluster, first)
    for name in names:
        wait_for_isr(cluster, name, {leader, second})
    cluster.broker_links[(first, leader)].cut()
    restart(cluster, first)
    kill(cluster, second)
    for name in names:
        wait_for_isr(cluster, name, {leader})
    cluster.broker_links[(second, leader)].cut()
    restart(cluster, second)
    # Only the leader holds these.
    for name in names:
        assert len(produce(cluster.nodes[leader].bootstrap, name, [b"leader-only-%d" % i for i in range(10)], acks="1")) == 10
    kill(cluster, leader)
    cluster.heal()
    survivors = ",".join(cluster.nodes[n].bootstrap for n in (first, second))
    for name in names:
        wait_until("the partition without a leader", lambda name=name: partition_state(survivors, name)[0] == -1 or None, TIMEOUT_S)  # type: ignore[misc]
    return names, leader, first, second, survivors


def unclean_passes(cluster: KafkaCluster) -> int:
    """How many periodic unclean elections the controllers have logged as electing something."""
    return sum(n.log_path.read_bytes().count(b"controller.unclean_leaders_elected") for n in cluster.nodes.values() if n.log_path.exists())


def test_a_partition_whose_last_isr_member_died_stays_leaderless_unless_unclean_election_is_enabled(cluster: KafkaCluster) -> None:
    """Without unclean.leader.election.enable the partition stays leaderless until its last ISR
    member returns. Enabling it, as Kafka 4.4's controller does, elects nothing itself: the periodic
    check every unclean.leader.election.interval.ms does (docs/design/replication.md has Kafka's run
    of this)."""
    (clean, unclean), leader, first, second, survivors = lose_the_last_isr_member(cluster)
    resource = ConfigResource(ConfigResource.Type.TOPIC, unclean, incremental_configs=[
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
    ])
    client = admin(survivors)  # held: a client dropped before its answer fails the future
    passes = unclean_passes(cluster)
    # unclean.leader.election.enable=false: both live replicas are out of the ISR, neither is
    # elected, however long they have been back, nor by the periodic check that elects the other topic's.
    deadline = time.monotonic() + 3 * SESSION_MS / 1000
    client.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    new_leader = wait_until(
        "an unclean leader at the periodic check", lambda: (b := partition_state(survivors, unclean)[0]) in (first, second) and b, UNCLEAN_INTERVAL_MS / 1000 + 30
    )
    wait_until("the periodic check's election in a controller's log", lambda: unclean_passes(cluster) > passes or None, 10)
    while True:
        assert partition_state(survivors, clean)[0] == -1, "a replica outside the ISR was elected with unclean election disabled"
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    # What the ISR held when the survivors left it was replicated to them: the unclean leader has it.
    records, _ = read_to_end(survivors, unclean, [0])
    assert [v for _, _, v in records] == [b"clean-%d" % i for i in range(100)]
    wait_for_isr(cluster, unclean, {first, second})
    assert len(produce(survivors, unclean, [b"after-unclean"])) == 1
    # The last ISR member returns. Of the clean topic it leads again with every record it had (it
    # restarted uncleanly, so with eligible leader replicas on it is elected as the partition's last
    # known leader, KIP-966).
    restart(cluster, leader)
    wait_until("the old leader leading again", lambda: partition_state(cluster.bootstrap, clean)[0] == leader or None, TIMEOUT_S)
    wait_for_isr(cluster, clean, {1, 2, 3})
    records, _ = read_to_end(cluster.bootstrap, clean, [0])
    assert [v for _, _, v in records] == [b"clean-%d" % i for i in range(100)] + [b"leader-only-%d" % i for i in range(10)]
    # Of the other it gave up the records it alone had and holds the unclean leader's log.
    wait_for_isr(cluster, unclean, {1, 2, 3})
    wait_until(
        "the old leader's copy equal to the unclean leader's",
        lambda: replica_bytes(cluster, leader, unclean, 0) == replica_bytes(cluster, new_leader, unclean, 0) or None,
        TIMEOUT_S,
    )


# -- 6. a leader cut off from everyone, with a client's produce requests pipelined to it ---------


def produce_v8_frame(topic: str, partition: int, value: bytes, correlation_id: int, timeout_ms: int) -> bytes:
    body = produce_v8.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(produce_v8.TopicProduceData(name=topic, partition_data=(produce_v8.PartitionProduceData(index=i32(partition), records=build_batch([(None, value, (), int(time.time() * 1000))])),)),),
    )
    buf = io.BytesIO()
    entity_writer(produce_v8.ProduceRequest)(buf, body)
    return frame(header_v1(API_PRODUCE, 8, correlation_id) + buf.getvalue())


def test_a_leader_cut_off_from_everyone_appends_one_of_a_clients_pipelined_produces(cluster: KafkaCluster) -> None:
    """Issue 32's duplicates: a leader that has lost its leadership without knowing it appended
    every acks=all request a client had in flight, answered them all NOT_LEADER_OR_FOLLOWER once it
    learned, and librdkafka, taking those records as not written, wrote them again under a new
    epoch. As Kafka's broker reads no request of a connection while one is unanswered, the second
    request waits behind the first, is never appended by the old leader, and is refused once it is
    read."""
    name = unique_topic("pipelined")
    partition, old, survivors = partition_led_away_from_the_controller(cluster, name)
    cluster.isolate(old.node_id)
    with socket.create_connection(("127.0.0.1", old.port), timeout=TIMEOUT_S) as s:
        s.sendall(produce_v8_frame(name, partition, b"first", 1, 30_000) + produce_v8_frame(name, partition, b"second", 2, 30_000))
        wait_until("the first request appended by the cut-off leader", lambda: b"first" in replica_bytes(cluster, old.node_id, name, partition) or None, TIMEOUT_S)
        # Its followers cannot fetch it and it cannot hear of a new leader: the first request
        # waits out its 30 s, and the second is not read meanwhile.
        time.sleep(1.0)
        assert b"second" not in replica_bytes(cluster, old.node_id, name, partition)
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(1)
        s.setblocking(True)
        wait_until("a new leader", lambda: partition_state(survivors, name, partition)[0] not in (old.node_id, -1) or None, TIMEOUT_S)
        cluster.heal()
        answers = {}
        for _ in range(2):
            response = read_frame(s)
            correlation_id = struct.unpack_from(">i", response)[0]
            decoded, _ = entity_reader(ProduceResponseV8)(memoryview(response), 4)
            answers[correlation_id] = ErrorCode(decoded.responses[0].partition_responses[0].error_code)
    assert answers[2] == ErrorCode.not_leader_or_follower, answers
    wait_until("the old leader back in the ISR", lambda: old.node_id in isr(cluster, name, partition) or None, TIMEOUT_S)
    for node_id in cluster.nodes:
        assert b"second" not in replica_bytes(cluster, node_id, name, partition)


def consumer_fetch(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """A consumer's Fetch of one partition at ``offset``, sent to ``bootstrap`` alone: its error code."""
    return int(fetch(bootstrap, topic, "", partition, offset).error_code)


def test_a_leader_cut_off_from_the_controller_sends_no_consumer_to_its_offset_reset(cluster: KafkaCluster) -> None:
    """The zombie leader of soak seed 1484106251: a consumer that learnt its position from the new
    leader, and its metadata from the old one, fetches past the old leader's log end. Answered
    OFFSET_OUT_OF_RANGE, librdkafka resets to auto.offset.reset (earliest: the group reads its
    input again); once the old leader's session with the controller may have expired, it answers
    NOT_LEADER_OR_FOLLOWER, and the consumer looks for the leader again."""
    name = unique_topic("zombie-fetch")
    partition, old, survivors = partition_led_away_from_the_controller(cluster, name)
    for i in range(10):
        assert raw_produce(old.bootstrap, name, partition, b"before-%d" % i)[0] == ErrorCode.none
    end = watermarks(old.bootstrap, name, partition)[1]
    # In session, past the log end is OFFSET_OUT_OF_RANGE, as Kafka answers.
    assert consumer_fetch(old.bootstrap, name, partition, end + 5) == ErrorCode.offset_out_of_range
    cluster.partition([old.node_id])
    try:
        new_leader = wait_until(
            "a new leader elected by the others",
            lambda: (b := partition_state(survivors, name, partition)[0]) not in (old.node_id, -1) and b or None,
            TIMEOUT_S,
        )
        for i in range(10):
            assert raw_produce(cluster.nodes[new_leader].bootstrap, name, partition, b"after-%d" % i)[0] == ErrorCode.none
        assert consumer_fetch(cluster.nodes[new_leader].bootstrap, name, partition, end + 5) == ErrorCode.none
        assert consumer_fetch(old.bootstrap, name, partition, end + 5) == ErrorCode.not_leader_or_follower
        # Within its log it still serves what it has: records below its high watermark are committed.
        assert consumer_fetch(old.bootstrap, name, partition, 0) == ErrorCode.none
    finally:
        cluster.heal()


def offset_commit_v8(bootstrap: str, group: str, topic: str, offset: int) -> int:
    """A simple (generation -1) OffsetCommit of partition 0 sent to ``bootstrap`` alone: its error code."""
    body = commit_v8.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(commit_v8.OffsetCommitRequestTopic(name=topic, partitions=(commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""),)),),
    )
    [t] = request(bootstrap, body).topics
    return int(t.partitions[0].error_code)


def created_with_three_replicas(bootstrap: str, topic: str) -> bool:
    try:
        create(bootstrap, topic)
    except KafkaException as e:
        if e.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR:
            return False
        raise
    return True


def test_a_stable_offset_fetch_waits_for_the_commit_still_replicating(cluster: KafkaCluster) -> None:
    """Chaos soak seed 1354848650: a partition's new owner asked for the committed offset while its
    previous owner's last commit was appended but not yet replicated, was told the one before,
    re-read records and committed below it. A stable fetch (require_stable, librdkafka's default)
    waits for the coordinator's pending writes, as Kafka 4's does; a plain one answers at once."""
    topic, group = unique_topic("pending"), unique_topic("pending-group")
    # A node cut off by the test before may still be fenced (and, not knowing it, tell clients all
    # three are alive): three replicas need all three, so the creation is tried until it can be.
    wait_until("a topic with three replicas", lambda: created_with_three_replicas(cluster.bootstrap, topic) or None, TIMEOUT_S)
    commit_offset(cluster.bootstrap, group, topic, 5)  # the first commit creates __consumer_offsets
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    wait_for_isr(cluster, GROUP_METADATA_TOPIC, {1, 2, 3}, offsets_partition)
    # The leader every node names: one node's metadata may still name a leader the previous test moved.
    coordinator = wait_until(
        "every node naming the same coordinator",
        lambda: len(leaders := {partition_state(n.bootstrap, GROUP_METADATA_TOPIC, offsets_partition)[0] for n in cluster.brokers}) == 1 and leaders.pop(),
        TIMEOUT_S,
    )
    node = cluster.nodes[coordinator]
    # The followers can no longer fetch the offsets partition; the controller links stay up.
    for (a, b), link in cluster.broker_links.items():
        if coordinator in (a, b):
            link.cut()
    results: dict[str, Any] = {}
    committing = threading.Thread(target=lambda: results.update(commit=offset_commit_v8(node.bootstrap, group, topic, 9)))
    committing.start()
    try:
        time.sleep(1.0)  # the commit is appended and waits for the followers
        assert committing.is_alive(), f"the commit was answered at once: {results}"
        assert offset_fetch(node.bootstrap, group, topic, require_stable=False) == (0, 5, 0)
        fetching = threading.Thread(target=lambda: results.update(fetch=offset_fetch(node.bootstrap, group, topic, require_stable=True)))
        fetching.start()
        time.sleep(1.0)
        assert "fetch" not in results, "a stable fetch answered while the commit before it was still replicating"
    finally:
        cluster.heal()
    committing.join(TIMEOUT_S)
    fetching.join(TIMEOUT_S)
    # The followers may take longer than offsets.commit.timeout.ms to fetch again after healing
    # (a fetch lost in a cut link is given up after replica.socket.timeout.ms): then the commit
    # failed (COORDINATOR_NOT_AVAILABLE, Kafka's answer to a commit that timed out) and the
    # stable fetch, which waited for it, says so by the offset before it.
    if results["commit"] == 0:
        assert results["fetch"] == (0, 9, 0)
    else:
        assert results["commit"] == ErrorCode.coordinator_not_available
        assert results["fetch"] == (0, 5, 0)
