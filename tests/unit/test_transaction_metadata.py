"""The transaction state machine: every legal and illegal transition, and the prepare/complete rule."""

from __future__ import annotations

import itertools

import pytest

from broker.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    ProducerFenced,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

S = TransactionState
TP = ("topic", 0)


def metadata(state: TransactionState = S.EMPTY, epoch: int = 0, partitions: set[tuple[str, int]] | None = None, start: int = -1) -> TransactionMetadata:
    if partitions is None:
        partitions = {TP} if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT) else set()
    if start == -1 and state not in (S.EMPTY,):
        start = 1000
    return TransactionMetadata(
        transactional_id="tx",
        producer_id=7,
        last_producer_id=-1,
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=60000,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp=start,
        txn_last_update_timestamp=1000,
    )


# -- the transition table: Kafka's validPreviousStates ---------------------------------------------------

KAFKA_TABLE = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},  # Kafka 4.4
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def test_the_table_is_kafkas() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_every_pair_of_states_is_legal_exactly_when_the_table_says(source: TransactionState, target: TransactionState) -> None:
    m = metadata(source)
    legal = source in KAFKA_TABLE[target]
    if legal:
        transit = m._prepare(target)
        assert m.pending_state is target and transit.txn_state is target
        assert m.state is source  # memory waits for the write
    else:
        with pytest.raises(IllegalTransitionError):
            m._prepare(target)
        assert m.pending_state is None


def test_the_state_ids_are_the_log_status_bytes() -> None:
    assert [s.value for s in S] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [s.display_name for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert TransactionState.from_name("Ongoing") is S.ONGOING and TransactionState.from_name("ongoing") is None


def test_nothing_is_prepared_while_a_transition_is_pending() -> None:
    m = metadata(S.EMPTY)
    m.prepare_add_partitions({TP}, 2000)
    with pytest.raises(IllegalTransitionError):
        m.prepare_add_partitions({("other", 1)}, 2001)
    m.abort_pending()
    assert m.pending_state is None and m.state is S.EMPTY and m.topic_partitions == set()


def test_complete_without_pending_is_illegal() -> None:
    m = metadata(S.EMPTY)
    transit = m._snapshot(S.ONGOING)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(transit)


def test_complete_must_match_the_prepared_state() -> None:
    m = metadata(S.EMPTY)
    m.prepare_add_partitions({TP}, 2000)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(m._snapshot(S.EMPTY))


# -- a whole transaction -----------------------------------------------------------------------------------


def test_init_add_commit_complete() -> None:
    m = metadata(S.EMPTY, epoch=NO_PRODUCER_EPOCH)
    t = m.prepare_increment_producer_epoch(30000, None, 1500)
    assert (t.producer_epoch, t.txn_timeout_ms, t.txn_state) == (0, 30000, S.EMPTY)
    m.complete_transition_to(t)
    assert (m.state, m.producer_epoch, m.txn_timeout_ms) == (S.EMPTY, 0, 30000)

    t = m.prepare_add_partitions({TP}, 2000)
    assert t.txn_start_timestamp == 2000
    m.complete_transition_to(t)
    assert m.state is S.ONGOING and m.topic_partitions == {TP} and m.txn_start_timestamp == 2000

    t = m.prepare_add_partitions({("b", 1)}, 2500)
    assert t.txn_start_timestamp == 2000  # the transaction started with its first partition
    m.complete_transition_to(t)
    assert m.topic_partitions == {TP, ("b", 1)}

    t = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000)
    m.complete_transition_to(t)
    assert m.state is S.PREPARE_COMMIT and m.topic_partitions == {TP, ("b", 1)}

    t = m.prepare_complete(3100)
    assert t.txn_state is S.COMPLETE_COMMIT and t.topic_partitions == frozenset()
    m.complete_transition_to(t)
    assert m.state is S.COMPLETE_COMMIT and m.topic_partitions == set() and m.txn_last_update_timestamp == 3100

    # The next transaction starts from CompleteCommit with a new start time.
    t = m.prepare_add_partitions({TP}, 4000)
    m.complete_transition_to(t)
    assert m.state is S.ONGOING and m.txn_start_timestamp == 4000


def test_abort_completes_to_complete_abort() -> None:
    m = metadata(S.ONGOING)
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_ABORT, 3000))
    t = m.prepare_complete(3001)
    assert t.txn_state is S.COMPLETE_ABORT
    m.complete_transition_to(t)
    assert m.state is S.COMPLETE_ABORT


def test_prepare_commit_from_empty_is_illegal() -> None:
    with pytest.raises(IllegalTransitionError):
        metadata(S.EMPTY).prepare_abort_or_commit(S.PREPARE_COMMIT, 1)


