"""ProducerStateManager: one partition's idempotent and transactional producer state (sans-IO but for snapshots).

Kafka's ProducerStateManager, ProducerStateEntry and ProducerAppendInfo. Per producer id it
keeps the epoch, the last five batches' sequence and offset ranges, the coordinator epoch
and the first offset of its open transaction; per partition the open transactions, whose
smallest first offset is the first unstable offset. Everything is decided from batch
headers: a control batch's one record is the only record ever read.

The state covers the log up to ``map_end_offset``. Snapshots of it are files beside the
segments (storage/producer_state_snapshot.py); after a restart the log replays the batch
headers from the newest usable snapshot to its end.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import structlog

from protocol.control_records import EndTxnMarker, read_marker
from protocol.record_batch import BatchHeader
from storage.errors import StorageError
from storage.producer_state_snapshot import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

log = structlog.get_logger(__name__)

NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (max.in.flight.requests.per.connection)
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


class AppendOrigin(enum.Enum):
    """Who is appending; Kafka relaxes or tightens validation by origin."""

    CLIENT = "client"  # a Produce request: epochs and sequences are checked
    COORDINATOR = "coordinator"  # group/transaction coordinators (may write control batches): epochs only
    RAFT_LEADER = "raft_leader"  # the metadata log leader (batches already carry the epoch)
    REPLICATION = "replication"  # a follower or log recovery: the leader validated, nothing is refused


class OutOfOrderSequenceError(StorageError):
    error_code = 45


class InvalidProducerEpochError(StorageError):
    error_code = 47


class InvalidTxnStateError(StorageError):
    error_code = 48


class TransactionCoordinatorFencedError(StorageError):
    error_code = 52


class VerificationGuard:
    """KIP-890: one verification of one producer's next transaction on a partition.

    Compared by identity: an append carrying a guard is verified only if the partition still
    holds that very guard. A marker written in between drops it, so a coordinator's answer
    that arrives after the transaction ended (the ABA of verify, abort, verify again) cannot
    let a late batch open a transaction nobody will ever end."""

    __slots__ = ()

    def verify(self, other: VerificationGuard) -> bool:
        return other is self and self is not SENTINEL_VERIFICATION_GUARD


# What an append carries when it started no verification: it matches no guard.
SENTINEL_VERIFICATION_GUARD = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    """Kafka's VerificationStateEntry: a producer's pending verification on one partition.

    It also keeps the lowest sequence seen while verifying, so that a higher sequence cannot
    be written while a lower one is still being retried (an OutOfOrderSequence loop)."""

    timestamp: int
    lowest_sequence: int
    epoch: int
    guard: VerificationGuard

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequences wrap from Integer.MAX_VALUE to 0."""
    return sequence + increment if sequence <= INT32_MAX - increment else increment - (INT32_MAX - sequence) - 1


