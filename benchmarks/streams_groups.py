"""A Kafka Streams 4.4 word count scaled out and through a group coordinator's SIGKILL, kbroker
beside Apache Kafka 4.4, with the streams rebalance protocol (KIP-1071) and the classic one.

    python -m benchmarks.streams_groups [--targets kbroker,kafka] [--protocols streams,classic] [--lines 1500]

On a 3-node cluster (kbroker's of tests/cluster, or Apache Kafka 4.4's of
benchmarks/apache_kafka.py; both serve streams groups as they come, with SETTINGS), input and output topics of 3 partitions, RF=3, min.insync.replicas=2, and
the application's internal topics (a changelog and a repartition topic) the same. The application
is tests/streams_app/WordCount.java (RocksDB store, exactly_once_v2, no record cache: every word
read yields one count on the output). An idempotent acks=all producer writes ``--lines`` lines of
four words from a fixed vocabulary, round robin over the partitions:

1. one instance runs; the first third of the lines is written;
2. two more instances start and, once their clients run, the next third arrives over PHASE_S
   seconds, until the group has three members, each holding tasks, and every instance is RUNNING;
3. the node coordinating the group (FindCoordinator) is SIGKILLed while the last third arrives
   over PHASE_S seconds; once another node coordinates the group it is started again;
4. once every word's count on the output reached its expected value the instances stop, and a
   new read_committed reader of the whole output topic checks that every word's counts are
   exactly 1, 2, ..., n: nothing lost, nothing counted twice.

Printed per target and protocol: instances, whether the counts are exact, lines and words
written, the seconds from the first line written to the last expected count read (a reader
follows the output all along), the seconds the scale-out took (the new JVMs' start included),
the longest pause in the output after the kill, how often the instances entered REBALANCING,
whether the group kept its members through the kill (and a streams group its epoch), and what
else the killed node led. tests/cluster/test_streams_groups_cluster.py runs the same on kbroker
in CI.
"""

from __future__ import annotations

import argparse
import gc
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.errors import ErrorCode
from kio.schema.streams_group_describe.v0 import request as streams_describe_v0

from benchmarks.apache_kafka import KAFKA_VERSION, KafkaReferenceCluster, fetch_jars
from benchmarks.share_groups import KEY_GROUP, QUIET, coordinator, create_share_topic, partition_leaders
from broker import wire_client
from tests import streams_jars
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.test_features import finalized
from tests.integration.test_share_fetch_wire import set_group_configs

