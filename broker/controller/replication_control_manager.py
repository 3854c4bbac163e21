"""Kafka's ReplicationControlManager: topics, partitions, their placement and their leaders.

Every operation reads the committed image and returns the records that make the change.
Topic creation keeps Kafka 4.0's checks, order and messages. Leadership follows broker
liveness: a broker that is fenced, unregistered or in controlled shutdown leaves the ISR
of its partitions and loses their leadership; a broker that is unfenced becomes leader of
the leaderless partitions it may lead. Elections are PartitionChangeBuilder's; ElectLeaders
and the active controller's periodic balance give leadership back to preferred replicas.
Partition leaders change their ISR through AlterPartition, under Kafka 4's checks and error
codes.

Which brokers count: placement uses the registered brokers not in controlled shutdown
(unfenced ones first; a leader is always unfenced); manual assignments may name any
registered broker; the ISR of a new partition is its active replicas (unfenced and not
shutting down) and its leader the first of them. A ``BrokerView`` built from the image
says so; one built from a list of broker ids treats exactly those as registered and
active, which is what the single-node path passes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import ConfigurationControlManager, ValidateTopicConfig, check_config_values, config_error
from broker.controller.controller_result import ApiError, ControllerResult, duplicates
from broker.controller.feature_control_manager import eligible_leader_replicas_enabled, metadata_version_of
from broker.controller.partition_change_builder import RECOVERED, RECOVERING, Election, PartitionChangeBuilder, directory_is_online
from broker.controller.replica_placer import InvalidReplicationFactorError, StripedReplicaPlacer, UsableBroker
from broker.metadata.metadata_image import (
    MIGRATING_DIR,
    NO_LEADER,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    UNASSIGNED_DIR,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from broker.metadata.metadata_records import (
    ZERO_UUID,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)

MAX_TOPIC_NAME_LENGTH = 249
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
MAX_PARTITIONS_PER_BATCH = 10_000
# Kafka's cap on the preferred elections one balancing pass writes; a pass that reaches it runs again at once.
MAX_ELECTIONS_PER_IMBALANCE = 1_000
# ElectLeaders' election_type on the wire (Kafka's ElectionType).
ELECTION_TYPES = {0: Election.PREFERRED, 1: Election.UNCLEAN}

UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."
_DEFAULT_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available: "Eligible topic partition leaders are not available.",
}


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int  # -1: the default
    replication_factor: int  # -1: the default
    assignments: dict[int, list[int]] | None  # partition index -> replicas; replaces both counts
    configs: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: int
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the topic's overrides


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ElectLeaderResult:
    topic: str
    partition: int
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class IsrMember:
    """A replica of a requested ISR and the broker epoch its leader knows it by (-1: unchecked)."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionIsrChange:
    """One partition of an AlterPartition request: the ISR its leader wants, and the state it decided from."""

    partition_index: int
    leader_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionTopic:
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionIsrChange, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """A partition's answer, named as AlterPartitionResponse's fields. On success, the partition's state
    once the change is applied; on an error, the zeros Kafka's response carries by default."""

    partition_index: int
    error_code: int
    leader_id: int = 0
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionTopicResult:
    topic_id: uuid.UUID | None
    partitions: list[AlterPartitionResult]


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    """A top-level error (STALE_BROKER_EPOCH, UNKNOWN_SERVER_ERROR) answers no topics, as Kafka's error response."""

    error_code: int
    error_message: str | None = None
    topics: list[AlterPartitionTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BrokerView:
    """The brokers an operation may use: Kafka's ClusterDescriber plus the liveness checks."""

    usable: tuple[UsableBroker, ...]
    registered: frozenset[int]
    active: frozenset[int]
    # Brokers whose every log dir is cordoned (KIP-1066): no new replica goes there.
    cordoned: frozenset[int] = frozenset()

    @classmethod
    def from_image(cls, image: MetadataImage) -> BrokerView:
        brokers = sorted(image.brokers.values(), key=lambda b: b.broker_id)
        cordoned = frozenset(b.broker_id for b in brokers if not has_uncordoned_dirs(b))
        return cls(
            usable=tuple(UsableBroker(b.broker_id, b.rack, b.fenced) for b in brokers if not b.in_controlled_shutdown and b.broker_id not in cordoned),
            registered=frozenset(b.broker_id for b in brokers),
            active=frozenset(b.broker_id for b in brokers if not b.fenced and not b.in_controlled_shutdown),
            cordoned=cordoned,
        )

    @classmethod
    def from_ids(cls, image: MetadataImage, broker_ids: Iterable[int]) -> BrokerView:
        ids = sorted(set(broker_ids))
        racks = {b: image.brokers[b].rack if b in image.brokers else None for b in ids}
        cordoned = frozenset(b for b in ids if b in image.brokers and not has_uncordoned_dirs(image.brokers[b]))
        return cls(tuple(UsableBroker(b, racks[b]) for b in ids if b not in cordoned), frozenset(ids), frozenset(ids), cordoned)


def has_uncordoned_dirs(broker: BrokerRegistration) -> bool:
    """Kafka's BrokerRegistration.hasUncordonedDirs: true for a broker that registered no dirs or
    has not told its cordoned ones yet, else whether one of its dirs is not cordoned."""
    if not broker.directories or broker.cordoned_directories is None:
        return True
    return bool(set(broker.directories) - set(broker.cordoned_directories))


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: the message for an illegal topic name, None for a legal one."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name.encode("utf-16-le")) // 2 > MAX_TOPIC_NAME_LENGTH:  # Java counts UTF-16 units
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, Topic name: {name}"
    if not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def _has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def _unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def default_dir(image: MetadataImage, broker_id: int) -> uuid.UUID:
    """Kafka's ClusterControlManager.defaultDir: the broker's only directory if it has one."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        return UNASSIGNED_DIR
    if not broker.directories:
        return MIGRATING_DIR
    if len(broker.directories) == 1:
        return broker.directories[0]
    return UNASSIGNED_DIR


def _is_active(image: MetadataImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


# AssignReplicasToDirs, request and answer alike: per directory id, per topic id, its partitions
# (the answer gives each partition's error code with its index).
DirectoryAssignment = tuple[uuid.UUID, Sequence[tuple[uuid.UUID, Sequence]]]


@dataclass(frozen=True, slots=True)
class AssignReplicasToDirsReply:
    error_code: int
    error_message: str | None = None
    directories: Sequence[DirectoryAssignment] = ()


def _replica_directory(partition: PartitionRegistration, broker_id: int) -> uuid.UUID:
    """The dir the partition's replica on ``broker_id`` is in (MIGRATING when it names none)."""
    if broker_id not in partition.replicas or len(partition.directories) != len(partition.replicas):
        return MIGRATING_DIR
    return partition.directories[partition.replicas.index(broker_id)]


def _has_online_dir(image: MetadataImage, broker_id: int, partition: PartitionRegistration) -> bool:
    broker = image.brokers.get(broker_id)
    if broker is None:
        return False
    return directory_is_online(_replica_directory(partition, broker_id), broker.directories)


class ReplicationControlManager:
    def __init__(
        self,
        *,
        configuration: ConfigurationControlManager,
        placer: StripedReplicaPlacer,
        new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        self._configuration = configuration
        self._placer = placer
        self._new_topic_id = new_topic_id

    # --- CreateTopics -----------------------------------------------------------------

    def create_topics(
        self,
        image: MetadataImage,
        topics: Sequence[CreatableTopic],
        *,
        validate_only: bool,
        default_partitions: int,
        default_replication_factor: int,
        validate_config: ValidateTopicConfig,
        brokers: BrokerView | None = None,
    ) -> ControllerResult[list[CreateTopicResult]]:
        """One result per distinct name, in request order (a repeated name gets one INVALID_REQUEST)."""
        view = brokers or BrokerView.from_image(image)
        total = sum(
            len(t.assignments) if t.assignments else (default_partitions if t.num_partitions == -1 else max(t.num_partitions, 0))
            for t in topics
        )
        if total > MAX_PARTITIONS_PER_BATCH:
            names = dict.fromkeys(t.name for t in topics)
            return ControllerResult([], [CreateTopicResult(n, ErrorCode.policy_violation, "Excessively large number of partitions per request.") for n in names])
        dups = duplicates(t.name for t in topics)
        colliding: dict[str, str] = {}
        for existing in image.topics:
            if _has_collision_chars(existing):
                colliding.setdefault(_unify_collision_chars(existing), existing)
        records: list[MetadataRecord] = []
        results: list[CreateTopicResult] = []
        reported: set[str] = set()
        for topic in topics:
            if topic.name in reported:
                continue
            reported.add(topic.name)
            if topic.name in dups:
                results.append(CreateTopicResult(topic.name, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            try:
                topic_records, result = self._create_topic(image, topic, colliding, view, default_partitions, default_replication_factor, validate_config)
            except ApiError as refused:
                results.append(CreateTopicResult(topic.name, refused.error_code, refused.message))
                continue
            results.append(result)
            if not validate_only:
                records.extend(topic_records)
        return ControllerResult(records, results)

    def _create_topic(
        self,
        image: MetadataImage,
        topic: CreatableTopic,
        colliding: dict[str, str],
        view: BrokerView,
        default_partitions: int,
        default_replication_factor: int,
        validate_config: ValidateTopicConfig,
    ) -> tuple[list[MetadataRecord], CreateTopicResult]:
        name = topic.name
        if name == CLUSTER_METADATA_TOPIC:
            raise ApiError(ErrorCode.invalid_request, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        if name in image.topics:
            raise ApiError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        # Kafka records the name error, then lets a collision overwrite it.
        if _has_collision_chars(name) and _unify_collision_chars(name) in colliding:
            raise ApiError(ErrorCode.invalid_topic_exception, f"Topic '{name}' collides with existing topic: {colliding[_unify_collision_chars(name)]}")
        problem = topic_name_error(name)
        if problem is not None:
            raise ApiError(ErrorCode.invalid_topic_exception, problem)
        nulls = [k for k, v in topic.configs.items() if v is None]
        if nulls:
            raise ApiError(ErrorCode.invalid_config, "Null value not supported for topic configs: " + ",".join(nulls))
        configs = {k: v for k, v in topic.configs.items() if v is not None}
        if configs:
            check_config_values(configs.values())
            try:
                validate_config(configs)
            except ValueError as e:
                raise config_error(e) from e
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ApiError(ErrorCode.invalid_request, "A manual partition assignment was specified, but replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise ApiError(ErrorCode.invalid_request, "A manual partition assignment was specified, but numPartitions was not set to -1.")
            manual_rf: int | None = None
            isrs: dict[int, list[int]] = {}
            for index, replicas in topic.assignments.items():
                _check_manual_assignment(replicas, manual_rf, view)
                manual_rf = len(replicas)
                isrs[index] = _manual_isr(replicas, index, view)
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise ApiError(ErrorCode.invalid_replica_assignment, "partitions should be a consecutive 0-based integer sequence")
            assignment = [list(topic.assignments[i]) for i in range(len(topic.assignments))]
            isr = [isrs[i] for i in range(len(assignment))]
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise ApiError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0, or -1 to use the default value.")
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise ApiError(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.")
        else:
            count = default_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            if count <= 0:
                raise ApiError(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.")
            try:
                assignment = self._placer.place(count, rf, view.usable)
            except InvalidReplicationFactorError as e:
                raise ApiError(ErrorCode.invalid_replication_factor, f"Unable to replicate the partition {rf} time(s): {e}") from None
            isr = [[b for b in replicas if b in view.active] for replicas in assignment]
        topic_id = self._new_topic_id()
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        records.extend(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v) for k, v in sorted(configs.items()))
        records.extend(_partition_records(image, topic_id, 0, assignment, isr))
        return records, CreateTopicResult(name, ErrorCode.none, None, topic_id, len(assignment), len(assignment[0]), configs)

    # --- DeleteTopics -----------------------------------------------------------------

    def delete_topics(self, image: MetadataImage, topics: Sequence[tuple[str | None, uuid.UUID | None]]) -> ControllerResult[list[DeleteTopicResult]]:
        """Each entry is (name, None) or (None, topic id), as DeleteTopics v0-5 and v6+ give them.

        Kafka's rules: both or neither given, repeated names or ids are INVALID_REQUEST;
        a name that maps to an id also given by id deletes nothing and answers
        INVALID_REQUEST on the name only. Internal topics may be deleted, as in Kafka.
        """
        names = [n for n, i in topics if n is not None and (i is None or i == ZERO_UUID)]
        ids = [i for n, i in topics if n is None and i is not None and i != ZERO_UUID]
        dup_names = duplicates(names)
        dup_ids = duplicates(ids)
        by_id_ok = {i for i in ids if i not in dup_ids and i in image.topics_by_id}
        records: list[MetadataRecord] = []
        results: list[DeleteTopicResult] = []
        reported: set[object] = set()
        for name, topic_id in topics:
            tid = None if topic_id is None or topic_id == ZERO_UUID else topic_id
            if name is None and tid is None:
                results.append(DeleteTopicResult(None, None, ErrorCode.invalid_request, "Neither topic name nor id were specified."))
                continue
            if name is not None and tid is not None:
                results.append(DeleteTopicResult(name, tid, ErrorCode.invalid_request, "You may not specify both topic name and topic id."))
                continue
            key: object = ("name", name) if tid is None else ("id", tid)
            if key in reported:
                continue
            reported.add(key)
            if name is not None:
                if name in dup_names:
                    results.append(DeleteTopicResult(name, None, ErrorCode.invalid_request, "Duplicate topic name."))
                    continue
                topic = image.topics.get(name)
                if topic is None:
                    results.append(DeleteTopicResult(name, None, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
                    continue
                if topic.topic_id in dup_ids or topic.topic_id in by_id_ok:
                    results.append(
                        DeleteTopicResult(name, topic.topic_id, ErrorCode.invalid_request, "The provided topic name maps to an ID that was already supplied.")
                    )
                    continue
            else:
                assert tid is not None
                if tid in dup_ids:
                    results.append(DeleteTopicResult(None, tid, ErrorCode.invalid_request, "Duplicate topic id."))
                    continue
                topic = image.topics_by_id.get(tid)
                if topic is None:
                    results.append(DeleteTopicResult(None, tid, ErrorCode.unknown_topic_id, UNKNOWN_TOPIC_ID_MESSAGE))
                    continue
                if topic.name in names and topic.name not in dup_names:
                    continue  # the name's entry reports the clash; Kafka answers nothing for the id
            results.append(DeleteTopicResult(topic.name, topic.topic_id, ErrorCode.none))
            records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        return ControllerResult(records, results)

    # --- CreatePartitions -------------------------------------------------------------

    def create_partitions(
        self,
        image: MetadataImage,
        topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
        *,
        validate_only: bool,
        brokers: BrokerView | None = None,
    ) -> ControllerResult[list[CreatePartitionsResult]]:
        """Each entry is (name, new total count, one replica list per new partition or None)."""
        additional = sum(max(count - len(image.topics[name].partitions), 0) for name, count, _ in topics if name in image.topics)
        if additional > MAX_PARTITIONS_PER_BATCH:
            # Kafka's BoundedList of a user operation's records: the whole request is refused, before
            # placing anything (a count of 2^31 - 1 once had the controller place two billion partitions).
            names = dict.fromkeys(name for name, _, _ in topics)
            return ControllerResult([], [CreatePartitionsResult(n, ErrorCode.policy_violation, "Excessively large number of partitions per request.") for n in names])
        view = brokers or BrokerView.from_image(image)
        dups = duplicates(name for name, _, _ in topics)
        records: list[MetadataRecord] = []
        results: list[CreatePartitionsResult] = []
        reported: set[str] = set()
        for name, count, assignments in topics:
            if name in reported:
                continue
            reported.add(name)
            if name in dups:
                results.append(CreatePartitionsResult(name, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            try:
                new_records = self._create_partitions(image, name, count, assignments, view)
            except ApiError as refused:
                results.append(CreatePartitionsResult(name, refused.error_code, refused.message))
                continue
            results.append(CreatePartitionsResult(name, ErrorCode.none))
            if not validate_only:
                records.extend(new_records)
        return ControllerResult(records, results)

    def _create_partitions(
        self, image: MetadataImage, name: str, count: int, assignments: Sequence[Sequence[int]] | None, view: BrokerView
    ) -> list[PartitionRecord]:
        topic = image.topics.get(name)
        if topic is None:
            raise ApiError(ErrorCode.unknown_topic_or_partition, None)
        current = len(topic.partitions)
        if count == current:
            raise ApiError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        if count < current:
            raise ApiError(ErrorCode.invalid_partitions, f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
        additional = count - current
        if assignments is not None and len(assignments) != additional:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} assignment(s) were specified.",
            )
        if not topic.partitions:
            raise ApiError(ErrorCode.unknown_server_error, f"Invalid state: topic {name} appears to have no partitions.")
        rf = len(topic.partitions[min(topic.partitions)].replicas)
        if assignments is not None:
            for i, replicas in enumerate(assignments):
                _check_manual_assignment(replicas, rf, view)
                _manual_isr(replicas, current + i, view)
            new = [list(replicas) for replicas in assignments]
        else:
            try:
                new = self._placer.place(additional, rf, view.usable)
            except InvalidReplicationFactorError as e:
                raise ApiError(ErrorCode.invalid_replication_factor, str(e)) from None
        isr = [[b for b in replicas if b in view.active] for replicas in new]
        return _partition_records(image, topic.topic_id, current, new, isr)

    # --- leadership follows broker liveness -------------------------------------------

    def has_leaderships(self, image: MetadataImage, broker_id: int) -> bool:
        return any(p.leader == broker_id for t in image.topics.values() for p in t.partitions.values())

    def handle_brokers_fenced(self, image: MetadataImage, broker_ids: Collection[int]) -> list[PartitionChangeRecord]:
        """Take the brokers out of every ISR and give their partitions new leaders (one record per partition)."""
        removed = frozenset(broker_ids)
        partitions = ((t, p) for t, p in _partitions(image) if removed.intersection(p[2].isr))
        return self._leader_and_isr_updates(image, partitions, removed=removed, added=None)

    def handle_broker_fenced(self, image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
        return self.handle_brokers_fenced(image, (broker_id,))

    def handle_broker_in_controlled_shutdown(self, image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
        """As for fencing: leadership and ISR membership move away before the broker stops."""
        return self.handle_brokers_fenced(image, (broker_id,))

    def handle_broker_unregistered(self, image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
        return self.handle_brokers_fenced(image, (broker_id,))

    def handle_directories_offline(self, image: MetadataImage, broker_id: int, offline: Collection[uuid.UUID]) -> list[PartitionChangeRecord]:
        """Kafka's handleDirectoriesOffline: the broker's replicas in those of its registered dirs
        that it says are offline leave the ISR and lose the leadership (one record per partition)."""
        broker = image.brokers.get(broker_id)
        lost = frozenset(offline).intersection(broker.directories) if broker is not None else frozenset()
        if not lost:
            return []
        partitions = ((t, p) for t, p in _partitions(image) if _replica_directory(p[2], broker_id) in lost)
        return self._leader_and_isr_updates(image, partitions, removed=frozenset((broker_id,)), added=None)

    def assign_replicas_to_dirs(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, directories: Sequence[DirectoryAssignment]
    ) -> ControllerResult[AssignReplicasToDirsReply]:
        """Kafka's handleAssignReplicasToDirs (KIP-858): a broker tells which of its dirs holds each of
        its replicas. One PartitionChangeRecord per replica whose dir changes; a replica assigned to a
        dir not online in the broker's registration leaves the ISR and the leadership as well."""
        if not metadata_version_of(image).is_directory_assignment_supported:
            return ControllerResult([], AssignReplicasToDirsReply(ErrorCode.unsupported_version, "Directory assignment is not supported yet."))
        try:
            _check_broker_epoch(image, broker_id, broker_epoch)
        except ApiError as refused:
            return ControllerResult([], AssignReplicasToDirsReply(refused.error_code, refused.message))
        broker = image.brokers[broker_id]
        records: list[MetadataRecord] = []
        offline: list[tuple[str, tuple[uuid.UUID, int, PartitionRegistration]]] = []
        answers: list[DirectoryAssignment] = []
        for directory, topics in directories:
            online = directory in broker.directories
            topic_answers = []
            for topic_id, partitions in topics:
                topic = image.topics_by_id.get(topic_id)
                errors: list[tuple[int, int]] = []
                for index in partitions:
                    partition = topic.partitions.get(index) if topic is not None else None
                    if topic is None:
                        errors.append((index, ErrorCode.unknown_topic_id))
                    elif partition is None:
                        errors.append((index, ErrorCode.unknown_topic_or_partition))
                    elif broker_id not in partition.replicas:
                        errors.append((index, ErrorCode.not_leader_or_follower))
                    else:
                        builder = self._change_builder(image, topic.name, topic_id, index, partition, _leader_acceptor(image, partition))
                        record = builder.set_directory(broker_id, directory).build()
                        if record is not None:
                            records.append(record)
                        if not online:
                            offline.append((topic.name, (topic_id, index, partition.merge(record) if record is not None else partition)))
                        errors.append((index, ErrorCode.none))
                topic_answers.append((topic_id, errors))
            answers.append((directory, topic_answers))
        records.extend(self._leader_and_isr_updates(image, offline, removed=frozenset((broker_id,)), added=None))
        return ControllerResult(records, AssignReplicasToDirsReply(ErrorCode.none, None, answers))

    def handle_broker_unfenced(self, image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
        """Leaderless partitions get a leader again; the broker counts as active though the image still says fenced."""
        partitions = ((t, p) for t, p in _partitions(image) if p[2].leader == NO_LEADER)
        return self._leader_and_isr_updates(image, partitions, removed=frozenset(), added=broker_id)

    def _leader_and_isr_updates(
        self,
        image: MetadataImage,
        partitions: Iterable[tuple[str, tuple[uuid.UUID, int, PartitionRegistration]]],
        *,
        removed: frozenset[int],
        added: int | None,
        unclean_shutdown: frozenset[int] = frozenset(),
    ) -> list[PartitionChangeRecord]:
        """Kafka's generateLeaderAndIsrUpdates: ``removed`` leave the ISR and may not lead, ``added`` may
        lead though the image still says fenced, ``unclean_shutdown`` leave the ISR and the ELR too."""
        records: list[PartitionChangeRecord] = []
        gone = removed | unclean_shutdown
        for topic, (topic_id, partition_id, partition) in partitions:

            def acceptable(broker: int, partition: PartitionRegistration = partition) -> bool:
                if broker in gone:
                    return False
                return (broker == added or _is_active(image, broker)) and _has_online_dir(image, broker, partition)

            builder = self._change_builder(image, topic, topic_id, partition_id, partition, acceptable)
            builder.set_target_isr([b for b in partition.isr if b not in gone]).set_unclean_shutdown_replicas(unclean_shutdown)
            record = builder.build()
            if record is not None:
                records.append(record)
        return records

    def handle_broker_unclean_shutdown(self, image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
        """Kafka's handleBrokerUncleanShutdown (KIP-966): a broker that registers again without having shut down
        cleanly may have lost what it acknowledged, so it leaves every ISR and ELR and leads nothing."""
        partitions = ((t, p) for t, p in _partitions(image) if broker_id in p[2].isr or broker_id in p[2].elr)
        return self._leader_and_isr_updates(image, partitions, removed=frozenset(), added=None, unclean_shutdown=frozenset((broker_id,)))

    def maybe_elect_unclean_leaders(self, image: MetadataImage, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE) -> ControllerResult[bool]:
        """Kafka's maybeElectUncleanLeaders, the periodic check of unclean.leader.election.interval.ms: an
        UNCLEAN election for each leaderless partition whose topic allows one, up to ``max_elections``
        records; True when the cap was reached."""
        records: list[MetadataRecord] = []
        for topic, (_, partition_id, partition) in _partitions(image):
            if len(records) >= max_elections:
                break
            if partition.leader == NO_LEADER and self._configuration.unclean_leader_election_enabled(image, topic):
                self._elect_leader(image, topic, partition_id, Election.UNCLEAN, records)
        return ControllerResult(records, len(records) >= max_elections)

    def _change_builder(
        self,
        image: MetadataImage,
        topic: str,
        topic_id: uuid.UUID,
        partition_id: int,
        partition: PartitionRegistration,
        acceptable: Callable[[int], bool],
    ) -> PartitionChangeBuilder:
        """A builder under the topic's rules: its effective min.insync.replicas (capped at the replication
        factor, as Kafka's getTopicEffectiveMinIsr), eligible leader replicas if the cluster's feature level
        has them, and an UNCLEAN election where unclean.leader.election.enable allows one."""
        min_isr = min(self._configuration.min_insync_replicas(image, topic), len(partition.replicas))
        builder = PartitionChangeBuilder(
            partition,
            topic_id,
            partition_id,
            acceptable,
            lambda b: default_dir(image, b),
            min_isr=min_isr,
            eligible_leader_replicas_enabled=eligible_leader_replicas_enabled(image),
            record_version=metadata_version_of(image).partition_change_record_version,
        )
        if self._configuration.unclean_leader_election_enabled(image, topic):
            builder.set_election(Election.UNCLEAN)
        return builder

    # --- ElectLeaders -----------------------------------------------------------------

    def elect_leaders(
        self, image: MetadataImage, election: Election, partitions: Sequence[tuple[str, int]] | None
    ) -> ControllerResult[list[ElectLeaderResult]]:
        """Kafka's ElectLeaders (PREFERRED or UNCLEAN). None elects every partition and leaves
        out those that need no election, as Kafka answers that form of the request."""
        if election is Election.ONLINE:
            raise ValueError("ElectLeaders is PREFERRED or UNCLEAN")
        records: list[MetadataRecord] = []
        results: list[ElectLeaderResult] = []
        if partitions is None:
            wanted = [(t, pid) for t, (_, pid, _) in _partitions(image)]
        else:
            wanted = list(partitions)
        for topic, partition_id in wanted:
            code, message = self._elect_leader(image, topic, partition_id, election, records)
            if partitions is None and code == ErrorCode.election_not_needed:
                continue
            results.append(ElectLeaderResult(topic, partition_id, code, message))
        return ControllerResult(records, results)

    def _elect_leader(
        self, image: MetadataImage, topic: str, partition_id: int, election: Election, records: list[MetadataRecord]
    ) -> tuple[int, str | None]:
        info = image.topics.get(topic)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
        partition = info.partitions.get(partition_id)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition_id}"
        if (election is Election.PREFERRED and _has_preferred_leader(partition)) or (election is Election.UNCLEAN and partition.leader != NO_LEADER):
            return ErrorCode.election_not_needed, _DEFAULT_MESSAGES[ErrorCode.election_not_needed]

        record = self._election_record(image, topic, info.topic_id, partition_id, partition, election)
        if record is None:
            code = ErrorCode.preferred_leader_not_available if election is Election.PREFERRED else ErrorCode.eligible_leaders_not_available
            return code, _DEFAULT_MESSAGES[code]
        records.append(record)
        return ErrorCode.none, None

    def _election_record(
        self, image: MetadataImage, topic: str, topic_id: uuid.UUID, partition_id: int, partition: PartitionRegistration, election: Election
    ) -> PartitionChangeRecord | None:
        """The record of a PREFERRED or UNCLEAN election, None when it would change nothing."""
        builder = self._change_builder(image, topic, topic_id, partition_id, partition, _leader_acceptor(image, partition))
        return builder.set_election(election).build()

    # --- auto.leader.rebalance.enable -------------------------------------------------

    def maybe_balance_partition_leaders(
        self, image: MetadataImage, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
    ) -> ControllerResult[bool]:
        """Kafka 4's maybeBalancePartitionLeaders: a preferred election for every partition not led by
        its first replica, up to ``max_elections`` records; True when the cap was reached.

        As Kafka's KRaft controller, no per-broker ratio gates it: any such partition whose
        preferred replica is in the ISR and may lead (unfenced, not shutting down, its directory
        online) is moved back, the others keep their leader and cost nothing.
        """
        records: list[MetadataRecord] = []
        for topic, (topic_id, partition_id, partition) in _partitions(image):
            if len(records) >= max_elections:
                break
            if _has_preferred_leader(partition):
                continue
            record = self._election_record(image, topic, topic_id, partition_id, partition, Election.PREFERRED)
            if record is not None:
                records.append(record)
        return ControllerResult(records, len(records) >= max_elections)

    # --- AlterPartition ---------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, topics: Sequence[AlterPartitionTopic]
    ) -> ControllerResult[AlterPartitionReply]:
        """Kafka's alterPartition at v2+ (topics by id): a partition leader changes its ISR.

        One PartitionChangeRecord per partition that changes. The leader stays; should the
        builder elect another (the leader's directory went offline), the record is still
        written and the answer is NEW_LEADER_ELECTED, so that the requester waits for metadata.
        """
        try:
            _check_broker_epoch(image, broker_id, broker_epoch)
            records: list[MetadataRecord] = []
            answers: list[AlterPartitionTopicResult] = []
            for topic in topics:
                info = image.topics_by_id.get(topic.topic_id) if topic.topic_id is not None else None
                if info is None:
                    results = [AlterPartitionResult(p.partition_index, ErrorCode.unknown_topic_id) for p in topic.partitions]
                else:
                    results = [self._alter_partition(image, broker_id, info, p, records) for p in topic.partitions]
                answers.append(AlterPartitionTopicResult(topic.topic_id, results))
        except ApiError as refused:
            return ControllerResult([], AlterPartitionReply(refused.error_code, refused.message))
        return ControllerResult(records, AlterPartitionReply(ErrorCode.none, None, answers))

    def _alter_partition(
        self, image: MetadataImage, broker_id: int, topic: TopicImage, change: PartitionIsrChange, records: list[MetadataRecord]
    ) -> AlterPartitionResult:
        index = change.partition_index
        partition = topic.partitions.get(index)
        if partition is None:
            return AlterPartitionResult(index, ErrorCode.unknown_topic_or_partition)
        code = _isr_change_error(image, broker_id, partition, change)
        if code != ErrorCode.none:
            return AlterPartitionResult(index, code)
        builder = self._change_builder(image, topic.name, topic.topic_id, index, partition, _leader_acceptor(image, partition))
        builder.set_target_isr([m.broker_id for m in change.new_isr]).set_target_leader_recovery_state(change.leader_recovery_state)
        record = builder.build()
        if record is not None:
            records.append(record)
            partition = partition.merge(record)
            if record.leader not in (NO_LEADER_CHANGE, broker_id):
                return AlterPartitionResult(index, ErrorCode.new_leader_elected)
        return AlterPartitionResult(
            index, ErrorCode.none, partition.leader, partition.leader_epoch, partition.isr, partition.leader_recovery_state, partition.partition_epoch
        )


def _check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    """Kafka's ClusterControlManager.checkBrokerEpoch."""
    registration = image.brokers.get(broker_id)
    if registration is None:
        raise ApiError(ErrorCode.stale_broker_epoch, f"No broker registration found for broker id {broker_id}")
    if registration.epoch != broker_epoch:
        raise ApiError(ErrorCode.stale_broker_epoch, f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}")


def _isr_change_error(image: MetadataImage, broker_id: int, partition: PartitionRegistration, change: PartitionIsrChange) -> int:
    """Kafka's validateAlterPartitionData past the partition lookup: its checks in its order,
    ErrorCode.none if the change may be made."""
    # Epochs ahead of this image mean the leader heard from a newer controller: NOT_CONTROLLER
    # sends it to look for that one rather than give up.
    if change.leader_epoch > partition.leader_epoch or change.partition_epoch > partition.partition_epoch:
        return ErrorCode.not_controller
    if change.leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if broker_id != partition.leader:
        return ErrorCode.invalid_request
    if change.partition_epoch < partition.partition_epoch:
        return ErrorCode.invalid_update_version
    isr = [m.broker_id for m in change.new_isr]
    # Distinct replicas of the partition, the leader among them (so never empty).
    if len(set(isr)) != len(isr) or not set(isr) <= set(partition.replicas) or partition.leader not in isr:
        return ErrorCode.invalid_request
    state = change.leader_recovery_state
    if state not in (RECOVERED, RECOVERING):
        # Kafka fails the whole request here, as an unexpected error.
        raise ApiError(ErrorCode.unknown_server_error, f"Value {state} is not a valid leader recovery state")
    if state == RECOVERING and len(isr) > 1:
        return ErrorCode.invalid_request  # a recovering leader is the only replica known to be in sync
    if partition.leader_recovery_state == RECOVERED and state == RECOVERING:
        return ErrorCode.invalid_request
    if not all(_is_eligible(image, m) for m in change.new_isr):
        return ErrorCode.ineligible_replica
    return ErrorCode.none


def _is_eligible(image: MetadataImage, member: IsrMember) -> bool:
    """Kafka's ineligibleReplicasForIsr, for one member: registered, unfenced, not shutting down, and
    (unless the epoch is -1) the registration the leader saw, not a restarted broker's newer one."""
    return _is_active(image, member.broker_id) and member.broker_epoch in (-1, image.brokers[member.broker_id].epoch)


def election_for_type(election_type: int) -> Election:
    """ElectLeaders' wire election type; an unknown one refuses the whole request, as Kafka does."""
    election = ELECTION_TYPES.get(election_type)
    if election is None:
        raise ApiError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
    return election


def _has_preferred_leader(partition: PartitionRegistration) -> bool:
    return partition.leader == (partition.replicas[0] if partition.replicas else NO_LEADER)


def _leader_acceptor(image: MetadataImage, partition: PartitionRegistration) -> Callable[[int], bool]:
    """Kafka's LeaderAcceptor: a leader is registered, unfenced, not shutting down, its directory online."""
    return lambda broker: _is_active(image, broker) and _has_online_dir(image, broker, partition)


def _partitions(image: MetadataImage) -> Iterator[tuple[str, tuple[uuid.UUID, int, PartitionRegistration]]]:
    """Every partition, topics by name and partitions by id, so that records come out in a stable order."""
    for name in sorted(image.topics):
        topic = image.topics[name]
        for partition_id in sorted(topic.partitions):
            yield name, (topic.topic_id, partition_id, topic.partitions[partition_id])


def _check_manual_assignment(replicas: Sequence[int], rf: int | None, view: BrokerView) -> None:
    """Kafka's validateManualPartitionAssignment."""
    if not replicas:
        raise ApiError(ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in view.registered:
            raise ApiError(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes broker {broker}, but no such broker is registered.")
        if broker in view.cordoned:
            raise ApiError(
                ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes broker {broker}, but all its log directories are cordoned."
            )
        if broker == previous:
            raise ApiError(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes the broker {broker} more than once.")
        previous = broker
    if rf is not None and len(replicas) != rf:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
            f"but this is not consistent with previous partitions, which have {rf} replica(s).",
        )


def _manual_isr(replicas: Sequence[int], partition_id: int, view: BrokerView) -> list[int]:
    isr = [b for b in replicas if b in view.active]
    if not isr:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"All brokers specified in the manual partition assignment for partition {partition_id} are fenced or in controlled shutdown.",
        )
    return isr


def _partition_records(
    image: MetadataImage, topic_id: uuid.UUID, first: int, assignment: list[list[int]], isrs: list[list[int]]
) -> list[PartitionRecord]:
    version = metadata_version_of(image).partition_record_version
    return [
        PartitionRecord(
            partition_id=first + i,
            topic_id=topic_id,
            replicas=tuple(replicas),
            isr=tuple(isr),
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
            directories=tuple(default_dir(image, b) for b in replicas),
            record_version=version,
        )
        for i, (replicas, isr) in enumerate(zip(assignment, isrs))
    ]


__all__ = [
    "AlterPartitionReply",
    "AlterPartitionResult",
    "AlterPartitionTopic",
    "AlterPartitionTopicResult",
    "BrokerView",
    "CLUSTER_METADATA_TOPIC",
    "CreatableTopic",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "ELECTION_TYPES",
    "ElectLeaderResult",
    "Election",
    "IsrMember",
    "MAX_ELECTIONS_PER_IMBALANCE",
    "PartitionIsrChange",
    "ReplicationControlManager",
    "default_dir",
    "election_for_type",
    "eligible_leader_replicas_enabled",
    "topic_name_error",
]
