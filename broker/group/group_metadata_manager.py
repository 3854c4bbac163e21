"""The classic group protocol, sans-IO: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
the group admin calls, for the groups of one ``__consumer_offsets`` partition.

Each call takes the request's fields, a ``Responder`` handle for the caller and the time,
and returns a ``CoordinatorResult``: records to append to the partition, responses to
hand to waiting requests (the caller's own, or others' that this call completes) and
timers to arm or cancel. The shell appends the records before it sends the responses.
Rules, error codes and their order follow Kafka 4.0's GroupMetadataManager for classic
groups.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from broker.group.classic_group import ClassicGroup, ClassicGroupMember, ClassicGroupState, Responder
from broker.group.coordinator_records import GroupMetadataKey, GroupMetadataValue

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82

UNKNOWN_MEMBER = ""
NO_GENERATION = -1
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int
    member_id: str = UNKNOWN_MEMBER
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """Heartbeat's whole answer; also the per-member answer of LeaveGroup."""

    error_code: int


@dataclass(frozen=True, slots=True)
class Respond:
    responder: Responder
    response: JoinGroupResponse | SyncGroupResponse | ErrorResponse


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    key: tuple[str, ...]
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: tuple[str, ...]


Record = tuple[object, object | None]
TimerAction = ScheduleTimer | CancelTimer


@dataclass(slots=True)
class CoordinatorResult:
    records: list[Record] = field(default_factory=list)
    responses: list[Respond] = field(default_factory=list)
    timers: list[TimerAction] = field(default_factory=list)

    def extend(self, other: CoordinatorResult) -> None:
        self.records.extend(other.records)
        self.responses.extend(other.responses)
        self.timers.extend(other.timers)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300000


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str
    client_host: str
    # JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED and its id (KIP-394).
    require_known_member_id: bool
    # JoinGroup v9+: a static leader that rejoins a Stable group need not reassign (KIP-814).
    supports_skip_assignment: bool


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> tuple[str, ...]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, ...]:
    return ("sync", group_id)


