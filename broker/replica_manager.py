"""ReplicaManager: the partitions this broker hosts, and the produce and fetch paths into them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import structlog

from broker.delayed_operations import Purgatory
from broker.partition import LogReadResult, Partition
from kio.schema.errors import ErrorCode
from broker.metadata.metadata_image import MetadataImage
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

    def apply_image(self, image: MetadataImage) -> None:
        """Become leader of every partition the image gives us; drop those it no longer lists."""
        wanted: set[TopicPartition] = set()
        became_leader = 0
        for topic in image.topics.values():
            config: LogConfig | None = None
            for index, reg in topic.partitions.items():
                if reg.leader != self.node_id:
                    continue
                key = (topic.name, index)
                wanted.add(key)
                config = config or self.log_config_for(image, topic.name)
                partition = self.partitions.get(key)
                if partition is None or partition.topic_id != topic.topic_id:
                    if partition is not None:
                        self._remove(key)
                    plog = self.log_manager.get_or_create_log(topic.name, index, config, topic.topic_id)
                    self.partitions[key] = Partition(topic.name, index, topic.topic_id, plog, reg.leader_epoch)
                    log.debug("partition.leader", topic=topic.name, partition=index, epoch=reg.leader_epoch)
                    became_leader += 1
                else:
                    partition.leader_epoch = reg.leader_epoch
                    if partition.log.config != config:
                        partition.log.update_config(config)
        for key in set(self.partitions) - wanted:
            self._remove(key)
        if became_leader:
            # One line, not one per partition: a node with 10,000 partitions starts with 10,000.
            log.info("replica_manager.became_leader", partitions=became_leader, leading=len(self.partitions))
        self.fetch_purgatory.touch_all()

    def _remove(self, key: TopicPartition) -> None:
        self.partitions.pop(key)
        self.log_manager.delete_log(*key)
        log.info("partition.deleted", topic=key[0], partition=key[1])

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def append_records(self, entries: Iterable[tuple[str, int, memoryview | None]], image: MetadataImage) -> dict[TopicPartition, ProduceResult]:
        results: dict[TopicPartition, ProduceResult] = {}
        for topic, index, records in entries:
            key = (topic, index)
            partition = self.partitions.get(key)
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
        partition = self.partitions.get((topic, index))
        if partition is None:
            code = ErrorCode.not_leader_or_follower if image.has_partition(topic, index) else ErrorCode.unknown_topic_or_partition
            return ReadResult(error_code=code)
        try:
            return ReadResult(read=partition.read_records(fetch_offset, max_bytes, isolation_level, min_one_message))
        except StorageError as e:
            return ReadResult(error_code=e.error_code)
