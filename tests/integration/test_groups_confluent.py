"""Consumer groups with confluent-kafka (librdkafka), against Apache Kafka 4.x's behaviour.

Classic protocol: assignment across members, leave on close, expiry after the session timeout
(SIGKILLed member), independent groups, committed offsets across broker restarts (SIGTERM and
SIGKILL), static membership (KIP-345), cooperative-sticky (KIP-429); and the consumer
protocol (KIP-848, group.protocol=consumer) through the same scenarios.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import REPO, BrokerProcess
from tests.integration.group_helpers import (
    QUIET_S,
    ConfluentMember,
    Member,
    all_partitions,
    assert_exactly_once,
    assignment_is,
    check_group_apis,
    confluent_produce,
    describe,
    module_group_broker,
    scenario_closed_member_partitions_move,
    scenario_fourth_member_idle,
    scenario_resume_after_broker_restart,
    scenario_three_members_split_six_partitions,
    scenario_two_groups_each_get_everything,
    start_members,
    stop_all,
    unique_group,
    values_for,
    wait_for_assignment,
    wait_for_records,
    wait_until,
)
from tests.integration.helpers import create_topic, unique_topic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that do not restart theirs."""
    yield from module_group_broker(tmp_path_factory)


def test_three_consumers_split_six_partitions_exactly_once(group_broker) -> None:
    scenario_three_members_split_six_partitions(group_broker.bootstrap, ConfluentMember)


def test_fourth_consumer_on_three_partitions_sits_idle(group_broker) -> None:
    scenario_fourth_member_idle(group_broker.bootstrap, ConfluentMember)


def test_closed_consumer_partitions_move_in_one_rebalance(group_broker) -> None:
    scenario_closed_member_partitions_move(group_broker.bootstrap, ConfluentMember)


def test_two_groups_each_receive_every_record(group_broker) -> None:
    scenario_two_groups_each_get_everything(group_broker.bootstrap, ConfluentMember)


@pytest.fixture
def restarted_group_broker(group_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker for a test that restarts it (its own broker would cost a start each);
    its groups and topics are unique, so the others' data on it changes nothing. Started again
    for the tests after it if the test left it down."""
    yield group_broker
    if not group_broker.running:
        group_broker.start()


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_resume_at_committed_offsets_after_broker_restart(restarted_group_broker: BrokerProcess, crash: bool) -> None:
    scenario_resume_after_broker_restart(restarted_group_broker, ConfluentMember, crash=crash)


# ---------------------------------------------------------------------------------------------
# A consumer in a child process, so that it can be SIGKILLed: no LeaveGroup, no more heartbeats.
# ---------------------------------------------------------------------------------------------

CHILD = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topic, session_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def emit(kind, parts):
    print(json.dumps({"event": kind, "partitions": [[p.topic, p.partition] for p in parts]}), flush=True)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "child",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": session_ms, "heartbeat.interval.ms": 1000})
c.subscribe([topic], on_assign=lambda c, p: emit("assign", p), on_revoke=lambda c, p: emit("revoke", p),
            on_lost=lambda c, p: emit("lost", p))
print(json.dumps({"event": "started"}), flush=True)
while True:
    c.poll(0.2)
"""


class ChildMember(Member):
    """A confluent consumer in a `python -c` child; its callbacks come back as JSON lines on stdout."""

    client = "confluent-kafka (child process)"

    def run(self) -> None:
        session_ms = str(self.conf.get("session.timeout.ms", 6000))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.bootstrap, self.group, self.topics[0], session_ms],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.opened.set()
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                self.errors.append(line.strip())
                continue
            parts = [tuple(p) for p in event.get("partitions", [])]
            {"assign": self.on_assign, "revoke": self.on_revoke, "lost": self.on_lost}.get(event["event"], lambda _: None)(parts)  # type: ignore[arg-type]
        self.proc.wait()
        if self.proc.stderr is not None:
            err = self.proc.stderr.read().strip()
            if err:
                self.errors.append(err[-500:])
        self.closed.set()

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.join(10)

    def stop(self, timeout_s: float = 20.0) -> None:
        self._stop_requested.set()
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.ident is not None:
            self.join(timeout_s)


def test_sigkilled_consumer_partitions_move_after_session_timeout(group_broker) -> None:
    """Kafka notices a dead member only when its session times out (no heartbeat for
    session.timeout.ms), then rebalances its partitions onto the others."""
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("grpkill"), unique_group()
    session_ms = 6000  # Kafka's group.min.session.timeout.ms
    create_topic(bootstrap, topic, 6)
    others = start_members(ConfluentMember, bootstrap, group, [topic], 2, **{"session.timeout.ms": session_ms})
    child = ChildMember("child", bootstrap, group, [topic], **{"session.timeout.ms": session_ms})
    everyone: list[Member] = [*others, child]
    try:
        child.start()
        wait_for_assignment(everyone, all_partitions(topic, 6), [2, 2, 2])
        before = [len(m.assign_events) for m in others]
        child.sigkill()
        waited = wait_until(
            lambda: assignment_is(others, all_partitions(topic, 6), [3, 3]),
            session_ms / 1000 + 15,
            f"the SIGKILLed member's partitions to move after the {session_ms} ms session timeout",
            others,
        )
        assert waited >= (session_ms - 2000) / 1000, (
            f"partitions moved {waited:.1f}s after the SIGKILL, before the {session_ms} ms session timeout could expire: "
            "Kafka does not treat a closed connection as a LeaveGroup"
        )
        time.sleep(QUIET_S)
        assert [len(m.assign_events) - b for m, b in zip(others, before)] == [1, 1], f"one rebalance expected:\n{describe(others)}"
        batch = values_for(topic, 6, 10)
        confluent_produce(bootstrap, topic, batch)
        got = wait_for_records(others, 60)
        assert_exactly_once(got, [(topic, p, v) for p, vs in batch.items() for v in vs], "the two surviving members")
    finally:
        child.stop()
        stop_all(others)


