"""kafka-streams-groups.sh (Kafka 4.4's StreamsGroupCommand) against one kbroker node and one Apache
Kafka 4.4 node (benchmarks/apache_kafka.py) side by side: the same Kafka Streams 4.4 word count
(tests/streams_app/WordCount.java, group.protocol=streams) processes the same input on each, then
the tool lists and describes its group while it runs, and resets, deletes the offsets of and
deletes the group once it has stopped. Every output is compared line by line with Kafka's, after
masks for what each run decides by itself (see ``masked``).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v9 import request as offset_fetch_v9
from kio.static.primitive import i32

from benchmarks.apache_kafka import KafkaReferenceCluster
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, watermarks
from tests.integration.test_streams_groups_wire import LINES, WordCountApp, compile_app, describe
from tests.integration.wire import request
from tests.kafka_tools import kafka_tool

STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand"
# The application id, and so the group id; WordCountApp reads wc-input and writes wc-output.
APP = "wordcount"
INPUT = "wc-input"
REPARTITION = f"{APP}-counts-repartition"
PARTITIONS = 2
# The same settings on both brokers, to save the test time: no initial rebalance delay (3 s by
# default), and heartbeats every 500 ms rather than 5 s (Kafka Streams waits a heartbeat for each
# step of its first assignment: the internal topics' creation, its tasks).
OVERRIDES = {
    "group.streams.initial.rebalance.delay.ms": "0",
    "group.streams.min.heartbeat.interval.ms": "500",
    "group.streams.heartbeat.interval.ms": "500",
}
WAIT_S = 60.0

# The commands, by when they run: while the application runs (its group Stable, its input all
# processed and committed), then once it has stopped (the group Empty).
RUNNING: list[tuple[str, ...]] = [
    ("--list",),
    ("--list", "--state"),
    ("--describe", "--group", APP),
    ("--describe", "--group", APP, "--members"),
    ("--describe", "--group", APP, "--members", "--verbose"),
    ("--describe", "--group", APP, "--offsets"),
    ("--describe", "--group", APP, "--offsets", "--verbose"),
    ("--describe", "--group", APP, "--state"),
    ("--describe", "--group", APP, "--state", "--verbose"),
    # StreamsGroupDescribe v1's IncludeTopologyDescription: neither broker keeps descriptions.
    ("--describe", "--group", APP, "--topology"),
    ("--reset-offsets", "--group", APP, "--input-topic", INPUT, "--to-earliest", "--dry-run"),
]
STOPPED: list[tuple[str, ...]] = [
    ("--list", "--state"),
    ("--describe", "--group", APP),
    ("--describe", "--group", APP, "--members"),
    ("--describe", "--group", APP, "--state", "--verbose"),
    ("--reset-offsets", "--group", APP, "--input-topic", INPUT, "--to-earliest", "--dry-run"),
    ("--reset-offsets", "--group", APP, "--input-topic", INPUT, "--to-earliest", "--execute"),
    ("--delete-offsets", "--group", APP, "--input-topic", INPUT),
    ("--delete-offsets", "--group", APP, "--all-input-topics"),
    ("--describe", "--group", "nobody"),
    ("--delete", "--group", "nobody"),
    ("--delete", "--group", APP),
    ("--list", "--state"),
]
STEPS = [("running", args) for args in RUNNING] + [("stopped", args) for args in STOPPED]
# Tables printed in a Java HashMap's order of TopicPartitions: two of the four partitions share a
# bucket, and the order of those two differed between two runs against Kafka 4.4 itself.
HASH_ORDERED = ("--describe", "--reset-offsets", "--delete-offsets")
# --state's COORDINATOR (ID) column: each node's own address, padded to the column's width.
COORDINATOR = re.compile(r"127\.0\.0\.1:\d+ \(1\) +")


@dataclass
class Run:
    """What the tool printed against one broker (exit code, stdout, stderr for each of STEPS),
    and the ids and epoch that broker's group had while the application ran."""

    outputs: list[tuple[int, str, str]]
    member_id: str
    process_id: str
    epoch: int


