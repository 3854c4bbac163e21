"""Retention by time and size, DeleteRecords, delayed file deletion, truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.errors import OffsetOutOfRangeError
from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from tests.unit.batch_factory import FakeClock, decode_records, make_batch

BASE_TS = 1_700_000_000_000


def open_log(directory: Path, clock: FakeClock, **props: str) -> UnifiedLog:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return UnifiedLog.open(directory, config, topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=True, now_ms=clock)


def produce(plog: UnifiedLog, count: int, timestamp: int, epoch: int = 0) -> None:
    for _ in range(count):
        plog.append_as_leader(memoryview(make_batch([b"v" * 60, b"w" * 60], keys=[b"k", b"k"], timestamps=[timestamp, timestamp])), epoch)
    # A sole replica: everything appended is committed.
    plog.update_high_watermark(plog.log_end_offset)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(BASE_TS)


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


def test_retention_ms_deletes_old_segments_after_the_delay(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, clock, segment_bytes="700", retention_ms="60000", file_delete_delay_ms="5000")
    produce(plog, 8, BASE_TS)
    old_bases = [s.base_offset for s in plog.segments]
    produce(plog, 8, BASE_TS + 100_000)
    assert len(old_bases) >= 3
    clock.now = BASE_TS + 100_000
    doomed = [s for s in plog.segments if s.max_timestamp_so_far < BASE_TS + 40_000]
    doomed_fds = [s.fd for s in doomed]
    deleted = plog.delete_old_segments()
    assert deleted == len(doomed)
    assert plog.log_start_offset == plog.segments[0].base_offset == doomed[-1].read_next_offset()
    assert all(name.endswith(".deleted") for s in doomed for name in (p.name for p in s.paths))
    assert plog.pending_deletes == len(doomed)
    # A fetch that got a region before the deletion can still send it.
    assert os.pread(doomed_fds[0], 10, 0)
    assert plog.delete_pending_segments(clock.now + 4_999) == 0
    assert plog.delete_pending_segments(clock.now + 5_000) == len(doomed)
    assert not list(directory.glob("*.deleted"))
    assert all(s.fd == -1 for s in doomed)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100, None, True)
    plog.close()


def test_retention_ms_past_the_active_segment_rolls_and_empties_the_log(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, clock, retention_ms="1000", file_delete_delay_ms="0")
    produce(plog, 5, BASE_TS)
    clock.now = BASE_TS + 1001
    assert plog.delete_old_segments() == 1
    assert plog.log_start_offset == plog.log_end_offset == 10
    assert [s.base_offset for s in plog.segments] == [10]
    assert plog.read(10, 100, None, True).regions == []
    plog.delete_pending_segments()
    assert segment_files(directory) == ["00000000000000000010.log"]
    plog.append_as_leader(memoryview(make_batch([b"fresh"], timestamps=[clock.now])), 0)
    assert plog.log_end_offset == 11
    assert plog.delete_old_segments() == 0
    plog.close()


def test_retention_ms_unlimited_and_compact_policy_keep_everything(tmp_path: Path, clock: FakeClock) -> None:
    forever = open_log(tmp_path / "a-0", clock, segment_bytes="700", retention_ms="-1")
    compacted = open_log(tmp_path / "b-0", clock, segment_bytes="700", retention_ms="1", retention_bytes="1", cleanup_policy="compact")
    for plog in (forever, compacted):
        produce(plog, 10, BASE_TS)
    clock.now = BASE_TS + 10**9
    assert forever.delete_old_segments() == 0 and compacted.delete_old_segments() == 0
    forever.close()
    compacted.close()


def test_retention_bytes(tmp_path: Path, clock: FakeClock) -> None:
    plog = open_log(tmp_path / "t-0", clock, segment_bytes="700", retention_bytes="1500")
    produce(plog, 20, BASE_TS)
    sizes = [s.size for s in plog.segments]
    total = sum(sizes)
    deleted = plog.delete_old_segments()
    # Oldest first, while what is left stays at or above retention.bytes.
    expected, excess = 0, total - 1500
    for size in sizes[:-1]:
        if excess - size < 0:
            break
        excess -= size
        expected += 1
    assert deleted == expected > 0
    assert plog.size_in_bytes >= 1500 and plog.size_in_bytes - plog.segments[0].size < 1500
    assert plog.log_start_offset == plog.segments[0].base_offset
    plog.close()


def test_nothing_at_or_past_the_high_watermark_is_deleted(tmp_path: Path, clock: FakeClock) -> None:
    plog = open_log(tmp_path / "t-0", clock, segment_bytes="700", retention_ms="1000")
    produce(plog, 10, BASE_TS)
    clock.now = BASE_TS + 5000
    second = plog.segments[1].base_offset
    third = plog.segments[2].base_offset
    plog.update_high_watermark(third - 1)
    assert plog.delete_old_segments() == 1
    assert plog.log_start_offset == second
    # Retention through the LogManager asks the log itself, which knows its high watermark.
    plog.update_high_watermark(0)
    assert plog.delete_old_segments() == 0
    plog.close()


def test_delete_records_moves_the_log_start_and_later_frees_segments(tmp_path: Path, clock: FakeClock) -> None:
    plog = open_log(tmp_path / "t-0", clock, segment_bytes="700", retention_ms="-1", file_delete_delay_ms="0")
    produce(plog, 12, BASE_TS, epoch=2)
    bases = [s.base_offset for s in plog.segments]
    plog.maybe_increment_log_start_offset(bases[2] + 1)
    assert plog.log_start_offset == bases[2] + 1
    assert plog.leader_epoch_cache.entries == [(2, bases[2] + 1)]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(bases[2], 100, None, True)
    region = plog.read(bases[2] + 1, 10**6, None, True).regions[0]
    offsets = [r[0] for r in decode_records(os.pread(region.fd, region.length, region.position))]
    assert bases[2] + 1 in offsets
    plog.maybe_increment_log_start_offset(1)  # never moves back
    assert plog.log_start_offset == bases[2] + 1
    with pytest.raises(OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(plog.log_end_offset + 1)
    assert len(plog.segments) == len(bases)  # the segments go at the next retention pass
    assert plog.delete_old_segments() == 2
    assert [s.base_offset for s in plog.segments] == bases[2:]
    assert plog.log_start_offset == bases[2] + 1
    plog.close()


def test_truncate_to_and_truncate_fully(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, clock, segment_bytes="700", file_delete_delay_ms="0")
    produce(plog, 6, BASE_TS, epoch=1)
    produce(plog, 6, BASE_TS, epoch=2)
    plog.flush()
    assert plog.truncate_to(7 * 2)
    assert plog.log_end_offset == 14 and plog.recovery_point == 14
    assert plog.leader_epoch_cache.entries == [(1, 0), (2, 12)]
    assert not plog.truncate_to(100)
    plog.truncate_to(12)
    assert plog.leader_epoch_cache.entries == [(1, 0)]
    info = plog.append_as_leader(memoryview(make_batch([b"new"], timestamps=[BASE_TS])), 3)
    assert info.first_offset == 12
    plog.truncate_fully_and_start_at(500)
    assert plog.log_start_offset == plog.log_end_offset == 500 and [s.base_offset for s in plog.segments] == [500]
    assert plog.leader_epoch_cache.entries == []
    plog.delete_pending_segments()
    assert segment_files(directory) == ["00000000000000000500.log"]
    plog.close()
