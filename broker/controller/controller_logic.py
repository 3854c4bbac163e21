"""The quorum controller's decisions, sans-IO: the image and a request in, records and results out.

Nothing here writes or applies anything. The caller appends the records to the metadata
log, applies them to the image once committed, then answers with the results. Checks,
their order and their messages follow Kafka 4.0's KRaft controller (ControllerApis,
ReplicationControlManager, ConfigurationControlManager, ProducerIdControlManager) and
the broker-side request checks of ConfigAdminManager.

``broker_ids`` is the set of registered, unfenced brokers the caller considers usable:
placement, manual assignments and the replication-factor check all use it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping, Sequence

from broker.metadata.metadata_image import BROKER_RESOURCE, MIGRATING_DIR, TOPIC_RESOURCE, UNASSIGNED_DIR, MetadataImage
from broker.metadata.metadata_records import (
    ZERO_UUID,
    BrokerEndpoint,
    BrokerFeature,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)

UNKNOWN_SERVER_ERROR = -1
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
UNKNOWN_TOPIC_ID = 100
BROKER_ID_NOT_REGISTERED = 102

UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."

MAX_TOPIC_NAME_LENGTH = 249
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
MAX_PARTITIONS_PER_BATCH = 10_000
MAX_CONFIG_VALUE_LENGTH = 32_767  # Short.MAX_VALUE

METADATA_VERSION_FEATURE = "metadata.version"
# metadata.version feature levels: 3.3-IV3 (7) is the oldest KRaft supports; 4.0-IV3 (25)
# is Kafka 4.0's latest production level. 4.0-IV3 writes PartitionRecord and
# PartitionChangeRecord v2 and RegisterBrokerRecord v3, the versions encode() writes.
MINIMUM_METADATA_VERSION_LEVEL = 7
METADATA_VERSION_LEVEL = 25

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# Configs of type LIST, the only ones APPEND and SUBTRACT accept (topic configs, and the
# broker-level ones that can be set dynamically).
LIST_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "log.cleanup.policy",
        "metric.reporters",
        "sasl.enabled.mechanisms",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
    }
)

# validate_config implementations raise ValueError to reject a config set; an
# ``error_code`` attribute on the exception picks the error (INVALID_CONFIG otherwise).
ValidateTopicConfig = Callable[[dict[str, str]], None]
ValidateResourceConfig = Callable[[int, str, dict[str, str]], None]  # resource type, name, all overrides
ConfigDefault = Callable[[int, str], str | None]  # resource type, key -> the default value

ConfigOp = tuple[str, int, str | None]  # name, operation (ignored unless incremental), value


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
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str | None = None


class ProducerIdsExhaustedError(RuntimeError):
    pass


class _Refused(Exception):
    def __init__(self, error_code: int, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


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


def _duplicates(keys: Iterable[object]) -> set[object]:
    seen: set[object] = set()
    dups: set[object] = set()
    for key in keys:
        if key in seen:
            dups.add(key)
        seen.add(key)
    return dups


def _config_error(exc: ValueError) -> tuple[int, str]:
    return int(getattr(exc, "error_code", INVALID_CONFIG)), str(exc)


class QuorumControllerLogic:
    """The active controller's decisions. It keeps no cluster state: the image is passed in.

    What it keeps is the rotating offset of the round-robin replica placement, so that
    successive topics start their leaders on different brokers, and the factory of topic
    ids (tests pass a deterministic one).
    """

    def __init__(
        self,
        *,
        new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
        placement_offset: int = 0,
        list_configs: Collection[str] = LIST_CONFIGS,
        config_default: ConfigDefault | None = None,
    ) -> None:
        self._new_topic_id = new_topic_id
        self._placement_offset = placement_offset
        self._list_configs = list_configs
        self._config_default = config_default

    def create_topics(
        self,
        image: MetadataImage,
        topics: Sequence[CreatableTopic],
        *,
        validate_only: bool,
        broker_ids: Sequence[int],
        default_partitions: int,
        default_replication_factor: int,
        validate_config: ValidateTopicConfig,
    ) -> tuple[list[MetadataRecord], list[CreateTopicResult]]:
        """One result per distinct name, in request order (a repeated name gets one INVALID_REQUEST)."""
        total = sum(
            len(t.assignments) if t.assignments else (default_partitions if t.num_partitions == -1 else max(t.num_partitions, 0))
            for t in topics
        )
        if total > MAX_PARTITIONS_PER_BATCH:
            names = dict.fromkeys(t.name for t in topics)
            return [], [CreateTopicResult(n, POLICY_VIOLATION, "Excessively large number of partitions per request.") for n in names]
        duplicates = _duplicates(t.name for t in topics)
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
            if topic.name in duplicates:
                results.append(CreateTopicResult(topic.name, INVALID_REQUEST, "Duplicate topic name."))
                continue
            try:
                topic_records, result = self._create_topic(
                    image, topic, colliding, broker_ids, default_partitions, default_replication_factor, validate_config
                )
            except _Refused as refused:
                results.append(CreateTopicResult(topic.name, refused.error_code, refused.message))
                continue
            results.append(result)
            if not validate_only:
                records.extend(topic_records)
                self._placement_offset += 1
        return records, results

    def _create_topic(
        self,
        image: MetadataImage,
        topic: CreatableTopic,
        colliding: dict[str, str],
        broker_ids: Sequence[int],
        default_partitions: int,
        default_replication_factor: int,
        validate_config: ValidateTopicConfig,
    ) -> tuple[list[MetadataRecord], CreateTopicResult]:
        name = topic.name
        if name == CLUSTER_METADATA_TOPIC:
            raise _Refused(INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        if name in image.topics:
            raise _Refused(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        # Kafka records the name error, then lets a collision overwrite it.
        if _has_collision_chars(name) and _unify_collision_chars(name) in colliding:
            raise _Refused(INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {colliding[_unify_collision_chars(name)]}")
        problem = topic_name_error(name)
        if problem is not None:
            raise _Refused(INVALID_TOPIC_EXCEPTION, problem)
        nulls = [k for k, v in topic.configs.items() if v is None]
        if nulls:
            raise _Refused(INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
        configs = {k: v for k, v in topic.configs.items() if v is not None}
        if configs:
            self._check_config_values(configs.values())
            try:
                validate_config(configs)
            except ValueError as e:
                raise _Refused(*_config_error(e)) from e
        if topic.assignments:
            if topic.replication_factor != -1:
                raise _Refused(INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise _Refused(INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not set to -1.")
            manual_rf: int | None = None
            for replicas in topic.assignments.values():
                _check_manual_assignment(replicas, manual_rf, broker_ids)
                manual_rf = len(replicas)
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise _Refused(INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
            assignment = [list(topic.assignments[i]) for i in range(len(topic.assignments))]
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise _Refused(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value.")
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise _Refused(INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        else:
            count = default_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            if count <= 0:
                raise _Refused(INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
            try:
                assignment = self._place(0, count, rf, broker_ids)
            except _Refused as refused:
                raise _Refused(INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): {refused.message}") from None
        topic_id = self._new_topic_id()
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        records.extend(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v) for k, v in sorted(configs.items()))
        records.extend(_partition_records(image, topic_id, 0, assignment))
        return records, CreateTopicResult(name, NONE, None, topic_id, len(assignment), len(assignment[0]), configs)

    def _place(self, start_partition: int, count: int, rf: int, broker_ids: Sequence[int]) -> list[list[int]]:
        """Round-robin over the sorted brokers, from a rotating offset; the StripedReplicaPlacer's checks."""
        if rf <= 0:
            raise _Refused(INVALID_REPLICATION_FACTOR, f"Invalid replication factor {rf}: the replication factor must be positive.")
        brokers = sorted(set(broker_ids))
        if not brokers:
            raise _Refused(INVALID_REPLICATION_FACTOR, "All brokers are currently fenced.")
        if rf > len(brokers):
            raise _Refused(
                INVALID_REPLICATION_FACTOR,
                f"The target replication factor of {rf} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
        first = self._placement_offset + start_partition
        return [[brokers[(first + p + r) % len(brokers)] for r in range(rf)] for p in range(count)]

    def delete_topics(
        self, image: MetadataImage, topics: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> tuple[list[MetadataRecord], list[DeleteTopicResult]]:
        """Each entry is (name, None) or (None, topic id), as DeleteTopics v0-5 and v6+ give them.

        Kafka's rules: both or neither given, repeated names or ids are INVALID_REQUEST;
        a name that maps to an id also given by id deletes nothing and answers
        INVALID_REQUEST on the name only. Internal topics may be deleted, as in Kafka.
        """
        names = [n for n, i in topics if n is not None and (i is None or i == ZERO_UUID)]
        ids = [i for n, i in topics if n is None and i is not None and i != ZERO_UUID]
        dup_names = _duplicates(names)
        dup_ids = _duplicates(ids)
        by_id_ok = {i for i in ids if i not in dup_ids and i in image.topics_by_id}
        records: list[MetadataRecord] = []
        results: list[DeleteTopicResult] = []
        reported: set[object] = set()
        for name, topic_id in topics:
            tid = None if topic_id is None or topic_id == ZERO_UUID else topic_id
            if name is None and tid is None:
                results.append(DeleteTopicResult(None, None, INVALID_REQUEST, "Neither topic name nor id were specified."))
                continue
            if name is not None and tid is not None:
                results.append(DeleteTopicResult(name, tid, INVALID_REQUEST, "You may not specify both topic name and topic id."))
                continue
            key: object = ("name", name) if tid is None else ("id", tid)
            if key in reported:
                continue
            reported.add(key)
            if name is not None:
                if name in dup_names:
                    results.append(DeleteTopicResult(name, None, INVALID_REQUEST, "Duplicate topic name."))
                    continue
                topic = image.topics.get(name)
                if topic is None:
                    results.append(DeleteTopicResult(name, None, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
                    continue
                if topic.topic_id in dup_ids or topic.topic_id in by_id_ok:
                    results.append(
                        DeleteTopicResult(name, topic.topic_id, INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied.")
                    )
                    continue
            else:
                assert tid is not None
                if tid in dup_ids:
                    results.append(DeleteTopicResult(None, tid, INVALID_REQUEST, "Duplicate topic id."))
                    continue
                topic = image.topics_by_id.get(tid)
                if topic is None:
                    results.append(DeleteTopicResult(None, tid, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID_MESSAGE))
                    continue
                if topic.name in names and topic.name not in dup_names:
                    continue  # the name's entry reports the clash; Kafka answers nothing for the id
            results.append(DeleteTopicResult(topic.name, topic.topic_id, NONE))
            records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        return records, results

    def create_partitions(
        self,
        image: MetadataImage,
        topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
        *,
        validate_only: bool,
        broker_ids: Sequence[int],
    ) -> tuple[list[MetadataRecord], list[CreatePartitionsResult]]:
        """Each entry is (name, new total count, one replica list per new partition or None)."""
        duplicates = _duplicates(name for name, _, _ in topics)
        records: list[MetadataRecord] = []
        results: list[CreatePartitionsResult] = []
        reported: set[str] = set()
        for name, count, assignments in topics:
            if name in reported:
                continue
            reported.add(name)
            if name in duplicates:
                results.append(CreatePartitionsResult(name, INVALID_REQUEST, "Duplicate topic name."))
                continue
            try:
                new_records = self._create_partitions(image, name, count, assignments, broker_ids)
            except _Refused as refused:
                results.append(CreatePartitionsResult(name, refused.error_code, refused.message))
                continue
            results.append(CreatePartitionsResult(name, NONE))
            if not validate_only:
                records.extend(new_records)
                self._placement_offset += 1
        return records, results

    def _create_partitions(
        self, image: MetadataImage, name: str, count: int, assignments: Sequence[Sequence[int]] | None, broker_ids: Sequence[int]
    ) -> list[PartitionRecord]:
        topic = image.topics.get(name)
        if topic is None:
            raise _Refused(UNKNOWN_TOPIC_OR_PARTITION, None)
        current = len(topic.partitions)
        if count == current:
            raise _Refused(INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if count < current:
            raise _Refused(INVALID_PARTITIONS, f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
        additional = count - current
        if assignments is not None and len(assignments) != additional:
            raise _Refused(
                INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} assignment(s) were specified.",
            )
        if not topic.partitions:
            raise _Refused(UNKNOWN_SERVER_ERROR, f"Invalid state: topic {name} appears to have no partitions.")
        rf = len(topic.partitions[min(topic.partitions)].replicas)
        if assignments is not None:
            for replicas in assignments:
                _check_manual_assignment(replicas, rf, broker_ids)
            new = [list(replicas) for replicas in assignments]
        else:
            new = self._place(current, additional, rf, broker_ids)
        return _partition_records(image, topic.topic_id, current, new)

    def alter_configs(
        self,
        image: MetadataImage,
        resources: Sequence[tuple[int, str, Sequence[ConfigOp]]],
        *,
        incremental: bool,
        validate_only: bool,
        validate_config: ValidateResourceConfig,
        node_id: int,
    ) -> tuple[list[MetadataRecord], list[AlterConfigsResult]]:
        """AlterConfigs (incremental=False: the given set replaces the resource's overrides)
        and IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT), for topics (2) and
        brokers (4). A broker resource names this node (``node_id``), or "" for the
        cluster-wide default (incremental only, as in Kafka). Each resource succeeds or
        fails as a whole; broker resources get a record per given key even when
        unchanged, as Kafka writes them, so brokers reload them.
        """
        duplicates = _duplicates((t, n) for t, n, _ in resources)
        records: list[MetadataRecord] = []
        results: list[AlterConfigsResult] = []
        for resource_type, resource_name, ops in resources:
            try:
                if (resource_type, resource_name) in duplicates:
                    raise _Refused(INVALID_REQUEST, "Each resource must appear at most once.")
                _check_alter_request(resource_type, resource_name, ops, incremental, node_id)
                new = self._alter_resource(image, resource_type, resource_name, ops, incremental, validate_config)
            except _Refused as refused:
                results.append(AlterConfigsResult(resource_type, resource_name, refused.error_code, refused.message))
                continue
            results.append(AlterConfigsResult(resource_type, resource_name, NONE))
            if not validate_only:
                records.extend(new)
        return records, results

    def _alter_resource(
        self,
        image: MetadataImage,
        resource_type: int,
        resource_name: str,
        ops: Sequence[ConfigOp],
        incremental: bool,
        validate_config: ValidateResourceConfig,
    ) -> list[ConfigRecord]:
        current = image.configs.get((resource_type, resource_name), {})
        always = resource_type == BROKER_RESOURCE
        changed: dict[str, str | None] = {}
        if incremental:
            for key, op, value in ops:
                new_value = self._incremental_value(resource_type, key, op, value, current.get(key))
                if new_value != current.get(key) or always:
                    changed[key] = new_value
        else:
            for key, _, value in ops:
                if value != current.get(key) or always:
                    changed[key] = value
            given = {key for key, _, _ in ops}
            changed.update((key, None) for key in current if key not in given)
        self._check_config_values(v for v in changed.values() if v is not None)
        after = dict(current)
        for key, value in changed.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        try:
            validate_config(resource_type, resource_name, after)
        except ValueError as e:
            raise _Refused(*_config_error(e)) from e
        if resource_type == TOPIC_RESOURCE and resource_name not in image.topics:
            raise _Refused(UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource_name}' does not exist.")
        if resource_type == BROKER_RESOURCE and resource_name and int(resource_name) not in image.brokers:
            raise _Refused(BROKER_ID_NOT_REGISTERED, f"No node with id {int(resource_name)} found.")
        return [
            ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=value) for key, value in changed.items()
        ]

    def _incremental_value(self, resource_type: int, key: str, op: int, value: str | None, current: str | None) -> str | None:
        if op == OP_SET:
            return value
        if op == OP_DELETE:
            return None
        if key not in self._list_configs:
            raise _Refused(INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.")
        base = current
        if base is None and self._config_default is not None:
            base = self._config_default(resource_type, key)
        parts = [p for p in (base or "").split(",") if p]
        assert value is not None
        for item in filter(None, value.split(",")):
            if op == OP_APPEND:
                if item not in parts:
                    parts.append(item)
            elif item in parts:
                parts.remove(item)
        return ",".join(parts)

    @staticmethod
    def _check_config_values(values: Iterable[str]) -> None:
        if any(len(v) > MAX_CONFIG_VALUE_LENGTH for v in values):
            raise _Refused(
                INVALID_CONFIG,
                f"The configuration value cannot be added because it exceeds the maximum value size of {MAX_CONFIG_VALUE_LENGTH} bytes.",
            )

    def allocate_producer_ids(
        self, image: MetadataImage, broker_id: int, *, broker_epoch: int = -1, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> ProducerIdsRecord:
        """The next block for ``broker_id``: [record.next_producer_id - block_size, record.next_producer_id)."""
        first = image.next_producer_id
        if first > MAX_PRODUCER_ID - block_size:
            raise ProducerIdsExhaustedError(
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit"
            )
        return ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=first + block_size)


def _check_manual_assignment(replicas: Sequence[int], rf: int | None, broker_ids: Sequence[int]) -> None:
    """Kafka's validateManualPartitionAssignment."""
    if not replicas:
        raise _Refused(INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list.")
    registered = set(broker_ids)
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise _Refused(INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker {broker}, but no such broker is registered.")
        if broker == previous:
            raise _Refused(INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {broker} more than once.")
        previous = broker
    if rf is not None and len(replicas) != rf:
        raise _Refused(
            INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
            f"but this is not consistent with previous partitions, which have {rf} replica(s).",
        )


def _check_alter_request(resource_type: int, resource_name: str, ops: Sequence[ConfigOp], incremental: bool, node_id: int) -> None:
    """The broker-side checks of Kafka's ConfigAdminManager.preprocess, in its order."""

    def check_types() -> None:
        if resource_type not in (TOPIC_RESOURCE, BROKER_RESOURCE):
            raise _Refused(INVALID_REQUEST, f"Unknown resource type {resource_type}")
        if resource_type == BROKER_RESOURCE and (resource_name or not incremental):
            try:
                broker = int(resource_name)
            except ValueError:
                raise _Refused(INVALID_REQUEST, f"Node id must be an integer, but it is: {resource_name}") from None
            if broker != node_id:
                raise _Refused(INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {resource_name}")

    nulls = [name for name, op, value in ops if value is None and (not incremental or op != OP_DELETE)]
    if incremental:
        if nulls:
            raise _Refused(INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
        check_types()
        unknown = [op for _, op, _ in ops if op not in _OP_NAMES]
        if unknown:
            raise _Refused(INVALID_REQUEST, f"Unknown operations type {unknown[0]}")
    else:
        check_types()
        if nulls:
            raise _Refused(INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    if _duplicates(name for name, _, _ in ops):
        raise _Refused(INVALID_REQUEST, "Error due to duplicate config keys")


def _default_dir(image: MetadataImage, broker_id: int) -> uuid.UUID:
    """Kafka's ClusterControlManager.defaultDir: the broker's only directory if it has one."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        return UNASSIGNED_DIR
    if not broker.directories:
        return MIGRATING_DIR
    if len(broker.directories) == 1:
        return broker.directories[0]
    return UNASSIGNED_DIR


def _partition_records(image: MetadataImage, topic_id: uuid.UUID, first: int, assignment: list[list[int]]) -> list[PartitionRecord]:
    return [
        PartitionRecord(
            partition_id=first + i,
            topic_id=topic_id,
            replicas=tuple(replicas),
            isr=tuple(replicas),
            leader=replicas[0],
            leader_epoch=0,
            partition_epoch=0,
            directories=tuple(_default_dir(image, b) for b in replicas),
        )
        for i, replicas in enumerate(assignment)
    ]


def bootstrap_records(
    node_id: int,
    host: str,
    port: int,
    *,
    listener_name: str = "PLAINTEXT",
    security_protocol: int = 0,
    rack: str | None = None,
    log_dirs: Sequence[uuid.UUID] = (),
    incarnation_id: uuid.UUID | None = None,
    metadata_version: int = METADATA_VERSION_LEVEL,
    features: Mapping[str, int] | None = None,
) -> list[MetadataRecord]:
    """What a freshly formatted single-node cluster's metadata log starts with.

    metadata.version first (Kafka requires it to lead a log), then any other finalized
    feature levels (none by default: group.version and transaction.version would tell
    clients the broker speaks KIP-848 and transactions v2), then this node's
    registration, unfenced. The cluster id is not a record: it lives in meta.properties.
    """
    records: list[MetadataRecord] = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)]
    records.extend(FeatureLevelRecord(name=name, feature_level=level) for name, level in sorted((features or {}).items()))
    records.append(
        RegisterBrokerRecord(
            broker_id=node_id,
            incarnation_id=incarnation_id or uuid.uuid4(),
            broker_epoch=0,
            end_points=(BrokerEndpoint(name=listener_name, host=host, port=port, security_protocol=security_protocol),),
            features=(
                BrokerFeature(
                    name=METADATA_VERSION_FEATURE,
                    min_supported_version=MINIMUM_METADATA_VERSION_LEVEL,
                    max_supported_version=METADATA_VERSION_LEVEL,
                ),
            ),
            rack=rack,
            fenced=False,
            log_dirs=tuple(log_dirs),
        )
    )
    return records


__all__ = [
    "AlterConfigsResult",
    "CreatableTopic",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "LIST_CONFIGS",
    "METADATA_VERSION_FEATURE",
    "METADATA_VERSION_LEVEL",
    "ProducerIdsExhaustedError",
    "QuorumControllerLogic",
    "bootstrap_records",
    "topic_name_error",
]
