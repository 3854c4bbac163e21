"""The in-flight records of one partition for one share group: Kafka's
``kafka.server.share.SharePartition``, sans-IO.

The share-partition start offset (SPSO) is the first offset whose delivery is not finished;
the end offset (SPEO) the last offset fetched into the cache (or, with nothing cached, the
next offset to fetch). Between them every record is AVAILABLE, ACQUIRED (by one member, under
an acquisition lock), ACKNOWLEDGED, ARCHIVING (archived for the group's dead-letter queue, its
DLQ write not landed yet: never delivered again, but the SPSO stays before it) or ARCHIVED,
tracked per fetched batch until something touches only part of a batch (``InFlightBatch``).

Nothing here reads the log, keeps a timer or talks to the share coordinator:

- ``acquire`` takes the offset ranges of the batches a fetch from ``next_fetch_offset()``
  returned (and, for read_committed, the aborted transactions of that read);
- time comes in as ``now_ms``; ``next_lock_deadline_ms()`` tells when to call
  ``expire_acquisition_locks``;
- every state change returns a ``ShareStateUpdate`` whose ``write`` holds the batches the
  share coordinator must persist (WriteShareGroupState), and ``initialize`` takes what
  ReadShareGroupState returned;
- ``delivery_complete_count`` (Kafka's deliveryCompleteCount, KIP-1226) is the number of
  ACKNOWLEDGED or ARCHIVED records from the start offset on, kept up to date as records finish
  and the start offset moves; every write carries it, so that the group coordinator can tell a
  share partition's lag (high watermark - start offset - this count);
- with ``dlq`` (the group has a dead-letter queue) a REJECT, or a record going back to AVAILABLE
  at the delivery count limit, makes it ARCHIVING: the update's ``archiving`` names the DLQ
  writes to make once ``write`` is persisted, and ``complete_archiving`` archives them when
  each landed or was given up on (Kafka's initiateDLQAndArchive). ``archiving_batches`` are
  those a loaded state holds, to write again (Kafka's maybeResumeDlqArchiving).

State changes apply at once. Kafka keeps them pending until the share coordinator confirms
the write and rolls them back on failure; that is not modelled here: a caller that cannot
persist a write must drop the share partition and initialise a new one from the coordinator.
So a write carries the start offset after its change, with the delivery-complete count that goes
with it; Kafka's carries the start offset from before (it moves once the write is done) with the
count after the change: both tell the same lag.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import heapq
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.acquired_records import (
    AcquiredRecords,
    FetchedBatch,
    ReadCommitted,
    ShareAcquiredRecords,
)
from broker.share.in_flight import EMPTY_MEMBER_ID, InFlightBatch, InFlightState, StateSnapshot
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import AcknowledgeType, RecordState
from broker.share.share_group_dlq import DLQCause, DlqBatch


class SharePartitionState(enum.Enum):
    """Kafka's ``SharePartitionState``; the share coordinator read happens outside, so there is
    no INITIALIZING here."""

    EMPTY = "empty"
    ACTIVE = "active"
    FAILED = "failed"


class ShareAutoOffsetReset(enum.Enum):
    """``share.auto.offset.reset``: where a share group with no state starts reading."""

    EARLIEST = "earliest"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """The ``group.share.*`` settings a share partition obeys (Kafka's defaults)."""

    # group.share.delivery.count.limit
    delivery_count_limit: int = 5
    # group.share.partition.max.record.locks
    max_record_locks: int = 2000
    # group.share.record.lock.duration.ms
    record_lock_duration_ms: int = 30000
    # share.auto.offset.reset (a group config)
    auto_offset_reset: ShareAutoOffsetReset = ShareAutoOffsetReset.LATEST
    # share.renew.acknowledge.enable (a group config): may members renew acquisition locks?
    renew_acknowledge_enable: bool = True


@dataclass(frozen=True, slots=True)
class ShareStateUpdate:
    """The outcome of acknowledge, release or lock expiry.

    ``write`` is None when nothing changed (or on error: then nothing changed either);
    otherwise its ``state_batches`` are the ranges whose state changed, to send with
    WriteShareGroupState.
    """

    error: ErrorCode = ErrorCode.none
    write: SharePartitionStateData | None = None
    # The ranges the change made ARCHIVING, to write to the dead-letter queue once ``write`` is.
    archiving: tuple[DlqBatch, ...] = ()


_NO_UPDATE = ShareStateUpdate()

# A scheduled expiry: (deadline, token, member, first offset, last offset).
_LockEntry = tuple[int, int, str, int, int]
_Range = TypeVar("_Range", PersisterStateBatch, DlqBatch)


class SharePartition:
    def __init__(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        config: SharePartitionConfig,
        *,
        leader_epoch: int = 0,
    ) -> None:
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.config = config
        self.leader_epoch = leader_epoch
        self.partition_state = SharePartitionState.EMPTY
        # Kafka's cachedState (a NavigableMap by first offset): sorted keys plus a dict.
        self._keys: list[int] = []
        self._batches: dict[int, InFlightBatch] = {}
        self._start_offset = 0
        self._end_offset = 0
        self._state_epoch = 0
        self._delivery_complete_count = 0
        # Set when a record may have become AVAILABLE again behind the end offset.
        self._find_next_fetch_offset = False
        self._lock_heap: list[_LockEntry] = []
        # Kafka's throttleRecordsDeliveryLimit.
        self._throttle_threshold = max(2, -(-config.delivery_count_limit // 2))
        self._next_lock_token = 1

    # ------------------------------------------------------------------ views

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def state_epoch(self) -> int:
        return self._state_epoch

    @property
    def delivery_complete_count(self) -> int:
        """The ACKNOWLEDGED and ARCHIVED records of the cache from the start offset on."""
        return self._delivery_complete_count

    def in_flight_batches(self) -> Iterator[InFlightBatch]:
        """The cached batches in offset order (read only: for tests and describe tools)."""
        for key in self._keys:
            yield self._batches[key]

    def record_state(self, offset: int) -> InFlightState | None:
        """The state of one cached offset, or None when it is not in flight."""
        index = bisect.bisect_right(self._keys, offset) - 1
        if index < 0:
            return None
        batch = self._batches[self._keys[index]]
        if offset > batch.last_offset:
            return None
        if batch.offset_states is None:
            return batch.state
        return batch.offset_states[offset]

    def in_flight_record_count(self) -> int:
        """Kafka's ``numInFlightRecords``: what ``max_record_locks`` limits."""
        if not self._keys:
            return 0
        return self._end_offset - self._start_offset + 1

    # ----------------------------------------------------------- initialising

    def initialize(
        self,
        persisted: SharePartitionStateData | None,
        *,
        earliest_offset: int,
        latest_offset: int,
    ) -> ErrorCode:
        """Kafka's ``maybeInitialize`` once ReadShareGroupState answered.

        ``persisted`` is None (or has start offset -1) when the group has no state for the
        partition: the start offset then follows ``share.auto.offset.reset``, the log start
        offset for earliest, ``latest_offset`` (Kafka's offset for the latest timestamp, the
        high watermark) for latest. Records a persisted state shows as ACQUIRED were never
        acknowledged, so they are available again: an acquisition lock does not outlive the
        leader that granted it. ARCHIVING records stay ARCHIVING: ``archiving_batches`` says
        which DLQ writes to make again.
        """
        if self.partition_state is SharePartitionState.ACTIVE:
            return ErrorCode.none
        if self.partition_state is SharePartitionState.FAILED:
            return ErrorCode.unknown_server_error
        if persisted is None or persisted.start_offset < 0:
            reset = self.config.auto_offset_reset
            start = earliest_offset if reset is ShareAutoOffsetReset.EARLIEST else latest_offset
            self._start_offset = self._end_offset = start
            self._state_epoch = persisted.state_epoch if persisted is not None else 0
            self.partition_state = SharePartitionState.ACTIVE
            return ErrorCode.none

        start = persisted.start_offset
        previous_last = start - 1
        for state_batch in persisted.state_batches:
            if state_batch.first_offset <= previous_last or state_batch.last_offset < state_batch.first_offset:
                # Batches below the start offset, overlapping or reversed: the state is corrupt.
                self.partition_state = SharePartitionState.FAILED
                self._keys.clear()
                self._batches.clear()
                self._delivery_complete_count = 0
                return ErrorCode.unknown_server_error
            previous_last = state_batch.last_offset
            delivery_state = state_batch.delivery_state
            if delivery_state is RecordState.ACQUIRED:
                delivery_state = RecordState.AVAILABLE
            elif delivery_state.is_terminal:
                self._delivery_complete_count += state_batch.last_offset - state_batch.first_offset + 1
            self._keys.append(state_batch.first_offset)
            self._batches[state_batch.first_offset] = InFlightBatch(
                state_batch.first_offset,
                state_batch.last_offset,
                InFlightState(delivery_state, state_batch.delivery_count),
            )
        self._start_offset = start
        self._state_epoch = persisted.state_epoch
        if self._keys:
            self._find_next_fetch_offset = True
            self._end_offset = self._batches[self._keys[-1]].last_offset
            self._maybe_update_cached_state_and_offsets()
        else:
            self._end_offset = start
        self.partition_state = SharePartitionState.ACTIVE
        return ErrorCode.none

    # ---------------------------------------------------------------- fetching

    def next_fetch_offset(self) -> int:
        """Kafka's ``nextFetchOffset``: where the next log read for this share partition starts,
        the first AVAILABLE cached record if any, else past the end offset."""
        last_cached = self._batches[self._keys[-1]].last_offset if self._keys else -1
        if not self._keys or self._start_offset > last_cached:
            self._find_next_fetch_offset = False
            return self._end_offset
        if not self._find_next_fetch_offset:
            return self._end_offset + 1
        expected = self._start_offset
        for key in self._keys:
            batch = self._batches[key]
            if batch.first_offset > expected:
                # Offsets no batch covers (a persisted state only holds the ranges it wrote):
                # never delivered, so they come first.
                return expected
            expected = batch.last_offset + 1
            if batch.offset_states is None:
                if batch.state.state is RecordState.AVAILABLE:
                    return batch.first_offset
                continue
            for offset, state in batch.offset_states.items():
                if state.state is RecordState.AVAILABLE:
                    return offset
        self._find_next_fetch_offset = False
        return self._end_offset + 1

    def can_acquire_records(self) -> bool:
        """Kafka's ``canAcquireRecords``: is a fetch worth doing (records to redeliver, or room
        under ``group.share.partition.max.record.locks``)?"""
        if self.partition_state is not SharePartitionState.ACTIVE:
            return False
        if self.next_fetch_offset() != self._end_offset + 1:
            return True
        return self.in_flight_record_count() < self.config.max_record_locks

    def acquire(
        self,
        member_id: str,
        fetched: Sequence[FetchedBatch],
        max_fetch_records: int,
        now_ms: int,
        *,
        fetch_offset: int | None = None,
        batch_size: int | None = None,
        read_committed: ReadCommitted | None = None,
        record_limit: bool = False,
    ) -> ShareAcquiredRecords:
        """Acquire for ``member_id`` what a log read from ``fetch_offset`` returned.

        ``fetched`` are the batches in offset order (for read_committed, read up to the last
        stable offset). AVAILABLE cached records in that range are acquired again and the
        records past the end offset are added, in offset order, whole batches at a time:
        ``max_fetch_records`` is a soft limit, as is ``group.share.partition.max.record.locks``.
        ``batch_size`` splits the new records into AcquiredRecords of about that many records,
        on batch boundaries. Under read_committed, the data batches of aborted transactions
        are archived rather than delivered.

        ``record_limit`` is ShareAcquireMode RECORD_LIMIT (KIP-1206): ``max_fetch_records`` is
        a hard limit. A batch with more records than are still wanted is split and only its
        first records are acquired; the rest stay AVAILABLE, never delivered, for the next
        fetch. ``batch_size`` does not apply.
        """
        if self.partition_state is not SharePartitionState.ACTIVE or max_fetch_records <= 0 or not fetched:
            return ShareAcquiredRecords()
        first_fetched = fetched[0].base_offset
        if fetch_offset is None:
            fetch_offset = first_fetched
        max_records, last_to_acquire = self._limits_for_acquire(
            fetch_offset, max_fetch_records, fetched[-1].last_offset
        )
        if max_records <= 0:
            return ShareAcquiredRecords()

        deadline = now_ms + self.config.record_lock_duration_ms
        tokens: set[int] = set()
        # Records between the fetch offset and the first batch returned were compacted away.
        if fetch_offset < first_fetched:
            self._archive(fetch_offset, first_fetched - 1, _is_available)
            self._archive_gaps(fetch_offset, first_fetched - 1)

        # Records before the start offset are finished whatever the read returned; from there
        # on, start at the cached batch holding the first offset so its boundaries are kept.
        base = max(first_fetched, self._start_offset)
        index = bisect.bisect_right(self._keys, base) - 1
        if index >= 0 and self._batches[self._keys[index]].last_offset >= base:
            base = self._keys[index]
        overlapping = self._keys_within(base, last_to_acquire)

        result: list[AcquiredRecords] = []
        acquired = 0
        if not overlapping:
            acquired = self._acquire_new(
                member_id, fetched, first_fetched, last_to_acquire, max_records, batch_size,
                deadline, tokens, result, record_limit,
            )
        else:
            gap_start = base
            for key in overlapping:
                if acquired >= max_records:
                    break
                batch = self._batches[key]
                if gap_start < key:
                    # Offsets no batch covers: never fetched before (Kafka's persister read
                    # gap), so they are new records.
                    acquired += self._acquire_new(
                        member_id, fetched, gap_start, key - 1, max_records - acquired,
                        batch_size, deadline, tokens, result, record_limit,
                    )
                    if acquired >= max_records:
                        break
                gap_start = batch.last_offset + 1
                full_match = batch.first_offset >= first_fetched and batch.last_offset <= last_to_acquire
                # Kafka's checkForRecordLimitSubsetMatch: a batch bigger than what is still wanted.
                over_limit = record_limit and batch.last_offset - batch.first_offset + 1 > max_records - acquired
                throttle = self._should_throttle(batch, first_fetched, last_to_acquire)
                if throttle and acquired > 0:
                    # Records redelivered this often go in a fetch of their own, so that one
                    # bad record does not use up the delivery attempts of many good ones.
                    max_records = 0
                    break
                if not full_match or batch.offset_states is not None or over_limit or throttle:
                    if batch.offset_states is None:
                        # Only split a batch when some of it can actually be acquired.
                        if batch.state.state is not RecordState.AVAILABLE:
                            continue
                        batch.split()
                    taken = self._acquire_offsets(
                        member_id, batch, first_fetched, last_to_acquire, deadline, tokens, result,
                        max_records - acquired if record_limit else None,
                    )
                    acquired += taken
                    if throttle and taken > 0:
                        max_records = 0
                        break
                    continue
                state = batch.state
                if state.state is not RecordState.AVAILABLE:
                    continue
                if not state.try_update(
                    RecordState.ACQUIRED,
                    increase_delivery_count=True,
                    max_delivery_count=self.config.delivery_count_limit,
                    member_id=member_id,
                ):
                    continue
                self._lock(state, member_id, batch.first_offset, batch.last_offset, deadline, tokens)
                result.append(AcquiredRecords(batch.first_offset, batch.last_offset, state.delivery_count))
                acquired += batch.last_offset - batch.first_offset + 1
            last_cached = self._batches[overlapping[-1]].last_offset
            if acquired < max_records and last_cached < last_to_acquire:
                acquired += self._acquire_new(
                    member_id, fetched, last_cached + 1, last_to_acquire, max_records - acquired,
                    batch_size, deadline, tokens, result, record_limit,
                )
        if read_committed is not None and result:
            result = self._filter_aborted(member_id, fetched, read_committed, tokens, result)
        return ShareAcquiredRecords(tuple(result), acquired)

    def _limits_for_acquire(self, fetch_offset: int, max_fetch_records: int, last_fetched: int) -> tuple[int, int]:
        """Kafka's ``lastOffsetAndMaxRecordsToAcquire``: at the record-lock limit, only records
        already in flight (behind the end offset) may still be acquired."""
        max_records = min(max_fetch_records, self.config.max_record_locks - self.in_flight_record_count())
        last_to_acquire = last_fetched
        if max_records <= 0 and fetch_offset <= self._end_offset:
            max_records = min(max_fetch_records, self._end_offset - fetch_offset + 1)
            last_to_acquire = min(last_fetched, self._end_offset)
        return max_records, last_to_acquire

    def _acquire_new(
        self,
        member_id: str,
        fetched: Sequence[FetchedBatch],
        first: int,
        last: int,
        max_records: int,
        batch_size: int | None,
        deadline: int,
        tokens: set[int],
        result: list[AcquiredRecords],
        record_limit: bool = False,
    ) -> int:
        """Kafka's ``acquireNewBatchRecords``: add ``first..last`` (cut after the fetched batch
        holding the ``max_records``-th offset) to the cache, ACQUIRED once. Returns the count.
        With ``record_limit`` the cached batch keeps the fetched batches' boundary but only its
        first ``max_records`` offsets are acquired (Kafka's createBatches in RECORD_LIMIT mode)."""
        # Records before the start offset (with nothing cached: the end offset) were delivered
        # and finished already; a read from a compacted offset can return them.
        first = max(first, self._start_offset if self._keys else self._end_offset)
        if first > last:
            return 0
        if max_records < last - first + 1:
            last = min(last, _last_offset_of_batch_holding(fetched, first + max_records - 1))
        if record_limit:
            return self._acquire_new_limited(member_id, first, last, max_records, deadline, tokens, result)
        pieces = [first]
        if batch_size is not None and last - first + 1 > batch_size:
            piece_start = first
            for batch in fetched:
                if batch.base_offset > last:
                    break
                if batch.base_offset - piece_start >= batch_size:
                    pieces.append(batch.base_offset)
                    piece_start = batch.base_offset
        pieces.append(last + 1)
        for piece_first, piece_next in zip(pieces, pieces[1:]):
            piece_last = piece_next - 1
            state = InFlightState(RecordState.ACQUIRED, 1, member_id)
            self._lock(state, member_id, piece_first, piece_last, deadline, tokens)
            bisect.insort(self._keys, piece_first)
            self._batches[piece_first] = InFlightBatch(piece_first, piece_last, state)
            result.append(AcquiredRecords(piece_first, piece_last, 1))
        if self._keys[0] == first:
            self._start_offset = first
        if last > self._end_offset:
            self._end_offset = last
        return last - first + 1

    def _acquire_new_limited(
        self,
        member_id: str,
        first: int,
        last: int,
        max_records: int,
        deadline: int,
        tokens: set[int],
        result: list[AcquiredRecords],
    ) -> int:
        acquired_last = min(last, first + max_records - 1)
        state = InFlightState(RecordState.ACQUIRED, 1, member_id)
        self._lock(state, member_id, first, acquired_last, deadline, tokens)
        batch = InFlightBatch(first, last, state)
        if acquired_last < last:
            # As Kafka's maybeInitializeOffsetStateUpdate: the offsets past the limit were not
            # delivered, so they are AVAILABLE with no delivery counted.
            states = batch.split()
            for offset in range(acquired_last + 1, last + 1):
                states[offset] = InFlightState(RecordState.AVAILABLE, 0)
            self._find_next_fetch_offset = True
        bisect.insort(self._keys, first)
        self._batches[first] = batch
        result.append(AcquiredRecords(first, acquired_last, 1))
        if self._keys[0] == first:
            self._start_offset = first
        if last > self._end_offset:
            self._end_offset = last
        return acquired_last - first + 1

    def _should_throttle(self, batch: InFlightBatch, first: int, last: int) -> bool:
        """Kafka's ``shouldThrottleRecordsDelivery``: has an AVAILABLE batch (or an AVAILABLE
        offset of it within ``first..last``) been delivered at least half the delivery count
        limit? Kafka also throttles on a whole batch it cannot acquire (finished, or held by
        another member), which only cuts the fetch short; here such a batch is skipped."""
        threshold = self._throttle_threshold
        if batch.offset_states is None:
            return batch.state.state is RecordState.AVAILABLE and batch.state.delivery_count >= threshold
        return any(
            state.state is RecordState.AVAILABLE and state.delivery_count >= threshold
            for _, state in batch.states_in(first, last)
        )

    def _acquire_offsets(
        self,
        member_id: str,
        batch: InFlightBatch,
        first: int,
        last: int,
        deadline: int,
        tokens: set[int],
        result: list[AcquiredRecords],
        record_limit: int | None = None,
    ) -> int:
        """Kafka's ``acquireSubsetBatchRecords``: acquire the AVAILABLE offsets of a split batch
        within ``first..last``, one AcquiredRecords per run of contiguous offsets with the same
        delivery count (Kafka sends one per offset; a client cannot tell the difference).

        Past the throttle threshold (half the delivery count limit) fewer records are taken
        at a time, halving with every further delivery; a record on its last delivery goes
        alone. ``record_limit`` (RECORD_LIMIT mode) caps the records taken."""
        limit = self.config.delivery_count_limit
        threshold = self._throttle_threshold
        acquired = 0
        throttled_max = -1
        run: list[InFlightState] = []
        run_first = -1
        for offset, state in batch.states_in(first, last):
            if state.state is not RecordState.AVAILABLE:
                continue
            if acquired == record_limit:
                break
            count = state.delivery_count
            if limit > 2 and count == limit - 1 and acquired > 0:
                break
            if count >= threshold and throttled_max < 0:
                assert batch.offset_states is not None
                throttled_max = max(1, len(batch.offset_states) >> (count - threshold + 1))
            if not state.try_update(
                RecordState.ACQUIRED,
                increase_delivery_count=True,
                max_delivery_count=limit,
                member_id=member_id,
            ):
                continue
            acquired += 1
            if run and (offset != run_first + len(run) or state.delivery_count != run[0].delivery_count):
                self._close_run(member_id, run, run_first, deadline, tokens, result)
                run = []
            if not run:
                run_first = offset
            run.append(state)
            if (limit > 2 and state.delivery_count == limit) or acquired == throttled_max:
                break
        if run:
            self._close_run(member_id, run, run_first, deadline, tokens, result)
        return acquired

    def _close_run(
        self,
        member_id: str,
        run: list[InFlightState],
        run_first: int,
        deadline: int,
        tokens: set[int],
        result: list[AcquiredRecords],
    ) -> None:
        run_last = run_first + len(run) - 1
        token = self._lock(run[0], member_id, run_first, run_last, deadline, tokens)
        for state in run[1:]:
            state.lock_token = token
            state.lock_deadline_ms = deadline
        result.append(AcquiredRecords(run_first, run_last, run[0].delivery_count))

    def _lock(
        self, state: InFlightState, member_id: str, first: int, last: int, deadline: int, tokens: set[int]
    ) -> int:
        """Put ``first..last`` under one acquisition lock expiring at ``deadline``."""
        token = self._next_lock_token
        self._next_lock_token += 1
        state.lock_token = token
        state.lock_deadline_ms = deadline
        tokens.add(token)
        heapq.heappush(self._lock_heap, (deadline, token, member_id, first, last))
        return token

    def _filter_aborted(
        self,
        member_id: str,
        fetched: Sequence[FetchedBatch],
        read_committed: ReadCommitted,
        tokens: set[int],
        acquired: list[AcquiredRecords],
    ) -> list[AcquiredRecords]:
        """Kafka's ``maybeFilterAbortedTransactionalAcquiredRecords``: archive the data batches
        of aborted transactions this acquisition took and leave them out of the answer.

        A producer's transaction counts as aborted from its first offset (the aborted
        transactions list) up to its ABORT marker, a control batch: the marker itself is
        delivered, the consumer skips it as it skips any control record.
        """
        pending = sorted(read_committed.aborted_transactions, key=lambda txn: txn.first_offset)
        next_txn = 0
        aborted_producers: set[int] = set()
        aborted_ranges: list[tuple[int, int]] = []
        for batch in fetched:
            while next_txn < len(pending) and pending[next_txn].first_offset <= batch.last_offset:
                aborted_producers.add(pending[next_txn].producer_id)
                next_txn += 1
            if not batch.is_transactional or batch.producer_id not in aborted_producers:
                continue
            if batch.is_control:
                aborted_producers.discard(batch.producer_id)
            else:
                aborted_ranges.append((batch.base_offset, batch.last_offset))
        if not aborted_ranges:
            return acquired

        def taken_now(state: InFlightState) -> bool:
            return (
                state.state is RecordState.ACQUIRED
                and state.member_id == member_id
                and state.lock_token in tokens
            )

        for first, last in aborted_ranges:
            self._archive(first, last, taken_now)
        self._maybe_update_cached_state_and_offsets()
        return _subtract_ranges(acquired, aborted_ranges)

    def _archive(self, first: int, last: int, should_archive: Callable[[InFlightState], bool]) -> None:
        """Kafka's ``archiveRecords``: archive the records of ``first..last`` that match."""
        for key in self._keys_overlapping(first, last):
            batch = self._batches[key]
            if batch.offset_states is None:
                if not should_archive(batch.state):
                    continue
                if first <= batch.first_offset and batch.last_offset <= last:
                    if not batch.state.state.is_terminal:
                        self._delivery_complete_count += batch.last_offset - batch.first_offset + 1
                    batch.state.archive()
                    continue
                batch.split()
            for offset, state in batch.states_in(first, last):
                if should_archive(state):
                    if offset >= self._start_offset and not state.state.is_terminal:
                        self._delivery_complete_count += 1
                    state.archive()

    def _archive_gaps(self, first: int, last: int) -> None:
        """Record as ARCHIVED the offsets of ``first..last`` that no batch covers: the log has
        no records there, and the start offset must get past them. With nothing cached the
        start offset simply jumps to the next acquired record."""
        if not self._keys:
            return
        expected = max(first, self._start_offset)
        for key in self._keys_overlapping(expected, last):
            if key > expected:
                self._insert_archived(expected, key - 1)
            expected = self._batches[key].last_offset + 1
        if expected <= last:
            self._insert_archived(expected, last)
            self._end_offset = max(self._end_offset, last)
        self._maybe_update_cached_state_and_offsets()

    def _insert_archived(self, first: int, last: int) -> None:
        self._delivery_complete_count += last - first + 1
        bisect.insort(self._keys, first)
        self._batches[first] = InFlightBatch(first, last, InFlightState(RecordState.ARCHIVED, 0))

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """Kafka's ``updateCacheAndOffsets``: the log start offset moved past the start offset
        (retention, DeleteRecords, or a fetch answered OFFSET_OUT_OF_RANGE), so the records
        before it are gone.

        Kafka archives the AVAILABLE records there and leaves ACQUIRED ones until their
        acknowledgement or lock expiry; as acknowledging records before the start offset is
        a no-op either way, they simply leave the cache here. Like Kafka, nothing is
        written: the new start offset goes with the next write.
        """
        if log_start_offset <= self._start_offset:
            return
        self._delivery_complete_count -= self._terminal_records_in(self._start_offset, log_start_offset - 1)
        self._start_offset = log_start_offset
        drop = 0
        for key in self._keys:
            if self._batches[key].last_offset >= log_start_offset:
                break
            del self._batches[key]
            drop += 1
        del self._keys[:drop]
        if not self._keys:
            self._end_offset = log_start_offset
            self._find_next_fetch_offset = False
            self._delivery_complete_count = 0
            return
        first_key = self._keys[0]
        if first_key < log_start_offset:
            batch = self._batches.pop(first_key)
            if batch.offset_states is not None:
                for offset in range(first_key, log_start_offset):
                    del batch.offset_states[offset]
            batch.first_offset = log_start_offset
            self._keys[0] = log_start_offset
            self._batches[log_start_offset] = batch
        self._find_next_fetch_offset = True
        self._maybe_update_cached_state_and_offsets()

    # ---------------------------------------------------------- acknowledging

    def acknowledge(
        self,
        member_id: str,
        batches: Sequence[ShareAcknowledgementBatch],
        *,
        now_ms: int = 0,
        renew: bool = False,
        dlq: bool = False,
    ) -> ShareStateUpdate:
        """Kafka's ``acknowledge``: ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE (ARCHIVED at the
        delivery count limit), REJECT and GAP -> ARCHIVED; with ``dlq`` a REJECT or a RELEASE at
        the limit -> ARCHIVING instead (Kafka's recordStateWithDlq). RENEW (KIP-1222, allowed only with
        ``renew``: a v2 request with IsRenewAck) keeps the records ACQUIRED, delivery count
        unchanged, under a new acquisition lock of ``record_lock_duration_ms`` from ``now_ms``;
        nothing is persisted for it.

        Only ACQUIRED records held by ``member_id`` can be acknowledged. All or nothing: on
        the first invalid batch every change of the request is undone and its error returned
        (INVALID_REQUEST for malformed batches or offsets past the cache, INVALID_RECORD_STATE
        for records not in flight, not acquired, held by another member, or renewed while
        ``share.renew.acknowledge.enable`` is false).
        """
        if self.partition_state is not SharePartitionState.ACTIVE:
            return ShareStateUpdate(ErrorCode.unknown_server_error)
        error = validate_acknowledgement_batches(batches, renew)
        if error is not ErrorCode.none:
            return ShareStateUpdate(error)
        undo: list[tuple[InFlightState, StateSnapshot]] = []
        changed: list[PersisterStateBatch] = []
        renewed: list[tuple[int, int, InFlightState]] = []
        archiving: list[DlqBatch] = []
        for ack in batches:
            if ack.last_offset < self._start_offset:
                # Finished already: the start offset moved past these records.
                continue
            error = self._acknowledge_batch(member_id, ack, undo, changed, renewed, archiving if dlq else None)
            if error is not ErrorCode.none:
                for state, saved in reversed(undo):
                    state.restore(saved)
                return ShareStateUpdate(error)
        if renewed:
            self._renew_locks(member_id, renewed, now_ms + self.config.record_lock_duration_ms)
        return self._complete_update(changed, archiving)

    def _renew_locks(self, member_id: str, renewed: list[tuple[int, int, InFlightState]], deadline: int) -> None:
        """One new acquisition lock for every record a request renewed; their old locks' expiry
        entries go stale (the token no longer matches)."""
        first = min(r[0] for r in renewed)
        last = max(r[1] for r in renewed)
        token = self._lock(renewed[0][2], member_id, first, last, deadline, set())
        for _, _, state in renewed[1:]:
            state.lock_token = token
            state.lock_deadline_ms = deadline

    def _acknowledge_batch(
        self,
        member_id: str,
        ack: ShareAcknowledgementBatch,
        undo: list[tuple[InFlightState, StateSnapshot]],
        changed: list[PersisterStateBatch],
        renewed: list[tuple[int, int, InFlightState]],
        archiving: list[DlqBatch] | None,
    ) -> ErrorCode:
        """``archiving`` (None: the group has no dead-letter queue) collects what goes ARCHIVING."""
        index = bisect.bisect_right(self._keys, ack.first_offset) - 1
        if index < 0:
            if not (ack.first_offset < self._start_offset <= ack.last_offset and self._keys):
                return ErrorCode.invalid_record_state
            # The start offset moved into the acknowledged range: acknowledge from there on.
            index = max(0, bisect.bisect_right(self._keys, self._start_offset) - 1)
        keys = self._keys[index : bisect.bisect_right(self._keys, ack.last_offset)]
        if not keys or self._batches[keys[-1]].last_offset < ack.first_offset:
            return ErrorCode.invalid_request
        if ack.last_offset > self._batches[keys[-1]].last_offset:
            return ErrorCode.invalid_request
        per_offset_types = len(ack.acknowledge_types) > 1
        for key in keys:
            batch = self._batches[key]
            full_match = ack.first_offset <= batch.first_offset and batch.last_offset <= ack.last_offset
            if batch.offset_states is None and full_match and not per_offset_types:
                ack_type = AcknowledgeType(ack.acknowledge_types[0])
                error = self._acknowledge_state(member_id, batch.state, ack_type, undo, archiving is not None)
                if error is not ErrorCode.none:
                    return error
                if ack_type is AcknowledgeType.RENEW:
                    renewed.append((batch.first_offset, batch.last_offset, batch.state))
                    continue
                _note_change(changed, archiving, batch.first_offset, batch.last_offset, batch.state, ack_type)
                continue
            if batch.offset_states is None:
                if batch.state.state is not RecordState.ACQUIRED:
                    return ErrorCode.invalid_record_state
                batch.split()
            for offset, state in batch.states_in(ack.first_offset, ack.last_offset):
                if offset < self._start_offset:
                    continue
                ack_type = AcknowledgeType(ack.type_of(offset))
                error = self._acknowledge_state(member_id, state, ack_type, undo, archiving is not None)
                if error is not ErrorCode.none:
                    return error
                if ack_type is AcknowledgeType.RENEW:
                    renewed.append((offset, offset, state))
                    continue
                _note_change(changed, archiving, offset, offset, state, ack_type)
        return ErrorCode.none

    def _acknowledge_state(
        self,
        member_id: str,
        state: InFlightState,
        ack_type: AcknowledgeType,
        undo: list[tuple[InFlightState, StateSnapshot]],
        dlq: bool,
    ) -> ErrorCode:
        if state.state is not RecordState.ACQUIRED or state.member_id != member_id:
            return ErrorCode.invalid_record_state
        saved = state.snapshot()
        if ack_type is AcknowledgeType.RENEW:
            if not self.config.renew_acknowledge_enable:
                return ErrorCode.invalid_record_state
            undo.append((state, saved))
            return ErrorCode.none
        target = RecordState.ARCHIVING if dlq and ack_type is AcknowledgeType.REJECT else ack_type.record_state
        if not state.try_update(
            target,
            increase_delivery_count=False,
            max_delivery_count=self.config.delivery_count_limit,
            member_id=EMPTY_MEMBER_ID,
            dlq=dlq,
        ):
            return ErrorCode.invalid_record_state
        undo.append((state, saved))
        return ErrorCode.none

    def release_acquired_records(self, member_id: str, *, dlq: bool = False) -> ShareStateUpdate:
        """Kafka's ``releaseAcquiredRecords``, when a member leaves or its share session
        closes: its ACQUIRED records become AVAILABLE (ARCHIVED at the delivery count limit;
        ARCHIVING with ``dlq``).

        Kafka stops at the first offset of a split batch that another member holds, leaving
        the leaver's later offsets in that batch to their lock timeout; here every offset the
        leaver holds is released.
        """
        if self.partition_state is not SharePartitionState.ACTIVE:
            return _NO_UPDATE

        def held(state: InFlightState) -> bool:
            return state.state is RecordState.ACQUIRED and state.member_id == member_id

        return self._complete_update(*self._release_matching(self._keys, None, held, dlq))

    # ------------------------------------------------------ acquisition locks

    def next_lock_deadline_ms(self) -> int | None:
        """When the earliest acquisition lock still held expires (None: no lock held)."""
        heap = self._lock_heap
        while heap:
            _, token, _, first, last = heap[0]
            if self._lock_held(token, first, last):
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def expire_acquisition_locks(self, now_ms: int, *, dlq: bool = False) -> ShareStateUpdate:
        """Kafka's ``AcquisitionLockTimerTask``: every lock that expired at or before ``now_ms``
        returns its records to AVAILABLE (ARCHIVED at the delivery count limit; ARCHIVING with
        ``dlq``)."""
        heap = self._lock_heap
        changed: list[PersisterStateBatch] = []
        archiving: list[DlqBatch] = []
        while heap and heap[0][0] <= now_ms:
            _, token, _, first, last = heapq.heappop(heap)

            def locked_by_token(state: InFlightState, token: int = token) -> bool:
                return state.state is RecordState.ACQUIRED and state.lock_token == token

            released, archived = self._release_matching(self._keys_overlapping(first, last), (first, last), locked_by_token, dlq)
            changed.extend(released)
            archiving.extend(archived)
        return self._complete_update(changed, archiving)

    def _lock_held(self, token: int, first: int, last: int) -> bool:
        for key in self._keys_overlapping(first, last):
            batch = self._batches[key]
            if batch.offset_states is None:
                if batch.state.lock_token == token:
                    return True
                continue
            for _, state in batch.states_in(first, last):
                if state.lock_token == token:
                    return True
        return False

    def _release_matching(
        self,
        keys: Sequence[int],
        bounds: tuple[int, int] | None,
        matches: Callable[[InFlightState], bool],
        dlq: bool,
    ) -> tuple[list[PersisterStateBatch], list[DlqBatch]]:
        """Return the matching ACQUIRED records of ``keys`` (within ``bounds``) to AVAILABLE: the
        changed ranges, and those of them that went ARCHIVING."""
        changed: list[PersisterStateBatch] = []
        archiving: list[DlqBatch] | None = [] if dlq else None
        limit = self.config.delivery_count_limit
        for key in list(keys):
            batch = self._batches[key]
            if batch.offset_states is None:
                state = batch.state
                if matches(state) and state.try_update(
                    RecordState.AVAILABLE,
                    increase_delivery_count=False,
                    max_delivery_count=limit,
                    member_id=EMPTY_MEMBER_ID,
                    dlq=dlq,
                ):
                    _note_change(changed, archiving, batch.first_offset, batch.last_offset, state, AcknowledgeType.RELEASE)
                continue
            first, last = bounds if bounds is not None else (batch.first_offset, batch.last_offset)
            for offset, state in batch.states_in(first, last):
                if matches(state) and state.try_update(
                    RecordState.AVAILABLE,
                    increase_delivery_count=False,
                    max_delivery_count=limit,
                    member_id=EMPTY_MEMBER_ID,
                    dlq=dlq,
                ):
                    _note_change(changed, archiving, offset, offset, state, AcknowledgeType.RELEASE)
        return changed, archiving or []

    # ------------------------------------------------------------ bookkeeping

    def _complete_update(self, changed: list[PersisterStateBatch], archiving: Sequence[DlqBatch] = ()) -> ShareStateUpdate:
        """After a successful change: remember records to redeliver, move the start offset,
        and describe the write for the share coordinator."""
        if not changed:
            return _NO_UPDATE
        for batch in changed:
            # Every change is a record leaving ACQUIRED or ARCHIVING: a terminal one just finished.
            if batch.delivery_state is RecordState.AVAILABLE:
                self._find_next_fetch_offset = True
            elif batch.delivery_state.is_terminal:
                self._delivery_complete_count += batch.last_offset - batch.first_offset + 1
        self._maybe_update_cached_state_and_offsets()
        return ShareStateUpdate(
            ErrorCode.none,
            SharePartitionStateData(
                self._start_offset, self._state_epoch, self.leader_epoch, tuple(_coalesce(changed)),
                self._delivery_complete_count,
            ),
            tuple(_coalesce(archiving)),
        )

    # ------------------------------------------------------- dead-letter queue

    def complete_archiving(self, first_offset: int, last_offset: int) -> ShareStateUpdate:
        """Kafka's initiateDLQAndArchive, once the DLQ write of ``first_offset..last_offset``
        landed or was given up on: its records still ARCHIVING become ARCHIVED (the start offset
        may move past them), to persist. Records the log start offset has since passed are gone
        from the cache: nothing to write for those."""
        if self.partition_state is not SharePartitionState.ACTIVE:
            return _NO_UPDATE
        changed: list[PersisterStateBatch] = []
        for key in self._keys_overlapping(first_offset, last_offset):
            batch = self._batches[key]
            if batch.offset_states is None:
                state = batch.state
                if state.state is not RecordState.ARCHIVING:
                    continue
                if first_offset <= batch.first_offset and batch.last_offset <= last_offset:
                    state.archive()
                    changed.append(PersisterStateBatch(batch.first_offset, batch.last_offset, RecordState.ARCHIVED, state.delivery_count))
                    continue
                batch.split()
            for offset, state in batch.states_in(first_offset, last_offset):
                if state.state is RecordState.ARCHIVING:
                    state.archive()
                    changed.append(PersisterStateBatch(offset, offset, RecordState.ARCHIVED, state.delivery_count))
        return self._complete_update(changed)

    def archiving_batches(self) -> tuple[DlqBatch, ...]:
        """The ARCHIVING ranges of the cache (after ``initialize``: a leader before this one
        persisted them, and their DLQ writes may never have landed). The cause is not persisted:
        at the delivery count limit it was DELIVERY_COUNT_EXCEEDED, else CLIENT_REJECT."""
        found: list[DlqBatch] = []
        limit = self.config.delivery_count_limit
        for key in self._keys:
            batch = self._batches[key]
            if batch.offset_states is None:
                runs: Iterator[tuple[int, int, InFlightState]] = iter(((batch.first_offset, batch.last_offset, batch.state),))
            else:
                runs = ((offset, offset, state) for offset, state in batch.offset_states.items())
            for first, last, state in runs:
                if state.state is RecordState.ARCHIVING:
                    cause = DLQCause.DELIVERY_COUNT_EXCEEDED if state.delivery_count >= limit else DLQCause.CLIENT_REJECT
                    found.append(DlqBatch(first, last, state.delivery_count, cause))
        return tuple(_coalesce(found))

    def _maybe_update_cached_state_and_offsets(self) -> None:
        """Kafka's ``maybeUpdateCachedStateAndOffsets``: move the start offset past the prefix
        of finished (ACKNOWLEDGED or ARCHIVED) records and drop the batches behind it."""
        last_finished = self._last_finished_offset()
        if last_finished < 0:
            return
        last_cached = self._batches[self._keys[-1]].last_offset
        if last_finished == last_cached:
            self._start_offset = self._end_offset = last_cached + 1
            self._keys.clear()
            self._batches.clear()
            self._find_next_fetch_offset = False
            self._delivery_complete_count = 0
            return
        # Every record of the prefix passed is finished, so each was counted.
        self._delivery_complete_count -= last_finished + 1 - self._start_offset
        self._start_offset = last_finished + 1
        drop = 0
        for key in self._keys:
            if self._batches[key].last_offset >= self._start_offset:
                break
            del self._batches[key]
            drop += 1
        del self._keys[:drop]

    def _last_finished_offset(self) -> int:
        """The last offset of the finished prefix from the start offset, -1 if none is."""
        last_finished = -1
        start = expected = self._start_offset
        for key in self._keys:
            batch = self._batches[key]
            if batch.first_offset > expected:
                # Uncovered offsets have not been delivered yet.
                return last_finished
            expected = batch.last_offset + 1
            if batch.offset_states is None:
                if not batch.state.state.is_terminal:
                    return last_finished
                last_finished = batch.last_offset
                continue
            for offset, state in batch.states_in(max(start, batch.first_offset), batch.last_offset):
                if not state.state.is_terminal:
                    return last_finished
                last_finished = offset
        return last_finished

    def _terminal_records_in(self, first: int, last: int) -> int:
        """The ACKNOWLEDGED and ARCHIVED cached records of ``first..last`` (Kafka's
        countTerminalRecordsUpToNewLSO)."""
        count = 0
        for key in self._keys_overlapping(first, last):
            batch = self._batches[key]
            if batch.offset_states is None:
                if batch.state.state.is_terminal:
                    count += min(last, batch.last_offset) - max(first, batch.first_offset) + 1
                continue
            count += sum(1 for _, state in batch.states_in(first, last) if state.state.is_terminal)
        return count

    def _keys_within(self, first: int, last: int) -> list[int]:
        """First offsets of the batches that start within ``first..last`` (Kafka's subMap)."""
        return self._keys[bisect.bisect_left(self._keys, first) : bisect.bisect_right(self._keys, last)]

    def _keys_overlapping(self, first: int, last: int) -> list[int]:
        """First offsets of the batches that hold any offset of ``first..last``."""
        low = bisect.bisect_right(self._keys, first) - 1
        if low < 0 or self._batches[self._keys[low]].last_offset < first:
            low += 1
        return self._keys[low : bisect.bisect_right(self._keys, last)]

    # ------------------------------------------------------------ persisting

    def persisted_state(self) -> SharePartitionStateData:
        """The whole state as the share coordinator would hold it, for ``initialize``.

        ACQUIRED records appear as they were before their acquisition (AVAILABLE, one
        delivery fewer): Kafka never persists an acquisition, so a new leader redelivers them
        without counting the delivery that was in progress.
        """
        batches: list[PersisterStateBatch] = []
        for key in self._keys:
            batch = self._batches[key]
            if batch.offset_states is None:
                state, count = _persisted(batch.state)
                batches.append(PersisterStateBatch(batch.first_offset, batch.last_offset, state, count))
                continue
            for offset, offset_state in batch.states_in(max(self._start_offset, batch.first_offset), batch.last_offset):
                state, count = _persisted(offset_state)
                batches.append(PersisterStateBatch(offset, offset, state, count))
        return SharePartitionStateData(
            self._start_offset, self._state_epoch, self.leader_epoch, tuple(_coalesce(batches)), self._delivery_complete_count
        )


def _is_available(state: InFlightState) -> bool:
    return state.state is RecordState.AVAILABLE


def _note_change(
    changed: list[PersisterStateBatch],
    archiving: list[DlqBatch] | None,
    first: int,
    last: int,
    state: InFlightState,
    ack_type: AcknowledgeType,
) -> None:
    """Record a changed range; one gone ARCHIVING also for its DLQ write, with Kafka's cause: the
    member's REJECT, else (a release at the delivery count limit) DELIVERY_COUNT_EXCEEDED."""
    changed.append(PersisterStateBatch(first, last, state.state, state.delivery_count))
    if archiving is not None and state.state is RecordState.ARCHIVING:
        cause = DLQCause.CLIENT_REJECT if ack_type is AcknowledgeType.REJECT else DLQCause.DELIVERY_COUNT_EXCEEDED
        archiving.append(DlqBatch(first, last, state.delivery_count, cause))


def _persisted(state: InFlightState) -> tuple[RecordState, int]:
    if state.state is RecordState.ACQUIRED:
        return RecordState.AVAILABLE, state.delivery_count - 1
    return state.state, state.delivery_count


def _last_offset_of_batch_holding(fetched: Sequence[FetchedBatch], offset: int) -> int:
    """Kafka's ``lastOffsetFromBatchWithRequestOffset``: acquisition ends on a batch boundary."""
    for batch in fetched:
        if batch.last_offset >= offset:
            return batch.last_offset
    return offset


def _coalesce(batches: Sequence[_Range]) -> list[_Range]:
    """Merge neighbouring ranges alike but for their offsets (state batches, DLQ writes)."""
    merged: list[_Range] = []
    for batch in batches:
        if merged:
            previous = merged[-1]
            if previous.last_offset + 1 == batch.first_offset and dataclasses.replace(previous, first_offset=batch.first_offset, last_offset=batch.last_offset) == batch:
                merged[-1] = dataclasses.replace(previous, last_offset=batch.last_offset)
                continue
        merged.append(batch)
    return merged


def _subtract_ranges(
    acquired: list[AcquiredRecords], removed: list[tuple[int, int]]
) -> list[AcquiredRecords]:
    """``acquired`` without the offsets of ``removed`` (both in offset order)."""
    result: list[AcquiredRecords] = []
    for records in acquired:
        first = records.first_offset
        for removed_first, removed_last in removed:
            if removed_last < first or removed_first > records.last_offset:
                continue
            if removed_first > first:
                result.append(AcquiredRecords(first, removed_first - 1, records.delivery_count))
            first = max(first, removed_last + 1)
        if first <= records.last_offset:
            result.append(AcquiredRecords(first, records.last_offset, records.delivery_count))
    return result


def validate_acknowledgement_batches(batches: Sequence[ShareAcknowledgementBatch], renew: bool = False) -> ErrorCode:
    """The checks Kafka's KafkaApis (validateAcknowledgementBatches) and SharePartition make
    before any state changes: ranges in order without overlap, one type or one per offset,
    known types; RENEW only in a request that says IsRenewAck (``renew``), at v2."""
    previous_last = -1
    for batch in batches:
        if batch.first_offset < 0 or batch.last_offset < batch.first_offset:
            return ErrorCode.invalid_request
        if batch.first_offset <= previous_last:
            return ErrorCode.invalid_request
        previous_last = batch.last_offset
        types = batch.acknowledge_types
        if len(types) != 1 and len(types) != batch.last_offset - batch.first_offset + 1:
            return ErrorCode.invalid_request
        if any(ack_type not in _KNOWN_ACK_TYPES for ack_type in types):
            return ErrorCode.invalid_request
        if not renew and AcknowledgeType.RENEW in types:
            return ErrorCode.invalid_request
    return ErrorCode.none


_KNOWN_ACK_TYPES = frozenset(int(ack_type) for ack_type in AcknowledgeType)
