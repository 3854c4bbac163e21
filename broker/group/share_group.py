"""A share group (KIP-932) and its members, sans-IO: Kafka 4.4's ShareGroup, ShareGroupMember
and ShareGroupAssignmentBuilder, with the records that persist them (GroupCoordinatorRecordHelpers'
newShareGroup*Record).

A share group is a "modern" group like a KIP-848 consumer group (group epoch, target assignment
epoch, member epochs) with a simpler member life: members may share partitions, so nothing is
ever revoked, and a member moves straight to its target assignment. The state is only Empty or
Stable. Besides its members the group tracks which subscribed partitions have their share-group
state initialized (ShareGroupStatePartitionMetadata): only those are assigned.
"""

from __future__ import annotations

import enum
import hashlib
import struct
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

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
    ShareTopicPartitions,
    TopicInfo,
    TopicPartition,
    TopicPartitionsInfo,
)
from broker.group.current_assignment_builder import MemberState

Record = tuple[object, object | None]
Partitions = Mapping[uuid.UUID, frozenset[int]]
# topic id -> (topic name, partitions)
TopicPartitionsByName = dict[uuid.UUID, tuple[str, frozenset[int]]]

SHARE_PROTOCOL_TYPE = "share"


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned_partitions: Partitions = field(default_factory=dict)


@dataclass(eq=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    subscribed_topic_names: Counter[str] = field(default_factory=Counter)
    target_assignment_epoch: int = 0
    target_assignment: dict[str, Partitions] = field(default_factory=dict)
    # ShareGroupStatePartitionMetadata: partitions whose state is being, or has been, initialized
    # on the share coordinator, and topics whose state is being deleted.
    initializing: TopicPartitionsByName = field(default_factory=dict)
    initialized: TopicPartitionsByName = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)
    # Whether the group has a ShareGroupStatePartitionMetadata record at all: Kafka deletes no
    # offsets of a group without one, not even to say there are none.
    has_state_metadata: bool = False

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def copy(self) -> ShareGroup:
        """A copy to revert to: containers copied, members and assignments (immutable) shared."""
        return replace(
            self,
            members=dict(self.members),
            subscribed_topic_names=Counter(self.subscribed_topic_names),
            target_assignment=dict(self.target_assignment),
            initializing=dict(self.initializing),
            initialized=dict(self.initialized),
            deleting=dict(self.deleting),
        )

    def update_member(self, member: ShareGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self.subscribed_topic_names.subtract(old.subscribed_topic_names)
        self.subscribed_topic_names.update(member.subscribed_topic_names)
        self.subscribed_topic_names = +self.subscribed_topic_names
        self.members[member.member_id] = member

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self.subscribed_topic_names.subtract(old.subscribed_topic_names)
            self.subscribed_topic_names = +self.subscribed_topic_names


def next_member(member: ShareGroupMember, target_epoch: int, target: Partitions, topic_ids: Mapping[str, uuid.UUID], subscription_changed: bool) -> ShareGroupMember:
    """ShareGroupAssignmentBuilder.build: the member takes its target at the target epoch; a member
    already there whose subscription changed only drops the topics it left."""
    if member.member_epoch != target_epoch:
        return replace(
            member,
            state=MemberState.STABLE,
            previous_member_epoch=member.member_epoch,
            member_epoch=target_epoch,
            assigned_partitions=_subscribed_only(target, member.subscribed_topic_names, topic_ids),
        )
    if subscription_changed:
        return replace(member, assigned_partitions=_subscribed_only(target, member.subscribed_topic_names, topic_ids))
    return member


def _subscribed_only(partitions: Partitions, names: frozenset[str], topic_ids: Mapping[str, uuid.UUID]) -> Partitions:
    subscribed = {topic_ids[n] for n in names if n in topic_ids}
    return {t: ps for t, ps in partitions.items() if t in subscribed}


def metadata_hash(subscribed: Iterable[str], topics: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics that exist (id, name, partition count): a
    change of it bumps the group epoch. Kafka 4.4 hashes the same facts (and racks) with XXH3;
    ours differs in value, so a group loaded from a log Kafka wrote rebalances once."""
    names = sorted(n for n in subscribed if n in topics)
    if not names:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for name in names:
        topic_id, num_partitions = topics[name]
        digest.update(topic_id.bytes + struct.pack(">i", num_partitions) + name.encode() + b"\0")
    value: int = struct.unpack(">q", digest.digest())[0]
    return value


# -- records ---------------------------------------------------------------------------------------


def epoch_record(group_id: str, epoch: int, hash_: int) -> Record:
    return ShareGroupMetadataKey(group_id=group_id), ShareGroupMetadataValue(epoch=epoch, metadata_hash=hash_)


def member_metadata_record(group_id: str, member: ShareGroupMember) -> Record:
    return (
        ShareGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id),
        ShareGroupMemberMetadataValue(
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
        ),
    )


def target_assignment_record(group_id: str, member_id: str, partitions: Partitions) -> Record:
    return (
        ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        ShareGroupTargetAssignmentMemberValue(topic_partitions=tuple(TopicPartition(topic_id=t, partitions=tuple(sorted(ps))) for t, ps in sorted(partitions.items()))),
    )


def target_assignment_epoch_record(group_id: str, epoch: int, now_ms: int) -> Record:
    return ShareGroupTargetAssignmentMetadataKey(group_id=group_id), ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=now_ms)


def current_assignment_record(group_id: str, member: ShareGroupMember) -> Record:
    return (
        ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            assigned_partitions=tuple(ShareTopicPartitions(topic_id=t, partitions=tuple(sorted(ps))) for t, ps in sorted(member.assigned_partitions.items())),
        ),
    )


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Assignments go before the member, as Kafka removes them."""
    return [
        (ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]


def state_partition_metadata_record(group_id: str, initializing: TopicPartitionsByName, initialized: TopicPartitionsByName, deleting: Mapping[uuid.UUID, str]) -> Record:
    def infos(topics: TopicPartitionsByName) -> tuple[TopicPartitionsInfo, ...]:
        return tuple(TopicPartitionsInfo(topic_id=t, topic_name=name, partitions=tuple(sorted(ps))) for t, (name, ps) in sorted(topics.items()))

    return (
        ShareGroupStatePartitionMetadataKey(group_id=group_id),
        ShareGroupStatePartitionMetadataValue(
            initializing_topics=infos(initializing),
            initialized_topics=infos(initialized),
            deleting_topics=tuple(TopicInfo(topic_id=t, topic_name=name) for t, name in sorted(deleting.items())),
        ),
    )


def group_tombstones(group: ShareGroup) -> list[Record]:
    """ShareGroup.createGroupTombstoneRecords: what deleting an empty group writes."""
    return [
        (ShareGroupTargetAssignmentMetadataKey(group_id=group.group_id), None),
        (ShareGroupStatePartitionMetadataKey(group_id=group.group_id), None),
        (ShareGroupMetadataKey(group_id=group.group_id), None),
    ]
