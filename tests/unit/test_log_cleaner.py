"""The log cleaner on real files in tmp_path: offset map, retained batches, cleaning, tombstones, key checks."""

from __future__ import annotations

from pathlib import Path
import tempfile
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.record_batch import DELETE_HORIZON_MASK, TRANSACTIONAL_MASK, read_header
from protocol.records import ControlRecordType, Record, build_control_batch, build_retained_batch, iter_records
from storage.cleaner import Throttler
from storage.cleaner_manager import log_to_clean
from storage.errors import InvalidRecordError
from storage.log_cleaner import CleanerConfig, LogCleaner
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.offset_map import ENTRY_BYTES, OffsetMap
from storage.unified_log import UnifiedLog
from tests.unit.batch_factory import FakeClock, make_batch

TS = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2000", "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}


# -- the offset map ----------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=4), max_size=200))
def test_offset_map_keeps_each_keys_last_offset(keys: list[bytes]) -> None:
    offset_map = OffsetMap(ENTRY_BYTES * 1000)
    for offset, key in enumerate(keys):
        offset_map.put(key, offset)
    expected = {key: offset for offset, key in enumerate(keys)}
    assert all(offset_map.get(key) == offset for key, offset in expected.items())
    assert offset_map.size == len(expected)
    assert offset_map.latest_offset == len(keys) - 1
    assert offset_map.get(b"never put") == -1


def test_offset_map_is_bounded_by_its_memory() -> None:
    offset_map = OffsetMap(ENTRY_BYTES * 10, load_factor=0.5)
    assert offset_map.max_entries == 5
    for i in range(5):
        offset_map.put(b"k%d" % i, i)
    offset_map.put(b"k0", 7)  # an existing key still updates
    assert offset_map.room == 0
    with pytest.raises(OverflowError):
        offset_map.put(b"new", 8)
    with pytest.raises(ValueError):
        OffsetMap(ENTRY_BYTES - 1)


def test_throttler_sleeps_to_hold_the_rate() -> None:
    slept: list[float] = []
    throttler = Throttler(1000.0, check_interval_s=0.0, sleep=slept.append)
    throttler.maybe_throttle(500)
    assert slept and 0.4 < slept[0] <= 0.5


# -- retained batches ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_retained_batch_keeps_offsets_codec_producer_and_timestamps(codec: CompressionType) -> None:
    raw = bytes(
        make_batch(
            [b"a", b"b", None, b"d"],
            keys=[b"1", b"2", b"3", b"4"],
            timestamps=[TS, TS + 5, TS + 9, TS + 2],
            base_offset=100,
            producer_id=7,
            producer_epoch=2,
            base_sequence=40,
            compression=codec,
        )
    )
    header = read_header(raw)
    records = list(iter_records(raw, header))
    kept = [records[1], records[2]]
    out = build_retained_batch(header, kept, delete_horizon_ms=TS + 1000)
    new = read_header(out)
    assert new.compression == codec and new.base_offset == 100 and new.last_offset == 103
    assert (new.producer_id, new.producer_epoch, new.base_sequence, new.records_count) == (7, 2, 40, 2)
    assert new.attributes & DELETE_HORIZON_MASK and new.base_timestamp == TS + 1000 and new.max_timestamp == TS + 9
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(out, new)] == [(101, TS + 5, b"2", b"b"), (102, TS + 9, b"3", None)]
    empty = build_retained_batch(header, [])
    empty_header = read_header(empty)
    assert len(empty) == 61 and empty_header.records_count == 0 and empty_header.compression == 0 and empty_header.last_offset == 103
    assert list(iter_records(empty, empty_header)) == []


# -- cleaning a log ---------------------------------------------------------------------------------------------


def manager_with(tmp_path: Path, clock: FakeClock, executor: Literal["thread", "process"] = "thread", config: dict[str, str] | None = None) -> tuple[LogManager, UnifiedLog]:
    manager = LogManager(tmp_path, LogConfig.from_properties({}), clock)
    manager.startup()
    plog = manager.get_or_create_log("t", 0, LogConfig.from_properties({**COMPACT, **(config or {})}), None)
    # No cleaner threads: the tests drive clean_filthiest_log.
    manager.cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20, executor=executor), lambda fn: fn(), clock)
    return manager, plog


