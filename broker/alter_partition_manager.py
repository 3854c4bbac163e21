"""AlterPartitionManager: a leader's ISR changes, sent to the active controller.

Kafka's DefaultAlterPartitionManager, the asyncio shell of replication/unsent_isr_updates.py
(which holds the rules: what waits, what a request carries, how an answer settles it): the
changes waiting at a moment go out together in one AlterPartition (v3, with broker epochs), one
request at a time; a request that gets no answer (no active controller, a lost connection), is
refused as a whole, or leaves a partition unanswered goes again after a backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any, Callable, Protocol

import structlog
from kio.schema.alter_partition.v3.request import AlterPartitionRequest, BrokerState, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from broker.controller_channel import ControllerUnavailableError
from broker.partition import Partition
from replication.partition_state import AlterPartitionIntent
from replication.unsent_isr_updates import IsrUpdateAnswer, UnsentIsrUpdates

log = structlog.get_logger(__name__)

RETRY_BACKOFF_S = 0.05


class Channel(Protocol):
    async def send(self, body: Any, timeout_ms: int | None = None) -> Any: ...


class AlterPartitionManager:
    def __init__(self, channel: Channel, broker_id: int, broker_epoch: Callable[[], int], on_high_watermark_moved: Callable[[Partition], None]) -> None:
        self._channel = channel
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._on_hw_moved = on_high_watermark_moved
        self._unsent: UnsentIsrUpdates[Partition] = UnsentIsrUpdates()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="alter-partition")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, partition: Partition, intent: AlterPartitionIntent) -> None:
        self._unsent.submit(partition, intent)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = self._unsent.batch()
            if not batch:
                continue
            try:
                response = await self._channel.send(self._request(batch))
            except ControllerUnavailableError as e:
                log.info("alter_partition.retry", partitions=len(batch), reason=str(e))
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wake.set()
                continue
            except Exception:
                log.exception("alter_partition.send_failed", partitions=len(batch))
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wake.set()
                continue
            if self._handle(batch, response):
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wake.set()

    def _request(self, batch: dict[tuple[str, int], tuple[Partition, AlterPartitionIntent]]) -> AlterPartitionRequest:
        by_topic: defaultdict[Any, list[PartitionData]] = defaultdict(list)
        for partition, intent in batch.values():
            by_topic[partition.topic_id].append(
                PartitionData(
                    partition_index=i32(partition.index),
                    leader_epoch=i32(intent.leader_epoch),
                    new_isr_with_epochs=tuple(BrokerState(broker_id=i32(b), broker_epoch=i64(e)) for b, e in intent.new_isr),
                    leader_recovery_state=i8(intent.leader_recovery_state),
                    partition_epoch=i32(intent.partition_epoch),
                )
            )
        return AlterPartitionRequest(
            broker_id=i32(self._broker_id),
            broker_epoch=i64(self._broker_epoch()),
            topics=tuple(TopicData(topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in by_topic.items()),
        )

    def _handle(self, batch: dict[tuple[str, int], tuple[Partition, AlterPartitionIntent]], response: Any) -> bool:
        """Hand each partition its answer; True if some change got none and must go again."""
        if response.error_code != ErrorCode.none:
            # As Kafka's: a top-level error (a stale broker epoch) answers no partition; the batch goes
            # again, with the broker epoch of the registration by then.
            log.warning("alter_partition.refused", error=ErrorCode(response.error_code).name, partitions=len(batch))
            return True
        parts = {(topic.topic_id, int(part.partition_index)): part for topic in response.topics for part in topic.partitions}
        answers: dict[tuple[str, int], IsrUpdateAnswer] = {}
        for key, (partition, _) in batch.items():
            part = parts.get((partition.topic_id, partition.index))
            if part is None:
                continue
            if part.error_code != ErrorCode.none:
                answers[key] = IsrUpdateAnswer(int(part.error_code))
            else:
                answers[key] = IsrUpdateAnswer(0, tuple(int(b) for b in part.isr), int(part.leader_epoch), int(part.partition_epoch))
        settled, unanswered = self._unsent.settle(batch, answers, _now_ms())
        for update in settled:
            partition, answer = update.partition, update.answer
            if answer.error_code:
                log.info("alter_partition.failed", topic=partition.topic, partition=partition.index, error=ErrorCode(answer.error_code).name, isr=update.intent.isr)
                continue
            log.info("alter_partition.done", topic=partition.topic, partition=partition.index, isr=answer.isr, partition_epoch=answer.partition_epoch)
            if update.high_watermark_moved:
                self._on_hw_moved(partition)
        return unanswered


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
