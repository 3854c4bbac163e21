"""BatchAccumulator: the leader's linger-and-size batching of appended records (Kafka's BatchAccumulator).

``append`` gives records their offsets at once (the caller learns the last one) but the batch is
written to the log only when it is full or has lingered ``append_linger_ms``, so many small
appends share one batch, one log write and one round of replication. Records of one ``append``
always land in one batch. The accumulator belongs to one leader epoch and dies with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Sequence

from protocol.records import build_batch
from raft.control_records import build_control_batch
from raft.records import RecordSerde, T

# A generous bound on what one record adds around its value (Kafka's DefaultRecord overhead).
_RECORD_OVERHEAD = 21
_BATCH_OVERHEAD = 61


class RecordBatchTooLargeError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class CompletedBatch:
    base_offset: int
    last_offset: int
    data: bytes


class BatchAccumulator(Generic[T]):
    def __init__(self, epoch: int, base_offset: int, linger_ms: int, max_batch_size: int, serde: RecordSerde[T]) -> None:
        self.epoch = epoch
        self._next_offset = base_offset
        self._linger_ms = linger_ms
        self._max_batch_size = max_batch_size
        self._serde = serde
        self._values: list[bytes] = []
        self._size = _BATCH_OVERHEAD
        self._base_offset = base_offset
        # Kafka's BatchBuilder appendTime: when the batch was started, the timestamp of every record
        # in it (each with a timestamp delta of 0, which Kafka's RecordsIterator insists on).
        self._append_time = 0
        self._linger_deadline: int | None = None
        self._completed: list[CompletedBatch] = []

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def append(self, records: Sequence[T], now_ms: int) -> int:
        """Offsets for ``records``, one batch for all of them; the offset of the last."""
        if not records:
            raise ValueError("append of no records")
        values = [self._serde.encode(r) for r in records]
        size = sum(len(v) + _RECORD_OVERHEAD for v in values)
        if size + _BATCH_OVERHEAD > self._max_batch_size:
            raise RecordBatchTooLargeError(f"{len(records)} records of {size} bytes do not fit a batch of {self._max_batch_size} bytes")
        if self._values and self._size + size > self._max_batch_size:
            self._complete()
        if not self._values:
            self._base_offset = self._next_offset
            self._append_time = now_ms
            self._linger_deadline = now_ms + self._linger_ms
        self._values.extend(values)
        self._size += size
        self._next_offset += len(values)
        return self._next_offset - 1

    def append_control(self, messages: Sequence[Any], now_ms: int) -> int:
        """A control batch of its own, ready at once (what is lingering goes before it)."""
        self._complete()
        data = build_control_batch(messages, now_ms, base_offset=self._next_offset, epoch=self.epoch)
        last = self._next_offset + len(messages) - 1
        self._completed.append(CompletedBatch(self._next_offset, last, data))
        self._next_offset = last + 1
        return last

    def _complete(self) -> None:
        if not self._values:
            return
        data = build_batch([(None, v, (), self._append_time) for v in self._values], base_offset=self._base_offset, partition_leader_epoch=self.epoch)
        self._completed.append(CompletedBatch(self._base_offset, self._next_offset - 1, data))
        self._values = []
        self._size = _BATCH_OVERHEAD
        self._linger_deadline = None

    def drain_deadline_ms(self) -> int | None:
        """When ``drain`` has something to hand out: now for completed batches, else the linger's end."""
        if self._completed:
            return 0
        return self._linger_deadline

    def drain(self, now_ms: int, force: bool = False) -> list[CompletedBatch]:
        if self._values and (force or (self._linger_deadline is not None and now_ms >= self._linger_deadline)):
            self._complete()
        completed, self._completed = self._completed, []
        return completed


__all__ = ["BatchAccumulator", "CompletedBatch", "RecordBatchTooLargeError"]
