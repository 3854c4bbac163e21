"""`kbroker groups`: kafka-consumer-groups.sh's list / describe / reset-offsets / delete.

The first tests call the formatting and planning code directly (no broker); the rest run the
CLI as a child process against a broker and check what Kafka's tool would show.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupState, Node, TopicPartition
from confluent_kafka.admin import (
    ConsumerGroupDescription,
    MemberAssignment,
    MemberDescription,
)

from broker import client_commands as cc
from broker.cli import build_parser
from tests.integration.conftest import REPO, BrokerProcess
from tests.integration.group_helpers import (
    ConfluentMember,
    all_partitions,
    committed_offsets,
    confluent_produce,
    module_group_broker,
    start_members,
    stop_all,
    unique_group,
    wait_for_assignment,
    wait_for_records,
)
from tests.integration.helpers import create_topic, unique_topic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that do not restart theirs."""
    yield from module_group_broker(tmp_path_factory)


def kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def table(stdout: str) -> list[dict[str, str]]:
    """Rows of the tables in the output (blank lines and repeated headers skipped)."""
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in stdout.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
            continue
        assert header is not None, f"a row before any header: {line!r}"
        assert len(cells) == len(header), f"row {cells} does not match header {header}"
        rows.append(dict(zip(header, cells)))
    return rows


# ---------------------------------------------------------------------------------------------
# Unit level: parsing, formatting, reset arithmetic
# ---------------------------------------------------------------------------------------------


def test_parser_and_parsers() -> None:
    a = build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t:0,1", "--shift-by", "-2", "--execute"])
    assert (a.action, a.group, a.topic, a.shift_by, a.execute, a.dry_run) == ("reset-offsets", ["g"], ["t:0,1"], -2, True, False)
    a = build_parser().parse_args(["groups", "list", "--state"])
    assert a.state == ""
    a = build_parser().parse_args(["groups", "list", "--state", "Stable,Empty"])
    assert cc.parse_group_states(a.state) == {ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY}
    assert cc.parse_group_states("preparingrebalance") == {ConsumerGroupState.PREPARING_REBALANCING}
    with pytest.raises(SystemExit):
        cc.parse_group_states("Sleepy")
    assert cc.parse_topic_partitions("orders") == ("orders", None)
    assert cc.parse_topic_partitions("orders:2,0,2") == ("orders", [0, 2])
    with pytest.raises(SystemExit):
        cc.parse_topic_partitions("orders:x")
    assert cc.parse_datetime_ms("1970-01-01T00:00:01.500Z") == 1500
    assert cc.parse_datetime_ms("1970-01-01T01:00:00.000+01:00") == 0
    assert cc.group_state_name(ConsumerGroupState.COMPLETING_REBALANCING) == "CompletingRebalance"
    with pytest.raises(SystemExit):  # two modes
        build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--dry-run", "--execute"])


def test_describe_rows_like_kafka() -> None:
    m1 = MemberDescription("c1-0f3a", "c1", "/127.0.0.1", MemberAssignment([TopicPartition("orders", 0), TopicPartition("orders", 1)]))
    m2 = MemberDescription("c2-99aa", "c2", "/127.0.0.1", MemberAssignment([]))
    desc = ConsumerGroupDescription("g", False, [m1, m2], "range", ConsumerGroupState.STABLE, Node(1, "127.0.0.1", 9092))
    rows = cc.offsets_rows("g", desc, {("orders", 0): 3, ("orders", 2): 7}, {("orders", 0): 10, ("orders", 1): 5, ("orders", 2): 7})
    text = cc.format_table(cc.OFFSETS_HEADER, rows, cc.OFFSETS_FIXED)
    assert text.splitlines()[0].split() == cc.OFFSETS_HEADER
    assert text.splitlines()[0].startswith("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG ")
    assert table(text) == [
        dict(zip(cc.OFFSETS_HEADER, ["g", "orders", "0", "3", "10", "7", "c1-0f3a", "/127.0.0.1", "c1"])),
        dict(zip(cc.OFFSETS_HEADER, ["g", "orders", "1", "-", "5", "-", "c1-0f3a", "/127.0.0.1", "c1"])),  # assigned, nothing committed
        dict(zip(cc.OFFSETS_HEADER, ["g", "orders", "2", "7", "7", "0", "-", "-", "-"])),  # committed, not assigned
        dict(zip(cc.OFFSETS_HEADER, ["g", "-", "-", "-", "-", "-", "c2-99aa", "/127.0.0.1", "c2"])),  # member without partitions
    ]


