"""TransactionCoordinator: Kafka's transaction coordinator for the ids this node coordinates.

Each operation validates the request against the id's TransactionMetadata, prepares a
transition, writes it to ``__transaction_state`` and applies it once replicated: an operation
returns its error code (``Written``), or a future of it while the log's followers have yet to
copy the record; a one-replica log settles at once. Ending a transaction writes
PrepareCommit/PrepareAbort, then has the TransactionMarkerChannelManager write a marker to every
partition in it, then CompleteCommit/CompleteAbort. EndTxn answers once the Prepare state is
replicated, as Kafka's does; the markers of partitions this node leads are written before that
answer, so a transaction on one node is complete by then, and the others follow in the
background. A transaction whose markers could not all be written stays in its
Prepare state; the periodic job (and a new coordinator, which reloads Prepare states) asks for
them again. The rules and error codes follow Kafka 4.4: transaction version 1, and version 2
(KIP-890 part 2) for clients that end their transactions with EndTxn v5.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.group_coordinator import CoordinatorNotAvailable, Written, now_ms
from broker.producer_id_manager import ProducerIdsUnavailableError
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager, TxnMarkerEntry
from broker.transaction.transaction_metadata import (
    EXPIRABLE_STATES,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TV_0,
    TV_2,
    IllegalTransitionError,
    ProducerFenced,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from broker.transaction.transaction_state_manager import Settled, TransactionStateManager, TxnStatePartition, settled, then

log = structlog.get_logger(__name__)

S = TransactionState
TopicPartition = tuple[str, int]


class ProducerIdGenerator(Protocol):
    async def generate_producer_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _retry_after_producer_id_rotation(metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's retryOnOverflow: an EndTxn retried after the exhausted epoch moved the producer to
    a new id names the old id and the last epoch it could use."""
    return (
        metadata.client_transaction_version >= TV_2
        and metadata.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        and metadata.last_producer_id == producer_id != metadata.producer_id
        and producer_epoch == SHORT_MAX - 1
        and metadata.producer_epoch == 0
    )


class _NeedProducerId(Exception):
    """The transition needs a fresh producer id, which is only had by awaiting the allocator."""


