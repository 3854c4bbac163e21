"""What the group and transaction coordinators share about their internal topics: creating
one on first use, and reading a partition back when this node becomes its leader."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import structlog
from kio.schema.errors import ErrorCode

from broker.auto_topic_creation_manager import AutoTopicCreationManager
from protocol.record_batch import BatchHeader
from protocol.records import Record, iter_records
from broker.controller.controller_logic import CreatableTopic
from storage.unified_log import UnifiedLog

log = structlog.get_logger(__name__)

# Replay yields to the event loop this often, so loading a big partition never stalls other clients.
BATCHES_PER_YIELD = 64


async def create_internal_topic(
    creator: AutoTopicCreationManager, name: str, partitions: int, replication_factor: int, configs: dict[str, str | None]
) -> None:
    """Create a coordinator's topic through the controller, as Kafka does on the first FindCoordinator that needs it."""
    topic = CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor, assignments=None, configs=configs)
    created = await creator.create_topics([topic])
    if created.get(name, 0) != 0:
        log.warning("coordinator.topic_not_created", topic=name, error=ErrorCode(created[name]).name)


async def replay_batches(plog: UnifiedLog, end_offset: int) -> AsyncIterator[tuple[BatchHeader, memoryview, list[Record]]]:
    """Every batch from the log start up to ``end_offset`` (the high watermark) with its keyed
    records at or above the log start; a control batch comes with no records."""
    start = plog.log_start_offset
    for i, (header, batch) in enumerate(plog.batches(start, end_offset)):
        if header.is_control:
            records: list[Record] = []
        else:
            records = [r for r in iter_records(batch, header) if r.offset >= start and r.key is not None]
        yield header, batch, records
        if i % BATCHES_PER_YIELD == BATCHES_PER_YIELD - 1:
            await asyncio.sleep(0)
