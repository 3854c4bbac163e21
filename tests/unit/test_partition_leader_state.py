"""PartitionLeaderState: Kafka's Partition, leader half. The ISR committed and pending, KIP-966's
strict high-watermark rule, ISR shrink and expansion, the controller's answers."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.partition_state import RECOVERED, AlterPartitionIntent, IsrState, PartitionLeaderState
from replication.replica_state import UNKNOWN_OFFSET

LOCAL, LOCAL_BROKER_EPOCH = 0, 50
LEADER_EPOCH, PARTITION_EPOCH = 4, 9
RECOVERING = 1
INELIGIBLE_REPLICA, INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH = 107, 95, 74
LAG_MS = 100
T0 = 1_000_000


def leader(replicas: tuple[int, ...] = (0, 1, 2), isr: tuple[int, ...] = (0, 1, 2), *, end: int = 20, hw: int = 10, min_isr: int = 2, **kw: int) -> PartitionLeaderState:
    return PartitionLeaderState(
        LOCAL,
        LOCAL_BROKER_EPOCH,
        replicas,
        isr,
        LEADER_EPOCH,
        PARTITION_EPOCH,
        leader_end_offset=end,
        high_watermark=hw,
        min_insync_replicas=min_isr,
        replica_lag_time_max_ms=LAG_MS,
        now_ms=T0,
        **kw,
    )


def everyone(_: int) -> bool:
    return True


def fetch(
    state: PartitionLeaderState, replica: int, offset: int, end: int, now: int = T0, eligible: Callable[[int], bool] = everyone
) -> tuple[bool, AlterPartitionIntent | None]:
    """``replica`` fetches from ``offset`` (its log end) while the leader's log ends at ``end``; its broker epoch is 100 + its id."""
    return state.follower_fetched(replica, offset, 0, 100 + replica, end, now, eligible)


def succeed(state: PartitionLeaderState, isr: tuple[int, ...], end: int, now: int = T0, leader_epoch: int = LEADER_EPOCH, partition_epoch: int = PARTITION_EPOCH + 1) -> bool:
    return state.alter_partition_succeeded(isr, leader_epoch, partition_epoch, end, now, everyone)


# --- the high watermark ------------------------------------------------------------------------------


def test_the_high_watermark_is_the_smallest_log_end_over_the_isr() -> None:
    state = leader(end=20, hw=10)
    assert fetch(state, 1, 20, 20) == (False, None)  # 2's log end is not known yet
    assert state.high_watermark == 10
    assert fetch(state, 2, 15, 20) == (True, None)
    assert state.high_watermark == 15
    assert fetch(state, 2, 20, 20) == (True, None)
    assert state.high_watermark == 20


def test_the_leaders_own_log_end_bounds_it() -> None:
    assert leader(end=20, hw=30).high_watermark == 20
    state = leader(end=20, hw=10)
    fetch(state, 1, 20, 20)
    fetch(state, 2, 20, 20)
    # The leader appends: its followers hold the high watermark until they fetch what it wrote.
    assert not state.maybe_increment_high_watermark(25, T0, everyone)
    fetch(state, 1, 25, 25)
    assert fetch(state, 2, 25, 25) == (True, None) and state.high_watermark == 25
    alone = leader((0,), (0,), end=20, hw=10, min_isr=1)
    assert alone.maybe_increment_high_watermark(25, T0, everyone) and alone.high_watermark == 25


def in_flight_with_a_caught_up_outsider() -> PartitionLeaderState:
    """ISR {0, 1}; 3 is being asked in, so 2, caught up at 30 at T0, cannot be asked in yet."""
    state = leader((0, 1, 2, 3), (0, 1), end=20, hw=20, min_isr=1)
    fetch(state, 1, 20, 20)
    assert fetch(state, 3, 20, 20)[1] is not None
    assert fetch(state, 2, 30, 30) == (False, None)
    fetch(state, 1, 40, 40)
    fetch(state, 3, 40, 40)
    return state


