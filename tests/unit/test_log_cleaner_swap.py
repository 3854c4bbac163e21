"""A crash at each step of a cleaner's segment swap: the reopened log holds the old or the new segments of each group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.records import iter_records
from storage.unified_log import UnifiedLog
from storage.log_cleaner import SWAP_STEPS, CleanerConfig, LogCleaner
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from tests.unit.batch_factory import FakeClock, make_batch

TS = 1_700_000_000_000
# Each one-record batch takes 71 bytes: three of them fit 250, so the groups are [0, 1, 2] and [3, 4].
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "250", "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}
WRITES = [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"c", b"2"), (b"b", b"2")]
OLD = {0: (b"a", b"1"), 1: (b"b", b"1"), 2: (b"c", b"1"), 3: (b"c", b"2"), 4: (b"b", b"2")}
NEW = {0: (b"a", b"1"), 3: (b"c", b"2"), 4: (b"b", b"2")}
GROUPS = [range(3), range(3, 5)]


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


def build(tmp_path: Path, clock: FakeClock) -> tuple[LogManager, UnifiedLog]:
    manager = LogManager(tmp_path, LogConfig.from_properties({}), clock)
    manager.startup()
    plog = manager.get_or_create_log("t", 0, LogConfig.from_properties(CONFIG), None)
    for key, value in WRITES:
        plog.append_as_leader(memoryview(make_batch([value], keys=[key], timestamps=[TS])), 0)
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    # No cleaner threads: the tests drive clean_filthiest_log.
    manager.cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20, executor="thread"), lambda fn: fn(), clock)
    return manager, plog


def reopen(tmp_path: Path, clock: FakeClock) -> dict[int, tuple[bytes | None, bytes | None]]:
    plog = UnifiedLog.open(tmp_path / "t-0", LogConfig.from_properties(CONFIG), topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=False, now_ms=clock)
    try:
        assert plog.log_end_offset == 5
        return {r.offset: (r.key, r.value) for header, data in plog.batches(0) for r in iter_records(bytes(data), header)}
    finally:
        plog.close()


def assert_each_group_old_or_new(records: dict[int, tuple[bytes | None, bytes | None]]) -> list[str]:
    versions = []
    for group in GROUPS:
        part = {o: kv for o, kv in records.items() if o in group}
        old = {o: kv for o, kv in OLD.items() if o in group}
        new = {o: kv for o, kv in NEW.items() if o in group}
        assert part in (old, new), f"group {group} holds {part}"
        versions.append("old" if part == old and old != new else "new")  # the second group has nothing to drop
    return versions


@pytest.mark.parametrize(
    ("step", "expected"),
    [("before_commit", ["old", "new"]), ("committed", ["new", "new"]), ("old_deleted", ["new", "new"])],
)
def test_a_crash_during_the_first_swap(tmp_path: Path, step: str, expected: list[str]) -> None:
    clock = FakeClock(TS)
    manager, _ = build(tmp_path, clock)
    assert manager.cleaner is not None

    def crash_at(name: str) -> None:
        if name == step:
            raise Crash(name)

    manager.cleaner._swap_step = crash_at  # type: ignore[method-assign,assignment]
    with pytest.raises(Crash):
        manager.cleaner.clean_filthiest_log()
    assert step in SWAP_STEPS
    assert assert_each_group_old_or_new(reopen(tmp_path, clock)) == expected
    leftovers = [p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap", ".swapend", ".deleted"))]
    assert leftovers == []


def test_a_crash_in_the_middle_of_the_renames_to_swap_keeps_the_old_segments(tmp_path: Path) -> None:
    """The .log became .swap but an index is still .cleaned: the swap never committed."""
    clock = FakeClock(TS)
    manager, _ = build(tmp_path, clock)
    assert manager.cleaner is not None

    def crash(name: str) -> None:
        if name == "before_commit":
            directory = tmp_path / "t-0"
            os.rename(directory / "00000000000000000000.log.cleaned", directory / "00000000000000000000.log.swap")
            raise Crash(name)

    manager.cleaner._swap_step = crash  # type: ignore[method-assign,assignment]
    with pytest.raises(Crash):
        manager.cleaner.clean_filthiest_log()
    assert assert_each_group_old_or_new(reopen(tmp_path, clock)) == ["old", "new"]


def test_a_swap_ending_before_the_segments_it_replaced_drops_them_all(tmp_path: Path) -> None:
    """Group [0, 1, 2] keeps only offset 0: without the recorded end, segments 1 and 2 would come back."""
    clock = FakeClock(TS)
    manager, _ = build(tmp_path, clock)
    assert manager.cleaner is not None

    def crash_at(name: str) -> None:
        if name == "committed":
            assert (tmp_path / "t-0" / "00000000000000000000.swapend").read_text() == "3"
            raise Crash(name)

    manager.cleaner._swap_step = crash_at  # type: ignore[method-assign,assignment]
    with pytest.raises(Crash):
        manager.cleaner.clean_filthiest_log()
    records = reopen(tmp_path, clock)
    assert 1 not in records and 2 not in records


def test_a_completed_clean_survives_a_crash_and_a_fetch_keeps_its_old_file(tmp_path: Path) -> None:
    clock = FakeClock(TS)
    manager, plog = build(tmp_path, clock)
    assert manager.cleaner is not None
    region = plog.read(1, 10_000, None, True).regions[0]  # a fetch about to sendfile the old segment 1
    assert manager.cleaner.clean_filthiest_log()
    assert [p.name for p in (tmp_path / "t-0").glob("*.deleted")]  # renamed, fds still open
    assert len(os.pread(region.fd, region.length, region.position)) == region.length
    assert assert_each_group_old_or_new(reopen(tmp_path, clock)) == ["new", "new"]
    plog.delete_pending_segments(clock() + 1)