APP_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "streams_app" / "WordCount.java"
APP_LOG4J = APP_SOURCE.with_name("log4j2.properties")
TARGETS = ("kbroker", "kafka")
PROTOCOLS = ("streams", "classic")
PARTITIONS = 3
VOCABULARY = tuple(f"w{n:02d}" for n in range(40))
WORDS_PER_LINE = 4
# The same on both clusters: failures noticed in seconds, not Kafka's 9, a new classic group's
# first rebalance not held back, a streams member told of new tasks within a second.
SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    "group.initial.rebalance.delay.ms": "0",
    "group.streams.heartbeat.interval.ms": "1000",
    "group.streams.min.heartbeat.interval.ms": "1000",
}
# Streams groups are served by kbroker behind these until they are on by default; Kafka 4.4
# serves them by default (a new cluster finalizes streams.version 1).
# Kafka 4.4 holds a new streams group's first assignment back this long by default (3000 ms).
GROUP_CONFIGS = {"streams.initial.rebalance.delay.ms": "0"}
APP_CONFIGS = ("replication.factor=3", "topic.min.insync.replicas=2")
GUARANTEE = "exactly_once_v2"
# How long the second and the third third of the input take to arrive: the scale-out and the kill
# happen while they do.
PHASE_S = 5.0
# Kafka Streams' start costs half the CPU with the client JIT alone and one GC thread; the machine
# has two cores for three brokers and three instances.
APP_JVM_OPTS = ("-Xmx256M", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
CLUSTER_TIMEOUT_S = 60.0
RUNNING_TIMEOUT_S = 90.0
COUNT_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

Cluster = KafkaCluster | KafkaReferenceCluster


# -- the input and what it must count to ------------------------------------------------------------


def input_lines(count: int) -> list[str]:
    """``count`` lines of WORDS_PER_LINE words, a known multiset: line n's words step through the
    vocabulary by different strides, so that some words come twice or four times as often as others."""
    size = len(VOCABULARY)
    return [" ".join(VOCABULARY[(n * (j + 1) + j * j) % size] for j in range(WORDS_PER_LINE)) for n in range(count)]


def expected_counts(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in line.split())


class LineProducer:
    """An idempotent acks=all producer of ``lines``, round robin over the partitions, on a thread;
    it writes no further than ``allow`` lets it, at the pace ``allow`` sets."""

    def __init__(self, bootstrap: str, topic: str, lines: list[str]) -> None:
        self.lines = lines
        self.acked = 0
        self.failed: list[str] = []
        self.started: float | None = None
        self._allowed = 0
        self._interval_s = 0.0
        self._cond = threading.Condition()
        self._topic = topic
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **QUIET})
        self._thread = threading.Thread(target=self._run, name="line-producer", daemon=True)
        self._thread.start()

    def allow(self, lines: int, over_s: float = 0.0) -> None:
        """Write up to line ``lines``, the new ones spread over ``over_s`` seconds."""
        with self._cond:
            lines = min(len(self.lines), lines)
            if lines > self._allowed:
                self._interval_s = over_s / (lines - self._allowed)
                self._allowed = lines
            self._cond.notify_all()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))
        else:
            self.acked += 1

    def _run(self) -> None:
        for n, line in enumerate(self.lines):
            with self._cond:
                while n >= self._allowed:
                    self._cond.wait(0.1)
                    self._producer.poll(0)
                interval_s = self._interval_s
            if self.started is None:
                self.started = time.monotonic()
            self._producer.produce(self._topic, key=str(n).encode(), value=line.encode(), partition=n % PARTITIONS, on_delivery=self._delivered)
            self._producer.poll(0)
            time.sleep(interval_s)
        self._producer.flush(COUNT_TIMEOUT_S)

    def await_acked(self, lines: int, timeout_s: float) -> None:
        wait_until(f"{lines} lines acknowledged", lambda: self.acked >= lines or None, timeout_s, 0.05)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the producer did not finish within {timeout_s}s ({self.acked} of {len(self.lines)} acknowledged)"


# -- reading the counts -----------------------------------------------------------------------------


def count_of(value: bytes) -> int:
    return int(struct.unpack(">q", value)[0])