def test_a_caught_up_eligible_replica_about_to_join_holds_the_high_watermark() -> None:
    state = in_flight_with_a_caught_up_outsider()
    assert state.isr.maximal == {0, 1, 3}
    assert state.high_watermark == 30
    assert not state.maybe_increment_high_watermark(40, T0 + LAG_MS, everyone)
    # Once 2 has not caught up within the lag it no longer counts.
    assert state.maybe_increment_high_watermark(40, T0 + LAG_MS + 1, everyone) and state.high_watermark == 40


def test_an_ineligible_replica_does_not_hold_the_high_watermark() -> None:
    state = in_flight_with_a_caught_up_outsider()
    assert state.maybe_increment_high_watermark(40, T0, lambda b: b != 2) and state.high_watermark == 40


def test_the_high_watermark_waits_for_min_insync_replicas_to_be_committed() -> None:
    state = leader((0, 1, 2), (0,), end=20, hw=10, min_isr=2)
    assert state.is_under_min_isr
    moved, intent = fetch(state, 1, 20, 20)
    assert intent is not None and intent.isr == (0, 1)
    # 1 is in the maximal ISR but not yet in the committed one: the high watermark stays.
    assert not moved and state.high_watermark == 10
    assert not state.maybe_increment_high_watermark(20, T0, everyone)
    assert succeed(state, (0, 1), 20)
    assert not state.is_under_min_isr and state.high_watermark == 20


@pytest.mark.parametrize(("replicas", "min_isr", "effective"), [((0,), 3, 1), ((0, 1), 3, 2), ((0, 1, 2), 2, 2), ((0, 1, 2), 1, 1)])
def test_min_isr_is_capped_by_the_replication_factor(replicas: tuple[int, ...], min_isr: int, effective: int) -> None:
    state = leader(replicas, replicas[:effective], min_isr=min_isr)
    assert state.effective_min_isr == effective
    assert not state.is_under_min_isr
    assert leader(replicas, replicas[: effective - 1], min_isr=min_isr).is_under_min_isr


def test_the_high_watermark_never_goes_back() -> None:
    state = leader((0, 1), (0, 1), end=20, hw=15, min_isr=1)
    assert fetch(state, 1, 12, 20) == (False, None)
    assert state.high_watermark == 15


# --- ISR expansion -----------------------------------------------------------------------------------


def test_a_follower_at_the_high_watermark_and_the_epoch_start_is_asked_in() -> None:
    state = leader((0, 1, 2), (0, 1), end=20, hw=10, min_isr=1)
    assert fetch(state, 2, 9, 20) == (False, None)  # below the high watermark
    assert fetch(state, 2, 15, 20) == (False, None)  # short of where this leader epoch began
    assert fetch(state, 2, 20, 20, eligible=lambda b: b != 2) == (False, None)  # fenced or shutting down
    assert not state.isr.in_flight
    moved, intent = fetch(state, 2, 20, 20)
    # 1 has not fetched from this leader yet: its broker epoch is unknown.
    assert intent == AlterPartitionIntent(LEADER_EPOCH, PARTITION_EPOCH, ((0, LOCAL_BROKER_EPOCH), (1, -1), (2, 102)), RECOVERED)
    assert state.isr == IsrState((0, 1), (0, 1, 2))
    assert not moved  # 1's log end is still unknown


def test_a_follower_past_the_epoch_start_but_below_the_high_watermark_is_not_asked_in() -> None:
    state = leader((0, 1, 2), (0, 1), end=20, hw=20, min_isr=1)
    fetch(state, 1, 40, 40)
    assert state.high_watermark == 40
    assert fetch(state, 2, 30, 40) == (False, None)
    assert fetch(state, 2, 40, 40)[1] is not None


def test_a_replica_being_asked_in_holds_the_high_watermark_even_lagging_or_fenced() -> None:
    """The controller may yet write it into the ISR: the maximal ISR holds the high watermark."""
    state = leader((0, 1, 2), (0, 1), end=20, hw=20, min_isr=1)
    assert fetch(state, 2, 20, 20)[1] is not None
    late = T0 + 10 * LAG_MS
    assert fetch(state, 1, 40, 40, now=late, eligible=lambda b: b != 2) == (False, None)
    assert state.high_watermark == 20
    state.alter_partition_failed(INELIGIBLE_REPLICA)  # the controller said no: 2 no longer counts
    assert state.maybe_increment_high_watermark(40, late, everyone) and state.high_watermark == 40


