"""Several log dirs (JBOD) on a three-node cluster.

Node 3 with two log dirs (log.dirs=data,data2; the metadata log in data): its second dir fails at
run time (removed, then records appended to its replicas there: its next
replication-offset-checkpoint fails with ENOENT): node 3
takes it offline alone, names it in its next BrokerHeartbeat (OfflineLogDirs), and the controller
takes node 3 out of the leadership and ISR of the replicas in that dir only (Kafka 4.4's
handleDirectoriesOffline), which it can since node 3 told it which dir holds each replica
(AssignReplicasToDirs). Node 3 keeps running and keeps leading its replicas in the other dir.

Every node with two log dirs: a follower's replica and then the leader's move to their node's
other dir (AlterReplicaLogDirs) while an acks=all producer writes and the followers fetch
(``log_dir_moves``, which benchmarks/log_dir_moves.py also plays against three Kafka 4.4 nodes of
two dirs); the single-node moves and the tools' outputs beside a Kafka 4.4 node of two dirs are in
tests/integration/test_alter_replica_log_dirs.py."""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from broker.dynamic_broker_config import REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND
from broker.metadata.metadata_image import PartitionRegistration
from storage.meta_properties import parse_kafka_uuid, read_meta_properties
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_eligible_leaders import history
from tests.cluster.test_replication import admin, create, partition_state
from tests.cluster.test_replication_faults import TIMEOUT_S, Load, Record, assert_acked_once_at_their_offsets, read_to_end, wait_for_isr
from tests.cluster.test_replication_throttle import alter as alter_configs
from tests.cluster.test_replication_throttle import broker_config, set_default
from tests.integration.helpers import produce_acked, unique_topic
from tests.integration.test_alter_replica_log_dirs import LOG_DIRS, NONE, Answer, alter
from tests.integration.test_several_log_dirs import append_to_a_removed_dir
from tests.kafka_tools import kafka_tool

NODE = 3
PARTITIONS = 6


def test_a_failed_second_dir_moves_only_its_replicas_away_from_the_node(tmp_path: Path) -> None:
    data, data2 = tmp_path / "node3" / "data", tmp_path / "node3" / "data2"
    overrides = {NODE: {"log.dirs": f"{data},{data2}", "replica.high.watermark.checkpoint.interval.ms": "300"}}
    cluster = KafkaCluster(tmp_path, node_overrides=overrides).start()
    try:
        topic = unique_topic("jbod")
        create(cluster.bootstrap, topic, PARTITIONS)
        node = cluster.nodes[NODE]
        in_data2 = wait_until(
            "node 3's replicas placed in both dirs",
            lambda: ({p for p in range(PARTITIONS) if (data2 / f"{topic}-{p}").is_dir()} if all((data / f"{topic}-{p}").is_dir() or (data2 / f"{topic}-{p}").is_dir() for p in range(PARTITIONS)) else None),
            TIMEOUT_S,
        )
        assert 0 < len(in_data2) < PARTITIONS
        in_data = set(range(PARTITIONS)) - in_data2
        # Every partition whole again (ISR of three), and node 3's dir assignments sent.
        wait_until("every ISR whole", lambda: all(len(partition_state(cluster.bootstrap, topic, p)[1]) == 3 for p in range(PARTITIONS)) or None, TIMEOUT_S)
        wait_until("assignments sent", lambda: any(e["event"] == "broker.replicas_assigned_to_dirs" for e in node.log_events(current_run=True)) or None, TIMEOUT_S)
        led_in_data = {p for p in in_data if partition_state(cluster.bootstrap, topic, p)[0] == NODE}

        shutil.rmtree(data2)
        append_to_a_removed_dir(cluster.bootstrap, topic, min(in_data2))

        seen: list[object] = []

        def moved() -> bool | None:
            states = {p: partition_state(cluster.bootstrap, topic, p) for p in range(PARTITIONS)}
            seen[:] = [states]
            return all(leader != NODE and NODE not in isr for leader, isr in (states[p] for p in in_data2)) or None

        try:
            wait_until("node 3's replicas in data2 out of leadership and ISR", moved, TIMEOUT_S)
        except AssertionError as e:
            raise AssertionError(f"{e}: in data2 {in_data2}, states {seen}") from None
        assert node.running
        offline = [e for e in node.log_events(current_run=True) if e["event"] == "log_dir.offline"]
        assert [e["dir"] for e in offline] == [str(data2)] and offline[0]["cause"].startswith("ENOENT")
        for p in in_data:
            leader, isr = partition_state(cluster.bootstrap, topic, p)
            assert NODE in isr
            if p in led_in_data:
                assert leader == NODE
    finally:
        cluster.close()


