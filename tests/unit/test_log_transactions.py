"""Idempotence and transactions on a UnifiedLog: duplicates, errors, LSO, txn index, read_committed, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.partitions import sole_leader
from broker.partition import READ_COMMITTED, READ_UNCOMMITTED
from protocol.control_records import build_control_batch
from protocol.record_batch import TRANSACTIONAL_MASK
from storage.producer_state_manager import AppendOrigin
from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from storage.producer_state_manager import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from storage.producer_state_snapshot import list_snapshots
from storage.transaction_index import AbortedTxn
from tests.unit.batch_factory import FakeClock, make_batch

PID = 4000


def open_log(directory: Path, clock: FakeClock, *, clean: bool = True, recovery_point: int = 0, **props: str) -> UnifiedLog:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return UnifiedLog.open(directory, config, topic_id=None, recovery_point=recovery_point, log_start_offset=0, had_clean_shutdown=clean, now_ms=clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "events-0"


def send(plog: UnifiedLog, seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0, txn: bool = False) -> tuple[int, int]:
    batch = make_batch([f"v{seq + i}".encode() for i in range(count)], producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL_MASK if txn else 0)
    info = plog.append_as_leader(memoryview(batch), 0)
    return info.first_offset, info.last_offset


def marker(plog: UnifiedLog, commit: bool, *, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    info = plog.append_as_leader(memoryview(bytearray(build_control_batch(pid, epoch, coordinator_epoch, commit, 1_700_000_000_000))), 0, AppendOrigin.COORDINATOR)
    return info.first_offset


def test_retried_batch_answers_its_original_offsets_and_is_not_appended(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    assert send(plog, 0) == (0, 1)
    assert send(plog, 2) == (2, 3)
    assert send(plog, 0) == (0, 1)
    assert send(plog, 2) == (2, 3)
    assert plog.log_end_offset == 4
    plog.close()


def test_gap_and_stale_epoch_are_refused_with_kafkas_codes(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    send(plog, 0, epoch=1)
    with pytest.raises(OutOfOrderSequenceError) as gap:
        send(plog, 5, epoch=1)
    assert gap.value.error_code == 45
    with pytest.raises(InvalidProducerEpochError) as stale:
        send(plog, 2, epoch=0)
    assert stale.value.error_code == 47
    assert plog.log_end_offset == 2
    plog.close()


def test_non_idempotent_batches_skip_the_checks(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    for _ in range(3):
        plog.append_as_leader(memoryview(make_batch([b"a"])), 0)
    assert plog.log_end_offset == 3 and not plog.producer_state.producers
    plog.close()


def test_aborted_transaction_lso_txn_index_and_read_committed(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    partition = sole_leader("events", 0, plog)
    plog.append_as_leader(memoryview(make_batch([b"plain"])), 0)  # offset 0
    plog.update_high_watermark(plog.log_end_offset)
    assert send(plog, 0, txn=True) == (1, 2)
    send(plog, 0, txn=True, pid=PID + 1)  # 3, 4: another open transaction
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.first_unstable_offset == 1 and partition.last_stable_offset == 1
    committed = partition.read_records(0, 1 << 20, READ_COMMITTED, True)
    assert committed.last_stable_offset == 1 and committed.aborted_transactions == []
    assert sum(r.length for r in committed.info.regions) < sum(r.length for r in partition.read_records(0, 1 << 20, READ_UNCOMMITTED, True).info.regions)
    assert marker(plog, commit=False) == 5
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.first_unstable_offset == 3 and partition.last_stable_offset == 3
    assert plog.active_segment.txn_index.entries == [AbortedTxn(PID, 1, 5, 3)]
    assert marker(plog, commit=True, pid=PID + 1) == 6
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.first_unstable_offset is None and partition.last_stable_offset == 7
    # The last stable offset never passes the high watermark, transactions or not.
    plog.update_high_watermark(4)
    assert plog.last_stable_offset == partition.last_stable_offset == 4
    plog.update_high_watermark(plog.log_end_offset)
    read = partition.read_records(0, 1 << 20, READ_COMMITTED, True)
    assert read.aborted_transactions == [(PID, 1)]
    assert partition.read_records(0, 1 << 20, READ_UNCOMMITTED, True).aborted_transactions is None
    assert plog.collect_aborted_transactions(6, 7) == []
    plog.close()


def test_plain_write_inside_a_transaction_is_refused(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    send(plog, 0, txn=True)
    with pytest.raises(InvalidTxnStateError):
        send(plog, 2, txn=False)
    plog.close()


def test_a_retry_inside_the_open_transaction_is_still_a_duplicate(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    assert send(plog, 91, 4, epoch=5, txn=True) == (0, 3)
    assert send(plog, 95, 2, epoch=5, txn=True) == (4, 5)
    assert send(plog, 91, 4, epoch=5, txn=True) == (0, 3)
    assert plog.log_end_offset == 6
    plog.close()


@pytest.mark.parametrize("commit", [False, True])
def test_a_new_transaction_reusing_an_ended_ones_sequences_is_refused_not_deduplicated(log_dir: Path, clock: FakeClock, commit: bool) -> None:
    """Issue 32, transaction 0.217: librdkafka was answered NOT_LEADER_OR_FOLLOWER for a batch
    the old leader had appended (seq 91-94), counted it as not persisted, purged it on
    abort_transaction and gave its sequences to the next transaction's four records. That
    leader, leading again, took them for a retry of the aborted batch and acknowledged them
    at its offsets: the commit then committed nothing. A batch of an ended transaction is never
    retried, so the new one must be refused (OUT_OF_ORDER_SEQUENCE_NUMBER makes the client
    abort and bump its epoch)."""
    plog = open_log(log_dir, clock)
    send(plog, 91, 4, epoch=5, txn=True)
    marker(plog, commit, epoch=5)
    with pytest.raises(OutOfOrderSequenceError):
        send(plog, 91, 4, epoch=5, txn=True)
    assert plog.log_end_offset == 5
    assert send(plog, 95, 1, epoch=5, txn=True) == (5, 5)  # the producer's true next sequence still goes in
    plog.close()


def test_clean_restart_keeps_duplicate_detection_from_the_snapshot(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    for seq in range(0, 10, 2):
        send(plog, seq)
    plog.close()
    assert list_snapshots(log_dir) == [10]
    reopened = open_log(log_dir, clock)
    assert send(reopened, 2) == (2, 3)  # five batches survive, not only the last
    assert send(reopened, 10) == (10, 11)
    reopened.close()


def test_an_empty_or_unchanged_log_writes_no_snapshot(log_dir: Path, clock: FakeClock) -> None:
    open_log(log_dir, clock).close()
    assert list_snapshots(log_dir) == []
    plog = open_log(log_dir, clock)
    send(plog, 0)
    plog.close()
    reopened = open_log(log_dir, clock)
    reopened.close()
    assert list_snapshots(log_dir) == [2]


def test_crash_rebuilds_state_and_txn_index_from_the_log_tail(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="400")
    for seq in range(0, 12, 2):
        send(plog, seq)
    send(plog, 0, txn=True, pid=PID + 1)
    aborted_at = marker(plog, commit=False, pid=PID + 1)
    send(plog, 0, txn=True, pid=PID + 2)  # left open
    assert len(plog.segments) >= 2 and list_snapshots(log_dir)
    end = plog.log_end_offset
    plog.close_handlers()  # kill -9: no snapshot at the end, nothing flushed
    for path in log_dir.glob("*.txnindex"):
        path.unlink()
    reopened = open_log(log_dir, clock, clean=False, recovery_point=0, segment_bytes="400")
    assert reopened.log_end_offset == end
    assert send(reopened, 8) == (8, 9)  # still a duplicate
    # Until the high watermark passes its marker, the aborted transaction is not stable either.
    assert reopened.first_unstable_offset == aborted_at - 2
    reopened.update_high_watermark(end)
    assert reopened.first_unstable_offset == aborted_at + 1
    assert reopened.collect_aborted_transactions(0, end) == [(PID + 1, aborted_at - 2)]
    reopened.close()


def test_truncation_reloads_the_state_below_the_cut(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="400")
    for seq in range(0, 16, 2):
        send(plog, seq)
    plog.truncate_to(6)
    assert plog.producer_state.last_entry(PID).last_seq == 5  # type: ignore[union-attr]
    assert send(plog, 6) == (6, 7)
    plog.truncate_fully_and_start_at(100)
    assert not plog.producer_state.producers and not list_snapshots(log_dir)
    plog.close()


def test_retention_deletes_snapshots_with_their_segments(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock, segment_bytes="400", retention_bytes="700")
    for seq in range(0, 40, 2):
        send(plog, seq)
    before = list_snapshots(log_dir)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments() > 1
    after = list_snapshots(log_dir)
    assert after and after[0] >= plog.segments[0].base_offset and len(after) < len(before)
    plog.close()


def test_follower_append_tracks_producers_without_refusing(log_dir: Path, clock: FakeClock) -> None:
    plog = open_log(log_dir, clock)
    batch = make_batch([b"a"], producer_id=PID, producer_epoch=3, base_sequence=9, base_offset=0, partition_leader_epoch=0)
    plog.append_as_follower(memoryview(batch))
    assert plog.producer_state.last_entry(PID).last_seq == 9  # type: ignore[union-attr]
    plog.close()


def test_a_follower_append_holding_several_transactions_of_one_producer_tracks_each(tmp_path: Path, clock: FakeClock) -> None:
    """One replica fetch may bring a producer's consecutive transactions: each is opened and closed
    by its marker, the last left open. (A restarted follower's fetcher died here on "attempted to
    complete transaction ... which was not started" and never rejoined the ISR.)"""
    leader = open_log(tmp_path / "leader" / "events-0", clock)
    send(leader, 0, txn=True)
    marker(leader, commit=True)
    send(leader, 2, txn=True)
    aborted_at = marker(leader, commit=False)
    send(leader, 4, txn=True)
    leader.flush()
    fetched = (leader.dir / "00000000000000000000.log").read_bytes()
    follower = open_log(tmp_path / "follower" / "events-0", clock)
    follower.append_as_follower(memoryview(fetched))
    assert follower.log_end_offset == leader.log_end_offset == 8
    # A decided transaction counts as unstable until its marker is replicated.
    leader.update_high_watermark(8)
    follower.update_high_watermark(8)
    assert follower.first_unstable_offset == leader.first_unstable_offset == 6
    assert follower.collect_aborted_transactions(0, 8) == leader.collect_aborted_transactions(0, 8) == [(PID, aborted_at - 2)]
    leader.close()
    follower.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["next", "retry", "gap"]), st.integers(0, 7), st.integers(1, 3)), min_size=1, max_size=30))
def test_any_mix_of_retries_and_gaps_stores_each_batch_once(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]) -> None:
    """A model of the rules: the next sequence is appended, a retry of one of the last five
    batches answers its offsets, anything else is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    plog = open_log(tmp_path_factory.mktemp("p") / "events-0", FakeClock())
    sent: list[tuple[int, int, int]] = []  # (first seq, count, first offset) of every stored batch
    next_seq = 0
    for kind, back, count in steps:
        if kind == "retry" and sent:
            seq, count, offset = sent[-1 - back % len(sent)]
            within_window = back % len(sent) < 5
            if within_window:
                assert send(plog, seq, count) == (offset, offset + count - 1)
            else:
                with pytest.raises(OutOfOrderSequenceError):
                    send(plog, seq, count)
        elif kind == "gap" and sent:
            with pytest.raises(OutOfOrderSequenceError):
                send(plog, next_seq + 1 + back, count)
        else:
            first, _ = send(plog, next_seq, count)
            sent.append((next_seq, count, first))
            next_seq += count
    assert plog.log_end_offset == next_seq
    plog.close()