def test_a_member_is_not_asked_in_again() -> None:
    state = leader()
    assert fetch(state, 1, 20, 20)[1] is None
    assert not state.isr.in_flight


def test_no_second_change_while_one_is_in_flight() -> None:
    state = leader((0, 1, 2, 3), (0, 1), end=20, hw=20, min_isr=1)
    _, intent = fetch(state, 2, 20, 20)
    assert intent is not None and intent.isr == (0, 1, 2)
    assert fetch(state, 3, 20, 20) == (False, None)
    # 1 has not caught up for far longer than the lag, yet no shrink is asked either.
    assert state.out_of_sync_replicas(20, T0 + 10 * LAG_MS) == [1]
    assert state.maybe_shrink_isr(20, T0 + 10 * LAG_MS) is None
    assert state.isr == IsrState((0, 1), (0, 1, 2))


# --- ISR shrink --------------------------------------------------------------------------------------


def test_shrink_drops_the_members_not_caught_up_within_the_lag() -> None:
    state = leader(end=20, hw=20)  # a new leader: every ISR member has a lag period from T0
    fetch(state, 1, 18, 20, now=T0 + 50)
    fetch(state, 1, 20, 25, now=T0 + 60)  # reached the end the leader had at T0 + 50
    assert state.maybe_shrink_isr(25, T0 + LAG_MS) is None
    intent = state.maybe_shrink_isr(25, T0 + LAG_MS + 1)
    assert intent == AlterPartitionIntent(LEADER_EPOCH, PARTITION_EPOCH, ((0, LOCAL_BROKER_EPOCH), (1, 101)), RECOVERED)
    assert state.isr == IsrState((0, 1, 2), (0, 1))
    assert state.isr.maximal == {0, 1, 2}  # a shrink holds the high watermark back until it is committed


def test_a_follower_at_the_leaders_end_is_never_out_of_sync() -> None:
    state = leader(end=20, hw=20)
    fetch(state, 1, 20, 20)
    fetch(state, 2, 20, 20)
    assert state.maybe_shrink_isr(20, T0 + 10 * LAG_MS) is None
    intent = state.maybe_shrink_isr(21, T0 + 10 * LAG_MS)
    assert intent is not None and intent.isr == (0,)


def test_shrink_never_drops_the_leader() -> None:
    state = leader((0, 1, 2), (2, 0, 1), end=20, hw=20)
    fetch(state, 1, 20, 20, now=T0 + 500)
    assert state.out_of_sync_replicas(20, T0 + 1_000) == [2]
    intent = state.maybe_shrink_isr(20, T0 + 1_000)
    assert intent is not None and intent.isr == (0, 1)
    alone = leader((0, 1), (0,), end=20, hw=20, min_isr=1)
    assert alone.out_of_sync_replicas(30, T0 + 1_000) == [] and alone.maybe_shrink_isr(30, T0 + 1_000) is None


# --- the controller's answers ------------------------------------------------------------------------


def pending_shrink() -> PartitionLeaderState:
    """ISR {0, 1, 2}, 1 at 20, 2 never heard from: a shrink to {0, 1} is in flight."""
    state = leader(end=20, hw=10)
    fetch(state, 1, 20, 20)
    intent = state.maybe_shrink_isr(20, T0 + LAG_MS + 1)
    assert intent is not None and intent.isr == (0, 1)
    return state


def test_success_commits_the_change_and_may_move_the_high_watermark() -> None:
    state = pending_shrink()
    # Until the controller answers, 2 is in the maximal ISR and holds the high watermark.
    assert not state.maybe_increment_high_watermark(20, T0 + LAG_MS + 1, everyone)
    assert succeed(state, (0, 1), 20, T0 + LAG_MS + 1)
    assert state.isr == IsrState((0, 1)) and state.partition_epoch == PARTITION_EPOCH + 1
    assert state.high_watermark == 20


def test_an_answer_at_the_same_partition_epoch_is_taken() -> None:
    """The controller had nothing to change: the ISR asked for is already the one written."""
    state = pending_shrink()
    assert succeed(state, (0, 1), 20, partition_epoch=PARTITION_EPOCH)
    assert state.isr == IsrState((0, 1)) and state.partition_epoch == PARTITION_EPOCH