def committed(bs: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as an admin's OffsetFetch (no member) sees them."""
    group = offset_fetch_v9.OffsetFetchRequestGroup(group_id=APP, member_id=None, member_epoch=i32(-1), topics=None)
    [answer] = request(bs, offset_fetch_v9.OffsetFetchRequest(groups=(group,), require_stable=False)).groups
    assert answer.error_code == ErrorCode.none, answer
    return {(t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions if p.error_code == ErrorCode.none}


def await_processed(bs: str) -> None:
    """Until every input and repartition record is processed and its offset committed: the lags the
    tool shows are then 0 on both brokers, whenever it looks."""
    deadline = time.monotonic() + WAIT_S
    while True:
        ends = {(t, p): watermarks(bs, t, p)[1] for t in (INPUT, REPARTITION) for p in range(PARTITIONS)}
        done = committed(bs)
        if all(ends[(INPUT, p)] == len(LINES) // PARTITIONS for p in range(PARTITIONS)) and all(done.get(tp, 0) == end for tp, end in ends.items()):
            return
        assert time.monotonic() < deadline, (ends, done)
        time.sleep(0.3)


def await_state(bs: str, state: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while (group := describe(bs, APP).groups[0]).group_state != state:
        assert time.monotonic() < deadline, group
        time.sleep(0.2)
    return group


def session(bs: str, kafka_lib: Path, classes: Path, state_dir: Path) -> Run:
    """The word count over LINES on ``bs``, and every command of STEPS at its time."""
    outputs: list[tuple[int, str, str]] = []

    def run(args: tuple[str, ...]) -> None:
        done = kafka_tool(kafka_lib, STREAMS_GROUP_COMMAND, "--bootstrap-server", bs, *args)
        outputs.append((done.returncode, done.stdout, done.stderr))

    create_topic(bs, INPUT, partitions=PARTITIONS)
    create_topic(bs, "wc-output", partitions=PARTITIONS)
    app = WordCountApp(classes, bs, APP, state_dir, "at_least_once")
    try:
        app.wait_running()
        producer = Producer({"bootstrap.servers": bs})
        # Spread over both input partitions, so that each has a committed offset to reset.
        for i, line in enumerate(LINES):
            producer.produce(INPUT, key=str(i).encode(), value=line.encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        await_processed(bs)
        group = await_state(bs, "Stable")
        [member] = group.members
        # A Stable group of one member: its epoch is the group's and the target assignment's.
        assert group.group_epoch == group.assignment_epoch == member.member_epoch, group
        for args in RUNNING:
            run(args)
    finally:
        app.stop()
    await_state(bs, "Empty")
    for args in STOPPED:
        run(args)
    return Run(outputs, member.member_id, member.process_id, group.group_epoch)


@pytest.fixture(scope="module")
def runs(kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """The same session against kbroker and Kafka 4.4, at the same time: most of a session is
    waiting (on JVM start-ups, on heartbeats) rather than computing."""
    root = tmp_path_factory.mktemp("streams-groups-command")
    broker = BrokerProcess(root / "kbroker" / "data", OVERRIDES)
    kafka = KafkaReferenceCluster(root / "kafka", kafka_lib, nodes=1, overrides=OVERRIDES)
    try:
        with ThreadPoolExecutor(3) as pool:
            started = [pool.submit(broker.start), pool.submit(kafka.start)]
            # The tools' JVM starts (seconds) while the brokers do.
            started.append(pool.submit(kafka_tool, kafka_lib, STREAMS_GROUP_COMMAND, "--version"))
            classes = compile_app(root / "classes")
            for f in started:
                f.result()
            ours = pool.submit(session, broker.bootstrap, kafka_lib, classes, root / "state-kbroker")
            theirs = pool.submit(session, kafka.bootstrap, kafka_lib, classes, root / "state-kafka")
            yield {"kbroker": ours.result(), "kafka": theirs.result()}
    finally:
        kafka.close()
        retire(broker)


def masked(run: Run, args: tuple[str, ...], text: str) -> str:
    """``text`` with what each run decides by itself replaced, and nothing else."""
    # The tool's own stack frames: how the JVM reached the tool's main (a generated or a native
    # method accessor) is the JIT's choice.
    lines = [line for line in text.splitlines() if not line.startswith("\tat ")]
    out = "\n".join(lines)
    # The ids Kafka Streams makes up for its process and member (the client id embeds the process id).
    out = out.replace(run.member_id, "<member-id>").replace(run.process_id, "<process-id>")
    out = COORDINATOR.sub("<coordinator> ", out)
    if "--verbose" in args and ("--members" in args or "--state" in args):
        # The epochs count the group's changes up to its first assignment, each noticed by the
        # heartbeat that comes after it (the internal topics' creation is one): how many epochs
        # that takes is timing's. In the group's row: the Stable group's epoch (its group, target
        # assignment and member epochs, equal as session checked) and the next, the member's leave.
        for value, name in ((run.epoch, "<epoch>"), (run.epoch + 1, "<epoch+1>")):
            epoch = re.compile(rf"(?<!\S){value}(?!\S)")
            out = "\n".join(epoch.sub(name, line) if line.startswith(APP) else line for line in out.splitlines())
    if args[0] in HASH_ORDERED:
        rows = out.splitlines()
        header = next((i for i, line in enumerate(rows) if line.startswith(("GROUP ", "TOPIC "))), None)
        if header is not None:
            out = "\n".join(rows[: header + 1] + sorted(rows[header + 1 :]))
    return out


@pytest.mark.parametrize("step", range(len(STEPS)), ids=[f"{phase}: {' '.join(args)}" for phase, args in STEPS])
def test_the_same_as_kafka_44(runs: dict[str, Run], step: int) -> None:
    _, args = STEPS[step]
    ours, theirs = runs["kbroker"], runs["kafka"]
    code, out, err = ours.outputs[step]
    kafka_code, kafka_out, kafka_err = theirs.outputs[step]
    assert (code, masked(ours, args, out), masked(ours, args, err)) == (kafka_code, masked(theirs, args, kafka_out), masked(theirs, args, kafka_err))
