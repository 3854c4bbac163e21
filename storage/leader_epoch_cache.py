"""Leader epoch → start offset, Kafka's `leader-epoch-checkpoint` file."""

from __future__ import annotations

import os
from pathlib import Path

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []
        if path.exists():
            lines = path.read_text().split("\n")
            count = int(lines[1]) if len(lines) > 1 and lines[1] else 0
            self.entries = [(int(a), int(b)) for a, b in (line.split() for line in lines[2 : 2 + count])]

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self._write()

    def epoch_for_offset(self, offset: int) -> int:
        found = UNDEFINED_EPOCH
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch: the largest epoch <= requested and where it ended."""
        if not self.entries or requested < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested >= self.latest_epoch:
            return self.latest_epoch, log_end_offset
        found = UNDEFINED_EPOCH
        for i, (epoch, _) in enumerate(self.entries):
            if epoch > requested:
                return found, self.entries[i][1]
            found = epoch
        return self.latest_epoch, log_end_offset

    def truncate_from_end(self, end_offset: int) -> None:
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        if not self.entries:
            return
        kept = [(e, s) for e, s in self.entries if s > start_offset]
        covering = [(e, s) for e, s in self.entries if s <= start_offset]
        if covering:
            kept.insert(0, (covering[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._write()

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = "0\n" + f"{len(self.entries)}\n" + "".join(f"{e} {s}\n" for e, s in self.entries)
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
