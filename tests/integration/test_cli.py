"""The kbroker CLI's client commands against a real broker."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.conftest import REPO


def kbroker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO, input=stdin, capture_output=True, text=True, timeout=60)


def test_topics_produce_consume_configs(shared_broker, topic_name: str) -> None:
    b = ["--bootstrap-server", shared_broker.bootstrap]
    assert kbroker("topics", "create", topic_name, "--partitions", "2", "--config", "retention.ms=86400000", *b).returncode == 0
    assert topic_name in kbroker("topics", "list", *b).stdout.split()
    produced = kbroker("produce", topic_name, "--key-separator", ":", "--header", "src=cli", "--partition", "1", *b, stdin="k1:hello\nk2:world\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kbroker("consume", topic_name, "--from-beginning", "--partition", "1", "--max-messages", "2", "--print-key", *b)
    assert consumed.stdout.splitlines() == ["k1\thello", "k2\tworld"]
    assert kbroker("topics", "alter", topic_name, "--partitions-to", "3", "--config", "segment.bytes=1048576", *b).returncode == 0
    described = kbroker("topics", "describe", topic_name, *b).stdout
    assert "PartitionCount: 3" in described and "retention.ms=86400000" in described and "segment.bytes=1048576" in described
    # As kafka-topics.sh: each partition's eligible leader replicas (none while the ISR is whole), from DescribeTopicPartitions.
    assert all("\tIsr: 1\tElr: \tLastKnownElr: " in line for line in described.splitlines()[1:]), described
    configs = kbroker("configs", "describe", "--entity-type", "topics", "--entity-name", topic_name, *b).stdout
    assert "retention.ms=86400000 (DYNAMIC_TOPIC_CONFIG)" in configs
    assert kbroker("topics", "delete", topic_name, *b).returncode == 0
    missing = kbroker("topics", "delete", topic_name, *b)
    assert missing.returncode == 1 and "Unknown topic" in missing.stderr


def test_clear_errors() -> None:
    nobody = kbroker("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert nobody.returncode == 1 and "no broker answered at 127.0.0.1:1" in nobody.stderr
    bad = kbroker("serve", "--override", "num.partitions=abc")
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1].startswith("error: Invalid value 'abc' for configuration num.partitions")
    for command in ("serve", "storage info"):
        missing = kbroker(*command.split(), "--config", "/nonexistent/server.properties")
        assert (missing.returncode, missing.stderr) == (1, "error: cannot read /nonexistent/server.properties: No such file or directory\n"), command