def decrement_sequence(sequence: int, decrement: int) -> int:
    return sequence - decrement if sequence >= decrement else INT32_MAX - (decrement - sequence) + 1


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1  # -1: no open transaction
    # Oldest first; a tuple, so that copying an entry to validate an append copies no batch.
    batches: tuple[BatchMetadata, ...] = ()

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp, self.current_txn_first_offset, self.batches
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int, transactional: bool) -> BatchMetadata | None:
        """Kafka's findDuplicateBatch, but a transactional batch only retries one of the open
        transaction: a producer never retries a batch of a transaction it has ended, so a match
        from before the last marker is a new batch reusing sequences (librdkafka does so after
        purging, on abort_transaction, records it was answered NOT_LEADER_OR_FOLLOWER for while
        the old leader had appended them). Kafka answers it the offsets of the ended
        transaction's batch, and the new transaction commits without its records; refused, it
        fails with OUT_OF_ORDER_SEQUENCE_NUMBER and the producer aborts it and bumps its epoch."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                if transactional and not 0 <= self.current_txn_first_offset <= batch.first_offset:
                    return None
                return batch
        return None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch starts with no batches (its sequences start over)."""
        if epoch != self.producer_epoch:
            self.batches = ()
            self.producer_epoch = epoch

    def end_txn(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = timestamp
        self.current_txn_first_offset = -1


class ProducerAppendInfo:
    """Validates one producer's batches of one append against its state, building the updated entry."""

    __slots__ = ("_current", "_request_guard", "_tp", "_verification", "origin", "producer_id", "started_txns", "updated", "verified_or_ended")

    def __init__(
        self,
        topic_partition: str,
        current: ProducerStateEntry,
        origin: AppendOrigin,
        verification: VerificationStateEntry | None = None,
        request_guard: VerificationGuard | None = None,
    ) -> None:
        self._tp = topic_partition
        self.producer_id = current.producer_id
        self._current = current
        self.origin = origin
        self.updated = current.copy()
        # First offsets of the transactions this append began: a follower's append may hold
        # several of one producer's transactions, each closed by its marker but the last.
        self.started_txns: list[int] = []
        self._verification = verification
        # None: the appender does not verify transactions (verification off, or a follower).
        self._request_guard = request_guard
        # A transactional batch or a marker was appended: the verification state has served.
        self.verified_or_ended = False

    def _check_verified(self, first_seq: int, offset: int) -> None:
        """KIP-890: a transaction's first batch needs the guard its verification created."""
        if self.origin not in (AppendOrigin.CLIENT, AppendOrigin.COORDINATOR) or self._request_guard is None:
            return
        entry = self._verification
        if entry is None or not entry.guard.verify(self._request_guard):
            raise InvalidTxnStateError(f"record from producer {self.producer_id} at offset {offset} in {self._tp} was not part of an ongoing transaction")
        if first_seq > entry.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset {offset} in {self._tp}: "
                f"{first_seq} (incoming seq. number), {entry.lowest_sequence} (earliest seen sequence)"
            )

    def _check_epoch(self, epoch: int, offset: int) -> None:
        current = self.updated.producer_epoch
        if epoch < current:
            message = f"epoch of producer {self.producer_id} at offset {offset} in {self._tp} is {epoch}, which is smaller than the last seen epoch {current}"
            if self.origin is AppendOrigin.REPLICATION:
                log.warning("producer_state.stale_epoch_replicated", message=message)
            else:
                # Since Kafka 2.7 a produce answers INVALID_PRODUCER_EPOCH here, not PRODUCER_FENCED:
                # the producer can abort its transaction and go on.
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated = self.updated
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in {self._tp}: "
                    f"{epoch} (request epoch), {first_seq} (seq. number), {updated.producer_epoch} (current producer epoch)"
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif epoch == self._current.producer_epoch:
            last_seq = self._current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No known epoch: the producer's state expired or its batches were deleted; Kafka then
        # accepts any sequence rather than answering UNKNOWN_PRODUCER_ID (KIP-360).
        if self._current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset {offset} in {self._tp}: "
                f"{first_seq} (incoming seq. number), {last_seq} (current end sequence number)"
            )

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, timestamp: int, first_offset: int, last_offset: int, transactional: bool) -> None:
        updated = self.updated
        origin = self.origin
        # Transaction version 2 bumps the epoch at every end: a batch of a newer epoch than the
        # open transaction's starts the next one, whose marker may not be here yet.
        joins_open_txn = updated.current_txn_first_offset >= 0 and epoch == updated.producer_epoch
        # The produce path: each check is called only when its cheap test fails.
        if epoch < updated.producer_epoch:
            self._check_epoch(epoch, first_offset)
        if origin is AppendOrigin.CLIENT and not (epoch == updated.producer_epoch and updated.batches and first_seq == updated.batches[-1].last_seq + 1):
            self._check_sequence(epoch, first_seq, first_offset)
        updated.maybe_update_epoch(epoch)
        batch = BatchMetadata(last_seq, last_offset, last_offset - first_offset, timestamp)
        kept = updated.batches
        updated.batches = (kept if len(kept) < NUM_BATCHES_TO_RETAIN else kept[1:]) + (batch,)
        updated.last_timestamp = timestamp
        if updated.current_txn_first_offset >= 0 and not transactional:
            raise InvalidTxnStateError(f"expected a transactional write from producer {self.producer_id} at offset {first_offset} in {self._tp}")
        if transactional and not joins_open_txn:
            self._check_verified(first_seq, first_offset)
        if updated.current_txn_first_offset < 0 and transactional:
            updated.current_txn_first_offset = first_offset
            self.started_txns.append(first_offset)
        if transactional:
            self.verified_or_ended = True

    def append(self, header: BatchHeader, batch: Callable[[], bytes | memoryview], base_offset: int) -> CompletedTxn | None:
        """Validate one batch (assigned ``base_offset``) against the producer's state; ``batch``
        gives its bytes, read only for a control batch's marker."""
        if header.is_control:
            marker = read_marker(batch(), header)
            if marker is None:
                return None
            return self.append_end_txn_marker(marker, header.producer_epoch, base_offset, header.max_timestamp)
        last_offset = base_offset + header.last_offset_delta
        last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
        self.append_data_batch(header.producer_epoch, header.base_sequence, last_seq, header.max_timestamp, base_offset, last_offset, header.is_transactional)
        return None

    def append_end_txn_marker(self, marker: EndTxnMarker, epoch: int, offset: int, timestamp: int) -> CompletedTxn | None:
        """Complete the producer's transaction; None when it had none open (nothing to index)."""
        self._check_epoch(epoch, offset)
        updated = self.updated
        if updated.coordinator_epoch > marker.coordinator_epoch:
            message = f"invalid coordinator epoch for producer {self.producer_id} at offset {offset} in {self._tp}: {marker.coordinator_epoch} (zombie), {updated.coordinator_epoch} (current)"
            if self.origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            log.info("producer_state.stale_coordinator_epoch_replicated", message=message)
        completed = None
        if updated.current_txn_first_offset >= 0:
            completed = CompletedTxn(self.producer_id, updated.current_txn_first_offset, offset, not marker.commit)
        updated.end_txn(epoch, marker.coordinator_epoch, timestamp)
        self.verified_or_ended = True
        return completed


