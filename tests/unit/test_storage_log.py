"""Log: leader and follower appends, validation, rolling, reads as file regions, ListOffsets."""

from __future__ import annotations

import os
import struct
import uuid
from pathlib import Path

import crc32c
import pytest

from protocol.compression import CompressionType
from protocol.control_records import build_control_batch
from protocol.record_batch import CONTROL_MASK, is_crc_valid, iter_headers
from storage.errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    UnsupportedForMessageFormatError,
)
from storage.local_log import parse_topic_partition
from storage.producer_state_manager import AppendOrigin
from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from tests.unit.batch_factory import FakeClock, concat, decode_records, make_batch

BASE_TS = 1_700_000_000_000


def open_log(directory: Path, clock: FakeClock, *, clean: bool = True, recovery_point: int = 0, log_start_offset: int = 0, topic_id: uuid.UUID | None = None, **props: str) -> UnifiedLog:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return UnifiedLog.open(
        directory,
        config,
        topic_id=topic_id,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        had_clean_shutdown=clean,
        now_ms=clock,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "my-topic-0"


def produce(plog: UnifiedLog, *batches: bytearray, epoch: int = 0) -> tuple[int, int]:
    info = plog.append_as_leader(memoryview(concat(*batches)), epoch)
    return info.first_offset, info.last_offset


def read_all(plog: UnifiedLog, start: int = 0, max_offset: int | None = None, chunk: int = 300) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Fetch from ``start`` the way a consumer does: read, decode whole batches, continue after the last."""
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    offset = start
    upper = plog.log_end_offset if max_offset is None else max_offset
    for _ in range(10_000):
        if offset >= upper:
            break
        info = plog.read(offset, chunk, max_offset, True)
        if not info.regions:
            break
        region = info.regions[0]
        records = [r for r in decode_records(os.pread(region.fd, region.length, region.position)) if r[0] >= offset]
        out += records
        offset = records[-1][0] + 1
    return out


def file_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.suffix == ".log"}


# -- appends ----------------------------------------------------------------------------------------


def test_append_assigns_dense_offsets_and_reads_back(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    assert plog.topic_partition == ("my-topic", 0)
    values = []
    for i in range(30):
        batch_values = [f"v{i}-{j}".encode() for j in range(i % 4 + 1)]
        values += batch_values
        first, last = produce(plog, make_batch(batch_values))
        assert last - first + 1 == len(batch_values)
    assert plog.log_end_offset == len(values)
    got = read_all(plog)
    assert [r[0] for r in got] == list(range(len(values)))
    assert [r[3] for r in got] == values
    plog.close()


def test_one_buffer_with_several_batches_is_one_write(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a"]))
    buffer = concat(make_batch([b"b", b"c"]), make_batch([b"d"]), make_batch([b"e", b"f", b"g"]))
    info = plog.append_as_leader(memoryview(buffer), 7)
    assert (info.first_offset, info.last_offset, info.records_count, info.valid_bytes) == (1, 6, 6, len(buffer))
    # Offsets and the leader epoch were rewritten in the caller's buffer, CRCs still valid.
    headers = list(iter_headers(buffer))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(1, 7), (3, 7), (4, 7)]
    assert all(is_crc_valid(buffer, h) for h in headers)
    assert (log_dir / "00000000000000000000.log").read_bytes().endswith(bytes(buffer))
    assert [r[3] for r in read_all(plog)] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    plog.close()


def test_append_info_reports_timestamps(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    info = plog.append_as_leader(memoryview(concat(make_batch([b"a", b"b"], timestamps=[BASE_TS + 5, BASE_TS + 9]), make_batch([b"c"], timestamps=[BASE_TS + 7]))), 0)
    assert info.max_timestamp == BASE_TS + 9 and info.offset_of_max_timestamp == 1
    assert info.log_append_time == -1 and info.log_start_offset == 0
    plog.close()


def test_log_append_time_rewrites_timestamps_and_crc(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, message_timestamp_type="LogAppendTime")
    buffer = concat(make_batch([b"a", b"b"], timestamps=[1, 2]), make_batch([b"c"], timestamps=[3]))
    info = plog.append_as_leader(memoryview(buffer), 0)
    assert info.log_append_time == clock.now and info.max_timestamp == clock.now and info.offset_of_max_timestamp == 1
    stored = (log_dir / "00000000000000000000.log").read_bytes()
    headers = list(iter_headers(stored))
    assert all(h.is_log_append_time and h.max_timestamp == clock.now and is_crc_valid(stored, h) for h in headers)
    assert [r[1] for r in decode_records(stored)] == [clock.now] * 3
    plog.close()


def test_empty_input_appends_nothing(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    info = plog.append_as_leader(memoryview(bytearray()), 0)
    assert (info.first_offset, info.last_offset, info.records_count, info.valid_bytes) == (-1, -1, 0, 0)
    assert plog.log_end_offset == 0
    plog.close()


def corrupt_crc(batch: bytearray) -> bytearray:
    bad = bytearray(batch)
    bad[-1] ^= 0x55
    return bad


def count_lie(batch: bytearray, count: int) -> bytearray:
    """The batch with its record count and last offset delta raised to ``count`` (CRC refreshed)."""
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(batch[21:]))
    return batch


def legacy_message_set() -> bytearray:
    """A magic-1 message (offset, size, crc, magic=1, ...), which produce v3+ never carries."""
    body = struct.pack(">bbq", 1, 0, BASE_TS) + struct.pack(">i", -1) + struct.pack(">i", 3) + b"abc"
    message = struct.pack(">I", 0) + body
    return bytearray(struct.pack(">qi", 0, len(message)) + message)


@pytest.mark.parametrize(
    ("make_bad", "error"),
    [
        (lambda: corrupt_crc(make_batch([b"x"])), CorruptRecordError),
        (lambda: bytearray(os.urandom(64)), CorruptRecordError),
        (lambda: bytearray(b"\x00" * 20), CorruptRecordError),
        (lambda: make_batch([b"x" * 50])[:-10], CorruptRecordError),
        (lambda: concat(make_batch([b"ok"]), make_batch([b"x"])[:30]), CorruptRecordError),
        (lambda: concat(make_batch([b"ok"]), corrupt_crc(make_batch([b"x"]))), CorruptRecordError),
        (legacy_message_set, UnsupportedForMessageFormatError),
        (lambda: make_batch([b"x" * 2000]), RecordTooLargeError),
        (lambda: make_batch([b"a", b"b"], offset_deltas=[0, 5]), InvalidRecordError),
        (lambda: make_batch([], base_offset=0), InvalidRecordError),
        (lambda: make_batch([b"x"], base_offset=3), InvalidRecordError),
        (lambda: make_batch([b"x"], attributes=CONTROL_MASK), InvalidRecordError),
        (lambda: make_batch([b"x"], producer_id=5, producer_epoch=0, base_sequence=-1), InvalidRecordError),
        (lambda: make_batch([b"x"], timestamps=[FakeClock().now + 3_600_001]), InvalidTimestampError),
        (lambda: count_lie(make_batch([b"a", b"b"]), 1000), InvalidRecordError),
    ],
)
def test_invalid_input_is_rejected_and_nothing_is_written(log_dir: Path, clock: FakeClock, make_bad, error) -> None:  # type: ignore[no-untyped-def]
    plog = open_log(log_dir, clock, max_message_bytes="1000")
    produce(plog, make_batch([b"before"]))
    size_before = file_sizes(log_dir)
    bad = make_bad()
    pristine = bytes(bad)
    with pytest.raises(error) as err:
        plog.append_as_leader(memoryview(bad), 0)
    assert err.value.error_code == error.error_code
    assert plog.log_end_offset == 1 and file_sizes(log_dir) == size_before
    assert bytes(bad) == pristine  # validation happens before any rewriting
    assert [r[3] for r in read_all(plog)] == [b"before"]
    plog.close()


def test_error_codes_are_kafkas() -> None:
    assert CorruptRecordError.error_code == 2 and OffsetOutOfRangeError.error_code == 1
    assert RecordTooLargeError.error_code == 10 and RecordBatchTooLargeError.error_code == 18
    assert InvalidRecordError.error_code == 87 and UnsupportedForMessageFormatError.error_code == 43
    assert InvalidTimestampError.error_code == 32


def test_buffer_larger_than_a_segment_is_record_batch_too_large(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="300")
    with pytest.raises(RecordBatchTooLargeError):
        produce(plog, make_batch([b"x" * 200]), make_batch([b"y" * 200]))
    assert plog.log_end_offset == 0
    plog.close()


def test_coordinator_may_write_control_batches(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    info = plog.append_as_leader(memoryview(bytearray(build_control_batch(9, 0, 0, True, 1))), 2, AppendOrigin.COORDINATOR)
    assert info.first_offset == 0
    with pytest.raises(InvalidRecordError):
        plog.append_as_leader(memoryview(make_batch([b"marker"], attributes=CONTROL_MASK, producer_id=9, producer_epoch=0)), 2, AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidRecordError):
        plog.append_as_leader(memoryview(make_batch([b"x"], partition_leader_epoch=1)), 2, AppendOrigin.RAFT_LEADER)
    plog.append_as_leader(memoryview(make_batch([b"x"], partition_leader_epoch=2)), 2, AppendOrigin.RAFT_LEADER)
    assert plog.log_end_offset == 2
    plog.close()


def test_read_only_memoryview_is_accepted(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    info = plog.append_as_leader(memoryview(bytes(make_batch([b"ro"]))), 0)
    assert info.first_offset == 0 and [r[3] for r in read_all(plog)] == [b"ro"]
    plog.close()


# -- follower appends ----------------------------------------------------------------------------------


def test_follower_append_keeps_offsets_allows_gaps_and_drops_a_partial_tail(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    fetched = concat(make_batch([b"a", b"b"], base_offset=0, partition_leader_epoch=3), make_batch([b"c"], base_offset=5, partition_leader_epoch=4))
    partial = make_batch([b"d" * 40], base_offset=6, partition_leader_epoch=4)[:50]
    info = plog.append_as_follower(memoryview(concat(fetched, partial)))
    assert (info.first_offset, info.last_offset, info.valid_bytes) == (0, 5, len(fetched))
    assert plog.log_end_offset == 6
    assert plog.leader_epoch_cache.entries == [(3, 0), (4, 5)]
    assert [(r[0], r[3]) for r in read_all(plog)] == [(0, b"a"), (1, b"b"), (5, b"c")]
    with pytest.raises(UnexpectedAppendOffsetError):
        plog.append_as_follower(memoryview(make_batch([b"again"], base_offset=5)))
    with pytest.raises(OffsetsOutOfOrderError):
        plog.append_as_follower(memoryview(concat(make_batch([b"x", b"y"], base_offset=8), make_batch([b"z"], base_offset=9))))
    with pytest.raises(CorruptRecordError):
        plog.append_as_follower(memoryview(corrupt_crc(make_batch([b"x"], base_offset=6))))
    assert plog.log_end_offset == 6
    plog.close()


# -- rolling ------------------------------------------------------------------------------------------


def test_roll_on_segment_bytes(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="1000")
    batch_size = len(make_batch([b"x" * 100]))
    for _ in range(25):
        produce(plog, make_batch([b"x" * 100]))
    per_segment = 1000 // batch_size
    assert [s.base_offset for s in plog.segments] == list(range(0, 25, per_segment))
    assert all(s.size <= 1000 for s in plog.segments)
    # Rolled segments were trimmed: their index files hold only real entries.
    for segment in plog.segments[:-1]:
        assert segment.offset_index.path.stat().st_size == 8 * segment.offset_index.entries
    assert len(read_all(plog)) == 25
    plog.close()


def test_roll_on_segment_ms_uses_record_timestamps(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_ms="60000")
    produce(plog, make_batch([b"a"], timestamps=[BASE_TS]))
    produce(plog, make_batch([b"b"], timestamps=[BASE_TS + 60_000]))
    assert len(plog.segments) == 1
    produce(plog, make_batch([b"c"], timestamps=[BASE_TS + 60_001]))
    assert [s.base_offset for s in plog.segments] == [0, 2]
    plog.close()


def test_roll_on_segment_ms_without_timestamps_uses_the_clock(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_ms="1000")
    produce(plog, make_batch([b"a"], timestamps=[-1]))
    clock.advance(1001)
    produce(plog, make_batch([b"b"], timestamps=[-1]))
    assert [s.base_offset for s in plog.segments] == [0, 1]
    plog.close()


def test_roll_when_an_index_is_full(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_index_bytes="24", index_interval_bytes="0")
    for i in range(10):
        produce(plog, make_batch([f"{i}".encode()]))
    assert len(plog.segments) > 2
    assert all(s.offset_index.entries <= 3 and s.time_index.entries <= 2 for s in plog.segments)
    assert [r[0] for r in read_all(plog)] == list(range(10))
    plog.close()


# -- reads ---------------------------------------------------------------------------------------------


def test_read_cuts_mid_batch_unless_min_one_message(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    big = make_batch([b"x" * 500])
    produce(plog, big)
    produce(plog, make_batch([b"small"]))
    info = plog.read(0, 100, None, False)
    assert [r.length for r in info.regions] == [100] and info.first_entry_incomplete
    info = plog.read(0, 100, None, True)
    assert [r.length for r in info.regions] == [len(big)]
    info = plog.read(0, len(big) + 30, None, False)
    assert info.regions[0].length == len(big) + 30  # ends inside the second batch
    plog.close()


def test_read_is_bounded_by_max_offset(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="400")
    for i in range(12):
        produce(plog, make_batch([f"{i}a".encode(), f"{i}b".encode()]))
    assert len(plog.segments) > 2
    for high_watermark in (2, 6, 10, 13, 24):
        upper = high_watermark - high_watermark % 2  # batches are 2 records: HW on a batch boundary
        got = read_all(plog, 0, max_offset=upper)
        assert [r[0] for r in got] == list(range(upper))
    assert plog.read(6, 10_000, 6, True).regions == []
    plog.close()


def test_read_at_the_end_and_out_of_range(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a", b"b", b"c"]))
    assert plog.read(3, 1000, None, True).regions == []
    assert plog.read(3, 1000, 3, True).fetch_offset == 3
    with pytest.raises(OffsetOutOfRangeError) as err:
        plog.read(4, 1000, None, True)
    assert err.value.error_code == 1
    with pytest.raises(OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(2)  # past the high watermark
    plog.update_high_watermark(3)
    plog.maybe_increment_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(1, 1000, None, True)
    info = plog.read(2, 1000, None, True)
    assert info.regions and info.fetch_offset == 2  # the whole batch; the client skips offsets below 2
    plog.close()


def test_read_hands_out_one_segment_region(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="200")
    for i in range(6):
        produce(plog, make_batch([b"y" * 60]))
    info = plog.read(0, 10**6, None, False)
    assert len(info.regions) == 1 and info.regions[0].fd == plog.segments[0].fd
    assert info.regions[0].length == plog.segments[0].size
    plog.close()


# -- ListOffsets --------------------------------------------------------------------------------------


def test_fetch_offset_by_timestamp(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="400", index_interval_bytes="50")
    timestamps = [BASE_TS + 10 * i for i in range(40)]
    for i in range(0, 40, 2):
        produce(plog, make_batch([b"r" * 20, b"s" * 20], timestamps=timestamps[i : i + 2]), epoch=3 if i < 20 else 5)
    assert len(plog.segments) > 3
    for target_index in (0, 1, 7, 20, 33, 39):
        assert plog.fetch_offset_by_timestamp(timestamps[target_index]) == (timestamps[target_index], target_index, 3 if target_index < 20 else 5)
        assert plog.fetch_offset_by_timestamp(timestamps[target_index] - 5) == (timestamps[target_index], target_index, 3 if target_index < 20 else 5)
    assert plog.fetch_offset_by_timestamp(BASE_TS - 1000) == (BASE_TS, 0, 3)
    assert plog.fetch_offset_by_timestamp(timestamps[-1] + 1) is None
    assert plog.fetch_offset_by_timestamp(-2) == (-1, 0, 3)
    assert plog.fetch_offset_by_timestamp(-4) == (-1, 0, 3)
    assert plog.fetch_offset_by_timestamp(-1) == (-1, 40, 5)
    assert plog.fetch_offset_by_timestamp(-5) == (-1, -1, -1)
    assert plog.fetch_offset_by_timestamp(-3) == (timestamps[-1], 39, 5)
    plog.close()


def test_by_time_skips_records_below_the_log_start(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a", b"b", b"c"], timestamps=[BASE_TS, BASE_TS + 1, BASE_TS + 2]))
    plog.update_high_watermark(3)
    plog.maybe_increment_log_start_offset(2)
    assert plog.fetch_offset_by_timestamp(BASE_TS) == (BASE_TS + 2, 2, 0)
    assert plog.fetch_offset_by_timestamp(-2) == (-1, 2, 0)
    plog.close()


def test_max_timestamp_names_the_first_record_carrying_it(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a", b"b"], timestamps=[BASE_TS + 1, BASE_TS + 2]))
    produce(plog, make_batch([b"c", b"d", b"e"], timestamps=[BASE_TS + 9, BASE_TS + 3, BASE_TS + 9]), epoch=2)
    produce(plog, make_batch([b"f"], timestamps=[BASE_TS + 4]), epoch=2)
    assert plog.fetch_offset_by_timestamp(-3) == (BASE_TS + 9, 2, 2)
    plog.close()


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.ZSTD, CompressionType.LZ4, CompressionType.SNAPPY])
def test_by_time_inside_a_compressed_batch(log_dir: Path, clock: FakeClock, codec: int) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a", b"b", b"c", b"d"], timestamps=[BASE_TS, BASE_TS + 5, BASE_TS + 10, BASE_TS + 7], compression=codec))
    assert plog.fetch_offset_by_timestamp(BASE_TS + 6) == (BASE_TS + 10, 2, 0)
    assert plog.fetch_offset_by_timestamp(-3) == (BASE_TS + 10, 2, 0)
    plog.close()


def test_log_append_time_answers_with_the_first_record(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, message_timestamp_type="LogAppendTime")
    produce(plog, make_batch([b"a", b"b"]))
    assert plog.fetch_offset_by_timestamp(clock.now) == (clock.now, 0, 0)
    assert plog.fetch_offset_by_timestamp(-3) == (clock.now, 0, 0)
    plog.close()


def test_empty_log_offsets(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    assert plog.fetch_offset_by_timestamp(-2) == (-1, 0, -1)
    assert plog.fetch_offset_by_timestamp(-1) == (-1, 0, -1)
    assert plog.fetch_offset_by_timestamp(-3) is None
    assert plog.fetch_offset_by_timestamp(BASE_TS) is None
    plog.close()


# -- misc ------------------------------------------------------------------------------------------------


def test_flush_messages_moves_the_recovery_point(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, flush_messages="3")
    produce(plog, make_batch([b"a", b"b"]))
    assert plog.recovery_point == 0 and plog.unflushed_messages == 2
    produce(plog, make_batch([b"c"]))
    assert plog.recovery_point == 3 and plog.unflushed_messages == 0
    plog.close()


def test_rolled_segments_are_flushed_later(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="200")
    for _ in range(4):
        produce(plog, make_batch([b"z" * 80]))
    assert plog.recovery_point == 0
    assert plog.flush_rolled_segments()
    assert plog.recovery_point == plog.active_segment.base_offset
    assert not plog.flush_rolled_segments()
    plog.flush()
    assert plog.recovery_point == plog.log_end_offset
    plog.close()


def test_partition_metadata_and_topic_id(log_dir: Path, clock: FakeClock) -> None:
    topic_id = uuid.UUID("b1f9a2c4-3d5e-4f60-8a7b-9c0d1e2f3a4b")
    plog = open_log(log_dir, clock, topic_id=topic_id)
    plog.close()
    text = (log_dir / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: sfmixD1eT2CKe5wNHi86Sw\n"
    assert open_log(log_dir, clock).topic_id == topic_id
    with pytest.raises(InconsistentTopicIdError):
        open_log(log_dir, clock, topic_id=uuid.uuid4())


def test_topic_partition_parsing() -> None:
    assert parse_topic_partition(Path("/x/my-dashed-topic-12")) == ("my-dashed-topic", 12)
    assert parse_topic_partition(Path("__cluster_metadata-0")) == ("__cluster_metadata", 0)
    for bad in ("noPartition", "topic-", "-3", "t-0.abc-delete"):
        with pytest.raises(ValueError):
            parse_topic_partition(Path(bad))


def test_end_offset_for_epoch(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    produce(plog, make_batch([b"a", b"b"]), epoch=1)
    produce(plog, make_batch([b"c"]), epoch=1)
    produce(plog, make_batch([b"d", b"e"]), epoch=4)
    assert plog.leader_epoch_cache.entries == [(1, 0), (4, 3)]
    assert plog.end_offset_for_epoch(1) == (1, 3)
    assert plog.end_offset_for_epoch(2) == (1, 3)
    assert plog.end_offset_for_epoch(4) == (4, 5)
    assert plog.end_offset_for_epoch(0) == (0, 0)
    assert plog.end_offset_for_epoch(9) == (-1, -1)
    plog.close()
