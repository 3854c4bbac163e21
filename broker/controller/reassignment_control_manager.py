"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) on the controller.

Kafka's ReplicationControlManager.alterPartitionReassignments and listPartitionReassignments,
over the committed image. A new target writes one PartitionChangeRecord: replicas = target
plus the replicas being removed, with adding_replicas and removing_replicas. When the target
needs no new replica in the ISR (a reordering, a shrink) PartitionChangeBuilder completes it
in that same record; otherwise the AlterPartition that brings the last added replica into the
ISR does. A null target cancels: back to the original replicas, the added ones out of the ISR.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Sequence

from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_result import ApiError, ControllerResult
from broker.controller.feature_control_manager import metadata_version_of
from broker.controller.partition_change_builder import Election, PartitionChangeBuilder
from broker.controller.partition_reassignment import PartitionReassignmentReplicas, PartitionReassignmentRevert, is_reassignment_in_progress
from broker.controller.replication_control_manager import BrokerView, _check_manual_assignment, _leader_acceptor, default_dir, eligible_leader_replicas_enabled
from broker.metadata.metadata_image import MetadataImage, PartitionRegistration
from broker.metadata.metadata_records import MetadataRecord, PartitionChangeRecord

NO_REASSIGNMENT_IN_PROGRESS_MESSAGE = "No partition reassignment is in progress."


@dataclass(frozen=True, slots=True)
class ReassignablePartition:
    partition_index: int
    replicas: tuple[int, ...] | None  # None cancels the partition's reassignment


@dataclass(frozen=True, slots=True)
class ReassignableTopic:
    name: str
    partitions: tuple[ReassignablePartition, ...]


@dataclass(frozen=True, slots=True)
class ReassignablePartitionResult:
    partition_index: int
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ReassignableTopicResult:
    name: str
    partitions: list[ReassignablePartitionResult]


@dataclass(frozen=True, slots=True)
class OngoingPartitionReassignment:
    partition_index: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OngoingTopicReassignment:
    name: str
    partitions: list[OngoingPartitionReassignment]


