"""AlterPartitionManager's handling of the controller's answer: each partition gets its own, with
its error code; a request refused as a whole goes again rather than failing its partitions."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.alter_partition_manager import AlterPartitionManager
from replication.partition_state import AlterPartitionIntent

TOPIC_ID = uuid.UUID(int=7)


class StubPartition:
    def __init__(self, index: int) -> None:
        self.topic, self.index, self.topic_id = "t", index, TOPIC_ID
        self.key = ("t", index)
        self.failed: list[int] = []
        self.succeeded: list[tuple[int, ...]] = []

    def alter_partition_failed(self, error_code: int) -> None:
        self.failed.append(error_code)

    def alter_partition_succeeded(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int, now_ms: int) -> bool:
        self.succeeded.append(isr)
        return True


def manager() -> AlterPartitionManager:
    return AlterPartitionManager(channel=None, broker_id=0, broker_epoch=lambda: 5, on_high_watermark_moved=lambda p: None)  # type: ignore[arg-type]


def intent(isr: tuple[int, ...]) -> AlterPartitionIntent:
    return AlterPartitionIntent(3, 8, tuple((b, 10 + b) for b in isr), 0)


def answer(error: int = 0, **partitions: Any) -> SimpleNamespace:
    parts = [SimpleNamespace(partition_index=int(i[1:]), **fields) for i, fields in partitions.items()]
    return SimpleNamespace(error_code=error, topics=[SimpleNamespace(topic_id=TOPIC_ID, partitions=parts)] if parts else [])


def test_each_partition_gets_its_error_code_or_its_new_isr() -> None:
    m = manager()
    p0, p1 = StubPartition(0), StubPartition(1)
    batch = {p0.key: (p0, intent((0, 1, 2))), p1.key: (p1, intent((0, 1)))}
    for partition, change in batch.values():
        m._unsent.submit(partition, change)
    refused = {"error_code": ErrorCode.invalid_update_version}
    done = {"error_code": 0, "isr": (0, 1), "leader_epoch": 3, "partition_epoch": 9}
    assert not m._handle(batch, answer(p0=refused, p1=done))
    assert p0.failed == [ErrorCode.invalid_update_version] and p1.succeeded == [(0, 1)]
    assert not m._unsent


def test_a_request_refused_as_a_whole_goes_again_and_fails_no_partition() -> None:
    m = manager()
    p0 = StubPartition(0)
    batch = {p0.key: (p0, intent((0, 1, 2)))}
    for partition, change in batch.values():
        m._unsent.submit(partition, change)
    assert m._handle(batch, answer(ErrorCode.stale_broker_epoch))
    assert p0.failed == [] and m._unsent.batch() == batch
