"""A log dir that fails while the node starts: loading the partition logs (Kafka's LogManager.loadLogs),
the metadata log and its quorum-state file, or writing meta.properties. As Kafka's, the node logs the
failure and exits 1: one error line naming the dir and the cause, no traceback. The errors are the
file system's own: a directory where the node expects a file answers EISDIR to open, read and write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from tests.integration.conftest import START_TIMEOUT_S, BrokerProcess, StartBroker


def failed_start(broker: BrokerProcess) -> list[dict[str, Any]]:
    """Start ``broker``, expect exit code 1; the log lines of that run."""
    broker.launch()
    assert broker.proc is not None
    assert broker.proc.wait(START_TIMEOUT_S) == 1, broker.tail()
    broker.kill()  # only closes its log: the process is gone
    events = broker.log_events(current_run=True)
    assert not [e for e in events if "Traceback" in e.get("line", "")], broker.tail()
    return events


def replace_with_directory(path: Path) -> None:
    assert path.is_file()
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("{topic}-0/leader-epoch-checkpoint", "Error while loading log dir {dir}"),
        ("__cluster_metadata-0/quorum-state", "Error while loading the metadata log in dir {dir}"),
    ],
    ids=["partition-log", "metadata-log"],
)
def test_a_log_dir_that_fails_while_loading_ends_the_start_in_one_error_line_and_exit_code_1(
    broker_factory: StartBroker, topic_name: str, broken: str, message: str
) -> None:
    broker = broker_factory()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    producer.send(topic_name, b"v").get(timeout=30)
    producer.close()
    broker.stop()
    replace_with_directory(broker.data_dir / broken.format(topic=topic_name))

    events = failed_start(broker)
    errors = [e for e in events if e.get("level") in ("error", "critical")]
    assert [(e["event"], e["level"]) for e in errors] == [("log_dir.offline", "error"), ("node.halting", "critical")], broker.tail()
    offline = errors[0]
    assert offline["dir"] == str(broker.data_dir) and offline["cause"] == "EISDIR: Is a directory"
    assert offline["error"] == message.format(dir=broker.data_dir)
    assert "exc_info" not in offline and "exception" not in offline
    assert errors[1]["reason"] == f"Shutdown broker because all log dirs in {broker.data_dir} have failed"


def test_a_meta_properties_that_cannot_be_written_ends_the_start_in_one_error_line_and_exit_code_1(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    # The zero-config node formats its dir: meta.properties is written through this temporary file.
    (broker.data_dir / "meta.properties.tmp").mkdir(parents=True)
    events = failed_start(broker)
    assert [e["line"] for e in events if e["event"] == "raw"] == [
        f"error: cannot write {broker.data_dir / 'meta.properties'}: [Errno 21] Is a directory: '{broker.data_dir / 'meta.properties.tmp'}'"
    ], broker.tail()
