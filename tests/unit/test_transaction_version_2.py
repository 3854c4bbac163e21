"""Transaction version 2 (KIP-890 part 2) in the transaction state machine and coordinator: an
epoch bump at every EndTxn v5, markers with the new epoch, retries told from stale producers,
and all of it surviving a reload from ``__transaction_state``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.transaction.transaction_coordinator import EndTxnResult
from broker.transaction.transaction_metadata import SHORT_MAX, TV_0, TV_2, IllegalTransitionError, TransactionState
from tests.unit.test_transaction_coordinator import DATA, TXN, Node, init, run, wait_for
from tests.unit.test_transaction_metadata import metadata

S = TransactionState


def test_a_version_2_end_prepares_the_next_epoch() -> None:
    m = metadata(S.ONGOING, epoch=4)
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000, TV_2)
    assert (transit.producer_epoch, transit.last_producer_epoch, transit.client_transaction_version) == (5, 4, TV_2)
    m.complete_transition_to(transit)
    assert (m.state, m.producer_epoch, m.last_producer_epoch, m.client_transaction_version) == (S.PREPARE_COMMIT, 5, 4, TV_2)
    m.complete_transition_to(m.prepare_complete(4000))
    assert (m.state, m.producer_epoch, m.topic_partitions) == (S.COMPLETE_COMMIT, 5, set())


def test_a_version_1_end_keeps_the_epoch_and_a_coordinator_abort_keeps_the_version() -> None:
    m = metadata(S.ONGOING, epoch=4)
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_ABORT, 3000, TV_0))
    assert (m.producer_epoch, m.client_transaction_version) == (4, TV_0)
    m = metadata(S.ONGOING, epoch=4)
    m.client_transaction_version = TV_2
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, 3000)  # the coordinator's own abort: its fence bumped already
    assert (transit.producer_epoch, transit.client_transaction_version) == (4, TV_2)


def test_a_bumped_prepare_is_only_completed_as_version_2() -> None:
    m = metadata(S.ONGOING, epoch=4)
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000, TV_2)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(transit.__class__(**{**{f: getattr(transit, f) for f in transit.__dataclass_fields__}, "client_transaction_version": TV_0}))


def test_an_exhausted_epoch_cannot_be_bumped() -> None:
    with pytest.raises(IllegalTransitionError):
        metadata(S.ONGOING, epoch=SHORT_MAX - 1).prepare_abort_or_commit(S.PREPARE_COMMIT, 3000, TV_2)


def test_every_end_bumps_the_epoch_its_markers_carry(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
        assert node.markers_in(DATA, 0) == [(pid, epoch + 1, True)]
        assert node.meta().state is S.COMPLETE_COMMIT
        # A retry names the epoch it was sent with; the other outcome is an invalid state.
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
        assert c.end_transaction(TXN, pid, epoch, commit=False, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        # The current epoch in a completed state is no retry: the producer is fenced.
        assert c.end_transaction(TXN, pid, epoch + 1, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.producer_fenced
        # The old epoch cannot add partitions; the new one runs the next transaction.
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == ErrorCode.producer_fenced
        assert c.add_partitions(TXN, pid, epoch + 1, [(DATA, 1)]) == 0
        assert c.end_transaction(TXN, pid, epoch + 1, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 2)
        assert node.markers_in(DATA, 1) == [(pid, epoch + 2, False)]

    run(tmp_path, test)


def test_a_timed_out_version_2_transaction_is_fenced_once(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2).error_code == 0
        assert c.add_partitions(TXN, pid, epoch + 1, [(DATA, 0)]) == 0
        node.meta().txn_start_timestamp -= 10**7
        c.abort_timed_out_transactions()
        await wait_for(lambda: node.meta().state is S.COMPLETE_ABORT)
        # The fence bumps the epoch; the abort under it bumps no further.
        assert node.meta().producer_epoch == epoch + 2
        assert node.markers_in(DATA, 0)[-1] == (pid, epoch + 2, False)
        # Its producer cannot commit it. As in Kafka 4.0, the fence's epoch is the producer's plus
        # one, which reads as a retry of an end; of an abort, so the commit is an invalid state.
        assert c.end_transaction(TXN, pid, epoch + 1, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        assert c.add_partitions(TXN, pid, epoch + 1, [(DATA, 0)]) == ErrorCode.producer_fenced

    run(tmp_path, test)


def test_the_version_survives_a_reload_so_retries_are_still_known(tmp_path: Path) -> None:
    state: dict[str, int] = {}

    async def first(node: Node) -> None:
        pid, epoch = await init(node)
        state.update(pid=pid, epoch=epoch)
        assert node.coordinator.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        assert node.coordinator.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2).error_code == 0

    async def second(node: Node) -> None:
        pid, epoch = state["pid"], state["epoch"]
        meta = node.meta()
        assert (meta.state, meta.producer_epoch, meta.client_transaction_version) == (S.COMPLETE_COMMIT, epoch + 1, TV_2)
        assert node.coordinator.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)

    run(tmp_path, first)
    run(tmp_path, second)


def test_an_exhausted_epoch_moves_the_producer_to_a_new_id(tmp_path: Path) -> None:
    """The markers carry the old id's last epoch; the producer goes on as a new id at epoch 0."""

    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        node.meta().producer_epoch = SHORT_MAX - 1
        ended = c.end_transaction(TXN, pid, SHORT_MAX - 1, commit=True, client_transaction_version=TV_2)
        assert isinstance(ended, asyncio.Future)  # the new id is allocated first
        result = await asyncio.wait_for(ended, 5)
        new_pid = result.producer_id
        assert result == EndTxnResult(0, new_pid, 0) and new_pid != pid
        assert node.markers_in(DATA, 0) == [(pid, SHORT_MAX, True)]
        meta = node.meta()
        assert (meta.state, meta.producer_id, meta.producer_epoch, meta.last_producer_id, meta.next_producer_id) == (S.COMPLETE_COMMIT, new_pid, 0, pid, -1)
        # A retry names the old id and its last usable epoch, and is answered as the first was.
        assert c.end_transaction(TXN, pid, SHORT_MAX - 1, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, new_pid, 0)
        assert c.add_partitions(TXN, pid, SHORT_MAX, [(DATA, 0)]) == ErrorCode.invalid_producer_id_mapping
        assert c.add_partitions(TXN, new_pid, 0, [(DATA, 0)]) == 0
        assert c.end_transaction(TXN, new_pid, 0, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, new_pid, 1)

    run(tmp_path, test)


def test_a_rotation_survives_a_reload_between_prepare_and_complete(tmp_path: Path) -> None:
    state: dict[str, int] = {}

    async def first(node: Node) -> None:
        pid, epoch = await init(node)
        assert node.coordinator.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        meta = node.meta()
        meta.producer_epoch = SHORT_MAX - 1
        # Crash between PrepareCommit and the markers.
        assert node.state.append_transaction(meta, meta.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000, TV_2, 4242)) == 0
        state.update(pid=pid)

    async def second(node: Node) -> None:
        await wait_for(lambda: node.meta().state is S.COMPLETE_COMMIT)
        meta = node.meta()
        assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (4242, 0, state["pid"])
        assert node.markers_in(DATA, 0) == [(state["pid"], SHORT_MAX, True)]

    run(tmp_path, first)
    run(tmp_path, second)
