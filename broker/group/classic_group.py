"""A classic-protocol group: its members, generation and state machine (Kafka's ClassicGroup).

Members run the JoinGroup/SyncGroup dance; the coordinator only picks the protocol the
members share and relays the leader's assignment. Requests that wait (a JoinGroup until
every member has rejoined, a SyncGroup until the leader's assignment) are held as opaque
``Responder`` handles: this module never completes them, it only says who is waiting.
"""

from __future__ import annotations

import copy
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable

from broker.group.coordinator_records import GroupMetadataKey, GroupMetadataValue, MemberMetadata

Responder = Hashable


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's ClassicGroupState: the states each state may be entered from.
_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY}
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(ClassicGroupState),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: Responder | None = None
    awaiting_sync: Responder | None = None
    # A member that joined but never completed a generation: it expires sooner
    # (classic.group.new.member.join.timeout.ms) if it vanishes mid-join.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet seen again.
    pending_members: set[str] = field(default_factory=set)
    # Set while an initial (empty group) join is being delayed by group.initial.rebalance.delay.ms.
    initial_join_deadline_ms: int | None = None
    initial_join_remaining_ms: int = 0
    new_member_added: bool = False
    _protocol_votes: Counter[str] = field(default_factory=Counter)

    def copy(self) -> ClassicGroup:
        """A copy to revert to: containers and members copied; a member's fields are replaced,
        never changed in place, and the requests members wait in are the same requests."""
        group = copy.copy(self)
        group.members = {member_id: copy.copy(member) for member_id, member in self.members.items()}
        group.static_members = dict(self.static_members)
        group.pending_members = set(self.pending_members)
        group._protocol_votes = Counter(self._protocol_votes)
        return group

    # -- state ------------------------------------------------------------------------------------

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id} cannot go from {self.state.value} to {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    # -- members ----------------------------------------------------------------------------------

    def add(self, member: ClassicGroupMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._protocol_votes.update(name for name, _ in member.protocols)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        self.pending_members.discard(member_id)
        if member is None:
            return None
        self._protocol_votes.subtract(name for name, _ in member.protocols)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_protocols(self, member: ClassicGroupMember, protocols: tuple[tuple[str, bytes], ...]) -> None:
        self._protocol_votes.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self._protocol_votes.update(name for name, _ in protocols)

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """A static member came back under a new member id: same member, same assignment."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    # -- protocols --------------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's rule: an empty group takes any non-empty offer; otherwise the type must
        match and at least one protocol must be supported by every current member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(self._protocol_votes[name] == len(self.members) for name in names)

    def candidate_protocols(self) -> set[str]:
        return {name for name, count in self._protocol_votes.items() if count == len(self.members)}

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalStateTransition(f"no protocol common to the members of group {self.group_id}")
        votes = Counter(member.vote(candidates) for member in self.members.values())
        # Ties go to the name first in the votes' order of appearance, i.e. the first member's choice.
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(ClassicGroupState.EMPTY, now_ms)
        for member in self.members.values():
            member.is_new = False

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- records ----------------------------------------------------------------------------------

    def to_record(self, now_ms: int) -> tuple[GroupMetadataKey, GroupMetadataValue]:
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name) if self.protocol_name else b"",
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=now_ms,
            members=members,
        )
        return GroupMetadataKey(group=self.group_id), value

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group as last persisted: Stable with its members, or Empty."""
        group = cls(
            group_id=group_id,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
            state_timestamp_ms=value.current_state_timestamp,
        )
        for m in value.members:
            protocols = ((value.protocol, m.subscription),) if value.protocol else ()
            group.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout,
                    session_timeout_ms=m.session_timeout,
                    protocol_type=value.protocol_type,
                    protocols=protocols,
                    assignment=m.assignment,
                )
            )
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.state = ClassicGroupState.STABLE if group.members else ClassicGroupState.EMPTY
        return group
