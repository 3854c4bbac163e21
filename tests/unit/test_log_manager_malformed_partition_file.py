"""One partition's malformed `leader-epoch-checkpoint` or `partition.metadata` at start-up: as in Kafka 4.4,
whose CheckpointFile and PartitionMetadataFile read a malformed line as an IOException, the log dir
goes offline through the LogDirFailureChannel. Its logs are not the node's, the other dirs load and
serve, and a node left with no live dir halts ("Shutdown broker because all log dirs in ... have
failed", the LogDirFailureHandler's rule). Kafka, run on the same files, logs "Error while reading
checkpoint file <path>" and takes the dir offline; alone, the dir ends the broker with exit code 1."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_dir_failure_channel import LogDirFailureChannel
from storage.log_manager import LogManager
from storage.meta_properties import MetaProperties, random_directory_id, write_meta_properties
from tests.unit.batch_factory import FakeClock, make_batch

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"
# Kafka's CheckpointReadBuffer reads "0 0 0" as a malformed line (three fields, two expected).
MALFORMED = {"leader-epoch-checkpoint": "0\n1\n0 0 0\n", "partition.metadata": "version: 0\ntopic_id: not-a-uuid\n"}


def stopped_node(dirs: list[Path]) -> dict[tuple[str, int], Path]:
    """Two partitions in each dir, written and cleanly shut down; where each partition's folder is."""
    for d in dirs:
        write_meta_properties(d, MetaProperties(cluster_id=CLUSTER, node_id=1, directory_id=random_directory_id()))
    m = LogManager(dirs, LogConfig(), FakeClock())
    m.startup()
    folders = {}
    for p in range(2 * len(dirs)):
        plog = m.get_or_create_log("t", p, m.default_config, uuid.uuid4())
        plog.append_as_leader(memoryview(make_batch([b"v"])), 0)
        folders[("t", p)] = plog.dir
    m.shutdown()
    return folders


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_partition_file_takes_its_dir_offline_and_the_other_dir_loads(tmp_path: Path, name: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    folders = stopped_node([a, b])
    victim = next(folder for folder in folders.values() if folder.parent == b)
    (victim / name).write_text(MALFORMED[name])
    before = {p: p.read_bytes() for p in b.rglob("*") if p.is_file()}

    channel = LogDirFailureChannel()
    m = LogManager([a, b], LogConfig(), FakeClock(), channel)
    m.startup()

    assert channel.offline_log_dirs == [b] and m.live_log_dirs == [a]
    assert sorted(m.logs) == sorted(key for key, folder in folders.items() if folder.parent == a)
    assert all(plog.log_end_offset == 1 for plog in m.all_logs())
    # Nothing in the offline dir was rewritten: its data waits there for an operator.
    assert {p: p.read_bytes() for p in b.rglob("*") if p.is_file()} == before
    m.shutdown()


def test_a_malformed_epoch_checkpoint_in_the_only_dir_ends_the_start_with_the_dir_offline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folders = stopped_node([data])
    (folders[("t", 0)] / "leader-epoch-checkpoint").write_text(MALFORMED["leader-epoch-checkpoint"])
    channel = LogDirFailureChannel()
    heard: list[Path] = []
    channel.listener = heard.append
    m = LogManager([data], LogConfig(), FakeClock(), channel)
    with pytest.raises(KafkaStorageError, match="malformed leader epoch checkpoint"):
        m.startup()
    assert heard == [data] and m.live_log_dirs == [] and m.logs == {}
