"""The writes of one coordinator partition that are appended but not yet replicated, sans-IO.

Kafka's CoordinatorRuntime keeps them in a DeferredEventQueue keyed by offset and its state
in snapshot-timeline structures: a write completes once the high watermark passes its
records, and a write that fails takes the state back to where it was before it. Every later
write was built on the failed one's state, so it is reverted and failed with it; reverts run
latest first, so each restores the state its own operation found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(slots=True)
class DeferredWrite:
    # The high watermark must reach this offset (the write's last offset + 1).
    required_offset: int
    # Told the write's outcome once: 0 (replicated) or the error code it failed with.
    complete: Callable[[int], None]
    # Takes the coordinator's memory back to before the write's operation; told the error.
    revert: Callable[[int], None]


class DeferredWriteQueue:
    def __init__(self) -> None:
        self._writes: list[DeferredWrite] = []  # in log order: appends are made one at a time

    def __len__(self) -> int:
        return len(self._writes)

    @property
    def first_required_offset(self) -> int | None:
        """The offset the oldest write still waiting needs (None: none waits)."""
        return self._writes[0].required_offset if self._writes else None

    @property
    def last_required_offset(self) -> int | None:
        """The offset the newest write still waiting needs (None: none waits)."""
        return self._writes[-1].required_offset if self._writes else None

    def add(self, write: DeferredWrite) -> None:
        if self._writes and write.required_offset < self._writes[-1].required_offset:
            raise ValueError(f"write at {write.required_offset} appended after one at {self._writes[-1].required_offset}")
        self._writes.append(write)

    def replicated(self, high_watermark: int) -> None:
        """The high watermark reached ``high_watermark``: complete every write it covers, in log order."""
        done = 0
        while done < len(self._writes) and self._writes[done].required_offset <= high_watermark:
            done += 1
        completed, self._writes = self._writes[:done], self._writes[done:]
        for write in completed:
            write.complete(0)

    def failed(self, required_offset: int, error: int) -> None:
        """The write needing ``required_offset`` failed: revert it and every later write, latest
        first, then fail them in log order."""
        first = next((i for i, w in enumerate(self._writes) if w.required_offset >= required_offset), len(self._writes))
        self._fail(first, error)

    def fail_all(self, error: int) -> None:
        self._fail(0, error)

    def _fail(self, first: int, error: int) -> None:
        failed, self._writes = self._writes[first:], self._writes[:first]
        for write in reversed(failed):
            write.revert(error)
        for write in failed:
            write.complete(error)
