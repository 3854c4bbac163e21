"""Kafka's LeaderEpochFileCache: leader epoch -> first offset written in it.

Persisted as the `leader-epoch-checkpoint` file ("0", a count, then "<epoch> <start offset>"
lines), rewritten atomically (temp file, rename) whenever it changes; it changes once per
leader election, not per append.

A new entry is written by the log's next flush, before the recovery point passes it (Kafka
likewise stopped fsyncing it on the append path, KAFKA-15046): an entry past the recovery
point is rebuilt from the batch headers when the log recovers after a crash, so the first
append to a new partition creates no file and waits on no disk. Truncations are written and
fsynced at once: recovery could not undo an entry that survived them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from storage.errors import KafkaStorageError

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
_VERSION = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: Path, *, created: bool = False) -> None:
        self.path = path
        self._epochs: list[EpochEntry] = [] if created else _read(path)
        self._dirty = False

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._epochs[0] if self._epochs else None

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1].epoch if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` started at ``start_offset``; a no-op unless it is news.

        Entries that would break monotonicity (an epoch or start offset at or past the new
        one) are dropped first, as Kafka does after a truncation.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {epoch} {start_offset}")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return
        while self._epochs and (self._epochs[-1].epoch >= epoch or self._epochs[-1].start_offset >= start_offset):
            self._epochs.pop()
        self._epochs.append(EpochEntry(epoch, start_offset))
        self._dirty = True

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in, or -1."""
        previous = UNDEFINED_EPOCH
        for epoch, start in self._epochs:
            if start == offset:
                return epoch
            if start > offset:
                return previous
            previous = epoch
        return previous

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (largest epoch <= requested, where it ended).

        The requested epoch's end is the start offset of the first later epoch, or the log
        end when it is the latest. A requested epoch below every known one answers with the
        first known start offset; one above them all (or undefined) answers (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        floor: EpochEntry | None = None
        for entry in self._epochs:
            if entry.epoch > requested_epoch:
                if floor is None:
                    return requested_epoch, entry.start_offset
                return floor.epoch, entry.start_offset
            floor = entry
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated there)."""
        latest = self.latest_entry
        if end_offset >= 0 and latest is not None and latest.start_offset >= end_offset:
            self._epochs = [e for e in self._epochs if e.start_offset < end_offset]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there too."""
        first = self.earliest_entry
        if start_offset < 0 or first is None or first.start_offset >= start_offset:
            return
        covering = [e for e in self._epochs if e.start_offset <= start_offset]
        kept = [e for e in self._epochs if e.start_offset > start_offset]
        self._epochs = [EpochEntry(covering[-1].epoch, start_offset), *kept]
        self._write()

    def clear(self) -> None:
        self._epochs = []
        self._write()

    def flush(self) -> None:
        """Write the entries assigned since the last write (part of a log flush)."""
        if self._dirty:
            self._write()

    def _write(self) -> None:
        body = f"{_VERSION}\n{len(self._epochs)}\n" + "".join(f"{e} {s}\n" for e, s in self._epochs)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._dirty = False


def _read(path: Path) -> list[EpochEntry]:
    lines = path.read_text().splitlines() if path.exists() else []
    if not lines:
        return []  # none yet, or a crash cut the first write short before any flush
    try:
        if not lines or int(lines[0]) != _VERSION:
            raise ValueError(f"unknown version {lines[:1]}")
        count = int(lines[1])
        entries = [EpochEntry(int(e), int(s)) for e, s in (line.split() for line in lines[2 : 2 + count])]
    except (ValueError, IndexError) as e:
        raise KafkaStorageError(f"malformed leader epoch checkpoint {path}: {e}") from None
    if len(entries) != count:
        raise KafkaStorageError(f"malformed leader epoch checkpoint {path}: expected {count} entries, found {len(entries)}")
    return entries
