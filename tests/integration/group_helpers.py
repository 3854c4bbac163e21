"""Consumer-group scenarios shared by the per-client group test modules.

Every consumer runs in its own thread (aiokafka: its own event loop in its own thread), as an
application would run it. The thread records what the client reports: the records it got,
the partitions it holds, and every assign / revoke / lost callback. The test thread reads
that state and asks the consumer to commit through `Member.call`, which runs the function
in the consumer's own thread (kafka-python and aiokafka consumers are not thread-safe).

The scenarios are written against Apache Kafka 4.x's group coordinator (classic protocol):
every wait is bounded and every failure says what the group looked like.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, produce_acked, unique_topic

# Kafka's default group.initial.rebalance.delay.ms is 3 s; tests that are not about it skip it.
# KIP-848 members learn of a new target assignment on their next heartbeat: 1 s instead of 5 s
# (Kafka needs the minimum lowered too; kbroker ignores keys it does not know).
GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
}
# Small enough to keep the suite quick, at or above Kafka's group.min.session.timeout.ms (6000).
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 500
SETTLE_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0
QUIET_S = 1.0  # how long a settled group must stay unchanged / how long we watch for duplicates

TP = tuple[str, int]
Rec = tuple[str, int, int, bytes]  # topic, partition, offset, value


# kafka-python 3.0.12 loses a rejoin that straddles two polls (see KafkaPythonMember).
KAFKA_PYTHON_POLL_MS = 3000


def module_group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """For each module's module-scoped `group_broker` fixture: group.initial.rebalance.delay.ms=0."""
    b = BrokerProcess(tmp_path_factory.mktemp("group-broker") / "data", GROUP_BROKER_OVERRIDES).start()
    yield b
    retire(b)


def unique_group(prefix: str = "g") -> str:
    return unique_topic(prefix)


# ---------------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------------


