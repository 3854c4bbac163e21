"""TransactionMetadata: one transactional id's state machine, sans-IO (Kafka's TransactionMetadata).

A change is prepared first (``prepare_*`` returns a TxnTransitMetadata and sets the pending
state), written to ``__transaction_state``, and applied to memory only once that write
succeeded (``complete_transition_to``); a failed write drops the pending state. While a
transition is pending every other change is refused, which is what the coordinator answers
CONCURRENT_TRANSACTIONS with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 0x7FFF
# transaction.version levels: 0 (and 1) keep one epoch for the producer's life; 2 (KIP-890
# part 2) bumps it at the end of every transaction.
TV_0 = 0
TV_2 = 2
TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """The ids are the TransactionStatus byte of TransactionLogValue."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's stateName)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Kafka 4.4: under transaction version 2 an abort with no transaction open is an empty one's.
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States a transactional id may expire in (transactional.id.expiration.ms).
EXPIRABLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransitionError(Exception):
    """A transition Kafka's coordinator treats as a bug (IllegalStateException)."""


class ProducerFenced(Exception):
    """The request's epoch is older than the transactional id's."""


def is_epoch_exhausted(epoch: int) -> bool:
    # The last epoch is kept for fencing the producer that holds the one before.
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """What a prepared transition writes to the log and, once written, becomes."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = TV_0
    next_producer_id: int = NO_PRODUCER_ID


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # A fence whose PrepareAbort was not written: its bumped epoch was never told to anyone, so
    # the next fence reuses it rather than bumping again (Kafka's hasFailedEpochFence).
    has_failed_epoch_fence: bool = False
    # The transaction version of the client's last EndTxn: under 2 every end bumped the epoch,
    # which is what tells a retried EndTxn (the epoch before) from a stale producer.
    client_transaction_version: int = TV_0
    # Transaction version 2: the producer id a transaction that exhausted the epoch hands its
    # producer on to once its markers are written.
    next_producer_id: int = NO_PRODUCER_ID

    # -- preparing ---------------------------------------------------------------------------------

    def _prepare(self, state: TransactionState, **changes: object) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: preparing {state.display_name} while {self.pending_state.display_name} is pending")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.display_name} -> {state.display_name} is not a valid transition")
        transit = dataclasses.replace(self._snapshot(state), **changes)  # type: ignore[arg-type]
        if transit.producer_id < 0 or transit.producer_epoch < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: negative producer id or epoch in {transit}")
        self.pending_state = state
        return transit

    def _snapshot(self, state: TransactionState) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            producer_id=self.producer_id,
            last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms,
            txn_state=state,
            topic_partitions=frozenset(self.topic_partitions),
            txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp,
            client_transaction_version=self.client_transaction_version,
            next_producer_id=self.next_producer_id,
        )

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TxnTransitMetadata:
        """InitProducerId: the next epoch (KIP-360: a producer naming its current epoch may resume).

        Raises ProducerFenced when the producer names an epoch that has been superseded."""
        if is_epoch_exhausted(self.producer_epoch):
            raise IllegalTransitionError(f"{self.transactional_id}: cannot bump an exhausted epoch {self.producer_epoch}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: answer the same epoch again.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(f"{self.transactional_id}: epoch {expected_epoch} is fenced by {self.producer_epoch}")
        return self._prepare(
            S.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(self, producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool) -> TxnTransitMetadata:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        return self._prepare(
            S.EMPTY,
            producer_id=producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch of an ongoing transaction so its markers fence the producer that holds it.

        Never written: the abort that follows writes PrepareAbort with the bumped epoch."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH)

    def apply_epoch_fence(self, fenced: TxnTransitMetadata) -> None:
        """Take the fencing epoch in memory and clear the pending fence, so PrepareAbort can follow."""
        if self.pending_state is not S.PREPARE_EPOCH_FENCE:
            raise IllegalTransitionError(f"{self.transactional_id}: no epoch fence is pending")
        self.pending_state = None
        self.producer_epoch = fenced.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH

    def prepare_add_partitions(self, partitions: set[TopicPartition], now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.txn_start_timestamp
        return self._prepare(
            S.ONGOING, topic_partitions=frozenset(self.topic_partitions | partitions), txn_start_timestamp=start, txn_last_update_timestamp=now_ms
        )

    def prepare_abort_or_commit(
        self,
        state: TransactionState,
        now_ms: int,
        client_transaction_version: int | None = None,
        next_producer_id: int = NO_PRODUCER_ID,
        no_partition_added: bool = False,
    ) -> TxnTransitMetadata:
        """EndTxn (or an abort by the coordinator, ``client_transaction_version`` None: the
        id's version is kept). A transaction version 2 client's end bumps the epoch, so that
        the markers fence every batch of the transaction that ended; from an exhausted epoch
        to the last one, and the producer goes on as ``next_producer_id`` at epoch 0.
        ``no_partition_added``: the abort of a transaction that was never opened, which starts now."""
        start = now_ms if no_partition_added else self.txn_start_timestamp
        if client_transaction_version is None or client_transaction_version < TV_2:
            return self._prepare(
                state,
                txn_start_timestamp=start,
                txn_last_update_timestamp=now_ms,
                client_transaction_version=self.client_transaction_version if client_transaction_version is None else client_transaction_version,
            )
        if is_epoch_exhausted(self.producer_epoch) and next_producer_id == NO_PRODUCER_ID:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot bump an exhausted epoch {self.producer_epoch} without a new producer id")
        if self.producer_epoch < SHORT_MAX:
            epoch = self.producer_epoch + 1
        elif state is S.PREPARE_ABORT:
            # Only a fence reaches the last epoch; Kafka 4.4 aborts at it without a bump (and
            # logs a bug), the producer moving on to the next id once the markers are in.
            epoch = self.producer_epoch
        else:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot bump the last epoch {self.producer_epoch}")
        return self._prepare(
            state,
            producer_epoch=epoch,
            last_producer_epoch=self.producer_epoch,
            txn_start_timestamp=start,
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_transaction_version,
            next_producer_id=next_producer_id if is_epoch_exhausted(self.producer_epoch) else NO_PRODUCER_ID,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        # The Prepare state is written, so a fence that failed before is behind us.
        self.has_failed_epoch_fence = False
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if self.next_producer_id != NO_PRODUCER_ID:
            # The markers carry the last epoch of the old id: the producer moves to the new one.
            return self._prepare(
                state,
                producer_id=self.next_producer_id,
                last_producer_id=self.producer_id,
                producer_epoch=0,
                last_producer_epoch=self.producer_epoch,
                next_producer_id=NO_PRODUCER_ID,
                topic_partitions=frozenset(),
                txn_last_update_timestamp=now_ms,
            )
        return self._prepare(state, topic_partitions=frozenset(), txn_last_update_timestamp=now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, topic_partitions=frozenset())

    # -- completing --------------------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply a transition whose record was written; checks that it is the one prepared."""
        to = self.pending_state
        if to is None:
            raise IllegalTransitionError(f"{self.transactional_id}: completing a transition with none pending")
        if to is not transit.txn_state:
            self._failure(transit)
        same_producer = transit.producer_id == self.producer_id and transit.producer_epoch == self.producer_epoch
        if to is S.EMPTY:
            bumped = transit.producer_epoch == self.producer_epoch + 1 or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id)
            if (transit.producer_epoch != self.producer_epoch and not bumped) or self.topic_partitions or transit.txn_start_timestamp != -1:
                self._failure(transit)
        elif to is S.ONGOING:
            if not same_producer or not self.topic_partitions <= transit.topic_partitions or self.txn_timeout_ms != transit.txn_timeout_ms:
                self._failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions = set(transit.topic_partitions)
        elif to in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            version_2 = transit.client_transaction_version >= TV_2
            # Transaction version 2 bumped the epoch: the written epoch is the next one.
            epoch_bumped = transit.producer_id == self.producer_id and transit.last_producer_epoch == self.producer_epoch == transit.producer_epoch - 1
            # Its abort with no transaction open starts the empty transaction it aborts.
            started = to is S.PREPARE_ABORT and version_2 and self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            if (
                not (same_producer or (epoch_bumped and version_2))
                or self.topic_partitions != transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or (self.txn_start_timestamp != transit.txn_start_timestamp and not started)
            ):
                self._failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
        elif to in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            rotated = self.next_producer_id != NO_PRODUCER_ID and transit.producer_id == self.next_producer_id and transit.producer_epoch == 0
            if not (same_producer or rotated) or self.txn_timeout_ms != transit.txn_timeout_ms or transit.txn_start_timestamp == -1:
                self._failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions = set()
        else:
            # PrepareEpochFence is never written; Dead removes the id instead of completing.
            self._failure(transit)
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.next_producer_id = transit.next_producer_id
        self.pending_state = None
        self.state = to

    def _failure(self, transit: TxnTransitMetadata) -> None:
        raise IllegalTransitionError(f"{self.transactional_id}: cannot complete {self.pending_state} from {self.state.display_name} with {transit}")

    def abort_pending(self) -> None:
        """The write of a prepared transition failed: memory stays as it was."""
        self.pending_state = None

    # -- questions ---------------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def is_valid_producer_id(self, producer_id: int, epoch: int) -> bool:
        """KIP-360: may a producer naming (producer_id, epoch) re-initialise this transactional id?"""
        return (
            self.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == self.producer_id
            or (producer_id == self.last_producer_id and is_epoch_exhausted(epoch))
        )
