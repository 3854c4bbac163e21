"""Log, LogSegment and indexes on real files: append/read, lookups, rolls, recovery, retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.record_batch import is_crc_valid, iter_headers, read_header
from protocol.records import build_batch, iter_records
from storage.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from storage.log import Log
from storage.log_config import InvalidConfigError, LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def config(**props: str) -> LogConfig:
    return LogConfig.from_properties(props)


def batch(n: int, ts: int = 1000, size: int = 10) -> memoryview:
    return memoryview(bytearray(build_batch([(None, bytes([i % 256]) * size, (), ts + i) for i in range(n)])))


def open_log(path: Path, cfg: LogConfig, clock: Clock | None = None, clean: bool = True, recovery_point: int = 0) -> Log:
    return Log.open(path / "topic-0", cfg, topic_id=None, recovery_point=recovery_point, log_start_offset=0, had_clean_shutdown=clean, now_ms=clock or Clock())


def read_all(log: Log, start: int = 0) -> list[int]:
    offsets = []
    offset = start
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20, None, True)
        assert info.regions
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        for header in iter_headers(data):
            assert is_crc_valid(data, header)
            offsets.extend(r.offset for r in iter_records(data[header.position : header.position + header.size]))
            offset = header.next_offset
    return offsets


def test_append_assigns_dense_offsets_and_reads_back(tmp_path: Path) -> None:
    log = open_log(tmp_path, config())
    infos = [log.append_as_leader(batch(n), leader_epoch=3) for n in (1, 5, 2)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 5), (6, 7)]
    assert read_all(log) == list(range(8))
    data = os.pread(log.active_segment.fd, 61, 0)
    assert read_header(data).partition_leader_epoch == 3
    assert log.end_offset_for_epoch(3) == (3, 8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=40), interval=st.sampled_from([0, 50, 500, 4096]), segment_bytes=st.sampled_from([300, 2000, 1 << 20]))
def test_any_offset_translates_to_its_batch(tmp_path_factory: pytest.TempPathFactory, sizes: list[int], interval: int, segment_bytes: int) -> None:
    path = tmp_path_factory.mktemp("idx")
    log = open_log(path, config(**{"index.interval.bytes": str(interval), "segment.bytes": str(segment_bytes)}))
    for n in sizes:
        log.append_as_leader(batch(n), 0)
    total = sum(sizes)
    for offset in range(0, total, max(1, total // 15)):
        info = log.read(offset, 1, None, True)
        header = read_header(os.pread(info.regions[0].fd, 61, info.regions[0].position))
        assert header.base_offset <= offset <= header.last_offset
        assert info.regions[0].length == header.size  # min_one_message: the whole first batch


def test_read_limits(tmp_path: Path) -> None:
    log = open_log(tmp_path, config())
    for _ in range(4):
        log.append_as_leader(batch(10, size=100), 0)
    first_size = log.read(0, 1, None, True).regions[0].length
    assert log.read(0, 10, None, False).regions[0].length == 10  # may cut mid-batch, as Kafka does
    assert log.read(0, 1 << 20, 20, True).regions[0].length == 2 * first_size  # bounded by max_offset
    assert log.read(40, 100, None, True).regions == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(41, 100, None, True)


def test_rejects_bad_batches_and_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, config(**{"max.message.bytes": "500"}))
    good = bytes(batch(3))
    corrupt = bytearray(good)
    corrupt[-2] ^= 1
    for bad, error in ((corrupt, CorruptRecordError), (good + b"\x00\x01", CorruptRecordError), (good[:40], CorruptRecordError), (bytes(batch(3, size=400)), RecordTooLargeError)):
        with pytest.raises(error):
            log.append_as_leader(memoryview(bytearray(bad)), 0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_rolls_on_size_time_and_log_append_time(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, config(**{"segment.bytes": "400", "segment.ms": "1000", "message.timestamp.type": "LogAppendTime"}), clock)
    log.append_as_leader(batch(2), 0)
    log.append_as_leader(batch(2), 0)
    assert [s.base_offset for s in log.segments] == [0]
    log.append_as_leader(batch(20), 0)
    assert [s.base_offset for s in log.segments] == [0, 4]
    clock.now += 2000
    log.append_as_leader(batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 4, 24]
    data = os.pread(log.segments[2].fd, 1000, 0)
    header = read_header(data)
    assert header.is_log_append_time and header.max_timestamp == clock.now and is_crc_valid(data, header)


def test_offsets_by_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, config(**{"index.interval.bytes": "0"}))
    log.append_as_leader(batch(5, ts=100), 0)
    log.append_as_leader(batch(5, ts=200), 0)
    assert log.fetch_offset_by_timestamp(102)[:2] == (102, 2)
    assert log.fetch_offset_by_timestamp(150)[:2] == (200, 5)
    assert log.fetch_offset_by_timestamp(205) is None
    assert log.fetch_offset_by_timestamp(-2)[1] == 0 and log.fetch_offset_by_timestamp(-1)[1] == 10
    assert log.fetch_offset_by_timestamp(-3)[:2] == (204, 9)


def test_recovery_truncates_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    cfg = config(**{"segment.bytes": "2000", "index.interval.bytes": "0"})
    log = open_log(tmp_path, cfg)
    for _ in range(12):
        log.append_as_leader(batch(5), 0)
    expected_end = log.log_end_offset
    active = log.active_segment
    log.close()
    with open(active.log_path, "ab") as f:
        f.write(bytes(batch(5))[:50])  # a torn write
    for index in tmp_path.glob("topic-0/*.index"):
        index.unlink()
    log = open_log(tmp_path, cfg, clean=False)
    assert log.log_end_offset == expected_end
    assert read_all(log) == list(range(expected_end))
    assert all(len(s.offset_index) > 0 for s in log.segments if s.size)
    log.append_as_leader(batch(1), 0)
    assert log.log_end_offset == expected_end + 1


def test_recovery_stops_at_corruption_in_the_middle(tmp_path: Path) -> None:
    log = open_log(tmp_path, config())
    for _ in range(6):
        log.append_as_leader(batch(5), 0)
    path = log.active_segment.log_path
    log.close()
    data = bytearray(path.read_bytes())
    third = sum(h.size for h in list(iter_headers(data))[:2])
    data[third + 70] ^= 0xFF
    path.write_bytes(bytes(data))
    log = open_log(tmp_path, config(), clean=False)
    assert log.log_end_offset == 10 and read_all(log) == list(range(10))


def test_retention_by_size_and_time_moves_log_start(tmp_path: Path) -> None:
    clock = Clock()
    cfg = config(**{"segment.bytes": "300", "retention.bytes": "600", "file.delete.delay.ms": "1000"})
    log = open_log(tmp_path, cfg, clock)
    for _ in range(10):
        log.append_as_leader(batch(2, ts=clock.now), 0)
    segments_before = len(log.segments)
    assert log.delete_old_segments() > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert len(log.segments) < segments_before
    assert list(tmp_path.glob("topic-0/*.deleted"))
    clock.now += 1000
    log.delete_pending_segments()
    assert not list(tmp_path.glob("topic-0/*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100, None, True)
    log.update_config(config(**{"segment.bytes": "300", "retention.ms": "5000"}))
    clock.now += 10_000
    log.delete_old_segments()
    assert log.log_start_offset == log.log_end_offset == 20
    assert log.append_as_leader(batch(1), 0).first_offset == 20


def test_log_manager_checkpoints_and_clean_shutdown(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, config())
    manager.startup()
    assert manager.had_clean_shutdown is False
    log = manager.get_or_create_log("orders-events", 3, config(), None)
    log.append_as_leader(batch(4, ts=time.time_ns() // 1_000_000), 0)
    log.maybe_increment_log_start_offset(2)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    again = LogManager(tmp_path, config())
    again.startup()
    assert again.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = again.get_log("orders-events", 3)
    assert reopened is not None and reopened.log_end_offset == 4 and reopened.log_start_offset == 2
    assert again.ensure_meta_properties(1, None) == again.ensure_meta_properties(1, None)


def test_config_validation_names_the_key() -> None:
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        config(**{"segment.bytes": "abc"})
    with pytest.raises(InvalidConfigError, match="no.such"):
        config(**{"no.such": "1"})
    assert config(**{"cleanup.policy": "delete, compact"}).compacts
