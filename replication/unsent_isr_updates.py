"""The ISR changes partition leaders have for the controller, as Kafka's DefaultAlterPartitionManager keeps them (sans-IO).

The latest change per partition waits (PartitionLeaderState asks for no second one until the
first is answered). A request takes every change waiting when it goes; its answer settles each
partition it names, with its error code or the ISR the controller committed, whatever changed on
the leader since. A change the answer does not name stays and goes again after the backoff, and
so does every change of a request that got no answer or was refused as a whole (a stale broker
epoch): the controller decides on epochs, so a duplicate is answered as the first was or
refused as stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Mapping, Protocol, TypeVar

from replication.partition_state import AlterPartitionIntent

TopicPartition = tuple[str, int]


class IsrUpdateTarget(Protocol):
    """The leader's side of a partition (broker/partition.py's Partition)."""

    @property
    def key(self) -> TopicPartition: ...

    def alter_partition_failed(self, error_code: int) -> None: ...

    def alter_partition_succeeded(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int, now_ms: int) -> bool: ...


P = TypeVar("P", bound=IsrUpdateTarget)


@dataclass(frozen=True, slots=True)
class IsrUpdateAnswer:
    """The controller's answer for one partition."""

    error_code: int
    isr: tuple[int, ...] = ()
    leader_epoch: int = -1
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class SettledIsrUpdate(Generic[P]):
    partition: P
    intent: AlterPartitionIntent
    answer: IsrUpdateAnswer
    high_watermark_moved: bool


class UnsentIsrUpdates(Generic[P]):
    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, tuple[P, AlterPartitionIntent]] = {}

    def submit(self, partition: P, intent: AlterPartitionIntent) -> None:
        self._waiting[partition.key] = (partition, intent)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def batch(self) -> dict[TopicPartition, tuple[P, AlterPartitionIntent]]:
        """What the next request carries: every change waiting (each stays until answered)."""
        return dict(self._waiting)

    def settle(
        self, batch: Mapping[TopicPartition, tuple[P, AlterPartitionIntent]], answers: Mapping[TopicPartition, IsrUpdateAnswer], now_ms: int
    ) -> tuple[list[SettledIsrUpdate[P]], bool]:
        """Hand each partition of ``batch`` its answer: the settled changes, and whether some got
        none (they stay, to go again after the backoff)."""
        settled: list[SettledIsrUpdate[P]] = []
        unanswered = False
        for key, (partition, intent) in batch.items():
            answer = answers.get(key)
            if answer is None:
                unanswered = True
                continue
            if self._waiting.get(key) == (partition, intent):
                del self._waiting[key]
            if answer.error_code:
                partition.alter_partition_failed(answer.error_code)
                moved = False
            else:
                moved = partition.alter_partition_succeeded(answer.isr, answer.leader_epoch, answer.partition_epoch, now_ms)
            settled.append(SettledIsrUpdate(partition, intent, answer, moved))
        return settled, unanswered
