"""A follower's decisions on its leader's answer: Kafka's AbstractFetcherThread truncation rules
for KIP-320's DivergingEpoch and for OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.follower_fetch_state import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEndOffset,
    Truncation,
    follower_high_watermark,
    offset_out_of_range_restart,
    truncation_for_diverging_epoch,
)

# --- DivergingEpoch ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("log_end", "high_watermark", "expected"), [(50, 30, 30), (20, 30, 20)])
def test_a_leader_without_the_epoch_sends_the_follower_back_to_what_was_committed(log_end: int, high_watermark: int, expected: int) -> None:
    diverging = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert truncation_for_diverging_epoch(diverging, EpochEndOffset(3, 45), log_end, high_watermark) == Truncation(expected, True)


@pytest.mark.parametrize(("end_offset", "log_end", "expected"), [(40, 50, 40), (60, 50, 50)])
def test_a_leader_answer_without_an_epoch_is_taken_as_it_is(end_offset: int, log_end: int, expected: int) -> None:
    diverging = EpochEndOffset(UNDEFINED_EPOCH, end_offset)
    assert truncation_for_diverging_epoch(diverging, EpochEndOffset(3, 45), log_end, 10) == Truncation(expected, True)


@pytest.mark.parametrize(("end_offset", "log_end", "expected"), [(40, 50, 40), (60, 50, 50)])
def test_an_epoch_below_every_local_one_truncates_to_the_leaders_offset(end_offset: int, log_end: int, expected: int) -> None:
    assert truncation_for_diverging_epoch(EpochEndOffset(2, end_offset), None, log_end, 10) == Truncation(expected, True)


@pytest.mark.parametrize(("local_end", "log_end", "expected"), [(30, 50, 30), (55, 50, 50)])
def test_an_epoch_this_log_never_had_cuts_back_to_the_largest_below_it_and_asks_again(local_end: int, log_end: int, expected: int) -> None:
    # The leader names epoch 5 ending at 40; this log went from epoch 3 to epoch 6.
    assert truncation_for_diverging_epoch(EpochEndOffset(5, 40), EpochEndOffset(3, local_end), log_end, 10) == Truncation(expected, False)


@pytest.mark.parametrize(
    ("local_end", "leader_end", "log_end", "expected"),
    [(30, 40, 50, 30), (45, 40, 50, 40), (45, 48, 42, 42)],
    ids=["local-end", "leader-end", "log-end"],
)
def test_a_common_epoch_truncates_where_either_side_left_it(local_end: int, leader_end: int, log_end: int, expected: int) -> None:
    assert truncation_for_diverging_epoch(EpochEndOffset(5, leader_end), EpochEndOffset(5, local_end), log_end, 10) == Truncation(expected, True)


def test_a_double_failover_unwinds_one_epoch_per_round_trip() -> None:
    """KIP-279: the follower has epochs 1 [0, 10), 3 [10, 20), 4 [20, 25); the leader, of epoch 5,
    has 1 [0, 8), 2 [8, 30), 5 [30, ...)."""
    # Fetching after epoch 4, the leader answers with its largest epoch at or below it, 2, ending at 30.
    # This log never had epoch 2: cut to the end of its epoch 1 and ask again.
    first = truncation_for_diverging_epoch(EpochEndOffset(2, 30), EpochEndOffset(1, 10), 25, 5)
    assert first == Truncation(10, False)
    # Fetching from 10 after epoch 1: the leader's epoch 1 ended at 8, so the logs agree up to 8.
    assert truncation_for_diverging_epoch(EpochEndOffset(1, 8), EpochEndOffset(1, 10), first.offset, 5) == Truncation(8, True)


# --- OFFSET_OUT_OF_RANGE -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leader_start", "leader_hw", "log_end", "expected"),
    [
        (100, 150, 40, (100, True)),  # the leader deleted all this log has: start over at its start
        (100, 150, 100, (100, False)),  # exactly at the leader's start: keep it
        (0, 30, 50, (30, False)),  # past the leader's end: cut back to what it has committed
        (0, 80, 50, (50, False)),  # nothing past the leader's high watermark to cut
        (40, 20, 50, (40, False)),  # a high watermark below the leader's start counts as its start
    ],
)
def test_out_of_range_restart(leader_start: int, leader_hw: int, log_end: int, expected: tuple[int, bool]) -> None:
    assert offset_out_of_range_restart(leader_start, leader_hw, log_end) == expected


@pytest.mark.parametrize(("leader_hw", "log_end", "expected"), [(30, 50, 30), (60, 50, 50)])
def test_a_follower_knows_as_committed_what_the_leader_says_up_to_what_it_holds(leader_hw: int, log_end: int, expected: int) -> None:
    assert follower_high_watermark(leader_hw, log_end) == expected


# --- properties ----------------------------------------------------------------------------------------

offsets = st.integers(0, 100)
epochs = st.integers(0, 10)


@st.composite
def divergences(draw: st.DrawFn) -> tuple[EpochEndOffset, EpochEndOffset | None, int, int]:
    """The leader's DivergingEpoch, this log's own end for that epoch (an epoch at or below it), its end and high watermark."""
    diverging = EpochEndOffset(draw(st.one_of(st.just(UNDEFINED_EPOCH), epochs)), draw(st.one_of(st.just(UNDEFINED_OFFSET), offsets)))
    log_end = draw(offsets)
    ceiling = max(diverging.epoch, 0)
    local = draw(st.one_of(st.none(), st.builds(EpochEndOffset, st.integers(0, ceiling), st.integers(0, log_end))))
    return diverging, local, log_end, draw(st.integers(0, log_end))


@settings(max_examples=300, deadline=None)
@given(divergences())
def test_truncation_never_passes_the_log_end_nor_a_common_epochs_end(case: tuple[EpochEndOffset, EpochEndOffset | None, int, int]) -> None:
    diverging, local, log_end, high_watermark = case
    truncation = truncation_for_diverging_epoch(diverging, local, log_end, high_watermark)
    assert 0 <= truncation.offset <= log_end
    if local is not None and diverging.end_offset != UNDEFINED_OFFSET and local.epoch == diverging.epoch:
        assert truncation.completed
        assert truncation.offset <= diverging.end_offset and truncation.offset <= local.end_offset
    if diverging.end_offset == UNDEFINED_OFFSET:
        assert truncation == Truncation(high_watermark, True)
    # Only an epoch this log lacks leaves the truncation to be checked again.
    lacking = diverging.end_offset != UNDEFINED_OFFSET and diverging.epoch != UNDEFINED_EPOCH and local is not None and local.epoch != diverging.epoch
    assert truncation.completed is not lacking


@settings(max_examples=300, deadline=None)
@given(offsets, offsets, offsets)
def test_out_of_range_restart_keeps_what_the_leader_has(leader_start: int, leader_hw: int, log_end: int) -> None:
    offset, empty_first = offset_out_of_range_restart(leader_start, leader_hw, log_end)
    assert empty_first is (log_end < leader_start)
    assert offset >= leader_start
    if not empty_first:
        # Never past this log's end, and never below what the leader has committed.
        assert offset <= log_end
        assert offset >= min(log_end, leader_hw)
