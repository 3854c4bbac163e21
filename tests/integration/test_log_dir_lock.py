"""Issue 36: one process at a time on a node's directories, Apache Kafka 4.4 or kbroker, by Kafka's `.lock`.

Kafka 4.4 locks each log dir (LogManager.lockLogDirs) and a metadata log dir of its own
(KafkaRaftManager.lockDataDir) with FileChannel.tryLock, a POSIX record lock on Linux, and deletes
the file on a clean shutdown (FileLock.destroy); kbroker does the same (storage/file_lock.py), so
each refuses a directory the other runs on, with Kafka's message. One data directory, one
server.properties, written by Kafka's StorageTool:

    Kafka runs      -> `kbroker serve` on the same server.properties exits 1 with Kafka's line and
                       changes no byte of the directory (Kafka is SIGSTOPped meanwhile, so that its
                       own writes hold still while the files are compared)
    Kafka stops     -> no .lock left; kbroker starts on it: `kbroker storage info` names kbroker's
                       process as the holder, a second kbroker exits 1 with the line and changes
                       nothing, and a Kafka controller on the directory (other ports) exits 1 with
                       Kafka's own "Failed to acquire lock" from KafkaRaftManager
    kbroker stops   -> no .lock left; one partition's leader-epoch-checkpoint made malformed, the
                       next start takes the dir offline and, the node's only dir, halts with exit
                       code 1, as Kafka 4.4 does on the same damage ("Error while reading checkpoint
                       file ..." then "Shutdown broker because all log dirs in ... have failed").

The Kafka controller, not a combined node, is what tries the directory kbroker holds: a combined
Kafka node opens the metadata log and writes to it (Raft truncation, quorum-state) before its
LogManager's lock fails, as a second Kafka does on a directory the first one runs on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer

from benchmarks.apache_kafka import free_ports
from tests.integration.conftest import REPO, START_TIMEOUT_S
from tests.integration.kafka_node_dir import KafkaNodeDir
from tests.integration.helpers import create_topic

TIMEOUT_S = 60
TOPIC = "locked"


def files(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.rglob("*")) if p.is_file()}


def kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KBROKER_LOG_FORMAT="json", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def locked_message(directory: Path) -> str:
    return f"Failed to acquire lock on file .lock in {directory}. A Kafka instance in another process or thread is using this directory."


def refused_without_a_change(pid: int, directory: Path, attempt: list[str]) -> subprocess.CompletedProcess[str]:
    """``attempt`` run while process ``pid`` holds ``directory``, stopped meanwhile so that the
    bytes hold still: what it answered, after checking that no byte or mtime changed."""
    os.kill(pid, signal.SIGSTOP)
    try:
        before = files(directory)
        env = dict(os.environ, KBROKER_LOG_FORMAT="json", PYTHONPATH=str(REPO))
        result = subprocess.run(attempt, cwd=directory.parent, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert files(directory) == before
    finally:
        os.kill(pid, signal.SIGCONT)
    return result


class Node(KafkaNodeDir):
    """One Kafka node's directory and server.properties, and the kbroker process that shares them."""

    def __init__(self, root: Path, lib: Path) -> None:
        super().__init__(root, lib, {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500"})
        self.serve = [sys.executable, "-m", "broker", "serve", "--config", str(self.kafka.config_file)]

    def kafka_controller_command(self) -> list[str]:
        """A Kafka controller of the same node id and log.dirs on ports of its own."""
        (port,) = free_ports(1)
        config = self.kafka.node_dir / "controller.properties"
        props = {
            "process.roles": "controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data),
        }
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return self.kafka.java("kafka.Kafka", str(config))


@pytest.fixture(scope="module")
def node(kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("lock"), kafka_lib)
    yield n
    n.close()


def test_kafka_and_kbroker_refuse_a_directory_the_other_runs_on(node: Node) -> None:
    lock = node.data / ".lock"
    node.kafka.launch()
    node.kafka.await_started()
    assert node.kafka.proc is not None and lock.exists()

    # kbroker on Kafka's running directory: Kafka's line, exit 1, not a byte changed.
    result = refused_without_a_change(node.kafka.proc.pid, node.data, node.serve)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == f"error: {locked_message(node.data)}", result
    assert "Traceback" not in result.stderr

    node.kafka.stop()
    assert not lock.exists()  # Kafka's FileLock.destroy on a clean shutdown

    node.kbroker.start()
    assert node.kbroker.proc is not None and lock.exists()
    info = kbroker("storage", "info", "-c", str(node.kafka.config_file))
    assert info.returncode == 1 and f".lock is locked by process {node.kbroker.proc.pid}: a broker is running on this directory" in info.stdout, info
    create_topic(node.kbroker.bootstrap, TOPIC, partitions=1)
    producer = Producer({"bootstrap.servers": node.kbroker.bootstrap, "acks": "all"})
    producer.produce(TOPIC, b"v")
    assert producer.flush(TIMEOUT_S) == 0

    # A second kbroker: the same line, nothing changed.
    result = refused_without_a_change(node.kbroker.proc.pid, node.data, node.serve)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == f"error: {locked_message(node.data)}", result
    # Kafka on kbroker's directory: Kafka's own refusal.
    result = refused_without_a_change(node.kbroker.proc.pid, node.data, node.kafka_controller_command())
    output = result.stdout + result.stderr
    assert result.returncode == 1 and f"org.apache.kafka.common.KafkaException: {locked_message(node.data)}" in output, output[-3000:]

    node.kbroker.stop()
    assert not lock.exists()

    # A malformed leader-epoch-checkpoint (Kafka's CheckpointReadBuffer: three fields, two expected).
    (node.data / f"{TOPIC}-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 0 0\n")
    node.kbroker.launch()
    assert node.kbroker.proc is not None and node.kbroker.proc.wait(START_TIMEOUT_S) == 1, node.kbroker.tail()
    node.kbroker.kill()  # only closes its log: the process is gone
    errors = [e for e in node.kbroker.log_events(current_run=True) if e.get("level") in ("error", "critical")]
    assert [(e["event"], e.get("dir"), e.get("reason")) for e in errors] == [
        ("log_dir.offline", str(node.data), None),
        ("node.halting", None, f"Shutdown broker because all log dirs in {node.data} have failed"),
    ], node.kbroker.tail()
    assert "malformed leader epoch checkpoint" in errors[0]["cause"]