@pytest.mark.parametrize(
    ("leader_epoch", "partition_epoch"),
    [(LEADER_EPOCH, PARTITION_EPOCH - 1), (LEADER_EPOCH - 1, PARTITION_EPOCH + 1), (LEADER_EPOCH + 1, PARTITION_EPOCH + 1)],
    ids=["older-partition-epoch", "older-leader-epoch", "newer-leader-epoch"],
)
def test_stale_answers_are_ignored(leader_epoch: int, partition_epoch: int) -> None:
    state = pending_shrink()
    assert not succeed(state, (0, 1), 20, T0 + LAG_MS + 1, leader_epoch=leader_epoch, partition_epoch=partition_epoch)
    assert state.isr == IsrState((0, 1, 2), (0, 1))
    assert (state.partition_epoch, state.high_watermark) == (PARTITION_EPOCH, 10)


def test_failure_returns_to_the_committed_isr_and_the_change_is_asked_again() -> None:
    state = pending_shrink()
    state.alter_partition_failed(INELIGIBLE_REPLICA)
    assert state.isr == IsrState((0, 1, 2))
    intent = state.maybe_shrink_isr(20, T0 + LAG_MS + 1)
    assert intent is not None and intent.isr == (0, 1)

    state = leader((0, 1, 2), (0, 1), end=20, hw=20, min_isr=1)
    first = fetch(state, 2, 20, 20)[1]
    state.alter_partition_failed(INELIGIBLE_REPLICA)
    assert state.isr == IsrState((0, 1))
    assert fetch(state, 2, 20, 20)[1] == first


def test_a_refusal_that_may_answer_an_applied_retry_keeps_the_change_in_flight() -> None:
    """Found by the cluster simulation (tests/simulation): an expansion's first request was applied
    but its answer lost; the retry is refused with INVALID_UPDATE_VERSION. Forgetting the change would
    let the high watermark pass the replica the controller just wrote into the ISR; it stays in flight
    until the metadata says."""
    state = leader((0, 1, 2), (0, 1), end=20, hw=20, min_isr=1)
    assert fetch(state, 2, 20, 20)[1] is not None
    for error in (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH):
        state.alter_partition_failed(error)
        assert state.isr == IsrState((0, 1), (0, 1, 2))
    fetch(state, 1, 30, 30)
    assert state.high_watermark == 20  # held by 2, which the controller may have in the ISR
    assert state.update_registration((0, 1, 2), (0, 1, 2), PARTITION_EPOCH + 1, 30, T0)
    assert state.isr == IsrState((0, 1, 2))


def test_a_registration_not_newer_than_the_leader_knows_does_not_settle_the_change_in_flight() -> None:
    """Found by the cluster simulation (tests/simulation): a shrink's answer comes before its record
    in the metadata log; the leader asks for an expansion meanwhile; the record, at the partition
    epoch the answer gave, must not wipe that expansion out, or the high watermark passes the replica
    being written into the ISR."""
    state = leader((0, 1, 2), (0, 1, 2), end=20, hw=20, min_isr=1)
    assert succeed(state, (0, 1), 20)  # the shrink's answer: partition epoch + 1
    assert fetch(state, 2, 20, 20)[1] is not None  # 2 caught up: asked back in
    assert not state.update_registration((0, 1, 2), (0, 1), PARTITION_EPOCH + 1, 20, T0)  # the shrink's own record
    assert not state.update_registration((0, 1, 2), (0, 1, 2), PARTITION_EPOCH, 20, T0)  # an older one
    assert state.isr == IsrState((0, 1), (0, 1, 2))
    fetch(state, 1, 30, 30)
    assert state.high_watermark == 20


