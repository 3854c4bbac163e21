"""A consumer group keeps consuming through the death of its coordinator: three combined nodes,
``__consumer_offsets`` with three replicas, a consumer (confluent-kafka or kafka-python) that
commits by hand after every batch, and SIGKILL of the leader of the group's offsets partition
midway. No record is lost, the commits the coordinator acknowledged never go backwards, and the
new coordinator has every one of them."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8 import request as fetch_v8

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import FAST_FAILOVER, create, partition_state, produce
from tests.integration.helpers import unique_topic
from tests.integration.wire import request

TIMEOUT_S = 120.0
PARTITIONS = 3
RECORDS = 3000
BATCH = 50
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("coordinator-failover"), combined=3, overrides=FAST_FAILOVER)
    try:
        yield c.start()
    finally:
        c.close()


class ConfluentGroupMember:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 30000}
        )
        self._consumer.subscribe([topic])
        self._topic = topic

    def poll(self) -> list[tuple[int, int]]:
        return [(m.partition(), m.offset()) for m in self._consumer.consume(BATCH, 0.5) if m.error() is None]

    def commit(self, positions: dict[int, int]) -> None:
        self._consumer.commit(offsets=[TopicPartition(self._topic, p, o) for p, o in positions.items()], asynchronous=False)

    def close(self) -> None:
        self._consumer.close()


class KafkaPythonGroupMember:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap.split(","),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=30000,
            request_timeout_ms=40000,
        )
        self._topic = topic

    def poll(self) -> list[tuple[int, int]]:
        batches = self._consumer.poll(timeout_ms=500, max_records=BATCH)
        return [(tp.partition, r.offset) for tp, records in batches.items() for r in records]

    def commit(self, positions: dict[int, int]) -> None:
        self._consumer.commit(offsets={KafkaTopicPartition(self._topic, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()})

    def close(self) -> None:
        self._consumer.close()


MEMBERS: dict[str, Callable[[str, str, str], Any]] = {"confluent-kafka": ConfluentGroupMember, "kafka-python": KafkaPythonGroupMember}


class ConsumingLoop:
    """A group member in a thread: poll a batch, commit the next offsets by hand, slowly enough
    for the coordinator to die midway. What it saw, and every commit acknowledged, in order."""

    def __init__(self, member: Any) -> None:
        self.member = member
        self.seen: set[tuple[int, int]] = set()
        self.acknowledged: list[dict[int, int]] = []
        self.acknowledged_at: list[float] = []  # time.monotonic() of each
        self.failed_commits = 0
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consuming-loop")
        self.lock = threading.Lock()

    def __enter__(self) -> ConsumingLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self.member.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.member.poll()
            except Exception:  # noqa: BLE001 - a client may raise while its coordinator moves
                time.sleep(0.2)
                continue
            with self.lock:
                self.seen.update(batch)
            # The position after the batch, as the client has it: after a rejoin the group resumes
            # from its committed offsets, so a commit lost by the coordinator would show here as a
            # position going backwards.
            for partition, offset in batch:
                self._positions[partition] = offset + 1
            positions = dict(self._positions)
            if not positions or positions == self.last_acknowledged():
                continue
            try:
                self.member.commit(positions)
            except Exception:  # noqa: BLE001 - NOT_COORDINATOR and its kin: committed again on the next round
                self.failed_commits += 1
                continue
            with self.lock:
                self.acknowledged.append(positions)
                self.acknowledged_at.append(time.monotonic())
            time.sleep(0.05)

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def seen_all(self, expected: set[tuple[int, int]]) -> bool:
        with self.lock:
            return self.seen >= expected

    def last_acknowledged(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acknowledged[-1]) if self.acknowledged else {}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets as its coordinator answers OffsetFetch (None while it cannot)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except Exception:  # noqa: BLE001 - the new coordinator is still being elected or loading
        return None
    finally:
        reader.close()
    if any(tp.error is not None for tp in found):
        return None
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


@pytest.mark.parametrize("client", sorted(MEMBERS))
def test_a_group_consumes_through_the_death_of_its_coordinator(cluster: KafkaCluster, client: str) -> None:
    topic, group = unique_topic("failover"), unique_topic("group")
    create(cluster.bootstrap, topic, partitions=PARTITIONS)
    acked = produce(cluster.bootstrap, topic, [b"r%d" % i for i in range(RECORDS)])
    assert len(acked) == RECORDS
    expected = {(p, o) for p, o, _ in acked}
    ends = {p: max(o for q, o, _ in acked if q == p) + 1 for p in {p for p, _, _ in acked}}

    killed = None
    try:
        with ConsumingLoop(MEMBERS[client](cluster.bootstrap, group, topic)) as loop:
            wait_until("a third of the records consumed and committed", lambda: loop.count() >= RECORDS // 3 and loop.last_acknowledged() or None, TIMEOUT_S)
            coordinator, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
            killed = cluster.nodes[coordinator]
            killed.kill()
            killed_at = time.monotonic()
            killed.warm_up()  # its restart's interpreter imports the broker while the failover is waited for
            before_kill = loop.last_acknowledged()
            survivors = ",".join(n.bootstrap for n in cluster.brokers if n is not killed)
            # The new coordinator has every commit acknowledged before the kill: none goes backwards.
            after = wait_until("the new coordinator's committed offsets", lambda: committed(survivors, group, topic), TIMEOUT_S)
            assert all(after.get(p, -1) >= o for p, o in before_kill.items()), (before_kill, after)
            wait_until("every record consumed", lambda: loop.seen_all(expected) or None, 2 * TIMEOUT_S)
            wait_until("the last positions committed", lambda: loop.last_acknowledged() == ends or None, TIMEOUT_S)
        assert loop.seen >= expected, sorted(expected - loop.seen)[:10]
        resumed = next(t for t in loop.acknowledged_at if t > killed_at)
        print(f"\n{client}: first commit acknowledged {resumed - killed_at:.2f} s after SIGKILL of coordinator {coordinator}; {loop.failed_commits} commits failed meanwhile")
        for p in ends:
            history = [positions[p] for positions in loop.acknowledged if p in positions]
            assert history == sorted(history), f"commits of partition {p} went backwards: {history}"
        assert wait_until("the final commits from the new coordinator", lambda: committed(survivors, group, topic), TIMEOUT_S) == ends
    finally:
        if killed is not None:
            killed.launch()
            killed.await_started()
            cluster.await_all_brokers_live(TIMEOUT_S)


def offset_fetch(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int, int]:
    """OffsetFetch v8 of partition 0 sent to ``bootstrap`` alone: (group error, offset, partition error)."""
    response = request(
        bootstrap,
        fetch_v8.OffsetFetchRequest(
            groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
            require_stable=require_stable,
        ),
    )
    [g] = response.groups
    parts = [p for t in g.topics for p in t.partitions]
    if not parts:
        return int(g.error_code), -1, 0
    return int(g.error_code), int(parts[0].committed_offset), int(parts[0].error_code)


def commit_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for attempt in range(60):
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                return
            except KafkaException:
                if attempt == 59:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def test_a_coordinator_cut_off_from_the_controller_never_answers_a_stable_fetch_with_stale_offsets(cluster: KafkaCluster) -> None:
    """The zombie coordinator of chaos soak seeds 57861548, 483707690 and 1867237364: the leader of
    a group's offsets partition, cut off from the other nodes but not from the clients, is fenced
    and replaced; the new coordinator takes a commit; a read_committed consumer still talking to
    the old one must not be told the offset from before it. The old one still answers a plain
    OffsetFetch from memory (as Kafka's does), but holds a stable one (require_stable, what
    read_committed consumers send) while its broker session may have expired, and then answers
    NOT_COORDINATOR, so that the consumer looks the coordinator up again."""
    topic, group = unique_topic("zombie"), unique_topic("zombie-group")
    create(cluster.bootstrap, topic)
    commit_offset(cluster.bootstrap, group, topic, 5)
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    coordinator, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, offsets_partition)
    zombie = cluster.nodes[coordinator]
    survivors = ",".join(n.bootstrap for n in cluster.brokers if n is not zombie)
    assert offset_fetch(zombie.bootstrap, group, topic, require_stable=True) == (0, 5, 0)
    cluster.partition([coordinator])
    try:
        successor = wait_until(
            "a new coordinator elected by the others",
            lambda: (leader := partition_state(survivors, GROUP_METADATA_TOPIC, offsets_partition)[0]) not in (coordinator, -1) and leader or None,
            TIMEOUT_S,
        )
        commit_offset(survivors, group, topic, 9)
        assert offset_fetch(cluster.nodes[successor].bootstrap, group, topic, require_stable=True) == (0, 9, 0)
        # Still its own idea of the group: from memory, the offset the new coordinator moved past.
        assert offset_fetch(zombie.bootstrap, group, topic, require_stable=False) == (0, 5, 0)
        assert offset_fetch(zombie.bootstrap, group, topic, require_stable=True) == (ErrorCode.not_coordinator, -1, 0)
    finally:
        cluster.heal()
        cluster.await_all_brokers_live(TIMEOUT_S)
    # Once healed it learns that it was replaced (or leads again, with the new coordinator's offsets).
    wait_until(
        "the old coordinator to catch up",
        lambda: (r := offset_fetch(zombie.bootstrap, group, topic, require_stable=True))[0] == ErrorCode.not_coordinator or r == (0, 9, 0) or None,
        TIMEOUT_S,
    )
    current, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, offsets_partition)
    assert offset_fetch(cluster.nodes[current].bootstrap, group, topic, require_stable=True) == (0, 9, 0)


def listed_groups(bootstrap: str) -> dict[str, str] | None:
    """group id -> state, as ListGroups answers across the cluster (None while it cannot)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in: it is the handle
    try:
        listing = admin.list_consumer_groups(request_timeout=10).result(15)
    except Exception:  # noqa: BLE001 - the new coordinator is still being elected or loading
        return None
    if listing.errors:
        return None
    return {g.group_id: g.state.name for g in listing.valid}


def test_a_simple_consumers_group_outlives_its_coordinator(cluster: KafkaCluster) -> None:
    """Offsets committed without membership make an empty group; the new coordinator, which only
    replays them from __consumer_offsets, lists it as the old one did (found by the console)."""
    topic, group = unique_topic("simple"), unique_topic("simple-group")
    create(cluster.bootstrap, topic)
    commit_offset(cluster.bootstrap, group, topic, 7)
    assert wait_until("the group listed", lambda: ((g := listed_groups(cluster.bootstrap)) and g.get(group)) or None, TIMEOUT_S) == "EMPTY"
    coordinator, _ = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
    killed = cluster.nodes[coordinator]
    killed.kill()
    killed.warm_up()
    try:
        survivors = ",".join(n.bootstrap for n in cluster.brokers if n is not killed)
        assert wait_until("the new coordinator's committed offset", lambda: committed(survivors, group, topic), TIMEOUT_S) == {0: 7}
        assert wait_until("the group listed by the new coordinator", lambda: ((g := listed_groups(survivors)) and g.get(group)) or None, TIMEOUT_S) == "EMPTY"
    finally:
        killed.launch()
        killed.await_started()
        cluster.await_all_brokers_live(TIMEOUT_S)
