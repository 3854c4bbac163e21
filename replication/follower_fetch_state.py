"""What a follower does with its leader's answer: where to truncate, where to fetch from next.

Kafka's AbstractFetcherThread decisions, sans-IO. A follower fetches with the epoch of the last
batch it holds (KIP-320's LastFetchedEpoch); the leader answers DivergingEpoch when the
follower's log has records of that epoch the leader does not. The follower then truncates to
where its log and the leader's last agree, and fetches on with the epoch it holds there: if it
has not reached a common epoch yet, the next answer diverges again, one epoch further back, so a
double failover (KIP-279) unwinds one epoch per round trip. It never truncates to its own high
watermark on a leader change (the KIP-101 loss): only what the leader says decides.
"""

from __future__ import annotations

from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class Truncation:
    offset: int
    # False when the follower stopped at an epoch the leader did not name: the next fetch
    # checks again from there.
    completed: bool


def truncation_for_diverging_epoch(
    diverging: EpochEndOffset,
    local_end_for_epoch: EpochEndOffset | None,
    log_end_offset: int,
    high_watermark: int,
) -> Truncation:
    """Where to truncate when the leader answered DivergingEpoch.

    ``local_end_for_epoch`` is this replica's own answer to OffsetForLeaderEpoch for the epoch
    the leader named (the largest local epoch at or below it and where it ends), None when the
    local log knows no such epoch.
    """
    if diverging.end_offset == UNDEFINED_OFFSET:
        # The leader knows no epoch at or below ours: the only common ground left is what was committed.
        return Truncation(min(high_watermark, log_end_offset), True)
    if diverging.epoch == UNDEFINED_EPOCH or local_end_for_epoch is None:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    if local_end_for_epoch.epoch != diverging.epoch:
        # This log never had the leader's epoch: cut back to the end of the largest epoch it had
        # below it and ask again from there.
        return Truncation(min(local_end_for_epoch.end_offset, log_end_offset), False)
    return Truncation(min(local_end_for_epoch.end_offset, diverging.end_offset, log_end_offset), True)


def offset_out_of_range_restart(leader_log_start_offset: int, leader_end_offset: int, log_end_offset: int) -> tuple[int, bool]:
    """(offset to truncate to and fetch from, whether to empty the log first) after OFFSET_OUT_OF_RANGE,
    from the leader's log start and end as its ListOffsets EARLIEST and LATEST answer a replica.

    Below the leader's log start the local log is of no use: empty it and start at the
    leader's start. Otherwise the fetch was past the leader's end (an unclean election left the
    leader shorter): records past it may not be on the leader, and those below it are, so
    cutting back to it loses nothing the leader has.
    """
    if log_end_offset < leader_log_start_offset:
        return leader_log_start_offset, True
    return min(log_end_offset, max(leader_end_offset, leader_log_start_offset)), False


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    """A follower knows as committed what the leader says is, up to what it holds itself."""
    return min(leader_high_watermark, log_end_offset)