class OutputFollower:
    """A read_committed reader of the output topic from its start, on a thread: when each count
    arrived, and when the last expected one did."""

    def __init__(self, bootstrap: str, topic: str, expected: Counter[str]) -> None:
        self.arrivals: list[float] = []
        self.counts: dict[str, int] = {}
        self.complete_at: float | None = None
        self._expected = expected
        self._stop = threading.Event()
        self._consumer = read_committed(bootstrap, topic)
        self._thread = threading.Thread(target=self._run, name="output-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        missing = set(self._expected)
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            now = time.monotonic()
            self.arrivals.append(now)
            word = msg.key().decode()
            self.counts[word] = count_of(msg.value())
            if self.counts[word] == self._expected.get(word):
                missing.discard(word)
                if not missing and self.complete_at is None:
                    self.complete_at = now

    def await_complete(self, timeout_s: float) -> float | None:
        """When the last expected count arrived; None if not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.complete_at is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.complete_at

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        self._consumer.close()


def read_committed(bootstrap: str, topic: str) -> Any:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return consumer


def committed_counts(bootstrap: str, topic: str, timeout_s: float) -> dict[str, list[int]]:
    """Every committed count of every word, in the order written: ``topic`` read from its start
    to its end (its last stable offset, the end once no transaction is open) by a new reader."""
    consumer = read_committed(bootstrap, topic)
    counts: dict[str, list[int]] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"the output not read to its end within {timeout_s}s (partitions at the end: {sorted(at_end)})"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            counts.setdefault(msg.key().decode(), []).append(count_of(msg.value()))
    finally:
        consumer.close()
    return counts


def miscounted(counts: dict[str, list[int]], expected: Counter[str]) -> dict[str, list[int]]:
    """The words whose committed counts are not exactly 1, 2, ..., their expected count."""
    words = set(counts) | set(expected)
    return {w: counts.get(w, []) for w in sorted(words) if counts.get(w, []) != list(range(1, expected.get(w, 0) + 1))}


# -- the application ----------------------------------------------------------------------------------


def compile_word_count(lib: Path, into: Path) -> Path:
    """WordCount's classes, compiled into ``into``."""
    out = subprocess.run(["javac", "-d", str(into), "-cp", f"{lib}/*", str(APP_SOURCE)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"javac {APP_SOURCE.name} failed:\n{out.stdout}{out.stderr}"
    return into


class WordCountInstance:
    """One instance of the word count in a JVM of its own, its state store and log under ``work``:
    the states it printed."""

    def __init__(self, classes: Path, lib: Path, bootstrap: str, app_id: str, topics: tuple[str, str], protocol: str, work: Path) -> None:
        self.work = work
        self.states: list[str] = []
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = work / "streams.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["java", *APP_JVM_OPTS, f"-Dlog4j2.configurationFile={APP_LOG4J}", "-cp", f"{classes}:{lib}/*", "WordCount",
             bootstrap, app_id, *topics, str(work / "state"), GUARANTEE, protocol, *APP_CONFIGS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name=f"streams-{work.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("STATE "):
                self.states.append(line.split()[1])

    @property
    def running(self) -> bool:
        return bool(self.states) and self.states[-1] == "RUNNING"

    @property
    def failed(self) -> bool:
        return "ERROR" in self.states or (self.proc.poll() is not None and "NOT_RUNNING" not in self.states)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close_input(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def stop(self) -> None:
        self.close_input()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(STOP_TIMEOUT_S)
        self._log.close()


@dataclass(frozen=True)
class GroupView:
    """A group as its coordinator describes it: its members (whether each holds tasks) and, for a
    streams group, its epoch (DescribeGroups tells no classic group's generation)."""

    members: dict[str, bool]
    epoch: int | None

    @property
    def with_tasks(self) -> int:
        return sum(self.members.values())


def describe_group(bootstrap: str, group: str, protocol: str) -> GroupView | None:
    """StreamsGroupDescribe (streams) or DescribeGroups (classic: only once Stable) at the group's
    coordinator; None while there is no answer to read."""
    found = coordinator(bootstrap, KEY_GROUP, group)
    if found is None:
        return None
    if protocol == "streams":
        answer = wire_client.request(found[1], streams_describe_v0.StreamsGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False))
        [g] = answer.groups
        if g.error_code != ErrorCode.none:
            return None
        return GroupView({m.member_id: any(t.partitions for t in m.assignment.active_tasks) for m in g.members}, int(g.group_epoch))
    answer = wire_client.request(found[1], describe_groups_v5.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False))
    [g] = answer.groups
    if g.error_code != ErrorCode.none or g.group_state != "Stable":
        return None
    return GroupView({m.member_id: bool(m.member_assignment) for m in g.members}, None)


def await_running(cluster: Cluster, instances: list[WordCountInstance], group: str, protocol: str) -> GroupView:
    """Until every instance is RUNNING and each is a group member holding tasks (the group then);
    at once if one failed."""
    deadline = time.monotonic() + RUNNING_TIMEOUT_S
    while True:
        failed = [i for i in instances if i.failed]
        assert not failed, "instances failed:\n" + "\n".join(f"{i.work.name}: {i.states}\n{i.log_tail()}" for i in failed)
        try:
            view = describe_group(cluster.bootstrap, group, protocol) if all(i.running for i in instances) else None
            if view is not None and view.with_tasks == len(view.members) == len(instances):
                return view
        except OSError:  # a node going down under the question
            pass
        assert time.monotonic() < deadline, f"{len(instances)} instances not all running with tasks within {RUNNING_TIMEOUT_S}s: {[i.states for i in instances]}"
        time.sleep(0.2)


def await_streams_version(bootstrap: str) -> None:
    """streams.version 1 finalized on every node, as a new cluster of either finalizes it."""
    wait_until("streams.version 1 finalized on every node", lambda: all(finalized(a)[0].get("streams.version", 0) >= 1 for a in bootstrap.split(",")), CLUSTER_TIMEOUT_S)


# -- the run ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    target: str
    protocol: str
    instances: int
    lines: int
    words: int
    # Words whose committed counts are not exactly 1..n, with those counts.
    miscounted: dict[str, list[int]]
    seconds_to_counts: float | None
    seconds_to_scale: float
    # The longest time without a new committed count from the kill to the last expected count.
    output_pause_after_kill: float | None
    rebalancing: int
    killed: int
    # What the killed node led when it died, besides the group's coordinator partition.
    killed_led: dict[str, list[int]]
    # The group just before the kill and once the counts were final.
    group_before_kill: GroupView
    group_at_end: GroupView | None
    failed_instances: list[str]
    producer_failures: list[str]

    @property
    def correct(self) -> bool:
        return not self.miscounted and self.seconds_to_counts is not None

    @property
    def members_kept(self) -> bool:
        return self.group_at_end is not None and self.group_at_end.members == self.group_before_kill.members

    def line(self) -> str:
        def seconds(s: float | None) -> str:
            return "never" if s is None else f"{s:.1f}"

        epochs = "" if self.group_before_kill.epoch is None else f", group epoch {self.group_before_kill.epoch} -> {self.group_at_end.epoch if self.group_at_end else None}"
        return (
            f"{self.target:<12} {self.protocol:<8} instances {self.instances}  counts correct {'yes' if self.correct else 'no'}  "
            f"lines {self.lines}  words {self.words}  seconds to final counts {seconds(self.seconds_to_counts)}  "
            f"scale-out {self.seconds_to_scale:.1f}  output pause after the kill {seconds(self.output_pause_after_kill)}  "
            f"REBALANCING entered {self.rebalancing}  members kept through the kill {'yes' if self.members_kept else 'no'}{epochs}  "
            f"killed node {self.killed} (leading {self.killed_led})"
            + (f"  miscounted {dict(list(self.miscounted.items())[:3])}" if self.miscounted else "")
            + (f"  failed instances {self.failed_instances}" if self.failed_instances else "")
            + (f"  producer failures {self.producer_failures[:3]}" if self.producer_failures else "")
        )


def count_through_kill(
    cluster: Cluster, target: str, protocol: str, streams_lib: Path, classes: Path, work: Path, lines: int, tag: str, phase_s: float = PHASE_S
) -> Outcome:
    """The scenario of this module's docstring on ``cluster``, its second and third thirds of the
    input each over ``phase_s`` seconds, the instances' state and logs under ``work``; every
    instance is stopped and the killed node running again on return."""
    bootstrap = cluster.bootstrap
    app_id = f"wordcount-{protocol}-{tag}"
    source, sink = f"wc-input-{tag}", f"wc-output-{tag}"
    for topic in (source, sink):
        create_share_topic(bootstrap, topic, PARTITIONS)
    if protocol == "streams":
        set_group_configs(bootstrap.split(",")[0], app_id, GROUP_CONFIGS)
    text = input_lines(lines)
    expected = expected_counts(text)
    follower = OutputFollower(bootstrap, sink, expected)
    producer = LineProducer(bootstrap, source, text)
    instances: list[WordCountInstance] = []
    killed: int | None = None

    def start_instance() -> None:
        instances.append(WordCountInstance(classes, streams_lib, bootstrap, app_id, (source, sink), protocol, work / f"{app_id}-{len(instances)}"))

    def coordinator_id() -> int | None:
        found = coordinator(cluster.bootstrap, KEY_GROUP, app_id)
        return None if found is None else found[0]

    try:
        start_instance()
        await_running(cluster, instances, app_id, protocol)
        producer.allow(lines // 3)
        producer.await_acked(lines // 3, CLUSTER_TIMEOUT_S)
        scale_started = time.monotonic()
        start_instance()
        start_instance()
        # The next third arrives while the new instances join and the tasks move: from when they
        # start their clients, not from their JVMs' start, which takes seconds.
        wait_until("the new instances starting", lambda: all(i.states or i.failed for i in instances), RUNNING_TIMEOUT_S, 0.1)
        producer.allow(2 * lines // 3, phase_s)
        before_kill = await_running(cluster, instances, app_id, protocol)
        seconds_to_scale = time.monotonic() - scale_started
        producer.allow(lines, phase_s)
        killed = wait_until(f"the coordinator of {app_id}", coordinator_id, CLUSTER_TIMEOUT_S)
        killed_led = {topic: sorted(p for p, leader in partition_leaders(cluster.bootstrap, topic).items() if leader == killed) for topic in (source, f"{app_id}-counts-changelog", f"{app_id}-counts-repartition", sink)}
        killed_at = time.monotonic()
        cluster.nodes[killed].kill()
        wait_until(f"another node coordinating {app_id}", lambda: coordinator_id() not in (None, killed), CLUSTER_TIMEOUT_S, 0.2)
        # Started again while the rest of the input is counted; awaited below.
        cluster.nodes[killed].launch()
        producer.join(COUNT_TIMEOUT_S)
        complete_at = follower.await_complete(COUNT_TIMEOUT_S)
        at_end = describe_group(cluster.bootstrap, app_id, protocol)
        assert producer.started is not None
        after_kill = [t for t in follower.arrivals if killed_at <= t <= (complete_at or time.monotonic())]
        pause = max((b - a for a, b in zip([killed_at, *after_kill], after_kill)), default=None)
        failed = [i.work.name for i in instances if i.failed]
        for instance in instances:
            instance.close_input()
        for instance in instances:
            instance.stop()
        counts = committed_counts(cluster.bootstrap, sink, COUNT_TIMEOUT_S)
        return Outcome(
            target=target,
            protocol=protocol,
            instances=len(instances),
            lines=producer.acked,
            words=sum(expected.values()),
            miscounted=miscounted(counts, expected),
            seconds_to_counts=None if complete_at is None else complete_at - producer.started,
            seconds_to_scale=seconds_to_scale,
            output_pause_after_kill=pause,
            rebalancing=sum(i.states.count("REBALANCING") for i in instances),
            killed=killed,
            killed_led={t: p for t, p in killed_led.items() if p},
            group_before_kill=before_kill,
            group_at_end=at_end,
            failed_instances=failed,
            producer_failures=producer.failed,
        )
    finally:
        for instance in instances:
            instance.stop()
        follower.close()
        if killed is not None:
            if not cluster.nodes[killed].running:
                cluster.nodes[killed].launch()
            cluster.nodes[killed].await_started()


def make_cluster(target: str, root: Path, lib: Path) -> Cluster:
    if target == "kafka":
        return KafkaReferenceCluster(root, lib, nodes=3, overrides=SETTINGS)
    return KafkaCluster(root, combined=3, overrides=SETTINGS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams_groups", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--lines", type=int, default=1500)
    args = parser.parse_args(argv)
    lib = fetch_jars()
    streams_lib = streams_jars.fetch_jars()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-streams-groups-") as tmp:
        classes = compile_word_count(streams_lib, Path(tmp) / "classes")
        for target in args.targets.split(","):
            cluster = make_cluster(target, Path(tmp) / target, lib)
            try:
                cluster.start()
                await_streams_version(cluster.bootstrap)
                for protocol in args.protocols.split(","):
                    name = target if target == "kbroker" else f"kafka {KAFKA_VERSION}"
                    outcome = count_through_kill(cluster, name, protocol, streams_lib, classes, Path(tmp) / target, args.lines, uuid.uuid4().hex[:8])
                    outcomes.append(outcome)
                    print(outcome.line(), flush=True)
            finally:
                gc.collect()
                cluster.close()
    print(f"\nword count ({GUARANTEE}) scaled 1 -> 3 instances, the group coordinator SIGKILLed (3 nodes, 3 partitions RF=3)")
    for o in outcomes:
        print(o.line())


if __name__ == "__main__":
    main()
