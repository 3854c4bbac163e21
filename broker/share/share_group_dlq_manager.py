"""Writes what share partitions archive to their group's dead-letter queue topic (KIP-1191): Kafka
4.4's DefaultShareGroupDLQManager and ShareGroupDLQStateManager, in small form.

Active while share.version is 2 or more and the group sets ``errors.deadletterqueue.topic.name``
(SharePartition.isDLQEnabledForGroup). Each ShareGroupDLQRecordParameter is checked against the
topic (broker/share/share_group_dlq.py's validate_dlq_topic: a refused one is logged and dropped,
as Kafka fails its future), the topic created first when missing and
``errors.deadletterqueue.auto.create.topics.enable`` allows it (CreateTopics with the controller's
default partitions and replication, errors.deadletterqueue.group.enable=true), the original keys and
values read from the local log when the group copies records, and the records produced with acks=all
to the leader of the DLQ partition, over the inter-broker network (also to this node: one path,
as Kafka's KafkaClient). A retriable answer or a lost request backs off (1 s doubling to 30 s, 20%
jitter) and tries again, for at most 5 attempts; then, or on any other error, the records are
given up on with an error log. Either way the write's task ends with its error (NONE when it
landed), and the share partition then moves the records from ARCHIVING to ARCHIVED.

The writes of one share partition go one at a time, in the order they were enqueued, so that its
DLQ records keep their offsets' order.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from broker.controller.replication_control_manager import CreatableTopic
from broker.default_state_persister import RequestSender
from broker.group.share_version import share_group_dlq_enabled
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.network_client import NetworkError, exponential_backoff_ms
from broker.share.share_group_dlq import (
    AUTO_CREATED_TOPIC_CONFIGS,
    DLQ_GROUP_ENABLE_CONFIG,
    DLQ_TOPIC_NAME_PREFIX_DEFAULT,
    ShareGroupDLQRecordParameter,
    dlq_batches,
    dlq_partition,
    validate_dlq_topic,
)
from protocol.records import InvalidRecordError, iter_batches, iter_records

log = structlog.get_logger(__name__)

# ShareGroupDLQStateManager's REQUEST_BACKOFF_MS, REQUEST_BACKOFF_MAX_MS, MAX_REQUEST_ATTEMPTS,
# DLQ_MAX_FETCH_BYTES, and its produce requests' timeout.
REQUEST_BACKOFF_MS = 1000
REQUEST_BACKOFF_MAX_MS = 30_000
MAX_ATTEMPTS = 5
MAX_FETCH_BYTES = 1_048_576
PRODUCE_TIMEOUT_MS = 30_000
ACKS_ALL = -1
# Produce errors worth another attempt (their exceptions are RetriableException in Kafka), plus
# the lookups that find no leader yet (a topic just created).
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.request_timed_out,
        ErrorCode.network_exception,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.kafka_storage_error,
        ErrorCode.fenced_leader_epoch,
    }
)


class DLQGroupConfigs(Protocol):
    """ShareGroupConfigProvider's DLQ settings of a group (ShareGroupConfigs)."""

    def dlq_topic_name(self, group_id: str) -> str | None: ...

    def dlq_copy_record_enable(self, group_id: str) -> bool: ...


class TopicCreator(Protocol):
    """AutoTopicCreationManager.create_topics: each topic's error (0: created or there already)."""

    async def create_topics(self, topics: list[CreatableTopic]) -> dict[str, int]: ...


class OriginalsReader(Protocol):
    """The share partition leader's log (ShareLogReader.read): whole batches from an offset."""

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, read_committed: bool) -> Any: ...


@dataclass(frozen=True, slots=True)
class DLQBrokerSettings:
    """The broker's errors.deadletterqueue.* settings and message.max.bytes (a DLQ topic's default)."""

    topic_name_prefix: str = DLQ_TOPIC_NAME_PREFIX_DEFAULT
    auto_create_topics_enable: bool = False
    message_max_bytes: int = 1048588

    @classmethod
    def of(cls, config: Any) -> DLQBrokerSettings:
        """From a BrokerConfig (the dynamic one: both settings may change while the broker runs)."""
        return cls(config.errors_deadletterqueue_topic_name_prefix, config.errors_deadletterqueue_auto_create_topics_enable, config.message_max_bytes)


