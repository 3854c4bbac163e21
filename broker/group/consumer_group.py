"""The consumer group protocol (KIP-848, ConsumerGroupHeartbeat), sans-IO: the
consumer-protocol groups of one ``__consumer_offsets`` partition.

Each call takes a request, the time and the topic metadata, and returns a ``GroupResult``:
records to append to the partition, the response and timers to arm or cancel. The state
changes by replaying those same records before the call returns, exactly as a new
coordinator rebuilds it from the partition, so the two can never disagree. Rules, error
codes, messages and the records written follow Kafka 4.0's GroupMetadataManager
(consumerGroupHeartbeat and friends), ConsumerGroup and TargetAssignmentBuilder.

One heartbeat:
1. the member joins, or its subscription changes, or the metadata of a subscribed topic
   changes: the group epoch is bumped;
2. the group epoch is past the target assignment epoch: the assignor computes a new target
   assignment for every member, from their previous target (sticky);
3. the member's current assignment moves one step towards its target
   (``current_assignment_builder.reconcile``): revoke first, then assign what is free.

Offset commits are checked against the member (``validate_offset_commit``, as Kafka 4.4's
ConsumerGroup.validateOffsetCommit): one at the member's epoch is accepted; one from an older
epoch only for partitions the member held at that epoch (KIP-1251's assignment epochs), so a
commit still in flight when the member's epoch moved on is not lost.
"""

from __future__ import annotations

import base64
import enum
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from broker.group.assignors import (
    ASSIGNORS,
    GroupSpec,
    MemberAssignment,
    MemberSubscriptionAndAssignment,
    PartitionAssignor,
)
from broker.group.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartition,
    TopicPartitions,
)
from broker.group.coordinator_records import (
    TopicMetadata as TopicMetadataRecord,
)
from broker.group.current_assignment_builder import (
    NO_EPOCH,
    AssignmentEpochs,
    CurrentAssignment,
    FencedMemberEpochError,
    MemberState,
    Partitions,
    reconcile,
)

# The timer actions of this module's results, for its callers.
from broker.group.group_metadata_manager import CancelTimer, ScheduleTimer  # noqa: F401
from broker.group.modern_group_manager import (
    DescribedTopicPartitions,
    GroupError,
    GroupResult,
    ModernGroupManager,
    Record,
    Response,
    TimerAction,
    is_subset,
    throw_if_empty_string,
    throw_if_instance_id_is_fenced,
    throw_if_member_epoch_is_invalid,
    timer_key,
)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_MEMBER_ID = 25
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# From ConsumerGroupHeartbeat v1 on, clients generate their member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
# OffsetCommit's first version with a member epoch: what consumer-protocol members must use.
FIRST_MEMBER_EPOCH_OFFSET_COMMIT_VERSION = 9
# TxnOffsetCommit's default generation id: what a producer that names no member sends.
NO_GENERATION_ID = -1

# Kafka's Topic.isInternal: never matched by a subscribed regular expression.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

SESSION_TIMEOUT_TIMER = "consumer-session-timeout"
REBALANCE_TIMEOUT_TIMER = "consumer-rebalance-timeout"

CommitPartitionValidator = Callable[[str, uuid.UUID | None, int], None]
"""Kafka's CommitPartitionValidator: checks one committed partition (topic name, topic id,
partition) and raises ``GroupError`` when the member may not commit it."""


def session_timeout_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return timer_key(SESSION_TIMEOUT_TIMER, group_id, member_id)


def rebalance_timeout_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return timer_key(REBALANCE_TIMEOUT_TIMER, group_id, member_id)


def kafka_member_id() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: URL-safe base64 of 16 random bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class GroupConfigLookup(Protocol):
    """A group's own configs (broker/group/group_config.py's GroupConfigManager): None where it sets none."""

    def consumer_session_timeout_ms(self, group_id: str) -> int | None: ...

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int | None: ...


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    error_code: int = NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the group knows of a subscribed topic; a change bumps the group epoch."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor_name: str | None = None
    assignment: CurrentAssignment = field(default_factory=CurrentAssignment)

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def previous_member_epoch(self) -> int:
        return self.assignment.previous_member_epoch

    @property
    def state(self) -> MemberState:
        return self.assignment.state

    @property
    def assigned_partitions(self) -> Partitions:
        return self.assignment.assigned_partitions


