"""Snapshot files: Kafka's names, .part until frozen, whole-batch check at freeze, chunked reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.records import build_batch
from raft.file_snapshots import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    list_snapshot_paths,
    parse_snapshot_path,
    snapshot_file_name,
    snapshot_path,
)
from raft.replicated_log import OffsetAndEpoch
from storage.errors import CorruptRecordError

SNAPSHOT_ID = OffsetAndEpoch(100, 3)


def batches(count: int, base_offset: int = 0) -> bytes:
    return b"".join(build_batch([(None, f"record-{base_offset + i}".encode() * 3, (), 1_000)], base_offset=base_offset + i, partition_leader_epoch=3) for i in range(count))


def test_file_names_are_kafkas() -> None:
    assert snapshot_file_name(OffsetAndEpoch(100, 3)) == "00000000000000000100-0000000003"
    assert snapshot_path(Path("/d"), OffsetAndEpoch(7, 12)) == Path("/d/00000000000000000007-0000000012.checkpoint")


@pytest.mark.parametrize(
    ("name", "partial", "deleted"),
    [
        ("00000000000000000100-0000000003.checkpoint", False, False),
        ("00000000000000000100-0000000003-k2j3h4_x.checkpoint.part", True, False),
        ("00000000000000000100-0000000003.checkpoint.part", True, False),
        ("00000000000000000100-0000000003.checkpoint.deleted", False, True),
    ],
)
def test_parse_snapshot_names(name: str, partial: bool, deleted: bool) -> None:
    found = parse_snapshot_path(Path("/d") / name)
    assert found is not None
    assert (found.snapshot_id, found.partial, found.deleted) == (SNAPSHOT_ID, partial, deleted)


@pytest.mark.parametrize(
    "name",
    ["leader-epoch-checkpoint", "00000000000000000100.snapshot", "00000000000000000000.log", "quorum-state", "recovery-point-offset-checkpoint", "1-2.checkpoint"],
)
def test_other_files_are_not_snapshots(name: str) -> None:
    assert parse_snapshot_path(Path("/d") / name) is None


def test_written_snapshot_is_invisible_until_frozen(tmp_path: Path) -> None:
    frozen: list[OffsetAndEpoch] = []
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID, frozen.append)
    data = batches(5)
    writer.append(data[:10])
    writer.append(data[10:])
    assert writer.size_in_bytes() == len(data)
    assert not snapshot_path(tmp_path, SNAPSHOT_ID).exists()
    [part] = list_snapshot_paths(tmp_path)
    assert part.partial and part.snapshot_id == SNAPSHOT_ID
    with pytest.raises(FileNotFoundError):
        FileRawSnapshotReader.open(tmp_path, SNAPSHOT_ID)

    writer.freeze()
    assert frozen == [SNAPSHOT_ID]
    assert writer.is_frozen and writer.path == snapshot_path(tmp_path, SNAPSHOT_ID)
    assert [p.path.name for p in list_snapshot_paths(tmp_path)] == ["00000000000000000100-0000000003.checkpoint"]
    assert not os.stat(writer.path).st_mode & stat.S_IWUSR
    writer.close()  # a no-op for a frozen snapshot
    assert writer.path.exists()

    reader = FileRawSnapshotReader.open(tmp_path, SNAPSHOT_ID)
    assert reader.snapshot_id == SNAPSHOT_ID
    assert reader.size_in_bytes() == len(data)
    assert reader.read(0, 1 << 20) == data
    reader.close()


def record_fsyncs_and_renames(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on the real calls: which kind of file each fsync hits, and where renames fall between them."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(source: str | Path, target: str | Path) -> None:
        events.append("rename")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_freeze_makes_data_durable_before_the_rename_and_the_rename_durable_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = record_fsyncs_and_renames(monkeypatch)
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.append(batches(2))
    writer.freeze()
    assert events == ["fsync file", "rename", "fsync dir"]


def test_fetch_snapshot_chunks_may_split_batches(tmp_path: Path) -> None:
    data = batches(7)
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    for start in range(0, len(data), 33):
        writer.append(data[start : start + 33])
    writer.freeze()
    with open(snapshot_path(tmp_path, SNAPSHOT_ID), "rb") as f:
        assert f.read() == data


@given(chunk=st.integers(min_value=1, max_value=400), start=st.integers(min_value=0, max_value=50))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_reader_chunks_reassemble_the_snapshot(tmp_path: Path, chunk: int, start: int) -> None:
    directory = tmp_path / f"c{chunk}-{start}"
    data = batches(9)
    writer = FileRawSnapshotWriter.create(directory, SNAPSHOT_ID)
    writer.append(data)
    writer.freeze()
    reader = FileRawSnapshotReader.open(directory, SNAPSHOT_ID)
    out = bytearray(data[:start])
    position = start
    while position < reader.size_in_bytes():
        piece = reader.read(position, chunk)
        assert 0 < len(piece) <= chunk
        out += piece
        position += len(piece)
    assert bytes(out) == data
    assert reader.read(reader.size_in_bytes(), chunk) == b""
    reader.close()


def test_reader_refuses_positions_outside_the_snapshot(tmp_path: Path) -> None:
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.append(batches(1))
    writer.freeze()
    reader = FileRawSnapshotReader.open(tmp_path, SNAPSHOT_ID)
    with pytest.raises(ValueError):
        reader.read(reader.size_in_bytes() + 1, 10)
    with pytest.raises(ValueError):
        reader.read(-1, 10)
    reader.close()
    with pytest.raises(RuntimeError):
        reader.read(0, 10)


def test_empty_snapshot_freezes(tmp_path: Path) -> None:
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.freeze()
    assert FileRawSnapshotReader.open(tmp_path, SNAPSHOT_ID).size_in_bytes() == 0


@pytest.mark.parametrize("damage", ["partial tail", "bad crc", "garbage length"])
def test_freeze_refuses_what_is_not_whole_valid_batches(tmp_path: Path, damage: str) -> None:
    data = bytearray(batches(3))
    if damage == "partial tail":
        data = data[:-5]
    elif damage == "bad crc":
        data[-1] ^= 0xFF
    else:
        data += b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 60
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.append(bytes(data))
    with pytest.raises(CorruptRecordError):
        writer.freeze()
    assert not writer.is_frozen
    assert not snapshot_path(tmp_path, SNAPSHOT_ID).exists()
    writer.close()
    assert list_snapshot_paths(tmp_path) == []


def test_close_without_freeze_discards_the_part_file(tmp_path: Path) -> None:
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.append(batches(2))
    writer.close()
    writer.close()
    assert list_snapshot_paths(tmp_path) == []
    with pytest.raises(RuntimeError):
        writer.append(batches(1))


def test_nothing_after_freeze(tmp_path: Path) -> None:
    writer = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    writer.append(batches(1))
    writer.freeze()
    with pytest.raises(RuntimeError):
        writer.append(batches(1))
    with pytest.raises(RuntimeError):
        writer.freeze()


def test_two_writers_of_one_id_do_not_share_a_file(tmp_path: Path) -> None:
    first = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    second = FileRawSnapshotWriter.create(tmp_path, SNAPSHOT_ID)
    assert first.path != second.path
    first.append(batches(1))
    second.append(batches(2))
    first.close()
    second.freeze()
    assert FileRawSnapshotReader.open(tmp_path, SNAPSHOT_ID).read(0, 1 << 20) == batches(2)