class GroupMetadataManager:
    """The classic groups of one coordinator partition."""

    def __init__(
        self,
        config: GroupConfig,
        new_member_suffix: Callable[[], str] = lambda: str(uuid.uuid4()),
        is_other_protocol_group: Callable[[str], bool] = lambda group_id: False,
    ) -> None:
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self._suffix = new_member_suffix
        # A group id the consumer (KIP-848) protocol already holds cannot be joined classically.
        self._is_other_protocol_group = is_other_protocol_group

    # -- lookups -----------------------------------------------------------------------------------

    def group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return None if group is None or group.is_in(ClassicGroupState.DEAD) else group

    def get_or_create_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = self.group(group_id)
        if group is None:
            group = ClassicGroup(group_id, state_timestamp_ms=now_ms)
            self.groups[group_id] = group
        return group

    # -- JoinGroup ---------------------------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest, responder: Responder, now_ms: int) -> CoordinatorResult:
        def fail(code: int, member_id: str = request.member_id) -> CoordinatorResult:
            return CoordinatorResult(responses=[Respond(responder, JoinGroupResponse(code, member_id=member_id))])

        if not request.group_id:
            return fail(INVALID_GROUP_ID)
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms:
            return fail(INVALID_SESSION_TIMEOUT)
        if self._is_other_protocol_group(request.group_id):
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        group = self.group(request.group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER:
                return fail(UNKNOWN_MEMBER_ID)
            group = self.get_or_create_group(request.group_id, now_ms)
        if request.member_id not in group.members and len(group.members) >= self.config.max_size:
            return fail(GROUP_MAX_SIZE_REACHED)
        if not group.supports_protocols(request.protocol_type, {name for name, _ in request.protocols}):
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if request.member_id == UNKNOWN_MEMBER:
            return self._join_unknown_member(group, request, responder, now_ms)
        return self._join_known_member(group, request, responder, now_ms)

    def _join_unknown_member(self, group: ClassicGroup, request: JoinGroupRequest, responder: Responder, now_ms: int) -> CoordinatorResult:
        new_member_id = (request.group_instance_id or request.client_id) + "-" + self._suffix()
        if request.group_instance_id is not None:
            old_member_id = group.static_member_id(request.group_instance_id)
            if old_member_id is not None:
                return self._rejoin_static_member(group, request, old_member_id, new_member_id, responder, now_ms)
            return self._add_member_and_rebalance(group, request, new_member_id, responder, now_ms)
        if request.require_known_member_id:
            group.pending_members.add(new_member_id)
            result = CoordinatorResult(responses=[Respond(responder, JoinGroupResponse(MEMBER_ID_REQUIRED, member_id=new_member_id))])
            result.timers.append(ScheduleTimer(heartbeat_key(group.group_id, new_member_id), now_ms + request.session_timeout_ms))
            return result
        return self._add_member_and_rebalance(group, request, new_member_id, responder, now_ms)

    def _join_known_member(self, group: ClassicGroup, request: JoinGroupRequest, responder: Responder, now_ms: int) -> CoordinatorResult:
        member_id = request.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return self._add_member_and_rebalance(group, request, member_id, responder, now_ms)
        error = validate_member(group, member_id, request.group_instance_id)
        if error:
            return CoordinatorResult(responses=[Respond(responder, JoinGroupResponse(error, member_id=member_id))])
        member = group.members[member_id]
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, request, responder, now_ms)
        if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # A retried JoinGroup whose response was lost: answer with the current generation.
                result = CoordinatorResult(responses=[Respond(responder, self._join_response(group, member))])
                return result
            return self._update_member_and_rebalance(group, member, request, responder, now_ms)
        if group.is_in(ClassicGroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # The leader rejoining (or a member whose subscription changed) asks for a new assignment.
                return self._update_member_and_rebalance(group, member, request, responder, now_ms)
            return CoordinatorResult(responses=[Respond(responder, self._join_response(group, member))])
        return CoordinatorResult(responses=[Respond(responder, JoinGroupResponse(UNKNOWN_MEMBER_ID, member_id=member_id))])

    def _rejoin_static_member(
        self, group: ClassicGroup, request: JoinGroupRequest, old_member_id: str, new_member_id: str, responder: Responder, now_ms: int
    ) -> CoordinatorResult:
        """KIP-345: a restarted static member takes over its old identity and assignment."""
        result = CoordinatorResult()
        old = group.members[old_member_id]
        # Whoever still waits under the old member id is a zombie of the same instance.
        if old.awaiting_join is not None:
            result.responses.append(Respond(old.awaiting_join, JoinGroupResponse(FENCED_INSTANCE_ID, member_id=old_member_id)))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            result.responses.append(Respond(old.awaiting_sync, SyncGroupResponse(FENCED_INSTANCE_ID)))
            old.awaiting_sync = None
        result.timers.append(CancelTimer(heartbeat_key(group.group_id, old_member_id)))
        old_protocols = old.protocols
        member = group.replace_static_member(request.group_instance_id or "", old_member_id, new_member_id)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        if group.is_in(ClassicGroupState.STABLE):
            if request.protocols != old_protocols and (group.protocol_name is None or _metadata_of(request.protocols, group.protocol_name) != _metadata_of(old_protocols, group.protocol_name)):
                group.update_protocols(member, request.protocols)
                return self._prepare_then_join(group, member, responder, now_ms, result)
            group.update_protocols(member, request.protocols)
            # Persist the new member id, then answer with the current generation and no rebalance.
            result.records.append(group.to_record(now_ms))
            skip = group.is_leader(new_member_id) and request.supports_skip_assignment
            response = self._join_response(group, member, skip_assignment=skip)
            if group.is_leader(new_member_id) and not request.supports_skip_assignment:
                # An old client would reassign on seeing itself leader; keep the group as is.
                response = JoinGroupResponse(
                    NONE, member_id=new_member_id, generation_id=group.generation_id, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, leader=group.leader_id or "", members=(),
                )
            result.responses.append(Respond(responder, response))
            result.timers.append(ScheduleTimer(heartbeat_key(group.group_id, new_member_id), now_ms + member.session_timeout_ms))
            return result
        group.update_protocols(member, request.protocols)
        if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            return self._prepare_then_join(group, member, responder, now_ms, result)
        member.awaiting_join = responder
        result.extend(self._maybe_prepare_rebalance(group, now_ms))
        result.extend(self._maybe_complete_join(group, now_ms))
        return result

    def _prepare_then_join(self, group: ClassicGroup, member: ClassicGroupMember, responder: Responder, now_ms: int, result: CoordinatorResult) -> CoordinatorResult:
        member.awaiting_join = responder
        result.extend(self._prepare_rebalance(group, now_ms))
        result.extend(self._maybe_complete_join(group, now_ms))
        return result

    def _add_member_and_rebalance(self, group: ClassicGroup, request: JoinGroupRequest, member_id: str, responder: Responder, now_ms: int) -> CoordinatorResult:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            awaiting_join=responder,
            is_new=True,
        )
        group.add(member)
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.initial_join_deadline_ms is not None:
            group.new_member_added = True
        result = CoordinatorResult()
        # A new member that vanishes before the join completes must not hold the group up forever.
        result.timers.append(ScheduleTimer(heartbeat_key(group.group_id, member_id), now_ms + self.config.new_member_join_timeout_ms))
        result.extend(self._maybe_prepare_rebalance(group, now_ms))
        result.extend(self._maybe_complete_join(group, now_ms))
        return result

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: ClassicGroupMember, request: JoinGroupRequest, responder: Responder, now_ms: int
    ) -> CoordinatorResult:
        result = CoordinatorResult()
        if member.awaiting_join is not None and member.awaiting_join != responder:
            # The client gave up on its earlier JoinGroup and sent another: answer the old one.
            result.responses.append(Respond(member.awaiting_join, JoinGroupResponse(UNKNOWN_MEMBER_ID, member_id=member.member_id)))
        group.update_protocols(member, request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.awaiting_join = responder
        result.extend(self._maybe_prepare_rebalance(group, now_ms))
        result.extend(self._maybe_complete_join(group, now_ms))
        return result

    def _join_response(self, group: ClassicGroup, member: ClassicGroupMember, skip_assignment: bool = False) -> JoinGroupResponse:
        members: tuple[JoinGroupMember, ...] = ()
        if group.is_leader(member.member_id) and group.protocol_name is not None:
            members = tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values()
            )
        return JoinGroupResponse(
            NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            members=members,
        )

    # -- rebalance ---------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        if group.is_in(ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY):
            return self._prepare_rebalance(group, now_ms)
        return CoordinatorResult()

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        result = CoordinatorResult()
        if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            # The assignment being synced is void: its members must rejoin.
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync is not None:
                    result.responses.append(Respond(member.awaiting_sync, SyncGroupResponse(REBALANCE_IN_PROGRESS)))
                    member.awaiting_sync = None
            result.timers.append(CancelTimer(sync_key(group.group_id)))
        was_empty = group.is_in(ClassicGroupState.EMPTY)
        group.transition_to(ClassicGroupState.PREPARING_REBALANCE, now_ms)
        rebalance_timeout = group.rebalance_timeout_ms
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            # Let the other members of a starting group arrive before the first generation.
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_join_deadline_ms = now_ms + delay
            group.initial_join_remaining_ms = max(rebalance_timeout - self.config.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            result.timers.append(ScheduleTimer(join_key(group.group_id), now_ms + delay))
        else:
            group.initial_join_deadline_ms = None
            result.timers.append(ScheduleTimer(join_key(group.group_id), now_ms + rebalance_timeout))
        return result

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.initial_join_deadline_ms is None and group.has_all_members_joined():
            result = CoordinatorResult(timers=[CancelTimer(join_key(group.group_id))])
            result.extend(self._complete_join(group, now_ms))
            return result
        return CoordinatorResult()

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        result = CoordinatorResult()
        for member in group.not_yet_rejoined():
            if not member.is_static:
                group.remove(member.member_id)
                result.timers.append(CancelTimer(heartbeat_key(group.group_id, member.member_id)))
        for member_id in list(group.pending_members):
            group.pending_members.discard(member_id)
            result.timers.append(CancelTimer(heartbeat_key(group.group_id, member_id)))
        group.init_next_generation(now_ms)
        if group.is_in(ClassicGroupState.EMPTY):
            result.records.append(group.to_record(now_ms))
            return result
        for member in group.members.values():
            if member.awaiting_join is not None:
                result.responses.append(Respond(member.awaiting_join, self._join_response(group, member)))
                member.awaiting_join = None
            result.timers.append(ScheduleTimer(heartbeat_key(group.group_id, member.member_id), now_ms + member.session_timeout_ms))
        # Members that never send SyncGroup are removed after the rebalance timeout.
        result.timers.append(ScheduleTimer(sync_key(group.group_id), now_ms + group.rebalance_timeout_ms))
        return result

    # -- SyncGroup ---------------------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        responder: Responder,
        now_ms: int,
    ) -> CoordinatorResult:
        def answer(response: SyncGroupResponse) -> CoordinatorResult:
            return CoordinatorResult(responses=[Respond(responder, response)])

        group = self.group(group_id)
        if group is None:
            return answer(SyncGroupResponse(UNKNOWN_MEMBER_ID))
        error = validate_member(group, member_id, group_instance_id)
        if error:
            return answer(SyncGroupResponse(error))
        if generation_id != group.generation_id:
            return answer(SyncGroupResponse(ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return answer(SyncGroupResponse(INCONSISTENT_GROUP_PROTOCOL))
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return answer(SyncGroupResponse(REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        result = CoordinatorResult(timers=[ScheduleTimer(heartbeat_key(group_id, member_id), now_ms + member.session_timeout_ms)])
        if group.is_in(ClassicGroupState.STABLE):
            result.responses.append(Respond(responder, self._sync_response(group, member)))
            return result
        member.awaiting_sync = responder
        if group.is_leader(member_id):
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            result.records.append(group.to_record(now_ms))
            group.transition_to(ClassicGroupState.STABLE, now_ms)
            result.timers.append(CancelTimer(sync_key(group_id)))
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    result.responses.append(Respond(m.awaiting_sync, self._sync_response(group, m)))
                    m.awaiting_sync = None
        return result

    @staticmethod
    def _sync_response(group: ClassicGroup, member: ClassicGroupMember) -> SyncGroupResponse:
        return SyncGroupResponse(NONE, group.protocol_type, group.protocol_name, member.assignment)

    # -- Heartbeat and LeaveGroup ------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int) -> tuple[int, CoordinatorResult]:
        group = self.group(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID, CoordinatorResult()
        error = validate_member(group, member_id, group_instance_id)
        if error:
            return error, CoordinatorResult()
        if group.is_in(ClassicGroupState.EMPTY):
            return UNKNOWN_MEMBER_ID, CoordinatorResult()
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION, CoordinatorResult()
        member = group.members[member_id]
        result = CoordinatorResult(timers=[ScheduleTimer(heartbeat_key(group_id, member_id), now_ms + member.session_timeout_ms)])
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return REBALANCE_IN_PROGRESS, result
        return NONE, result

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int) -> tuple[int, list[tuple[str, str | None, int]], CoordinatorResult]:
        """(top-level error, [(member id, instance id, error)], result) for LeaveGroup's members."""
        group = self.group(group_id)
        if group is None:
            # Kafka 4.4 answers each member of a group it does not know, not the request.
            return NONE, [(member_id, instance_id, UNKNOWN_MEMBER_ID) for member_id, instance_id in members], CoordinatorResult()
        result = CoordinatorResult()
        answers: list[tuple[str, str | None, int]] = []
        leaving: list[str] = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = group.static_member_id(instance_id)
                if known is None:
                    answers.append((member_id, instance_id, UNKNOWN_MEMBER_ID))
                elif member_id != UNKNOWN_MEMBER and member_id != known:
                    answers.append((member_id, instance_id, FENCED_INSTANCE_ID))
                else:
                    answers.append((member_id, instance_id, NONE))
                    leaving.append(known)
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                result.timers.append(CancelTimer(heartbeat_key(group_id, member_id)))
                answers.append((member_id, None, NONE))
            elif member_id in group.members:
                answers.append((member_id, None, NONE))
                leaving.append(member_id)
            else:
                answers.append((member_id, None, UNKNOWN_MEMBER_ID))
        if leaving:
            for member_id in dict.fromkeys(leaving):
                result.extend(self._remove_member(group, member_id))
            result.extend(self._rebalance_after_removal(group, now_ms))
        elif any(code == NONE for _, _, code in answers):
            result.extend(self._maybe_complete_join(group, now_ms))
        return NONE, answers, result

    def _remove_member(self, group: ClassicGroup, member_id: str) -> CoordinatorResult:
        result = CoordinatorResult(timers=[CancelTimer(heartbeat_key(group.group_id, member_id))])
        member = group.remove(member_id)
        if member is not None:
            if member.awaiting_join is not None:
                result.responses.append(Respond(member.awaiting_join, JoinGroupResponse(UNKNOWN_MEMBER_ID, member_id=member_id)))
            if member.awaiting_sync is not None:
                result.responses.append(Respond(member.awaiting_sync, SyncGroupResponse(UNKNOWN_MEMBER_ID)))
        return result

    def _rebalance_after_removal(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        if group.is_in(ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            result = self._prepare_rebalance(group, now_ms)
            result.extend(self._maybe_complete_join(group, now_ms))
            return result
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return self._maybe_complete_join(group, now_ms)
        return CoordinatorResult()

    # -- timers ------------------------------------------------------------------------------------

    def on_timer(self, key: tuple[str, ...], now_ms: int) -> CoordinatorResult:
        kind, group_id = key[0], key[1]
        group = self.group(group_id)
        if group is None:
            return CoordinatorResult()
        if kind == "heartbeat":
            return self._expire_member(group, key[2], now_ms)
        if kind == "join" and group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            if group.initial_join_deadline_ms is not None:
                return self._extend_initial_join(group, now_ms)
            return self._complete_join(group, now_ms)
        if kind == "sync" and group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            result = CoordinatorResult()
            for member in list(group.members.values()):
                if member.awaiting_sync is None:
                    result.extend(self._remove_member(group, member.member_id))
            result.extend(self._rebalance_after_removal(group, now_ms))
            return result
        return CoordinatorResult()

    def _extend_initial_join(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult:
        """Kafka's InitialDelayedJoin: while members keep arriving, wait another delay."""
        if group.new_member_added and group.initial_join_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_join_remaining_ms)
            group.initial_join_remaining_ms = max(group.initial_join_remaining_ms - self.config.initial_rebalance_delay_ms, 0)
            group.initial_join_deadline_ms = now_ms + delay
            return CoordinatorResult(timers=[ScheduleTimer(join_key(group.group_id), now_ms + delay)])
        group.initial_join_deadline_ms = None
        return self._complete_join(group, now_ms)

    def _expire_member(self, group: ClassicGroup, member_id: str, now_ms: int) -> CoordinatorResult:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return self._maybe_complete_join(group, now_ms)
        member = group.members.get(member_id)
        if member is None:
            return CoordinatorResult()
        if member.awaiting_sync is not None or (member.awaiting_join is not None and not member.is_new):
            # Waiting on the coordinator, not lost: the join and sync timeouts govern it.
            return CoordinatorResult(timers=[ScheduleTimer(heartbeat_key(group.group_id, member_id), now_ms + member.session_timeout_ms)])
        result = self._remove_member(group, member_id)
        if group.is_in(ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.PREPARING_REBALANCE):
            result.extend(self._rebalance_after_removal(group, now_ms))
        return result

    # -- admin -------------------------------------------------------------------------------------

    def describe(self, group_id: str) -> DescribedGroup:
        group = self.group(group_id)
        if group is None:
            return DescribedGroup(group_id, NONE, ClassicGroupState.DEAD.value, "", "", ())
        stable = group.is_in(ClassicGroupState.STABLE)
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(group_id, NONE, group.state.value, group.protocol_type or "", group.protocol_name or "" if stable else "", members)

    def delete_group_check(self, group_id: str) -> int:
        group = self.group(group_id)
        if group is None:
            return GROUP_ID_NOT_FOUND
        if not group.is_in(ClassicGroupState.EMPTY):
            return NON_EMPTY_GROUP
        return NONE

    def delete_group(self, group_id: str, now_ms: int) -> CoordinatorResult:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = ClassicGroupState.DEAD
            group.state_timestamp_ms = now_ms
        return CoordinatorResult(records=[(GroupMetadataKey(group=group_id), None)])

    # -- replay ------------------------------------------------------------------------------------

    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            self.groups.pop(key.group, None)
        else:
            self.groups[key.group] = ClassicGroup.from_record(key.group, value)

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        """Loaded members get a full session to heartbeat the new coordinator."""
        return CoordinatorResult(timers=[t for group in self.groups.values() for t in _session_timers(group, now_ms)])

    def on_reverted(self, group_id: str, now_ms: int) -> CoordinatorResult:
        """The group was taken back to before a write that failed: its members get a full
        session again, and the rebalance it is in its join or sync deadline."""
        group = self.group(group_id)
        if group is None:
            return CoordinatorResult()
        timers = _session_timers(group, now_ms)
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            deadline = group.initial_join_deadline_ms if group.initial_join_deadline_ms is not None else now_ms + group.rebalance_timeout_ms
            timers.append(ScheduleTimer(join_key(group_id), deadline))
        elif group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            timers.append(ScheduleTimer(sync_key(group_id), now_ms + group.rebalance_timeout_ms))
        return CoordinatorResult(timers=timers)

    def responders(self, group_id: str) -> set[Responder]:
        """The requests the group's members are waiting in (JoinGroup, SyncGroup)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {r for m in group.members.values() for r in (m.awaiting_join, m.awaiting_sync) if r is not None}

    def forget_responders(self, group_id: str, answered: set[Responder]) -> None:
        """Requests answered elsewhere (a failed write answers its own) are no longer waiting."""
        group = self.groups.get(group_id)
        if group is None:
            return
        for member in group.members.values():
            if member.awaiting_join in answered:
                member.awaiting_join = None
            if member.awaiting_sync in answered:
                member.awaiting_sync = None


def _session_timers(group: ClassicGroup, now_ms: int) -> list[TimerAction]:
    return [ScheduleTimer(heartbeat_key(group.group_id, m.member_id), now_ms + m.session_timeout_ms) for m in group.members.values()]


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
    """Kafka's validateCurrentMember: static members are matched by instance id first."""
    if instance_id is not None:
        known = group.static_member_id(instance_id)
        if known is None:
            return UNKNOWN_MEMBER_ID if member_id not in group.members else NONE
        if known != member_id:
            return FENCED_INSTANCE_ID
        return NONE
    return NONE if member_id in group.members else UNKNOWN_MEMBER_ID


def _metadata_of(protocols: tuple[tuple[str, bytes], ...], name: str) -> bytes | None:
    return next((metadata for n, metadata in protocols if n == name), None)
