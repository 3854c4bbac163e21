"""KRaftVersionUpgrade: what a leader of a kraft.version 0 quorum knows while it may upgrade it (KIP-853).

A static quorum's log names no voters, so its leader keeps them in memory (Kafka's volatile
voters): ``controller.quorum.voters`` with each voter's directory id, endpoints and supported
kraft.version range as the voter reported them in UpdateRaftVoter. An upgrade to kraft.version 1
writes that set into the log; from then on the leader only remembers the version it asked for,
so a second upgrade in the same epoch is a no-op and a different one is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from raft.control_records import KRaftVersion
from raft.voter_set import VoterSet


@dataclass(frozen=True, slots=True)
class Empty:
    """The leader began its epoch at kraft.version 1: nothing to upgrade, voters are in the log."""


@dataclass(frozen=True, slots=True)
class Voters:
    voters: VoterSet


@dataclass(frozen=True, slots=True)
class Version:
    kraft_version: KRaftVersion


KRaftVersionUpgrade = Union[Empty, Voters, Version]


class InvalidUpdateVersionError(Exception):
    """Kafka's InvalidUpdateVersionException: UpdateFeatures answers INVALID_UPDATE_VERSION with this message."""


__all__ = ["Empty", "InvalidUpdateVersionError", "KRaftVersionUpgrade", "Version", "Voters"]