class Member(threading.Thread):
    """One group consumer in its own thread. Subclasses implement _open, _poll_once, _commit, _close."""

    client = "?"

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], **conf: Any) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.member_name = name
        self.bootstrap = bootstrap
        self.group = group
        self.topics = topics
        self.conf = conf
        self.lock = threading.Lock()
        self.records: list[Rec] = []
        self.assigned: set[TP] = set()
        self.assign_events: list[frozenset[TP]] = []
        self.revoke_events: list[frozenset[TP]] = []
        self.lost_events: list[frozenset[TP]] = []
        self.settled = False  # an assign callback ran and no revoke/lost since
        self.errors: list[str] = []
        self.fatal: list[str] = []  # errors the client cannot recover from: waiting on is pointless
        self.opened = threading.Event()
        self.closed = threading.Event()
        self._stop_requested = threading.Event()
        self._commands: queue.Queue[tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]] = queue.Queue()

    # -- called from the consumer's thread by subclasses --
    def on_assign(self, tps: Iterable[TP]) -> None:
        tps = frozenset(tps)
        with self.lock:
            self.assign_events.append(tps)
            self.assigned |= tps
            self.settled = True

    def on_revoke(self, tps: Iterable[TP]) -> None:
        tps = frozenset(tps)
        with self.lock:
            self.revoke_events.append(tps)
            self.assigned -= tps
            self.settled = False

    def on_lost(self, tps: Iterable[TP]) -> None:
        tps = frozenset(tps)
        with self.lock:
            self.lost_events.append(tps)
            self.assigned -= tps
            self.settled = False

    def add_records(self, recs: Iterable[Rec]) -> None:
        with self.lock:
            self.records.extend(recs)

    # -- the thread --
    def run(self) -> None:
        try:
            self._open()
            self.opened.set()
            while not self._stop_requested.is_set():
                self._run_commands()
                self.add_records(self._poll_once())
            self._run_commands()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            self.opened.set()
            try:
                self._close()
            except BaseException as e:  # noqa: BLE001
                self.errors.append(f"close: {type(e).__name__}: {e}")
            self._fail_pending()
            self.closed.set()

    def _run_commands(self) -> None:
        while True:
            try:
                fn, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                fut.set_result(fn(self))
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

    def _fail_pending(self) -> None:
        while True:
            try:
                _, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            fut.set_exception(RuntimeError(f"{self.member_name} closed"))

    def call(self, fn: Callable[[Member], Any], timeout_s: float = 20.0) -> Any:
        """Run fn(self) in the consumer's thread, between two polls."""
        assert self.is_alive(), f"{self.member_name} is not running: {self.errors}"
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, fut))
        return fut.result(timeout_s)

    def commit(self, offsets: Mapping[TP, int], timeout_s: float = 20.0) -> None:
        """Synchronous commit of `offsets` (next offset to read) through the group."""
        self.call(lambda m: m._commit(dict(offsets)), timeout_s)

    def stop(self, timeout_s: float = 20.0) -> None:
        """Close the consumer (a clean leave) and wait for its thread."""
        self._stop_requested.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"{self.client} consumer {self.member_name} did not close within {timeout_s}s"

    # -- snapshots for the test thread --
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "name": self.member_name,
                "assigned": sorted(self.assigned),
                "settled": self.settled,
                "assigns": len(self.assign_events),
                "revokes": len(self.revoke_events),
                "lost": len(self.lost_events),
                "records": len(self.records),
                "errors": self.errors[-3:],
                "fatal": self.fatal[-1:],
            }

    def holding(self) -> set[TP]:
        with self.lock:
            return set(self.assigned)

    def got(self) -> list[Rec]:
        with self.lock:
            return list(self.records)

    # -- per client --
    def _open(self) -> None:
        raise NotImplementedError

    def _poll_once(self) -> list[Rec]:
        raise NotImplementedError

    def _commit(self, offsets: dict[TP, int]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    client = "confluent-kafka"

    def _open(self) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": f"{self.member_name}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "error_cb": self._error_cb,
        }
        if self.conf.get("group.protocol") == "consumer":
            # KIP-848: the broker owns session and heartbeat settings and the assignor.
            conf.pop("session.timeout.ms")
            conf.pop("heartbeat.interval.ms")
        conf.update(self.conf)
        self.consumer = Consumer(conf)

        def keys(parts: list[TopicPartition]) -> list[TP]:
            return [(p.topic, p.partition) for p in parts]

        self.consumer.subscribe(
            self.topics,
            on_assign=lambda c, parts: self.on_assign(keys(parts)),
            on_revoke=lambda c, parts: self.on_revoke(keys(parts)),
            on_lost=lambda c, parts: self.on_lost(keys(parts)),
        )

    def _error_cb(self, err: Any) -> None:
        self.errors.append(f"error_cb: {err}")
        if err.fatal():
            self.fatal.append(str(err))

    def _poll_once(self) -> list[Rec]:
        msgs = self.consumer.consume(num_messages=500, timeout=0.1)
        out: list[Rec] = []
        for m in msgs:
            if m.error() is not None:
                self.errors.append(f"message error: {m.error()}")
                continue
            out.append((m.topic(), m.partition(), m.offset(), m.value()))
        return out

    def _commit(self, offsets: dict[TP, int]) -> None:
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)

    def _close(self) -> None:
        if hasattr(self, "consumer"):
            self.consumer.close()


