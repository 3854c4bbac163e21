"""Producer ids for InitProducerId: handed out from blocks the controller records in the metadata log.

Kafka's RPCProducerIdManager: the broker asks the active controller for a block of ids (the
controller commits the block's end in a ProducerIdsRecord before answering) and hands them out
one by one. The next block is fetched once 90% of the current one is used, so a burst of new
producers rarely waits for the metadata log. Ids are never reused: a block is committed before
its first id is given out, and a restart starts from a block not handed out yet.

Where the block comes from is the allocator's business: ControllerProducerIdAllocator sends
AllocateProducerIds through the ControllerChannel (every broker, as Kafka does, even one that
shares its process with the active controller). When no block can be had,
callers get ProducerIdsUnavailableError, which InitProducerId answers with
COORDINATOR_LOAD_IN_PROGRESS: Kafka's choice, because every client retries it (older clients
take REQUEST_TIMED_OUT as fatal). After a failed allocation the controller is left alone for
RETRY_BACKOFF_MS, so a burst of producers does not turn into a burst of requests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import structlog
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from broker.controller.producer_id_control_manager import MAX_PRODUCER_ID
from broker.controller_channel import ControllerUnavailableError

log = structlog.get_logger(__name__)

# Kafka's ProducerIdManager.PidPrefetchThreshold and RetryBackoffMs.
PREFETCH_THRESHOLD = 0.90
RETRY_BACKOFF_MS = 50


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """The ids [first, first + size), all this broker's to hand out."""

    first: int
    size: int

    @property
    def end(self) -> int:
        return self.first + self.size


class ProducerIdAllocationError(Exception):
    """An allocator got no block: the controller refused, was not reached, or answered nonsense."""


class ProducerIdsUnavailableError(Exception):
    """No producer id can be handed out now; the client is to retry."""

    error_code = ErrorCode.coordinator_load_in_progress


class ProducerIdAllocator(Protocol):
    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        """A block never handed out before, or ProducerIdAllocationError."""
        ...


class ControllerRequestSender(Protocol):
    """What the RPC allocator needs of the ControllerChannel."""

    async def send(self, body: Any, timeout_ms: int | None = None) -> Any: ...


class ControllerProducerIdAllocator:
    """Blocks from the active controller through AllocateProducerIds (Kafka's RPC path)."""

    def __init__(self, channel: ControllerRequestSender, broker_epoch: Callable[[], int]) -> None:
        self._channel = channel
        self._broker_epoch = broker_epoch

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        request = AllocateProducerIdsRequest(broker_id=i32(broker_id), broker_epoch=i64(self._broker_epoch()))
        try:
            response = await self._channel.send(request)
        except ControllerUnavailableError as e:
            raise ProducerIdAllocationError(str(e)) from e
        if response.error_code != ErrorCode.none:
            # STALE_BROKER_EPOCH and BROKER_ID_NOT_REGISTERED pass once registration catches up;
            # UNKNOWN_SERVER_ERROR is the int64 range used up. Kafka retries them all alike.
            raise ProducerIdAllocationError(f"AllocateProducerIds: {ErrorCode(response.error_code).name}")
        first, size = int(response.producer_id_start), int(response.producer_id_len)
        if first < 0 or size <= 0 or first > MAX_PRODUCER_ID - size:
            raise ProducerIdAllocationError(f"AllocateProducerIds: invalid block of {size} ids from {first}")
        return ProducerIdBlock(first, size)


class ProducerIdManager:
    def __init__(self, broker_id: int, allocator: ProducerIdAllocator, *, retry_backoff_ms: int = RETRY_BACKOFF_MS) -> None:
        self._broker_id = broker_id
        self._allocator = allocator
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._block = ProducerIdBlock(0, 0)
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        # One allocation at a time, shared by every caller waiting for it.
        self._fetching: asyncio.Task[ProducerIdBlock] | None = None
        self._retry_at = 0.0  # loop time before which no allocation is asked for after a failure
        self._log = log.bind(node=broker_id)

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before, or ProducerIdsUnavailableError."""
        while self._next_id >= self._block.end:
            if self._prefetched is not None:
                self._block, self._prefetched = self._prefetched, None
                self._next_id = self._block.first
                continue
            await self._wait_for_block()
        producer_id = self._next_id
        self._next_id += 1
        if self._next_id - self._block.first >= PREFETCH_THRESHOLD * self._block.size:
            self._prefetch()
        return producer_id

    def _prefetch(self) -> None:
        if self._prefetched is None and self._fetching is None and asyncio.get_running_loop().time() >= self._retry_at:
            self._start_fetch()

    async def _wait_for_block(self) -> None:
        if self._fetching is None and asyncio.get_running_loop().time() < self._retry_at:
            raise ProducerIdsUnavailableError("the last producer id allocation failed; waiting before the next")
        # Shielded: a caller that gives up does not cancel the allocation the others wait for.
        task = self._start_fetch()
        try:
            await asyncio.shield(task)
        except ProducerIdAllocationError as e:
            raise ProducerIdsUnavailableError(str(e)) from e
        finally:
            # A task that was already done when awaited resumes us before its done callback has
            # run; taken in here, or the caller would loop on it without ever yielding.
            if task.done():
                self._fetched(task)

    def _start_fetch(self) -> asyncio.Task[ProducerIdBlock]:
        if self._fetching is None:
            task = asyncio.get_running_loop().create_task(self._allocator.allocate_producer_ids(self._broker_id))
            # Registered before any waiter's: the block is in place when they resume.
            task.add_done_callback(self._fetched)
            self._fetching = task
        return self._fetching

    def _fetched(self, task: asyncio.Task[ProducerIdBlock]) -> None:
        if self._fetching is not task:
            return  # already taken in
        self._fetching = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._failed(f"{type(error).__name__}: {error}")
            return
        block = task.result()
        if block.first < self._block.end:
            # Kafka's sanity check: a block below the current one would hand ids out twice.
            self._failed(f"block [{block.first}, {block.end}) is below the current one, which ends at {self._block.end}")
            return
        self._log.info("producer_ids.block", first=block.first, end=block.end)
        self._prefetched = block

    def _failed(self, reason: str) -> None:
        self._retry_at = asyncio.get_running_loop().time() + self._retry_backoff_s
        self._log.warning("producer_ids.allocation_failed", error=reason)


__all__ = [
    "ControllerProducerIdAllocator",
    "ProducerIdAllocationError",
    "ProducerIdAllocator",
    "ProducerIdBlock",
    "ProducerIdManager",
    "ProducerIdsUnavailableError",
]
