"""What `kbroker storage info` says it found in a log directory (broker/log_dir_inventory.py), on
directories written by kbroker's own storage code and then altered as a crash, Apache Kafka or a
damaged disk would leave them; and that saying it changes no file."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import crc32c
import pytest

from broker import log_dir_inventory
from broker.config import BrokerConfig, load_config
from broker.log_dir_inventory import describe_log_dir, render
from broker.storage_tool import format_storage, storage_info
from raft.file_quorum_state_store import FileQuorumStateStore
from raft.quorum_state_store import ElectionState
from storage.log_config import LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from storage.meta_properties import read_meta_properties
from tests.unit.batch_factory import FakeClock, make_batch

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SEGMENT = "00000000000000000000"
PRODUCER_ID = 4000


def combined_config(tmp_path: Path, *dirs: str) -> BrokerConfig:
    return load_config(
        None,
        {
            "node.id": "1",
            "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            "log.dirs": ",".join(str(tmp_path / d) for d in dirs or ("data",)),
        },
    )


def written_node(tmp_path: Path) -> tuple[BrokerConfig, Path]:
    """A node formatted --standalone, with three partitions of `orders` written by an idempotent
    producer, one of __consumer_offsets, a quorum-state, and a clean shutdown (broker epoch 5)."""
    config = combined_config(tmp_path)
    format_storage(config, CLUSTER_ID, io.StringIO(), standalone=True)
    data = tmp_path / "data"
    manager = LogManager([data], LogConfig(), FakeClock())
    manager.startup()
    for partition in range(3):
        plog = manager.get_or_create_log("orders", partition, manager.default_config, uuid.uuid4())
        for sequence in range(3):
            batch = make_batch([b"v"], keys=[b"k"], producer_id=PRODUCER_ID + partition, producer_epoch=0, base_sequence=sequence)
            plog.append_as_leader(memoryview(batch), 0)
        plog.update_high_watermark(plog.log_end_offset)
    offsets = manager.get_or_create_log("__consumer_offsets", 7, manager.default_config, uuid.uuid4())
    offsets.append_as_leader(memoryview(make_batch([b"commit"], keys=[b"g"])), 0)
    manager.shutdown(broker_epoch=5)
    FileQuorumStateStore(data / "__cluster_metadata-0" / "quorum-state").write_election_state(ElectionState(epoch=3, leader_id=1, voted_id=1, voted_directory_id=None))
    return config, data


def info(config: BrokerConfig, verbose: bool = False) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = storage_info(config, out, verbose=verbose)
    return code, out.getvalue().splitlines()


def kbroker_lines(lines: list[str]) -> list[str]:
    """The lines after kafka-storage.sh's part."""
    start = next(i for i, line in enumerate(lines) if line.startswith("kbroker found in "))
    return lines[start:]