class KafkaPythonMember(Member):
    client = "kafka-python"

    def _open(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.on_revoke((tp.topic, tp.partition) for tp in revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.on_assign((tp.topic, tp.partition) for tp in assigned)

            def on_partitions_lost(self, lost: Any) -> None:
                member.on_lost((tp.topic, tp.partition) for tp in lost)

        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group,
            "client_id": self.member_name,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "request_timeout_ms": 30_000,
        }
        conf.update(self.conf)
        self.consumer = KafkaConsumer(**conf)
        # Have the topics' metadata before the first JoinGroup. Otherwise a leader that joins
        # first assigns nothing ("No partition metadata for topic"), the metadata that arrives
        # next makes it rejoin, and kafka-python 3.0.12 can lose that rejoin when a short poll
        # times out mid-join (need_rejoin() turns false once the leader has assigned, so the
        # in-flight join is never completed and heartbeats stay disabled: the coordinator then
        # evicts the member after session.timeout.ms). The same happens against Kafka. Polls
        # are long enough to span a whole rebalance, so a rejoin never straddles two of them.
        for topic in self.topics:
            self.consumer.partitions_for_topic(topic)
        self.consumer.subscribe(self.topics, listener=Listener())

    def _poll_once(self) -> list[Rec]:
        batches = self.consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
        return [(tp.topic, tp.partition, r.offset, r.value) for tp, recs in batches.items() for r in recs]

    def _commit(self, offsets: dict[TP, int]) -> None:
        from kafka import OffsetAndMetadata
        from kafka import TopicPartition as KTP

        self.consumer.commit({KTP(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})

    def _close(self) -> None:
        if hasattr(self, "consumer"):
            self.consumer.close()


class AiokafkaMember(Member):
    """aiokafka in its own event loop in its own thread."""

    client = "aiokafka"

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.on_revoke((tp.topic, tp.partition) for tp in revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.on_assign((tp.topic, tp.partition) for tp in assigned)

        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group,
            "client_id": self.member_name,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        }
        conf.update(self.conf)
        consumer = AIOKafkaConsumer(**conf)
        self.consumer = consumer
        try:
            await consumer.start()
            consumer.subscribe(self.topics, listener=Listener())
            self.opened.set()
            while not self._stop_requested.is_set():
                await self._run_async_commands()
                batches = await consumer.getmany(timeout_ms=100)
                self.add_records((tp.topic, tp.partition, r.offset, r.value) for tp, recs in batches.items() for r in recs)
            await self._run_async_commands()
        except BaseException as e:  # noqa: BLE001
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            self.opened.set()
            try:
                await consumer.stop()
            except BaseException as e:  # noqa: BLE001
                self.errors.append(f"close: {type(e).__name__}: {e}")
            self._fail_pending()
            self.closed.set()

    async def _run_async_commands(self) -> None:
        while True:
            try:
                fn, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                result = fn(self)
                if asyncio.iscoroutine(result):
                    result = await result
                fut.set_result(result)
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

    def commit(self, offsets: Mapping[TP, int], timeout_s: float = 20.0) -> None:
        from aiokafka import TopicPartition as ATP

        self.call(lambda m: m.consumer.commit({ATP(t, p): o for (t, p), o in offsets.items()}), timeout_s)


MemberFactory = Callable[..., Member]


# ---------------------------------------------------------------------------------------------
# Waiting on groups
# ---------------------------------------------------------------------------------------------


_NO_GROUPS: dict[str, str] = {}  # bootstrap -> why it serves no groups (asked once per broker)


def check_group_apis(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Fail at once, and say why, when the broker has no group coordinator to offer."""
    from confluent_kafka import KafkaError, KafkaException

    if bootstrap not in _NO_GROUPS:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        probe = unique_group("probe")
        try:
            admin.describe_consumer_groups([probe], request_timeout=timeout_s)[probe].result(timeout_s + 5)
            return
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return  # a group that does not exist is a fine answer
            _NO_GROUPS[bootstrap] = str(e)
        except Exception as e:  # noqa: BLE001 - a timeout
            _NO_GROUPS[bootstrap] = f"{type(e).__name__} {e}"
    pytest.fail(f"the broker at {bootstrap} serves no consumer groups (FindCoordinator + DescribeGroups failed): {_NO_GROUPS[bootstrap]}", pytrace=False)


def start_members(factory: MemberFactory, bootstrap: str, group: str, topics: list[str], count: int, prefix: str = "m", **conf: Any) -> list[Member]:
    check_group_apis(bootstrap)
    members = [factory(f"{prefix}{i}", bootstrap, group, topics, **conf) for i in range(count)]
    for m in members:
        m.start()
    return members


def stop_all(members: Iterable[Member]) -> None:
    """Teardown: close every member still running (their threads stop in parallel)."""
    alive = [m for m in members if m.is_alive()]
    for m in alive:
        m._stop_requested.set()
    for m in alive:
        m.join(20)


def describe(members: Iterable[Member]) -> str:
    return "\n".join(f"  {m.snapshot()}" for m in members)


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, members: Iterable[Member] = ()) -> float:
    """Poll predicate every 50 ms; fail with the members' state after timeout_s. Returns the seconds waited."""
    members = list(members)
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        if predicate():
            return time.monotonic() - start
        dead = [m for m in members if not m.is_alive() and not m._stop_requested.is_set()]
        if dead:
            pytest.fail(f"{what}: consumer thread died:\n{describe(members)}")
        if any(m.fatal for m in members):
            pytest.fail(f"{what}: a consumer hit a fatal error:\n{describe(members)}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached within {timeout_s:.0f}s:\n{describe(members)}")
        time.sleep(0.05)


def assignment_is(members: list[Member], partitions: set[TP], sizes: list[int], require_settled: bool = True) -> bool:
    """Every member settled, holdings disjoint, covering `partitions`, with these sizes (in any order).

    require_settled=False for the cooperative protocol, whose last rebalance may assign nothing new.
    """
    snaps = [(m.settled, m.holding()) for m in members]
    if require_settled and not all(settled for settled, _ in snaps):
        return False
    held = [h for _, h in snaps]
    union: set[TP] = set().union(*held) if held else set()
    return sum(len(h) for h in held) == len(union) and union == partitions and sorted(len(h) for h in held) == sorted(sizes)


def wait_for_assignment(
    members: list[Member], partitions: set[TP], sizes: list[int], timeout_s: float = SETTLE_TIMEOUT_S, quiet_s: float = QUIET_S, require_settled: bool = True
) -> float:
    """Wait until the group settles on the expected shape and holds it for quiet_s."""
    what = f"group to settle with {len(members)} members holding {sorted(sizes)} of {len(partitions)} partitions"
    while True:
        waited = wait_until(lambda: assignment_is(members, partitions, sizes, require_settled), timeout_s, what, members)
        before = [(len(m.assign_events), len(m.revoke_events)) for m in members]
        time.sleep(quiet_s)
        if assignment_is(members, partitions, sizes, require_settled) and before == [(len(m.assign_events), len(m.revoke_events)) for m in members]:
            return waited
        timeout_s -= waited + quiet_s
        if timeout_s <= 0:
            pytest.fail(f"{what}: the assignment kept changing:\n{describe(members)}")


def all_partitions(topic: str, count: int) -> set[TP]:
    return {(topic, p) for p in range(count)}


# ---------------------------------------------------------------------------------------------
# Producing and checking records
# ---------------------------------------------------------------------------------------------

Producer = Callable[[str, str, dict[int, list[bytes]]], None]


def confluent_produce(bootstrap: str, topic: str, by_partition: dict[int, list[bytes]]) -> None:
    for p, values in by_partition.items():
        produce_acked(bootstrap, topic, values, partition=p)


def values_for(topic: str, partitions: int, per_partition: int, start: int = 0) -> dict[int, list[bytes]]:
    return {p: [f"{topic}|{p}|{i}".encode() for i in range(start, start + per_partition)] for p in range(partitions)}


def wait_for_records(members: list[Member], total: int, timeout_s: float = CONSUME_TIMEOUT_S) -> list[Rec]:
    wait_until(lambda: sum(len(m.got()) for m in members) >= total, timeout_s, f"{total} records to be consumed across the group", members)
    time.sleep(QUIET_S)  # anything delivered twice shows up now
    return [r for m in members for r in m.got()]


def assert_exactly_once(got: list[Rec], expected: Iterable[tuple[str, int, bytes]], what: str) -> None:
    got_counter = Counter((t, p, v) for t, p, _, v in got)
    want = Counter(expected)
    dupes = sorted(k for k, n in got_counter.items() if n > 1)
    missing = sorted(want - got_counter)
    extra = sorted(set(got_counter) - set(want))
    assert not dupes and not missing and not extra, (
        f"{what}: {len(got)} records consumed, {sum(want.values())} expected; "
        f"duplicates {dupes[:5]} ({len(dupes)}), missing {missing[:5]} ({len(missing)}), unexpected {extra[:5]} ({len(extra)})"
    )


def assert_each_from_own_partitions(members: list[Member]) -> None:
    for m in members:
        held = m.holding()
        foreign = sorted({(t, p) for t, p, _, _ in m.got()} - held)
        assert not foreign, f"{m.member_name} consumed from partitions it does not hold: {foreign} (holds {sorted(held)})"


def committed_offsets(bootstrap: str, group: str, timeout_s: float = 20) -> dict[TP, int]:
    """The group's committed offsets as the broker reports them (OffsetFetch through AdminClient)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)[group].result(timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


# ---------------------------------------------------------------------------------------------
# Scenarios (each client's module runs them with its own member factory and producer)
# ---------------------------------------------------------------------------------------------


def scenario_three_members_split_six_partitions(bootstrap: str, factory: MemberFactory, produce: Producer = confluent_produce) -> None:
    """Three consumers on a 6-partition topic get two partitions each; every record is read exactly once."""
    topic, group = unique_topic("grp6"), unique_group()
    create_topic(bootstrap, topic, 6)
    members = start_members(factory, bootstrap, group, [topic], 3)
    try:
        # Against Kafka (initial rebalance delay 0) three members settle in a second or two; a slow
        # KIP-394 member-id round trip is what made kafka-python take ~23 s against another broker.
        wait_for_assignment(members, all_partitions(topic, 6), [2, 2, 2], timeout_s=15)
        batch = values_for(topic, 6, 20)
        produce(bootstrap, topic, batch)
        got = wait_for_records(members, 120)
        assert_exactly_once(got, [(topic, p, v) for p, vs in batch.items() for v in vs], "three members on six partitions")
        assert_each_from_own_partitions(members)
    finally:
        stop_all(members)


def scenario_fourth_member_idle(bootstrap: str, factory: MemberFactory, empty_assignment_is_announced: bool = True) -> None:
    """Four consumers on a 3-partition topic: three hold one partition each, the fourth holds none.

    Under KIP-848 librdkafka calls no assign callback for a member whose assignment stays
    empty, so there the idle member is not required to have "settled"."""
    topic, group = unique_topic("grp3"), unique_group()
    create_topic(bootstrap, topic, 3)
    members = start_members(factory, bootstrap, group, [topic], 4)
    try:
        wait_for_assignment(members, all_partitions(topic, 3), [0, 1, 1, 1], require_settled=empty_assignment_is_announced)
    finally:
        stop_all(members)


def scenario_closed_member_partitions_move(bootstrap: str, factory: MemberFactory, produce: Producer = confluent_produce) -> None:
    """A member that closes (LeaveGroup) hands its partitions to the others in one rebalance, well before the session timeout."""
    topic, group = unique_topic("grpleave"), unique_group()
    create_topic(bootstrap, topic, 6)
    members = start_members(factory, bootstrap, group, [topic], 3)
    try:
        wait_for_assignment(members, all_partitions(topic, 6), [2, 2, 2])
        leaving, staying = members[2], members[:2]
        before = [(len(m.assign_events), len(m.revoke_events)) for m in staying]
        t0 = time.monotonic()
        leaving.stop()
        limit = SESSION_TIMEOUT_MS / 1000 - 2
        wait_until(
            lambda: assignment_is(staying, all_partitions(topic, 6), [3, 3]),
            limit,
            f"partitions of the closed member to move (a clean close sends LeaveGroup; the session timeout is {SESSION_TIMEOUT_MS} ms)",
            staying,
        )
        moved_after = time.monotonic() - t0
        time.sleep(QUIET_S)
        after = [(len(m.assign_events), len(m.revoke_events)) for m in staying]
        rebalances = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before)]
        assert all(n_assign == 1 for n_assign, _ in rebalances), (
            f"each remaining member should get exactly one new assignment after the close, got (assigns, revokes) {rebalances}:\n{describe(staying)}"
        )
        assert all(n_revoke <= 1 for _, n_revoke in rebalances), f"more than one revoke per member: {rebalances}"
        assert moved_after < limit
        batch = values_for(topic, 6, 10)
        produce(bootstrap, topic, batch)
        got = wait_for_records(staying, 60)
        assert_exactly_once(got, [(topic, p, v) for p, vs in batch.items() for v in vs], "the two remaining members")
    finally:
        stop_all(members)


def scenario_two_groups_each_get_everything(bootstrap: str, factory: MemberFactory, produce: Producer = confluent_produce) -> None:
    """Two groups on one topic are independent: each reads every record once."""
    topic = unique_topic("grp2g")
    create_topic(bootstrap, topic, 4)
    group_a, group_b = unique_group("ga"), unique_group("gb")
    a = start_members(factory, bootstrap, group_a, [topic], 2, prefix="a")
    b = start_members(factory, bootstrap, group_b, [topic], 1, prefix="b")
    try:
        wait_for_assignment(a, all_partitions(topic, 4), [2, 2])
        wait_for_assignment(b, all_partitions(topic, 4), [4], quiet_s=0)
        batch = values_for(topic, 4, 15)
        produce(bootstrap, topic, batch)
        expected = [(topic, p, v) for p, vs in batch.items() for v in vs]
        assert_exactly_once(wait_for_records(a, 60), expected, f"group {group_a}")
        assert_exactly_once(wait_for_records(b, 60), expected, f"group {group_b}")
    finally:
        stop_all(a + b)


def scenario_resume_after_broker_restart(broker: BrokerProcess, factory: MemberFactory, crash: bool = False, produce: Producer = confluent_produce) -> None:
    """Commit mid-partition, stop the consumers, restart the broker (SIGTERM, or SIGKILL when crash),
    restart the consumers: they resume exactly at the committed offsets."""
    bootstrap = broker.bootstrap
    topic, group = unique_topic("grpresume"), unique_group()
    partitions = 4
    create_topic(bootstrap, topic, partitions)
    first = values_for(topic, partitions, 10)
    produce(bootstrap, topic, first)
    commit_at = {(topic, p): 3 + p for p in range(partitions)}  # offsets 0..(2+p) are "processed"

    members = start_members(factory, bootstrap, group, [topic], 2, prefix="before")
    try:
        wait_for_assignment(members, all_partitions(topic, partitions), [2, 2])
        wait_for_records(members, 10 * partitions)
        for m in members:
            mine = {tp: off for tp, off in commit_at.items() if tp in m.holding()}
            m.commit(mine)
        seen = committed_offsets(bootstrap, group)
        assert seen == commit_at, f"committed offsets as OffsetFetch reports them before the restart: {seen}, expected {commit_at}"
    finally:
        stop_all(members)
    for m in members:
        assert not m.is_alive()

    if crash:
        broker.kill()
        broker.start()
    else:
        broker.restart()

    seen = committed_offsets(bootstrap, group)
    how = "SIGKILL" if crash else "SIGTERM"
    assert seen == commit_at, f"committed offsets after a {how} restart: {seen}, expected {commit_at}"
    second = values_for(topic, partitions, 5, start=10)
    produce(bootstrap, topic, second)

    # One consumer now: with two, the first to join would read partitions that move to the
    # second in the next rebalance, and (committing nothing) both would read them: legitimate
    # duplicates that would hide the ones this test looks for.
    resumed = start_members(factory, bootstrap, group, [topic], 1, prefix="after")
    try:
        wait_for_assignment(resumed, all_partitions(topic, partitions), [partitions], quiet_s=0)
        want = [(topic, p, v) for p in range(partitions) for v in first[p][3 + p:] + second[p]]
        got = wait_for_records(resumed, len(want))
        assert_exactly_once(got, want, f"consumers resumed after a {how} restart (committed {commit_at})")
        for t, p, offset, _ in got:
            assert offset >= commit_at[(t, p)], f"{t}-{p} offset {offset} read again: below the committed offset {commit_at[(t, p)]}"
    finally:
        stop_all(resumed)