@dataclass(eq=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    subscribed_topic_names: Counter[str] = field(default_factory=Counter)
    subscribed_topic_regexes: Counter[str] = field(default_factory=Counter)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    target_assignment_epoch: int = 0
    target_assignment: dict[str, MemberAssignment] = field(default_factory=dict)
    # topic id -> partition -> epoch of the member that owns it (assigned or being revoked).
    partition_epochs: dict[uuid.UUID, dict[int, int]] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.assignment.is_reconciled_to(self.target_assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def copy(self) -> ConsumerGroup:
        """A copy to revert to: every container copied; members and assignments are immutable, shared."""
        return replace(
            self,
            members=dict(self.members),
            static_members=dict(self.static_members),
            subscribed_topic_names=Counter(self.subscribed_topic_names),
            subscribed_topic_regexes=Counter(self.subscribed_topic_regexes),
            subscription_metadata=dict(self.subscription_metadata),
            target_assignment=dict(self.target_assignment),
            partition_epochs={topic_id: dict(epochs) for topic_id, epochs in self.partition_epochs.items()},
        )

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get(topic_id, {}).get(partition, NO_EPOCH)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_assignment_of(self, member_id: str, instance_id: str | None) -> MemberAssignment:
        """A static member that replaces its previous incarnation inherits its target."""
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None and previous != member_id:
                return self.target_assignment.get(previous, {})
        return self.target_assignment.get(member_id, {})

    # -- changes, applied by replay only -----------------------------------------------------------

    def update_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        self.members[member.member_id] = member
        if old is not None:
            self._count_subscriptions(old, -1)
            self._remove_partition_epochs(old.assignment)
            if old.instance_id is not None and old.instance_id != member.instance_id:
                self.static_members.pop(old.instance_id, None)
        self._count_subscriptions(member, 1)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._add_partition_epochs(member.assignment)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._count_subscriptions(old, -1)
        self._remove_partition_epochs(old.assignment)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _count_subscriptions(self, member: ConsumerGroupMember, sign: int) -> None:
        self.subscribed_topic_names = _counted(self.subscribed_topic_names, member.subscribed_topic_names, sign)
        self.subscribed_topic_regexes = _counted(self.subscribed_topic_regexes, _regexes(member), sign)

    def _remove_partition_epochs(self, assignment: CurrentAssignment) -> None:
        for partitions in (assignment.assigned_partitions, assignment.partitions_pending_revocation):
            for topic_id, ps in partitions.items():
                epochs = self.partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for p in ps:
                    epochs.pop(p, None)
                if not epochs:
                    del self.partition_epochs[topic_id]

    def _add_partition_epochs(self, assignment: CurrentAssignment) -> None:
        for partitions in (assignment.assigned_partitions, assignment.partitions_pending_revocation):
            for topic_id, ps in partitions.items():
                self.partition_epochs.setdefault(topic_id, {}).update(dict.fromkeys(ps, assignment.member_epoch))


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroupMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    """One group of a ConsumerGroupDescribe v0 response."""

    group_id: str
    error_code: int = NONE
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class _Heartbeat:
    """The request's fields as this module reads them, whatever kio version decoded it."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned_partitions: Partitions | None
    version: int

    @classmethod
    def of(cls, request: Any) -> _Heartbeat:
        timeout = getattr(request, "rebalance_timeout_ms", None)
        if timeout is None:
            # kio names the field after Kafka's JSON minus "Ms" and decodes it to a timedelta.
            timeout = request.rebalance_timeout
        if not isinstance(timeout, int):
            timeout = round(timeout.total_seconds() * 1000)
        owned: dict[uuid.UUID, frozenset[int]] | None = None
        if request.topic_partitions is not None:
            owned = {}
            for tp in request.topic_partitions:
                topic_id = tp.topic_id or uuid.UUID(int=0)
                owned[topic_id] = owned.get(topic_id, frozenset()) | frozenset(tp.partitions)
        names = request.subscribed_topic_names
        return cls(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=timeout,
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned_partitions=owned,
            version=getattr(request, "__version__", CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION),
        )


class ConsumerGroupManager(ModernGroupManager[ConsumerGroup]):
    """The consumer-protocol groups of one ``__consumer_offsets`` partition.

    ``is_other_group(group_id)`` tells whether a group of another type (classic, share) holds the id;
    ``delete_empty_classic_group(group_id)``, when given, removes such a group if it is
    empty and returns its tombstones (None when it is not empty), so that a consumer
    group can take the id over as in Kafka.
    """

    group_type = ConsumerGroup
    member_type = ConsumerGroupMember
    type_name = "consumer"
    session_timeout_timer = SESSION_TIMEOUT_TIMER
    rebalance_timeout_timer = REBALANCE_TIMEOUT_TIMER

    def __init__(
        self,
        *,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 5000,
        max_size: int = 2**31 - 1,
        assignors: Sequence[str] = ("uniform", "range"),
        is_other_group: Callable[[str], bool] = lambda group_id: False,
        delete_empty_classic_group: Callable[[str], list[Record] | None] | None = None,
        new_member_id: Callable[[], str] = kafka_member_id,
        group_configs: GroupConfigLookup | None = None,
    ) -> None:
        unknown = [name for name in assignors if name not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(f"group.consumer.assignors: unknown or missing assignors {unknown}; known: {sorted(ASSIGNORS)}")
        super().__init__(is_other_group=is_other_group)
        # The broker's settings; a group's own configs (kafka-configs --entity-type groups) win.
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._group_configs = group_configs
        self.max_size = max_size
        self.assignors: dict[str, PartitionAssignor] = {name: ASSIGNORS[name] for name in assignors}
        self.default_assignor = assignors[0]
        self._delete_empty_classic_group = delete_empty_classic_group
        self._new_member_id = new_member_id
        self._resolver = _RegexResolver({})

    def session_timeout_ms_of(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's (Kafka's consumerGroupSessionTimeoutMs)."""
        own = self._group_configs.consumer_session_timeout_ms(group_id) if self._group_configs is not None else None
        return self.session_timeout_ms if own is None else own

    def heartbeat_interval_ms_of(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        own = self._group_configs.consumer_heartbeat_interval_ms(group_id) if self._group_configs is not None else None
        return self.heartbeat_interval_ms if own is None else own

    def _regex_resolver(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> Callable[[str], frozenset[str]]:
        """Regular expressions are matched again only when the topics change."""
        if topics != self._resolver.topics:
            self._resolver = _RegexResolver(dict(topics))
        return self._resolver

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------------

    def heartbeat(
        self,
        request: Any,
        topics: Mapping[str, tuple[uuid.UUID, int]],
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> GroupResult[ConsumerGroupHeartbeatResponse]:
        """``topics``: topic name -> (topic id, partition count), from the cluster metadata."""
        try:
            hb = _Heartbeat.of(request)
            self._validate(hb)
            if hb.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(hb)
            return self._heartbeat(hb, topics, now_ms, client_id, client_host)
        except GroupError as e:
            return GroupResult(response=ConsumerGroupHeartbeatResponse(error_code=e.error_code, error_message=e.message))

    def _validate(self, hb: _Heartbeat) -> None:
        if hb.version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or hb.member_epoch > 0 or hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            throw_if_empty_string(hb.member_id, "MemberId can't be empty.")
        throw_if_empty_string(hb.group_id, "GroupId can't be empty.")
        throw_if_empty_string(hb.instance_id, "InstanceId can't be empty.")
        throw_if_empty_string(hb.rack_id, "RackId can't be empty.")
        if hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if hb.rebalance_timeout_ms == -1:
                raise GroupError(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if hb.owned_partitions is None or hb.owned_partitions:
                raise GroupError(INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            # An empty list of names is accepted: the member is in the group with no topic.
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                raise GroupError(INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if hb.instance_id is None:
                raise GroupError(INVALID_REQUEST, "InstanceId can't be null.")
        elif hb.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(INVALID_REQUEST, "MemberEpoch is invalid.")
        if hb.subscribed_topic_regex:
            try:
                re.compile(hb.subscribed_topic_regex)
            except re.error as e:
                raise GroupError(
                    INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{hb.subscribed_topic_regex}` is not a valid regular expression: {e}."
                ) from None
        if hb.server_assignor is not None and hb.server_assignor not in self.assignors:
            raise GroupError(
                UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: {', '.join(self.assignors)}.",
            )

    def _heartbeat(
        self, hb: _Heartbeat, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int, client_id: str, client_host: str
    ) -> GroupResult[ConsumerGroupHeartbeatResponse]:
        joining = hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        records: list[Record] = []
        timers: list[TimerAction] = []
        group = self._get_or_maybe_create_group(hb.group_id, joining, records)
        if len(group.members) >= self.max_size and (not hb.member_id or hb.member_id not in group.members):
            raise GroupError(GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of {self.max_size} members.")

        member_id = hb.member_id or self._new_member_id()
        if hb.instance_id is None:
            member = self._dynamic_member(group, member_id, hb, joining)
        else:
            member = self._static_member(group, member_id, hb, joining, records, timers)

        # 1. The member's subscription, and the group epoch when it or the topics changed.
        updated = replace(
            member,
            instance_id=hb.instance_id if hb.instance_id is not None else member.instance_id,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor_name=hb.server_assignor if hb.server_assignor is not None else member.server_assignor_name,
            subscribed_topic_names=frozenset(hb.subscribed_topic_names) if hb.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=hb.subscribed_topic_regex if hb.subscribed_topic_regex is not None else member.subscribed_topic_regex,
            client_id=client_id,
            client_host=client_host,
        )
        # A brand-new group must move off epoch 0 so that it gets a target assignment.
        bump_group_epoch = group.group_epoch == 0
        resolve = self._regex_resolver(topics)
        if updated != member:
            records.append(_member_metadata_record(group.group_id, updated))
            bump_group_epoch |= updated.subscribed_topic_names != member.subscribed_topic_names
            bump_group_epoch |= updated.subscribed_topic_regex != member.subscribed_topic_regex

        names = _counted(_counted(group.subscribed_topic_names, member.subscribed_topic_names, -1), updated.subscribed_topic_names, 1)
        regexes = _counted(_counted(group.subscribed_topic_regexes, _regexes(member), -1), _regexes(updated), 1)
        subscription_metadata = _subscription_metadata(_subscribed_topics(names, regexes, resolve), topics)
        if subscription_metadata != group.subscription_metadata:
            records.append(_partition_metadata_record(group.group_id, subscription_metadata))
            bump_group_epoch = True
        group_epoch = group.group_epoch
        if bump_group_epoch:
            group_epoch += 1
            records.append((ConsumerGroupMetadataKey(group_id=group.group_id), ConsumerGroupMetadataValue(epoch=group_epoch)))

        # 2. A new target assignment when the group epoch moved past it.
        if group_epoch > group.target_assignment_epoch:
            target, target_records = self._update_target_assignment(group, group_epoch, updated, subscription_metadata, resolve)
            records.extend(target_records)
            target_epoch = group_epoch
        else:
            target = group.target_assignment_of(updated.member_id, updated.instance_id)
            target_epoch = group.target_assignment_epoch

        # 3. One reconciliation step towards the target.
        if not updated.assignment.is_reconciled_to(target_epoch):
            try:
                next_assignment = reconcile(updated.assignment, target_epoch, target, hb.owned_partitions, group.current_partition_epoch)
            except FencedMemberEpochError as e:
                raise GroupError(FENCED_MEMBER_EPOCH, str(e)) from None
            if next_assignment != updated.assignment:
                updated = replace(updated, assignment=next_assignment)
                records.append(_current_assignment_record(group.group_id, updated))
                timers.append(self._rebalance_timer(group.group_id, updated, now_ms))

        timers.append(self._session_timer(group.group_id, updated.member_id, now_ms))

        # The assignment goes out when it changed, or on a full request: a join, or a client
        # that resends every field after an error. Otherwise the client already has it.
        full_request = joining or (
            hb.rebalance_timeout_ms != -1
            and (hb.subscribed_topic_names is not None or hb.subscribed_topic_regex is not None)
            and hb.owned_partitions is not None
        )
        assignment = None
        if full_request or updated.assigned_partitions != member.assigned_partitions:
            assignment = {t: tuple(sorted(ps)) for t, ps in sorted(updated.assigned_partitions.items())}
        response = ConsumerGroupHeartbeatResponse(
            member_id=updated.member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms_of(group.group_id),
            assignment=assignment,
        )
        return self._apply(GroupResult(records, response, timers))

    def _get_or_maybe_create_group(self, group_id: str, create: bool, records: list[Record]) -> ConsumerGroup:
        """The group, or a new one that the records will create when they are replayed."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self._is_other_group(group_id):
            tombstones = self._delete_empty_classic_group(group_id) if create and self._delete_empty_classic_group is not None else None
            if tombstones is None:
                # Converting a live classic group (KIP-848's online upgrade) is not supported, and a
                # share group's id is never taken over.
                raise GroupError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group")
            records.extend(tombstones)
        elif not create:
            raise GroupError(GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id)

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, hb: _Heartbeat, joining: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
            return ConsumerGroupMember(member_id)
        _throw_if_member_epoch_is_invalid(member, hb.member_epoch, hb.owned_partitions)
        return member

    def _static_member(
        self, group: ConsumerGroup, member_id: str, hb: _Heartbeat, joining: bool, records: list[Record], timers: list[TimerAction]
    ) -> ConsumerGroupMember:
        assert hb.instance_id is not None
        existing = group.static_member(hb.instance_id)
        if not joining:
            if existing is None:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
            throw_if_instance_id_is_fenced(existing, member_id, hb.instance_id)
            _throw_if_member_epoch_is_invalid(existing, hb.member_epoch, hb.owned_partitions)
            return existing
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(
                UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {hb.instance_id} cannot join the group because the instance id "
                f"is owned by {existing.member_id} member.",
            )
        # The instance comes back under a new member id: it takes over the previous member,
        # assignment included, so that nothing moves.
        replacement = replace(existing, member_id=member_id, assignment=replace(existing.assignment, member_epoch=0, previous_member_epoch=0))
        records.extend(_member_tombstones(group.group_id, existing.member_id))
        records.append(_member_metadata_record(group.group_id, replacement))
        records.append(_target_assignment_record(group.group_id, member_id, group.target_assignment.get(existing.member_id, {})))
        records.append(_current_assignment_record(group.group_id, replacement))
        timers.extend(self._cancel_timers(group.group_id, existing.member_id))
        return replacement

    def _update_target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        updated: ConsumerGroupMember,
        subscription_metadata: Mapping[str, TopicMetadata],
        resolve: Callable[[str], frozenset[str]],
    ) -> tuple[MemberAssignment, list[Record]]:
        members = dict(group.members)
        members[updated.member_id] = updated
        previous_target = dict(group.target_assignment)
        if updated.instance_id is not None:
            replaced = group.static_members.get(updated.instance_id)
            if replaced is not None and replaced != updated.member_id:
                members.pop(replaced, None)
                previous_target.setdefault(updated.member_id, previous_target.get(replaced, {}))
        topic_ids = {name: metadata.topic_id for name, metadata in subscription_metadata.items()}
        specs = {
            member_id: MemberSubscriptionAndAssignment(
                rack_id=m.rack_id,
                subscribed_topic_ids=frozenset(topic_ids[name] for name in _member_topics(m, resolve) if name in topic_ids),
                assigned_partitions=previous_target.get(member_id, {}),
            )
            for member_id, m in members.items()
        }
        partition_counts = {metadata.topic_id: metadata.num_partitions for metadata in subscription_metadata.values()}
        assignor = self.assignors[self._preferred_assignor(members.values())]
        try:
            new_target = assignor.assign(GroupSpec(specs), partition_counts)
        except Exception as e:  # an assignor bug must not take the coordinator down
            raise GroupError(UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for epoch {group_epoch}: {e}") from e
        records: list[Record] = []
        for member_id in sorted(specs):
            assignment = new_target.get(member_id, {})
            # A member with no previous target gets a record even when its target is empty.
            if member_id not in group.target_assignment or group.target_assignment[member_id] != assignment:
                records.append(_target_assignment_record(group.group_id, member_id, assignment))
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group_id=group.group_id), ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group_epoch)))
        return new_target.get(updated.member_id, {}), records

    def _preferred_assignor(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The server assignor most members ask for; ties go to the earlier configured one."""
        counts = Counter(m.server_assignor_name for m in members if m.server_assignor_name in self.assignors)
        if not counts:
            return self.default_assignor
        order = list(self.assignors)
        return max(counts, key=lambda name: (counts[name], -order.index(name)))

    # -- leaving and fencing -----------------------------------------------------------------------

    def _leave(self, hb: _Heartbeat) -> GroupResult[ConsumerGroupHeartbeatResponse]:
        group = self._existing_group(hb.group_id)
        response = ConsumerGroupHeartbeatResponse(member_id=hb.member_id, member_epoch=hb.member_epoch)
        member: ConsumerGroupMember = self._leaving_member(group, hb.member_id, hb.instance_id)
        if hb.instance_id is None or hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._fence_member(group, member, response)
        # A static member that leaves for a while keeps its partitions (nobody else gets
        # them) until its session times out or it comes back. Their assignment epochs go to 0,
        # as Kafka's consumerGroupStaticMemberGroupLeave resets them: the instance that comes
        # back starts over at epoch 0 and may commit them from its first epoch on.
        assigned = member.assigned_partitions
        leaving = replace(
            member,
            assignment=replace(
                member.assignment,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation={},
                assignment_epochs={topic_id: dict.fromkeys(ps, 0) for topic_id, ps in assigned.items()},
            ),
        )
        return self._apply(
            GroupResult(
                [_current_assignment_record(group.group_id, leaving)],
                ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH),
            )
        )

    def _fence_member(self, group: ConsumerGroup, member: ConsumerGroupMember, response: Response | None) -> GroupResult[Response]:
        """Remove the member and bump the group epoch; the remaining members get a new
        target assignment at their next heartbeat."""
        records = _member_tombstones(group.group_id, member.member_id)
        names = _counted(group.subscribed_topic_names, member.subscribed_topic_names, -1)
        regexes = _counted(group.subscribed_topic_regexes, _regexes(member), -1)
        # The topics are those already known: only the ones nobody subscribes to any more go.
        subscription_metadata = {
            name: metadata
            for name, metadata in group.subscription_metadata.items()
            if name in names or any(re.fullmatch(regex, name) for regex in regexes)
        }
        if subscription_metadata != group.subscription_metadata:
            records.append(_partition_metadata_record(group.group_id, subscription_metadata))
        records.append((ConsumerGroupMetadataKey(group_id=group.group_id), ConsumerGroupMetadataValue(epoch=group.group_epoch + 1)))
        return self._apply(GroupResult(records, response, self._cancel_timers(group.group_id, member.member_id)))

    # -- timers ------------------------------------------------------------------------------------

    def _revoking(self, member: ConsumerGroupMember) -> bool:
        return member.state is MemberState.UNREVOKED_PARTITIONS

    def on_reverted(self, group_id: str, now_ms: int) -> GroupResult[None]:
        """The group was taken back to before a write that failed: its members' timers again, as on load."""
        group = self.groups.get(group_id)
        return self._apply(GroupResult(timers=self._member_timers(group, now_ms) if group is not None else []))

    # -- metadata, admin ---------------------------------------------------------------------------

    def on_metadata_change(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> GroupResult[None]:
        """Topics created, deleted or resized: every group whose subscribed topics look
        different gets a new epoch, hence a new target assignment at its next heartbeat."""
        records: list[Record] = []
        resolve = self._regex_resolver(topics)
        for group in self.groups.values():
            subscribed = _subscribed_topics(group.subscribed_topic_names, group.subscribed_topic_regexes, resolve)
            subscription_metadata = _subscription_metadata(subscribed, topics)
            if subscription_metadata != group.subscription_metadata:
                records.append(_partition_metadata_record(group.group_id, subscription_metadata))
                records.append((ConsumerGroupMetadataKey(group_id=group.group_id), ConsumerGroupMetadataValue(epoch=group.group_epoch + 1)))
        return self._apply(GroupResult(records))

    def describe(self, group_ids: Iterable[str], topic_names_by_id: Mapping[uuid.UUID, str]) -> list[DescribedConsumerGroup]:
        described = []
        for group_id in group_ids:
            try:
                group = self._existing_group(group_id)
            except GroupError as e:
                described.append(DescribedConsumerGroup(group_id, error_code=e.error_code, error_message=e.message))
                continue
            described.append(
                DescribedConsumerGroup(
                    group_id,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.target_assignment_epoch,
                    assignor_name=self._preferred_assignor(group.members.values()),
                    members=tuple(
                        DescribedConsumerGroupMember(
                            member_id=m.member_id,
                            instance_id=m.instance_id,
                            rack_id=m.rack_id,
                            member_epoch=m.member_epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                            subscribed_topic_regex=m.subscribed_topic_regex,
                            assignment=_described(m.assigned_partitions, topic_names_by_id),
                            target_assignment=_described(group.target_assignment.get(m.member_id, {}), topic_names_by_id),
                        )
                        for m in group.members.values()
                    ),
                )
            )
        return described

    def _group_tombstones(self, group: ConsumerGroup) -> list[Record]:
        """The group's committed offsets are the offset manager's to delete."""
        return [
            (ConsumerGroupTargetAssignmentMetadataKey(group_id=group.group_id), None),
            (ConsumerGroupPartitionMetadataKey(group_id=group.group_id), None),
            (ConsumerGroupMetadataKey(group_id=group.group_id), None),
        ]

    # -- what the committed offsets need (offset_metadata_manager.ConsumerGroupOffsets) -----------

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, transactional: bool, version: int, instance_id: str | None = None
    ) -> CommitPartitionValidator | None:
        """None when no consumer group has this id; else the check of each committed partition,
        or ``GroupError`` when the member may commit nothing (Kafka 4.4's
        ConsumerGroup.validateOffsetCommit). ``version``: the OffsetCommit's (a TxnOffsetCommit
        has no such rule)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        # The admin client, or a consumer that assigns partitions itself, into an empty group.
        if member_epoch < 0 and not group.members:
            return _any_partition
        # A producer's TxnOffsetCommit v0-v2 names no member: its defaults (epoch -1, member "", no
        # instance) are taken exactly; any other epoch without a member is an unknown member.
        if transactional and member_epoch == NO_GENERATION_ID and member_id == "" and instance_id is None:
            return _any_partition
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if not transactional and version < FIRST_MEMBER_EPOCH_OFFSET_COMMIT_VERSION:
            raise GroupError(UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members using the consumer group protocol")
        if member_epoch == member.member_epoch:
            return _any_partition
        if member_epoch > member.member_epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"Received member epoch {member_epoch} is newer than current member epoch {member.member_epoch}.")
        return _assignment_epoch_validator(member.assignment, member_epoch)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+ names the fetching member: ``GroupError`` unless it is one of the group's,
        at its current epoch (Kafka 4.4's ConsumerGroup.validateOffsetFetch). A fetch with no member
        id (null) and a negative epoch is an admin's, and is not checked; an empty member id is
        checked, and is no member. No consumer group with this id: nothing to check."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return
        if member_id is None:
            # Kafka 4.4 looks a null member id up in its members' map, which fails with a
            # NullPointerException: the client hears UNKNOWN_SERVER_ERROR (checked on a real node).
            raise GroupError(UNKNOWN_SERVER_ERROR, f"A null member id with member epoch {member_epoch} names no member of group {group_id}.")
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if member_epoch != member.member_epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the expected member epoch {member.member_epoch}.")

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """None when no consumer group has this id; else the topics its members subscribe
        to, by name or by a regular expression (their offsets are neither deleted nor expired)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return set(group.subscribed_topic_names) | set(group.subscription_metadata)

    # -- records -----------------------------------------------------------------------------------

    def replay(self, key: object, value: object | None) -> None:
        """Apply one record of the partition; records of other kinds are ignored."""
        match key:
            case ConsumerGroupMetadataKey(group_id=group_id):
                if isinstance(value, ConsumerGroupMetadataValue):
                    self._persisted_group(group_id).group_epoch = value.epoch
                else:
                    self.groups.pop(group_id, None)
            case ConsumerGroupPartitionMetadataKey(group_id=group_id):
                if isinstance(value, ConsumerGroupPartitionMetadataValue):
                    self._persisted_group(group_id).subscription_metadata = {
                        t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in value.topics
                    }
                elif group_id in self.groups:
                    self.groups[group_id].subscription_metadata = {}
            case ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id):
                if isinstance(value, ConsumerGroupMemberMetadataValue):
                    self._replay_member(
                        group_id,
                        member_id,
                        instance_id=value.instance_id,
                        rack_id=value.rack_id,
                        client_id=value.client_id,
                        client_host=value.client_host,
                        subscribed_topic_names=frozenset(value.subscribed_topic_names),
                        subscribed_topic_regex=value.subscribed_topic_regex,
                        rebalance_timeout_ms=value.rebalance_timeout_ms,
                        server_assignor_name=value.server_assignor,
                    )
                else:
                    self._replay_member_tombstone(group_id, member_id)
            case ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id):
                target = _partitions(value.topic_partitions) if isinstance(value, ConsumerGroupTargetAssignmentMemberValue) else None
                self._replay_target_assignment(group_id, member_id, target)
            case ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id):
                epoch = value.assignment_epoch if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue) else None
                self._replay_target_assignment_epoch(group_id, epoch)
            case ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id):
                if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                    current = CurrentAssignment(
                        member_epoch=value.member_epoch,
                        previous_member_epoch=value.previous_member_epoch,
                        state=MemberState.from_value(value.state),
                        assigned_partitions=_partitions(value.assigned_partitions),
                        partitions_pending_revocation=_partitions(value.partitions_pending_revocation),
                        assignment_epochs=_assignment_epochs(value.member_epoch, value.assigned_partitions, value.partitions_pending_revocation),
                    )
                    self._replay_member(group_id, member_id, assignment=current)
                else:
                    left = CurrentAssignment(LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, MemberState.STABLE)
                    self._replay_assignment_tombstone(group_id, member_id, assignment=left)


# -- helpers ---------------------------------------------------------------------------------------


def _throw_if_member_epoch_is_invalid(member: ConsumerGroupMember, received_epoch: int, owned: Partitions | None) -> None:
    throw_if_member_epoch_is_invalid("consumer", member, received_epoch, lambda: is_subset(owned, member.assigned_partitions))


class _RegexResolver:
    """SubscribedTopicRegex (ConsumerGroupHeartbeat v1): the topics whose whole name matches.
    Kafka matches with RE2/J; Python's ``re`` reads the usual patterns the same way."""

    def __init__(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> None:
        self.topics = topics
        self._matches: dict[str, frozenset[str]] = {}

    def __call__(self, regex: str) -> frozenset[str]:
        matches = self._matches.get(regex)
        if matches is None:
            pattern = re.compile(regex)  # valid: heartbeats with an invalid one are refused
            matches = self._matches[regex] = frozenset(n for n in self.topics if n not in INTERNAL_TOPICS and pattern.fullmatch(n))
        return matches


def _regexes(member: ConsumerGroupMember) -> tuple[str, ...]:
    # An empty regex, like an empty list of names, subscribes to nothing.
    return (member.subscribed_topic_regex,) if member.subscribed_topic_regex else ()


def _counted(counter: Counter[str], items: Iterable[str], sign: int) -> Counter[str]:
    """A copy of ``counter`` with ``items`` added (sign 1) or removed (sign -1); zeros dropped."""
    changed = Counter(counter)
    changed.update({item: sign for item in items})
    return +changed


def _member_topics(member: ConsumerGroupMember, resolve: Callable[[str], frozenset[str]]) -> frozenset[str]:
    if member.subscribed_topic_regex:
        return member.subscribed_topic_names | resolve(member.subscribed_topic_regex)
    return member.subscribed_topic_names


def _subscribed_topics(names: Iterable[str], regexes: Iterable[str], resolve: Callable[[str], frozenset[str]]) -> set[str]:
    subscribed = set(names)
    for regex in regexes:
        subscribed |= resolve(regex)
    return subscribed


def _subscription_metadata(subscribed: Iterable[str], topics: Mapping[str, tuple[uuid.UUID, int]]) -> dict[str, TopicMetadata]:
    metadata = {}
    for name in subscribed:
        if name in topics:
            topic_id, num_partitions = topics[name]
            metadata[name] = TopicMetadata(topic_id, name, num_partitions)
    return metadata


def _partitions(topic_partitions: Iterable[Any]) -> dict[uuid.UUID, frozenset[int]]:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def _target_topic_partitions(partitions: Partitions) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(topic_id=t, partitions=tuple(sorted(ps))) for t, ps in sorted(partitions.items()))


def _held_topic_partitions(partitions: Partitions, assignment: CurrentAssignment) -> tuple[TopicPartitions, ...]:
    """The partitions with their assignment epochs, as Kafka 4.4 writes them."""
    held = []
    for t, ps in sorted(partitions.items()):
        ordered = tuple(sorted(ps))
        held.append(TopicPartitions(topic_id=t, partitions=ordered, assignment_epochs=tuple(assignment.assignment_epoch(t, p) for p in ordered)))
    return tuple(held)


def _assignment_epochs(member_epoch: int, *held: Iterable[TopicPartitions]) -> AssignmentEpochs:
    """The epochs of a replayed assignment. A record with no epochs, or with a count that does not
    match its partitions (which Kafka logs as an error), gives every partition the member epoch
    (never below 0), as Kafka's Utils.assignmentFromTopicPartitions does."""
    default = max(member_epoch, 0)
    epochs: dict[uuid.UUID, dict[int, int]] = {}
    for topic_partitions in held:
        for tp in topic_partitions:
            if not tp.partitions:
                continue
            given = tp.assignment_epochs
            if given is not None and len(given) == len(tp.partitions):
                epochs.setdefault(tp.topic_id, {}).update(zip(tp.partitions, given))
            else:
                epochs.setdefault(tp.topic_id, {}).update(dict.fromkeys(tp.partitions, default))
    return epochs


def _any_partition(topic: str, topic_id: uuid.UUID | None, partition: int) -> None:
    """Kafka's CommitPartitionValidator.NO_OP."""


def _assignment_epoch_validator(assignment: CurrentAssignment, member_epoch: int) -> CommitPartitionValidator:
    """A commit from an older epoch of the member: each partition must be one the member holds
    (assigned, or being revoked) since that epoch or earlier (Kafka 4.4's createAssignmentEpochValidator)."""

    def validate(topic: str, topic_id: uuid.UUID | None, partition: int) -> None:
        epoch = None if topic_id is None else assignment.held_since(topic_id, partition)
        if epoch is None:
            raise GroupError(STALE_MEMBER_EPOCH, f"Partition {topic}-{partition} is not assigned or pending revocation for member.")
        if member_epoch < epoch:
            raise GroupError(
                STALE_MEMBER_EPOCH, f"Received member epoch {member_epoch} is older than assignment epoch {epoch} for partition {topic}-{partition}."
            )

    return validate


def _described(partitions: Partitions, topic_names_by_id: Mapping[uuid.UUID, str]) -> tuple[DescribedTopicPartitions, ...]:
    # Topics deleted since are left out, as Kafka does.
    return tuple(
        DescribedTopicPartitions(t, topic_names_by_id[t], tuple(sorted(ps))) for t, ps in sorted(partitions.items()) if t in topic_names_by_id
    )


def _member_metadata_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return (
        ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor_name,
        ),
    )


def _partition_metadata_record(group_id: str, metadata: Mapping[str, TopicMetadata]) -> Record:
    return (
        ConsumerGroupPartitionMetadataKey(group_id=group_id),
        ConsumerGroupPartitionMetadataValue(
            topics=tuple(
                TopicMetadataRecord(topic_id=m.topic_id, topic_name=m.topic_name, num_partitions=m.num_partitions, partition_metadata=())
                for _, m in sorted(metadata.items())
            )
        ),
    )


def _target_assignment_record(group_id: str, member_id: str, assignment: Partitions) -> Record:
    return (
        ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_target_topic_partitions(assignment)),
    )


def _current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    a = member.assignment
    return (
        ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=a.member_epoch,
            previous_member_epoch=a.previous_member_epoch,
            state=int(a.state),
            assigned_partitions=_held_topic_partitions(a.assigned_partitions, a),
            partitions_pending_revocation=_held_topic_partitions(a.partitions_pending_revocation, a),
        ),
    )


def _member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """The order matters: a member goes only once its assignments are gone, as in Kafka."""
    return [
        (ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]
