"""LogManager and checkpoint files: startup, clean shutdown marker, checkpoints, deletion, retention."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from storage.checkpoints import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from storage.log_config import LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LogManager
from tests.unit.batch_factory import FakeClock, make_batch

BASE_TS = 1_700_000_000_000


def produce(manager: LogManager, topic: str, partition: int, count: int, config: LogConfig | None = None, timestamp: int = BASE_TS) -> None:
    plog = manager.get_or_create_log(topic, partition, config or manager.default_config, None)
    for _ in range(count):
        plog.append_as_leader(memoryview(make_batch([b"m" * 50], keys=[b"k"], timestamps=[timestamp])), 0)
        plog.update_high_watermark(plog.log_end_offset)


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("b-topic", 1): 7, ("a-topic", 0): 42, ("with-dash-x", 12): 0}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\na-topic 0 42\nb-topic 1 7\nwith-dash-x 12 0\n"
    assert read_offset_checkpoint(path) == offsets
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert read_offset_checkpoint(tmp_path / "missing") == {}
    write_offset_checkpoint(path, {})
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize("text", ["", "0\n"])
def test_a_checkpoint_kafka_created_and_never_wrote_is_empty(tmp_path: Path, text: str) -> None:
    # Kafka creates each checkpoint file empty when it opens it; one killed before its first
    # checkpoint leaves it so, and Kafka's own reader takes it for no entries.
    path = tmp_path / "cp"
    path.write_text(text)
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na zero 1\n", "\n"])
def test_malformed_checkpoint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        read_offset_checkpoint(path)


def test_startup_shutdown_and_clean_marker(tmp_path: Path) -> None:
    clock = FakeClock()
    log_dir = tmp_path / "data"
    manager = LogManager(log_dir, LogConfig(), clock)
    manager.startup()
    assert log_dir.is_dir() and not manager.had_clean_shutdown
    produce(manager, "orders", 0, 3)
    produce(manager, "my-dashed-topic", 2, 5)
    produce(manager, "__cluster_metadata", 0, 1)
    manager.get_log("orders", 0).maybe_increment_log_start_offset(1)  # type: ignore[union-attr]
    manager.shutdown()
    assert json.loads((log_dir / CLEAN_SHUTDOWN_FILE).read_text()) == {"version": 0, "brokerEpoch": -1}
    assert read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT) == {("orders", 0): 3, ("my-dashed-topic", 2): 5, ("__cluster_metadata", 0): 1}
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {("orders", 0): 1, ("my-dashed-topic", 2): 0, ("__cluster_metadata", 0): 0}

    again = LogManager(log_dir, LogConfig(), clock)
    again.startup()
    assert again.had_clean_shutdown and not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert {k: (v.log_start_offset, v.log_end_offset, v.recovery_point) for k, v in again.logs.items()} == {
        ("orders", 0): (1, 3, 3),
        ("my-dashed-topic", 2): (0, 5, 5),
    }  # __cluster_metadata-0 is left on disk for the metadata quorum, which opens it itself
    # No shutdown this time: the next start recovers from the checkpointed recovery points.
    again.get_log("orders", 0).append_as_leader(memoryview(make_batch([b"late"])), 0)  # type: ignore[union-attr]
    again.checkpoint_recovery_points()
    for plog in again.all_logs():
        plog.close_handlers()
    third = LogManager(log_dir, LogConfig(), clock)
    third.startup()
    assert not third.had_clean_shutdown
    orders = third.get_log("orders", 0)
    assert orders is not None and orders.log_end_offset == 4 and orders.recovery_point == 3
    third.shutdown()


def test_startup_removes_deleted_dirs_and_skips_strangers(tmp_path: Path) -> None:
    log_dir = tmp_path / "data"
    (log_dir / "gone-0.0123abcd-delete").mkdir(parents=True)
    (log_dir / "gone-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"")
    (log_dir / "not a partition").mkdir()
    (log_dir / "meta.properties").write_text("version=1\n")
    manager = LogManager(log_dir, LogConfig(), FakeClock())
    manager.startup()
    assert manager.all_logs() == []
    assert not (log_dir / "gone-0.0123abcd-delete").exists() and (log_dir / "not a partition").exists()
    manager.shutdown()


def test_unreadable_checkpoint_means_full_recovery(tmp_path: Path) -> None:
    log_dir = tmp_path / "data"
    manager = LogManager(log_dir, LogConfig(), FakeClock())
    manager.startup()
    produce(manager, "t", 0, 4)
    manager.shutdown()
    (log_dir / RECOVERY_POINT_CHECKPOINT).write_text("garbage")
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    again = LogManager(log_dir, LogConfig(), FakeClock())
    again.startup()
    plog = again.get_log("t", 0)
    assert plog is not None and plog.log_end_offset == 4 and plog.recovery_point == 0
    again.shutdown()


def test_get_or_create_log_and_topic_ids(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    first_id, second_id = uuid.uuid4(), uuid.uuid4()
    config = LogConfig.from_properties({"retention.ms": "1000"})
    plog = manager.get_or_create_log("t", 0, config, first_id)
    assert plog.topic_id == first_id and plog.config == config and plog.partition_metadata_file.read() == first_id
    plog.append_as_leader(memoryview(make_batch([b"old"])), 0)
    same = manager.get_or_create_log("t", 0, LogConfig(), first_id)
    assert same is plog and same.config == LogConfig()
    replaced = manager.get_or_create_log("t", 0, LogConfig(), second_id)  # the topic was recreated
    assert replaced is not plog and replaced.topic_id == second_id and replaced.log_end_offset == 0
    manager.update_config("t", 0, config)
    assert replaced.config == config
    manager.shutdown()


def test_delete_log_keeps_fds_until_the_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = LogManager(tmp_path, LogConfig.from_properties({"file.delete.delay.ms": "1000"}), clock)
    manager.startup()
    produce(manager, "doomed", 0, 2)
    plog = manager.get_log("doomed", 0)
    assert plog is not None
    fd = plog.active_segment.fd
    manager.delete_log("doomed", 0)
    assert manager.get_log("doomed", 0) is None
    # Renamed at once (a topic of the same name gets a fresh folder), removed by the background job.
    [renamed] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert renamed.name.startswith("doomed-0.") and renamed.name.endswith("-delete")
    manager.finish_deleting_logs(manager.take_deleted_logs())
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    assert os.pread(fd, 10, 0)  # an in-flight sendfile still reads the unlinked file
    clock.advance(999)
    assert not manager.take_deleted_logs()
    assert plog.active_segment.fd == fd
    clock.advance(1)
    due = manager.take_deleted_logs()
    assert due.logs == (plog,) and due.dirs == ()
    manager.finish_deleting_logs(due)
    assert plog.active_segment.fd == -1
    manager.delete_log("doomed", 0)  # unknown now: nothing to do
    manager.shutdown()


def test_cleanup_logs_and_pending_deletes(tmp_path: Path) -> None:
    clock = FakeClock(BASE_TS)
    config = LogConfig.from_properties({"segment.bytes": "300", "retention.ms": "1000", "file.delete.delay.ms": "0"})
    manager = LogManager(tmp_path, config, clock)
    manager.startup()
    produce(manager, "a", 0, 10)
    produce(manager, "b", 0, 10, LogConfig.from_properties({"segment.bytes": "300", "retention.ms": "1000", "cleanup.policy": "compact"}))
    clock.advance(10_000)
    assert manager.cleanup_logs() > 0
    a, b = manager.get_log("a", 0), manager.get_log("b", 0)
    assert a is not None and b is not None
    assert a.log_start_offset == a.log_end_offset == 10 and b.log_start_offset == 0
    assert list((tmp_path / "a-0").glob("*.deleted"))
    manager.delete_pending_segments()
    assert not list((tmp_path / "a-0").glob("*.deleted"))
    manager.shutdown()


def test_flush_dirty_logs_follows_flush_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = LogManager(tmp_path, LogConfig.from_properties({"flush.ms": "1000"}), clock)
    manager.startup()
    produce(manager, "t", 0, 3)
    plog = manager.get_log("t", 0)
    assert plog is not None and plog.recovery_point == 0
    clock.advance(500)
    manager.flush_dirty_logs()
    assert plog.recovery_point == 0
    clock.advance(600)
    manager.flush_dirty_logs()
    assert plog.recovery_point == 3
    manager.shutdown()


def test_meta_properties(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    generated = manager.ensure_meta_properties(1)
    props = dict(line.split("=", 1) for line in (tmp_path / "meta.properties").read_text().splitlines() if "=" in line)
    assert props["version"] == "1" and props["node.id"] == "1" and props["cluster.id"] == generated
    assert len(props["directory.id"]) == 22 and len(generated) == 22
    assert manager.ensure_meta_properties(1, None) == generated
    assert manager.ensure_meta_properties(1, generated) == generated
    with pytest.raises(ValueError):
        manager.ensure_meta_properties(1, "another-cluster")
    with pytest.raises(ValueError):
        manager.ensure_meta_properties(2)
    fresh = LogManager(tmp_path / "other", LogConfig(), FakeClock())
    fresh.startup()
    assert fresh.ensure_meta_properties(3, "MkU3OEVBNTcwNTJENDM2Qk") == "MkU3OEVBNTcwNTJENDM2Qk"
    assert fresh.log_dirs == [tmp_path / "other"]
