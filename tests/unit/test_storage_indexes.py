"""OffsetIndex and TimeIndex: Kafka's file formats, lazy loading, flush and crash, binary search, truncation."""

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


def test_offset_index_file_format_flush_and_close(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1000)
    assert not path.exists()  # created when first written: a new partition makes fewer inodes
    index.append(105, 4200)
    index.append(110, 9000)
    assert not path.exists()  # appends stay in memory until a flush, a roll or a close
    index.flush()
    assert path.read_bytes() == struct.pack(">iiii", 5, 4200, 10, 9000)
    index.append(115, 10000)
    index.close()
    assert path.stat().st_size == 24
    reopened = OffsetIndex(path, 100, 1000)
    assert reopened.entries == 3 and reopened.last_offset == 115
    assert reopened.lookup(107) == OffsetPosition(105, 4200)
    reopened.truncate_to(110)
    reopened.append(112, 9500)
    reopened.close()
    assert path.read_bytes() == struct.pack(">iiii", 5, 4200, 12, 9500)


def test_empty_index_file_written_on_close_only(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1000)
    assert index.lookup(10) == OffsetPosition(0, 0)  # an index never written reads as empty
    index.close()
    assert path.read_bytes() == b""  # a clean close leaves the file, so a restart does not rebuild


def test_index_size_rounds_down_to_whole_entries(tmp_path: Path) -> None:
    offsets = OffsetIndex(tmp_path / "a.index", 0, 1001)
    times = TimeIndex(tmp_path / "a.timeindex", 0, 1001)
    assert offsets.max_index_size == 1000 and offsets.max_entries == 125
    assert times.max_index_size == 996 and times.max_entries == 83
    offsets.close()
    times.close()


def test_a_crash_keeps_the_entries_written_by_the_last_flush(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 4096)
    index.append(5, 100)
    index.flush()
    index.append(9, 200)
    index.close_handler()  # a crash: the entry appended after the flush was never written
    reopened = OffsetIndex(path, 0, 4096)
    assert reopened.entries == 1 and reopened.last_offset == 5
    reopened.sanity_check(log_size=300)
    reopened.close()


def test_an_index_is_read_only_when_used(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 4096)
    for i in range(1, 101):
        index.append(i * 10, i * 100)
    index.close()
    lazy = OffsetIndex(path, 0, 4096)
    assert lazy.entries == 100 and lazy.last_offset == 1000  # from one entry read, not the file
    assert lazy._buf is None
    lazy.sanity_check(log_size=20000)
    assert lazy._buf is None
    assert lazy.lookup(555) == OffsetPosition(550, 5500)
    assert lazy._buf is not None
    lazy.close()


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
    # Kafka preallocates index files; one left by a crash (or by an older kbroker) ends in zeros.
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">iiii", 5, 100, 9, 200) + bytes(8 * 48))
    reopened = OffsetIndex(path, 0, 8 * 50)
    assert reopened.entries == 50
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.reset()
    reopened.sanity_check()
    reopened.close()
    assert path.stat().st_size == 0

    tpath = tmp_path / "00000000000000000000.timeindex"
    tpath.write_bytes(struct.pack(">qi", 1000, 4) + bytes(12 * 49))
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