class ShareGroupDLQManager:
    def __init__(
        self,
        metadata: MetadataCache,
        network: RequestSender,
        group_configs: DLQGroupConfigs,
        topic_creator: TopicCreator,
        reader: OriginalsReader,
        settings: Callable[[], DLQBrokerSettings],
        *,
        inter_broker_listener_name: str,
        request_timeout_ms: int | None = None,
        backoff_ms: int = REQUEST_BACKOFF_MS,
        backoff_max_ms: int = REQUEST_BACKOFF_MAX_MS,
        rng: random.Random | None = None,
    ) -> None:
        self._metadata = metadata
        self._network = network
        self._configs = group_configs
        self._creator = topic_creator
        self._reader = reader
        self._settings = settings
        self._listener = inter_broker_listener_name.upper()
        self._request_timeout_ms = request_timeout_ms
        self._backoff_ms = backoff_ms
        self._backoff_max_ms = backoff_max_ms
        self._rng = rng or random.Random()
        # Per share partition (group, topic id, partition): its lock and how many writes hold or await it.
        self._lanes: dict[tuple[str, uuid.UUID, int], tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[int]] = set()

    def enabled(self, group_id: str) -> bool:
        """SharePartition.isDLQEnabledForGroup: share.version >= 2 and the group names a DLQ topic."""
        return share_group_dlq_enabled(self._metadata.image.features) and bool(self._configs.dlq_topic_name(group_id))

    def enqueue(self, params: Iterable[ShareGroupDLQRecordParameter]) -> list[asyncio.Task[int]]:
        """Start writing ``params`` (in this order for each share partition); nobody waits for it."""
        loop = asyncio.get_running_loop()
        tasks = []
        for param in params:
            task = loop.create_task(self._in_lane(param))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            tasks.append(task)
        return tasks

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _in_lane(self, param: ShareGroupDLQRecordParameter) -> int:
        key = (param.group_id, param.topic_id, param.partition)
        lock, users = self._lanes.get(key) or (asyncio.Lock(), 0)
        self._lanes[key] = (lock, users + 1)
        try:
            async with lock:
                return await self.dlq(param)
        finally:
            lock, users = self._lanes[key]
            if users == 1:
                del self._lanes[key]
            else:
                self._lanes[key] = (lock, users - 1)

    async def dlq(self, param: ShareGroupDLQRecordParameter) -> int:
        """Write ``param``'s records to the group's DLQ topic: NONE, or the error they were given up on."""
        bound = log.bind(group=param.group_id, topic=param.topic, partition=param.partition, first_offset=param.first_offset, last_offset=param.last_offset)
        topic = self._configs.dlq_topic_name(param.group_id)
        settings = self._settings()
        image = self._metadata.image
        exists = bool(topic) and topic in image.topics
        enabled_on_topic = exists and image.topic_config(topic or "").get(DLQ_GROUP_ENABLE_CONFIG, "false").strip().lower() == "true"
        problem = validate_dlq_topic(param.group_id, topic, settings.topic_name_prefix, exists, enabled_on_topic, settings.auto_create_topics_enable)
        if problem is not None or not topic:
            bound.error("share_group_dlq.refused", reason=problem)
            return ErrorCode.invalid_config
        bound = bound.bind(dlq_topic=topic)
        if not exists:
            created = await self._creator.create_topics([CreatableTopic(topic, -1, -1, None, dict(AUTO_CREATED_TOPIC_CONFIGS))])
            error = created.get(topic, ErrorCode.unknown_server_error)
            if error != ErrorCode.none:
                bound.error("share_group_dlq.create_failed", error=ErrorCode(error).name)
                return error
        originals = self._originals(param) if self._configs.dlq_copy_record_enable(param.group_id) else None
        batches = dlq_batches(param, time.time_ns() // 1_000_000, self._max_message_bytes(topic, settings), originals)
        for batch in batches:
            error = await self._produce(topic, param.partition, batch, bound)
            if error != ErrorCode.none:
                return error
        bound.debug("share_group_dlq.written", batches=len(batches))
        return ErrorCode.none

    def _max_message_bytes(self, topic: str, settings: DLQBrokerSettings) -> int:
        raw = self._metadata.image.topic_config(topic).get("max.message.bytes")
        try:
            return int(raw) if raw is not None else settings.message_max_bytes
        except ValueError:
            return settings.message_max_bytes

    def _originals(self, param: ShareGroupDLQRecordParameter) -> Mapping[int, tuple[bytes | None, bytes | None]]:
        """The original keys and values still in the local log (ShareGroupDLQRecordFetcher); offsets
        it no longer holds, or cannot read, get headers only."""
        found: dict[int, tuple[bytes | None, bytes | None]] = {}
        offset = param.first_offset
        while offset <= param.last_offset:
            read = self._reader.read(param.topic, param.partition, offset, MAX_FETCH_BYTES, False)
            if read.error != ErrorCode.none or not read.records:
                break
            last_read = offset - 1
            try:
                for header, batch in iter_batches(read.records):
                    last_read = max(last_read, header.last_offset)
                    if header.is_control or header.last_offset < offset:
                        continue
                    for record in iter_records(batch, header):
                        if param.first_offset <= record.offset <= param.last_offset:
                            found[record.offset] = (record.key, record.value)
            except (InvalidRecordError, ValueError) as e:
                log.warning("share_group_dlq.original_unreadable", group=param.group_id, topic=param.topic, partition=param.partition, offset=offset, error=str(e))
                break
            if last_read < offset:
                break
            offset = last_read + 1
        return found

    async def _produce(self, topic: str, source_partition: int, batch: bytes, bound: Any) -> int:
        error: int = ErrorCode.none
        for attempt in range(1, MAX_ATTEMPTS + 1):
            error = await self._produce_once(topic, source_partition, batch)
            if error == ErrorCode.none:
                return error
            if error not in RETRIABLE or attempt == MAX_ATTEMPTS:
                break
            bound.info("share_group_dlq.retrying", error=ErrorCode(error).name, attempts=attempt)
            await asyncio.sleep(exponential_backoff_ms(attempt, self._backoff_ms, self._backoff_max_ms, self._rng.random()) / 1000)
        bound.error("share_group_dlq.produce_failed", error=ErrorCode(error).name)
        return error

    async def _produce_once(self, topic: str, source_partition: int, batch: bytes) -> int:
        image = self._metadata.image
        topic_image = image.topics.get(topic)
        if topic_image is None or not topic_image.partitions:
            return ErrorCode.unknown_topic_or_partition
        index = dlq_partition(source_partition, len(topic_image.partitions))
        registration = topic_image.partitions.get(index)
        if registration is None or registration.leader == NO_LEADER:
            return ErrorCode.leader_not_available
        endpoint = self._metadata.alive_broker(registration.leader, self._listener)
        if endpoint is None:
            return ErrorCode.leader_not_available
        request = ProduceRequest(
            transactional_id=None,
            acks=i16(ACKS_ALL),
            timeout=datetime.timedelta(milliseconds=PRODUCE_TIMEOUT_MS),
            topic_data=(TopicProduceData(topic_id=topic_image.topic_id, partition_data=(PartitionProduceData(index=i32(index), records=batch),)),),
        )
        try:
            response = await self._network.send((endpoint.host, endpoint.port), request, timeout_ms=self._request_timeout_ms)
        except NetworkError:
            return ErrorCode.network_exception
        for t in response.responses:
            for p in t.partition_responses:
                if int(p.index) == index:
                    return int(p.error_code)
        return ErrorCode.unknown_server_error


__all__ = ["DLQBrokerSettings", "ShareGroupDLQManager"]
