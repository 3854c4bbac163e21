"""LogSegment: one write per append, sparse indexes, offset translation, reads, recovery, truncation."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.record_batch import iter_headers
from storage.log_config import LogConfig
from storage.log_segment import LogSegment
from tests.unit.batch_factory import concat, decode_records, make_batch

NOW = 1_700_000_010_000


def segment_config(**props: str) -> LogConfig:
    return LogConfig.from_properties(props)


def append_batches(segment: LogSegment, batches: list[bytearray]) -> None:
    """Append each batch with its own write, as a leader does one produce at a time."""
    for batch in batches:
        header = next(iter_headers(batch))
        segment.append(header.last_offset, header.max_timestamp, header.last_offset, batch)


def numbered_batches(start: int, sizes: list[int], payload: int = 10, base_timestamp: int = 1_700_000_000_000) -> list[bytearray]:
    out = []
    offset = start
    for count in sizes:
        out.append(make_batch([b"x" * payload] * count, base_offset=offset, base_timestamp=base_timestamp + offset))
        offset += count
    return out


def test_files_are_named_after_the_base_offset(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 42, segment_config(), NOW)
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000042.log"]  # indexes: on first write
    segment.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000042.index", "00000000000000000042.log", "00000000000000000042.timeindex"]


def test_append_writes_the_bytes_and_the_fd_serves_them(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    batches = numbered_batches(0, [3, 2, 4])
    append_batches(segment, batches)
    data = concat(*batches)
    assert segment.size == len(data)
    assert os.pread(segment.fd, segment.size, 0) == bytes(data)
    assert (tmp_path / "00000000000000000000.log").read_bytes() == bytes(data)
    assert segment.read_next_offset() == 9
    assert segment.max_timestamp_so_far == 1_700_000_000_008
    segment.close()


def test_sparse_index_entries_point_at_batch_starts(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(**{"index.interval.bytes": "200"}), NOW)
    batches = numbered_batches(0, [2] * 12, payload=40)
    append_batches(segment, batches)
    positions = {}
    position = 0
    for batch in batches:
        header = next(iter_headers(batch))
        positions[header.last_offset] = position
        position += len(batch)
    assert segment.offset_index.entries > 2
    for slot in range(segment.offset_index.entries):
        entry = segment.offset_index.entry(slot)
        assert positions[entry.offset] == entry.position
    segment.close()


def test_one_multi_batch_append_is_indexed_per_batch(tmp_path: Path) -> None:
    config = segment_config(**{"index.interval.bytes": "150"})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = LogSegment.open(tmp_path / "a", 0, config, NOW)
    many = LogSegment.open(tmp_path / "b", 0, config, NOW)
    batches = numbered_batches(0, [3] * 10, payload=30)
    one.append(29, 1_700_000_000_027, 29, concat(*batches))
    append_batches(many, batches)
    assert [one.offset_index.entry(i) for i in range(one.offset_index.entries)] == [
        many.offset_index.entry(i) for i in range(many.offset_index.entries)
    ]
    one.close()
    many.close()


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=25),
    payload=st.integers(0, 120),
    interval=st.sampled_from([0, 1, 64, 200, 700, 4096]),
    per_append=st.integers(1, 4),
)
@settings(max_examples=60, deadline=None)
def test_translate_offset_finds_the_batch_of_every_offset(sizes: list[int], payload: int, interval: int, per_append: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = 500
        segment = LogSegment.open(Path(tmp), base, segment_config(**{"index.interval.bytes": str(interval)}), NOW)
        batches = numbered_batches(base, sizes, payload)
        for i in range(0, len(batches), per_append):
            group = batches[i : i + per_append]
            last = next(iter_headers(group[-1]))
            segment.append(last.last_offset, last.max_timestamp, last.last_offset, concat(*group))
        position = 0
        expected = {}
        for batch in batches:
            header = next(iter_headers(batch))
            for offset in range(header.base_offset, header.last_offset + 1):
                expected[offset] = (header.last_offset, position, len(batch))
            position += len(batch)
        for offset in range(base - 2, base + sum(sizes)):
            found = segment.translate_offset(offset)
            assert found == expected[max(offset, base)]
        assert segment.translate_offset(base + sum(sizes)) is None
        segment.offset_index.sanity_check(segment.size)
        segment.close()


def test_read_cuts_at_max_size_and_min_one_message(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    batches = numbered_batches(0, [5, 5, 5], payload=50)
    append_batches(segment, batches)
    first = len(batches[0])

    info = segment.read(0, 100, None, False)
    assert info is not None and info.regions[0].position == 0 and info.regions[0].length == 100
    assert info.first_entry_incomplete  # the first batch alone is larger than 100 bytes

    info = segment.read(0, 100, None, True)
    assert info is not None and info.regions[0].length == first and not info.first_entry_incomplete

    info = segment.read(7, first + 10, None, False)  # offset 7 lives in the second batch
    assert info is not None and info.regions[0].position == first and info.regions[0].length == first + 10

    info = segment.read(0, 10**6, first, True)  # bounded by max_position
    assert info is not None and info.regions[0].length == first

    info = segment.read(0, 0, None, False)
    assert info is not None and info.regions == []
    assert segment.read(15, 100, None, True) is None
    segment.close()


def test_find_offset_by_timestamp_names_the_record(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(**{"index.interval.bytes": "0"}), NOW)
    segment_batches = [
        make_batch([b"a", b"b", b"c"], base_offset=0, timestamps=[100, 300, 200], partition_leader_epoch=4),
        make_batch([b"d", b"e"], base_offset=3, timestamps=[250, 500], partition_leader_epoch=5),
    ]
    append_batches(segment, segment_batches)
    assert segment.find_offset_by_timestamp(50) == (100, 0, 4)
    assert segment.find_offset_by_timestamp(150) == (300, 1, 4)
    assert segment.find_offset_by_timestamp(301) == (500, 4, 5)
    assert segment.find_offset_by_timestamp(150, starting_offset=2) == (200, 2, 4)
    assert segment.find_offset_by_timestamp(501) is None
    segment.close()


def test_recover_rebuilds_the_same_indexes_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(**{"index.interval.bytes": "100"}), NOW)
    batches = numbered_batches(0, [3] * 20, payload=20)
    append_batches(segment, batches)
    index_before = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
    times_before = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
    good_size = segment.size
    os.pwrite(segment.fd, bytes(batches[0][:40]), good_size)  # half a batch, as a crash leaves it
    segment.size += 40

    assert segment.recover() == 40
    assert segment.size == good_size and os.fstat(segment.fd).st_size == good_size
    assert [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)] == index_before
    # The rebuilt time index also records the final max timestamp, as a rolled segment does.
    assert [segment.time_index.entry(i) for i in range(segment.time_index.entries)][: len(times_before)] == times_before
    assert segment.time_index.last_entry.timestamp == segment.max_timestamp_so_far
    assert segment.recover() == 0
    segment.close()


def test_recover_stops_at_a_bad_crc_or_an_oversized_batch(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    batches = numbered_batches(0, [2] * 5, payload=10)
    append_batches(segment, batches)
    second = len(batches[0])
    third = second + len(batches[1])
    flipped = bytes([batches[2][-1] ^ 0xFF])
    os.pwrite(segment.fd, flipped, third + len(batches[2]) - 1)
    total = segment.size
    assert segment.recover() == total - third
    assert segment.size == third and segment.read_next_offset() == 4
    assert segment.recover(max_message_size=len(batches[0]) - 1) == third
    assert segment.size == 0 and segment.read_next_offset() == 0
    segment.close()


def test_truncate_to_removes_whole_batches(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(**{"index.interval.bytes": "0"}), NOW)
    batches = numbered_batches(0, [3, 3, 3, 3], payload=10)
    append_batches(segment, batches)
    removed = segment.truncate_to(6, NOW)
    assert removed == len(batches[2]) + len(batches[3])
    assert segment.read_next_offset() == 6
    assert all(segment.offset_index.entry(i).offset < 6 for i in range(segment.offset_index.entries))
    assert segment.max_timestamp_so_far == 1_700_000_000_005
    assert segment.truncate_to(100) == 0
    assert segment.truncate_to(0, NOW + 5) == len(batches[0]) + len(batches[1])
    assert segment.size == 0 and segment.created_ms == NOW + 5
    segment.close()


def test_should_roll_on_size_time_and_full_index(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    assert not segment.should_roll(1000, 10_000, 10, 0, 0, NOW + 10**9)  # an empty segment never rolls on time
    append_batches(segment, numbered_batches(0, [1], base_timestamp=5_000))
    size = segment.size
    assert segment.should_roll(size + 100, 10**9, 101, 5_000, 1, NOW)
    assert not segment.should_roll(size + 100, 10**9, 100, 5_000, 1, NOW)
    # Time is measured from the first batch's timestamp to the incoming batch's timestamp.
    assert segment.time_waiting_to_roll(NOW, 12_000) == 7_000
    assert segment.should_roll(10**9, 6_999, 10, 12_000, 1, NOW)
    assert not segment.should_roll(10**9, 7_000, 10, 12_000, 1, NOW)
    assert segment.should_roll(10**9, 10**9, 10, 12_000, 2**31, NOW)  # offset too far for the index
    segment.close()


def test_segment_without_timestamps_rolls_on_creation_time(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    append_batches(segment, [make_batch([b"x"], timestamps=[-1])])
    assert segment.time_waiting_to_roll(NOW + 50, -1) == 50
    assert segment.largest_timestamp == segment.last_modified_ms  # no record timestamp: the file's mtime
    segment.close()


def test_becoming_inactive_trims_the_preallocated_files(tmp_path: Path) -> None:
    config = segment_config(**{"preallocate": "true", "segment.bytes": "100000"})
    segment = LogSegment.open(tmp_path, 0, config, NOW)
    assert (tmp_path / "00000000000000000000.log").stat().st_size == 100000
    append_batches(segment, numbered_batches(0, [2, 2]))
    assert segment.time_index.entries == 0
    segment.on_become_inactive_segment()
    assert (tmp_path / "00000000000000000000.log").stat().st_size == segment.size
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 8 * segment.offset_index.entries
    assert segment.time_index.entries == 1 and segment.time_index.last_entry == (segment.max_timestamp_so_far, 3)
    segment.close()


def test_rename_to_deleted_keeps_the_fd_readable(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, segment_config(), NOW)
    batch = make_batch([b"keep"])
    append_batches(segment, [batch])
    segment.flush()  # as a rolled segment: its index files are on disk
    segment.rename_to_deleted()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
    ]
    assert [r[3] for r in decode_records(os.pread(segment.fd, segment.size, 0))] == [b"keep"]
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def test_reopened_segment_continues_where_it_stopped(tmp_path: Path) -> None:
    config = segment_config(**{"index.interval.bytes": "100"})
    segment = LogSegment.open(tmp_path, 0, config, NOW)
    batches = numbered_batches(0, [2] * 10, payload=30)
    append_batches(segment, batches[:5])
    segment.close()
    reopened = LogSegment.open(tmp_path, 0, config, NOW)
    reopened.sanity_check()
    assert reopened.read_next_offset() == 10
    assert reopened.max_timestamp_so_far == 1_700_000_000_009
    append_batches(reopened, batches[5:])
    entries = [reopened.offset_index.entry(i) for i in range(reopened.offset_index.entries)]
    reopened.recover()
    assert [reopened.offset_index.entry(i) for i in range(reopened.offset_index.entries)] == entries
    reopened.close()


def test_missing_index_fails_the_sanity_check(tmp_path: Path) -> None:
    config = segment_config()
    segment = LogSegment.open(tmp_path, 0, config, NOW)
    append_batches(segment, numbered_batches(0, [2]))
    segment.close()
    (tmp_path / "00000000000000000000.index").unlink()
    reopened = LogSegment.open(tmp_path, 0, config, NOW)
    with pytest.raises(Exception, match="missing"):
        reopened.sanity_check()
    reopened.recover()
    reopened.sanity_check()
    reopened.close()