def files_and_times(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def kafka_snapshot(entries: list[tuple[int, int, int, int, int, int, int, int]]) -> bytes:
    """A producer snapshot as Kafka 4.4 writes it: no trailer after the entries."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *entry) for entry in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_a_clean_kbroker_directory_said_fact_by_fact_and_left_as_it_was(tmp_path: Path) -> None:
    config, data = written_node(tmp_path)
    directory_id = read_meta_properties(data).directory_id  # type: ignore[union-attr]
    before = files_and_times(tmp_path)
    code, lines = info(config)
    verbose_code, verbose_lines = info(config, verbose=True)
    assert files_and_times(tmp_path) == before
    assert code == verbose_code == 0
    assert lines[:5] == ["Found log directory:", f"  {data}", "", f"Found metadata: {{cluster.id={CLUSTER_ID}, directory.id={directory_id}, node.id=1, version=1}}", ""]
    found = kbroker_lines(lines)
    assert found[0] == f"kbroker found in {data}:"
    assert found[1] == "  last shutdown: clean (.kafka_cleanshutdown, brokerEpoch 5)"
    assert found[2].startswith("  written by: kbroker: 4 producer snapshots with kbroker's trailer (")
    assert found[3:] == [
        "  partitions: 4 in 2 topics, 4 segments, " + found[3].rsplit(", ", 1)[1],
        "  topic __consumer_offsets: 1 partition, log start..end offsets: 7: 0..1",
        "  topic orders: 3 partitions, log start..end offsets: 0: 0..3, 1: 0..3, 2: 0..3",
        "  internal topics: __consumer_offsets (1 partition); absent: __transaction_state, __share_group_state",
        "  metadata log: log start..end offsets 0..0, 1 segment, 0 bytes",
        "  metadata snapshots: 1, the newest 00000000000000000000-0000000000: end offset 0, epoch 0",
        "  quorum-state: data_version 1, leader epoch 3, leader 1, voted for 1",
        f"  voters (snapshot 00000000000000000000-0000000000, kraft.version 1): 1@127.0.0.1:9093 (directory {directory_id})",
        "  at start, kbroker would recover nothing",
        "",
    ]
    assert "    orders-0/00000000000000000000.log: 210 bytes, 3 batches, offsets 0..3" in verbose_lines
    # What the loader itself then finds.
    manager = LogManager([data], LogConfig(), FakeClock())
    manager.startup()
    assert {(t, p): log.log_end_offset for (t, p), log in manager.logs.items()} == {("orders", 0): 3, ("orders", 1): 3, ("orders", 2): 3, ("__consumer_offsets", 7): 1}
    manager.shutdown()


def test_a_crashed_directory_kafka_wrote_in_part(tmp_path: Path) -> None:
    config, data = written_node(tmp_path)
    (data / CLEAN_SHUTDOWN_FILE).unlink()
    (data / ".lock").touch()  # left by a SIGKILL
    # Kafka preallocates an active segment's index files and trims them only when it closes them.
    os.truncate(data / "orders-0" / f"{SEGMENT}.index", 10 * 1024 * 1024)
    # orders-1's producers as Kafka snapshots them, the newest snapshot of the directory.
    orders1 = data / "orders-1"
    for snapshot in orders1.glob("*.snapshot"):
        snapshot.unlink()
    (orders1 / "00000000000000000003.snapshot").write_bytes(kafka_snapshot([(PRODUCER_ID + 1, 0, 2, 2, 0, 1_700_000_000_000, -1, -1)]))
    (data / "__consumer_offsets-7" / "00000000000000000001.snapshot").write_bytes(kafka_snapshot([]))  # says nothing
    # A batch past orders-2's recovery point (3), and leftovers of a deletion.
    with open(data / "orders-2" / f"{SEGMENT}.log", "ab") as f:
        f.write(make_batch([b"late"], base_offset=3))
    (data / "orders-2" / f"{SEGMENT}.timeindex.deleted").touch()
    shutil.copytree(data / "orders-1", data / "orders-1.0123456789abcdef0123456789abcdef-delete")
    (data / "__cluster_metadata-0" / "00000000000000000005-0000000003-x.checkpoint.part").touch()
    before = files_and_times(tmp_path)
    code, lines = info(config)
    assert files_and_times(tmp_path) == before
    assert code == 0
    found = kbroker_lines(lines)
    assert found[1] == "  last shutdown: not clean (no .kafka_cleanshutdown)"
    assert found[2] == (
        "  written by: Apache Kafka and kbroker, the newest producer snapshot by Apache Kafka: 1 producer snapshot without kbroker's trailer "
        "(orders-1/00000000000000000003.snapshot); 2 producer snapshots with kbroker's trailer "
        "(orders-0/00000000000000000003.snapshot, orders-2/00000000000000000003.snapshot)"
    )
    # Both take the .lock (storage/file_lock.py): it tells of a crash, not of who crashed.
    assert found[3] == "  .lock: left by a broker (Apache Kafka or kbroker) that did not stop cleanly"
    assert "  topic orders: 3 partitions, log start..end offsets: 0: 0..3, 1: 0..3, 2: 0..4" in found
    size = sum((data / f"{d}" / f"{SEGMENT}.log").stat().st_size for d in ("orders-0", "orders-1", "orders-2", "__consumer_offsets-7"))
    assert [line for line in found if "kbroker would" in line] == [
        "  at start, kbroker would: delete 1 unfinished metadata snapshot (.checkpoint.part)",
        "  at start, kbroker would: remove 1 deleted partition (orders-1.0123456789abcdef0123456789abcdef-delete)",
        f"  at start, kbroker would: recover 4 partitions (no clean shutdown): re-validate 4 segments, {size} bytes, from their recovery points (1 hold data past theirs)",
        "  at start, kbroker would: rebuild the indexes of 1 segment (orders-0/00000000000000000000)",
        "  at start, kbroker would: finish or undo interrupted deletions and cleanings: 1 .deleted, .cleaned, .swap or .tmp files",
    ]
    manager = LogManager([data], LogConfig(), FakeClock())
    manager.startup()
    assert manager.get_log("orders", 2).log_end_offset == 4  # type: ignore[union-attr]
    manager.shutdown()


def test_data_past_a_clean_shutdown_marker(tmp_path: Path) -> None:
    config, data = written_node(tmp_path)
    segment = data / "orders-2" / f"{SEGMENT}.log"
    with open(segment, "ab") as f:
        f.write(make_batch([b"after the marker"], base_offset=3))
    marked = (data / CLEAN_SHUTDOWN_FILE).stat().st_mtime_ns
    os.utime(segment, ns=(marked + 10**9, marked + 10**9))
    code, lines = info(config)
    assert code == 0
    assert [line for line in lines if "kbroker would" in line] == [
        "  at start, kbroker would: trust, unchecked since .kafka_cleanshutdown is there, data past the recovery point of 1 partition: orders-2 (recovery point 3, log end 4)",
        "  at start, kbroker would: trust, unchecked since .kafka_cleanshutdown is there, 1 segment written after it: orders-2/00000000000000000000.log",
    ]


def test_what_kbroker_would_refuse_is_a_problem(tmp_path: Path) -> None:
    config, data = written_node(tmp_path)
    (data / "orders-0" / "leader-epoch-checkpoint").write_text("1\n1\n0 0\n")
    (data / "__cluster_metadata-0" / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":3,"votedId":-1,"data_version":2}')
    (data / RECOVERY_POINT_CHECKPOINT).write_text("9\n0\n")
    code, lines = info(config)
    assert code == 1
    assert [line for line in lines if "problem" in line or "as empty" in line] == [
        f"  at start, kbroker would: read recovery-point-offset-checkpoint as empty, being unreadable ({data / RECOVERY_POINT_CHECKPOINT}: malformed checkpoint: "
        f"{data / RECOVERY_POINT_CHECKPOINT}: unknown checkpoint version ['9']): every log is recovered from its first segment",
        f"  problem: kbroker would not start: data_version (2) of {data / '__cluster_metadata-0' / 'quorum-state'} is not within the min (0) and max (1) supported version",
        f"  problem: kbroker cannot load orders-0: malformed leader epoch checkpoint {data / 'orders-0' / 'leader-epoch-checkpoint'}: unknown version ['1']",
    ]


def test_the_same_partition_in_two_log_dirs_is_a_problem(tmp_path: Path) -> None:
    config = combined_config(tmp_path, "a", "b")
    format_storage(config, CLUSTER_ID, io.StringIO(), standalone=True)
    for d in ("a", "b"):
        manager = LogManager([tmp_path / d], LogConfig(), FakeClock())
        manager.startup()
        manager.get_or_create_log("orders", 0, manager.default_config, None)
        manager.shutdown()
    code, lines = info(config)
    assert code == 1
    assert lines[-1] == f"problem: Duplicate log directories for orders-0 are found in both {tmp_path / 'a'} and {tmp_path / 'b'}: kbroker would not start"


def test_verbose_reads_every_batch_and_the_cheap_end_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, data = written_node(tmp_path)
    segment = data / "orders-1" / f"{SEGMENT}.log"
    raw = bytearray(segment.read_bytes())
    raw[-1] ^= 0xFF  # the last batch's last byte: its CRC no longer matches
    segment.write_bytes(raw)
    verbose = render(describe_log_dir(data, is_log_dir=True, is_metadata_dir=True, has_broker=True, verbose=True))
    assert f"    orders-1/{SEGMENT}.log: 210 bytes, 2 batches, offsets 0..2; CRC mismatch in the batch at byte 140 (offset 2): recovery would cut the 70 bytes from there" in verbose
    # Without --verbose, the end of a segment of three batches that no index entry points into:
    monkeypatch.setattr(log_dir_inventory, "HEADER_BUDGET", 2)
    cheap = render(describe_log_dir(data, is_log_dir=True, is_metadata_dir=True, has_broker=True))
    assert "  topic orders: 3 partitions, log start..end offsets: 0: 0..2+, 1: 0..2+, 2: 0..2+" in cheap
    assert "  (+: the log end is further on; only 2 batches were read; --verbose reads them all)" in cheap
    monkeypatch.setattr(log_dir_inventory, "HEADER_BUDGET", 3)
    cheap = render(describe_log_dir(data, is_log_dir=True, is_metadata_dir=True, has_broker=True))
    assert "  topic orders: 3 partitions, log start..end offsets: 0: 0..3, 1: 0..3, 2: 0..3" in cheap


def test_a_broker_running_on_the_directory_is_a_problem(tmp_path: Path) -> None:
    _, data = written_node(tmp_path)
    lock = data / ".lock"
    lock.touch()
    # Kafka's FileChannel.tryLock: an fcntl write lock on the whole file, held by another process.
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl, sys, time\nf = open({str(lock)!r}, 'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        inventory = describe_log_dir(data, is_log_dir=True, is_metadata_dir=True, has_broker=True)
    finally:
        holder.kill()
        holder.wait(10)
    assert inventory.problems == [f".lock is locked by process {holder.pid}: a broker is running on this directory"]
    assert inventory.facts[2] == f".lock: held by process {holder.pid}"


def test_a_topic_of_many_partitions_shows_ten_of_them_unless_verbose(tmp_path: Path) -> None:
    data = tmp_path / "data"
    manager = LogManager([data], LogConfig(), FakeClock())
    manager.startup()
    for partition in range(13):
        plog = manager.get_or_create_log("many", partition, manager.default_config, None)
        if partition:
            plog.append_as_leader(memoryview(make_batch([b"v"])), 0)
    manager.shutdown()
    line = "  topic many: 13 partitions, log start..end offsets: " + ", ".join(f"{p}: 0..1" for p in range(1, 11))
    assert line + ", 2 more (--verbose shows them), 1 empty" in render(describe_log_dir(data, is_log_dir=True, is_metadata_dir=False, has_broker=True))
    verbose = render(describe_log_dir(data, is_log_dir=True, is_metadata_dir=False, has_broker=True, verbose=True))
    assert line + ", 11: 0..1, 12: 0..1, 1 empty" in verbose
