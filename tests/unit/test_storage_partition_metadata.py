"""partition.metadata: recorded at once, fsynced later, and a crash before the fsync is harmless."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.partition_metadata import PartitionMetadataFile, flush_partition_metadata, uuid_to_kafka_string
from tests.unit.batch_factory import FakeClock

TOPIC_ID = uuid.UUID("5f5e8a2c-6b7d-4c7e-9a51-0d3f2b1c4e6a")


def test_record_then_flush(tmp_path: Path) -> None:
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert f.read() is None and not f.dirty
    f.record(TOPIC_ID)
    assert f.dirty
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {uuid_to_kafka_string(TOPIC_ID)}\n"
    assert not (tmp_path / "partition.metadata.tmp").exists()
    flush_partition_metadata([f])
    assert not f.dirty and f.read() == TOPIC_ID


def test_empty_file_left_by_a_crash_reads_as_unrecorded(tmp_path: Path) -> None:
    (tmp_path / "partition.metadata").write_bytes(b"")
    assert PartitionMetadataFile(tmp_path / "partition.metadata").read() is None


def test_malformed_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "partition.metadata").write_text("version: 7\ntopic_id: x\n")
    with pytest.raises(KafkaStorageError):
        PartitionMetadataFile(tmp_path / "partition.metadata").read()


def test_flush_after_the_partition_was_deleted_is_quiet(tmp_path: Path) -> None:
    folder = tmp_path / "t-0"
    folder.mkdir()
    f = PartitionMetadataFile(folder / "partition.metadata")
    f.record(TOPIC_ID)
    (folder / "partition.metadata").unlink()
    folder.rmdir()
    f.maybe_flush()
    assert not f.dirty


def test_log_manager_hands_new_logs_metadata_to_the_flush_job(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    plog = manager.get_or_create_log("t", 0, LogConfig(), TOPIC_ID)
    assert plog.partition_metadata_file.dirty
    files = manager.take_unflushed_partition_metadata()
    assert files == [plog.partition_metadata_file] and manager.take_unflushed_partition_metadata() == []
    flush_partition_metadata(files)
    assert not plog.partition_metadata_file.dirty
    other = manager.get_or_create_log("t", 1, LogConfig(), TOPIC_ID)
    other.flush()  # a log flush (and so a clean shutdown) fsyncs it too
    assert not other.partition_metadata_file.dirty
    manager.shutdown()
