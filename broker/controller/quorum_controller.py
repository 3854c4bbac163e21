"""The active controller's asyncio shell: one metadata change at a time, committed then published.

The decisions live in ``broker.controller.controller_logic`` (sans-IO). This shell serialises
requests, appends the resulting records to the metadata log (committed at once by a
1-voter quorum) and hands the committed batch to the metadata loader, whose publishers
(the metadata cache, the replica manager, the coordinators) act on it before the request
is answered: a client that creates a topic can produce to it at once.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Sequence

import structlog

from broker.config import BrokerConfig
from broker.metadata.metadata_cache import MetadataCache
from broker.controller import controller_logic
from broker.controller.controller_logic import CreatableTopic, QuorumControllerLogic
from broker.metadata.metadata_image import TOPIC_RESOURCE
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_log import MetadataLog
from broker.metadata.metadata_records import MetadataRecord, ProducerIdsRecord
from storage.log_config import InvalidConfigError, LogConfig

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class ConfigResource:
    resource_type: int
    resource_name: str
    ops: list[tuple[str, int, str | None]]


class QuorumController:
    def __init__(self, config: BrokerConfig, metadata_log: MetadataLog, metadata: MetadataCache, loader: MetadataLoader) -> None:
        self._config = config
        self._log = metadata_log
        self._metadata = metadata
        self._loader = loader
        self._lock = asyncio.Lock()
        self._logic = QuorumControllerLogic(config_default=self._config_default)

    @property
    def _broker_ids(self) -> list[int]:
        return [b.node_id for b in self._metadata.alive_brokers()]

    def bootstrap(self) -> None:
        """Format a fresh metadata log: the metadata.version and this node's registration."""
        if self._log.is_empty:
            endpoint = self._metadata.endpoint
            self._commit(controller_logic.bootstrap_records(self._config.node_id, endpoint.host, endpoint.port))

    def effective_topic_config(self, overrides: dict[str, str]) -> dict[str, str]:
        props = dict(self._config.topic_defaults())
        props.update(overrides)
        return LogConfig.from_properties(props).to_properties()

    def _validate_topic_config(self, configs: dict[str, str]) -> None:
        props = dict(self._config.topic_defaults())
        props.update(configs)
        LogConfig.from_properties(props)

    def _validate_resource_config(self, resource_type: int, _name: str, configs: dict[str, str]) -> None:
        if resource_type == TOPIC_RESOURCE:
            self._validate_topic_config(configs)
        elif configs:
            key = next(iter(configs))
            raise InvalidConfigError(key, "Dynamic broker configs are not supported by this node yet; set them in server.properties.")

    def _config_default(self, resource_type: int, key: str) -> str | None:
        if resource_type == TOPIC_RESOURCE:
            return LogConfig.from_properties(dict(self._config.topic_defaults())).to_properties().get(key)
        return None

    def _commit(self, records: Sequence[MetadataRecord]) -> None:
        if not records:
            return
        self._loader.handle_commit(self._log.append(records))

    async def create_topics(self, topics: list[CreatableTopic], validate_only: bool) -> list[controller_logic.CreateTopicResult]:
        async with self._lock:
            records, results = self._logic.create_topics(
                self._metadata.image,
                topics,
                validate_only=validate_only,
                broker_ids=self._broker_ids,
                default_partitions=self._config.num_partitions,
                default_replication_factor=self._config.default_replication_factor,
                validate_config=self._validate_topic_config,
            )
            if not validate_only:
                self._commit(records)
            for r in results:
                if r.error_code == 0 and not validate_only:
                    log.info("topic.created", topic=r.name, partitions=r.num_partitions, topic_id=str(r.topic_id))
            return results

    async def auto_create_topics(self, names: list[str]) -> dict[str, int]:
        """Create topics a Metadata request named; returns each name's error code (0 = exists now)."""
        topics = [CreatableTopic(name=n, num_partitions=-1, replication_factor=-1, assignments=None, configs={}) for n in dict.fromkeys(names)]
        results = await self.create_topics(topics, validate_only=False)
        out = {}
        for r in results:
            code = r.error_code
            out[r.name] = 0 if code == controller_logic.TOPIC_ALREADY_EXISTS else code
        return out

    async def delete_topics(self, entries: list[tuple[str | None, uuid.UUID | None]]) -> list[controller_logic.DeleteTopicResult]:
        async with self._lock:
            records, results = self._logic.delete_topics(self._metadata.image, entries)
            self._commit(records)
            for r in results:
                if r.error_code == 0:
                    log.info("topic.deleted", topic=r.name)
            return results

    async def create_partitions(self, topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool) -> list[controller_logic.CreatePartitionsResult]:
        async with self._lock:
            records, results = self._logic.create_partitions(self._metadata.image, topics, validate_only=validate_only, broker_ids=self._broker_ids)
            if not validate_only:
                self._commit(records)
            return results

    async def alter_configs(self, resources: list[ConfigResource], incremental: bool, validate_only: bool) -> list[controller_logic.AlterConfigsResult]:
        async with self._lock:
            records, results = self._logic.alter_configs(
                self._metadata.image,
                [(r.resource_type, r.resource_name, r.ops) for r in resources],
                incremental=incremental,
                validate_only=validate_only,
                validate_config=self._validate_resource_config,
                node_id=self._config.node_id,
            )
            if not validate_only:
                self._commit(records)
            return results

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdsRecord:
        """Kafka's AllocateProducerIds: commit the next block of producer ids for ``broker_id``.

        The block's end is in the metadata log before any id of it is handed out, so a restart
        never hands one out twice. Raises ProducerIdsExhaustedError past the int64 range.
        """
        async with self._lock:
            image = self._metadata.image
            registration = image.brokers.get(broker_id)
            epoch = registration.epoch if registration is not None else -1
            record = self._logic.allocate_producer_ids(image, broker_id, broker_epoch=epoch)
            self._commit([record])
            log.info("producer_ids.allocated", broker_id=broker_id, next_producer_id=record.next_producer_id)
            return record


__all__ = ["ConfigResource", "QuorumController", "InvalidConfigError"]
