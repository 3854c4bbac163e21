"""partition.metadata: recorded in memory, written and fsynced later, and a crash before that is harmless."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.partition_metadata import PartitionMetadataFile, flush_partition_metadata, uuid_to_kafka_string
from tests.unit.batch_factory import FakeClock, make_batch

TOPIC_ID = uuid.UUID("5f5e8a2c-6b7d-4c7e-9a51-0d3f2b1c4e6a")


def test_record_then_flush(tmp_path: Path) -> None:
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert f.read() is None and not f.dirty
    f.record(TOPIC_ID)
    assert f.dirty and f.read() == TOPIC_ID
    assert not (tmp_path / "partition.metadata").exists()
    flush_partition_metadata([f])
    assert not f.dirty and f.read() == TOPIC_ID
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {uuid_to_kafka_string(TOPIC_ID)}\n"
    assert not (tmp_path / "partition.metadata.tmp").exists()
    assert PartitionMetadataFile(tmp_path / "partition.metadata").read() == TOPIC_ID


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
    folder.rmdir()
    f.maybe_flush()
    assert not f.dirty


def test_a_deleted_partition_never_writes_into_a_recreated_folder(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    old = manager.get_or_create_log("t", 0, LogConfig(), TOPIC_ID)
    manager.delete_log("t", 0)
    new_id = uuid.uuid4()
    manager.get_or_create_log("t", 0, LogConfig(), new_id)
    old.partition_metadata_file.maybe_flush()  # the flush job's list still held the old file
    flush_partition_metadata(manager.take_unflushed_partition_metadata())
    assert PartitionMetadataFile(tmp_path / "t-0" / "partition.metadata").read() == new_id
    manager.shutdown()


def test_discard_does_not_wait_for_a_flush_in_its_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deleting a topic of 8,192 partitions right after creating it discarded each file on the
    # event loop while the flush thread held its lock across two fsyncs: over a minute's stall.
    folder = tmp_path / "t-0"
    folder.mkdir()
    f = PartitionMetadataFile(folder / "partition.metadata")
    f.record(TOPIC_ID)
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        in_fsync.set()
        assert release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    flusher = threading.Thread(target=f.maybe_flush)
    flusher.start()
    assert in_fsync.wait(10)
    discarded = threading.Thread(target=f.discard)
    discarded.start()
    discarded.join(2)
    assert not discarded.is_alive(), "discard waited for the flush's fsync"
    # The partition is deleted (its folder renamed) and created again under the same name
    # while the old id is still being written: the old id lands in the renamed folder only.
    folder.rename(tmp_path / "t-0.x-delete")
    folder.mkdir()
    release.set()
    flusher.join(10)
    assert not f.dirty
    assert not (folder / "partition.metadata").exists() and not (folder / "partition.metadata.tmp").exists()


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


def test_the_first_append_writes_it_before_the_records(tmp_path: Path) -> None:
    # As Kafka's UnifiedLog.append (maybeFlushMetadataFile first): a Kafka 4.4 node that opens the
    # dir after a crash sets a log holding records but no topic id aside as a stray.
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    plog = manager.get_or_create_log("t", 0, LogConfig(), TOPIC_ID)
    assert not (tmp_path / "t-0" / "partition.metadata").exists()
    plog.append_as_leader(memoryview(make_batch([b"v"])), 0)
    plog.close_handlers()  # crash: the flush job never ran
    assert PartitionMetadataFile(tmp_path / "t-0" / "partition.metadata").read() == TOPIC_ID


def test_a_crash_before_the_write_records_the_id_again_on_restart(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    manager.get_or_create_log("t", 0, LogConfig(), TOPIC_ID).close_handlers()  # crash: nothing written
    assert not (tmp_path / "t-0" / "partition.metadata").exists()
    again = LogManager(tmp_path, LogConfig(), FakeClock())
    again.startup()
    loaded = again.get_log("t", 0)
    assert loaded is not None and loaded.topic_id is None
    assert again.get_or_create_log("t", 0, LogConfig(), TOPIC_ID) is loaded and loaded.topic_id == TOPIC_ID
    flush_partition_metadata(again.take_unflushed_partition_metadata())
    assert PartitionMetadataFile(tmp_path / "t-0" / "partition.metadata").read() == TOPIC_ID
    again.shutdown()
