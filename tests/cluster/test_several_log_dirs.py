"""Three combined nodes, node 3 with two log dirs (log.dirs=data,data2; the metadata log in data).
Node 3's second dir fails at run time (removed, then records appended to its replicas there: its
next replication-offset-checkpoint fails with ENOENT): node 3
takes it offline alone, names it in its next BrokerHeartbeat (OfflineLogDirs), and the controller
takes node 3 out of the leadership and ISR of the replicas in that dir only (Kafka 4.4's
handleDirectoriesOffline), which it can since node 3 told it which dir holds each replica
(AssignReplicasToDirs). Node 3 keeps running and keeps leading its replicas in the other dir."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state
from tests.cluster.test_replication_faults import TIMEOUT_S
from tests.integration.helpers import unique_topic
from tests.integration.test_several_log_dirs import append_to_a_removed_dir

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