# replica.alter.log.dirs.io.max.bytes.per.second (dynamic only, as in Kafka): each copy is held
# at this pace, the cluster-wide default, until kafka-log-dirs has seen it under way, then let go.
SLOW_COPY_RATE = 100_000
FAST_COPY_RATE = 100_000_000
# 1 kB records before the moves, about 1.2 MB for each copy, in batches of at most 16 kB: more than
# a copy's first step (replica.fetch.max.bytes, 1 MiB, on both brokers), whose bytes then hold
# the rest back for about 10 s at SLOW_COPY_RATE.
PREFILL = 1200
PREFILL_BATCH_BYTES = 16384


def replica_home(node_dirs: tuple[Path, Path], topic: str) -> tuple[Path, Path]:
    """The dir of the node that holds ``topic``-0 and the other one."""
    first, second = node_dirs
    return (first, second) if (first / f"{topic}-0").is_dir() else (second, first)


def moved(node_dirs: tuple[Path, Path], topic: str, to: Path) -> bool:
    """``topic``-0 is in ``to`` alone: the swap is done and no future log is left in either dir."""
    leftovers = [p for d in node_dirs for p in d.glob(f"{topic}-0.*-future")]
    return (to / f"{topic}-0").is_dir() and not any((d / f"{topic}-0").exists() for d in node_dirs if d != to) and not leftovers


def replica_log(node_dirs: tuple[Path, Path], topic: str) -> bytes:
    home = replica_home(node_dirs, topic)[0]
    return b"".join(f.read_bytes() for f in sorted((home / f"{topic}-0").glob("*.log")))


def log_dirs_described(kafka_lib: Path, bootstrap: str, topic: str) -> str:
    """kafka-log-dirs --describe --topic-list ``topic``: its output."""
    out = kafka_tool(kafka_lib, LOG_DIRS, "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def replica_dirs(described: str, topic: str) -> dict[int, list[tuple[str, bool]]]:
    """Per broker in kafka-log-dirs' listing, the dirs that list ``topic``-0 and whether as a future replica."""
    listing = json.loads(described.splitlines()[-1])
    return {
        b["broker"]: [(d["logDir"], p["isFuture"]) for d in b["logDirs"] for p in d["partitions"] if p["partition"] == f"{topic}-0"]
        for b in listing["brokers"]
    }


@dataclass
class LogDirMove:
    """One replica's move to the other dir of its node, as ``log_dir_moves`` saw it."""

    node: int
    home: Path
    away: Path
    answer: Answer
    while_copying: str  # kafka-log-dirs --describe's output while the copy was held back
    after: str  # and once the replica was in ``away`` alone
    seconds: float  # from AlterReplicaLogDirs to the replica in ``away`` alone
    released_seconds: float  # from the faster copy rate to the same
    assigned_ahead_seconds: float  # how long before that the controller's assignment named ``away`` (< 0: after)
    state_after: tuple[int, tuple[int, ...]]  # (leader, ISR) by Metadata then


@dataclass
class LogDirMoves:
    """What ``log_dir_moves`` saw; records are (partition, offset, value)."""

    topic: str
    before: str  # kafka-log-dirs --describe's output before the first move
    moves: list[LogDirMove] = field(default_factory=list)
    acked: list[Record] = field(default_factory=list)  # the prefill's and the load's
    errors: list[KafkaError] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)  # read back after the moves
    # The partition as the controller committed it while the moves ran (the state before them first).
    committed: list[PartitionRegistration] = field(default_factory=list)
    directory_ids: dict[int, dict[Path, uuid.UUID]] = field(default_factory=dict)
    restarted_home: Path | None = None  # where node 1's replica was before its restart
    restarted_in_place: bool = False  # and alone there on disk once node 1 was back in the ISR
    after_restart: str = ""  # kafka-log-dirs --describe's output then
    same_bytes_as_node_2: bool = False  # node 1's log, read again after its restart


