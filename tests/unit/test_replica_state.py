"""ReplicaState, the leader's view of one follower: Kafka's Replica and its lastCaughtUpTimeMs rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replication.replica_state import NO_BROKER_EPOCH, UNKNOWN_OFFSET, ReplicaState

LAG_MS = 100


def fetched(*fetches: tuple[int, int, int]) -> ReplicaState:
    """A replica after fetches of (fetch offset, leader end offset, time)."""
    replica = ReplicaState(7)
    for offset, leader_end, now in fetches:
        replica.update_fetch_state(offset, 0, leader_end, now, 3)
    return replica


def test_a_fresh_replica_knows_nothing() -> None:
    replica = ReplicaState(7)
    assert (replica.log_end_offset, replica.log_start_offset, replica.broker_epoch) == (UNKNOWN_OFFSET, UNKNOWN_OFFSET, NO_BROKER_EPOCH)
    assert replica.last_caught_up_time_ms == 0


def test_a_fetch_records_the_followers_offsets_and_epoch() -> None:
    replica = ReplicaState(7)
    replica.update_fetch_state(12, 4, 20, 1_000, 55)
    assert (replica.log_end_offset, replica.log_start_offset, replica.broker_epoch) == (12, 4, 55)
    assert (replica.last_fetch_leader_log_end_offset, replica.last_fetch_time_ms) == (20, 1_000)


def test_a_fetch_at_or_past_the_leaders_end_catches_up_now() -> None:
    assert fetched((20, 20, 1_000)).last_caught_up_time_ms == 1_000
    assert fetched((21, 20, 1_000)).last_caught_up_time_ms == 1_000


def test_a_fetch_reaching_the_leaders_previous_end_catches_up_as_of_the_previous_fetch() -> None:
    # The leader moved on from 20 to 30 between the fetches: the follower holds all it had at 1,000.
    replica = fetched((15, 20, 1_000), (20, 30, 1_200))
    assert replica.last_caught_up_time_ms == 1_000
    replica.update_fetch_state(35, 0, 40, 1_400, 3)  # past the previous end (30), short of the current
    assert replica.last_caught_up_time_ms == 1_200


def test_a_fetch_short_of_the_leaders_previous_end_is_not_caught_up() -> None:
    replica = fetched((20, 20, 1_000), (25, 30, 1_200), (29, 40, 1_400))
    assert replica.last_caught_up_time_ms == 1_000


def test_last_caught_up_never_goes_back() -> None:
    replica = fetched((20, 20, 1_000))
    # A late-stamped fetch at the leader's end does not undo the later catch-up.
    replica.update_fetch_state(20, 0, 20, 900, 3)
    assert replica.last_caught_up_time_ms == 1_000


def test_caught_up_at_the_leaders_end_or_within_the_lag() -> None:
    replica = fetched((20, 20, 1_000))
    assert replica.is_caught_up(20, 1_000_000, LAG_MS)  # at the leader's end, however long ago
    assert replica.is_caught_up(25, 1_000 + LAG_MS, LAG_MS)
    assert not replica.is_caught_up(25, 1_000 + LAG_MS + 1, LAG_MS)


def test_reset_gives_an_isr_member_a_full_lag_period() -> None:
    replica = fetched((20, 20, 1_000))
    replica.reset(5_000, 30, in_isr=True)
    assert (replica.log_end_offset, replica.log_start_offset, replica.broker_epoch) == (UNKNOWN_OFFSET, UNKNOWN_OFFSET, NO_BROKER_EPOCH)
    assert replica.last_caught_up_time_ms == 5_000
    assert replica.is_caught_up(30, 5_000 + LAG_MS, LAG_MS)
    assert not replica.is_caught_up(30, 5_000 + LAG_MS + 1, LAG_MS)
    # A first fetch short of the leader's end keeps the period from the reset, no more, no less.
    replica.update_fetch_state(25, 0, 40, 5_050, 3)
    assert replica.last_caught_up_time_ms == 5_000


def test_reset_gives_a_replica_outside_the_isr_nothing() -> None:
    replica = fetched((20, 20, 1_000))
    replica.reset(5_000, 30, in_isr=False)
    assert replica.log_end_offset == UNKNOWN_OFFSET and replica.last_caught_up_time_ms == 0
    assert not replica.is_caught_up(30, 5_000, LAG_MS)
    # Its first fetch, short of the leader's end, does not make it caught up as of any recent time.
    replica.update_fetch_state(29, 0, 30, 5_050, 3)
    assert not replica.is_caught_up(30, 5_050, LAG_MS)
    # Reaching the end does.
    replica.update_fetch_state(30, 0, 30, 5_100, 3)
    assert replica.last_caught_up_time_ms == 5_100


# (how far behind the leader's end the follower fetches, how much the leader grew, time step)
fetch = st.tuples(st.integers(0, 20), st.integers(0, 10), st.integers(0, 500))


@settings(max_examples=200, deadline=None)
@given(st.lists(fetch, max_size=12))
def test_last_caught_up_is_the_latest_time_the_leaders_end_was_reached(raw: list[tuple[int, int, int]]) -> None:
    """Kafka's definition, read over the whole history rather than step by step: the largest
    fetch time t such that the fetch at t, or the next one, reached the leader's end as of t."""
    # Leader ends and times only grow; a follower fetches at most at the leader's end.
    fetches, end, now = [], 0, 0
    for behind, grow, step in raw:
        end, now = end + grow, now + step
        fetches.append((max(0, end - behind), end, now))
    replica = fetched(*fetches)
    history = [(UNKNOWN_OFFSET, UNKNOWN_OFFSET, 0), *fetches]
    expected = max(
        [0]
        + [t for o, e, t in fetches if o >= e]
        + [history[i - 1][2] for i in range(1, len(history)) if history[i][0] >= history[i - 1][1]]
    )
    assert replica.last_caught_up_time_ms == expected
    if fetches:
        assert replica.last_caught_up_time_ms <= fetches[-1][2]
        assert replica.log_end_offset == fetches[-1][0]
