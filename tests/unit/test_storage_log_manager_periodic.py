"""LogManager's periodic jobs visit only the logs with work to do, and skip unchanged checkpoints.

The logs tell the manager about rolls, segments scheduled for deletion and config changes
(LogListener); the jobs must still do exactly what a visit of every log would have done.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from storage.log_manager import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from tests.unit.batch_factory import FakeClock, make_batch

BASE_TS = 1_700_000_000_000
SMALL_SEGMENTS = {"segment.bytes": "300", "file.delete.delay.ms": "1000"}


def produce(plog: UnifiedLog, count: int, timestamp: int = BASE_TS) -> None:
    for _ in range(count):
        plog.append_as_leader(
            memoryview(make_batch([b"m" * 50], timestamps=[timestamp])), 0
        )
    plog.update_high_watermark(plog.log_end_offset)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(BASE_TS)


@pytest.fixture
def manager(tmp_path: Path, clock: FakeClock) -> LogManager:
    manager = LogManager(tmp_path, LogConfig.from_properties(SMALL_SEGMENTS), clock)
    manager.startup()
    return manager


@pytest.fixture
def visits(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[str, int]]]:
    """Which logs each per-log job method was called on, in order."""
    seen: dict[str, list[tuple[str, int]]] = {}
    for name in (
        "flush_rolled_segments",
        "flush",
        "delete_pending_segments",
        "delete_old_segments",
    ):
        original = getattr(UnifiedLog, name)

        def spy(
            self: UnifiedLog, *args: object, _name: str = name, _original: object = original
        ) -> object:
            seen.setdefault(_name, []).append(self.topic_partition)
            return _original(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(UnifiedLog, name, spy)
    return seen


def many_logs(manager: LogManager, count: int) -> list[UnifiedLog]:
    return [
        manager.get_or_create_log("idle", p, manager.default_config, None)
        for p in range(count)
    ]


def test_rolled_segments_are_flushed_once_and_only_for_the_logs_that_rolled(
    manager: LogManager, visits: dict[str, list[tuple[str, int]]]
) -> None:
    many_logs(manager, 50)
    busy = manager.get_or_create_log("busy", 0, manager.default_config, None)
    produce(busy, 10)
    assert len(busy.segments) > 1 and busy.recovery_point == 0
    manager.flush_dirty_logs()
    assert busy.recovery_point == busy.active_segment.base_offset
    assert visits["flush_rolled_segments"] == [("busy", 0)]
    manager.flush_dirty_logs()
    manager.checkpoint_recovery_points()
    assert visits["flush_rolled_segments"] == [("busy", 0)]
    manager.shutdown()


def test_a_failed_flush_of_rolled_segments_is_tried_again(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    plog = manager.get_or_create_log("t", 0, manager.default_config, None)
    produce(plog, 10)
    rolled_to = plog.active_segment.base_offset

    def failing(self: UnifiedLog) -> bool:
        raise OSError("disk gone")

    with monkeypatch.context() as patch:
        patch.setattr(UnifiedLog, "flush_rolled_segments", failing)
        with pytest.raises(OSError):
            manager.flush_dirty_logs()
    assert plog.recovery_point == 0
    manager.flush_dirty_logs()
    assert plog.recovery_point == rolled_to
    manager.shutdown()


def test_pending_deletes_are_visited_until_done(
    manager: LogManager, clock: FakeClock, visits: dict[str, list[tuple[str, int]]]
) -> None:
    many_logs(manager, 50)
    config = LogConfig.from_properties({**SMALL_SEGMENTS, "retention.ms": "1000"})
    plog = manager.get_or_create_log("old", 0, config, None)
    produce(plog, 10)
    manager.delete_pending_segments()
    assert "delete_pending_segments" not in visits
    clock.advance(10_000)
    assert manager.cleanup_logs() > 0
    assert plog.pending_deletes > 0
    manager.delete_pending_segments()
    assert plog.pending_deletes > 0  # file.delete.delay.ms has not passed
    clock.advance(1000)
    manager.delete_pending_segments()
    assert plog.pending_deletes == 0 and not list(
        (manager.log_dir / "old-0").glob("*.deleted")
    )
    manager.delete_pending_segments()
    assert visits["delete_pending_segments"] == [("old", 0)] * 2
    manager.shutdown()


def test_flush_ms_follows_config_changes_made_on_the_log(
    manager: LogManager, clock: FakeClock, visits: dict[str, list[tuple[str, int]]]
) -> None:
    many_logs(manager, 20)
    plog = manager.get_or_create_log("timed", 0, LogConfig.from_properties({}), None)
    produce(plog, 1)
    clock.advance(10_000)
    manager.flush_dirty_logs()
    assert "flush" not in visits and plog.recovery_point == 0
    # The replica manager changes configs on the UnifiedLog itself, not through the LogManager.
    plog.update_config(LogConfig.from_properties({"flush.ms": "1000"}))
    manager.flush_dirty_logs()
    assert visits["flush"] == [("timed", 0)] and plog.recovery_point == 1
    produce(plog, 1)
    clock.advance(999)
    manager.flush_dirty_logs()
    assert plog.recovery_point == 1
    clock.advance(1)
    manager.flush_dirty_logs()
    assert plog.recovery_point == 2
    plog.update_config(LogConfig.from_properties({}))
    produce(plog, 1)
    clock.advance(10_000)
    manager.flush_dirty_logs()
    assert plog.recovery_point == 2 and visits["flush"] == [("timed", 0)] * 2
    manager.shutdown()


def test_flush_ms_of_logs_loaded_at_startup(tmp_path: Path, clock: FakeClock) -> None:
    config = LogConfig.from_properties({"flush.ms": "0"})
    manager = LogManager(tmp_path, config, clock)
    manager.startup()
    produce(manager.get_or_create_log("t", 0, config, None), 2)
    manager.shutdown()
    again = LogManager(tmp_path, config, clock)
    again.startup()
    plog = again.get_log("t", 0)
    assert plog is not None
    produce(plog, 1)
    again.flush_dirty_logs()
    assert plog.recovery_point == 3
    again.shutdown()


def test_a_deleted_log_is_no_longer_visited(
    manager: LogManager, clock: FakeClock, visits: dict[str, list[tuple[str, int]]]
) -> None:
    config = LogConfig.from_properties(
        {**SMALL_SEGMENTS, "retention.ms": "1000", "flush.ms": "1"}
    )
    plog = manager.get_or_create_log("doomed", 0, config, None)
    produce(plog, 10)
    clock.advance(10_000)
    manager.cleanup_logs()
    produce(plog, 10)  # rolled again, not flushed yet
    visits.clear()
    manager.delete_log("doomed", 0)
    clock.advance(10_000)
    manager.flush_dirty_logs()
    manager.delete_pending_segments()
    assert visits == {}
    manager.shutdown()


def test_retention_skips_logs_with_nothing_to_delete(
    manager: LogManager, clock: FakeClock, visits: dict[str, list[tuple[str, int]]]
) -> None:
    many_logs(manager, 50)
    config = LogConfig.from_properties(
        {**SMALL_SEGMENTS, "retention.ms": "1000", "segment.bytes": "100000"}
    )
    single = manager.get_or_create_log("single", 0, config, None)
    produce(single, 3)
    assert len(single.segments) == 1
    clock.advance(10_000)
    # One non-empty segment past retention.ms: the log rolls and deletes it, as Kafka does.
    assert manager.cleanup_logs() == 1
    assert single.log_start_offset == single.log_end_offset == 3
    assert visits["delete_old_segments"] == [("single", 0)]
    manager.shutdown()


def test_unchanged_checkpoints_are_not_rewritten(manager: LogManager) -> None:
    plog = manager.get_or_create_log("t", 0, manager.default_config, None)
    produce(plog, 2)
    recovery = manager.log_dir / RECOVERY_POINT_CHECKPOINT
    start = manager.log_dir / LOG_START_OFFSET_CHECKPOINT

    def inodes() -> tuple[int, int]:
        # Each write renames a new file over the old one.
        return recovery.stat().st_ino, start.stat().st_ino

    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    first = inodes()
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    assert inodes() == first
    plog.flush()
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    assert inodes()[0] != first[0] and inodes()[1] == first[1]
    second = inodes()
    plog.maybe_increment_log_start_offset(1)
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    assert inodes()[1] != second[1]
    third = inodes()
    manager.delete_log("t", 0)
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    assert inodes()[0] != third[0] and inodes()[1] != third[1]
    manager.shutdown()