def test_reset_plan_like_kafka() -> None:
    keys = [("t", 0), ("t", 1)]
    earliest, latest = {("t", 0): 2, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 6}
    warn = io.StringIO()
    assert cc.plan_reset("to-earliest", None, keys, {}, earliest, latest) == earliest
    assert cc.plan_reset("to-latest", None, keys, {}, earliest, latest) == latest
    assert cc.plan_reset("to-current", None, keys, {("t", 0): 5}, earliest, latest) == {("t", 0): 5, ("t", 1): 6}
    assert cc.plan_reset("to-offset", 4, keys, {}, earliest, latest, warn=warn) == {("t", 0): 4, ("t", 1): 4}
    assert cc.plan_reset("to-offset", 99, keys, {}, earliest, latest, warn=warn) == latest
    assert "New offset (99) is higher than latest offset for topic partition t-0. Value will be set to 10" in warn.getvalue()
    assert cc.plan_reset("shift-by", -4, keys, {("t", 0): 5, ("t", 1): 5}, earliest, latest, warn=warn) == {("t", 0): 2, ("t", 1): 1}
    assert "New offset (1) is lower than earliest offset for topic partition t-0. Value will be set to 2" in warn.getvalue()
    with pytest.raises(SystemExit):  # Kafka: "Cannot shift offset for partition t-1 since there is no current committed offset"
        cc.plan_reset("shift-by", 1, keys, {("t", 0): 5}, earliest, latest)
    assert cc.plan_reset("to-datetime", None, keys, {}, earliest, latest, by_time={("t", 0): 7, ("t", 1): -1}) == {("t", 0): 7, ("t", 1): 6}
    plan = cc.format_reset_plan({"g": {("t", 1): 6, ("t", 0): 7}})
    assert plan.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [r["NEW-OFFSET"] for r in table(plan)] == ["7", "6"]


# ---------------------------------------------------------------------------------------------
# Against a broker
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def active_group(group_broker):
    """A topic with 10 records in partition 0 and 6 in partition 1, and a group with one live
    member that read them all and committed 4 (partition 0) and 6 (partition 1)."""
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("cli"), unique_group("cligroup")
    create_topic(bootstrap, topic, 2)
    confluent_produce(bootstrap, topic, {0: [b"r%d" % i for i in range(10)], 1: [b"s%d" % i for i in range(6)]})
    members = start_members(ConfluentMember, bootstrap, group, [topic], 1, prefix="cli-client")
    try:
        wait_for_assignment(members, all_partitions(topic, 2), [2], quiet_s=0)
        wait_for_records(members, 16)
        members[0].commit({(topic, 0): 4, (topic, 1): 6})
        yield bootstrap, topic, group, members[0]
    finally:
        stop_all(members)


def test_list_and_describe_show_lag(active_group) -> None:
    bootstrap, topic, group, member = active_group
    b = ["--bootstrap-server", bootstrap]

    listed = kbroker("groups", "list", *b)
    assert listed.returncode == 0, listed.stderr
    assert group in listed.stdout.split()

    with_state = table(kbroker("groups", "list", "--state", *b).stdout)
    assert {"GROUP": group, "STATE": "Stable"} in with_state, with_state
    stable_only = table(kbroker("groups", "list", "--state", "stable", *b).stdout)
    assert group in [r["GROUP"] for r in stable_only] and all(r["STATE"] == "Stable" for r in stable_only), stable_only
    empty_only = table(kbroker("groups", "list", "--state", "Empty", *b).stdout)
    assert group not in [r["GROUP"] for r in empty_only], f"ListGroups' states filter let a Stable group through: {empty_only}"

    described = kbroker("groups", "describe", "--group", group, *b)
    assert described.returncode == 0, described.stderr
    rows = table(described.stdout)
    assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows] == [
        (topic, "0", "4", "10", "6"),
        (topic, "1", "6", "6", "0"),
    ], described.stdout
    for r in rows:
        assert r["GROUP"] == group and r["CLIENT-ID"] == "cli-client0", r
        # Kafka names a classic member "<client.id>-<UUID>" and reports the client's address as "/IP".
        assert r["CONSUMER-ID"].startswith("cli-client0-"), r
        assert r["HOST"] == "/127.0.0.1", r

    members = table(kbroker("groups", "describe", "--group", group, "--members", "--verbose", *b).stdout)
    assert len(members) == 1 and members[0]["#PARTITIONS"] == "2" and members[0]["ASSIGNMENT"] == f"{topic}(0,1)", members
    state = kbroker("groups", "describe", "--group", group, "--state", *b)
    assert "Stable" in state.stdout and "range" in state.stdout, state.stdout

    member.stop()
    after = kbroker("groups", "describe", "--group", group, *b)
    assert after.returncode == 0, after.stderr
    assert f"Consumer group '{group}' has no active members." in after.stderr
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) for r in table(after.stdout)] == [("0", "4", "6", "-"), ("1", "6", "0", "-")]
    assert {"GROUP": group, "STATE": "Empty"} in table(kbroker("groups", "list", "--state", "Empty", *b).stdout)

    missing = kbroker("groups", "describe", "--group", unique_group("nobody"), *b)
    assert missing.returncode == 1 and "does not exist" in missing.stderr, (missing.stdout, missing.stderr)


