"""ProducerIdManager: ids from controller blocks, prefetched at 90%, never twice; the two allocators."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from broker.controller_channel import ControllerUnavailableError
from broker.producer_id_manager import (
    ControllerProducerIdAllocator,
    ProducerIdAllocationError,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdsUnavailableError,
)

BLOCK = 10


class FakeAllocator:
    """Consecutive blocks of BLOCK ids; ``failures`` calls fail first."""

    def __init__(self, failures: int = 0, blocks: list[ProducerIdBlock] | None = None) -> None:
        self.next = 0
        self.calls = 0
        self.failures = failures
        self.blocks = blocks

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        self.calls += 1
        await asyncio.sleep(0)
        if self.failures:
            self.failures -= 1
            raise ProducerIdAllocationError("no controller")
        if self.blocks is not None:
            return self.blocks.pop(0)
        self.next += BLOCK
        return ProducerIdBlock(self.next - BLOCK, BLOCK)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_ids_are_consecutive_across_blocks_and_prefetched() -> None:
    async def main() -> tuple[list[int], int]:
        allocator = FakeAllocator()
        manager = ProducerIdManager(1, allocator)
        ids = []
        for _ in range(2 * BLOCK + 5):
            ids.append(await manager.generate_producer_id())
            await asyncio.sleep(0)
        return ids, allocator.calls

    ids, calls = run(main())
    assert ids == list(range(2 * BLOCK + 5))
    assert calls == 3


def test_concurrent_callers_share_one_allocation() -> None:
    async def main() -> tuple[list[int], int]:
        allocator = FakeAllocator()
        manager = ProducerIdManager(1, allocator)
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(BLOCK)))
        return list(ids), allocator.calls

    ids, calls = run(main())
    assert sorted(ids) == list(range(BLOCK)) and calls == 2  # one allocation shared by all, then the 90% prefetch


def test_a_failed_allocation_is_retriable_and_backs_off() -> None:
    async def main() -> None:
        allocator = FakeAllocator(failures=1)
        manager = ProducerIdManager(1, allocator, retry_backoff_ms=50)
        with pytest.raises(ProducerIdsUnavailableError) as failed:
            await manager.generate_producer_id()
        assert failed.value.error_code == ErrorCode.coordinator_load_in_progress
        # Within the backoff the controller is not asked again.
        with pytest.raises(ProducerIdsUnavailableError):
            await manager.generate_producer_id()
        assert allocator.calls == 1
        await asyncio.sleep(0.06)
        assert await manager.generate_producer_id() == 0
        assert allocator.calls == 2

    run(main())


def test_a_block_below_the_current_one_is_refused() -> None:
    async def main() -> None:
        allocator = FakeAllocator(blocks=[ProducerIdBlock(100, 2), ProducerIdBlock(50, 2), ProducerIdBlock(102, 2)])
        manager = ProducerIdManager(1, allocator, retry_backoff_ms=50)
        assert [await manager.generate_producer_id() for _ in range(2)] == [100, 101]
        for _ in range(5):  # the prefetch brings the bad block
            await asyncio.sleep(0)
        assert allocator.calls == 2
        with pytest.raises(ProducerIdsUnavailableError):
            await manager.generate_producer_id()
        await asyncio.sleep(0.06)
        assert await manager.generate_producer_id() == 102

    run(main())


# -- the allocators --------------------------------------------------------------------------------------


class FakeChannel:
    def __init__(self, answer: AllocateProducerIdsResponse | Exception) -> None:
        self.answer = answer
        self.sent: list[Any] = []

    async def send(self, body: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append(body)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def response(error: ErrorCode = ErrorCode.none, start: int = 0, length: int = 0) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(throttle_time=datetime.timedelta(0), error_code=error, producer_id_start=i64(start), producer_id_len=i32(length))  # type: ignore[arg-type]


def test_controller_allocator_sends_broker_id_and_epoch_and_takes_the_block() -> None:
    channel = FakeChannel(response(start=3000, length=500))
    block = run(ControllerProducerIdAllocator(channel, lambda: 7).allocate_producer_ids(2))
    assert block == ProducerIdBlock(3000, 500)
    [sent] = channel.sent
    assert isinstance(sent, AllocateProducerIdsRequest) and (sent.broker_id, sent.broker_epoch) == (2, 7)


@pytest.mark.parametrize(
    "answer",
    [
        response(ErrorCode.stale_broker_epoch),
        response(ErrorCode.unknown_server_error),
        response(start=-1, length=10),
        response(start=5, length=0),
        response(start=2**63 - 5, length=10),
        ControllerUnavailableError("no active controller within 2000 ms"),
    ],
)
def test_controller_allocator_failures(answer: AllocateProducerIdsResponse | Exception) -> None:
    with pytest.raises(ProducerIdAllocationError):
        run(ControllerProducerIdAllocator(FakeChannel(answer), lambda: 7).allocate_producer_ids(2))
