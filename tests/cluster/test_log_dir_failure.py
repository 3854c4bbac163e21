"""A node whose log dir fills up (issue: log dir failure). Three combined nodes, node 3's log dir
(its partitions and the metadata log) on a small tmpfs, RF=3 min.insync.replicas=2, idempotent
acks=all producers on a partition node 3 leads and on one it follows; then the tmpfs is filled.

As Kafka's broker with a single log dir, node 3 takes the dir offline at its first failed write
(LogDirFailureChannel: one error line with the dir and ENOSPC, no traceback), answers
KAFKA_STORAGE_ERROR for what touched it meanwhile, and halts with exit code 1 since no log dir is
left. The other two keep acknowledging acks=all writes; once the space is freed and node 3
restarted, it recovers its log (truncating at most a torn tail), catches up and rejoins every
ISR, and every acknowledged record is on all three replicas, byte for byte.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.chaos.log_dir_fault import FullDisk
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state
from tests.cluster.test_replication_faults import (
    LAG_MS,
    SESSION_MS,
    TIMEOUT_S,
    Load,
    assert_acked_once_at_their_offsets,
    raw_produce,
    read_to_end,
    replica_bytes,
    restart,
    wait_for_isr,
)
from tests.integration.helpers import unique_topic

FULL_NODE = 3
DISK_MB = 16
PARTITIONS = 3
HW_CHECKPOINT_MS = 500


class Phase(Load):
    """Load whose values name the phase and partition too: the test's four loads write distinct values."""

    def __init__(self, bootstrap: str, topic: str, partition: int, phase: str) -> None:
        super().__init__(bootstrap, topic, partition)
        self._prefix = f"{phase}-{partition}".encode()

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            if len(self._producer) < 500:
                for _ in range(20):
                    self._producer.produce(self.topic, value=b"%s-%d" % (self._prefix, sent), partition=self.partition, on_delivery=self._done)
                    sent += 1
            until = time.monotonic() + 0.1
            while (left := until - time.monotonic()) > 0:
                self._producer.poll(left)


def events(log_path: Path, since: int = 0) -> list[dict[str, object]]:
    """The JSON log lines a node wrote from byte ``since`` of its log on."""
    out = []
    with open(log_path, "rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": "<not json>", "line": line})
    return out


def test_a_full_log_dir_takes_its_node_out_and_loses_no_acknowledged_record(tmp_path: Path) -> None:
    cluster = KafkaCluster(
        tmp_path,
        combined=3,
        overrides={
            "broker.session.timeout.ms": str(SESSION_MS),
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": str(LAG_MS),
            "replica.socket.timeout.ms": "5000",
            "replica.high.watermark.checkpoint.interval.ms": str(HW_CHECKPOINT_MS),
        },
    )
    node = cluster.nodes[FULL_NODE]
    disk = FullDisk(node.data_dir, DISK_MB)
    if not disk.mount():
        pytest.skip("this machine refuses a tmpfs mount: the full-disk fault was not run")
    try:
        cluster.start()
        topic = unique_topic("full")
        create(cluster.bootstrap, topic, partitions=PARTITIONS, min_isr=2)
        leaders = {p: wait_until(f"a leader for {topic}-{p}", lambda p=p: (lambda s: s[0] if s[0] >= 0 and len(s[1]) == 3 else None)(partition_state(cluster.bootstrap, topic, p)), TIMEOUT_S) for p in range(PARTITIONS)}
        led = next((p for p, leader in leaders.items() if leader == FULL_NODE), None)
        followed = next(p for p, leader in leaders.items() if leader != FULL_NODE)
        assert led is not None, f"node {FULL_NODE} leads none of {leaders}: the placement changed"
        log_mark = node.log_path.stat().st_size

        with Phase(cluster.bootstrap, topic, led, "before") as before_full, Phase(cluster.bootstrap, topic, followed, "before") as before_healthy:
            before_full.wait_for_more(100, "before the disk fills")
            before_healthy.wait_for_more(100, "before the disk fills")
        # Once the last high watermarks are checkpointed, node 3 has no write of its own due soon
        # (only the metadata log's, a no-op batch a page holds dozens of): the produce below is
        # most likely the first write to meet the full disk, which it is the point to see.
        time.sleep(2 * HW_CHECKPOINT_MS / 1000)
        disk.fill()
        # Straight to the full node, more than a page so that it cannot fit in the segment's last
        # one: KAFKA_STORAGE_ERROR, or no answer if a background write (a checkpoint, the metadata
        # log) hit the full disk first and the node has halted already.
        code, _ = raw_produce(node.bootstrap, topic, led, b"x" * 16384)
        assert code in (ErrorCode.kafka_storage_error, ErrorCode.request_timed_out), ErrorCode(code).name
        wait_until(f"node {FULL_NODE} to halt", lambda: not node.running or None, TIMEOUT_S)
        assert node.proc is not None and node.proc.returncode == 1, f"exit code {node.proc and node.proc.returncode}"
        lines = events(node.log_path, log_mark)
        offline = [e for e in lines if e.get("event") == "log_dir.offline"]
        assert len(offline) == 1, offline
        assert offline[0]["level"] == "error" and offline[0]["dir"] == str(node.data_dir) and "ENOSPC" in str(offline[0]["cause"]), offline[0]
        halting = [e for e in lines if e.get("event") == "node.halting"]
        assert len(halting) == 1 and ("all log dirs" in str(halting[0]["reason"]) or "metadata log dir" in str(halting[0]["reason"])), halting
        assert not [e for e in lines if "exception" in e or "Traceback" in json.dumps(e)], "a traceback was logged"

        with Phase(cluster.bootstrap, topic, led, "after") as on_full, Phase(cluster.bootstrap, topic, followed, "after") as on_healthy:
            # Both partitions keep taking acks=all writes on the two healthy nodes.
            on_full.wait_for_more(100, f"with node {FULL_NODE} down")
            on_healthy.wait_for_more(100, f"with node {FULL_NODE} down")
            disk.free()
            restart_mark = node.log_path.stat().st_size
            restart(cluster, FULL_NODE)
            for p in range(PARTITIONS):
                wait_for_isr(cluster, topic, {1, 2, 3}, p)
            on_full.wait_for_more(100, f"with node {FULL_NODE} back")

        # Recovery found at most a torn tail: nothing before the last segment of a log was cut.
        # (Indexes missing or rebuilt are not a loss: they are derived, and rebuilt after any crash.)
        recovered = events(node.log_path, restart_mark)
        assert not [e for e in recovered if e.get("event") == "log.recovery.invalid_offset"], recovered
        assert all(e.get("later_segments_deleted") == 0 for e in recovered if e.get("event") == "log.recovery.truncated")
        records, _ = read_to_end(cluster.bootstrap, topic, [led, followed], isolation_level="read_uncommitted")
        assert_acked_once_at_their_offsets(records, before_full.acked + before_healthy.acked + on_full.acked + on_healthy.acked)
        for p in (led, followed):
            wait_until(
                f"the three replicas of {topic}-{p} to hold the same bytes",
                lambda p=p: len({replica_bytes(cluster, n, topic, p) for n in cluster.nodes}) == 1 or None,
                TIMEOUT_S,
            )
    finally:
        cluster.close()
        disk.unmount()
