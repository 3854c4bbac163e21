"""What the managers of the modern groups (KIP-848 consumer, KIP-932 share and KIP-1071 streams
groups) share, sans-IO, as the parts of Kafka's GroupMetadataManager common to the three do.

A manager holds the groups of one type in one ``__consumer_offsets`` partition. Each call decides
records to append to the partition, a response and timers to arm or cancel (a ``GroupResult``);
``_apply`` then moves the state only by replaying those records, exactly as a new coordinator
rebuilds it from the partition, so the two can never disagree. Once ``journal`` is called, each
group is kept as it was before records first changed it: what the shard reverts to when their
write fails.

A subclass names its group, member and result types and its timers, and supplies ``replay`` (its
records, through the ``_replay_*`` steps they share), ``_fence_member``, ``_group_tombstones`` and
``session_timeout_ms_of``.
"""

from __future__ import annotations

import enum
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

# The timer actions are the classic groups' own, so the shell arms every kind alike.
from broker.group.group_metadata_manager import CancelTimer, ScheduleTimer

NONE = 0
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110

JOIN_GROUP_MEMBER_EPOCH = 0

Record = tuple[object, object | None]
TimerAction = ScheduleTimer | CancelTimer
Response = TypeVar("Response")
Key = TypeVar("Key")


class GroupError(Exception):
    """A request the group refuses, with Kafka's error code and message."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(slots=True)
class GroupResult(Generic[Response]):
    records: list[Record] = field(default_factory=list)
    response: Response | None = None
    timers: list[TimerAction] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


def timer_key(kind: str, group_id: str, member_id: str) -> tuple[str, ...]:
    return (kind, group_id, member_id)


def throw_if_empty_string(value: str | None, message: str) -> None:
    if value is not None and not value.strip():
        raise GroupError(INVALID_REQUEST, message)


class _Member(Protocol):
    @property
    def member_id(self) -> str: ...


def throw_if_instance_id_is_fenced(member: _Member, member_id: str, instance_id: str) -> None:
    if member.member_id != member_id:
        raise GroupError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} was fenced by member {member.member_id}.")


class _EpochMember(Protocol):
    @property
    def member_epoch(self) -> int: ...

    @property
    def previous_member_epoch(self) -> int: ...


def throw_if_member_epoch_is_invalid(
    type_name: str, member: _EpochMember, received_epoch: int, owns_only_what_it_was_given: Callable[[], bool] = lambda: True
) -> None:
    """Epoch 0 rejoins (after fencing, as KIP-848 specifies: KAFKA-19233); the previous epoch is
    accepted because the response that bumped it may be lost, as long as the member owns nothing
    it was not given."""
    if received_epoch == JOIN_GROUP_MEMBER_EPOCH:
        return
    if received_epoch > member.member_epoch:
        raise GroupError(
            FENCED_MEMBER_EPOCH,
            f"The {type_name} group member has a greater member epoch ({received_epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received_epoch < member.member_epoch and (received_epoch != member.previous_member_epoch or not owns_only_what_it_was_given()):
        raise GroupError(
            FENCED_MEMBER_EPOCH,
            f"The {type_name} group member has a smaller member epoch ({received_epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def is_subset(owned: Mapping[Key, frozenset[int]] | None, assigned: Mapping[Key, frozenset[int]]) -> bool:
    """Whether the partitions (tasks) a member says it owns are all among those it was given; None: it did not say."""
    if owned is None:
        return False
    return all(ps <= assigned.get(key, frozenset()) for key, ps in owned.items())


class ModernGroup(Protocol):
    target_assignment: dict[str, Any]
    target_assignment_epoch: int

    @property
    def group_id(self) -> str: ...

    @property
    def members(self) -> Mapping[str, Any]: ...

    @property
    def state(self) -> enum.Enum: ...

    def copy(self) -> Any: ...

    def update_member(self, member: Any) -> None: ...

    def remove_member(self, member_id: str) -> None: ...


class _WithStaticMembers(Protocol):
    @property
    def group_id(self) -> str: ...

    @property
    def members(self) -> Mapping[str, Any]: ...

    def static_member(self, instance_id: str) -> Any | None: ...


GroupT = TypeVar("GroupT", bound=ModernGroup)
ResultT = TypeVar("ResultT", bound=GroupResult[Any])


class ModernGroupManager(ABC, Generic[GroupT]):
    """``is_other_group(group_id)`` tells whether a group of another type holds the id."""

    group_type: Callable[[str], GroupT]
    member_type: Callable[[str], Any]
    result_type: type[GroupResult[Any]] = GroupResult
    type_name: str  # "consumer", "share", "streams", as Kafka's messages name the group
    session_timeout_timer: str
    rebalance_timeout_timer: str | None = None  # None: members never have anything to revoke

    def __init__(self, *, is_other_group: Callable[[str], bool]) -> None:
        self._is_other_group = is_other_group
        self.groups: dict[str, GroupT] = {}
        # Soft state, never persisted: the deadline of every armed timer, kept in step with the
        # timer actions handed out, so that a stale or early firing changes nothing.
        self._deadlines: dict[tuple[str, ...], int] = {}
        # Set by ``journal``: each group as it was before records first changed it since.
        self._journal: dict[str, GroupT | None] | None = None

    @abstractmethod
    def session_timeout_ms_of(self, group_id: str) -> int: ...

    @abstractmethod
    def replay(self, key: object, value: object | None) -> None:
        """Apply one record of the partition; records of other kinds are ignored."""

    @abstractmethod
    def _fence_member(self, group: GroupT, member: Any, response: Response | None) -> GroupResult[Response]:
        """Remove the member and bump the group epoch."""

    @abstractmethod
    def _group_tombstones(self, group: GroupT) -> list[Record]:
        """What deleting the empty group writes."""

    def _revoking(self, member: Any) -> bool:
        """Whether the member still has something to revoke: what its rebalance timeout waits for."""
        return False

    # -- the groups --------------------------------------------------------------------------------

    def _group(self, group_id: str, *, create: bool) -> GroupT:
        """The group, or (``create``) a new one that the records will create when they are replayed."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self._is_other_group(group_id):
            raise GroupError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {self.type_name} group.")
        if not create:
            raise GroupError(GROUP_ID_NOT_FOUND, f"{self.type_name.capitalize()} group {group_id} not found.")
        return self.group_type(group_id)

    def _existing_group(self, group_id: str) -> GroupT:
        """GroupMetadataManager.consumerGroup (shareGroup, streamsGroup), with its messages (the heartbeat's differ)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self._is_other_group(group_id):
            raise GroupError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {self.type_name} group.")
        raise GroupError(GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")

    def _leaving_member(self, group: _WithStaticMembers, member_id: str, instance_id: str | None) -> Any:
        """The member a leave names: by its member id, or a static member by its instance id."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
            return member
        static = group.static_member(instance_id)
        if static is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        throw_if_instance_id_is_fenced(static, member_id, instance_id)
        return static

    def list_groups(self) -> list[tuple[str, str]]:
        return [(group_id, group.state.value) for group_id, group in self.groups.items()]

    def delete_group(self, group_id: str) -> GroupResult[int]:
        """DeleteGroups: only an empty group goes; the response is the error code."""
        try:
            group = self._existing_group(group_id)
        except GroupError as e:
            return self.result_type(response=e.error_code)
        if group.members:
            return self.result_type(response=NON_EMPTY_GROUP)
        return self._apply(self.result_type(self._group_tombstones(group), NONE))

    # -- timers ------------------------------------------------------------------------------------

    def _session_timer(self, group_id: str, member_id: str, now_ms: int) -> ScheduleTimer:
        return ScheduleTimer(timer_key(self.session_timeout_timer, group_id, member_id), now_ms + self.session_timeout_ms_of(group_id))

    def _rebalance_timer(self, group_id: str, member: Any, now_ms: int) -> TimerAction:
        """Armed while the member has something to revoke: it is fenced if it does not revoke it
        within its rebalance timeout; cancelled once it has."""
        assert self.rebalance_timeout_timer is not None
        key = timer_key(self.rebalance_timeout_timer, group_id, member.member_id)
        if self._revoking(member):
            return ScheduleTimer(key, now_ms + member.rebalance_timeout_ms)
        return CancelTimer(key)

    def _cancel_timers(self, group_id: str, member_id: str) -> list[TimerAction]:
        kinds = [self.session_timeout_timer] if self.rebalance_timeout_timer is None else [self.session_timeout_timer, self.rebalance_timeout_timer]
        return [CancelTimer(timer_key(kind, group_id, member_id)) for kind in kinds]

    def _member_timers(self, group: GroupT, now_ms: int) -> list[TimerAction]:
        """A fresh session for every member, and a fresh rebalance timeout for those still revoking,
        as Kafka's onLoaded arms them."""
        timers: list[TimerAction] = []
        for member in group.members.values():
            timers.append(self._session_timer(group.group_id, member.member_id, now_ms))
            if self._revoking(member):
                timers.append(self._rebalance_timer(group.group_id, member, now_ms))
        return timers

    def on_timer(self, key: tuple[str, ...], now_ms: int) -> GroupResult[None]:
        """A member's session expired, or it did not revoke in time: it is fenced. Keys this
        manager no longer armed are ignored, and one that fires before its deadline (clock
        rounding, a newer deadline) is armed again. A group's own timer (a key of two: kind,
        group id) goes to ``_on_group_timer``."""
        deadline = self._deadlines.get(key)
        if deadline is None:
            return self.result_type()
        if now_ms < deadline:
            return self.result_type(timers=[ScheduleTimer(key, deadline)])
        del self._deadlines[key]
        if len(key) != 3:
            return self._on_group_timer(key, now_ms)
        kind, group_id, member_id = key
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return self.result_type()
        if kind == self.rebalance_timeout_timer and not self._revoking(member):
            return self.result_type()
        return self._fence_member(group, member, None)

    def _on_group_timer(self, key: tuple[str, ...], now_ms: int) -> GroupResult[None]:
        """A group's own timer is due (it is no longer armed)."""
        return self.result_type()

    def on_loaded(self, now_ms: int) -> GroupResult[None]:
        """After replay every member gets a full session to reach the new coordinator."""
        return self._apply(self.result_type(timers=[t for group in self.groups.values() for t in self._member_timers(group, now_ms)]))

    def on_reverted(self, group_id: str, now_ms: int) -> GroupResult[None]:
        """The group was taken back to before a write that failed: its members' timers again, as
        on load; the timers of members the write had added are cancelled. A group's own timer
        stays armed, as Kafka's timers outlive a failed write; it finds what the group is then."""
        group = self.groups.get(group_id)
        armed = {key for key in self._deadlines if len(key) == 3 and key[1] == group_id}
        timers = self._member_timers(group, now_ms) if group is not None else []
        timers.extend(CancelTimer(key) for key in sorted(armed - {t.key for t in timers}))
        return self._apply(self.result_type(timers=timers))

    # -- records -----------------------------------------------------------------------------------

    def journal(self) -> dict[str, GroupT | None]:
        """Keep, from now on, each group as it is before records next change it (None: it did
        not exist), which is what reverts them if their write fails. A call that changes
        nothing costs no copy."""
        self._journal = {}
        return self._journal

    def _apply(self, result: ResultT) -> ResultT:
        """The state moves only here, once nothing can fail any more."""
        if self._journal is not None:
            for key, _ in result.records:
                group_id = getattr(key, "group_id", None)
                if group_id is not None and group_id not in self._journal:
                    self._journal[group_id] = None if (group := self.groups.get(group_id)) is None else group.copy()
        for key, value in result.records:
            self.replay(key, value)
        for timer in result.timers:
            if isinstance(timer, ScheduleTimer):
                self._deadlines[timer.key] = timer.deadline_ms
            else:
                self._deadlines.pop(timer.key, None)
        return result

    def _persisted_group(self, group_id: str) -> GroupT:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = self.group_type(group_id)
        return group

    # What the records of every modern group do alike; ``replay`` reads their values.

    def _replay_member(self, group_id: str, member_id: str, **fields: Any) -> None:
        """A member's metadata or current assignment: the member, created if need be, with these fields."""
        group = self._persisted_group(group_id)
        group.update_member(replace(group.members.get(member_id) or self.member_type(member_id), **fields))

    def _replay_member_tombstone(self, group_id: str, member_id: str) -> None:
        if group_id in self.groups:
            self.groups[group_id].remove_member(member_id)

    def _replay_assignment_tombstone(self, group_id: str, member_id: str, **left: Any) -> None:
        """The member's current assignment is gone: a member still there takes these fields."""
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            group.update_member(replace(group.members[member_id], **left))

    def _replay_target_assignment(self, group_id: str, member_id: str, target: Any | None) -> None:
        """A member's target assignment; None: its tombstone."""
        if target is not None:
            self._persisted_group(group_id).target_assignment[member_id] = target
        elif group_id in self.groups:
            self.groups[group_id].target_assignment.pop(member_id, None)

    def _replay_target_assignment_epoch(self, group_id: str, epoch: int | None) -> None:
        """The target assignment's epoch; None: its tombstone."""
        if epoch is not None:
            self._persisted_group(group_id).target_assignment_epoch = epoch
        elif group_id in self.groups:
            self.groups[group_id].target_assignment_epoch = 0
