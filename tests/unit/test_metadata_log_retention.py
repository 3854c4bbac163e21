"""metadata.max.retention.bytes / .ms on the on-disk metadata log (Kafka's KafkaMetadataLog.maybeClean):
the log start stays while both limits hold, moves only to a snapshot, the oldest snapshots go first,
the latest always stays, and never past the bound the Raft core gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.records import build_batch
from raft.control_records import build_control_batch, snapshot_header
from raft.file_snapshots import list_snapshot_paths
from raft.kafka_metadata_log import KafkaMetadataLog, MetadataLogConfig
from raft.replicated_log import OffsetAndEpoch
from raft.snapshot_retention import MetadataRetention, last_contained_log_timestamp
from tests.unit.batch_factory import FakeClock
from tests.unit.test_kafka_metadata_log import fill

DAY_MS = 24 * 60 * 60 * 1000
UNLIMITED = MetadataRetention(max_bytes=-1, max_ms=-1)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "__cluster_metadata-0"


def open_log(directory: Path, retention: MetadataRetention) -> KafkaMetadataLog:
    mlog = KafkaMetadataLog.open(directory, MetadataLogConfig(segment_bytes=600, segment_min_bytes=1, retention=retention), now_ms=FakeClock())
    fill(mlog, [(1, 20), (2, 20)])  # offsets 0..79, several segments
    mlog.update_high_watermark(80)
    return mlog


def snapshot(mlog: KafkaMetadataLog, offset: int, epoch: int, timestamp: int) -> OffsetAndEpoch:
    writer = mlog.create_new_snapshot(OffsetAndEpoch(offset, epoch))
    assert writer is not None
    writer.append(build_control_batch([snapshot_header(timestamp)], timestamp))
    writer.append(build_batch([(None, b"s" * 100, (), timestamp)]))
    writer.freeze()
    writer.close()
    return writer.snapshot_id


def snapshots(mlog: KafkaMetadataLog, directory: Path) -> list[OffsetAndEpoch]:
    on_disk = sorted(p.snapshot_id for p in list_snapshot_paths(directory))
    assert on_disk == mlog.snapshot_ids()
    return on_disk


def test_the_snapshot_header_gives_the_timestamp(directory: Path) -> None:
    mlog = open_log(directory, UNLIMITED)
    sid = snapshot(mlog, 30, 1, 123_456)
    reader = mlog.read_snapshot(sid)
    assert reader is not None and last_contained_log_timestamp(reader) == 123_456
    mlog.close()


def test_the_log_start_stays_while_under_both_limits(directory: Path) -> None:
    mlog = open_log(directory, MetadataRetention(max_bytes=1 << 20, max_ms=DAY_MS))
    now = 10 * DAY_MS
    first, second = snapshot(mlog, 30, 1, now - DAY_MS + 1), snapshot(mlog, 50, 2, now)
    assert not mlog.maybe_clean(now, 80)
    assert mlog.start_offset() == 0 and snapshots(mlog, directory) == [first, second]
    mlog.close()


def test_unlimited_keeps_everything(directory: Path) -> None:
    mlog = open_log(directory, UNLIMITED)
    snapshot(mlog, 30, 1, 0), snapshot(mlog, 50, 2, 0)
    assert not mlog.maybe_clean(100 * DAY_MS, 80)
    assert mlog.start_offset() == 0 and len(mlog.snapshot_ids()) == 2
    mlog.close()


def test_over_the_byte_limit_the_oldest_snapshots_go_until_under_it(directory: Path) -> None:
    mlog = open_log(directory, UNLIMITED)
    ids = [snapshot(mlog, 20, 1, 0), snapshot(mlog, 40, 2, 0), snapshot(mlog, 60, 2, 0)]
    snapshot_size = mlog.read_snapshot(ids[0]).size_in_bytes()  # type: ignore[union-attr]
    mlog.close()
    # Room for the log from offset 40 on and the two newest snapshots, not for the log from 20.
    mlog = KafkaMetadataLog.open(directory, MetadataLogConfig(segment_bytes=600, segment_min_bytes=1), now_ms=FakeClock())
    mlog.update_high_watermark(80)
    segments_before = len(list(directory.glob("*.log")))
    full_size = mlog.size_in_bytes() + 3 * snapshot_size
    mlog.retention = MetadataRetention(max_bytes=full_size - 1, max_ms=-1)
    assert mlog.maybe_clean(0, 80)
    assert mlog.start_offset() == 40 and snapshots(mlog, directory) == ids[1:]
    assert len(list(directory.glob("*.log"))) < segments_before
    assert not mlog.maybe_clean(0, 80)  # under the limit now
    # A limit of 0: down to the newest snapshot, which always stays.
    mlog.retention = MetadataRetention(max_bytes=0, max_ms=-1)
    assert mlog.maybe_clean(0, 80)
    assert mlog.start_offset() == 60 and snapshots(mlog, directory) == ids[2:]
    assert not mlog.maybe_clean(0, 80)
    mlog.close()


def test_past_the_time_limit_snapshots_go_up_to_the_newest_eligible(directory: Path) -> None:
    mlog = open_log(directory, MetadataRetention(max_bytes=-1, max_ms=DAY_MS))
    now = 10 * DAY_MS
    ids = [snapshot(mlog, 20, 1, now - 3 * DAY_MS), snapshot(mlog, 40, 2, now - 2 * DAY_MS), snapshot(mlog, 60, 2, now - DAY_MS // 2)]
    assert mlog.maybe_clean(now, 80)
    # The two older than a day go; the log starts at the first snapshot that is kept.
    assert mlog.start_offset() == 60 and snapshots(mlog, directory) == ids[2:]
    mlog.close()


def test_the_log_start_never_passes_the_bound(directory: Path) -> None:
    mlog = open_log(directory, MetadataRetention(max_bytes=0, max_ms=-1))
    ids = [snapshot(mlog, 20, 1, 0), snapshot(mlog, 40, 2, 0), snapshot(mlog, 60, 2, 0)]
    assert mlog.maybe_clean(0, 50)  # the listener has been handed offsets below 50 only
    assert mlog.start_offset() == 40 and snapshots(mlog, directory) == ids[1:]
    assert mlog.maybe_clean(0, 80)
    assert mlog.start_offset() == 60
    mlog.close()


def test_a_single_snapshot_never_moves_the_log_start(directory: Path) -> None:
    """Kafka's cleanSnapshots needs two: the oldest goes with the log up to the next one."""
    mlog = open_log(directory, MetadataRetention(max_bytes=0, max_ms=0))
    snapshot(mlog, 50, 2, 0)
    assert not mlog.maybe_clean(DAY_MS, 80)
    assert mlog.start_offset() == 0
    mlog.close()