def test_an_answer_not_newer_than_the_leader_knows_does_not_settle_the_change_in_flight() -> None:
    """The answer to an earlier change, at the partition epoch its record already brought, is not the
    answer to the change asked since."""
    state = leader((0, 1, 2), (0, 1, 2), end=20, hw=20, min_isr=1)
    assert state.update_registration((0, 1, 2), (0, 1), PARTITION_EPOCH + 1, 20, T0)  # a shrink's record, before its answer
    assert fetch(state, 2, 20, 20)[1] is not None
    assert not succeed(state, (0, 1), 20, partition_epoch=PARTITION_EPOCH + 1)  # the shrink's answer, late
    assert state.isr == IsrState((0, 1), (0, 1, 2))


def test_update_assignment_keeps_known_followers_progress_and_settles_the_change() -> None:
    state = pending_shrink()
    known = state.remotes[1]
    state.update_assignment((0, 1, 3), (0, 1), 20, T0 + 500)
    assert state.isr == IsrState((0, 1))
    assert set(state.remotes) == {1, 3}
    assert state.remotes[1] is known and (known.log_end_offset, known.last_caught_up_time_ms, known.broker_epoch) == (20, T0, 101)
    added = state.remotes[3]
    assert (added.log_end_offset, added.last_caught_up_time_ms) == (UNKNOWN_OFFSET, 0)  # outside the ISR: no lag period
    state.update_assignment((0, 1, 3, 4), (0, 1, 3, 4), 20, T0 + 600)
    assert state.remotes[3] is added  # known already, kept as it was
    assert state.remotes[4].last_caught_up_time_ms == T0 + 600  # a new ISR member gets a lag period


def test_an_uncleanly_elected_leader_asks_as_recovered() -> None:
    """Kafka's makeLeader marks the partition RECOVERED (KIP-704): the controller refuses an ISR of
    more than the leader asked as RECOVERING, so the ISR could never grow again."""
    state = leader((0, 1, 2), (0,), end=20, hw=20, min_isr=1, leader_recovery_state=RECOVERING)
    _, intent = fetch(state, 1, 20, 20)
    assert intent is not None and intent.isr == (0, 1) and intent.leader_recovery_state == RECOVERED
    assert succeed(state, (0, 1), 20)
    intent = state.maybe_shrink_isr(21, T0 + LAG_MS + 1)
    assert intent is not None and intent.isr == (0,) and intent.leader_recovery_state == RECOVERED


# --- a random walk -----------------------------------------------------------------------------------

FOLLOWERS = (1, 2, 3)
STALE = [(0, -1), (-1, 1), (1, 1)]  # (leader epoch, partition epoch) off by these from what is current

operation = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5)),
    # A fetch from each follower, as often as all else: (follower, how far behind the leader's end).
    *(st.tuples(st.just("fetch"), st.just(b), st.integers(0, 12)) for b in FOLLOWERS),
    st.tuples(st.just("tick"), st.integers(0, 80)),
    st.tuples(st.just("shrink")),
    st.tuples(st.just("succeed"), st.integers(0, 2)),  # how far the new partition epoch is ahead
    st.tuples(st.just("stale"), st.sampled_from(STALE)),
    st.tuples(st.just("fail"), st.sampled_from((INELIGIBLE_REPLICA, INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH))),
    st.tuples(st.just("fence"), st.sampled_from(FOLLOWERS)),
)