def test_reset_offsets(active_group) -> None:
    bootstrap, topic, group, member = active_group
    b = ["--bootstrap-server", bootstrap, "--group", group]

    refused = kbroker("groups", "reset-offsets", "--topic", topic, "--to-earliest", "--execute", *b)
    assert refused.returncode == 1
    assert f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable." in refused.stderr
    assert committed_offsets(bootstrap, group) == {(topic, 0): 4, (topic, 1): 6}

    member.stop()

    def reset(*args: str) -> list[tuple[str, str, str]]:
        done = kbroker("groups", "reset-offsets", *args, *b)
        assert done.returncode == 0, done.stderr
        return [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(done.stdout)]

    # The default is a dry run: the plan, nothing committed.
    assert reset("--topic", topic, "--to-earliest") == [(topic, "0", "0"), (topic, "1", "0")]
    assert reset("--topic", topic, "--to-earliest", "--dry-run") == [(topic, "0", "0"), (topic, "1", "0")]
    assert committed_offsets(bootstrap, group) == {(topic, 0): 4, (topic, 1): 6}

    assert reset("--topic", f"{topic}:0", "--to-offset", "2", "--execute") == [(topic, "0", "2")]
    assert committed_offsets(bootstrap, group) == {(topic, 0): 2, (topic, 1): 6}
    assert reset("--topic", topic, "--shift-by", "-1", "--execute") == [(topic, "0", "1"), (topic, "1", "5")]
    assert committed_offsets(bootstrap, group) == {(topic, 0): 1, (topic, 1): 5}
    assert reset("--all-topics", "--to-latest", "--execute") == [(topic, "0", "10"), (topic, "1", "6")]
    assert reset("--topic", topic, "--to-datetime", "2000-01-01T00:00:00.000", "--execute") == [(topic, "0", "0"), (topic, "1", "0")]
    assert reset("--topic", topic, "--to-datetime", "2999-01-01T00:00:00.000Z", "--execute") == [(topic, "0", "10"), (topic, "1", "6")]
    assert reset("--topic", topic, "--to-offset", "99", "--execute") == [(topic, "0", "10"), (topic, "1", "6")]
    assert committed_offsets(bootstrap, group) == {(topic, 0): 10, (topic, 1): 6}

    # A group that does not exist yet gets its offsets (Kafka resets Dead groups too).
    fresh = unique_group("fresh")
    done = kbroker("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", fresh, "--topic", topic, "--to-offset", "3", "--execute")
    assert done.returncode == 0, done.stderr
    assert committed_offsets(bootstrap, fresh) == {(topic, 0): 3, (topic, 1): 3}

    lag = table(kbroker("groups", "describe", "--bootstrap-server", bootstrap, "--group", fresh).stdout)
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in lag] == [("0", "3", "10", "7"), ("1", "3", "6", "3")]

    bad = kbroker("groups", "reset-offsets", "--topic", topic, "--to-earliest", "--to-latest", *b)
    assert bad.returncode == 2 and "exactly one of" in bad.stderr
    no_topic = kbroker("groups", "reset-offsets", "--to-earliest", *b)
    assert no_topic.returncode == 1 and "--topic" in no_topic.stderr


def test_delete(active_group) -> None:
    bootstrap, _topic, group, member = active_group
    b = ["--bootstrap-server", bootstrap]

    refused = kbroker("groups", "delete", "--group", group, *b)
    assert refused.returncode == 1
    assert f"Group '{group}' could not be deleted" in refused.stderr and "not empty" in refused.stderr.lower(), refused.stderr

    member.stop()
    deleted = kbroker("groups", "delete", "--group", group, *b)
    assert deleted.returncode == 0, deleted.stderr
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout
    assert group not in kbroker("groups", "list", *b).stdout.split()
    assert committed_offsets(bootstrap, group) == {}, "the deleted group's offsets are still there"
    gone = kbroker("groups", "describe", "--group", group, *b)
    assert gone.returncode == 1 and f"Consumer group '{group}' does not exist." in gone.stderr

    again = kbroker("groups", "delete", "--group", group, *b)
    assert again.returncode == 1 and f"Group '{group}' could not be deleted" in again.stderr


def test_clear_errors(group_broker) -> None:
    # (no broker at all: the shared admin() path, covered by test_cli.py::test_clear_errors)
    b = ["--bootstrap-server", group_broker.bootstrap]
    no_group = kbroker("groups", "describe", *b)
    assert no_group.returncode == 1 and "--group or --all-groups" in no_group.stderr
    bad_state = kbroker("groups", "list", "--state", "Sleepy", *b)
    assert bad_state.returncode == 1 and "unknown group state 'Sleepy'" in bad_state.stderr
