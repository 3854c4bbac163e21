"""The quorum controller's decisions, sans-IO: a request and the image in, records and results out."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from raft.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from raft.metadata_records import (
    BrokerEndpoint,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100

MAX_TOPIC_NAME = 249
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION_LEVEL = 22  # 4.0-IV3 (Kafka 4.0's default)
UNASSIGNED_DIR = uuid.UUID(int=0)

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

ValidateConfig = Callable[[dict[str, str]], None]


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int
    replication_factor: int
    assignments: dict[int, list[int]] | None
    configs: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: int
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


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


_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate messages."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}"
    if not _LEGAL.fullmatch(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def _error_of(exc: Exception) -> tuple[int, str]:
    return int(getattr(exc, "error_code", INVALID_CONFIG)), str(exc)


def _assign(partition_count: int, rf: int, broker_ids: Sequence[int], start: int) -> list[list[int]]:
    brokers = sorted(broker_ids)
    return [[brokers[(start + p + r) % len(brokers)] for r in range(rf)] for p in range(partition_count)]


def create_topics(
    image: MetadataImage,
    topics: Sequence[CreatableTopic],
    *,
    validate_only: bool,
    broker_ids: Sequence[int],
    default_partitions: int,
    default_replication_factor: int,
    validate_config: ValidateConfig,
) -> tuple[list[MetadataRecord], list[CreateTopicResult]]:
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    counts: dict[str, int] = {}
    for t in topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    taken = {_collision_key(n): n for n in image.topics}
    for t in topics:
        name = t.name
        if counts[name] > 1:
            results.append(CreateTopicResult(name, INVALID_REQUEST, "Duplicate topic name."))
            continue
        problem = topic_name_error(name)
        if problem:
            results.append(CreateTopicResult(name, INVALID_TOPIC_EXCEPTION, problem))
            continue
        if name in image.topics:
            results.append(CreateTopicResult(name, TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."))
            continue
        clash = taken.get(_collision_key(name))
        if clash is not None:
            results.append(CreateTopicResult(name, INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {clash}"))
            continue
        if t.assignments and (t.num_partitions != -1 or t.replication_factor != -1):
            results.append(CreateTopicResult(name, INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."))
            continue
        if t.assignments:
            indexes = sorted(t.assignments)
            if indexes != list(range(len(indexes))):
                results.append(CreateTopicResult(name, INVALID_REPLICATION_FACTOR, "Partitions in the manual assignment must be consecutive from 0."))
                continue
            assignment = [list(t.assignments[i]) for i in indexes]
            unknown = {b for replicas in assignment for b in replicas} - set(broker_ids)
            if unknown or any(not r or len(set(r)) != len(r) for r in assignment):
                results.append(CreateTopicResult(name, INVALID_REPLICATION_FACTOR, f"Invalid manual assignment: brokers {sorted(unknown)} are not registered or replicas repeat."))
                continue
        else:
            partitions = default_partitions if t.num_partitions == -1 else t.num_partitions
            rf = default_replication_factor if t.replication_factor == -1 else t.replication_factor
            if partitions <= 0:
                results.append(CreateTopicResult(name, INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."))
                continue
            if rf <= 0:
                results.append(CreateTopicResult(name, INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value."))
                continue
            if rf > len(broker_ids):
                results.append(
                    CreateTopicResult(
                        name,
                        INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {len(broker_ids)} broker(s) are registered.",
                    )
                )
                continue
            assignment = _assign(partitions, rf, broker_ids, len(image.topics))
        configs = {k: v for k, v in t.configs.items() if v is not None}
        try:
            validate_config(configs)
        except Exception as e:
            code, message = _error_of(e)
            results.append(CreateTopicResult(name, code, message))
            continue
        topic_id = uuid.uuid4()
        results.append(CreateTopicResult(name, NONE, None, topic_id, len(assignment), len(assignment[0]), configs))
        taken[_collision_key(name)] = name
        if validate_only:
            continue
        records.append(TopicRecord(name=name, topic_id=topic_id))
        records.extend(ConfigRecord(TOPIC_RESOURCE, name, k, v) for k, v in sorted(configs.items()))
        records.extend(_partition_records(topic_id, assignment, 0))
    return records, results


def _partition_records(topic_id: uuid.UUID, assignment: list[list[int]], first_index: int) -> list[PartitionRecord]:
    return [
        PartitionRecord(
            partition_id=first_index + i,
            topic_id=topic_id,
            replicas=tuple(replicas),
            isr=tuple(replicas),
            leader=replicas[0],
            leader_epoch=0,
            partition_epoch=0,
            directories=tuple(UNASSIGNED_DIR for _ in replicas),
        )
        for i, replicas in enumerate(assignment)
    ]


def delete_topics(image: MetadataImage, entries: Sequence[tuple[str | None, uuid.UUID | None]]) -> tuple[list[MetadataRecord], list[DeleteTopicResult]]:
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    seen: set[uuid.UUID] = set()
    for name, topic_id in entries:
        if topic_id is not None and topic_id.int != 0 and not name:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                results.append(DeleteTopicResult(None, topic_id, UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist."))
                continue
        else:
            topic = image.topics.get(name or "")
            if topic is None:
                results.append(DeleteTopicResult(name, None, UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."))
                continue
        results.append(DeleteTopicResult(topic.name, topic.topic_id, NONE))
        if topic.topic_id not in seen:
            seen.add(topic.topic_id)
            records.append(RemoveTopicRecord(topic_id=topic.topic_id))
    return records, results


def create_partitions(
    image: MetadataImage,
    topics: Sequence[tuple[str, int, list[list[int]] | None]],
    *,
    validate_only: bool,
    broker_ids: Sequence[int],
) -> tuple[list[MetadataRecord], list[CreatePartitionsResult]]:
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    for name, count, assignments in topics:
        topic = image.topics.get(name)
        if topic is None:
            results.append(CreatePartitionsResult(name, UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."))
            continue
        current = len(topic.partitions)
        if count < current:
            results.append(CreatePartitionsResult(name, INVALID_PARTITIONS, f"Topic currently has {current} partitions, which is higher than the requested {count}."))
            continue
        if count == current:
            results.append(CreatePartitionsResult(name, INVALID_PARTITIONS, f"Topic already has {current} partitions."))
            continue
        rf = len(next(iter(topic.partitions.values())).replicas)
        if assignments is not None:
            if len(assignments) != count - current:
                results.append(CreatePartitionsResult(name, INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {count - current} additional partition(s), but only {len(assignments)} assignment(s) were specified."))
                continue
            new = [list(a) for a in assignments]
        else:
            new = _assign(count - current, rf, broker_ids, current)
        results.append(CreatePartitionsResult(name, NONE))
        if not validate_only:
            records.extend(_partition_records(topic.topic_id, new, current))
    return records, results



def _apply_op(current: dict[str, str], key: str, op: int, value: str | None, incremental: bool) -> None:
    if not incremental:
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
        return
    if op == OP_SET:
        current[key] = value or ""
    elif op == OP_DELETE:
        current.pop(key, None)
    elif op in (OP_APPEND, OP_SUBTRACT):
        items = [v for v in current.get(key, "").split(",") if v]
        given = [v.strip() for v in (value or "").split(",") if v.strip()]
        if op == OP_APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        current[key] = ",".join(items)
    else:
        raise ValueError(f"Unknown config operation {op}")


def alter_configs(
    image: MetadataImage,
    resources: Sequence[tuple[int, str, list[tuple[str, int, str | None]]]],
    *,
    incremental: bool,
    validate_only: bool,
    validate_config: ValidateConfig,
    node_id: int,
) -> tuple[list[MetadataRecord], list[AlterConfigsResult]]:
    records: list[MetadataRecord] = []
    results: list[AlterConfigsResult] = []
    for resource_type, name, ops in resources:
        if resource_type == BROKER_RESOURCE:
            if name not in ("", str(node_id)):
                results.append(AlterConfigsResult(resource_type, name, INVALID_REQUEST, f"Unexpected broker id {name}"))
            else:
                results.append(AlterConfigsResult(resource_type, name, INVALID_CONFIG, "Dynamic broker configs are not supported by this node yet; set them in server.properties."))
            continue
        if resource_type != TOPIC_RESOURCE:
            results.append(AlterConfigsResult(resource_type, name, INVALID_REQUEST, f"Unsupported resource type {resource_type}"))
            continue
        if name not in image.topics:
            results.append(AlterConfigsResult(resource_type, name, UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."))
            continue
        before = image.topic_config(name)
        after = dict(before) if incremental else {}
        try:
            for key, op, value in ops:
                _apply_op(after, key, op, value, incremental)
            validate_config(after)
        except Exception as e:
            code, message = _error_of(e)
            results.append(AlterConfigsResult(resource_type, name, code, message))
            continue
        results.append(AlterConfigsResult(resource_type, name, NONE))
        if validate_only:
            continue
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                records.append(ConfigRecord(TOPIC_RESOURCE, name, key, after.get(key)))
    return records, results


def bootstrap_records(node_id: int, host: str, port: int) -> list[MetadataRecord]:
    """What a freshly formatted single-node cluster starts from."""
    return [
        FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION_LEVEL),
        RegisterBrokerRecord(
            broker_id=node_id,
            incarnation_id=uuid.uuid4(),
            broker_epoch=0,
            end_points=(BrokerEndpoint("PLAINTEXT", host, port, 0),),
            fenced=False,
        ),
    ]
