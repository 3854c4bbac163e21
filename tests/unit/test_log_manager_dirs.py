"""A LogManager of several log dirs (Kafka's JBOD): logs loaded from every dir, new logs placed as
Kafka 4.4's nextLogDirs places them, checkpoints and the clean-shutdown marker per dir, and a dir
that cannot be read or fails taken offline on its own."""

from __future__ import annotations

import errno
import json
import uuid
from pathlib import Path

import pytest

from storage.checkpoints import read_offset_checkpoint
from storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT
from storage.log_cleaner import CleanerConfig, LogCleaner
from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LogManager, CleanableLogs
from storage.meta_properties import MetaProperties, parse_kafka_uuid, random_directory_id, write_meta_properties
from tests.unit.batch_factory import FakeClock, make_batch

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"


def formatted(tmp_path: Path, *names: str) -> list[Path]:
    dirs = [tmp_path / n for n in names]
    for d in dirs:
        write_meta_properties(d, MetaProperties(cluster_id=CLUSTER, node_id=1, directory_id=random_directory_id()))
    return dirs


def manager(dirs: list[Path], clock: FakeClock | None = None) -> LogManager:
    m = LogManager(dirs, LogConfig(), clock or FakeClock())
    m.startup()
    return m


def create(m: LogManager, topic: str, partitions: int, target: uuid.UUID | None = None) -> list[Path]:
    return [m.get_or_create_log(topic, p, m.default_config, uuid.uuid4(), target).parent_dir for p in range(partitions)]


def produce(m: LogManager, topic: str, partition: int, count: int) -> None:
    plog = m.get_log(topic, partition)
    assert plog is not None
    for _ in range(count):
        plog.append_as_leader(memoryview(make_batch([b"v"], keys=[b"k"])), 0)
    plog.update_high_watermark(plog.log_end_offset)


def test_new_logs_go_to_the_dir_with_the_fewest(tmp_path: Path) -> None:
    a, b, c = formatted(tmp_path, "a", "b", "c")
    m = manager([a, b, c])
    # Ties in log.dirs order: a, b, c, then a again.
    assert create(m, "t", 4) == [a, b, c, a]
    assert m.next_log_dirs() == [b, c, a]
    # Each log knows its dir, and lives there on disk.
    assert all((plog.parent_dir / f"{t}-{p}").is_dir() for (t, p), plog in m.all_log_items())
    m.delete_log("t", 1)
    assert m.next_log_dirs() == [b, c, a]
    assert create(m, "u", 1) == [b]


def test_placement_skips_cordoned_and_offline_dirs_and_follows_the_assigned_dir(tmp_path: Path) -> None:
    a, b, c = formatted(tmp_path, "a", "b", "c")
    m = manager([a, b, c])
    m.cordoned_log_dirs = lambda: [tmp_path / "." / "a"]
    assert create(m, "t", 2) == [b, c]
    m.failure_channel.maybe_add_offline_log_dir(b, "test", OSError(errno.EIO, "I/O error"))
    assert create(m, "u", 2) == [c, c]
    # Every live dir cordoned: Kafka takes the first live one.
    m.cordoned_log_dirs = lambda: [a, c]
    assert m.next_log_dirs() == [a]
    # The metadata names the replica's dir: it goes there, whatever the counts.
    m.cordoned_log_dirs = tuple
    assert create(m, "v", 1, target=m.directory_ids[c]) == [c]
    # ... unless that dir is offline here: no stand-in log elsewhere.
    assert m.is_offline_directory(m.directory_ids[b]) and not m.is_offline_directory(uuid.UUID(int=1))
    with pytest.raises(KafkaStorageError, match="is offline"):
        create(m, "w", 1, target=m.directory_ids[b])
    assert m.get_log("w", 0) is None