class ReassignmentControlManager:
    def __init__(self, configuration: ConfigurationControlManager) -> None:
        self._configuration = configuration

    def alter_partition_reassignments(
        self, image: MetadataImage, topics: Sequence[ReassignableTopic], *, allow_replication_factor_change: bool = True
    ) -> ControllerResult[list[ReassignableTopicResult]]:
        """Each partition answered on its own, as Kafka does; the records of those that succeed.
        Without ``allow_replication_factor_change`` (KIP-860, v1) a target must keep the number
        of replicas the partition has, or is heading for."""
        records: list[MetadataRecord] = []
        results: list[ReassignableTopicResult] = []
        for topic in topics:
            answers: list[ReassignablePartitionResult] = []
            for target in topic.partitions:
                try:
                    record = self._alter_partition_reassignment(image, topic.name, target, allow_replication_factor_change)
                except ApiError as refused:
                    answers.append(ReassignablePartitionResult(target.partition_index, refused.error_code, refused.message))
                    continue
                if record is not None:
                    records.append(record)
                answers.append(ReassignablePartitionResult(target.partition_index, ErrorCode.none))
            results.append(ReassignableTopicResult(topic.name, answers))
        return ControllerResult(records, results)

    def _alter_partition_reassignment(
        self, image: MetadataImage, name: str, target: ReassignablePartition, allow_replication_factor_change: bool
    ) -> PartitionChangeRecord | None:
        topic = image.topics.get(name)
        if topic is None:
            raise ApiError(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}.")
        partition = topic.partitions.get(target.partition_index)
        if partition is None:
            raise ApiError(ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}:{target.partition_index}.")
        if target.replicas is None:
            return self._cancel(image, name, topic.topic_id, target.partition_index, partition)
        if not allow_replication_factor_change:
            _check_replication_factor_unchanged(partition, target.replicas)
        return self._change(image, name, topic.topic_id, target.partition_index, partition, target.replicas)

    def _cancel(self, image: MetadataImage, name: str, topic_id: uuid.UUID, index: int, partition: PartitionRegistration) -> PartitionChangeRecord | None:
        if not is_reassignment_in_progress(partition):
            raise ApiError(ErrorCode.no_reassignment_in_progress, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE)
        revert = PartitionReassignmentRevert.of(partition)
        unclean = self._configuration.unclean_leader_election_enabled(image, name)
        if revert.unclean and not unclean:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Unable to revert partition assignment for {name}:{index} because it would require an unclean leader election.",
            )
        builder = self._builder(image, name, topic_id, index, partition)
        if unclean:
            builder.set_election(Election.UNCLEAN)
        return builder.set_target_isr(revert.isr).set_target_replicas(revert.replicas).set_target_removing(()).set_target_adding(()).build()

    def _change(
        self, image: MetadataImage, name: str, topic_id: uuid.UUID, index: int, partition: PartitionRegistration, target: Sequence[int]
    ) -> PartitionChangeRecord | None:
        """Kafka's changePartitionReassignment: the first step towards ``target``, or the whole move
        when the ISR allows it at once. A reassignment in progress is replaced: its union of
        replicas counts as the current ones, and its replicas still being added stay so if the
        target keeps them.

        Where Kafka sets removing and adding only when the new lists are not empty (keeping the old
        move's otherwise), both are always replaced here: a new target that keeps every replica of
        the union would in Kafka still remove the replicas the old move was removing."""
        _check_manual_assignment(target, None, BrokerView.from_image(image))
        reassignment = PartitionReassignmentReplicas.of(partition.replicas, target)
        still_adding = set(partition.adding_replicas) & set(target)
        builder = self._builder(image, name, topic_id, index, partition)
        if reassignment.replicas != partition.replicas:
            builder.set_target_replicas(reassignment.replicas)
        builder.set_target_removing(reassignment.removing).set_target_adding(tuple(sorted(set(reassignment.adding) | still_adding)))
        return builder.build()

    def _builder(self, image: MetadataImage, name: str, topic_id: uuid.UUID, index: int, partition: PartitionRegistration) -> PartitionChangeBuilder:
        """A builder under the topic's effective min.insync.replicas and the cluster's eligible leader
        replicas, as Kafka's; no unclean election unless the caller asks (only a cancel may)."""
        min_isr = min(self._configuration.min_insync_replicas(image, name), len(partition.replicas))
        return PartitionChangeBuilder(
            partition,
            topic_id,
            index,
            _leader_acceptor(image, partition),
            lambda b: default_dir(image, b),
            min_isr=min_isr,
            eligible_leader_replicas_enabled=eligible_leader_replicas_enabled(image),
            record_version=metadata_version_of(image).partition_change_record_version,
        )

    def list_partition_reassignments(self, image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None) -> list[OngoingTopicReassignment]:
        """The reassignments in progress: of every topic (by name) for None, else of the listed
        partitions (unknown topics and partitions, and those not moving, left out)."""
        if topics is None:
            topics = [(name, sorted(image.topics[name].partitions)) for name in sorted(image.topics)]
        answer: list[OngoingTopicReassignment] = []
        for name, indexes in topics:
            topic = image.topics.get(name)
            if topic is None:
                continue
            ongoing = [
                OngoingPartitionReassignment(i, p.replicas, p.adding_replicas, p.removing_replicas)
                for i in indexes
                if (p := topic.partitions.get(i)) is not None and is_reassignment_in_progress(p)
            ]
            if ongoing:
                answer.append(OngoingTopicReassignment(name, ongoing))
        return answer


def _check_replication_factor_unchanged(partition: PartitionRegistration, target: Sequence[int]) -> None:
    """Kafka's validatePartitionReplicationFactorUnchanged: a move in progress counts the replicas it is heading for."""
    heading = (set(partition.replicas) | set(partition.adding_replicas)) - set(partition.removing_replicas)
    current = len(heading) if is_reassignment_in_progress(partition) else len(partition.replicas)
    if current != len(target):
        raise ApiError(ErrorCode.invalid_replication_factor, f"The replication factor is changed from {current} to {len(target)}")


__all__ = [
    "OngoingPartitionReassignment",
    "OngoingTopicReassignment",
    "ReassignablePartition",
    "ReassignablePartitionResult",
    "ReassignableTopic",
    "ReassignableTopicResult",
    "ReassignmentControlManager",
]
