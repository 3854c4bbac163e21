"""VoterSet: who votes in the metadata quorum, and how to reach them.

Static (kraft.version 0) it comes from ``controller.quorum.voters`` ("1@host:port,..."): voters
have no directory id, one endpoint on the controller listener and, until they say otherwise
(UpdateRaftVoter), support kraft.version 0 only, as in Kafka. Dynamic (KIP-853) it is the
latest VotersRecord in the log or snapshot, where each voter is a ReplicaKey (id and directory
id) with endpoints per listener. A voter with no directory id matches any directory.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from kio.schema.voters_record.v0.data import Endpoint as RecordEndpoint
from kio.schema.voters_record.v0.data import KRaftVersionFeature, Voter, VotersRecord

DEFAULT_LISTENER = "CONTROLLER"
ZERO_UUID = uuid.UUID(int=0)


class InvalidVotersError(ValueError):
    """A ``controller.quorum.voters`` value that does not parse, or a voter set that cannot exist."""


def directory_or_none(directory_id: uuid.UUID | None) -> uuid.UUID | None:
    """Kafka's ZERO_UUID on the wire means "no directory id"."""
    return None if directory_id is None or directory_id == ZERO_UUID else directory_id


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VoterNode:
    voter_id: int
    directory_id: uuid.UUID | None
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 1

    def matches(self, directory_id: uuid.UUID | None) -> bool:
        return self.directory_id is None or directory_id is None or self.directory_id == directory_id

    def address(self, listener: str | None = None) -> tuple[str, int] | None:
        """The (host, port) on ``listener``, or on the first listener when none is named."""
        for endpoint in self.endpoints:
            if listener is None or endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


class VoterSet:
    """An immutable set of voters keyed by id."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Iterable[VoterNode]) -> None:
        by_id: dict[int, VoterNode] = {}
        for voter in voters:
            if voter.voter_id < 0:
                raise InvalidVotersError(f"voter id {voter.voter_id} is negative")
            if voter.voter_id in by_id:
                raise InvalidVotersError(f"voter {voter.voter_id} appears twice")
            by_id[voter.voter_id] = voter
        self._voters: Mapping[int, VoterNode] = by_id

    @classmethod
    def parse(cls, value: str, listener: str = DEFAULT_LISTENER) -> "VoterSet":
        """``controller.quorum.voters``: comma-separated ``id@host:port`` (IPv6 hosts in brackets)."""
        voters = []
        for entry in (e.strip() for e in value.split(",")):
            if not entry:
                continue
            node, sep, address = entry.partition("@")
            host, colon, port = address.rpartition(":")
            if not sep or not colon or not host or not node.strip().isdigit() or not port.isdigit():
                raise InvalidVotersError(f"controller.quorum.voters entry {entry!r} is not id@host:port")
            host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
            if not 0 <= int(port) <= 65535:
                raise InvalidVotersError(f"port {port} of voter {node} is out of range")
            voters.append(VoterNode(int(node), None, (Endpoint(listener, host, int(port)),), 0, 0))
        if not voters:
            raise InvalidVotersError("controller.quorum.voters names no voter")
        return cls(voters)

    @classmethod
    def from_voters_record(cls, record: VotersRecord) -> "VoterSet":
        return cls(
            VoterNode(
                int(v.voter_id),
                directory_or_none(v.voter_directory_id),
                tuple(Endpoint(e.name, e.host, int(e.port)) for e in v.endpoints),
                int(v.k_raft_version_feature.min_supported_version),
                int(v.k_raft_version_feature.max_supported_version),
            )
            for v in record.voters
        )

    def to_voters_record(self) -> VotersRecord:
        return VotersRecord(
            version=0,
            voters=tuple(
                Voter(
                    voter_id=v.voter_id,
                    voter_directory_id=v.directory_id,
                    endpoints=tuple(RecordEndpoint(name=e.listener, host=e.host, port=e.port) for e in v.endpoints),
                    k_raft_version_feature=KRaftVersionFeature(min_supported_version=v.min_kraft_version, max_supported_version=v.max_kraft_version),
                )
                for v in self
            ),
        )

    def __iter__(self) -> Iterator[VoterNode]:
        return iter(sorted(self._voters.values(), key=lambda v: v.voter_id))

    def __len__(self) -> int:
        return len(self._voters)

    def __contains__(self, voter_id: object) -> bool:
        return voter_id in self._voters

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and dict(self._voters) == dict(other._voters)

    def __hash__(self) -> int:
        return hash(frozenset(self._voters.values()))

    def __repr__(self) -> str:
        return f"VoterSet({sorted(self._voters)})"

    def ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    def get(self, voter_id: int) -> VoterNode | None:
        return self._voters.get(voter_id)

    def is_voter(self, voter_id: int, directory_id: uuid.UUID | None = None) -> bool:
        voter = self._voters.get(voter_id)
        return voter is not None and voter.matches(directory_id)

    def majority_size(self) -> int:
        return len(self._voters) // 2 + 1

    def address(self, voter_id: int, listener: str | None = None) -> tuple[str, int] | None:
        voter = self._voters.get(voter_id)
        return None if voter is None else voter.address(listener)

    def with_voter(self, voter: VoterNode) -> "VoterSet":
        """Add ``voter``, or replace the one with its id (UpdateRaftVoter)."""
        others = [v for v in self._voters.values() if v.voter_id != voter.voter_id]
        return VoterSet([*others, voter])

    def update_voter_ignoring_directory_id(self, voter: VoterNode) -> "VoterSet | None":
        """Kafka's updateVoterIgnoringDirectoryId (kraft.version 0): replace the voter with ``voter``'s id,
        taking its directory id too; None when no voter has that id."""
        return self.with_voter(voter) if voter.voter_id in self._voters else None

    def voter_node_needs_update(self, updated: VoterNode) -> bool:
        """Kafka's voterNodeNeedsUpdate: ``updated`` is this set's voter of its id (and of its
        directory id, when the set records one) but differs from the entry: other endpoints (in any
        order) or another kraft.version range."""
        node = self._voters.get(updated.voter_id)
        if node is None or (node.directory_id is not None and node.directory_id != updated.directory_id):
            return False
        return (
            node.directory_id != updated.directory_id
            or set(node.endpoints) != set(updated.endpoints)
            or (node.min_kraft_version, node.max_kraft_version) != (updated.min_kraft_version, updated.max_kraft_version)
        )

    def supports_version(self, kraft_version: int) -> bool:
        """Every voter's supported kraft.version range holds ``kraft_version``."""
        return all(v.min_kraft_version <= kraft_version <= v.max_kraft_version for v in self._voters.values())

    def without_voter(self, voter_id: int) -> "VoterSet":
        return VoterSet(v for v in self._voters.values() if v.voter_id != voter_id)

    def overlaps_majority(self, other: "VoterSet") -> bool:
        """At most one voter differs, so any majority of one meets any majority of the other (KIP-853's rule)."""
        return len(self.ids() ^ other.ids()) <= 1


__all__ = ["DEFAULT_LISTENER", "Endpoint", "InvalidVotersError", "VoterNode", "VoterSet", "directory_or_none"]