def test_a_dir_that_fails_to_take_a_new_log_passes_it_to_the_next(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    (a / "t-0").write_text("not a directory")  # creating the log's folder in a fails (EEXIST/ENOTDIR)
    assert create(m, "t", 1) == [b]
    assert m.failure_channel.offline_log_dirs == [a] and m.live_log_dirs == [b]


def test_logs_load_from_every_dir_and_checkpoints_are_per_dir(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    create(m, "t", 3)
    for p in range(3):
        produce(m, "t", p, p + 1)
    m.shutdown(broker_epoch=7)
    for d, held in ((a, {("t", 0), ("t", 2)}), (b, {("t", 1)})):
        assert json.loads((d / CLEAN_SHUTDOWN_FILE).read_text()) == {"version": 0, "brokerEpoch": 7}
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
            assert set(read_offset_checkpoint(d / name)) == held
    assert read_offset_checkpoint(b / HIGH_WATERMARK_CHECKPOINT) == {("t", 1): 2}

    again = manager([a, b])
    assert again.had_clean_shutdown and again.clean_shutdown_broker_epoch == 7
    assert {k: plog.parent_dir for k, plog in again.all_log_items()} == {("t", 0): a, ("t", 1): b, ("t", 2): a}
    assert [again.get_log("t", p).log_end_offset for p in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
    assert again.take_new_logs() == {("t", 0), ("t", 1), ("t", 2)} and again.take_new_logs() == set()
    assert again.directory_ids == {d: parse_kafka_uuid(line.split("=", 1)[1]) for d in (a, b) for line in (d / "meta.properties").read_text().splitlines() if line.startswith("directory.id=")}
    again.shutdown(broker_epoch=8)


def test_the_clean_shutdown_epoch_needs_every_dir_to_agree(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    manager([a, b]).shutdown(broker_epoch=5)
    (b / CLEAN_SHUTDOWN_FILE).write_text(json.dumps({"version": 0, "brokerEpoch": 6}))
    m = manager([a, b])
    assert m.clean_shutdown_broker_epoch == -1
    m.shutdown(broker_epoch=5)
    (b / CLEAN_SHUTDOWN_FILE).unlink()
    m = manager([a, b])
    assert not m.had_clean_shutdown and m.clean_shutdown_broker_epoch == -1


def test_a_dir_whose_meta_properties_cannot_be_read_is_offline_and_the_others_load(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    create(m, "t", 2)
    m.shutdown(broker_epoch=4)
    (b / "meta.properties").unlink()
    (b / "meta.properties").mkdir()
    m = manager([a, b])
    assert m.failure_channel.offline_log_dirs == [b] and m.live_log_dirs == [a]
    assert set(m.logs) == {("t", 0)} and set(m.directory_ids) == {a}
    assert m.clean_shutdown_broker_epoch == -1  # a dir is offline: no previous epoch to claim
    assert create(m, "u", 2) == [a, a]
    m.shutdown(broker_epoch=9)
    # The offline dir is not touched: neither loaded (its marker stays) nor written.
    assert json.loads((b / CLEAN_SHUTDOWN_FILE).read_text())["brokerEpoch"] == 4
    assert json.loads((a / CLEAN_SHUTDOWN_FILE).read_text())["brokerEpoch"] == 9


def test_a_dir_that_fails_at_run_time_loses_its_logs_and_the_other_goes_on(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    create(m, "t", 2)
    produce(m, "t", 0, 2)
    produce(m, "t", 1, 2)
    m.checkpoint_recovery_points()
    (b / RECOVERY_POINT_CHECKPOINT).unlink()
    (b / RECOVERY_POINT_CHECKPOINT).mkdir()  # the next write of b's checkpoint fails: EISDIR
    m.get_log("t", 1).flush()  # type: ignore[union-attr]
    m.get_log("t", 0).flush()  # type: ignore[union-attr]
    m.checkpoint_recovery_points()  # b's failure does not stop a's checkpoint
    assert m.failure_channel.offline_log_dirs == [b]
    assert read_offset_checkpoint(a / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 2}
    assert m.handle_log_dir_failure(b) == [("t", 1)]
    assert set(m.logs) == {("t", 0)}
    m.shutdown(broker_epoch=3)
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and not (b / CLEAN_SHUTDOWN_FILE).exists()


def test_the_same_partition_in_two_dirs_stops_the_start(tmp_path: Path) -> None:
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    create(m, "t", 1)
    m.shutdown()
    (b / "t-0").mkdir()
    with pytest.raises(RuntimeError, match="Duplicate log directories for t-0"):
        manager([a, b])


def test_cleaner_checkpoints_are_per_dir(tmp_path: Path) -> None:
    """Kafka's cleaner-offset-checkpoint: each dir's file covers the compacted logs of that dir."""
    a, b = formatted(tmp_path, "a", "b")
    (a / CLEANER_OFFSET_CHECKPOINT).write_text("0\n1\nold 0 5\n")
    m = manager([a, b])
    compacted = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "1024"})
    logs = [m.get_or_create_log("t", p, compacted, uuid.uuid4()) for p in range(2)]
    assert [plog.parent_dir for plog in logs] == [a, b]
    for plog in logs:
        for i in range(200):
            plog.append_as_leader(memoryview(make_batch([b"v%d" % i], keys=[b"k%d" % (i % 5)])), 0)
        plog.roll()
        plog.update_high_watermark(plog.log_end_offset)
    m.cleaner = LogCleaner(m, CleanerConfig(dedupe_buffer_size=1 << 20, executor="thread"), lambda fn: fn(), FakeClock())
    assert m.cleaner.checkpoints == {("old", 0): 5}
    assert m.cleaner.clean_filthiest_log() and m.cleaner.clean_filthiest_log()
    assert set(read_offset_checkpoint(a / CLEANER_OFFSET_CHECKPOINT)) == {("t", 0)}
    assert set(read_offset_checkpoint(b / CLEANER_OFFSET_CHECKPOINT)) == {("t", 1)}


def test_a_future_log_is_named_kept_apart_and_swapped_in_with_its_checkpoints(tmp_path: Path) -> None:
    """Kafka's future log: `<topic>-<partition>.<uuid>-future` in the destination dir, in that dir's
    checkpoints, out of the cleaner's sight; replaceCurrentWithFutureLog renames the current log
    `-delete` and gives the future one the partition's name."""
    a, b = formatted(tmp_path, "a", "b")
    m = manager([a, b])
    assert create(m, "t", 1) == [a]
    produce(m, "t", 0, 4)
    current = m.get_log("t", 0)
    assert current is not None
    assert m.get_or_create_future_log("t", 0, a) is None  # its own dir: no move
    future = m.get_or_create_future_log("t", 0, b)
    assert future is not None and future.parent_dir == b and m.get_or_create_future_log("t", 0, b) is future
    assert future.dir.name.startswith("t-0.") and future.dir.name.endswith("-future") and future.topic_id == current.topic_id
    assert future.topic_partition == ("t", 0)
    assert CleanableLogs(m).all_log_items() == []  # the cleaner leaves a moving partition alone
    for header, batch in current.batches(0):
        future.append_as_follower(bytes(batch))
    m.checkpoint_recovery_points()
    assert read_offset_checkpoint(b / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 0}
    plog = m.replace_current_with_future("t", 0)
    assert plog.dir == b / "t-0" and m.get_log("t", 0) is plog and not m.future_logs
    assert plog.log_end_offset == 4 and plog.high_watermark == 4
    assert not (a / "t-0").exists() and len(list(a.glob("t-0.*-delete"))) == 1
    assert read_offset_checkpoint(b / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 4}
    assert read_offset_checkpoint(a / RECOVERY_POINT_CHECKPOINT) == {}
    m.finish_deleting_logs(m.take_deleted_logs())
    assert not list(a.glob("t-0*"))
    m.shutdown()
    again = manager([a, b])
    assert again.get_log("t", 0).parent_dir == b and not again.future_logs  # type: ignore[union-attr]
    again.shutdown()


def test_a_future_log_in_another_dir_is_replaced_and_goes_with_its_partition(tmp_path: Path) -> None:
    a, b, c = formatted(tmp_path, "a", "b", "c")
    m = manager([a, b, c])
    create(m, "t", 1)
    first = m.get_or_create_future_log("t", 0, b)
    assert first is not None
    second = m.get_or_create_future_log("t", 0, c)
    assert second is not None and second.parent_dir == c and not first.dir.exists()
    m.delete_log("t", 0)
    assert not m.future_logs and not list(c.glob("t-0.*-future"))
    m.shutdown()