def holding_bound(state: PartitionLeaderState, end: int, now: int, eligible: Callable[[int], bool]) -> int:
    """KIP-966's bound: the leader's end and the log ends of the maximal ISR and of the
    caught-up, eligible replicas about to join it."""
    holders = [
        r.log_end_offset
        for b, r in state.remotes.items()
        if b in state.isr.maximal
        or (r.log_end_offset != UNKNOWN_OFFSET and eligible(b) and (r.log_end_offset == end or now - r.last_caught_up_time_ms <= LAG_MS))
    ]
    return min([end, *holders])


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.sampled_from(FOLLOWERS)),
    st.integers(1, 4),
    st.integers(0, 30),
    st.integers(0, 30),
    st.lists(operation, min_size=20, max_size=60),
)
def test_random_leader_walks_keep_the_high_watermark_safe(isr_followers: set[int], min_isr: int, end: int, hw: int, ops: list[tuple[Any, ...]]) -> None:
    state = leader((0, *FOLLOWERS), (0, *sorted(isr_followers)), end=end, hw=hw, min_isr=min_isr)
    initial_hw, epoch_start, now, fenced = state.high_watermark, end, T0, set()

    def eligible(b: int) -> bool:
        return b not in fenced

    for op in ops:
        before_hw, before_isr, before_epoch = state.high_watermark, state.isr, state.partition_epoch
        computed, intent = False, None  # whether the step recomputed the high watermark; the change it asked for
        kind = op[0]
        if kind == "append":
            end += op[1]
            state.maybe_increment_high_watermark(end, now, eligible)
            computed = True
        elif kind == "fetch":
            replica, behind = op[1], op[2]
            # A member of the maximal ISR holds everything committed: it never truncates below the high watermark.
            floor = state.high_watermark if replica in state.isr.maximal else 0
            _, intent = state.follower_fetched(replica, max(floor, end - behind), 0, 100 + replica, end, now, eligible)
            computed = True
            if intent is not None:
                # Kafka's isFollowerInSync: at the high watermark and past this epoch's start, and eligible.
                assert state.isr.pending == before_isr.committed + (replica,)
                assert state.remotes[replica].log_end_offset >= max(before_hw, epoch_start) and eligible(replica)
        elif kind == "tick":
            now += op[1]
        elif kind == "shrink":
            intent = state.maybe_shrink_isr(end, now)
            if intent is not None:
                assert set(state.isr.pending or ()) == set(before_isr.committed) - set(state.out_of_sync_replicas(end, now))
        elif kind == "succeed" and before_isr.pending is not None:
            new_epoch = before_epoch + op[1]
            assert state.alter_partition_succeeded(before_isr.pending, LEADER_EPOCH, new_epoch, end, now, eligible)
            assert state.isr == IsrState(before_isr.pending) and state.partition_epoch == new_epoch
            computed = True
        elif kind == "stale" and before_isr.pending is not None:
            d_leader, d_partition = op[1]
            assert not state.alter_partition_succeeded(before_isr.pending, LEADER_EPOCH + d_leader, before_epoch + d_partition, end, now, eligible)
            assert (state.isr, state.partition_epoch, state.high_watermark) == (before_isr, before_epoch, before_hw)
        elif kind == "fail":
            state.alter_partition_failed(op[1])
            assert state.isr == (IsrState(before_isr.committed) if op[1] == INELIGIBLE_REPLICA else before_isr)
        elif kind == "fence":
            fenced ^= {op[1]}

        hw = state.high_watermark
        assert before_hw <= hw <= end
        if state.is_under_min_isr:
            assert hw == before_hw
        elif computed:
            assert hw == max(before_hw, holding_bound(state, end, now, eligible))
        if hw > initial_hw:
            for b in state.isr.maximal - {LOCAL}:
                assert state.remotes[b].log_end_offset != UNKNOWN_OFFSET and hw <= state.remotes[b].log_end_offset
        # Never a second change in flight; the leader is in every ISR.
        if before_isr.in_flight:
            assert intent is None
            assert state.isr.pending in (before_isr.pending, None)
        if intent is not None:
            assert intent.isr == state.isr.pending and (intent.leader_epoch, intent.partition_epoch) == (LEADER_EPOCH, state.partition_epoch)
        assert LOCAL in state.isr.committed and LOCAL in (state.isr.pending or (LOCAL,))


def test_a_replica_being_added_by_a_reassignment_catches_up_without_holding_the_high_watermark() -> None:
    # Leader 0 with ISR {0, 1, 2}; a reassignment adds 3 (the metadata's replicas are the union).
    state = leader((0, 1, 2), (0, 1, 2), end=20, hw=20)
    state.update_assignment((1, 2, 3, 0), (0, 1, 2), 20, T0)
    assert state.effective_min_isr == 2 and not state.is_under_min_isr
    # The new replica starts from nothing: it holds back neither the high watermark nor acks=all.
    assert fetch(state, 3, 0, 30) == (False, None)
    for follower in (1, 2):
        fetch(state, follower, 30, 30)
    assert state.high_watermark == 30
    # Caught up to the high watermark, it asks to join the ISR: that completes the move on the controller.
    _, intent = fetch(state, 3, 30, 30)
    assert intent is not None and intent.isr == (0, 1, 2, 3)