def test_static_member_restart_keeps_partitions_without_rebalance(group_broker) -> None:
    """KIP-345: a static member (group.instance.id) does not leave on close; when it comes back
    within the session timeout, the coordinator hands the new instance the old assignment and the
    other members see no rebalance."""
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("grpstatic"), unique_group()
    create_topic(bootstrap, topic, 6)

    def static(i: int) -> ConfluentMember:
        m = ConfluentMember(f"s{i}", bootstrap, group, [topic], **{"group.instance.id": f"{group}-instance-{i}"})
        m.start()
        return m

    check_group_apis(bootstrap)
    members = [static(0)]
    replacement: ConfluentMember | None = None
    try:
        wait_for_assignment(members, all_partitions(topic, 6), [6], quiet_s=0)  # s0 joins first: the leader
        members += [static(1), static(2)]
        wait_for_assignment(members, all_partitions(topic, 6), [2, 2, 2])
        leaving = members[2]
        held = leaving.holding()
        others = members[:2]
        before = [(len(m.assign_events), len(m.revoke_events)) for m in others]
        leaving.stop()  # a static member sends no LeaveGroup
        replacement = static(2)
        wait_until(lambda: replacement.settled, 10, "the restarted static member to get an assignment", [replacement, *others])
        time.sleep(2 * QUIET_S)
        assert replacement.holding() == held, f"the restarted static member got {sorted(replacement.holding())}, it held {sorted(held)}"
        after = [(len(m.assign_events), len(m.revoke_events)) for m in others]
        assert after == before, (
            f"the other members went through a rebalance (assigns, revokes) {before} -> {after}; "
            f"a static member rejoining a Stable group must not trigger one:\n{describe(others)}"
        )
        assert assignment_is([*others, replacement], all_partitions(topic, 6), [2, 2, 2])
        batch = values_for(topic, 6, 5)
        confluent_produce(bootstrap, topic, batch)
        got = wait_for_records([*others, replacement], 30)
        assert_exactly_once(got, [(topic, p, v) for p, vs in batch.items() for v in vs], "the static group")
    finally:
        stop_all(members + ([replacement] if replacement else []))


def test_cooperative_sticky_moves_only_what_it_must(group_broker) -> None:
    """KIP-429: with cooperative-sticky, a second member joining takes three partitions from the
    first, which revokes only those three and keeps consuming the others."""
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("grpcoop"), unique_group()
    create_topic(bootstrap, topic, 6)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    first = start_members(ConfluentMember, bootstrap, group, [topic], 1, prefix="first", **conf)
    second: list[Member] = []
    try:
        wait_for_assignment(first, all_partitions(topic, 6), [6], quiet_s=0)
        second = start_members(ConfluentMember, bootstrap, group, [topic], 1, prefix="second", **conf)
        both = first + second
        wait_for_assignment(both, all_partitions(topic, 6), [3, 3], require_settled=False)
        revoked = [r for r in first[0].revoke_events if r]  # librdkafka may call on_revoke with nothing to revoke
        assert len(revoked) == 1 and len(revoked[0]) == 3, f"the first member should revoke exactly the 3 partitions that move, once: {revoked}"
        assert first[0].holding() | revoked[0] == all_partitions(topic, 6)
        assert not first[0].lost_events
        batch = values_for(topic, 6, 10)
        confluent_produce(bootstrap, topic, batch)
        got = wait_for_records(both, 60)
        assert_exactly_once(got, [(topic, p, v) for p, vs in batch.items() for v in vs], "cooperative-sticky group")
    finally:
        stop_all(first + second)


class Kip848Member(ConfluentMember):
    """A librdkafka consumer on the consumer group protocol (KIP-848): the broker assigns."""

    client = "confluent-kafka (group.protocol=consumer)"

    def __init__(self, *args: Any, **conf: Any) -> None:
        super().__init__(*args, **{"group.protocol": "consumer", **conf})


def test_kip848_three_members_split_six_partitions(group_broker) -> None:
    scenario_three_members_split_six_partitions(group_broker.bootstrap, Kip848Member)


def test_kip848_fourth_member_sits_idle(group_broker) -> None:
    scenario_fourth_member_idle(group_broker.bootstrap, Kip848Member, empty_assignment_is_announced=False)


def test_kip848_closed_member_partitions_move(group_broker) -> None:
    scenario_closed_member_partitions_move(group_broker.bootstrap, Kip848Member)


def test_kip848_commits_survive_a_broker_crash(restarted_group_broker: BrokerProcess) -> None:
    scenario_resume_after_broker_restart(restarted_group_broker, Kip848Member, crash=True)
