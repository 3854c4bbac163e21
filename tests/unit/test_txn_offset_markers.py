"""A transaction's marker on ``__consumer_offsets`` is one of the group coordinator's writes, as in
Kafka's completeTransaction: it settles the producer's pending offsets in log order with the
TxnOffsetCommits written before it, once replicated, and a partition still loading refuses it
(NOT_LEADER_OR_FOLLOWER, which the transaction coordinator retries) rather than let the load
replay stop short of it.

Found by the chaos bench (issue #18): a marker applied as it was appended, outside the runtime's
write order, left offsets pending for ever (OffsetFetch answered UNSTABLE_OFFSET_COMMIT to a
read_committed consumer) or let the next transaction's ABORT drop offsets an earlier COMMIT had
committed, so a consume-transform-produce loop processed its inputs twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.group.offset_metadata_manager import PartitionCommit
from storage.producer_state_manager import SENTINEL_VERIFICATION_GUARD, VerificationGuard
from tests.unit.test_group_write_failures import DATA, GROUP, Node, answer, run, wait_for

PRODUCER_ID, PRODUCER_EPOCH, COORDINATOR_EPOCH = 4000, 0, 0
TIMEOUT_MS = 30000


def txn_offset_commit(node: Node, offset: int, guard: VerificationGuard | None = None) -> Any:
    """TxnOffsetCommit of ``offset`` for the data partition, in the producer's transaction, as the handler writes it."""
    answers, records = node.shard.offsets.txn_commit(GROUP, -1, "", None, [PartitionCommit(DATA, 0, offset, -1, "")], 0)
    assert [code for _, code in answers] == [0]
    return node.groups.execute_transactional(GROUP, PRODUCER_ID, PRODUCER_EPOCH, records, guard)


def marker(node: Node, commit: bool) -> Any:
    return node.groups.complete_transaction(0, PRODUCER_ID, PRODUCER_EPOCH, COORDINATOR_EPOCH, commit, TIMEOUT_MS)


async def replicated(node: Node, write: Any) -> None:
    node.replicate()
    assert await answer(write) == 0


def pending(node: Node) -> bool:
    return node.shard.offsets.has_pending_offset(GROUP, DATA, 0)


def test_a_marker_appended_before_its_offsets_are_replicated_commits_them_once_both_are(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        written = txn_offset_commit(node, 3)
        committed = marker(node, commit=True)
        await asyncio.sleep(0.02)
        assert isinstance(written, asyncio.Future) and not written.done()
        assert isinstance(committed, asyncio.Future) and not committed.done()
        assert node.committed() is None  # nothing is visible before it is replicated
        node.replicate()
        assert await answer(written) == 0 and await answer(committed) == 0
        assert node.committed() == 3 and not pending(node)

    run(tmp_path, test)


def test_an_abort_after_a_commit_keeps_what_the_commit_committed(tmp_path: Path) -> None:
    """The double processing the bench found: transaction 2.2 committed offset 3, 2.3 wrote 6 and aborted."""

    async def test(node: Node) -> None:
        for offset, commit in ((3, True), (6, False)):
            await replicated(node, txn_offset_commit(node, offset))
            assert pending(node)
            await replicated(node, marker(node, commit))
            assert not pending(node)
        assert node.committed() == 3

    run(tmp_path, test)


def test_a_marker_for_a_partition_still_loading_is_refused_and_its_retry_commits(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        await replicated(node, txn_offset_commit(node, 7))
        # Leadership goes away and comes back: the partition is loaded again from its log.
        node.change_offsets_partition(leader=2)
        node.change_offsets_partition(leader=1)
        assert node.groups.coordinator_error(GROUP) == ErrorCode.coordinator_load_in_progress
        assert await answer(marker(node, commit=True)) == ErrorCode.not_leader_or_follower
        await wait_for(lambda: 0 in node.groups.shards)
        assert pending(node) and node.committed() is None  # the load replayed the offsets, no marker
        await replicated(node, marker(node, commit=True))
        assert node.committed() == 7 and not pending(node)

    run(tmp_path, test)


def test_a_marker_for_a_partition_led_elsewhere_is_not_leader_or_follower(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        node.change_offsets_partition(leader=2)
        assert await answer(marker(node, commit=True)) == ErrorCode.not_leader_or_follower

    run(tmp_path, test)


def test_a_fenced_marker_is_answered_with_the_logs_error(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        await replicated(node, txn_offset_commit(node, 1))
        await replicated(node, node.groups.complete_transaction(0, PRODUCER_ID, PRODUCER_EPOCH, COORDINATOR_EPOCH + 1, True, TIMEOUT_MS))
        # A marker of an older coordinator epoch than the log has seen for the producer is fenced.
        assert await answer(marker(node, commit=False)) == ErrorCode.transaction_coordinator_fenced
        assert node.committed() == 1

    run(tmp_path, test)


def test_verified_offsets_carry_their_guard_and_an_open_transaction_needs_no_verification(tmp_path: Path) -> None:
    """KIP-890 on ``__consumer_offsets``, as Kafka's CoordinatorPartitionWriter: the TxnOffsetCommit's
    batch carries the guard its verification began, and once the transaction is open on the
    partition the next commit gets the sentinel (its coordinator is not asked again)."""

    async def test(node: Node) -> None:
        guard = node.groups.maybe_start_transaction_verification(GROUP, PRODUCER_ID, PRODUCER_EPOCH)
        assert guard is not None and guard is not SENTINEL_VERIFICATION_GUARD
        await replicated(node, txn_offset_commit(node, 5, guard))
        assert node.groups.maybe_start_transaction_verification(GROUP, PRODUCER_ID, PRODUCER_EPOCH) is SENTINEL_VERIFICATION_GUARD
        await replicated(node, marker(node, commit=True))
        assert node.committed() == 5

    run(tmp_path, test)


def test_offsets_verified_before_an_abort_are_refused_after_it(tmp_path: Path) -> None:
    """The hanging transaction KIP-890 closes, on the offsets topic: a TxnOffsetCommit verified
    while its transaction was open, whose write comes after the abort's marker, must not start a
    transaction the coordinator knows nothing of."""

    async def test(node: Node) -> None:
        await replicated(node, txn_offset_commit(node, 2))
        late = node.groups.maybe_start_transaction_verification(GROUP, PRODUCER_ID, PRODUCER_EPOCH)
        assert late is SENTINEL_VERIFICATION_GUARD  # the transaction is open: verified at once
        await replicated(node, marker(node, commit=False))
        assert await answer(txn_offset_commit(node, 9, late)) == ErrorCode.invalid_txn_state
        assert node.committed() is None and not pending(node)
        # The producer's next transaction is verified anew and commits.
        guard = node.groups.maybe_start_transaction_verification(GROUP, PRODUCER_ID, PRODUCER_EPOCH)
        assert guard is not None and guard is not SENTINEL_VERIFICATION_GUARD
        await replicated(node, txn_offset_commit(node, 9, guard))
        await replicated(node, marker(node, commit=True))
        assert node.committed() == 9

    run(tmp_path, test)


def test_a_partition_led_elsewhere_gives_no_guard(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        node.change_offsets_partition(leader=2)
        assert node.groups.maybe_start_transaction_verification(GROUP, PRODUCER_ID, PRODUCER_EPOCH) is None

    run(tmp_path, test)
