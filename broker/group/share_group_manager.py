"""The share group protocol (KIP-932, ShareGroupHeartbeat and ShareGroupDescribe), sans-IO: the
share groups of one ``__consumer_offsets`` partition. Rules, error codes and records follow Kafka
4.4's GroupMetadataManager (shareGroupHeartbeat, shareGroupLeave, shareGroupFenceMember,
initializeShareGroupState, shareGroupDescribe).

Like ``consumer_group.ConsumerGroupManager``, each call returns records, a response and timers,
and the state moves only by replaying those records, as a new coordinator rebuilds it.

One heartbeat:
1. the member joins (epoch 0, with the member id the client generated) or its subscription
   changes, or the subscribed topics look different (metadata hash), or partitions whose
   share-group state was initialized since are not in the target yet: the group epoch is bumped;
2. the group epoch is past the target assignment epoch: the SimpleAssignor computes a new target;
3. the member moves straight to its target (nothing to revoke in a share group);
4. subscribed partitions whose share-group state is not initialized yet are recorded as
   initializing and handed out in ``ShareGroupResult.initialize``: the shell sends them to the share
   coordinator (InitializeShareGroupState) and reports back with ``initialize_share_group_state``
   (or ``uninitialize_share_group_state`` on failure). Only initialized partitions are assigned.

The offsets admin APIs (alterShareGroupOffsets, initiate/completeDeleteShareGroupOffsets,
sharePartitionDeleteRequests for DeleteGroups) take the same two steps around the share
coordinator: record the partitions as initializing or deleting, let the shell call the persister,
then record the outcome. Each refuses a group with members.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from broker.group import share_assignor
from broker.group.coordinator_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)
from broker.group.current_assignment_builder import MemberState
from broker.group.modern_group_manager import (
    DescribedTopicPartitions,
    GroupError,
    GroupResult,
    ModernGroupManager,
    Response,
    TimerAction,
    throw_if_empty_string,
    throw_if_member_epoch_is_invalid,
    timer_key,
)
from broker.group.share_group import (
    Record,
    ShareGroup,
    ShareGroupMember,
    ShareGroupState,
    TopicPartitionsByName,
    current_assignment_record,
    epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    metadata_hash,
    next_member,
    state_partition_metadata_record,
    target_assignment_epoch_record,
    target_assignment_record,
)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_MEMBER_EPOCH = 110

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
# InitializeShareGroupState's start offset for a partition nobody set one for: the share
# partition starts where share.auto.offset.reset says.
UNINITIALIZED_START_OFFSET = -1

SESSION_TIMEOUT_TIMER = "share-session-timeout"

# Kafka's messages (Errors' defaults and GroupMetadataManager's), which its tools print.
NON_EMPTY_GROUP_MESSAGE = "The group is not empty."
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
NO_OFFSETS_TO_DELETE_MESSAGE = "There is no offset information to delete."
# The name Kafka records for a deleting topic no longer in the metadata (attachTopicName).
UNKNOWN_TOPIC_NAME = "<UNKNOWN>"

Topics = Mapping[str, tuple[uuid.UUID, int]]


def session_timeout_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return timer_key(SESSION_TIMEOUT_TIMER, group_id, member_id)


class ShareGroupConfigLookup(Protocol):
    """A group's own share.session.timeout.ms / share.heartbeat.interval.ms: None where it sets none."""

    def share_session_timeout_ms(self, group_id: str) -> int | None: ...

    def share_heartbeat_interval_ms(self, group_id: str) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse:
    error_code: int = NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class InitializeShareGroupState:
    """What the shell asks the share coordinator (InitializeShareGroupState): every partition at
    ``state_epoch`` (the group epoch) from ``UNINITIALIZED_START_OFFSET``."""

    group_id: str
    state_epoch: int
    partitions: dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class ShareGroupResult(GroupResult[Response]):
    initialize: InitializeShareGroupState | None = None


