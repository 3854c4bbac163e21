"""README's two "in five minutes" walks, run as written: its shell blocks go to bash unchanged
but for the ports (the tests' own instead of 9092-9094) and a ``--bootstrap-server`` where a
command relies on the default 127.0.0.1:9092. The single node is a ``kbroker serve`` like
``make run``'s; the cluster is ``python -m broker.local_cluster``, what ``make cluster`` runs,
stopped with SIGINT as Ctrl-C stops it. tests/unit/test_docs.py checks that every other command
of the documents parses; these two walks are what a newcomer types first, so they are run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.cluster.cluster import wait_until
from tests.integration.conftest import REPO, BrokerProcess
from tests.ports import consecutive_free_ports

README = REPO / "README.md"
TIMEOUT_S = 120.0


def walk(section: str) -> list[str]:
    """The commands of the section's block that starts by activating the virtualenv."""
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", body, re.S)
    block = next(b for b in blocks if b.startswith(". .venv/bin/activate"))
    return [line for line in block.splitlines() if line.strip()]


def as_run_here(commands: list[str], ports: dict[int, int]) -> str:
    lines = ["set -euo pipefail"]
    for command in commands:
        command = command.split(" # ", 1)[0].rstrip()
        for documented, ours in ports.items():
            command = command.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{ours}")
        if command.split("|")[-1].strip().startswith("kbroker ") and "--bootstrap-server" not in command:
            command += f" --bootstrap-server 127.0.0.1:{ports[9092]}"
        lines.append(command)
    return "\n".join(lines) + "\n"


def run_walk(script: str) -> str:
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_single_node_in_five_minutes(broker: BrokerProcess) -> None:
    out = run_walk(as_run_here(walk("A single node in five minutes"), {9092: broker.port}))
    assert "k1\thello" in out and "k2\tworld" in out, out
    assert re.search(r"Topic: orders\s.*PartitionCount: 6", out), out


def test_a_3_node_cluster_in_five_minutes(tmp_path: Path) -> None:
    port, controller_port = consecutive_free_ports(3), consecutive_free_ports(3)
    cluster = subprocess.Popen(
        [sys.executable, "-m", "broker.local_cluster", "--dir", str(tmp_path / "cluster"), "--port", str(port), "--controller-port", str(controller_port), "--console-port", "0"],
        cwd=REPO,
        stdout=open(tmp_path / "cluster.log", "wb"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        wait_until("three brokers registered", lambda: len(admin.list_topics(timeout=5).brokers) == 3, TIMEOUT_S)
        out = run_walk(as_run_here(walk("A 3-node cluster in five minutes"), {9092 + i: port + i for i in range(3)}))
        assert all(f"\n{v}\n" in f"\n{out}" for v in "abc"), out
        assert re.search(r"Partition: 0\s+Leader: \d\s+Replicas: \d,\d,\d\s+Isr: \d,\d,\d", out), out
        assert re.search(r"LeaderId:\s+\d", out), out
    finally:
        cluster.send_signal(signal.SIGINT)
        try:
            code = cluster.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            raise
    # Ctrl-C is a graceful stop of every node.
    assert code == 0, (tmp_path / "cluster.log").read_text()[-3000:]
