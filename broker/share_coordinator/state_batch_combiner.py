"""Merging state batches: Kafka 4.4's ``PersisterStateBatchCombiner``.

The batches a share partition's leader writes may overlap each other and those already held.
Kafka 4.4 merges them with a sweep over the batch boundaries: each offset takes the state of the
batch of highest priority that covers it (higher delivery count first, then the higher delivery
state: Archived 4 > Archiving 3 > Acknowledged 2 > Available 0, so that the ARCHIVED written once a
dead-letter write lands replaces the ARCHIVING before it), and neighbouring ranges that end up with
the same state and count coalesce. So the priority, not the order of the writes, decides an offset: a
record's delivery count only grows, which makes the latest write the winner in practice. Batches,
or their parts, below the start offset are dropped first (a start offset of -1 keeps everything).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from broker.share.persister import PersisterStateBatch
from broker.share.record_state import RecordState

NO_START_OFFSET = -1

_Priority = tuple[int, int]  # (delivery count, delivery state): compared as Kafka's PRIORITY_DESC, reversed


def combine_state_batches(
    batches_so_far: Iterable[PersisterStateBatch], new_batches: Iterable[PersisterStateBatch], start_offset: int
) -> list[PersisterStateBatch]:
    """Non-overlapping batches in offset order (Kafka's ``combineStateBatches``)."""
    pruned = _pruned(batches_so_far, start_offset) + _pruned(new_batches, start_offset)
    if len(pruned) < 2:
        return pruned  # as Kafka: a lone batch is returned as it is
    return _sweep_merge(pruned)


def _pruned(batches: Iterable[PersisterStateBatch], start_offset: int) -> list[PersisterStateBatch]:
    if start_offset == NO_START_OFFSET:
        return list(batches)
    kept = []
    for batch in batches:
        if batch.last_offset < start_offset:
            continue
        if batch.first_offset >= start_offset:
            kept.append(batch)
        else:
            kept.append(PersisterStateBatch(start_offset, batch.last_offset, batch.delivery_state, batch.delivery_count))
    return kept


def _sweep_merge(batches: list[PersisterStateBatch]) -> list[PersisterStateBatch]:
    # A batch opens at its first offset and closes after its last; between two boundaries the
    # active batch of highest priority owns every offset. A max-heap with lazy deletion keeps this
    # O(n log n) however the batches overlap.
    events: list[tuple[int, bool, _Priority]] = []
    for batch in batches:
        priority = (batch.delivery_count, int(batch.delivery_state))
        events.append((batch.first_offset, True, priority))
        events.append((batch.last_offset + 1, False, priority))
    events.sort(key=lambda event: event[0])
    active: dict[_Priority, int] = {}
    heap: list[tuple[int, int]] = []  # negated priorities
    merged: list[PersisterStateBatch] = []
    current: _Priority | None = None
    previous = 0
    i = 0
    while i < len(events):
        offset = events[i][0]
        if current is not None and offset > previous:
            _append_coalesced(merged, previous, offset - 1, current)
        while i < len(events) and events[i][0] == offset:
            _, opens, priority = events[i]
            if opens:
                active[priority] = active.get(priority, 0) + 1
                heapq.heappush(heap, (-priority[0], -priority[1]))
            elif active[priority] == 1:
                del active[priority]
            else:
                active[priority] -= 1
            i += 1
        while heap and (-heap[0][0], -heap[0][1]) not in active:
            heapq.heappop(heap)
        current = (-heap[0][0], -heap[0][1]) if heap else None
        previous = offset
    return merged


def _append_coalesced(merged: list[PersisterStateBatch], first: int, last: int, priority: _Priority) -> None:
    count, state = priority
    if merged:
        tail = merged[-1]
        if tail.last_offset + 1 == first and tail.delivery_count == count and tail.delivery_state == state:
            merged[-1] = PersisterStateBatch(tail.first_offset, last, tail.delivery_state, count)
            return
    merged.append(PersisterStateBatch(first, last, RecordState(state), count))