TRANSACTION_VERSION_2 = 2
MAX_PRODUCER_EPOCH = 32767


def check_tv2_marker_epoch(topic_partition: str, producer_id: int, current: ProducerStateEntry | None, epoch: int) -> None:
    """KIP-1228 (WriteTxnMarkers v2): a transaction-version-2 marker carries the epoch its end
    bumped to, so it must be above the producer's epoch on the partition, not merely equal (an
    equal one is a late marker of the transaction before). As Kafka's checkProducerEpoch, an
    equal epoch passes when the producer has no open transaction here (a retried marker) or the
    epoch can bump no further. Markers of older versions keep the log's own check (not below)."""
    last = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
    if epoch > last:
        return
    if epoch == last and (current is None or current.current_txn_first_offset < 0 or epoch == MAX_PRODUCER_EPOCH):
        return
    raise InvalidProducerEpochError(f"epoch of producer {producer_id} in {topic_partition} is {epoch}, which is <= the last seen epoch {last} (TV2)")


class ProducerStateManager:
    def __init__(self, topic_partition: str, directory: Path, *, created: bool = False, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self._tp = topic_partition
        self.dir = directory
        # producer.id.expiration.ms as the log was opened: a snapshot's producers idle longer are not loaded.
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Open transactions: first offset -> producer id.
        self._ongoing: dict[int, int] = {}
        # Transactions whose marker the high watermark has not passed yet: first offset -> marker
        # offset. They stay unstable, so read_committed consumers never see an outcome a new
        # leader may not have (Kafka's unreplicatedTxns).
        self._unreplicated: dict[int, int] = {}
        # KIP-890: producers whose next transaction is being verified with its coordinator.
        self._verifications: dict[int, VerificationStateEntry] = {}
        self._first_unstable: int | None = None
        self.map_end_offset = 0  # the state covers the log below this offset
        self._snapshots = [] if created else list_snapshots(directory)
        # Where the state was last written or loaded: a snapshot there would add nothing.
        self._last_snapshot_offset = 0
        self._log = log.bind(topic_partition=topic_partition)

    # -- reading ------------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open or whose marker is not yet
        replicated; None when there is none."""
        return self._first_unstable

    def active_producers(self) -> list[ProducerStateEntry]:
        return list(self.producers.values())

    # -- appending ----------------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin, request_guard: VerificationGuard | None = None) -> ProducerAppendInfo:
        current = self.producers.get(producer_id)
        return ProducerAppendInfo(
            self._tp,
            current if current is not None else ProducerStateEntry(producer_id),
            origin,
            self._verifications.get(producer_id),
            request_guard,
        )

    def analyze_batch(
        self,
        header: BatchHeader,
        batch: Callable[[], bytes | memoryview],
        base_offset: int,
        origin: AppendOrigin,
        producers: dict[int, ProducerAppendInfo],
        completed: list[CompletedTxn],
        verification_guard: VerificationGuard | None = None,
    ) -> BatchMetadata | None:
        """Kafka's analyzeAndValidateProducerState for one batch of an append, about to get
        ``base_offset``: validated into ``producers`` (one ProducerAppendInfo per producer of the
        append, for ``update`` once the append is written) and ``completed`` (the transactions its
        markers end). ``batch`` gives its bytes, read only for a control batch's marker.

        A client's retry of one of the producer's last five batches (of its open transaction, for a
        transactional batch) returns where that batch went, and nothing is to be appended. Raises
        the producer state errors (sequence gap, stale epoch, ...) that refuse the whole append,
        and ValueError for a control batch that holds no valid marker."""
        producer_id = header.producer_id
        if origin is AppendOrigin.CLIENT:
            last = self.producers.get(producer_id)
            # The next batch in sequence cannot be a retry: only the others are looked up.
            if last is not None and last.batches and header.base_sequence != last.batches[-1].last_seq + 1:
                last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
                duplicate = last.find_duplicate(header.producer_epoch, header.base_sequence, last_seq, header.is_transactional)
                if duplicate is not None:
                    return duplicate
        info = producers.get(producer_id)
        if info is None:
            info = producers[producer_id] = self.prepare_update(producer_id, origin, verification_guard)
        txn = info.append(header, batch, base_offset)
        if txn is not None:
            completed.append(txn)
        return None

    def update(self, info: ProducerAppendInfo) -> None:
        self.producers[info.producer_id] = info.updated
        if info.verified_or_ended:
            self._verifications.pop(info.producer_id, None)
        for first_offset in info.started_txns:
            self._ongoing[first_offset] = info.producer_id
            if self._first_unstable is None or first_offset < self._first_unstable:
                self._first_unstable = first_offset

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        """Is the producer's transaction at ``epoch`` open here? (One at an older epoch is a
        transaction version 2 producer's previous one, still waiting for its marker.)"""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == epoch

    def maybe_create_verification_state_entry(self, producer_id: int, sequence: int, epoch: int, now_ms: int) -> VerificationStateEntry:
        """The producer's pending verification, created on its first unverified batch."""
        entry = self._verifications.get(producer_id)
        if entry is None:
            entry = self._verifications[producer_id] = VerificationStateEntry(now_ms, sequence, epoch, VerificationGuard())
        else:
            entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def verification_state_entry(self, producer_id: int) -> VerificationStateEntry | None:
        return self._verifications.get(producer_id)

    def complete_txn(self, txn: CompletedTxn) -> int:
        """Close ``txn``; returns the last stable offset right after it (for its txn index entry)."""
        if self._ongoing.pop(txn.first_offset, None) is None:
            raise ValueError(f"attempted to complete transaction {txn} on {self._tp}, which was not started")
        self._unreplicated[txn.first_offset] = txn.last_offset
        self._update_first_unstable()
        return min(self._ongoing) if self._ongoing else txn.last_offset + 1

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is below ``high_watermark`` are stable now."""
        if self._unreplicated:
            self._unreplicated = {first: last for first, last in self._unreplicated.items() if last >= high_watermark}
            self._update_first_unstable()

    def _update_first_unstable(self) -> None:
        firsts = [min(pending) for pending in (self._ongoing, self._unreplicated) if pending]
        self._first_unstable = min(firsts) if firsts else None

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms with no open transaction; returns how many."""
        expired = [
            pid for pid, entry in self.producers.items() if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        # Verifications nobody appended after (the producer went away) expire the same way.
        for pid in [pid for pid, v in self._verifications.items() if now_ms - v.timestamp >= expiration_ms]:
            del self._verifications[pid]
        if expired:
            self._log.info("producer_state.expired", producers=len(expired))
        return len(expired)

    # -- snapshots, truncation and reload -----------------------------------------------------------

    def take_snapshot(self, sync: bool = False) -> None:
        """Write the state at ``map_end_offset`` unless a snapshot there exists already."""
        offset = self.map_end_offset
        if offset <= self._last_snapshot_offset:
            return
        entries: list[SnapshotEntry] = [
            (e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_timestamp, list(e.batches))
            for e in self.producers.values()
        ]
        write_snapshot(self.dir, offset, entries, sync)
        self._snapshots.append(offset)
        self._last_snapshot_offset = offset

    def delete_snapshots_before(self, offset: int) -> None:
        self._delete_snapshots([s for s in self._snapshots if s < offset])

    def _delete_snapshots(self, offsets: Iterable[int]) -> None:
        doomed = set(offsets)
        for offset in doomed:
            snapshot_path(self.dir, offset).unlink(missing_ok=True)
        self._snapshots = [s for s in self._snapshots if s not in doomed]

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Drop snapshots outside [log start, log end], load the newest usable one.

        The caller then replays the log from ``map_end_offset`` to its end.
        """
        self._delete_snapshots(s for s in self._snapshots if s > log_end_offset)
        self._clear()
        self.map_end_offset = self._last_snapshot_offset = log_start_offset
        while self._snapshots:
            offset = self._snapshots[-1]
            if offset < log_start_offset:
                break
            try:
                entries = read_snapshot(self.dir, offset)
            except (OSError, CorruptSnapshotError) as e:
                self._log.warning("producer_state.snapshot_unreadable", file=snapshot_path(self.dir, offset).name, error=str(e))
                self._delete_snapshots([offset])
                continue
            self._load_entries(entries)
            self.map_end_offset = self._last_snapshot_offset = offset
            break

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._delete_snapshots(list(self._snapshots))
        self._clear()
        self.map_end_offset = self._last_snapshot_offset = offset

    def _clear(self) -> None:
        self.producers.clear()
        self._verifications.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._first_unstable = None

    def _load_entries(self, entries: list[SnapshotEntry]) -> None:
        for producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches in entries:
            kept = tuple(BatchMetadata(*b) for b in batches)[-NUM_BATCHES_TO_RETAIN:]
            entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch, last_timestamp, txn_first_offset, kept)
            self.producers[producer_id] = entry
            if txn_first_offset >= 0:
                self._ongoing[txn_first_offset] = producer_id
        self._first_unstable = min(self._ongoing) if self._ongoing else None


__all__ = [
    "SNAPSHOT_SUFFIX",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SENTINEL_VERIFICATION_GUARD",
    "TransactionCoordinatorFencedError",
    "VerificationGuard",
    "VerificationStateEntry",
    "check_tv2_marker_epoch",
]
