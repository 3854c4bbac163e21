"""Several log dirs (JBOD) on a three-node cluster.

Node 3 with two log dirs (log.dirs=data,data2; the metadata log in data): its second dir fails at
run time (removed, then records appended to its replicas there: its next
replication-offset-checkpoint fails with ENOENT): node 3
takes it offline alone, names it in its next BrokerHeartbeat (OfflineLogDirs), and the controller
takes node 3 out of the leadership and ISR of the replicas in that dir only (Kafka 4.4's
handleDirectoriesOffline), which it can since node 3 told it which dir holds each replica
(AssignReplicasToDirs). Node 3 keeps running and keeps leading its replicas in the other dir.

Every node with two log dirs: a follower's replica and then the leader's move to their node's
other dir (AlterReplicaLogDirs) while an acks=all producer writes and the followers fetch; the
single-node moves and the tools' outputs beside a Kafka 4.4 node of two dirs are in
tests/integration/test_alter_replica_log_dirs.py."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from broker.dynamic_broker_config import REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import admin, create, partition_state
from tests.cluster.test_replication_faults import TIMEOUT_S, Load, assert_acked_once_at_their_offsets, read_to_end, wait_for_isr
from tests.cluster.test_replication_throttle import alter as alter_configs
from tests.cluster.test_replication_throttle import broker_config, set_default
from tests.integration.helpers import produce_acked, unique_topic
from tests.integration.test_alter_replica_log_dirs import LOG_DIRS, NONE, alter
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
PREFILL = 1000  # 1 kB records before the moves, about 1 MB for each copy
# In batches of at most this: a copy step takes one batch at least and then waits out its bytes
# at the rate in force, so smaller batches let the faster rate take over sooner.
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


def described_dirs(kafka_lib: Path, bootstrap: str, topic: str) -> dict[int, list[tuple[str, bool]]]:
    """kafka-log-dirs --describe: per broker, the dirs that list ``topic``-0 and whether as a future replica."""
    out = kafka_tool(kafka_lib, LOG_DIRS, "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic)
    assert out.returncode == 0, out.stdout + out.stderr
    listing = json.loads(out.stdout.splitlines()[-1])
    return {
        b["broker"]: [(d["logDir"], p["isFuture"]) for d in b["logDirs"] for p in d["partitions"] if p["partition"] == f"{topic}-0"]
        for b in listing["brokers"]
    }


def test_a_followers_and_then_the_leaders_replica_move_to_their_other_dir_under_acks_all(tmp_path: Path, kafka_lib: Path) -> None:
    """Every node with two log dirs; one RF=3 partition led by node 1 (min ISR 2). Under an
    idempotent acks=all producer, node 2 (a follower) and then node 1 (the leader) move their
    replica to their other dir with AlterReplicaLogDirs: kafka-log-dirs shows the future replica
    while it is copied and then the replica in its new dir alone, nothing acknowledged is lost,
    the leader and the ISR stay, and node 1, stopped and started again, loads its replica from
    there and rejoins the ISR."""
    dirs = {n: (tmp_path / f"node{n}" / "data", tmp_path / f"node{n}" / "data2") for n in (1, 2, 3)}
    overrides = {n: {"log.dirs": f"{a},{b}"} for n, (a, b) in dirs.items()}
    # The tools' JVM starts while the nodes do: its start-up is most of a first tool's run.
    tools = threading.Thread(target=kafka_tool, args=(kafka_lib, LOG_DIRS, "--version"))
    tools.start()
    cluster = KafkaCluster(tmp_path, node_overrides=overrides).start()
    tools.join()
    try:
        topic = unique_topic("moving")
        topic_spec = NewTopic(topic, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})
        client = admin(cluster.bootstrap)
        client.create_topics([topic_spec], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S)
        wait_for_isr(cluster, topic, {1, 2, 3})
        values = [b"%05d" % i + b"p" * 1000 for i in range(PREFILL)]
        offsets = produce_acked(cluster.bootstrap, topic, values, enable_idempotence=True, batch_size=PREFILL_BATCH_BYTES)
        prefill = [(0, offset, value) for offset, value in zip(offsets, values)]
        set_default(cluster.bootstrap, {REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND: str(SLOW_COPY_RATE)})
        slow = (str(SLOW_COPY_RATE), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        for node_id in (1, 2):
            node = cluster.nodes[node_id]
            wait_until(f"node {node_id} taking the default", lambda n=node: broker_config(n, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND) == slow or None, TIMEOUT_S)  # type: ignore[misc]
        with Load(cluster.bootstrap, topic) as load:
            load.wait_for_more(50, "before the moves")
            for node_id in (2, 1):
                home, away = replica_home(dirs[node_id], topic)
                answer = alter(cluster.nodes[node_id].bootstrap, [(str(away), [(topic, [0])])])
                assert answer == [(topic, [(0, NONE)])]
                # 1 MB at 100 kB/s: the copy is under way for 10 s unless sped up.
                assert sorted(described_dirs(kafka_lib, cluster.bootstrap, topic)[node_id]) == sorted([(str(home), False), (str(away), True)])
                node_admin = admin(cluster.nodes[node_id].bootstrap)
                alter_configs(node_admin, ConfigResource.Type.BROKER, str(node_id), {REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND: str(FAST_COPY_RATE)})
                wait_until(f"node {node_id}'s replica in {away}", lambda n=node_id, to=away: moved(dirs[n], topic, to) or None, TIMEOUT_S)  # type: ignore[misc]
                load.wait_for_more(50, f"after node {node_id}'s move")
                assert partition_state(cluster.bootstrap, topic) == (1, (1, 2, 3))
                assert described_dirs(kafka_lib, cluster.bootstrap, topic)[node_id] == [(str(away), False)]
        assert not load.errors, load.errors[:3]
        records, _ = read_to_end(cluster.bootstrap, topic, [0])
        assert_acked_once_at_their_offsets(records, prefill + load.acked)

        # Node 1, restarted, loads its replica from the dir it moved to and catches up from there.
        node1_home = replica_home(dirs[1], topic)[0]
        leader = cluster.nodes[1]
        leader.warm_up()
        leader.stop()
        wait_for_isr(cluster, topic, {2, 3})
        leader.start()
        wait_for_isr(cluster, topic, {1, 2, 3})
        assert moved(dirs[1], topic, node1_home)
        assert described_dirs(kafka_lib, cluster.bootstrap, topic)[1] == [(str(node1_home), False)]
        # Every record read above, in node 1's new dir: its log is node 2's byte for byte.
        wait_until(
            "node 1's replica byte for byte node 2's",
            lambda: replica_log(dirs[1], topic) == replica_log(dirs[2], topic) or None,
            TIMEOUT_S,
        )
    finally:
        cluster.close()