# -- epochs (KIP-360) --------------------------------------------------------------------------------------


def test_a_new_producer_bumps_the_epoch_and_forgets_the_last() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=4)
    t = m.prepare_increment_producer_epoch(60000, None, 2000)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, NO_PRODUCER_EPOCH)


def test_a_resuming_producer_with_the_current_epoch_bumps_and_remembers_it() -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=4)
    t = m.prepare_increment_producer_epoch(60000, 4, 2000)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    m.complete_transition_to(t)
    # A retry of that call (the response was lost) gets the same epoch, no second bump.
    t = m.prepare_increment_producer_epoch(60000, 4, 2001)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)


def test_a_resuming_producer_with_an_old_epoch_is_fenced() -> None:
    m = metadata(S.EMPTY, epoch=4)
    with pytest.raises(ProducerFenced):
        m.prepare_increment_producer_epoch(60000, 2, 2000)
    assert m.pending_state is None


def test_the_exhausted_epoch_cannot_be_bumped_and_rotates_the_producer_id() -> None:
    m = metadata(S.EMPTY, epoch=SHORT_MAX - 1)
    assert m.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransitionError):
        m.prepare_increment_producer_epoch(60000, None, 1)
    t = m.prepare_producer_id_rotation(99, 60000, 2000, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (99, 0, 7, SHORT_MAX - 1)
    m.complete_transition_to(t)
    assert (m.producer_id, m.producer_epoch) == (99, 0)


def test_valid_producer_id_rules() -> None:
    m = metadata(S.EMPTY, epoch=3)
    assert m.is_valid_producer_id(7, 1)
    assert not m.is_valid_producer_id(8, 3)
    m.last_producer_id = 8
    assert m.is_valid_producer_id(8, SHORT_MAX - 1) and not m.is_valid_producer_id(8, 3)
    assert metadata(S.EMPTY, epoch=NO_PRODUCER_EPOCH).is_valid_producer_id(123, 5)


def test_epoch_fence_bumps_the_epoch_for_the_abort() -> None:
    m = metadata(S.ONGOING, epoch=2)
    fence = m.prepare_fence_producer_epoch()
    assert fence.txn_state is S.PREPARE_EPOCH_FENCE and fence.producer_epoch == 3
    m.apply_epoch_fence(fence)
    assert m.pending_state is None and m.producer_epoch == 3 and m.state is S.ONGOING
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, 5000)
    assert t.producer_epoch == 3
    m.complete_transition_to(t)
    assert m.state is S.PREPARE_ABORT


def test_epoch_fence_is_never_completed() -> None:
    m = metadata(S.ONGOING)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(m.prepare_fence_producer_epoch())


def test_apply_epoch_fence_needs_a_pending_fence() -> None:
    m = metadata(S.ONGOING)
    with pytest.raises(IllegalTransitionError):
        m.apply_epoch_fence(m._snapshot(S.PREPARE_EPOCH_FENCE))


def test_the_max_epoch_cannot_be_fenced() -> None:
    with pytest.raises(IllegalTransitionError):
        metadata(S.ONGOING, epoch=SHORT_MAX).prepare_fence_producer_epoch()


def test_dead_is_prepared_from_idle_states_and_never_completed() -> None:
    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        m = metadata(state)
        t = m.prepare_dead()
        assert t.txn_state is S.DEAD
        with pytest.raises(IllegalTransitionError):
            m.complete_transition_to(t)
    with pytest.raises(IllegalTransitionError):
        metadata(S.ONGOING).prepare_dead()


# -- complete checks what it applies ---------------------------------------------------------------------


def _tampered(t: TxnTransitMetadata, **changes: object) -> TxnTransitMetadata:
    import dataclasses

    return dataclasses.replace(t, **changes)  # type: ignore[arg-type]


def test_complete_refuses_a_transit_for_another_epoch() -> None:
    m = metadata(S.ONGOING, epoch=2)
    t = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(_tampered(t, producer_epoch=3))


def test_complete_refuses_an_add_that_drops_partitions() -> None:
    m = metadata(S.ONGOING, partitions={TP, ("b", 0)})
    t = m.prepare_add_partitions({("c", 0)}, 3000)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(_tampered(t, topic_partitions=frozenset({("c", 0)})))


def test_complete_refuses_an_init_with_partitions_left() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=1)
    t = m.prepare_increment_producer_epoch(60000, None, 1)
    m.topic_partitions = {TP}
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(t)


def test_complete_refuses_a_complete_without_start_time() -> None:
    m = metadata(S.PREPARE_ABORT)
    t = m.prepare_complete(5000)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(_tampered(t, txn_start_timestamp=-1))
