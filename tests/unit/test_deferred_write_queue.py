"""The coordinator runtime's queue of writes waiting for the high watermark: completion order and reverts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.deferred_write_queue import DeferredWrite, DeferredWriteQueue

NOT_COORDINATOR = 16
REQUEST_TIMED_OUT = 7


class Shard:
    """A coordinator's memory: a counter each write adds to, and what happened, in order."""

    def __init__(self) -> None:
        self.value = 0
        self.events: list[tuple[str, int, int]] = []

    def write(self, queue: DeferredWriteQueue, offset: int, delta: int) -> None:
        before = self.value
        self.value += delta

        def revert(error: int) -> None:
            self.value = before
            self.events.append(("revert", offset, error))

        queue.add(DeferredWrite(offset, lambda error: self.events.append(("complete", offset, error)), revert))


def test_writes_complete_in_log_order_once_the_high_watermark_passes_them() -> None:
    queue, shard = DeferredWriteQueue(), Shard()
    for offset in (1, 2, 3):
        shard.write(queue, offset, 1)
    queue.replicated(0)
    assert shard.events == []
    queue.replicated(2)
    assert shard.events == [("complete", 1, 0), ("complete", 2, 0)]
    assert len(queue) == 1
    queue.replicated(10)
    assert shard.events[-1] == ("complete", 3, 0)
    assert shard.value == 3 and len(queue) == 0


def test_a_failed_write_reverts_it_and_every_later_write_latest_first() -> None:
    queue, shard = DeferredWriteQueue(), Shard()
    for offset, delta in ((1, 1), (2, 10), (3, 100)):
        shard.write(queue, offset, delta)
    queue.failed(2, REQUEST_TIMED_OUT)
    # The state is as it was before the failed write; the earlier write still waits.
    assert shard.value == 1
    assert shard.events == [
        ("revert", 3, REQUEST_TIMED_OUT),
        ("revert", 2, REQUEST_TIMED_OUT),
        ("complete", 2, REQUEST_TIMED_OUT),
        ("complete", 3, REQUEST_TIMED_OUT),
    ]
    queue.replicated(3)
    assert shard.events[-1] == ("complete", 1, 0)
    assert shard.value == 1


def test_a_late_outcome_of_a_write_already_settled_changes_nothing() -> None:
    queue, shard = DeferredWriteQueue(), Shard()
    shard.write(queue, 5, 1)
    queue.replicated(5)
    queue.failed(5, NOT_COORDINATOR)  # the write's own waiter answering after a later write's
    assert shard.events == [("complete", 5, 0)]
    assert shard.value == 1


def test_unloading_fails_everything_back_to_the_replicated_state() -> None:
    queue, shard = DeferredWriteQueue(), Shard()
    shard.write(queue, 1, 1)
    queue.replicated(1)
    shard.write(queue, 2, 2)
    shard.write(queue, 3, 4)
    queue.fail_all(NOT_COORDINATOR)
    assert shard.value == 1
    assert [e for e in shard.events if e[0] == "complete"] == [("complete", 1, 0), ("complete", 2, NOT_COORDINATOR), ("complete", 3, NOT_COORDINATOR)]


def test_writes_are_appended_in_log_order() -> None:
    queue = DeferredWriteQueue()
    queue.add(DeferredWrite(5, lambda error: None, lambda error: None))
    with pytest.raises(ValueError):
        queue.add(DeferredWrite(4, lambda error: None, lambda error: None))


# No deadline: the machine is shared, and a slow example says nothing about the queue.
@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.booleans(), st.integers(0, 40)), min_size=1, max_size=30))
def test_memory_always_equals_the_replicated_writes_plus_those_still_waiting(steps: list[tuple[int, bool, int]]) -> None:
    """Whatever the order of outcomes, the state is the sum of the writes that completed and
    those still pending, and each write completes exactly once."""
    queue, shard = DeferredWriteQueue(), Shard()
    deltas: dict[int, int] = {}
    offset = 0
    for delta, succeed, at in steps:
        offset += 1
        deltas[offset] = delta
        shard.write(queue, offset, delta)
        target = min(at, offset)
        if succeed:
            queue.replicated(target)
        else:
            queue.failed(target, REQUEST_TIMED_OUT)
    completed = [o for kind, o, error in shard.events if kind == "complete"]
    assert len(completed) == len(set(completed))
    succeeded = {o for kind, o, error in shard.events if kind == "complete" and error == 0}
    completed_set = set(completed)
    pending = set(deltas) - completed_set
    assert shard.value == sum(deltas[o] for o in succeeded | pending)
