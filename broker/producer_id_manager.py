"""Producer ids for InitProducerId: handed out from blocks the controller records in the metadata log.

Kafka's RPCProducerIdManager: the broker asks the active controller for a block of 1000 ids
(a ProducerIdsRecord whose ``next_producer_id`` is the block's end) and hands them out one by
one. The next block is fetched once 90% of the current one is used, so a burst of new
producers rarely waits on the metadata log. Ids are never reused: the block's end is
committed before its first id is given out, and a restart starts from the next block.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog

from broker.controller.controller_logic import PRODUCER_ID_BLOCK_SIZE
from broker.metadata.metadata_records import ProducerIdsRecord

log = structlog.get_logger()

# Kafka's ProducerIdManager.PID_PREFETCH_THRESHOLD.
PREFETCH_THRESHOLD = 0.90


class ProducerIdAllocator(Protocol):
    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdsRecord: ...


class ProducerIdManager:
    def __init__(self, broker_id: int, allocator: ProducerIdAllocator) -> None:
        self._broker_id = broker_id
        self._allocator = allocator
        self._next_id = 0
        self._block_end = 0  # exclusive; next == end: the current block is used up
        self._prefetched: tuple[int, int] | None = None
        self._fetching: asyncio.Task[tuple[int, int]] | None = None
        self._log = log.bind(node=broker_id)

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before (ProducerIdsExhaustedError past the int64 range)."""
        while self._next_id >= self._block_end:
            if self._prefetched is None:
                await self._fetch_block()
            if self._prefetched is not None and self._next_id >= self._block_end:
                self._next_id, self._block_end = self._prefetched
                self._prefetched = None
        producer_id = self._next_id
        self._next_id += 1
        start = self._block_end - PRODUCER_ID_BLOCK_SIZE
        if self._prefetched is None and self._fetching is None and self._next_id - start >= PREFETCH_THRESHOLD * PRODUCER_ID_BLOCK_SIZE:
            self._fetching = asyncio.create_task(self._fetch())
            self._fetching.add_done_callback(self._prefetch_done)
        return producer_id

    async def _fetch_block(self) -> None:
        if self._fetching is None:
            self._fetching = asyncio.create_task(self._fetch())
            self._fetching.add_done_callback(self._prefetch_done)
        await asyncio.shield(self._fetching)

    async def _fetch(self) -> tuple[int, int]:
        record = await self._allocator.allocate_producer_ids(self._broker_id)
        end = record.next_producer_id
        self._log.info("producer_ids.block", first=end - PRODUCER_ID_BLOCK_SIZE, end=end)
        return end - PRODUCER_ID_BLOCK_SIZE, end

    def _prefetch_done(self, task: asyncio.Task[tuple[int, int]]) -> None:
        self._fetching = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.warning("producer_ids.allocation_failed", error=str(error))
            return
        self._prefetched = task.result()
