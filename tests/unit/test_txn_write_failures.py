"""Transaction state and failed ``__transaction_state`` writes on the coordinator runtime: a
transition that is not replicated in time fails the transitions written after it in the same
partition (the runtime reverts a partition's writes from the failed one on), and no id's
metadata moves to a state that was not written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.unit.test_transaction_coordinator import DATA, REPLICATED, TXN, Node, S, replicate, replicated_init, run, waiting


def test_a_timed_out_transition_fails_the_later_ones_of_its_partition_and_moves_no_state(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        c = node.coordinator
        other = next(t for t in (f"other-{i}" for i in range(100)) if node.state.partition_for(t) == node.state.partition_for(TXN))
        # Its transitions wait 1 s: long enough for both writes to be made on a busy machine.
        pid, epoch = await replicated_init(node, timeout_ms=1000)
        other_pid, other_epoch = await replicated_init(node, other, timeout_ms=60000)
        added = await waiting(c.add_partitions(TXN, pid, epoch, [(DATA, 0)]))
        other_added = await waiting(c.add_partitions(other, other_pid, other_epoch, [(DATA, 1)]))
        assert await asyncio.wait_for(added, 5) == ErrorCode.coordinator_not_available
        # Written after the failed one: failed with it, long before its own 60 s.
        assert await asyncio.wait_for(other_added, 5) == ErrorCode.coordinator_not_available
        for transactional_id in (TXN, other):
            meta = node.meta(transactional_id)
            assert meta.state is S.EMPTY and meta.pending_state is None and meta.topic_partitions == set()
        # Both write again; replicated, they are answered and applied.
        again = await waiting(c.add_partitions(other, other_pid, other_epoch, [(DATA, 1)]))
        replicate(node, other)
        assert await asyncio.wait_for(again, 5) == 0
        assert node.meta(other).state is S.ONGOING and node.meta(other).topic_partitions == {(DATA, 1)}

    run(tmp_path, test, **REPLICATED)
