"""What the Raft core hands its listeners: typed batches of committed records, and the serde that makes them.

The core is generic over the record type ``T``: the metadata layer supplies a RecordSerde that
turns its records into record values and back. Control records (LeaderChange, Voters, snapshot
markers) are the core's own and never reach the serde.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class RecordSerde(Protocol[T]):
    def encode(self, record: T) -> bytes: ...

    def decode(self, value: bytes) -> T: ...


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """One record batch of the log, decoded. A control batch has no ``records``, only ``control_records``."""

    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp: int
    size_in_bytes: int
    records: list[T]
    control_records: list[object] = field(default_factory=list)

    @property
    def is_control(self) -> bool:
        return not self.records and bool(self.control_records)


__all__ = ["Batch", "RecordSerde", "T"]
