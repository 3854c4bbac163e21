"""Everything one ``__consumer_offsets`` partition coordinates, sans-IO: its classic groups,
its consumer-protocol (KIP-848) groups, its share groups (KIP-932), its streams groups (KIP-1071)
and their committed offsets,
rebuilt from the partition's records when it is loaded. A group id belongs to one group type at
a time: the others refuse it as Kafka's GroupMetadataManager does.

Kafka's coordinator keeps one shard per partition, so a partition's groups move together
when its leadership moves. Kafka keeps the shard's state in snapshot-timeline structures, so a
write that fails takes it back to where it was before; here an operation that may write takes
a ``GroupSnapshot`` of the groups it touches first, and ``revert`` puts them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from broker.group.classic_group import ClassicGroup, ClassicGroupState
from broker.group.consumer_group import ConsumerGroup, ConsumerGroupManager, GroupConfigLookup
from broker.group.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from broker.group.group_metadata_manager import (
    GROUP_ID_NOT_FOUND,
    NONE,
    CoordinatorResult,
    GroupConfig,
    GroupMetadataManager,
    Record,
)
from broker.group.offset_metadata_manager import OffsetMetadataManager
from broker.group.share_group import SHARE_PROTOCOL_TYPE, ShareGroup
from broker.group.share_group_manager import SESSION_TIMEOUT_TIMER as SHARE_SESSION_TIMEOUT_TIMER
from broker.group.share_group_manager import ShareGroupConfigLookup, ShareGroupManager
from broker.group.streams_group import STREAMS_PROTOCOL_TYPE, StreamsGroup
from broker.group.streams_group_offsets import ModernGroupOffsets
from broker.group.streams_group_manager import StreamsGroupConfigLookup, StreamsGroupManager
from broker.group.streams_group_records import STREAMS_GROUP_KEY_TYPES

CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
SHARE_GROUP_TYPE = "share"
STREAMS_GROUP_TYPE = "streams"
SHARE_GROUP_KEYS = (
    ShareGroupMetadataKey,
    ShareGroupMemberMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """Groups as they were before an operation (None: the group did not exist); the consumer
    and share groups are filled in as the operation's records change them. Committed offsets
    need none: they change in memory only once their records are replicated."""

    classic: dict[str, ClassicGroup | None]
    consumer: dict[str, ConsumerGroup | None]
    share: dict[str, ShareGroup | None]
    streams: dict[str, StreamsGroup | None] = field(default_factory=dict)

    @property
    def group_ids(self) -> set[str]:
        return set(self.classic) | set(self.consumer) | set(self.share) | set(self.streams)


class GroupCoordinatorShard:
    def __init__(
        self,
        config: GroupConfig,
        *,
        offset_metadata_max_bytes: int,
        offsets_retention_ms: int,
        consumer_session_timeout_ms: int = 45000,
        consumer_heartbeat_interval_ms: int = 5000,
        consumer_max_size: int = 2**31 - 1,
        group_configs: GroupConfigLookup | None = None,
        share_session_timeout_ms: int = 45000,
        share_heartbeat_interval_ms: int = 5000,
        share_max_size: int = 200,
        share_group_configs: ShareGroupConfigLookup | None = None,
        streams_session_timeout_ms: int = 45000,
        streams_heartbeat_interval_ms: int = 5000,
        streams_max_size: int = 2**31 - 1,
        streams_num_standby_replicas: int = 0,
        streams_acceptable_recovery_lag: int = 10000,
        streams_task_offset_interval_ms: int = 60000,
        streams_group_configs: StreamsGroupConfigLookup | None = None,
    ) -> None:
        self.groups = GroupMetadataManager(
            config, is_other_protocol_group=lambda g: g in self.consumer_groups.groups or g in self.share_groups.groups or g in self.streams_groups.groups
        )
        self.consumer_groups = ConsumerGroupManager(
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            max_size=consumer_max_size,
            group_configs=group_configs,
            is_other_group=lambda g: self.groups.group(g) is not None or g in self.share_groups.groups or g in self.streams_groups.groups,
            delete_empty_classic_group=self._drop_empty_classic_group,
        )
        self.share_groups = ShareGroupManager(
            session_timeout_ms=share_session_timeout_ms,
            heartbeat_interval_ms=share_heartbeat_interval_ms,
            max_size=share_max_size,
            is_other_group=lambda g: self.groups.group(g) is not None or g in self.consumer_groups.groups or g in self.streams_groups.groups,
            group_configs=share_group_configs,
        )
        self.streams_groups = StreamsGroupManager(
            session_timeout_ms=streams_session_timeout_ms,
            heartbeat_interval_ms=streams_heartbeat_interval_ms,
            max_size=streams_max_size,
            num_standby_replicas=streams_num_standby_replicas,
            acceptable_recovery_lag=streams_acceptable_recovery_lag,
            task_offset_interval_ms=streams_task_offset_interval_ms,
            is_other_group=lambda g: self.groups.group(g) is not None or g in self.consumer_groups.groups or g in self.share_groups.groups,
            group_configs=streams_group_configs,
        )
        self.offsets = OffsetMetadataManager(
            self.groups,
            metadata_max_bytes=offset_metadata_max_bytes,
            retention_ms=offsets_retention_ms,
            consumer_groups=ModernGroupOffsets(self.consumer_groups, self.streams_groups, self.share_groups),
        )

    def _drop_empty_classic_group(self, group_id: str) -> list[Record] | None:
        """A consumer-protocol member may take over the id of an empty classic group, as in Kafka."""
        group = self.groups.group(group_id)
        if group is None or not group.is_in(ClassicGroupState.EMPTY):
            return None
        return self.groups.delete_group(group_id, group.state_timestamp_ms).records

    def replay(self, key: object, value: object | None, record_offset: int) -> None:
        """A record of the partition's log, at ``record_offset``, outside any transaction."""
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.offsets.replay(key, value, record_offset)
        elif isinstance(key, GroupMetadataKey):
            assert value is None or isinstance(value, GroupMetadataValue)
            self.groups.replay(key, value)
        elif isinstance(key, SHARE_GROUP_KEYS):
            self.share_groups.replay(key, value)
        elif isinstance(key, STREAMS_GROUP_KEY_TYPES):
            self.streams_groups.replay(key, value)
        else:
            self.consumer_groups.replay(key, value)

    def snapshot(self, group_ids: Iterable[str] | None = None) -> GroupSnapshot:
        """The classic groups given (all of them for None) as they are, and from now on each
        consumer group as it is before records change it: what a failed write reverts to."""
        ids = set(self.groups.groups) if group_ids is None else set(group_ids)
        classic = {group_id: None if (group := self.groups.groups.get(group_id)) is None else group.copy() for group_id in ids}
        return GroupSnapshot(classic=classic, consumer=self.consumer_groups.journal(), share=self.share_groups.journal(), streams=self.streams_groups.journal())

    def snapshot_before_commit(self, group_id: str) -> GroupSnapshot | None:
        """An offset commit changes no group it finds; a simple consumer's creates an empty one."""
        if self.groups.group(group_id) is not None or any(group_id in m.groups for m in (self.consumer_groups, self.share_groups, self.streams_groups)):
            return None
        return self.snapshot([group_id])

    def revert(self, snapshot: GroupSnapshot) -> None:
        registries = (
            (self.groups.groups, snapshot.classic),
            (self.consumer_groups.groups, snapshot.consumer),
            (self.share_groups.groups, snapshot.share),
            (self.streams_groups.groups, snapshot.streams),
        )
        for registry, groups in registries:
            for group_id, group in groups.items():
                if group is None:
                    registry.pop(group_id, None)
                else:
                    registry[group_id] = group  # type: ignore[assignment]

    def on_reverted(self, group_ids: Iterable[str], now_ms: int) -> CoordinatorResult:
        """The timers of groups just reverted: what they were armed for may be gone or back."""
        result = CoordinatorResult()
        for group_id in group_ids:
            result.extend(self.groups.on_reverted(group_id, now_ms))
            result.timers.extend(self.consumer_groups.on_reverted(group_id, now_ms).timers)
            result.timers.extend(self.share_groups.on_reverted(group_id, now_ms).timers)
            result.timers.extend(self.streams_groups.on_reverted(group_id, now_ms).timers)
        return result

    def members_of(self, group_id: str) -> set[str]:
        classic = self.groups.group(group_id)
        if classic is not None:
            return set(classic.members) | classic.pending_members
        modern = self.consumer_groups.groups.get(group_id) or self.share_groups.groups.get(group_id) or self.streams_groups.groups.get(group_id)
        return set(modern.members) if modern is not None else set()

    def on_timer(self, key: tuple[str, ...], now_ms: int) -> CoordinatorResult:
        if key[0].startswith("consumer-"):
            done = self.consumer_groups.on_timer(key, now_ms)
            return CoordinatorResult(records=done.records, timers=done.timers)
        if key[0] == SHARE_SESSION_TIMEOUT_TIMER:
            fenced = self.share_groups.on_timer(key, now_ms)
            return CoordinatorResult(records=fenced.records, timers=fenced.timers)
        if key[0].startswith("streams-"):
            expired = self.streams_groups.on_timer(key, now_ms)
            return CoordinatorResult(records=expired.records, timers=expired.timers)
        return self.groups.on_timer(key, now_ms)

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        result = self.groups.on_loaded(now_ms)
        loaded = self.consumer_groups.on_loaded(now_ms)
        result.extend(CoordinatorResult(records=loaded.records, timers=loaded.timers))
        result.timers.extend(self.share_groups.on_loaded(now_ms).timers)
        result.timers.extend(self.streams_groups.on_loaded(now_ms).timers)
        return result

    def list_groups(self, states: set[str], types: set[str]) -> list[ListedGroup]:
        """ListGroups v4's state filter and v5's type filter match case-insensitively, as in Kafka."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed = []
        for group in self.groups.groups.values():
            if group.is_in(ClassicGroupState.DEAD):
                continue
            if wanted_states and group.state.value.lower() not in wanted_states:
                continue
            if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
                continue
            listed.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value, CLASSIC_GROUP_TYPE))
        if not wanted_types or CONSUMER_GROUP_TYPE in wanted_types:
            for group_id, state in self.consumer_groups.list_groups():
                if not wanted_states or state.lower() in wanted_states:
                    listed.append(ListedGroup(group_id, CONSUMER_PROTOCOL_TYPE, state, CONSUMER_GROUP_TYPE))
        if not wanted_types or SHARE_GROUP_TYPE in wanted_types:
            for group_id, state in self.share_groups.list_groups():
                if not wanted_states or state.lower() in wanted_states:
                    listed.append(ListedGroup(group_id, SHARE_PROTOCOL_TYPE, state, SHARE_GROUP_TYPE))
        if not wanted_types or STREAMS_GROUP_TYPE in wanted_types:
            for group_id, state in self.streams_groups.list_groups():
                if not wanted_states or state.lower() in wanted_states:
                    listed.append(ListedGroup(group_id, STREAMS_PROTOCOL_TYPE, state, STREAMS_GROUP_TYPE))
        return listed

    def delete_groups(self, group_ids: list[str], now_ms: int) -> tuple[dict[str, int], CoordinatorResult]:
        """DeleteGroups: only empty groups go; their offsets and metadata become tombstones."""
        errors: dict[str, int] = {}
        result = CoordinatorResult()
        for group_id in group_ids:
            if group_id in self.consumer_groups.groups or group_id in self.streams_groups.groups:
                # A streams group's internal topics stay, as in Kafka.
                modern = self.consumer_groups if group_id in self.consumer_groups.groups else self.streams_groups
                deleted = modern.delete_group(group_id)
                code = deleted.response if deleted.response is not None else NONE
                errors[group_id] = code
                if code == NONE:
                    result.records.extend(self.offsets.delete_all_offsets(group_id))
                    result.records.extend(deleted.records)
                continue
            if group_id in self.share_groups.groups:
                # The last step of GroupCoordinator.delete_share_group, once the share coordinators
                # have deleted the group's state (DeleteGroups never reaches here before that).
                dropped = self.share_groups.delete_group(group_id)
                code = dropped.response if dropped.response is not None else NONE
                errors[group_id] = code
                if code == NONE:
                    result.records.extend(self.offsets.delete_all_offsets(group_id))
                    result.records.extend(dropped.records)
                continue
            code = self.groups.delete_group_check(group_id)
            if code == GROUP_ID_NOT_FOUND and self.offsets.has_offsets(group_id):
                code = NONE  # offsets committed by a simple consumer form a group Kafka can delete
            errors[group_id] = code
            if code == NONE:
                result.records.extend(self.offsets.delete_all_offsets(group_id))
                result.extend(self.groups.delete_group(group_id, now_ms))
        return errors, result

    def cleanup(self, now_ms: int) -> list[Record]:
        """Expire old offsets; an empty group left with no offsets is deleted, as in Kafka."""
        records = self.offsets.expire_offsets(now_ms)
        for group_id, group in list(self.groups.groups.items()):
            if group.is_in(ClassicGroupState.EMPTY) and not self.offsets.has_offsets(group_id):
                records.extend(self.groups.delete_group(group_id, now_ms).records)
        return records

