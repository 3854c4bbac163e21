"""ProducerStateManager rules: duplicates, sequence gaps, epochs, transactions, expiry, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.control_records import EndTxnMarker
from storage.producer_state_manager import (
    INT32_MAX,
    AppendOrigin,
    CompletedTxn,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    decrement_sequence,
    increment_sequence,
)
from storage.producer_state_snapshot import snapshot_path

PID = 1000


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager("t-0", tmp_path)


def append(psm: ProducerStateManager, epoch: int, first_seq: int, count: int, offset: int, *, txn: bool = False, origin: AppendOrigin = AppendOrigin.CLIENT, pid: int = PID) -> None:
    info = psm.prepare_update(pid, origin)
    info.append_data_batch(epoch, first_seq, increment_sequence(first_seq, count - 1), 1000 + offset, offset, offset + count - 1, txn)
    psm.update(info)
    psm.map_end_offset = offset + count


def end_txn(psm: ProducerStateManager, epoch: int, offset: int, commit: bool, coordinator_epoch: int = 0, pid: int = PID, origin: AppendOrigin = AppendOrigin.COORDINATOR) -> CompletedTxn | None:
    info = psm.prepare_update(pid, origin)
    completed = info.append_end_txn_marker(EndTxnMarker(commit, coordinator_epoch), epoch, offset, 2000 + offset)
    psm.update(info)
    psm.map_end_offset = offset + 1
    return completed


def test_in_sequence_batches_are_accepted_and_the_last_five_kept(psm: ProducerStateManager) -> None:
    for i in range(7):
        append(psm, 0, i * 10, 10, i * 10)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 69 and len(entry.batches) == 5
    assert [b.first_seq for b in entry.batches] == [20, 30, 40, 50, 60]


def test_duplicate_of_one_of_the_last_five_is_found_with_its_offsets(psm: ProducerStateManager) -> None:
    for i in range(6):
        append(psm, 0, i * 3, 3, 100 + i * 3)
    entry = psm.last_entry(PID)
    assert entry is not None
    dup = entry.find_duplicate(0, 6, 8, False)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (106, 108)
    assert entry.find_duplicate(0, 0, 2, False) is None  # fell out of the window
    assert entry.find_duplicate(1, 6, 8, False) is None  # another epoch
    assert entry.find_duplicate(0, 6, 7, False) is None  # another range


def test_sequence_gap_is_out_of_order(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 5, 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 0, 6, 1, 5)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 0, 3, 1, 5)


def test_stale_epoch_is_invalid_producer_epoch_and_a_new_epoch_starts_at_zero(psm: ProducerStateManager) -> None:
    append(psm, 3, 0, 5, 0)
    with pytest.raises(InvalidProducerEpochError):
        append(psm, 2, 5, 1, 5)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 4, 5, 1, 5)
    append(psm, 4, 0, 1, 5)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 4 and len(entry.batches) == 1


def test_unknown_producer_is_accepted_with_any_sequence(psm: ProducerStateManager) -> None:
    # Kafka (KIP-360): no state (expired, or its batches deleted) means no sequence to check.
    append(psm, 0, 42, 2, 0)
    assert psm.last_entry(PID).last_seq == 43  # type: ignore[union-attr]


def test_replication_accepts_what_the_leader_wrote(psm: ProducerStateManager) -> None:
    append(psm, 5, 0, 1, 0)
    append(psm, 4, 9, 1, 1, origin=AppendOrigin.REPLICATION)
    append(psm, 5, 99, 1, 2, origin=AppendOrigin.REPLICATION)


def test_coordinator_appends_check_epochs_but_not_sequences(psm: ProducerStateManager) -> None:
    append(psm, 2, 0, 1, 0, origin=AppendOrigin.COORDINATOR)
    append(psm, 2, 50, 1, 1, origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        append(psm, 1, 51, 1, 2, origin=AppendOrigin.COORDINATOR)


def test_sequence_wraps_after_int32_max(psm: ProducerStateManager) -> None:
    append(psm, 0, INT32_MAX - 1, 2, 0)
    append(psm, 0, 0, 3, 2)
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1


@given(st.integers(0, INT32_MAX), st.integers(0, 100_000))
def test_increment_and_decrement_are_inverse(seq: int, delta: int) -> None:
    assert decrement_sequence(increment_sequence(seq, delta), delta) == seq
    assert 0 <= increment_sequence(seq, delta) <= INT32_MAX


def test_transaction_first_unstable_offset_and_completion(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 2, 10, txn=True)
    append(psm, 0, 0, 2, 12, txn=True, pid=PID + 1)
    append(psm, 0, 2, 2, 14, txn=True)
    assert psm.first_unstable_offset == 10
    completed = end_txn(psm, 0, 16, commit=False)
    assert completed == CompletedTxn(PID, 10, 16, True)
    assert psm.complete_txn(completed) == 12  # the other producer's transaction is still open
    assert psm.first_unstable_offset == 10  # until the high watermark passes the marker
    psm.on_high_watermark_updated(16)
    assert psm.first_unstable_offset == 10
    psm.on_high_watermark_updated(17)
    assert psm.first_unstable_offset == 12
    completed = end_txn(psm, 0, 17, commit=True, pid=PID + 1)
    assert completed == CompletedTxn(PID + 1, 12, 17, False)
    assert psm.complete_txn(completed) == 18
    assert psm.first_unstable_offset == 12
    psm.on_high_watermark_updated(18)
    assert psm.first_unstable_offset is None


def test_non_transactional_write_inside_a_transaction_is_refused(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 1, 0, txn=True)
    with pytest.raises(InvalidTxnStateError):
        append(psm, 0, 1, 1, 1, txn=False)


def test_marker_without_open_transaction_completes_nothing(psm: ProducerStateManager) -> None:
    assert end_txn(psm, 0, 0, commit=True) is None
    assert psm.last_entry(PID).coordinator_epoch == 0  # type: ignore[union-attr]


def test_marker_from_an_older_coordinator_epoch_is_fenced(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 1, 0, txn=True)
    end_txn(psm, 0, 1, commit=True, coordinator_epoch=5)
    append(psm, 0, 1, 1, 2, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(psm, 0, 3, commit=True, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpochError):
        end_txn(psm, -2, 3, commit=True, coordinator_epoch=5)


def test_marker_with_a_bumped_epoch_resets_sequences(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 3, 0, txn=True)
    end_txn(psm, 1, 3, commit=False)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and not entry.batches
    append(psm, 1, 0, 1, 4)


def test_expiry_keeps_producers_with_open_transactions(psm: ProducerStateManager) -> None:
    append(psm, 0, 0, 1, 0)  # last timestamp 1000
    append(psm, 0, 0, 1, 1, txn=True, pid=PID + 1)
    assert psm.remove_expired_producers(now_ms=1000 + 499, expiration_ms=500) == 0
    assert psm.remove_expired_producers(now_ms=1000 + 10_000, expiration_ms=500) == 1
    assert psm.last_entry(PID) is None and psm.last_entry(PID + 1) is not None
    append(psm, 0, 7, 1, 2)  # known no more: any sequence


def test_snapshot_round_trip(psm: ProducerStateManager, tmp_path: Path) -> None:
    for i in range(7):
        append(psm, 2, i, 1, i)
    append(psm, 0, 0, 2, 7, txn=True, pid=7)
    psm.take_snapshot()
    assert snapshot_path(tmp_path, 9).exists()
    loaded = ProducerStateManager("t-0", tmp_path)
    loaded.truncate_and_reload(0, 9)
    assert loaded.map_end_offset == 9
    assert loaded.producers == psm.producers
    assert loaded.first_unstable_offset == 7


def test_reload_skips_corrupt_and_later_snapshots(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, 0, 0, 1, 0)
    psm.take_snapshot()  # at 1
    append(psm, 0, 1, 1, 1)
    psm.take_snapshot()  # at 2
    append(psm, 0, 2, 1, 2)
    psm.take_snapshot()  # at 3
    data = bytearray(snapshot_path(tmp_path, 2).read_bytes())
    data[-1] ^= 0xFF
    snapshot_path(tmp_path, 2).write_bytes(bytes(data))
    loaded = ProducerStateManager("t-0", tmp_path)
    loaded.truncate_and_reload(0, 2)  # the log was truncated to 2: snapshot 3 goes, 2 is corrupt
    assert loaded.map_end_offset == 1 and loaded.last_entry(PID).last_seq == 0  # type: ignore[union-attr]
    assert not snapshot_path(tmp_path, 3).exists() and not snapshot_path(tmp_path, 2).exists()
