"""KafkaMetadataLog on a real folder: appends, reads, epochs, Kafka's fetch validation, truncation,
snapshots and log start, reopening after a clean close and after an unclean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.records import build_batch, iter_batches, iter_records
from raft.file_snapshots import FileRawSnapshotWriter, list_snapshot_paths, snapshot_path
from raft.kafka_metadata_log import METADATA_TOPIC_ID, KafkaMetadataLog, MetadataLogConfig, metadata_log_dir
from raft.replicated_log import LogAppendInfo, OffsetAndEpoch, ValidationKind, ValidOffsetAndEpoch
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    UnexpectedAppendOffsetError,
)
from tests.unit.batch_factory import FakeClock

SMALL = MetadataLogConfig(segment_bytes=600, segment_min_bytes=1)


def batch(values: list[bytes], *, base_offset: int = 0, epoch: int = -1) -> bytes:
    return build_batch([(None, v, (), 1_000) for v in values], base_offset=base_offset, partition_leader_epoch=epoch)


def open_log(directory: Path, config: MetadataLogConfig = SMALL) -> KafkaMetadataLog:
    return KafkaMetadataLog.open(directory, config, now_ms=FakeClock())


def crash(mlog: KafkaMetadataLog) -> None:
    """What kill -9 leaves: no flush, no close, only the fds released."""
    mlog.log.close_handlers()


def fill(mlog: KafkaMetadataLog, epochs: list[tuple[int, int]], per_batch: int = 2) -> None:
    """For each (epoch, batch count): initialize the epoch, then append that many batches in it."""
    for epoch, count in epochs:
        mlog.initialize_leader_epoch(epoch)
        for _ in range(count):
            end = mlog.end_offset()
            mlog.append_as_leader(batch([f"v{end + i}".encode() for i in range(per_batch)]), epoch)


def records(mlog: KafkaMetadataLog, start: int | None = None) -> list[tuple[int, int, bytes | None]]:
    """(offset, epoch, value) of every record from ``start`` (the log start) to the end, via ``read``."""
    out: list[tuple[int, int, bytes | None]] = []
    offset = mlog.start_offset() if start is None else start
    while offset < mlog.end_offset():
        info = mlog.read(offset, 100)
        assert info.records, f"no batch read at {offset}"
        for header, data in iter_batches(info.records):
            for record in iter_records(data, header):
                if record.offset >= offset:
                    out.append((record.offset, header.partition_leader_epoch, record.value))
        offset = out[-1][0] + 1
    return out


def batch_bases(mlog: KafkaMetadataLog) -> list[int]:
    bases: list[int] = []
    offset = mlog.start_offset()
    while offset < mlog.end_offset():
        headers = [h for h, _ in iter_batches(mlog.read(offset, 1 << 20).records)]
        bases += [h.base_offset for h in headers]
        offset = headers[-1].next_offset
    return bases


def freeze_snapshot(writer: FileRawSnapshotWriter | None, payload: bytes = b"state") -> OffsetAndEpoch:
    assert writer is not None
    writer.append(batch([payload]))
    writer.freeze()
    writer.close()
    return writer.snapshot_id


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".log"))


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return metadata_log_dir(tmp_path)


# -- a new log ------------------------------------------------------------------------------------------


def test_new_log(directory: Path) -> None:
    mlog = open_log(directory)
    assert directory.name == "__cluster_metadata-0"
    assert mlog.topic_id == METADATA_TOPIC_ID
    assert (mlog.start_offset(), mlog.end_offset(), mlog.high_watermark(), mlog.last_fetched_epoch()) == (0, 0, 0, 0)
    assert mlog.latest_snapshot_id() is None and mlog.earliest_snapshot_id() is None and mlog.latest_snapshot() is None
    assert mlog.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert mlog.validate_offset_and_epoch(0, 0) == ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(0, 0))
    assert mlog.read(0, 100).records == b""
    mlog.close()


def test_config_refuses_segments_below_the_minimum() -> None:
    with pytest.raises(ValueError):
        MetadataLogConfig(segment_bytes=1024)
    config = MetadataLogConfig().log_config()
    assert (config.retention_ms, config.retention_bytes, config.max_message_bytes) == (-1, -1, 8 * 1024 * 1024)


# -- appends ----------------------------------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_stamps_the_epoch(directory: Path) -> None:
    mlog = open_log(directory)
    mlog.initialize_leader_epoch(1)
    assert mlog.append_as_leader(batch([b"a", b"b"]), 1) == LogAppendInfo(0, 1)
    assert mlog.append_as_leader(batch([b"c"], base_offset=77) + batch([b"d", b"e"]), 1) == LogAppendInfo(2, 4)
    mlog.initialize_leader_epoch(4)
    assert mlog.append_as_leader(batch([b"f"], epoch=4), 4) == LogAppendInfo(5, 5)
    assert records(mlog) == [(0, 1, b"a"), (1, 1, b"b"), (2, 1, b"c"), (3, 1, b"d"), (4, 1, b"e"), (5, 4, b"f")]
    assert mlog.last_fetched_epoch() == 4
    assert mlog.end_offset() == 6
    mlog.close()


def test_leader_append_refuses_a_batch_built_for_another_epoch(directory: Path) -> None:
    mlog = open_log(directory)
    with pytest.raises(InvalidRecordError):
        mlog.append_as_leader(batch([b"a"]) + batch([b"b"], epoch=2), 3)
    with pytest.raises(ValueError):
        mlog.append_as_leader(b"", 3)
    with pytest.raises(CorruptRecordError):
        mlog.append_as_leader(batch([b"a"])[:-3], 3)
    assert mlog.end_offset() == 0
    mlog.close()


def test_follower_append_keeps_offsets_and_epochs(directory: Path) -> None:
    mlog = open_log(directory)
    data = batch([b"a", b"b"], base_offset=0, epoch=1) + batch([b"c"], base_offset=2, epoch=3)
    assert mlog.append_as_follower(data, 3) == LogAppendInfo(0, 2)
    assert records(mlog) == [(0, 1, b"a"), (1, 1, b"b"), (2, 3, b"c")]
    assert mlog.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert mlog.last_fetched_epoch() == 3
    mlog.close()


def test_follower_append_drops_a_trailing_partial_batch(directory: Path) -> None:
    mlog = open_log(directory)
    whole = batch([b"a"], base_offset=0, epoch=1)
    assert mlog.append_as_follower(whole + batch([b"b"], base_offset=1, epoch=1)[:30], 1) == LogAppendInfo(0, 0)
    assert mlog.end_offset() == 1
    with pytest.raises(CorruptRecordError):
        mlog.append_as_follower(batch([b"b"], base_offset=1, epoch=1)[:30], 1)
    mlog.close()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (batch([b"x"], base_offset=3, epoch=1), UnexpectedAppendOffsetError),  # a gap after the log end
        (batch([b"x"], base_offset=1, epoch=1), UnexpectedAppendOffsetError),  # below the log end
        (batch([b"x"], base_offset=2, epoch=1) + batch([b"y"], base_offset=4, epoch=1), OffsetsOutOfOrderError),  # a gap between batches
        (batch([b"x", b"y"], base_offset=2, epoch=1) + batch([b"z"], base_offset=3, epoch=1), OffsetsOutOfOrderError),  # overlap
        (batch([b"x"], base_offset=2, epoch=9), InvalidRecordError),  # past the leader's epoch
        (batch([b"x"], base_offset=2, epoch=0), InvalidRecordError),  # epochs going back
        (batch([b"x"], base_offset=2, epoch=2) + batch([b"y"], base_offset=3, epoch=1), InvalidRecordError),
        (b"\x00" * 80, CorruptRecordError),
    ],
)
def test_follower_append_fails_cleanly(directory: Path, data: bytes, error: type[Exception]) -> None:
    mlog = open_log(directory)
    mlog.append_as_follower(batch([b"a", b"b"], base_offset=0, epoch=1), 2)
    with pytest.raises(error):
        mlog.append_as_follower(data, 2)
    assert mlog.end_offset() == 2
    assert records(mlog) == [(0, 1, b"a"), (1, 1, b"b")]
    mlog.close()


def test_follower_append_checks_crcs(directory: Path) -> None:
    mlog = open_log(directory)
    damaged = bytearray(batch([b"abc"], base_offset=0, epoch=1))
    damaged[-2] ^= 0x55
    with pytest.raises(CorruptRecordError):
        mlog.append_as_follower(bytes(damaged), 1)
    assert mlog.end_offset() == 0
    mlog.close()


# -- reads --------------------------------------------------------------------------------------------------


def test_read_returns_whole_batches_and_at_least_one(directory: Path) -> None:
    mlog = open_log(directory)
    mlog.append_as_leader(batch([b"x" * 50, b"y" * 50]), 1)
    mlog.append_as_leader(batch([b"z"]), 1)
    mlog.append_as_leader(batch([b"w"]), 1)
    first_size = len(batch([b"x" * 50, b"y" * 50]))
    assert len(mlog.read(0, 1).records) == first_size
    # A limit that cuts the second batch leaves it out.
    assert len(mlog.read(0, first_size + 10).records) == first_size
    # From inside a batch: the batch holding the offset.
    info = mlog.read(1, 1)
    assert info.start_offset == 1 and len(info.records) == first_size
    assert [h.base_offset for h, _ in iter_batches(mlog.read(2, 10_000).records)] == [2, 3]
    assert mlog.read(4, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        mlog.read(5, 100)
    mlog.close()


def test_reads_cross_segments(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 30)])
    assert len(segment_files(directory)) > 2
    assert [r[0] for r in records(mlog)] == list(range(60))
    assert [r[2] for r in records(mlog, 33)] == [f"v{i}".encode() for i in range(33, 60)]
    mlog.close()


# -- epochs and Kafka's fetch validation ------------------------------------------------------------------


@pytest.fixture
def epochs_log(directory: Path) -> KafkaMetadataLog:
    """Epoch 1 over [0, 10), 3 over [10, 20), 5 over [20, 30)."""
    mlog = open_log(directory)
    fill(mlog, [(1, 5), (3, 5), (5, 5)])
    assert mlog.end_offset() == 30
    return mlog


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(0, (0, 0)), (1, (10, 1)), (2, (10, 1)), (3, (20, 3)), (4, (20, 3)), (5, (30, 5)), (6, (30, 5))],
)
def test_end_offset_for_epoch(epochs_log: KafkaMetadataLog, epoch: int, expected: tuple[int, int]) -> None:
    assert epochs_log.end_offset_for_epoch(epoch) == OffsetAndEpoch(*expected)


@pytest.mark.parametrize(
    ("offset", "epoch", "kind", "expected"),
    [
        (0, 0, ValidationKind.VALID, (0, 0)),
        (10, 1, ValidationKind.VALID, (10, 1)),
        (15, 3, ValidationKind.VALID, (15, 3)),
        (30, 5, ValidationKind.VALID, (30, 5)),
        (25, 4, ValidationKind.DIVERGING, (20, 3)),  # an epoch this log never had
        (22, 3, ValidationKind.DIVERGING, (20, 3)),  # past the end of epoch 3 here
        (35, 5, ValidationKind.DIVERGING, (30, 5)),  # past the log end
        (5, 2, ValidationKind.DIVERGING, (10, 1)),
        (12, 7, ValidationKind.DIVERGING, (30, 5)),  # a later epoch than any here
        (10, 0, ValidationKind.DIVERGING, (0, 0)),
    ],
)
def test_validate_offset_and_epoch_without_snapshots(epochs_log: KafkaMetadataLog, offset: int, epoch: int, kind: ValidationKind, expected: tuple[int, int]) -> None:
    assert epochs_log.validate_offset_and_epoch(offset, epoch) == ValidOffsetAndEpoch(kind, OffsetAndEpoch(*expected))


@pytest.fixture
def snapshotted_log(epochs_log: KafkaMetadataLog) -> KafkaMetadataLog:
    """The epochs log with snapshots at (12, 3) and (20, 3), its start moved to 20."""
    epochs_log.update_high_watermark(25)
    freeze_snapshot(epochs_log.create_new_snapshot(OffsetAndEpoch(12, 3)))
    freeze_snapshot(epochs_log.create_new_snapshot(OffsetAndEpoch(20, 3)))
    assert epochs_log.delete_before_snapshot(OffsetAndEpoch(20, 3))
    assert epochs_log.start_offset() == 20
    return epochs_log


@pytest.mark.parametrize(
    ("offset", "epoch", "kind", "expected"),
    [
        (10, 1, ValidationKind.SNAPSHOT, (20, 3)),  # below the log start
        (20, 2, ValidationKind.SNAPSHOT, (20, 3)),  # at the log start with another epoch than the snapshot's
        (20, 1, ValidationKind.SNAPSHOT, (20, 3)),
        (25, 2, ValidationKind.SNAPSHOT, (20, 3)),  # an epoch older than the snapshot's
        (20, 3, ValidationKind.VALID, (20, 3)),
        (25, 5, ValidationKind.VALID, (25, 5)),
        (25, 4, ValidationKind.DIVERGING, (20, 3)),  # the snapshot stands in for the epochs before the start
        (25, 3, ValidationKind.DIVERGING, (20, 3)),
        (31, 5, ValidationKind.DIVERGING, (30, 5)),
    ],
)
def test_validate_offset_and_epoch_with_snapshots(snapshotted_log: KafkaMetadataLog, offset: int, epoch: int, kind: ValidationKind, expected: tuple[int, int]) -> None:
    assert snapshotted_log.validate_offset_and_epoch(offset, epoch) == ValidOffsetAndEpoch(kind, OffsetAndEpoch(*expected))


# -- truncation and the high watermark -------------------------------------------------------------------


def test_truncate_to(epochs_log: KafkaMetadataLog) -> None:
    directory = epochs_log.dir
    epochs_log.update_high_watermark(12)
    epochs_log.truncate_to(14)
    assert epochs_log.end_offset() == 14
    assert epochs_log.end_offset_for_epoch(5) == OffsetAndEpoch(14, 3)
    assert epochs_log.last_fetched_epoch() == 3
    assert [r[0] for r in records(epochs_log)] == list(range(14))
    assert not [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    assert int(segment_files(directory)[-1].removesuffix(".log")) <= 14
    with pytest.raises(ValueError):
        epochs_log.truncate_to(11)
    epochs_log.truncate_to(12)
    assert epochs_log.end_offset() == 12
    epochs_log.append_as_follower(batch([b"n"], base_offset=12, epoch=6), 6)
    assert records(epochs_log)[-1] == (12, 6, b"n")
    epochs_log.close()


def test_truncate_to_the_end_drops_an_epoch_that_never_wrote(epochs_log: KafkaMetadataLog) -> None:
    epochs_log.initialize_leader_epoch(7)
    assert epochs_log.last_fetched_epoch() == 7
    epochs_log.truncate_to(30)
    assert epochs_log.last_fetched_epoch() == 5
    epochs_log.close()


def test_high_watermark_is_bounded_and_in_memory_only(epochs_log: KafkaMetadataLog) -> None:
    epochs_log.update_high_watermark(17)
    assert epochs_log.high_watermark() == 17
    epochs_log.update_high_watermark(99)
    assert epochs_log.high_watermark() == 30
    directory = epochs_log.dir
    epochs_log.close()
    reopened = open_log(directory)
    assert reopened.high_watermark() == 0
    reopened.close()


def test_flush_moves_the_last_flushed_offset(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 3)])
    assert mlog.last_flushed_offset() == 0
    mlog.flush()
    assert mlog.last_flushed_offset() == 6
    fill(mlog, [(2, 1)])
    assert mlog.last_flushed_offset() == 6
    mlog.flush()
    assert mlog.last_flushed_offset() == 8
    mlog.close()


# -- snapshots --------------------------------------------------------------------------------------------


def test_create_new_snapshot_checks(epochs_log: KafkaMetadataLog) -> None:
    epochs_log.update_high_watermark(20)
    with pytest.raises(ValueError):
        epochs_log.create_new_snapshot(OffsetAndEpoch(25, 5))  # past the high watermark
    with pytest.raises(ValueError):
        epochs_log.create_new_snapshot(OffsetAndEpoch(15, 2))  # diverges from the log
    writer = epochs_log.create_new_snapshot(OffsetAndEpoch(20, 3))
    assert writer is not None
    writer.append(batch([b"s"]))
    assert epochs_log.latest_snapshot_id() is None and epochs_log.read_snapshot(OffsetAndEpoch(20, 3)) is None
    writer.freeze()
    assert epochs_log.latest_snapshot_id() == epochs_log.earliest_snapshot_id() == OffsetAndEpoch(20, 3)
    assert epochs_log.create_new_snapshot(OffsetAndEpoch(20, 3)) is None
    assert epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(20, 3)) is None
    reader = epochs_log.latest_snapshot()
    assert reader is not None and reader.read(0, 1000) == batch([b"s"])
    assert epochs_log.read_snapshot(OffsetAndEpoch(20, 3)) is reader
    # Unchecked: a leader's snapshot, past anything this log has.
    assert epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(500, 9)) is not None
    epochs_log.close()


def test_delete_before_snapshot(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 20), (2, 20)])
    mlog.update_high_watermark(80)
    before = segment_files(directory)
    old = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(30, 1)))
    new = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(50, 2)))
    assert not mlog.delete_before_snapshot(OffsetAndEpoch(40, 2))  # not a snapshot
    assert mlog.delete_before_snapshot(new)
    assert mlog.start_offset() == 50
    after = segment_files(directory)
    bases = [int(name.removesuffix(".log")) for name in after]
    # Whole segments below the snapshot are gone; the one holding offset 50 stays.
    assert len(after) < len(before) and bases[0] <= 50 < (bases[1] if len(bases) > 1 else mlog.end_offset())
    assert [p.snapshot_id for p in list_snapshot_paths(directory)] == [new]
    assert mlog.earliest_snapshot_id() == new and mlog.read_snapshot(old) is None
    assert [r[0] for r in records(mlog)] == list(range(50, 80))
    with pytest.raises(OffsetOutOfRangeError):
        mlog.read(49, 100)
    assert not mlog.delete_before_snapshot(new)  # the log starts there already
    assert not [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    assert mlog.create_new_snapshot(OffsetAndEpoch(40, 2)) is None  # below the log start
    mlog.close()


def test_delete_before_snapshot_refuses_to_pass_the_high_watermark(epochs_log: KafkaMetadataLog) -> None:
    epochs_log.update_high_watermark(10)
    freeze_snapshot(epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(20, 3)))
    with pytest.raises(OffsetOutOfRangeError):
        epochs_log.delete_before_snapshot(OffsetAndEpoch(20, 3))
    assert epochs_log.start_offset() == 0
    epochs_log.close()


def test_a_fetched_snapshot_past_the_log_end_replaces_the_log(epochs_log: KafkaMetadataLog) -> None:
    epochs_log.update_high_watermark(20)
    old = freeze_snapshot(epochs_log.create_new_snapshot(OffsetAndEpoch(10, 1)))
    assert not epochs_log.truncate_to_latest_snapshot()
    fetched = freeze_snapshot(epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(100, 8)))
    assert epochs_log.truncate_to_latest_snapshot()
    assert (epochs_log.start_offset(), epochs_log.end_offset(), epochs_log.high_watermark()) == (100, 100, 100)
    assert epochs_log.last_fetched_epoch() == 8
    assert epochs_log.end_offset_for_epoch(8) == OffsetAndEpoch(100, 8)
    assert epochs_log.validate_offset_and_epoch(100, 8).kind is ValidationKind.VALID
    assert [p.snapshot_id for p in list_snapshot_paths(epochs_log.dir)] == [fetched]
    assert epochs_log.read_snapshot(old) is None
    assert segment_files(epochs_log.dir) == ["00000000000000000100.log"]
    with pytest.raises(InvalidRecordError):
        epochs_log.append_as_follower(batch([b"older"], base_offset=100, epoch=7), 8)
    epochs_log.append_as_follower(batch([b"after"], base_offset=100, epoch=8), 8)
    assert records(epochs_log) == [(100, 8, b"after")]
    epochs_log.close()


def test_a_snapshot_of_a_later_epoch_replaces_the_log(epochs_log: KafkaMetadataLog) -> None:
    freeze_snapshot(epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(25, 6)))
    assert epochs_log.truncate_to_latest_snapshot()
    assert (epochs_log.start_offset(), epochs_log.end_offset()) == (25, 25)
    epochs_log.close()


def test_a_snapshot_this_log_diverges_from_replaces_the_log(epochs_log: KafkaMetadataLog) -> None:
    # Offset 14 is epoch 3 here; the snapshot says the record before 15 was written in epoch 4.
    freeze_snapshot(epochs_log.create_new_snapshot_unchecked(OffsetAndEpoch(15, 4)))
    assert epochs_log.truncate_to_latest_snapshot()
    assert (epochs_log.start_offset(), epochs_log.end_offset(), epochs_log.last_fetched_epoch()) == (15, 15, 4)
    epochs_log.close()


# -- reopening ----------------------------------------------------------------------------------------------


def test_reopen_after_close_keeps_everything(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 10), (4, 10)])
    mlog.update_high_watermark(40)
    snapshot = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(30, 4)))
    expected = records(mlog)
    mlog.close()

    reopened = open_log(directory)
    assert records(reopened) == expected
    assert reopened.end_offset_for_epoch(1) == OffsetAndEpoch(20, 1)
    assert reopened.last_fetched_epoch() == 4
    assert reopened.latest_snapshot_id() == snapshot
    assert reopened.last_flushed_offset() == 0  # recovery from offset 0, as Kafka opens it
    reader = reopened.read_snapshot(snapshot)
    assert reader is not None and reader.read(0, 1000) == batch([b"state"])
    reopened.close()


def test_reopen_after_delete_before_snapshot(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 20), (2, 20)])
    mlog.update_high_watermark(80)
    snapshot = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(50, 2)))
    mlog.delete_before_snapshot(snapshot)
    mlog.close()
    reopened = open_log(directory)
    # As in Kafka the log start is not checkpointed: it is the first segment's base, at or below the snapshot.
    assert reopened.start_offset() <= 50 and reopened.earliest_snapshot_id() == snapshot
    assert [r[0] for r in records(reopened)] == list(range(reopened.start_offset(), 80))
    assert reopened.validate_offset_and_epoch(80, 2).kind is ValidationKind.VALID
    reopened.close()


def test_unclean_stop_keeps_what_was_written(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 5)])
    mlog.flush()
    fill(mlog, [(2, 5)])
    expected = records(mlog)
    crash(mlog)
    reopened = open_log(directory)
    assert records(reopened) == expected
    assert reopened.end_offset_for_epoch(1) == OffsetAndEpoch(10, 1)
    reopened.close()


@pytest.mark.parametrize("damage", ["torn tail", "garbage tail"])
def test_unclean_stop_with_a_torn_tail_recovers_to_the_last_whole_batch(directory: Path, damage: str) -> None:
    mlog = open_log(directory, MetadataLogConfig(segment_bytes=1 << 20, segment_min_bytes=1))
    fill(mlog, [(1, 4), (2, 1)])
    expected = records(mlog)
    crash(mlog)
    segment = directory / "00000000000000000000.log"
    if damage == "torn tail":
        os.truncate(segment, segment.stat().st_size - 7)
    else:
        with open(segment, "ab") as f:
            f.write(os.urandom(40))
    reopened = open_log(directory, MetadataLogConfig(segment_bytes=1 << 20, segment_min_bytes=1))
    if damage == "torn tail":
        assert records(reopened) == expected[:-2]
        assert reopened.end_offset() == 8 and reopened.last_fetched_epoch() == 1
    else:
        assert records(reopened) == expected
    end = reopened.end_offset()
    reopened.initialize_leader_epoch(3)
    reopened.append_as_leader(batch([b"again"]), 3)
    assert records(reopened)[-1] == (end, 3, b"again")
    reopened.close()


def test_unclean_stop_while_writing_a_snapshot(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 10)])
    mlog.update_high_watermark(20)
    frozen = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(10, 1)))
    writer = mlog.create_new_snapshot(OffsetAndEpoch(20, 1))
    assert writer is not None
    writer.append(batch([b"half"]))
    crash(mlog)
    assert any(p.partial for p in list_snapshot_paths(directory))
    reopened = open_log(directory)
    assert [p.snapshot_id for p in list_snapshot_paths(directory)] == [frozen]
    assert reopened.latest_snapshot_id() == frozen
    reader = reopened.read_snapshot(frozen)
    assert reader is not None and reader.read(0, 1000) == batch([b"state"])
    reopened.close()


def test_unclean_stop_after_a_fetched_snapshot_before_the_truncation(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 5)])
    freeze_snapshot(FileRawSnapshotWriter.create(directory, OffsetAndEpoch(50, 3)))
    crash(mlog)
    reopened = open_log(directory)
    assert (reopened.start_offset(), reopened.end_offset(), reopened.last_fetched_epoch()) == (50, 50, 3)
    reopened.close()


def test_opening_deletes_snapshots_below_the_log_start_and_leftovers(directory: Path) -> None:
    mlog = open_log(directory)
    fill(mlog, [(1, 5)])
    mlog.update_high_watermark(10)
    freeze_snapshot(mlog.create_new_snapshot_unchecked(OffsetAndEpoch(40, 2)))
    assert mlog.truncate_to_latest_snapshot()
    mlog.close()
    freeze_snapshot(FileRawSnapshotWriter.create(directory, OffsetAndEpoch(5, 1)))
    (directory / "00000000000000000040-0000000002.checkpoint.deleted").write_bytes(b"")
    reopened = open_log(directory)
    assert [p.path.name for p in list_snapshot_paths(directory)] == ["00000000000000000040-0000000002.checkpoint"]
    assert reopened.earliest_snapshot_id() == OffsetAndEpoch(40, 2)
    reopened.close()


def test_a_log_start_no_snapshot_reaches_is_refused(directory: Path) -> None:
    mlog = open_log(directory)
    freeze_snapshot(mlog.create_new_snapshot_unchecked(OffsetAndEpoch(40, 2)))
    assert mlog.truncate_to_latest_snapshot()
    mlog.close()
    snapshot_path(directory, OffsetAndEpoch(40, 2)).unlink()
    with pytest.raises(KafkaStorageError):
        open_log(directory)


_WRITER = """
import sys
from pathlib import Path
from protocol.records import build_batch
from raft.kafka_metadata_log import KafkaMetadataLog, MetadataLogConfig
from raft.replicated_log import OffsetAndEpoch
mlog = KafkaMetadataLog.open(Path(sys.argv[1]), MetadataLogConfig(segment_bytes=2000, segment_min_bytes=1))
mlog.initialize_leader_epoch(1)
while True:
    end = mlog.end_offset()
    mlog.append_as_leader(build_batch([(None, b"r%d" % end, (), 1000)]), 1)
    mlog.flush()
    mlog.update_high_watermark(mlog.end_offset())
    if end % 10 == 9:
        writer = mlog.create_new_snapshot(OffsetAndEpoch(end + 1, 1))
        writer.append(build_batch([(None, b"s%d" % end, (), 1000)]))
        writer.freeze()
        mlog.delete_before_snapshot(writer.snapshot_id)
    # A snapshot always in the making: the kill finds one half written.
    mlog.create_new_snapshot_unchecked(OffsetAndEpoch(10**9 + end, 1)).append(b"partial")
    print("flushed", mlog.end_offset(), flush=True)