class TransactionCoordinator:
    def __init__(
        self,
        state: TransactionStateManager,
        producer_ids: ProducerIdGenerator,
        markers: TransactionMarkerChannelManager,
        *,
        max_timeout_ms: int,
        transactional_id_expiration_ms: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.state = state
        self._clock = clock
        self._producer_ids = producer_ids
        self._markers = markers
        self._max_timeout_ms = max_timeout_ms
        self._expiration_ms = transactional_id_expiration_ms
        state.on_loaded = self._resume_completions
        state.on_unloaded = markers.remove_markers_for_txn_topic_partition

    # -- InitProducerId ------------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None, enable_2pc: bool = False, keep_prepared_txn: bool = False
    ) -> InitProducerIdResult:
        """``expected``: the (producer id, epoch) a KIP-360 client resumes with, None for a new producer.
        ``enable_2pc`` and ``keep_prepared_txn``: InitProducerId v6's KIP-939 flags, both refused."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        # Kafka 4.4's checks, in its order and before the transaction's partition is looked at (a
        # broker that is not the coordinator answers the same). kbroker has no two-phase commit, so
        # it is as Kafka with transaction.two.phase.commit.enable=false, the only value kbroker
        # takes (broker/unimplemented_configs.py): Enable2Pc is refused as not authorized.
        if enable_2pc:
            return InitProducerIdResult(ErrorCode.transactional_id_authorization_failed)
        # Kafka 4.4 refuses KeepPreparedTxn whatever its 2PC config: the open transaction is left
        # as it is, neither kept nor aborted.
        if keep_prepared_txn:
            return InitProducerIdResult(ErrorCode.unsupported_version)
        if not 0 < txn_timeout_ms <= self._max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        new_producer_id: int | None = None
        for _ in range(3):
            try:
                return await settled(self._init_producer_id(transactional_id, txn_timeout_ms, expected, new_producer_id))
            except _NeedProducerId:
                try:
                    new_producer_id = await self._producer_ids.generate_producer_id()
                except ProducerIdsUnavailableError as e:
                    return InitProducerIdResult(e.error_code)
        return InitProducerIdResult(ErrorCode.concurrent_transactions)

    def _init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None, new_producer_id: int | None
    ) -> Settled[InitProducerIdResult]:
        try:
            loaded = self.state.partition_of(transactional_id)
        except CoordinatorNotAvailable as e:
            return InitProducerIdResult(e.error_code)
        now = self._clock()
        metadata = loaded.metadata.get(transactional_id)
        if metadata is None:
            if new_producer_id is None:
                raise _NeedProducerId
            metadata = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=new_producer_id,
                last_producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
                last_producer_epoch=NO_PRODUCER_EPOCH,
                txn_timeout_ms=txn_timeout_ms,
                state=S.EMPTY,
                txn_last_update_timestamp=now,
            )
            loaded.metadata[transactional_id] = metadata
            new_producer_id = None
        if metadata.pending_transition_in_progress:
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if expected is not None and not metadata.is_valid_producer_id(*expected):
            return InitProducerIdResult(ErrorCode.producer_fenced)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # The previous transaction is still being completed: the client retries.
            self._complete_transaction(loaded, metadata)
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING:
            # Abort the open transaction under a bumped epoch that fences its producer; the client
            # retries, and its retry bumps the epoch again.
            return then(self._fence_and_abort(loaded, metadata), lambda error: InitProducerIdResult(error or ErrorCode.concurrent_transactions))
        if metadata.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        try:
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                if new_producer_id is None:
                    raise _NeedProducerId
                transit = metadata.prepare_producer_id_rotation(new_producer_id, txn_timeout_ms, now, expected is not None)
            else:
                transit = metadata.prepare_increment_producer_epoch(txn_timeout_ms, None if expected is None else expected[1], now)
        except (ProducerFenced, IllegalTransitionError):
            # IllegalTransitionError: an exhausted epoch named by a producer that does not hold it.
            return InitProducerIdResult(ErrorCode.producer_fenced)

        def answer(error: int) -> InitProducerIdResult:
            if error:
                return InitProducerIdResult(error)
            # The written transition, not the metadata: another request may have moved it on since.
            log.info("txn.init_producer_id", transactional_id=transactional_id, producer_id=transit.producer_id, epoch=transit.producer_epoch)
            return InitProducerIdResult(0, transit.producer_id, transit.producer_epoch)

        return then(self.state.append_transaction(metadata, transit), answer)

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------

    def _validate_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[int, TxnStatePartition | None, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None, None
        try:
            loaded = self.state.partition_of(transactional_id)
        except CoordinatorNotAvailable as e:
            return e.error_code, None, None
        metadata = loaded.metadata.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, loaded, metadata
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, loaded, metadata
        return 0, loaded, metadata

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> Written:
        wanted = set(partitions)
        error, _, metadata = self._validate_producer(transactional_id, producer_id, producer_epoch)
        if error:
            return error
        assert metadata is not None
        if metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if metadata.state is S.ONGOING and wanted <= metadata.topic_partitions:
            return 0
        try:
            transit = metadata.prepare_add_partitions(wanted, self._clock())
        except IllegalTransitionError:
            log.warning("txn.add_partitions_invalid_state", transactional_id=transactional_id, state=metadata.state.display_name)
            return ErrorCode.invalid_txn_state
        return self.state.append_transaction(metadata, transit)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): is each partition in the ongoing
        transaction? A pending transition is not looked at: the partition leader's append is
        checked once more against its own state. A partition not in it is TRANSACTION_ABORTABLE,
        which the asking leader turns into INVALID_TXN_STATE for clients that predate it."""
        wanted = list(partitions)
        error, _, metadata = self._validate_producer(transactional_id, producer_id, producer_epoch)
        if not error and metadata is not None and metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            error = ErrorCode.concurrent_transactions
        if error:
            return {tp: error for tp in wanted}
        assert metadata is not None
        return {tp: 0 if tp in metadata.topic_partitions else ErrorCode.transaction_abortable for tp in wanted}

    # -- EndTxn --------------------------------------------------------------------------------------

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, client_transaction_version: int = TV_0
    ) -> Settled[EndTxnResult]:
        """EndTxn. Under transaction version 2 (EndTxn v5) the end bumps the epoch, and the answer
        carries the producer id and epoch the client goes on with: a new id at epoch 0 once the
        epoch is exhausted, which needs the id allocator and so answers later."""
        try:
            return self._end(transactional_id, producer_id, producer_epoch, commit, client_transaction_version, NO_PRODUCER_ID)
        except _NeedProducerId:
            return asyncio.ensure_future(self._end_with_new_producer_id(transactional_id, producer_id, producer_epoch, commit, client_transaction_version))

    async def _end_with_new_producer_id(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, client_transaction_version: int) -> EndTxnResult:
        try:
            next_producer_id = await self._producer_ids.generate_producer_id()
        except ProducerIdsUnavailableError as e:
            return EndTxnResult(e.error_code)
        # Checked again: the transaction may have moved on while the id was being allocated.
        return await settled(self._end(transactional_id, producer_id, producer_epoch, commit, client_transaction_version, next_producer_id))

    def _end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, client_transaction_version: int, next_producer_id: int
    ) -> Settled[EndTxnResult]:
        if not transactional_id:
            return EndTxnResult(ErrorCode.invalid_request)
        try:
            loaded = self.state.partition_of(transactional_id)
        except CoordinatorNotAvailable as e:
            return EndTxnResult(e.error_code)
        metadata = loaded.metadata.get(transactional_id)
        if metadata is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if client_transaction_version >= TV_2:
            return self._end_version_2(loaded, metadata, producer_id, producer_epoch, commit, client_transaction_version, next_producer_id)
        if metadata.producer_id != producer_id:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        # Version 1 clients never bump the epoch themselves: strict equality.
        if metadata.producer_epoch != producer_epoch:
            return EndTxnResult(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        return then(self._end_transaction(loaded, metadata, commit, client_transaction_version), partial(_end_answer, metadata))

    def _end_version_2(
        self,
        loaded: TxnStatePartition,
        metadata: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int,
        next_producer_id: int,
    ) -> Settled[EndTxnResult]:
        """Kafka 4.4's EndTxn under transaction version 2, where the same epoch in a Complete state
        is the next transaction's and a retry names the epoch before the bump. With no transaction
        open (Empty, CompleteCommit, CompleteAbort) an abort at the current epoch is an empty
        transaction's: the epoch is bumped and PrepareAbort and CompleteAbort written without a
        partition; a commit is INVALID_TXN_STATE, and so is a retry of the other outcome."""
        state = metadata.state
        # Kafka holds the Complete transition pending from the Prepare record on, and under
        # version 2 looks at a pending transition before the producer: while the markers are
        # written every EndTxn is retried.
        if metadata.pending_transition_in_progress or state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self._complete_transaction(loaded, metadata)
            return EndTxnResult(ErrorCode.concurrent_transactions)
        retry_on_overflow = _retry_after_producer_id_rotation(metadata, producer_id, producer_epoch)
        if metadata.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        retry = retry_on_overflow or metadata.producer_epoch == producer_epoch + 1
        if producer_epoch != metadata.producer_epoch and not (retry and state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)):
            return EndTxnResult(ErrorCode.producer_fenced)
        if retry:
            # A retry of an EndTxn that went through is answered as the first was.
            if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
                return EndTxnResult(0, metadata.producer_id, metadata.producer_epoch)
            return EndTxnResult(_invalid_end(metadata, commit))
        if state is S.ONGOING:
            prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        elif not commit and state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            prepare = S.PREPARE_ABORT
        else:
            return EndTxnResult(_invalid_end(metadata, commit))
        if metadata.is_producer_epoch_exhausted and next_producer_id == NO_PRODUCER_ID:
            raise _NeedProducerId
        transit = metadata.prepare_abort_or_commit(prepare, self._clock(), client_transaction_version, next_producer_id, no_partition_added=state is not S.ONGOING)
        return then(self._write_prepare(loaded, metadata, transit), partial(_end_answer, metadata))

    def _write_prepare(self, loaded: TxnStatePartition, metadata: TransactionMetadata, transit: TxnTransitMetadata) -> Written:
        """Write PrepareCommit/PrepareAbort, then have the markers written."""

        def send_markers(error: int) -> int:
            # Only once the Prepare state is replicated: a new coordinator would otherwise
            # find the transaction still open while its markers are already written.
            if not error:
                self._complete_transaction(loaded, metadata)
            return error

        return then(self.state.append_transaction(metadata, transit), send_markers)

    def _end_transaction(self, loaded: TxnStatePartition, metadata: TransactionMetadata, commit: bool, client_transaction_version: int | None = None) -> Written:
        """A version 1 client's end, or (``client_transaction_version`` None) the coordinator's
        own abort, which bumps no epoch of its own (a fence did already)."""
        state = metadata.state
        if state is S.ONGOING:
            transit = metadata.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self._clock(), client_transaction_version)
            return self._write_prepare(loaded, metadata, transit)
        # A retry of an EndTxn that went through succeeds again.
        if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return 0
        # While the markers are written, an EndTxn of either kind is retried, as in Kafka, whose
        # coordinator holds the Complete transition pending from the Prepare record on: an abort
        # that librdkafka sends right after a commit (its AddPartitionsToTxn answered
        # CONCURRENT_TRANSACTIONS meanwhile) must not be INVALID_TXN_STATE, which is fatal to it.
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self._complete_transaction(loaded, metadata)
            return ErrorCode.concurrent_transactions
        return _invalid_end(metadata, commit)

    def _fence_and_abort(self, loaded: TxnStatePartition, metadata: TransactionMetadata) -> Written:
        """Kafka's epoch fence: bump the epoch of an ongoing transaction and abort it under the new epoch."""
        try:
            fence: TxnTransitMetadata = metadata.prepare_fence_producer_epoch()
        except IllegalTransitionError as e:
            log.error("txn.fence_failed", transactional_id=metadata.transactional_id, error=str(e))
            return ErrorCode.concurrent_transactions
        metadata.apply_epoch_fence(fence)
        log.info("txn.fence", transactional_id=metadata.transactional_id, producer_id=metadata.producer_id, epoch=metadata.producer_epoch)

        def fenced(error: int) -> int:
            if error and self.state.partitions.get(loaded.index) is loaded:
                # The bumped epoch is in memory only: the next fence reuses it rather than bump again.
                metadata.has_failed_epoch_fence = True
                log.warning("txn.fence_not_written", transactional_id=metadata.transactional_id, epoch=metadata.producer_epoch, error=ErrorCode(error).name)
            return error

        return then(self._end_transaction(loaded, metadata, commit=False), fenced)

    def _complete_transaction(self, loaded: TxnStatePartition, metadata: TransactionMetadata) -> None:
        """Have the markers of a transaction in PrepareCommit/PrepareAbort written; it completes
        when they are (``markers_written``), at once if every partition is led here."""
        if metadata.pending_transition_in_progress or metadata.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return
        if self.state.partitions.get(loaded.index) is not loaded:
            return  # no longer coordinated here: the new coordinator completes it from its log
        entry = TxnMarkerEntry(
            transactional_id=metadata.transactional_id,
            txn_partition=loaded.index,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            coordinator_epoch=loaded.coordinator_epoch,
            commit=metadata.state is S.PREPARE_COMMIT,
            partitions=frozenset(metadata.topic_partitions),
        )
        self._markers.add_txn_markers_to_send(entry, self)

    def _preparing(self, entry: TxnMarkerEntry) -> TransactionMetadata | None:
        """The id's metadata if it is still the transaction ``entry`` was made for, coordinated here at its epoch."""
        loaded = self.state.partitions.get(entry.txn_partition)
        if loaded is None or loaded.coordinator_epoch != entry.coordinator_epoch:
            return None
        metadata = loaded.metadata.get(entry.transactional_id)
        if metadata is None or (metadata.producer_id, metadata.producer_epoch) != (entry.producer_id, entry.producer_epoch):
            return None
        return metadata if metadata.state is (S.PREPARE_COMMIT if entry.commit else S.PREPARE_ABORT) else None

    def markers_still_wanted(self, entry: TxnMarkerEntry) -> bool:
        return self._preparing(entry) is not None

    def markers_written(self, entry: TxnMarkerEntry) -> None:
        metadata = self._preparing(entry)
        if metadata is None:
            log.info("txn.completion_cancelled", transactional_id=entry.transactional_id, coordinator_epoch=entry.coordinator_epoch)
            return
        if metadata.pending_transition_in_progress:
            return

        def completed(error: int) -> None:
            if error:
                # The Prepare state stays: the periodic job (or the next coordinator, from the
                # log) asks for the markers again and completes then.
                log.warning("txn.complete_not_written", transactional_id=entry.transactional_id, error=ErrorCode(error).name)
                return
            log.debug(
                "txn.completed",
                transactional_id=entry.transactional_id,
                producer_id=entry.producer_id,
                epoch=entry.producer_epoch,
                result="commit" if entry.commit else "abort",
                partitions=len(entry.partitions),
            )

        then(self.state.append_transaction(metadata, metadata.prepare_complete(self._clock())), completed)

    def _resume_completions(self, loaded: TxnStatePartition) -> None:
        """A partition just loaded: finish the transactions it left between Prepare and Complete."""
        for metadata in list(loaded.metadata.values()):
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("txn.resume_completion", transactional_id=metadata.transactional_id, state=metadata.state.display_name)
                self._complete_transaction(loaded, metadata)

    def retry_completions(self) -> None:
        for loaded in list(self.state.partitions.values()):
            self._resume_completions(loaded)

    # -- background ----------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> None:
        """transaction.timeout.ms: abort ongoing transactions past their timeout, fencing their producer;
        and write the markers still missing from transactions being completed."""
        now = self._clock()
        for loaded, metadata in self.state.all_metadata():
            if metadata.state is not S.ONGOING or metadata.pending_transition_in_progress:
                continue
            if metadata.txn_start_timestamp + metadata.txn_timeout_ms >= now:
                continue
            log.info("txn.timed_out", transactional_id=metadata.transactional_id, producer_id=metadata.producer_id, timeout_ms=metadata.txn_timeout_ms)
            # Settled in the background; a failed abort leaves the transaction open, and timed out,
            # for the next run.
            self._fence_and_abort(loaded, metadata)
        self.retry_completions()

    def remove_expired_transactional_ids(self) -> None:
        """transactional.id.expiration.ms: forget ids with no transaction that were idle that long."""
        now = self._clock()
        for _, metadata in self.state.all_metadata():
            if metadata.state not in EXPIRABLE_STATES or metadata.pending_transition_in_progress:
                continue
            if metadata.txn_last_update_timestamp + self._expiration_ms > now:
                continue
            metadata.prepare_dead()
            then(self.state.append_tombstone(metadata), partial(_log_expired, metadata.transactional_id, metadata.producer_id))

    # -- DescribeTransactions / ListTransactions -----------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        try:
            loaded = self.state.partition_of(transactional_id)
        except CoordinatorNotAvailable as e:
            return e.error_code, None
        metadata = loaded.metadata.get(transactional_id)
        if metadata is None or metadata.state is S.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return 0, metadata

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int) -> tuple[int, list[str], list[TransactionListing]]:
        """The error (COORDINATOR_LOAD_IN_PROGRESS while a partition loads), unknown state names, and the listing."""
        unknown: list[str] = []
        wanted_states: set[TransactionState] = set()
        for name in states:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        wanted_ids = set(producer_ids)
        if unknown and not wanted_states:
            # Only unknown states asked for: nothing can match.
            return 0, unknown, []
        now = self._clock()
        listed = []
        for _, metadata in self.state.all_metadata():
            if metadata.state is S.DEAD:
                continue
            if wanted_ids and metadata.producer_id not in wanted_ids:
                continue
            if wanted_states and metadata.state not in wanted_states:
                continue
            if duration_ms >= 0 and now - metadata.txn_start_timestamp <= duration_ms:
                continue
            listed.append(TransactionListing(metadata.transactional_id, metadata.producer_id, metadata.state.display_name))
        error = ErrorCode.coordinator_load_in_progress if self.state.loading else 0
        return error, unknown, listed


def _end_answer(metadata: TransactionMetadata, error: int) -> EndTxnResult:
    if error:
        return EndTxnResult(error)
    # The id and epoch as written: what the client uses from now on. A transaction that
    # exhausted the epoch hands its producer on to the next id once its markers are in.
    if metadata.next_producer_id != NO_PRODUCER_ID:
        return EndTxnResult(0, metadata.next_producer_id, 0)
    return EndTxnResult(0, metadata.producer_id, metadata.producer_epoch)


def _invalid_end(metadata: TransactionMetadata, commit: bool) -> int:
    log.info("txn.end_invalid_state", transactional_id=metadata.transactional_id, state=metadata.state.display_name, commit=commit)
    return ErrorCode.invalid_txn_state


def _log_expired(transactional_id: str, producer_id: int, error: int) -> None:
    if error:
        log.info("txn.expiration_not_written", transactional_id=transactional_id, error=ErrorCode(error).name)
    else:
        log.info("txn.transactional_id_expired", transactional_id=transactional_id, producer_id=producer_id)