def directory_id(log_dir: Path) -> uuid.UUID:
    """The directory.id that `storage format` wrote in ``log_dir``'s meta.properties."""
    meta = read_meta_properties(log_dir)
    assert meta is not None and meta.directory_id, log_dir
    return parse_kafka_uuid(meta.directory_id)


def assigned_dir(cluster: Any, topic: str, node_id: int) -> uuid.UUID | None:
    """The dir that the controller's metadata log (node 1's copy) names for ``node_id``'s replica of ``topic``-0."""
    p = history(cluster, topic)[-1]
    return p.directories[p.replicas.index(node_id)] if p.directories else None


def eventually(probe: Callable[[], bool], timeout_s: float) -> bool:
    try:
        return bool(wait_until("", lambda: probe() or None, timeout_s))
    except AssertionError:
        return False


def log_dir_moves(cluster: Any, dirs: dict[int, tuple[Path, Path]], kafka_lib: Path) -> LogDirMoves:
    """The scenario, against kbroker's cluster or Apache Kafka's (benchmarks/log_dir_moves.py runs
    both): ``cluster`` has three combined nodes, node n with the log dirs ``dirs[n]`` (its metadata
    log in the first), and nodes with ``bootstrap``, ``node_id``, ``stop``, ``launch`` and
    ``await_started``. One RF=3 partition led by node 1 (min ISR 2), an idempotent acks=all
    producer; node 2 (a follower) and then node 1 (the leader) move their replica to their other
    dir with AlterReplicaLogDirs, each copy held at SLOW_COPY_RATE until kafka-log-dirs has shown
    it; then node 1 is stopped and started again. Bounded waits for what both brokers guarantee;
    the rest is recorded for the caller to judge."""
    topic = unique_topic("moving")
    topic_spec = NewTopic(topic, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})
    client = admin(cluster.bootstrap)
    client.create_topics([topic_spec], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S)
    wait_for_isr(cluster, topic, {1, 2, 3})
    values = [b"%05d" % i + b"p" * 1000 for i in range(PREFILL)]
    offsets = produce_acked(cluster.bootstrap, topic, values, enable_idempotence=True, batch_size=PREFILL_BATCH_BYTES)
    directory_ids = {n: {d: directory_id(d) for d in node_dirs} for n, node_dirs in dirs.items()}
    # The tool's JVM runs beside the steps up to the first move: its start-up is most of its run.
    with ThreadPoolExecutor(1) as tool, Load(cluster.bootstrap, topic) as load:
        before = tool.submit(log_dirs_described, kafka_lib, cluster.bootstrap, topic)
        set_default(cluster.bootstrap, {REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND: str(SLOW_COPY_RATE)})
        slow = (str(SLOW_COPY_RATE), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        for node_id in (1, 2):
            node = cluster.nodes[node_id]
            wait_until(f"node {node_id} taking the default", lambda n=node: broker_config(n, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND) == slow or None, TIMEOUT_S)  # type: ignore[misc]
        load.wait_for_more(50, "before the moves")
        seen = LogDirMoves(topic, before.result(TIMEOUT_S), acked=[(0, offset, value) for offset, value in zip(offsets, values)], directory_ids=directory_ids)
        committed_before = len(history(cluster, topic)) - 1
        for node_id in (2, 1):
            home, away = replica_home(dirs[node_id], topic)
            asked = time.monotonic()
            answer = alter(cluster.nodes[node_id].bootstrap, [(str(away), [(topic, [0])])])
            # Its first 1 MiB at 100 kB/s: the copy is under way for 10 s unless sped up.
            while_copying = log_dirs_described(kafka_lib, cluster.bootstrap, topic)
            alter_configs(admin(cluster.nodes[node_id].bootstrap), ConfigResource.Type.BROKER, str(node_id), {REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND: str(FAST_COPY_RATE)})
            released = time.monotonic()
            marks: dict[str, float] = {}  # when the replica was in ``away`` alone on disk, and when the controller said so

            def settled(n: int = node_id, to: Path = away) -> bool:
                # Looked at every 50 ms, the assignment first: both seen in one look read +0.00 s.
                if "assigned" not in marks and assigned_dir(cluster, topic, n) == directory_ids[n][to]:
                    marks["assigned"] = time.monotonic()
                if "moved" not in marks and moved(dirs[n], topic, to):
                    marks["moved"] = time.monotonic()
                return len(marks) == 2

            wait_until(f"node {node_id}'s replica in {away}, on disk and in the controller's assignment (asked: {answer})", settled, TIMEOUT_S, interval_s=0.05)
            load.wait_for_more(50, f"after node {node_id}'s move")
            state = partition_state(cluster.bootstrap, topic)
            after = log_dirs_described(kafka_lib, cluster.bootstrap, topic)
            seen.moves.append(
                LogDirMove(node_id, home, away, answer, while_copying, after, marks["moved"] - asked, marks["moved"] - released, marks["moved"] - marks["assigned"], state)
            )
    seen.committed = history(cluster, topic)[committed_before:]
    seen.acked += load.acked
    seen.errors = load.errors
    seen.records, _ = read_to_end(cluster.bootstrap, topic, [0])

    # Node 1, restarted, loads its replica from the dir it moved to and catches up from there.
    seen.restarted_home = replica_home(dirs[1], topic)[0]
    leader = cluster.nodes[1]
    # kbroker's nodes restart from an interpreter started beforehand; a JVM has nothing like it.
    getattr(leader, "warm_up", lambda: None)()
    leader.stop()
    wait_for_isr(cluster, topic, {2, 3})
    leader.launch()
    leader.await_started()
    wait_for_isr(cluster, topic, {1, 2, 3})
    seen.restarted_in_place = moved(dirs[1], topic, seen.restarted_home)
    seen.after_restart = log_dirs_described(kafka_lib, cluster.bootstrap, topic)
    # Every record read above, in node 1's new dir: its log is node 2's byte for byte.
    seen.same_bytes_as_node_2 = eventually(lambda: replica_log(dirs[1], topic) == replica_log(dirs[2], topic), TIMEOUT_S)
    return seen


def test_a_followers_and_then_the_leaders_replica_move_to_their_other_dir_under_acks_all(tmp_path: Path, kafka_lib: Path) -> None:
    """Every node with two log dirs (``log_dir_moves``): kafka-log-dirs shows the future replica
    while it is copied and then the replica in its new dir alone, nothing acknowledged is lost, the
    leader and the ISR stay, the controller accepts each replica's new dir before the node swaps
    the logs, and node 1, stopped and started again, loads its replica from there and rejoins the ISR."""
    dirs = {n: (tmp_path / f"node{n}" / "data", tmp_path / f"node{n}" / "data2") for n in (1, 2, 3)}
    overrides = {n: {"log.dirs": f"{a},{b}"} for n, (a, b) in dirs.items()}
    # The tools' JVM starts while the nodes do: its start-up is most of a first tool's run.
    tools = threading.Thread(target=kafka_tool, args=(kafka_lib, LOG_DIRS, "--version"))
    tools.start()
    cluster = KafkaCluster(tmp_path, node_overrides=overrides).start()
    tools.join()
    try:
        seen = log_dir_moves(cluster, dirs, kafka_lib)
        events = {move.node: cluster.nodes[move.node].log_events() for move in seen.moves}
    finally:
        cluster.close()
    topic = seen.topic
    for move in seen.moves:
        assert replica_dirs(seen.before, topic)[move.node] == [(str(move.home), False)]
        assert move.answer == [(topic, [(0, NONE)])]
        assert sorted(replica_dirs(move.while_copying, topic)[move.node]) == sorted([(str(move.home), False), (str(move.away), True)])
        assert move.state_after == (1, (1, 2, 3))
        assert replica_dirs(move.after, topic)[move.node] == [(str(move.away), False)]
        # The new dir asked for and accepted by the controller (its answer follows the commit)
        # before the swap, as Kafka 4.4's ReplicaAlterLogDirsThread: the node's own log, in order.
        order = [e["event"] for e in events[move.node] if e.get("topic") == topic and e["event"].startswith("replica_alter_log_dirs.")]
        assert order == ["replica_alter_log_dirs.assignment_queued", "replica_alter_log_dirs.assignment_accepted", "replica_alter_log_dirs.moved"], order
    assert not seen.errors, seen.errors[:3]
    assert_acked_once_at_their_offsets(seen.records, seen.acked)
    assert all(p.leader == 1 and set(p.isr) == {1, 2, 3} for p in seen.committed), seen.committed
    assert seen.restarted_in_place
    assert replica_dirs(seen.after_restart, topic)[1] == [(str(seen.restarted_home), False)]
    assert seen.same_bytes_as_node_2
