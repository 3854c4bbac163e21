"""ReplicaManager: the partitions this broker hosts, and the produce and fetch paths into them.

A MetadataPublisher: each metadata delta's changes for this node make it create, re-role or
delete replicas. A replica stays while this node is among its replicas, whoever leads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import structlog

from broker.delayed_operations import Purgatory
from broker.partition import LogReadResult, Partition
from kio.schema.errors import ErrorCode
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import TOPIC_RESOURCE, MetadataImage
from broker.metadata.topics_delta import PartitionInfo
from storage.errors import StorageError
from storage.log_config import LogConfig
from storage.log_manager import LogManager

log = structlog.get_logger()

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (index in the batch, message) of rejected records


@dataclass(slots=True)
class ReadResult:
    error_code: int = 0
    read: LogReadResult | None = None

    @property
    def size(self) -> int:
        return self.read.size if self.read else 0


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, topic_defaults: Callable[[], dict[str, str]]) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self._topic_defaults = topic_defaults
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = Purgatory()

    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        props = dict(self._topic_defaults())
        props.update(image.topic_config(topic))
        return LogConfig.from_properties(props)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.apply_delta(delta, image)

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Act on this node's changes only (Kafka's applyDelta): delete the replicas it lost,
        become leader or follower of the others that changed, and give changed topic configs
        to the logs."""
        changed = False
        if delta.topics_delta is not None:
            changes = delta.topics_delta.local_changes(self.node_id)
            for key, topic_id in changes.deletes.items():
                partition = self.partitions.get(key)
                if partition is not None and partition.topic_id == topic_id:
                    self._remove(key)
                    changed = True
            configs: dict[str, LogConfig] = {}
            leaders = self._make_replicas(changes.leaders, image, configs, leader=True)
            followers = self._make_replicas(changes.followers, image, configs, leader=False)
            if leaders or followers:
                # One line, not one per partition: a node with 10,000 partitions starts with 10,000.
                log.info("replica_manager.applied_delta", became_leader=leaders, became_follower=followers, hosted=len(self.partitions))
            changed = changed or bool(changes.leaders or changes.followers)
        if delta.configs_delta is not None:
            for name in delta.configs_delta.changed_resources(TOPIC_RESOURCE):
                changed = self._update_topic_config(name, image) or changed
        if changed:
            self.fetch_purgatory.touch_all()

    def _make_replicas(self, infos: dict[TopicPartition, PartitionInfo], image: MetadataImage, configs: dict[str, LogConfig], leader: bool) -> int:
        """Create or update each replica in its role; returns how many took a new role or leader."""
        became = 0
        for key, info in infos.items():
            topic, index = key
            reg = info.registration
            partition = self.partitions.get(key)
            if partition is None or partition.topic_id != info.topic_id:
                if partition is not None:
                    self._remove(key)
                config = configs.get(topic)
                if config is None:
                    config = configs[topic] = self.log_config_for(image, topic)
                plog = self.log_manager.get_or_create_log(topic, index, config, info.topic_id)
                partition = self.partitions[key] = Partition(topic, index, info.topic_id, plog, reg.leader_epoch, reg.leader, is_leader=leader)
            if partition.make_leader(reg) if leader else partition.make_follower(reg):
                log.debug("partition.leader" if leader else "partition.follower", topic=topic, partition=index, leader=reg.leader, epoch=reg.leader_epoch)
                became += 1
        return became

    def _update_topic_config(self, name: str, image: MetadataImage) -> bool:
        topic = image.topics.get(name)
        if topic is None:
            return False
        config: LogConfig | None = None
        updated = False
        for index in topic.partitions:
            partition = self.partitions.get((name, index))
            if partition is None:
                continue
            config = config or self.log_config_for(image, name)
            if partition.log.config != config:
                partition.log.update_config(config)
                updated = True
        return updated

    def _remove(self, key: TopicPartition) -> None:
        self.partitions.pop(key)
        self.log_manager.delete_log(*key)
        log.info("partition.deleted", topic=key[0], partition=key[1])

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The replica if this node leads it: what produce, consumer fetch, ListOffsets and the
        coordinators act on. Callers answer NOT_LEADER_OR_FOLLOWER for None on a known partition."""
        partition = self.partitions.get((topic, index))
        return partition if partition is not None and partition.is_leader else None

    def get_replica(self, topic: str, index: int) -> Partition | None:
        """The replica hosted here, leader or follower."""
        return self.partitions.get((topic, index))

    def append_records(self, entries: Iterable[tuple[str, int, memoryview | None]], image: MetadataImage) -> dict[TopicPartition, ProduceResult]:
        results: dict[TopicPartition, ProduceResult] = {}
        for topic, index, records in entries:
            key = (topic, index)
            partition = self.get_partition(topic, index)
            if partition is None:
                code = ErrorCode.not_leader_or_follower if image.has_partition(topic, index) else ErrorCode.unknown_topic_or_partition
                results[key] = ProduceResult(error_code=code)
                continue
            if records is None:
                results[key] = ProduceResult(error_code=ErrorCode.corrupt_message, error_message="null records")
                continue
            try:
                info = partition.append_records_to_leader(records)
            except StorageError as e:
                log.debug("produce.rejected", topic=topic, partition=index, error=str(e))
                results[key] = ProduceResult(
                    error_code=e.error_code,
                    error_message=str(e) or None,
                    log_start_offset=partition.log.log_start_offset,
                    record_errors=getattr(e, "record_errors", ()),
                )
                continue
            results[key] = ProduceResult(base_offset=info.first_offset, log_append_time=info.log_append_time, log_start_offset=info.log_start_offset)
            self.fetch_purgatory.touch(key)
        return results

    def read(self, topic: str, index: int, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool, image: MetadataImage) -> ReadResult:
        partition = self.get_partition(topic, index)
        if partition is None:
            code = ErrorCode.not_leader_or_follower if image.has_partition(topic, index) else ErrorCode.unknown_topic_or_partition
            return ReadResult(error_code=code)
        try:
            return ReadResult(read=partition.read_records(fetch_offset, max_bytes, isolation_level, min_one_message))
        except StorageError as e:
            return ReadResult(error_code=e.error_code)
