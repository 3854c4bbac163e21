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


async def one_transaction(node: Node, commit: bool) -> tuple[int, int]:
    """A transaction on partition 0 ended with EndTxn v5, which bumps the epoch its marker carries:
    its producer id and the epoch it ran at."""
    pid, epoch = await init(node)
    assert node.coordinator.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
    assert node.coordinator.end_transaction(TXN, pid, epoch, commit=commit, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
    assert node.markers_in(DATA, 0) == [(pid, epoch + 1, commit)]
    return pid, epoch


def test_every_end_bumps_the_epoch_its_markers_carry(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await one_transaction(node, commit=True)
        assert node.meta().state is S.COMPLETE_COMMIT
        # A retry names the epoch it was sent with; the other outcome is an invalid state.
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
        assert c.end_transaction(TXN, pid, epoch, commit=False, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        # The current epoch in a completed state is no retry but the next transaction's, which
        # has nothing to commit (Kafka 4.4; Kafka 4.0 fenced the producer here).
        assert c.end_transaction(TXN, pid, epoch + 1, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        # The old epoch cannot add partitions; the new one runs the next transaction.
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 1)]) == ErrorCode.producer_fenced
        assert c.add_partitions(TXN, pid, epoch + 1, [(DATA, 1)]) == 0
        assert c.end_transaction(TXN, pid, epoch + 1, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 2)
        assert node.markers_in(DATA, 1) == [(pid, epoch + 2, False)]

    run(tmp_path, test)


def test_an_abort_with_no_transaction_open_bumps_the_epoch_as_an_empty_transactions(tmp_path: Path) -> None:
    """Kafka 4.4: after an abort (or a commit, or InitProducerId) an abort at the current epoch is
    the abort of a new, empty transaction. Kafka 4.0 fenced the producer instead."""

    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await one_transaction(node, commit=False)
        # Aborted again at the epoch the first abort answered: bumped again, no marker written.
        assert c.end_transaction(TXN, pid, epoch + 1, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 2)
        meta = node.meta()
        assert (meta.state, meta.producer_epoch, meta.last_producer_epoch, meta.topic_partitions) == (S.COMPLETE_ABORT, epoch + 2, epoch + 1, set())
        assert node.markers_in(DATA, 0) == [(pid, epoch + 1, False)]
        # Its retry is answered as it was; a commit, of either epoch, is an invalid state.
        assert c.end_transaction(TXN, pid, epoch + 1, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 2)
        assert c.end_transaction(TXN, pid, epoch + 1, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        assert c.end_transaction(TXN, pid, epoch + 2, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        # An epoch older than the retry's is fenced.
        assert c.end_transaction(TXN, pid, epoch, commit=False, client_transaction_version=TV_2).error_code == ErrorCode.producer_fenced
        # After a commit too; the commit's retry, two bumps behind now, is fenced.
        assert c.add_partitions(TXN, pid, epoch + 2, [(DATA, 0)]) == 0
        assert c.end_transaction(TXN, pid, epoch + 2, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 3)
        assert c.end_transaction(TXN, pid, epoch + 3, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 4)
        assert c.end_transaction(TXN, pid, epoch + 2, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.producer_fenced
        assert node.markers_in(DATA, 0) == [(pid, epoch + 1, False), (pid, epoch + 3, True)]
        # The next transaction runs on the bumped epoch.
        assert c.add_partitions(TXN, pid, epoch + 4, [(DATA, 1)]) == 0
        assert c.end_transaction(TXN, pid, epoch + 4, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 5)
        assert node.markers_in(DATA, 1) == [(pid, epoch + 5, True)]

    run(tmp_path, test)


def test_an_abort_right_after_init_producer_id_bumps_the_epoch(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert node.meta().state is S.EMPTY
        # A version 1 end keeps its rule: an abort with nothing begun is an invalid state.
        assert c.end_transaction(TXN, pid, epoch, commit=False).error_code == ErrorCode.invalid_txn_state
        # Empty takes no retry (the epoch before) and no commit.
        assert c.end_transaction(TXN, pid, epoch - 1, commit=False, client_transaction_version=TV_2).error_code == ErrorCode.producer_fenced
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2).error_code == ErrorCode.invalid_txn_state
        assert c.end_transaction(TXN, pid, epoch, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
        assert node.meta().state is S.COMPLETE_ABORT

    run(tmp_path, test)


def test_an_empty_transactions_abort_at_an_exhausted_epoch_moves_the_producer_to_a_new_id(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.end_transaction(TXN, pid, epoch, commit=False, client_transaction_version=TV_2).error_code == 0
        node.meta().producer_epoch = SHORT_MAX - 1
        ended = c.end_transaction(TXN, pid, SHORT_MAX - 1, commit=False, client_transaction_version=TV_2)
        assert isinstance(ended, asyncio.Future)  # the new id is allocated first
        result = await asyncio.wait_for(ended, 5)
        assert result.error_code == 0 and result.producer_id != pid and result.producer_epoch == 0
        meta = node.meta()
        assert (meta.state, meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (S.COMPLETE_ABORT, result.producer_id, 0, pid)

    run(tmp_path, test)


def test_the_last_epoch_is_aborted_without_a_bump() -> None:
    """Only a fence reaches the last epoch; Kafka 4.4 aborts at it as it is, and commits nothing there."""
    m = metadata(S.COMPLETE_ABORT, epoch=SHORT_MAX)
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, 3000, TV_2, 4242, no_partition_added=True)
    assert (transit.producer_epoch, transit.last_producer_epoch, transit.next_producer_id, transit.txn_start_timestamp) == (SHORT_MAX, SHORT_MAX, 4242, 3000)
    m.complete_transition_to(transit)
    m.complete_transition_to(m.prepare_complete(4000))
    assert (m.state, m.producer_id, m.producer_epoch) == (S.COMPLETE_ABORT, 4242, 0)
    with pytest.raises(IllegalTransitionError):
        metadata(S.ONGOING, epoch=SHORT_MAX).prepare_abort_or_commit(S.PREPARE_COMMIT, 3000, TV_2, 4242)


def test_a_version_2_end_while_the_markers_are_written_is_retried_whatever_its_epoch(tmp_path: Path) -> None:
    """Kafka 4.4 looks at the pending Complete transition before the producer under version 2."""

    async def test(node: Node) -> None:
        c = node.coordinator
        pid, epoch = await init(node)
        assert c.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        partition = node.rm.partitions.pop((DATA, 0))  # the marker cannot be written for now
        assert c.end_transaction(TXN, pid, epoch, commit=True, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)
        assert node.meta().state is S.PREPARE_COMMIT
        for at_epoch, commit in ((epoch, True), (epoch + 1, False), (epoch + 7, True)):
            assert c.end_transaction(TXN, pid, at_epoch, commit=commit, client_transaction_version=TV_2).error_code == ErrorCode.concurrent_transactions
        # A version 1 end still names its producer first.
        assert c.end_transaction(TXN, pid, epoch + 7, commit=True).error_code == ErrorCode.producer_fenced
        node.rm.partitions[(DATA, 0)] = partition
        await wait_for(lambda: node.meta().state is S.COMPLETE_COMMIT)
        assert c.end_transaction(TXN, pid, epoch + 1, commit=False, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 2)

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


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort-with-no-transaction-open"])
def test_the_version_survives_a_reload_so_retries_are_still_known(tmp_path: Path, commit: bool) -> None:
    """Also for the abort of an empty transaction (Kafka 4.4), whose records name no partition."""
    state: dict[str, int] = {}

    async def first(node: Node) -> None:
        pid, epoch = await init(node)
        state.update(pid=pid, epoch=epoch)
        if commit:
            assert node.coordinator.add_partitions(TXN, pid, epoch, [(DATA, 0)]) == 0
        assert node.coordinator.end_transaction(TXN, pid, epoch, commit=commit, client_transaction_version=TV_2).error_code == 0

    async def second(node: Node) -> None:
        pid, epoch = state["pid"], state["epoch"]
        meta = node.meta()
        ended = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        assert (meta.state, meta.producer_epoch, meta.client_transaction_version, meta.topic_partitions) == (ended, epoch + 1, TV_2, set())
        assert node.coordinator.end_transaction(TXN, pid, epoch, commit=commit, client_transaction_version=TV_2) == EndTxnResult(0, pid, epoch + 1)

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