@dataclass(frozen=True, slots=True)
class DescribedShareGroupMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[DescribedTopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    """One group of a ShareGroupDescribe v1 response."""

    group_id: str
    error_code: int = NONE
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    partition: int
    error_code: int = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlteredTopic:
    """One topic of an AlterShareGroupOffsets answer; ``topic_id`` None for a topic that does not exist."""

    topic_name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class AlterShareGroupOffsets:
    """What GroupMetadataManager.alterShareGroupOffsets decides: the answer, and the share
    partitions to initialize (InitializeShareGroupState at ``state_epoch``) at their new start offsets."""

    error_code: int = NONE
    error_message: str | None = None
    topics: tuple[AlteredTopic, ...] = ()
    state_epoch: int = 0
    start_offsets: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    """One topic of a DeleteShareGroupOffsets answer; ``topic_id`` None where Kafka sends the zero id."""

    topic_name: str
    topic_id: uuid.UUID | None
    error_code: int = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteShareGroupOffsets:
    """GroupCoordinatorShard.initiateDeleteShareGroupOffsets: a group-level error, or the topics
    refused and the share partitions whose state the persister is to delete (by topic id, with the
    topic's name for the answer)."""

    error_code: int = NONE
    error_message: str | None = None
    refused: tuple[DeletedTopic, ...] = ()
    to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribedPartitionOffsets:
    """One partition of a DescribeShareGroupOffsets answer, with Kafka's defaults."""

    partition: int
    start_offset: int = 0
    leader_epoch: int = 0
    lag: int = -1
    error_code: int = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedTopicOffsets:
    topic_name: str
    topic_id: uuid.UUID | None  # None: the zero id Kafka sends for a topic it does not know
    partitions: tuple[DescribedPartitionOffsets, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroupOffsets:
    error_code: int = NONE
    error_message: str | None = None
    topics: tuple[DescribedTopicOffsets, ...] = ()


def lag_computable(error: int, start_offset: int, delivery_complete_count: int) -> bool:
    """GroupCoordinatorService.shouldComputeSharePartitionLag: the share partition has a start
    offset and the share coordinator gave its delivery-complete count."""
    return error == NONE and start_offset != UNINITIALIZED_START_OFFSET and delivery_complete_count != -1


def described_partition(partition: int, error: int, start_offset: int, leader_epoch: int, delivery_complete_count: int, end: tuple[int, int] | None) -> DescribedPartitionOffsets:
    """GroupCoordinatorService.computeShareGroupLagAndBuildResponse for one share partition read
    from the share coordinator, ``end`` the partition's (error, high watermark) where the lag is
    computable: the lag is the records from the start offset to the high watermark, less those
    already delivered for good. A failed read is told as start offset -1 and no error, as Kafka does."""
    if end is None or not lag_computable(error, start_offset, delivery_complete_count):
        return DescribedPartitionOffsets(partition, start_offset if error == NONE else UNINITIALIZED_START_OFFSET, leader_epoch if error == NONE else 0)
    end_error, end_offset = end
    if end_error != NONE:
        return DescribedPartitionOffsets(partition, error_code=end_error)
    return DescribedPartitionOffsets(partition, start_offset, leader_epoch, end_offset - start_offset - delivery_complete_count)


@dataclass(frozen=True, slots=True)
class DeleteShareGroupState:
    """DeleteGroups of a share group, before its tombstones (sharePartitionDeleteRequests): an
    error, or the share partitions whose state the persister is to delete (none: nothing to delete)."""

    error_code: int = NONE
    to_delete: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeat:
    """ShareGroupHeartbeat v1's fields, whatever decoded them."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None

    @classmethod
    def of(cls, request: Any) -> ShareGroupHeartbeat:
        names = request.subscribed_topic_names
        return cls(request.group_id, request.member_id, request.member_epoch, request.rack_id, None if names is None else tuple(names))


class ShareGroupManager(ModernGroupManager[ShareGroup]):
    """The share groups of one ``__consumer_offsets`` partition.

    ``is_other_group(group_id)`` tells whether a group of another type (classic, consumer) holds the id."""

    group_type = ShareGroup
    member_type = ShareGroupMember
    result_type = ShareGroupResult
    type_name = "share"
    session_timeout_timer = SESSION_TIMEOUT_TIMER

    def __init__(
        self,
        *,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 5000,
        max_size: int = 200,
        is_other_group: Callable[[str], bool] = lambda group_id: False,
        group_configs: ShareGroupConfigLookup | None = None,
    ) -> None:
        super().__init__(is_other_group=is_other_group)
        # group.share.session.timeout.ms, group.share.heartbeat.interval.ms, group.share.max.size.
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self._group_configs = group_configs
        # The topics last seen (heartbeats and metadata changes bring them): what a fenced
        # member's leaving is hashed against.
        self._topics: Topics = {}

    def session_timeout_ms_of(self, group_id: str) -> int:
        own = self._group_configs.share_session_timeout_ms(group_id) if self._group_configs is not None else None
        return self.session_timeout_ms if own is None else own

    def heartbeat_interval_ms_of(self, group_id: str) -> int:
        own = self._group_configs.share_heartbeat_interval_ms(group_id) if self._group_configs is not None else None
        return self.heartbeat_interval_ms if own is None else own

    # -- ShareGroupHeartbeat -----------------------------------------------------------------------

    def heartbeat(self, request: Any, topics: Topics, now_ms: int, *, client_id: str = "", client_host: str = "") -> ShareGroupResult[ShareGroupHeartbeatResponse]:
        """``request``: a ShareGroupHeartbeat (or kio's request); ``topics``: name -> (id, partition count)."""
        hb = request if isinstance(request, ShareGroupHeartbeat) else ShareGroupHeartbeat.of(request)
        try:
            _validate(hb)
            if hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(hb)
            return self._heartbeat(hb, topics, now_ms, client_id, client_host)
        except GroupError as e:
            return ShareGroupResult(response=ShareGroupHeartbeatResponse(error_code=e.error_code, error_message=e.message))

    def _heartbeat(self, hb: ShareGroupHeartbeat, topics: Topics, now_ms: int, client_id: str, client_host: str) -> ShareGroupResult[ShareGroupHeartbeatResponse]:
        joining = hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group(hb.group_id, create=joining)
        if len(group.members) >= self.max_size and hb.member_id not in group.members:
            raise GroupError(GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of {self.max_size} members.")
        member = group.members.get(hb.member_id)
        if member is None:
            if not joining:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Member {hb.member_id} is not a member of group {group.group_id}.")
            member = ShareGroupMember(hb.member_id)
        else:
            throw_if_member_epoch_is_invalid("share", member, hb.member_epoch)
        records: list[Record] = []

        # 1. The member's subscription, and the group epoch when it or the topics changed.
        updated = replace(
            member,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            subscribed_topic_names=frozenset(hb.subscribed_topic_names) if hb.subscribed_topic_names is not None else member.subscribed_topic_names,
            client_id=client_id,
            client_host=client_host,
        )
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names or hb.member_id not in group.members
        if updated != member or hb.member_id not in group.members:
            records.append(member_metadata_record(group.group_id, updated))
        self._topics = topics
        subscribed = _subscribed_after(group, member, updated)
        hash_ = metadata_hash(subscribed, topics)
        topic_ids = {name: topic_id for name, (topic_id, _) in topics.items()}
        members = dict(group.members)
        members[updated.member_id] = updated
        bump_group_epoch = subscription_changed
        if group.group_epoch <= group.target_assignment_epoch:
            # Partitions initialized since the last target are assigned under a new epoch.
            bump_group_epoch |= _initialized_assignment_pending(group, members, topic_ids)
        group_epoch = group.group_epoch
        if bump_group_epoch or hash_ != group.metadata_hash:
            group_epoch += 1
            records.append(epoch_record(group.group_id, group_epoch, hash_))

        # 2. A new target when the group epoch moved past it.
        if group_epoch > group.target_assignment_epoch:
            target_epoch = group_epoch
            target = self._update_target_assignment(group, members, topic_ids, target_epoch, now_ms, records)[updated.member_id]
        else:
            target_epoch = group.target_assignment_epoch
            target = group.target_assignment.get(updated.member_id, {})

        # 3. The member takes its target.
        reconciled = next_member(updated, target_epoch, target, topic_ids, subscription_changed)
        if reconciled != updated or reconciled.member_epoch != member.member_epoch or hb.member_id not in group.members:
            records.append(current_assignment_record(group.group_id, reconciled))

        # 4. Subscribed partitions with no share-group state yet.
        initialize = _to_initialize(group, subscribed, topics)
        if initialize:
            initializing = dict(group.initializing)
            for topic_id, (name, ps) in initialize.items():
                initializing[topic_id] = (name, initializing.get(topic_id, (name, frozenset()))[1] | ps)
            records.append(state_partition_metadata_record(group.group_id, initializing, group.initialized, group.deleting))

        timers: list[TimerAction] = [self._session_timer(group.group_id, reconciled.member_id, now_ms)]
        assignment = None
        if joining or reconciled.assigned_partitions != member.assigned_partitions:
            assignment = {t: tuple(sorted(ps)) for t, ps in sorted(reconciled.assigned_partitions.items())}
        response = ShareGroupHeartbeatResponse(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms_of(group.group_id),
            assignment=assignment,
        )
        request = None
        if initialize:
            request = InitializeShareGroupState(group.group_id, group_epoch, {t: ps for t, (_, ps) in initialize.items()})
        return self._apply(ShareGroupResult(records, response, timers, request))

    def _update_target_assignment(
        self, group: ShareGroup, members: Mapping[str, ShareGroupMember], topic_ids: Mapping[str, uuid.UUID], epoch: int, now_ms: int, records: list[Record]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        subscriptions = {m.member_id: frozenset(topic_ids[n] for n in m.subscribed_topic_names if n in topic_ids) for m in members.values()}
        assignable = {t: ps for t, (_, ps) in group.initialized.items()}
        try:
            new_target = share_assignor.assign(subscriptions, group.target_assignment, assignable)
        except Exception as e:  # an assignor bug must not take the coordinator down
            raise GroupError(UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for epoch {epoch}: {e}") from e
        for member_id in sorted(new_target):
            if member_id not in group.target_assignment or group.target_assignment[member_id] != new_target[member_id]:
                records.append(target_assignment_record(group.group_id, member_id, new_target[member_id]))
        records.append(target_assignment_epoch_record(group.group_id, epoch, now_ms))
        return new_target

    # -- leaving and fencing -----------------------------------------------------------------------

    def _leave(self, hb: ShareGroupHeartbeat) -> ShareGroupResult[ShareGroupHeartbeatResponse]:
        group = self._group(hb.group_id, create=False)
        member = group.members.get(hb.member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Member {hb.member_id} is not a member of group {group.group_id}.")
        return self._fence_member(group, member, ShareGroupHeartbeatResponse(member_id=hb.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH))

    def _fence_member(self, group: ShareGroup, member: ShareGroupMember, response: Response | None) -> ShareGroupResult[Response]:
        """Remove the member and bump the group epoch, with the hash of what the others still
        subscribe to; they get a new target at their next heartbeat."""
        records = member_tombstones(group.group_id, member.member_id)
        hash_ = metadata_hash(_subscribed_after(group, member, None), self._topics)
        records.append(epoch_record(group.group_id, group.group_epoch + 1, hash_))
        return self._apply(ShareGroupResult(records, response, self._cancel_timers(group.group_id, member.member_id)))

    # -- share-group state initialization ----------------------------------------------------------

    def initialize_share_group_state(self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]) -> ShareGroupResult[None]:
        """The share coordinator initialized these partitions: they become assignable, and the
        next heartbeat puts them in the target."""
        group = self.groups.get(group_id)
        if group is None:
            return ShareGroupResult()
        initializing = dict(group.initializing)
        initialized = dict(group.initialized)
        for topic_id, ps in partitions.items():
            done = frozenset(ps)
            name = (initializing.get(topic_id) or initialized.get(topic_id) or ("", frozenset()))[0]
            left = initializing.get(topic_id, (name, frozenset()))[1] - done
            if left:
                initializing[topic_id] = (name, left)
            else:
                initializing.pop(topic_id, None)
            initialized[topic_id] = (name, initialized.get(topic_id, (name, frozenset()))[1] | done)
        return self._apply(ShareGroupResult([state_partition_metadata_record(group_id, initializing, initialized, group.deleting)]))

    def uninitialize_share_group_state(self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]) -> ShareGroupResult[None]:
        """The initialization failed: the partitions are no longer initializing, and a later heartbeat asks again."""
        group = self.groups.get(group_id)
        if group is None:
            return ShareGroupResult()
        initializing = dict(group.initializing)
        for topic_id, ps in partitions.items():
            if topic_id in initializing:
                name, pending = initializing[topic_id]
                left = pending - frozenset(ps)
                if left:
                    initializing[topic_id] = (name, left)
                else:
                    del initializing[topic_id]
        return self._apply(ShareGroupResult([state_partition_metadata_record(group_id, initializing, group.initialized, group.deleting)]))

    # -- share group offsets (kafka-share-groups --reset-offsets, --delete-offsets, --delete) -------

    def initialized_partitions(self, group_id: str) -> dict[uuid.UUID, frozenset[int]]:
        """Kafka's initializedShareGroupPartitions: what describing all of a group's offsets reads;
        nothing, and no error, for a group that does not exist."""
        group = self.groups.get(group_id)
        return {} if group is None else {t: ps for t, (_, ps) in group.initialized.items()}

    def alter_offsets(self, group_id: str, topics: Iterable[tuple[str, Sequence[tuple[int, int]]]], topic_metadata: Topics) -> ShareGroupResult[AlterShareGroupOffsets]:
        """GroupMetadataManager.alterShareGroupOffsets: only an empty group's start offsets move (the
        group is created if it does not exist). ``topics``: (name, ((partition, start offset), ...)).
        The partitions that exist become initializing; the shell initializes them on the share
        coordinator and reports back with ``initialize_share_group_state``."""
        try:
            group = self._group(group_id, create=True)
        except GroupError as e:
            return ShareGroupResult(response=AlterShareGroupOffsets(e.error_code, e.message))
        if group.members:
            return ShareGroupResult(response=AlterShareGroupOffsets(NON_EMPTY_GROUP, NON_EMPTY_GROUP_MESSAGE))
        answered: list[AlteredTopic] = []
        start_offsets: dict[tuple[uuid.UUID, int], int] = {}
        initializing: TopicPartitionsByName = {}
        for name, partitions in topics:
            if name not in topic_metadata:
                unknown = tuple(PartitionOutcome(p, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE) for p, _ in partitions)
                answered.append(AlteredTopic(name, None, unknown))
                continue
            topic_id, num_partitions = topic_metadata[name]
            outcomes = []
            for p, offset in partitions:
                if p < num_partitions:
                    outcomes.append(PartitionOutcome(p))
                    start_offsets[(topic_id, p)] = offset
                else:
                    outcomes.append(PartitionOutcome(p, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
            valid = frozenset(p for p, _ in partitions if p < num_partitions)
            if valid:
                initializing[topic_id] = (name, initializing.get(topic_id, (name, frozenset()))[1] | valid)
            answered.append(AlteredTopic(name, topic_id, tuple(outcomes)))
        records = []
        if initializing:
            # Kafka's addInitializingTopicsRecords: a topic initialized again is no longer deleting.
            merged = dict(group.initializing)
            for topic_id, (name, ps) in initializing.items():
                merged[topic_id] = (name, merged.get(topic_id, (name, frozenset()))[1] | ps)
            deleting = {t: n for t, n in group.deleting.items() if t not in initializing}
            records.append(state_partition_metadata_record(group_id, merged, group.initialized, deleting))
        return self._apply(ShareGroupResult(records, AlterShareGroupOffsets(topics=tuple(answered), state_epoch=group.group_epoch, start_offsets=start_offsets)))

    def delete_offsets(self, group_id: str, topic_names: Iterable[str], topic_metadata: Topics) -> ShareGroupResult[DeleteShareGroupOffsets]:
        """GroupCoordinatorShard.initiateDeleteShareGroupOffsets: an empty group's initialized
        topics asked for move to deleting; the shell deletes their state and then calls
        ``complete_delete_offsets``. A topic already deleting is deleted again (all its partitions)."""
        try:
            group = self._existing_group(group_id)
        except GroupError as e:
            return ShareGroupResult(response=DeleteShareGroupOffsets(e.error_code, e.message))
        if group.members:
            return ShareGroupResult(response=DeleteShareGroupOffsets(NON_EMPTY_GROUP, NON_EMPTY_GROUP_MESSAGE))
        if not group.has_state_metadata:
            return ShareGroupResult(response=DeleteShareGroupOffsets())
        initialized = dict(group.initialized)
        deleting = set(group.deleting)
        refused: list[DeletedTopic] = []
        to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for name in topic_names:
            if name not in topic_metadata:
                refused.append(DeletedTopic(name, None, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
                continue
            topic_id, num_partitions = topic_metadata[name]
            if topic_id in initialized:
                to_delete[topic_id] = (name, initialized.pop(topic_id)[1])
                deleting.add(topic_id)
            elif topic_id in deleting:
                to_delete[topic_id] = (name, frozenset(range(num_partitions)))
            else:
                refused.append(DeletedTopic(name, None, UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS_TO_DELETE_MESSAGE))
        names = _names_by_id(topic_metadata)
        record = state_partition_metadata_record(group_id, group.initializing, initialized, {t: names.get(t, UNKNOWN_TOPIC_NAME) for t in deleting})
        return self._apply(ShareGroupResult([record], DeleteShareGroupOffsets(refused=tuple(refused), to_delete=to_delete)))

    def complete_delete_offsets(self, group_id: str, deleted: Iterable[uuid.UUID], topic_metadata: Topics) -> ShareGroupResult[None]:
        """GroupMetadataManager.completeDeleteShareGroupOffsets: topics whose state is deleted are
        no longer deleting."""
        group = self.groups.get(group_id)
        if group is None or not group.has_state_metadata:
            return ShareGroupResult()
        gone = set(deleted)
        names = _names_by_id(topic_metadata)
        deleting = {t: names.get(t, UNKNOWN_TOPIC_NAME) for t in group.deleting if t not in gone}
        return self._apply(ShareGroupResult([state_partition_metadata_record(group_id, group.initializing, group.initialized, deleting)]))

    def delete_group_state(self, group_id: str, topic_metadata: Topics) -> ShareGroupResult[DeleteShareGroupState]:
        """DeleteGroups of a share group, first step (GroupCoordinatorShard.sharePartitionDeleteRequests,
        GroupMetadataManager.shareGroupBuildPartitionDeleteRequest): an empty group's initialized,
        initializing and deleting partitions all become deleting; the shell deletes their state,
        then the group (``delete_group``)."""
        try:
            group = self._existing_group(group_id)
        except GroupError as e:
            return ShareGroupResult(response=DeleteShareGroupState(e.error_code))
        if group.state is not ShareGroupState.EMPTY:
            return ShareGroupResult(response=DeleteShareGroupState(NON_EMPTY_GROUP))
        if not group.has_state_metadata:
            return ShareGroupResult(response=DeleteShareGroupState())
        to_delete: TopicPartitionsByName = {}
        for topics in (group.initialized, group.initializing):
            for topic_id, (name, ps) in topics.items():
                to_delete[topic_id] = (name, to_delete.get(topic_id, (name, frozenset()))[1] | ps)
        ids = {topic_id: (name, count) for name, (topic_id, count) in topic_metadata.items()}
        for topic_id in group.deleting:
            # A topic deleted since has no share partitions left to delete.
            if topic_id in ids:
                name, count = ids[topic_id]
                to_delete[topic_id] = (name, to_delete.get(topic_id, (name, frozenset()))[1] | frozenset(range(count)))
        record = state_partition_metadata_record(group_id, {}, {}, {t: name for t, (name, _) in to_delete.items()})
        return self._apply(ShareGroupResult([record], DeleteShareGroupState(to_delete={t: ps for t, (_, ps) in to_delete.items() if ps})))

    # -- metadata, admin ---------------------------------------------------------------------------

    def on_metadata_change(self, topics: Topics) -> ShareGroupResult[None]:
        """Subscribed topics created, deleted or resized: the group epoch moves, hence a new target."""
        self._topics = topics
        records: list[Record] = []
        for group in self.groups.values():
            hash_ = metadata_hash(group.subscribed_topic_names, topics)
            if hash_ != group.metadata_hash:
                records.append(epoch_record(group.group_id, group.group_epoch + 1, hash_))
        return self._apply(ShareGroupResult(records))

    def describe(self, group_ids: Iterable[str], topic_names_by_id: Mapping[uuid.UUID, str]) -> list[DescribedShareGroup]:
        described = []
        for group_id in group_ids:
            try:
                group = self._existing_group(group_id)
            except GroupError as e:
                described.append(DescribedShareGroup(group_id, error_code=e.error_code, error_message=e.message))
                continue
            members = tuple(
                DescribedShareGroupMember(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                    # Topics deleted since are left out, as Kafka does.
                    assignment=tuple(
                        DescribedTopicPartitions(t, topic_names_by_id[t], tuple(sorted(ps)))
                        for t, ps in sorted(m.assigned_partitions.items())
                        if t in topic_names_by_id
                    ),
                )
                for m in group.members.values()
            )
            described.append(
                DescribedShareGroup(
                    group_id,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.target_assignment_epoch,
                    assignor_name=share_assignor.SIMPLE_ASSIGNOR_NAME,
                    members=members,
                )
            )
        return described

    def _group_tombstones(self, group: ShareGroup) -> list[Record]:
        """Its share-group state on the share coordinator is the shell's to delete first, as Kafka's DeleteShareGroupState."""
        return group_tombstones(group)

    # -- records -----------------------------------------------------------------------------------

    def replay(self, key: object, value: object | None) -> None:
        """Apply one record of the partition; records of other kinds are ignored."""
        match key:
            case ShareGroupMetadataKey(group_id=group_id):
                if isinstance(value, ShareGroupMetadataValue):
                    group = self._persisted_group(group_id)
                    group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
                else:
                    self.groups.pop(group_id, None)
            case ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id):
                if isinstance(value, ShareGroupMemberMetadataValue):
                    self._replay_member(
                        group_id,
                        member_id,
                        rack_id=value.rack_id,
                        client_id=value.client_id,
                        client_host=value.client_host,
                        subscribed_topic_names=frozenset(value.subscribed_topic_names),
                    )
                else:
                    self._replay_member_tombstone(group_id, member_id)
            case ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id):
                target = _partitions(value.topic_partitions) if isinstance(value, ShareGroupTargetAssignmentMemberValue) else None
                self._replay_target_assignment(group_id, member_id, target)
            case ShareGroupTargetAssignmentMetadataKey(group_id=group_id):
                epoch = value.assignment_epoch if isinstance(value, ShareGroupTargetAssignmentMetadataValue) else None
                self._replay_target_assignment_epoch(group_id, epoch)
            case ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id):
                if isinstance(value, ShareGroupCurrentMemberAssignmentValue):
                    self._replay_member(
                        group_id,
                        member_id,
                        member_epoch=value.member_epoch,
                        previous_member_epoch=value.previous_member_epoch,
                        state=MemberState.from_value(value.state),
                        assigned_partitions=_partitions(value.assigned_partitions),
                    )
                else:
                    self._replay_assignment_tombstone(
                        group_id, member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH, assigned_partitions={}
                    )
            case ShareGroupStatePartitionMetadataKey(group_id=group_id):
                if isinstance(value, ShareGroupStatePartitionMetadataValue):
                    group = self._persisted_group(group_id)
                    group.initializing = {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initializing_topics}
                    group.initialized = {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initialized_topics}
                    group.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}
                    group.has_state_metadata = True
                elif group_id in self.groups:
                    group = self.groups[group_id]
                    group.initializing, group.initialized, group.deleting = {}, {}, {}
                    group.has_state_metadata = False


# -- helpers ---------------------------------------------------------------------------------------


def _validate(hb: ShareGroupHeartbeat) -> None:
    """Kafka 4.4's throwIfShareGroupHeartbeatRequestIsInvalid."""
    throw_if_empty_string(hb.member_id, "MemberId can't be empty.")
    throw_if_empty_string(hb.group_id, "GroupId can't be empty.")
    throw_if_empty_string(hb.rack_id, "RackId can't be empty.")
    if hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if not hb.subscribed_topic_names:
            raise GroupError(INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    elif hb.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise GroupError(INVALID_REQUEST, "MemberEpoch is invalid.")


def _subscribed_after(group: ShareGroup, old: ShareGroupMember, new: ShareGroupMember | None) -> set[str]:
    """The group's subscribed topic names once ``old`` is replaced by ``new`` (None: removed)."""
    counts = group.subscribed_topic_names.copy()
    if old.member_id in group.members:
        counts.subtract(old.subscribed_topic_names)
    if new is not None:
        counts.update(new.subscribed_topic_names)
    return {name for name, count in counts.items() if count > 0}


def _initialized_assignment_pending(group: ShareGroup, members: Mapping[str, ShareGroupMember], topic_ids: Mapping[str, uuid.UUID]) -> bool:
    """Kafka's initializedAssignmentPending: some initialized partition of a subscribed topic is
    missing from the target assignment."""
    if not members or not group.initialized:
        return False
    subscribed = {topic_ids[n] for m in members.values() for n in m.subscribed_topic_names if n in topic_ids}
    in_target: dict[uuid.UUID, set[int]] = {}
    for partitions in group.target_assignment.values():
        for topic_id, ps in partitions.items():
            in_target.setdefault(topic_id, set()).update(ps)
    return any(topic_id in subscribed and in_target.get(topic_id, set()) != set(ps) for topic_id, (_, ps) in group.initialized.items())


def _partitions(topic_partitions: Iterable[Any]) -> dict[uuid.UUID, frozenset[int]]:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def _names_by_id(topics: Topics) -> dict[uuid.UUID, str]:
    return {topic_id: name for name, (topic_id, _) in topics.items()}


def _to_initialize(group: ShareGroup, subscribed: Iterable[str], topics: Topics) -> TopicPartitionsByName:
    """Subscribed partitions neither initialized nor being initialized."""
    missing: TopicPartitionsByName = {}
    for name in sorted(subscribed):
        if name not in topics:
            continue
        topic_id, num_partitions = topics[name]
        known = group.initialized.get(topic_id, (name, frozenset()))[1] | group.initializing.get(topic_id, (name, frozenset()))[1]
        new = frozenset(range(num_partitions)) - known
        if new:
            missing[topic_id] = (name, new)
    return missing