def produce(plog: UnifiedLog, pairs: Sequence[tuple[bytes | None, bytes | None]], ts: int = TS, **batch: Any) -> None:
    for key, value in pairs:
        plog.append_as_leader(memoryview(make_batch([value], keys=[key], timestamps=[ts], **batch)), 0)
    # A sole replica: everything appended is committed, so the cleaner may reach it.
    plog.update_high_watermark(plog.log_end_offset)


def read_all(plog: UnifiedLog) -> list[Record]:
    return [r for header, data in plog.batches(0) for r in iter_records(bytes(data), header)]


def test_the_cleaner_stops_at_the_high_watermark(tmp_path: Path) -> None:
    """Kafka's cleanableOffsets: nothing at or past the last stable offset, so never past the high
    watermark (a follower may still truncate there)."""
    clock = FakeClock(TS)
    manager, plog = manager_with(tmp_path, clock)
    produce(plog, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(300)])
    plog.roll()
    high_watermark = plog.segments[2].base_offset + 1
    plog.update_high_watermark(high_watermark)
    assert log_to_clean(plog, None, clock()).first_uncleanable_offset == plog.segments[2].base_offset
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    assert manager.cleaner.checkpoints[("t", 0)] <= high_watermark
    assert [r.offset for r in read_all(plog) if r.offset >= high_watermark] == list(range(high_watermark, 300))
    plog.update_high_watermark(plog.log_end_offset)
    assert log_to_clean(plog, manager.cleaner.checkpoints[("t", 0)], clock()).first_uncleanable_offset == plog.active_segment.base_offset


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_cleaning_keeps_the_latest_record_of_each_key_and_the_offsets(tmp_path: Path, executor: Literal["thread", "process"]) -> None:
    clock = FakeClock(TS)
    manager, plog = manager_with(tmp_path, clock, executor)
    updates = [(b"k%d" % (i % 10), b"v%d" % i) for i in range(300)]
    produce(plog, updates)
    plog.roll()
    size_before = plog.size_in_bytes
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    records = read_all(plog)
    latest = {key: (offset, value) for offset, (key, value) in enumerate(updates)}
    assert [(r.key, r.offset, r.value) for r in records] == sorted(((k, o, v) for k, (o, v) in latest.items()), key=lambda t: t[1])
    assert plog.size_in_bytes < size_before / 10
    assert not list(tmp_path.glob("t-0/*.cleaned")) and not list(tmp_path.glob("t-0/*.swap*"))
    assert manager.cleaner.checkpoints[("t", 0)] == 300
    assert manager.cleaner.summaries[("t", 0)].stats.messages_written == 10
    assert log_to_clean(plog, 300, clock()).cleanable_ratio == 0.0
    assert not manager.cleaner.clean_filthiest_log()  # nothing dirty left
    # The next pass merges the segments the first one emptied (each was a full segment before).
    segments_before = len(plog.segments)
    produce(plog, updates[-10:])
    plog.roll()
    assert manager.cleaner.clean_filthiest_log()
    assert len(plog.segments) < segments_before / 4
    records = read_all(plog)
    assert [r.offset for r in records] == list(range(300, 310))
    manager.shutdown()
    reopened = UnifiedLog.open(tmp_path / "t-0", plog.config, topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=False, now_ms=clock)
    assert [(r.key, r.offset, r.value) for r in read_all(reopened)] == [(r.key, r.offset, r.value) for r in records]
    reopened.close()


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(tmp_path: Path, codec: CompressionType) -> None:
    manager, plog = manager_with(tmp_path, FakeClock(TS))
    for i in range(20):
        values = [b"x" * 30 + b"%d" % i for _ in range(5)]
        plog.append_as_leader(memoryview(make_batch(values, keys=[b"a", b"b", b"c", b"a", b"d%d" % (i % 3)], compression=codec)), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.roll()
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    headers = [h for h, _ in plog.batches(0)]
    assert {h.compression for h in headers} == {codec}
    keys = [r.key for r in read_all(plog)]
    assert len(keys) == 6 and set(keys) == {b"a", b"b", b"c", b"d0", b"d1", b"d2"}
    manager.shutdown()


def test_tombstones_stay_until_delete_retention_ms_after_their_cleaning(tmp_path: Path) -> None:
    clock = FakeClock(TS)
    manager, plog = manager_with(tmp_path, clock, config={"delete.retention.ms": "60000"})
    produce(plog, [(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"c", b"1")] * 20)
    plog.roll()
    cleaner = manager.cleaner
    assert cleaner is not None and cleaner.clean_filthiest_log()
    assert {(r.key, r.value) for r in read_all(plog)} == {(b"a", None), (b"b", b"1"), (b"c", b"1")}
    assert any(h.attributes & DELETE_HORIZON_MASK for h, _ in plog.batches(0))
    clock.advance(30_000)
    assert not cleaner.clean_filthiest_log()
    clock.advance(30_001)
    assert cleaner.clean_filthiest_log()  # the horizon passed: cleaned though nothing is dirty
    assert {(r.key, r.value) for r in read_all(plog)} == {(b"b", b"1"), (b"c", b"1")}
    assert cleaner.summaries[("t", 0)].stats.tombstones_removed == 1
    manager.shutdown()


def test_keyless_records_are_dropped_and_refused_on_append(tmp_path: Path) -> None:
    manager, plog = manager_with(tmp_path, FakeClock(TS))
    with pytest.raises(InvalidRecordError) as refused:
        plog.append_as_leader(memoryview(make_batch([b"x", b"y", b"z"], keys=[b"k", None, None])), 0)
    assert refused.value.error_code == 87
    assert [index for index, _ in refused.value.record_errors] == [1, 2]
    assert "Compacted topic cannot accept message without key in topic partition t-0." in str(refused.value)
    # A follower copies what its leader has: a keyless record can reach a compacted log that way.
    plog.append_as_follower(bytes(make_batch([b"x", b"y"], keys=[b"k", None], base_offset=0)))
    produce(plog, [(b"k", b"new")] * 30)
    plog.roll()
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    assert [(r.key, r.value) for r in read_all(plog)] == [(b"k", b"new")]
    manager.shutdown()


def test_an_idempotent_producers_last_batch_survives_empty(tmp_path: Path) -> None:
    manager, plog = manager_with(tmp_path, FakeClock(TS))
    for seq in range(5):
        produce(plog, [(b"k", b"p%d" % seq)], producer_id=9, producer_epoch=0, base_sequence=seq)
    produce(plog, [(b"k", b"plain")] * 30)
    plog.roll()
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    kept = [(h.producer_id, h.base_sequence, h.records_count) for h, _ in plog.batches(0) if h.producer_id == 9]
    assert kept == [(9, 4, 0)]
    assert [(r.key, r.value) for r in read_all(plog)] == [(b"k", b"plain")]
    produce(plog, [(b"k", b"p5")], producer_id=9, producer_epoch=0, base_sequence=5)
    produce(plog, [(b"k", b"plain")] * 30)
    plog.roll()
    assert manager.cleaner.clean_filthiest_log()
    kept = [(h.producer_id, h.base_sequence, h.records_count) for h, _ in plog.batches(0) if h.producer_id == 9]
    assert kept == [(9, 5, 0)]  # the empty batch kept before goes: it is no longer the producer's last
    manager.shutdown()


def txn_batch(plog: UnifiedLog, key: bytes, value: bytes, producer_id: int, sequence: int) -> None:
    batch = make_batch([value], keys=[key], producer_id=producer_id, producer_epoch=0, base_sequence=sequence, attributes=TRANSACTIONAL_MASK, base_offset=plog.log_end_offset)
    plog.append_as_follower(bytes(batch))


def marker(plog: UnifiedLog, kind: ControlRecordType, producer_id: int) -> None:
    plog.append_as_follower(build_control_batch(kind, producer_id, 0, 0, TS, base_offset=plog.log_end_offset))


def test_open_transactions_stop_the_cleaner(tmp_path: Path) -> None:
    manager, plog = manager_with(tmp_path, FakeClock(TS))
    txn_batch(plog, b"k", b"txn", 3, 0)
    produce(plog, [(b"k", b"later")] * 30)
    plog.roll()
    assert manager.cleaner is not None and not manager.cleaner.clean_filthiest_log()
    marker(plog, ControlRecordType.COMMIT, 3)
    produce(plog, [(b"k", b"last")] * 2)
    plog.roll()
    assert manager.cleaner.clean_filthiest_log()
    assert [(r.offset, r.value) for r in read_all(plog) if r.key == b"k"] == [(33, b"last")]  # a committed record is superseded like any other
    manager.shutdown()


def test_aborted_data_goes_and_markers_stay_until_safe(tmp_path: Path) -> None:
    clock = FakeClock(TS)
    manager, plog = manager_with(tmp_path, clock, config={"delete.retention.ms": "1000"})
    txn_batch(plog, b"a", b"committed", 3, 0)  # 0
    marker(plog, ControlRecordType.COMMIT, 3)  # 1
    txn_batch(plog, b"b", b"aborted", 4, 0)  # 2
    txn_batch(plog, b"c", b"aborted", 4, 1)  # 3
    marker(plog, ControlRecordType.ABORT, 4)  # 4
    produce(plog, [(b"e", b"after")], producer_id=4, producer_epoch=0, base_sequence=2)  # 5: producer 4's last data batch
    produce(plog, [(b"d%d" % i, b"x") for i in range(20)])
    plog.roll()
    cleaner = manager.cleaner
    assert cleaner is not None and cleaner.clean_filthiest_log()
    records = {r.offset: (r.key, r.value) for r in read_all(plog)}
    assert records[0] == (b"a", b"committed") and 2 not in records and 3 not in records
    assert 1 in records and 4 in records  # both markers: their transactions' batches were there when the pass began
    assert [(t.producer_id, t.first_offset, t.last_offset) for s in plog.segments for t in s.txn_index.entries] == [(4, 2, 4)]
    produce(plog, [(b"d%d" % i, b"y") for i in range(20)])
    plog.roll()
    assert cleaner.clean_filthiest_log()
    records = {r.offset: (r.key, r.value) for r in read_all(plog)}
    assert 1 in records and 4 in records  # the ABORT marker now waits for its delete horizon; the COMMIT one for its batch
    assert [t for s in plog.segments for t in s.txn_index.entries] == []  # no aborted data left to hide
    clock.advance(1001)
    assert cleaner.clean_filthiest_log()
    records = {r.offset: (r.key, r.value) for r in read_all(plog)}
    assert 4 not in records and 1 in records and records[0] == (b"a", b"committed")
    assert [(h.base_offset, h.records_count) for h, _ in plog.batches(0) if h.producer_id == 4] == [(5, 1)]
    manager.shutdown()


def test_an_aborted_transactions_last_batch_stays_empty_with_its_marker(tmp_path: Path) -> None:
    """As in Kafka: the producer's last data batch is kept (emptied), so its ABORT marker is too."""
    manager, plog = manager_with(tmp_path, FakeClock(TS))
    txn_batch(plog, b"b", b"aborted", 4, 0)
    marker(plog, ControlRecordType.ABORT, 4)
    produce(plog, [(b"d%d" % i, b"x") for i in range(20)])
    plog.roll()
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    batches = [(h.base_offset, h.records_count, h.is_control) for h, _ in plog.batches(0) if h.producer_id == 4]
    assert batches == [(0, 0, False), (1, 1, True)]
    assert [(t.first_offset, t.last_offset) for s in plog.segments for t in s.txn_index.entries] == [(0, 1)]
    manager.shutdown()


def test_a_commit_marker_stays_while_its_batches_do_in_another_group(tmp_path: Path) -> None:
    clock = FakeClock(TS)
    # 250 bytes: the transaction's batch and its marker land in different segment groups.
    manager, plog = manager_with(tmp_path, clock, config={"segment.bytes": "250", "delete.retention.ms": "1000"})
    txn_batch(plog, b"t", b"committed", 5, 0)
    plog.roll()
    for key in (b"x", b"y"):
        produce(plog, [(key, b"1")])
        plog.roll()
    marker(plog, ControlRecordType.COMMIT, 5)
    plog.roll()
    produce(plog, [(b"z", b"1")])
    plog.roll()
    cleaner = manager.cleaner
    assert cleaner is not None and cleaner.clean_filthiest_log()
    clock.advance(5000)
    produce(plog, [(b"z", b"2")])
    plog.roll()
    assert cleaner.clean_filthiest_log()
    markers = [h for h, _ in plog.batches(0) if h.is_control]
    assert [(h.base_offset, h.records_count) for h in markers] == [(3, 1)]
    manager.shutdown()
    reopened = UnifiedLog.open(tmp_path / "t-0", plog.config, topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=False, now_ms=clock)
    reopened.update_high_watermark(reopened.log_end_offset)  # as the broker does from its checkpoint
    assert reopened.first_unstable_offset is None  # the transaction is still seen to end
    reopened.close()


def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    clock = FakeClock(TS + 1000)
    manager, plog = manager_with(tmp_path, clock, config={"min.compaction.lag.ms": "10000"})
    produce(plog, [(b"k", b"v")] * 60, ts=TS)
    plog.roll()
    assert manager.cleaner is not None and not manager.cleaner.clean_filthiest_log()
    clock.advance(10_000)
    assert manager.cleaner.clean_filthiest_log()
    manager.shutdown()
    clock = FakeClock(TS + 1000)
    manager, plog = manager_with(tmp_path / "lag", clock)
    produce(plog, [(b"k%d" % i, b"v") for i in range(100)], ts=TS)
    plog.roll()
    assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
    plog.update_config(LogConfig.from_properties({**COMPACT, "max.compaction.lag.ms": "5000", "min.cleanable.dirty.ratio": "0.99"}))
    produce(plog, [(b"k1", b"w")], ts=clock())
    plog.roll()
    info = log_to_clean(plog, manager.cleaner.checkpoints[("t", 0)], clock())
    assert 0 < info.cleanable_ratio < 0.99 and not info.needs_compaction_now
    assert not manager.cleaner.clean_filthiest_log()
    clock.advance(5_001)
    assert manager.cleaner.clean_filthiest_log()  # overdue: cleaned whatever the ratio
    assert [r.value for r in read_all(plog) if r.key == b"k1"] == [b"w"]
    manager.shutdown()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.none() | st.binary(min_size=1, max_size=8)), min_size=1, max_size=60),
    st.sampled_from([0, CompressionType.GZIP, CompressionType.ZSTD]),
    st.integers(1, 4),
)
def test_cleaning_keeps_exactly_each_keys_latest_record(updates: list[tuple[bytes, bytes | None]], codec: int, per_batch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock(TS)
        manager, plog = manager_with(Path(tmp), clock, config={"segment.bytes": "400"})
        for i in range(0, len(updates), per_batch):
            chunk = updates[i : i + per_batch]
            plog.append_as_leader(memoryview(make_batch([v for _, v in chunk], keys=[k for k, _ in chunk], compression=codec)), 0)
        plog.update_high_watermark(plog.log_end_offset)
        plog.roll()
        assert manager.cleaner is not None and manager.cleaner.clean_filthiest_log()
        latest = {key: (offset, value) for offset, (key, value) in enumerate(updates)}
        got = [(r.offset, r.key, r.value) for r in read_all(plog)]
        assert got == sorted((offset, key, value) for key, (offset, value) in latest.items())
        assert plog.log_end_offset == len(updates)
        manager.shutdown()
