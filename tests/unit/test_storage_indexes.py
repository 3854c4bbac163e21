"""OffsetIndex and TimeIndex: Kafka's file formats, preallocation, binary search, truncation."""

from __future__ import annotations

import bisect
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.abstract_index import CorruptIndexError, IndexFullError, InvalidIndexEntryError
from storage.offset_index import OffsetIndex, OffsetPosition
from storage.time_index import TimeIndex, TimestampOffset


def test_offset_index_file_format_and_preallocation(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1000)
    assert path.stat().st_size == 1000  # preallocated, a multiple of 8
    index.append(105, 4200)
    index.append(110, 9000)
    index.flush()
    assert path.read_bytes()[:16] == struct.pack(">iiii", 5, 4200, 10, 9000)
    index.close()
    assert path.stat().st_size == 16  # trimmed to the entries on close
    reopened = OffsetIndex(path, 100, 1000)
    assert reopened.entries == 2 and reopened.last_offset == 110
    assert reopened.lookup(107) == OffsetPosition(105, 4200)
    reopened.append(120, 12000)  # grows back to the preallocated size
    assert path.stat().st_size == 1000
    reopened.close()


def test_index_size_rounds_down_to_whole_entries(tmp_path: Path) -> None:
    offsets = OffsetIndex(tmp_path / "a.index", 0, 1001)
    times = TimeIndex(tmp_path / "a.timeindex", 0, 1001)
    assert offsets.max_index_size == 1000 and offsets.max_entries == 125
    assert times.max_index_size == 996 and times.max_entries == 83
    assert (tmp_path / "a.timeindex").stat().st_size == 996
    offsets.close()
    times.close()


def test_offset_index_lookup_bounds(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 50, 4096)
    assert index.lookup(70) == OffsetPosition(50, 0)
    index.append(60, 100)
    index.append(80, 300)
    assert index.lookup(10) == OffsetPosition(50, 0)
    assert index.lookup(59) == OffsetPosition(50, 0)
    assert index.lookup(60) == OffsetPosition(60, 100)
    assert index.lookup(79) == OffsetPosition(60, 100)
    assert index.lookup(10**12) == OffsetPosition(80, 300)
    index.close()


def test_offset_index_rejects_non_increasing_and_full(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 24)
    index.append(1, 10)
    with pytest.raises(InvalidIndexEntryError):
        index.append(1, 20)
    index.append(2, 20)
    index.append(3, 30)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(4, 40)
    with pytest.raises(InvalidIndexEntryError):
        OffsetIndex(tmp_path / "y.index", 10, 24).append(10 + 2**31, 0)
    index.close()


def test_offset_index_truncate_to(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 4096)
    for offset, position in ((10, 100), (20, 200), (30, 300)):
        index.append(offset, position)
    index.truncate_to(25)
    assert index.entries == 2 and index.last_offset == 20
    index.truncate_to(20)  # an entry for exactly the offset goes too
    assert index.entries == 1 and index.last_offset == 10
    index.truncate_to(5)
    assert index.entries == 0 and index.last_offset == 0
    index.append(15, 150)
    assert index.lookup(16) == OffsetPosition(15, 150)
    index.close()


@given(
    st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 5000)), max_size=60),
    st.lists(st.integers(-10, 70000), min_size=1, max_size=30),
)
@settings(max_examples=60, deadline=None)
def test_offset_index_lookup_matches_a_linear_search(steps: list[tuple[int, int]], targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = 1000
        index = OffsetIndex(Path(tmp) / "p.index", base, 8 * 100)
        entries = []
        offset, position = base, 0
        for offset_step, position_step in steps:
            offset += offset_step
            position += position_step
            index.append(offset, position)
            entries.append((offset, position))
        for target in targets:
            below = [e for e in entries if e[0] <= base + target]
            assert index.lookup(base + target) == (below[-1] if below else (base, 0))
        index.close()


def test_time_index_semantics(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    index = TimeIndex(path, 0, 12 * 10)
    assert index.last_entry == TimestampOffset(-1, 0)
    assert index.lookup(5) == TimestampOffset(-1, 0)
    index.maybe_append(100, 3)
    index.maybe_append(100, 4)  # not larger: ignored
    index.maybe_append(150, 9)
    with pytest.raises(InvalidIndexEntryError):
        index.maybe_append(160, 8)
    with pytest.raises(InvalidIndexEntryError):
        index.maybe_append(140, 12)
    assert index.entries == 2
    # The last entry with timestamp <= target: a scan for ts >= target may start there.
    assert index.lookup(99) == TimestampOffset(-1, 0)
    assert index.lookup(100) == TimestampOffset(100, 3)
    assert index.lookup(149) == TimestampOffset(100, 3)
    assert index.lookup(10**15) == TimestampOffset(150, 9)
    index.flush()
    assert path.read_bytes()[:24] == struct.pack(">qiqi", 100, 3, 150, 9)
    index.truncate_to(9)
    assert index.last_entry == TimestampOffset(100, 3)
    index.close()
    assert path.stat().st_size == 12


def test_time_index_keeps_its_last_slot_for_the_roll(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", 0, 12 * 3)
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.maybe_append(3, 3)
    index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3 and index.last_entry == TimestampOffset(3, 3)
    index.close()


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 5)), max_size=50), st.integers(-5, 6000))
@settings(max_examples=60, deadline=None)
def test_time_index_lookup_matches_a_linear_search(steps: list[tuple[int, int]], target: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = TimeIndex(Path(tmp) / "t.timeindex", 0, 12 * 100)
        ts, offset = 0, 0
        for ts_step, offset_step in steps:
            ts += ts_step
            offset += offset_step
            index.maybe_append(ts, offset)
        entries = [index.entry(i) for i in range(index.entries)]
        timestamps = [e.timestamp for e in entries]
        assert timestamps == sorted(set(timestamps))
        slot = bisect.bisect_right(timestamps, target) - 1
        assert index.lookup(target) == (entries[slot] if slot >= 0 else (-1, 0))
        index.close()


def test_sanity_check_spots_a_zero_filled_preallocated_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 8 * 50)
    index.append(5, 100)
    index.append(9, 200)
    index.flush()
    index.close_handler()  # a crash: the file keeps its preallocated length
    reopened = OffsetIndex(path, 0, 8 * 50)
    assert reopened.entries == 50
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.reset()
    reopened.sanity_check()
    reopened.close()

    tpath = tmp_path / "00000000000000000000.timeindex"
    times = TimeIndex(tpath, 0, 12 * 50)
    times.maybe_append(1000, 4)
    times.flush()
    times.close_handler()
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, 0, 12 * 50).sanity_check()


def test_sanity_check_rejects_a_torn_length_and_entries_past_the_log(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 3, 500) + b"\x00\x01")
    index = OffsetIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
    index.close_handler()
    path.write_bytes(struct.pack(">ii", 3, 500))
    index = OffsetIndex(path, 0, 4096)
    index.sanity_check(log_size=1000)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size=400)
    index.close()
