"""ProducerIdManager: ids from controller blocks, prefetched at 90%, never twice."""

from __future__ import annotations

import asyncio

import pytest

from broker.producer_id_manager import ProducerIdManager
from broker.controller.controller_logic import PRODUCER_ID_BLOCK_SIZE, ProducerIdsExhaustedError
from broker.metadata.metadata_records import ProducerIdsRecord


class FakeController:
    def __init__(self, fail_after: int | None = None) -> None:
        self.next_producer_id = 0
        self.calls = 0
        self._fail_after = fail_after

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdsRecord:
        self.calls += 1
        await asyncio.sleep(0)
        if self._fail_after is not None and self.calls > self._fail_after:
            raise ProducerIdsExhaustedError("no more ids")
        self.next_producer_id += PRODUCER_ID_BLOCK_SIZE
        return ProducerIdsRecord(broker_id=broker_id, broker_epoch=0, next_producer_id=self.next_producer_id)


def test_ids_are_consecutive_across_blocks_and_prefetched() -> None:
    async def run() -> tuple[list[int], int]:
        controller = FakeController()
        manager = ProducerIdManager(1, controller)
        ids = []
        for _ in range(2 * PRODUCER_ID_BLOCK_SIZE + 5):
            ids.append(await manager.generate_producer_id())
            await asyncio.sleep(0)
        return ids, controller.calls

    ids, calls = asyncio.run(asyncio.wait_for(run(), 10))
    assert ids == list(range(2 * PRODUCER_ID_BLOCK_SIZE + 5))
    assert calls == 3


def test_concurrent_callers_share_one_allocation() -> None:
    async def run() -> tuple[list[int], int]:
        controller = FakeController()
        manager = ProducerIdManager(1, controller)
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(50)))
        return list(ids), controller.calls

    ids, calls = asyncio.run(asyncio.wait_for(run(), 10))
    assert sorted(ids) == list(range(50)) and calls == 1


def test_allocation_failure_reaches_the_caller() -> None:
    async def run() -> None:
        manager = ProducerIdManager(1, FakeController(fail_after=0))
        await manager.generate_producer_id()

    with pytest.raises(ProducerIdsExhaustedError):
        asyncio.run(asyncio.wait_for(run(), 10))
