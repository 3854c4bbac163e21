"""Log loading and recovery: torn tails, garbage, corrupt CRCs, lost indexes, swap/temp files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from tests.unit.batch_factory import FakeClock, decode_records, make_batch

SEGMENT = "00000000000000000000"


def open_log(directory: Path, clock: FakeClock, *, clean: bool, recovery_point: int = 0, log_start_offset: int = 0, **props: str) -> UnifiedLog:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return UnifiedLog.open(
        directory, config, topic_id=None, recovery_point=recovery_point, log_start_offset=log_start_offset, had_clean_shutdown=clean, now_ms=clock
    )


def fill(plog: UnifiedLog, batches: int, records: int = 2, payload: int = 30) -> list[bytes]:
    values = []
    for i in range(batches):
        batch_values = [f"{i}-{j}-".encode() + b"p" * payload for j in range(records)]
        values += batch_values
        plog.append_as_leader(memoryview(make_batch(batch_values)), 1)
    return values


def crash(plog: UnifiedLog) -> None:
    """Drop the log the way a kill -9 does: no flush, no trimming, no time index entry at close."""
    plog.close_handlers()


def values_read(plog: UnifiedLog) -> list[bytes | None]:
    out = []
    offset = plog.log_start_offset
    for _ in range(10_000):
        if offset >= plog.log_end_offset:
            break
        region = plog.read(offset, 10**6, None, True).regions[0]
        records = [r for r in decode_records(os.pread(region.fd, region.length, region.position)) if r[0] >= offset]
        out += [r[3] for r in records]
        offset = records[-1][0] + 1
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "events-3"


def test_torn_tail_is_truncated_and_indexes_rebuilt(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=False, index_interval_bytes="100")
    values = fill(plog, 20)
    index_entries = [plog.active_segment.offset_index.entry(i) for i in range(plog.active_segment.offset_index.entries)]
    good_size = plog.active_segment.size
    crash(plog)
    with open(log_dir / f"{SEGMENT}.log", "ab") as f:
        f.write(bytes(make_batch([b"half written" * 10], base_offset=40))[:70])
    (log_dir / f"{SEGMENT}.index").unlink(missing_ok=True)  # a crash before any flush leaves none
    (log_dir / f"{SEGMENT}.timeindex").unlink(missing_ok=True)

    with capture_logs() as logged:
        reopened = open_log(log_dir, clock, clean=False, index_interval_bytes="100")
    assert (log_dir / f"{SEGMENT}.log").stat().st_size == good_size
    assert reopened.log_end_offset == 40 and reopened.recovery_point == 0
    # The index rebuild cut the torn tail before the recovery ran: the summary still counts it.
    [loaded] = [e for e in logged if e["event"] == "log.loaded"]
    assert (loaded["bytes_truncated"], loaded["indexes_rebuilt"]) == (70, 1)
    assert values_read(reopened) == values
    segment = reopened.active_segment
    assert [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)] == index_entries
    assert segment.time_index.entries >= 1
    info = reopened.append_as_leader(memoryview(make_batch([b"after"])), 2)
    assert info.first_offset == 40
    assert values_read(reopened) == values + [b"after"]
    reopened.close()


def test_garbage_tail_is_truncated(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=False)
    values = fill(plog, 5)
    crash(plog)
    with open(log_dir / f"{SEGMENT}.log", "ab") as f:
        f.write(os.urandom(300))
    reopened = open_log(log_dir, clock, clean=False)
    assert reopened.log_end_offset == 10 and values_read(reopened) == values
    reopened.close()


def test_corrupt_crc_in_the_middle_cuts_there_and_drops_later_segments(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=False, segment_bytes="600")
    values = fill(plog, 30)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4
    victim = plog.segments[1]
    positions = [p for p, _ in victim.batch_headers()]
    third_batch = positions[2]
    crash(plog)
    path = log_dir / f"{bases[1]:020d}.log"
    with open(path, "r+b") as f:
        f.seek(third_batch + 70)
        byte = f.read(1)
        f.seek(third_batch + 70)
        f.write(bytes([byte[0] ^ 0xFF]))

    reopened = open_log(log_dir, clock, clean=False, segment_bytes="600")
    expected_end = bases[1] + 2 * 2  # two whole batches of two records survive in that segment
    assert reopened.log_end_offset == expected_end
    assert [s.base_offset for s in reopened.segments] == bases[:2]
    assert sorted(p.name for p in log_dir.glob("*.log")) == [f"{b:020d}.log" for b in bases[:2]]
    assert values_read(reopened) == values[:expected_end]
    assert reopened.leader_epoch_cache.entries == [(1, 0)]
    reopened.close()


def test_clean_shutdown_skips_recovery(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True)
    values = fill(plog, 6)
    plog.flush()
    plog.close()
    # Damage that only a recovery would notice: a flipped bit inside a record.
    with open(log_dir / f"{SEGMENT}.log", "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0x01]))
    clean = open_log(log_dir, clock, clean=True)
    assert clean.log_end_offset == 12 and clean.recovery_point == 12
    assert len(values_read(clean)) == len(values)
    clean.close()
    unclean = open_log(log_dir, clock, clean=False)
    assert unclean.log_end_offset == 0 and unclean.recovery_point == 0
    unclean.close()


def test_segments_below_the_recovery_point_are_not_recovered(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=False, segment_bytes="600")
    fill(plog, 20)
    bases = [s.base_offset for s in plog.segments]
    first_size = plog.segments[0].size
    plog.flush()
    crash(plog)
    with open(log_dir / f"{SEGMENT}.log", "r+b") as f:
        f.seek(first_size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    reopened = open_log(log_dir, clock, clean=False, recovery_point=bases[2], segment_bytes="600")
    assert reopened.segments[0].size == first_size  # not re-validated: it was below the recovery point
    assert reopened.log_end_offset == 40 and reopened.recovery_point == bases[2]
    reopened.close()
    recovered = open_log(log_dir, clock, clean=False, recovery_point=0, segment_bytes="600")
    assert recovered.segments[0].size < first_size and len(recovered.segments) == 1
    recovered.close()


def test_lost_indexes_are_rebuilt_even_after_a_clean_shutdown(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True, segment_bytes="800", index_interval_bytes="120")
    values = fill(plog, 30)
    entries = {s.base_offset: [s.offset_index.entry(i) for i in range(s.offset_index.entries)] for s in plog.segments}
    plog.close()
    for path in log_dir.glob("*.index"):
        path.unlink()
    for path in list(log_dir.glob("*.timeindex"))[:2]:
        path.unlink()
    reopened = open_log(log_dir, clock, clean=True, segment_bytes="800", index_interval_bytes="120")
    assert {s.base_offset: [s.offset_index.entry(i) for i in range(s.offset_index.entries)] for s in reopened.segments} == entries
    assert len(list(log_dir.glob("*.index"))) == len(entries)
    assert values_read(reopened) == values
    assert reopened.fetch_offset_by_timestamp(-3) is not None
    reopened.close()


def test_preallocated_files_after_a_crash(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=False, preallocate="true", segment_bytes="100000")
    values = fill(plog, 8)
    crash(plog)
    assert (log_dir / f"{SEGMENT}.log").stat().st_size == 100000
    reopened = open_log(log_dir, clock, clean=False, preallocate="true", segment_bytes="100000")
    assert reopened.log_end_offset == 16 and values_read(reopened) == values
    reopened.append_as_leader(memoryview(make_batch([b"next"])), 1)
    assert values_read(reopened)[-1] == b"next"
    reopened.close()
    assert (log_dir / f"{SEGMENT}.log").stat().st_size == reopened.active_segment.size


def test_leftover_deleted_cleaned_and_orphan_files_are_removed(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True)
    fill(plog, 2)
    plog.close()
    for name in ("00000000000000000000.log.deleted", "00000000000000000000.index.deleted", "00000000000000000007.log.cleaned", "00000000000000000099.index", "leader-epoch-checkpoint.tmp"):
        (log_dir / name).write_bytes(b"junk")
    reopened = open_log(log_dir, clock, clean=True)
    assert sorted(p.name for p in log_dir.iterdir()) == [
        f"{SEGMENT}.index",
        f"{SEGMENT}.log",
        f"{SEGMENT}.timeindex",
        "00000000000000000004.snapshot",  # the producer state at the clean shutdown
        "leader-epoch-checkpoint",
    ]
    assert reopened.log_end_offset == 4
    reopened.close()


def test_interrupted_swap_is_completed(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True, segment_bytes="400")
    fill(plog, 12)
    bases = [s.base_offset for s in plog.segments]
    plog.close()
    assert len(bases) >= 3
    # A cleaner rewrote segments 0 and 1 into one .swap file and crashed before swapping it in.
    replacement = make_batch([b"compacted"], base_offset=bases[2] - 1)
    (log_dir / f"{SEGMENT}.log.swap").write_bytes(bytes(replacement))
    reopened = open_log(log_dir, clock, clean=True, segment_bytes="400")
    assert [s.base_offset for s in reopened.segments] == [0, *bases[2:]]
    assert not list(log_dir.glob("*.swap")) and not (log_dir / f"{bases[1]:020d}.log").exists()
    first = reopened.read(0, 10**6, None, True).regions[0]
    assert [r[3] for r in decode_records(os.pread(first.fd, first.length, first.position))] == [b"compacted"]
    reopened.close()


def test_log_start_offset_past_the_end_starts_over(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True)
    fill(plog, 3)
    plog.close()
    reopened = open_log(log_dir, clock, clean=True, log_start_offset=50)
    assert [s.base_offset for s in reopened.segments] == [50]
    assert reopened.log_start_offset == 50 and reopened.log_end_offset == 50
    assert not (log_dir / f"{SEGMENT}.log").exists()
    reopened.close()


def test_log_start_offset_checkpoint_inside_the_log(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, clean=True)
    fill(plog, 3)
    plog.close()
    reopened = open_log(log_dir, clock, clean=True, log_start_offset=3)
    assert reopened.log_start_offset == 3 and reopened.log_end_offset == 6
    assert reopened.leader_epoch_cache.entries == [(1, 3)]
    reopened.close()


def test_leader_epochs_lost_with_an_unflushed_checkpoint_come_back_from_the_batches(log_dir: Path, clock: FakeClock) -> None:
    # An assign writes leader-epoch-checkpoint without fsync; a crash before the log's next
    # flush may leave the file empty. Recovery from the recovery point rebuilds the entries.
    plog = open_log(log_dir, clock, clean=False)
    plog.append_as_leader(memoryview(make_batch([b"a", b"b"])), 3)
    plog.append_as_leader(memoryview(make_batch([b"c"])), 5)
    assert plog.leader_epoch_cache.entries == [(3, 0), (5, 2)]
    crash(plog)
    (log_dir / "leader-epoch-checkpoint").write_bytes(b"")
    reopened = open_log(log_dir, clock, clean=False)
    assert reopened.leader_epoch_cache.entries == [(3, 0), (5, 2)]
    reopened.flush()
    reopened.close()
    again = open_log(log_dir, clock, clean=True, recovery_point=3)
    assert again.leader_epoch_cache.entries == [(3, 0), (5, 2)]
    again.close()