"""


def test_kill_9_loses_nothing_flushed_and_no_frozen_snapshot(directory: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(directory)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    flushed = 0
    deadline = time.monotonic() + 60
    try:
        assert child.stdout is not None
        while flushed < 45 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            if line.startswith("flushed "):  # the rest is the log's own logging
                flushed = int(line.split()[1])
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert flushed >= 45, "the writer did not get going"
    mlog = open_log(directory)
    assert mlog.end_offset() >= flushed
    assert not [p for p in list_snapshot_paths(directory) if p.partial]
    latest = mlog.latest_snapshot_id()
    assert latest is not None and latest.offset % 10 == 0 and mlog.start_offset() <= latest.offset
    reader = mlog.read_snapshot(latest)
    assert reader is not None and reader.read(0, 1000) == batch([f"s{latest.offset - 1}".encode()])
    assert [(o, v) for o, _, v in records(mlog)] == [(o, f"r{o}".encode()) for o in range(mlog.start_offset(), mlog.end_offset())]
    mlog.close()


# -- a model check --------------------------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=3), st.booleans()),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=40), st.booleans()),
        st.tuples(st.just("commit"), st.integers(min_value=0, max_value=40), st.booleans()),
        st.tuples(st.just("snapshot"), st.just(0), st.booleans()),
        st.tuples(st.just("reopen"), st.just(0), st.booleans()),
    ),
    max_size=25,
)


@given(ops=operations)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_matches_a_list_model(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bool]]) -> None:
    """Appends in rising epochs, truncations at or above the high watermark, snapshots that may move
    the log start, clean and unclean reopens: the log reads back as a plain list would."""
    directory = metadata_log_dir(tmp_path_factory.mktemp("model"))
    mlog = open_log(directory)
    model: list[tuple[int, bytes]] = []  # (epoch, value) by offset
    epoch = 1
    for op, n, flag in ops:
        high_watermark = mlog.high_watermark()
        if op == "append":
            if flag:
                epoch += 1
            mlog.initialize_leader_epoch(epoch)
            values = [f"{len(model) + i}@{epoch}".encode() for i in range(n)]
            mlog.append_as_leader(batch(values), epoch)
            model += [(epoch, v) for v in values]
        elif op == "truncate":
            # At a batch boundary, as Raft's divergence points are.
            boundaries = [b for b in batch_bases(mlog) if b >= high_watermark] + [len(model)]
            target = boundaries[n % len(boundaries)]
            mlog.truncate_to(target)
            del model[target:]
        elif op == "commit":
            mlog.update_high_watermark(n)
            assert mlog.high_watermark() == min(max(n, mlog.start_offset()), len(model))
        elif op == "snapshot":
            latest = mlog.latest_snapshot_id()
            if high_watermark > max(mlog.start_offset(), latest.offset if latest else 0):
                snapshot_id = freeze_snapshot(mlog.create_new_snapshot(OffsetAndEpoch(high_watermark, model[high_watermark - 1][0])))
                assert mlog.latest_snapshot_id() == snapshot_id
                if flag:
                    assert mlog.delete_before_snapshot(snapshot_id)
                    assert mlog.start_offset() == snapshot_id.offset
                    assert mlog.earliest_snapshot_id() == snapshot_id
        else:
            if flag:
                mlog.close()
            else:
                crash(mlog)
            mlog = open_log(directory)
        start = mlog.start_offset()
        assert mlog.end_offset() == len(model)
        assert [(e, v) for _, e, v in records(mlog)] == model[start:]
        if mlog.earliest_snapshot_id() is not None:
            continue
        for asked in range(0, epoch + 2):
            if not model:
                continue
            earlier = [e for e, _ in model if e <= asked]
            later = [i for i, (e, _) in enumerate(model) if e > asked]
            if not earlier:
                expected = OffsetAndEpoch(later[0], asked)
            else:
                expected = OffsetAndEpoch(later[0] if later else len(model), max(earlier))
            assert mlog.end_offset_for_epoch(asked) == expected
    mlog.close()
