"""Offset commits and fetches of streams group members, as Kafka 4.4's StreamsGroup
validateOffsetCommit and validateOffsetFetch check them, and the one view the offsets
(``OffsetMetadataManager``) have of the KIP-848, KIP-932 and KIP-1071 groups.

A share group keeps no committed offsets: Kafka 4.4's ShareGroup refuses every offset API for
its id with GROUP_ID_NOT_FOUND ("Group %s is not a consumer group.").

A streams member commits the offsets of its tasks' input partitions: a member at an older epoch
may still commit a partition whose task it holds (or is revoking) from that epoch or before.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from broker.group.consumer_group import CommitPartitionValidator, ConsumerGroupManager
from broker.group.modern_group_manager import GroupError
from broker.group.share_group_manager import ShareGroupManager
from broker.group.streams_group import StreamsGroupMember, StreamsGroupState
from broker.group.streams_group_manager import StreamsGroupManager
from broker.group.streams_group_records import StreamsGroupTopologyValue

UNKNOWN_SERVER_ERROR = -1
UNKNOWN_MEMBER_ID = 25
UNSUPPORTED_VERSION = 35
GROUP_ID_NOT_FOUND = 69
STALE_MEMBER_EPOCH = 113

# OffsetCommit's first version with a member epoch.
FIRST_MEMBER_EPOCH_OFFSET_COMMIT_VERSION = 9
NO_GENERATION_ID = -1


def _no_check(topic: str, topic_id: uuid.UUID | None, partition: int) -> None:
    return None


def _source_topic_map(topology: StreamsGroupTopologyValue) -> dict[str, str]:
    """StreamsTopology.sourceTopicMap: each source and repartition source topic's subtopology."""
    out: dict[str, str] = {}
    for s in topology.subtopologies:
        for name in s.source_topics:
            out[name] = s.subtopology_id
        for info in s.repartition_source_topics:
            out[info.name] = s.subtopology_id
    return out


def _assignment_epoch_validator(topology: StreamsGroupTopologyValue | None, member: StreamsGroupMember, member_epoch: int) -> CommitPartitionValidator:
    """createAssignmentEpochValidator: each partition's task must be the member's (assigned or
    pending revocation) from an epoch no later than the one it commits with."""
    if topology is None:
        raise GroupError(STALE_MEMBER_EPOCH, "Topology is not available for offset commit validation.")
    subtopologies = _source_topic_map(topology)
    assigned: Mapping[str, Mapping[int, int]] = member.assigned.active
    revoking: Mapping[str, Mapping[int, int]] = member.pending_revocation.active

    def validate(topic: str, topic_id: uuid.UUID | None, partition: int) -> None:
        subtopology = subtopologies.get(topic)
        if subtopology is None:
            raise GroupError(STALE_MEMBER_EPOCH, f"Topic {topic} is not in the topology.")
        epoch = assigned.get(subtopology, {}).get(partition)
        if epoch is None:
            epoch = revoking.get(subtopology, {}).get(partition)
        if epoch is None:
            raise GroupError(STALE_MEMBER_EPOCH, f"Task {subtopology}-{partition} is not assigned or pending revocation for member.")
        if member_epoch < epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"Received member epoch {member_epoch} is older than assignment epoch {epoch} for task {subtopology}-{partition}.")

    return validate


class ModernGroupOffsets:
    """The offsets' ConsumerGroupOffsets over the consumer, share and streams groups of a shard."""

    def __init__(self, consumer_groups: ConsumerGroupManager, streams_groups: StreamsGroupManager, share_groups: ShareGroupManager) -> None:
        self._consumer = consumer_groups
        self._streams = streams_groups
        self._share = share_groups

    def _refuse_share_group(self, group_id: str) -> None:
        if group_id in self._share.groups:
            raise GroupError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, transactional: bool, version: int, instance_id: str | None = None
    ) -> CommitPartitionValidator | None:
        self._refuse_share_group(group_id)
        group = self._streams.groups.get(group_id)
        if group is None:
            return self._consumer.validate_offset_commit(group_id, member_id, member_epoch, transactional=transactional, version=version, instance_id=instance_id)
        if member_epoch < 0 and not group.members:
            return _no_check
        if transactional and member_epoch == NO_GENERATION_ID and member_id == "" and instance_id is None:
            return _no_check
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if not transactional and version < FIRST_MEMBER_EPOCH_OFFSET_COMMIT_VERSION:
            raise GroupError(UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members using the streams group protocol")
        if member_epoch == member.member_epoch:
            return _no_check
        if member_epoch > member.member_epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"Received member epoch {member_epoch} is newer than current member epoch {member.member_epoch}.")
        return _assignment_epoch_validator(group.topology, member, member_epoch)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        self._refuse_share_group(group_id)
        group = self._streams.groups.get(group_id)
        if group is None:
            self._consumer.validate_offset_fetch(group_id, member_id, member_epoch)
            return
        if member_id is None and member_epoch < 0:
            return
        if member_id is None:
            # As a consumer group's: Kafka's members map lookup of a null id fails (UNKNOWN_SERVER_ERROR).
            raise GroupError(UNKNOWN_SERVER_ERROR, f"A null member id with member epoch {member_epoch} names no member of group {group_id}.")
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if member_epoch != member.member_epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the expected member epoch {member.member_epoch}.")

    def validate_offset_delete(self, group_id: str) -> None:
        """Only a share group refuses OffsetDelete here; the others check each topic's subscription."""
        self._refuse_share_group(group_id)

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """A streams group's topology's source and repartition source topics (StreamsGroup.isSubscribedToTopic):
        none once the group is Empty, whose offsets OffsetDelete may then delete."""
        group = self._streams.groups.get(group_id)
        if group is None:
            return self._consumer.subscribed_topics(group_id)
        if group.topology is None or group.state in (StreamsGroupState.EMPTY, StreamsGroupState.DEAD):
            return set()
        return set(_source_topic_map(group.topology))
