"""KIP-890's VerificationGuard in a partition's producer state, step by step: what a transaction's
first batch needs, and the races it closes (the ABA of verify, abort, verify again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.control_records import EndTxnMarker
from storage.producer_state_manager import (
    SENTINEL_VERIFICATION_GUARD,
    AppendOrigin,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    VerificationGuard,
)

PID = 7
NOW = 1_000_000


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager("t-0", tmp_path)


def start(psm: ProducerStateManager, sequence: int = 0, epoch: int = 0) -> VerificationGuard:
    """What the partition leader does before asking the coordinator (Partition.maybe_start_transaction_verification)."""
    if psm.has_ongoing_transaction(PID, epoch):
        return SENTINEL_VERIFICATION_GUARD
    return psm.maybe_create_verification_state_entry(PID, sequence, epoch, NOW).guard


def append(psm: ProducerStateManager, guard: VerificationGuard | None, sequence: int, offset: int, epoch: int = 0, txn: bool = True) -> None:
    info = psm.prepare_update(PID, AppendOrigin.CLIENT, guard)
    info.append_data_batch(epoch, sequence, sequence, NOW, offset, offset, txn)
    psm.update(info)


def marker(psm: ProducerStateManager, offset: int, commit: bool, epoch: int = 0) -> None:
    info = psm.prepare_update(PID, AppendOrigin.COORDINATOR)
    completed = info.append_end_txn_marker(EndTxnMarker(commit, 0), epoch, offset, NOW)
    psm.update(info)
    if completed is not None:
        psm.complete_txn(completed)


def test_the_first_batch_needs_its_guard_and_the_next_ones_none(psm: ProducerStateManager) -> None:
    guard = start(psm)
    assert guard is not SENTINEL_VERIFICATION_GUARD
    with pytest.raises(InvalidTxnStateError):
        append(psm, SENTINEL_VERIFICATION_GUARD, 0, 0)
    with pytest.raises(InvalidTxnStateError):
        append(psm, VerificationGuard(), 0, 0)  # another verification's guard
    append(psm, guard, 0, 0)
    assert psm.has_ongoing_transaction(PID, 0) and psm.verification_state_entry(PID) is None
    # The transaction is open here: no verification, the sentinel goes through.
    assert start(psm, 1) is SENTINEL_VERIFICATION_GUARD
    append(psm, SENTINEL_VERIFICATION_GUARD, 1, 1)


def test_a_late_batch_after_the_marker_is_refused(psm: ProducerStateManager) -> None:
    append(psm, start(psm), 0, 0)
    marker(psm, 1, commit=False)
    # A retry stuck in the network arrives after the abort: nothing open, no guard.
    with pytest.raises(InvalidTxnStateError):
        append(psm, SENTINEL_VERIFICATION_GUARD, 1, 2)
    assert not psm.has_ongoing_transaction(PID, 0)


def test_a_marker_during_verification_voids_the_guard(psm: ProducerStateManager) -> None:
    """The ABA KIP-890 names: verification starts, the coordinator says yes, an abort marker is
    written, a new verification starts; the first answer's append must not go through."""
    first = start(psm)
    marker(psm, 0, commit=False)  # the transaction the first verification saw ends
    assert psm.verification_state_entry(PID) is None
    second = start(psm, 0)
    assert second is not first
    with pytest.raises(InvalidTxnStateError):
        append(psm, first, 0, 1)
    append(psm, second, 0, 1)


def test_a_newer_epoch_does_not_join_the_transaction_still_waiting_for_its_marker(psm: ProducerStateManager) -> None:
    """Transaction version 2: EndTxn bumped the epoch and answered before this partition got its
    marker. The producer's next transaction (epoch + 1) is no part of the open one: it needs
    its own verification, which the coordinator refuses until the markers are written."""
    append(psm, start(psm), 0, 0)
    guard = start(psm, 0, epoch=1)
    assert guard is not SENTINEL_VERIFICATION_GUARD
    with pytest.raises(InvalidTxnStateError):
        append(psm, SENTINEL_VERIFICATION_GUARD, 0, 1, epoch=1)
    marker(psm, 1, commit=True, epoch=1)
    append(psm, start(psm, 0, epoch=1), 0, 2, epoch=1)
    assert psm.has_ongoing_transaction(PID, 1) and not psm.has_ongoing_transaction(PID, 0)


def test_retries_share_one_guard_and_keep_the_lowest_sequence(psm: ProducerStateManager) -> None:
    guard = start(psm, 5)
    assert start(psm, 3) is guard  # a retry of an earlier batch while verifying
    assert psm.verification_state_entry(PID).lowest_sequence == 3  # type: ignore[union-attr]
    # A later batch may not be written before the lower one: no out-of-order sequence loop.
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, guard, 5, 0)
    # A new epoch starts the sequences over.
    assert start(psm, 0, epoch=1) is guard
    assert psm.verification_state_entry(PID).epoch == 1  # type: ignore[union-attr]


def test_appenders_that_do_not_verify_are_not_checked(psm: ProducerStateManager) -> None:
    append(psm, None, 0, 0)  # verification off: no guard asked for
    marker(psm, 1, commit=True)
    info = psm.prepare_update(PID, AppendOrigin.REPLICATION, SENTINEL_VERIFICATION_GUARD)
    info.append_data_batch(0, 1, 1, NOW, 2, 2, True)  # a follower copies what its leader verified
    psm.update(info)
    assert psm.has_ongoing_transaction(PID, 0)


def test_unused_verifications_expire_with_the_producers(psm: ProducerStateManager) -> None:
    start(psm)
    psm.remove_expired_producers(NOW + 999, 1000)
    assert psm.verification_state_entry(PID) is not None
    psm.remove_expired_producers(NOW + 1000, 1000)
    assert psm.verification_state_entry(PID) is None
