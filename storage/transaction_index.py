"""TransactionIndex: a segment's `.txnindex`, the aborted transactions whose markers it holds.

Kafka's layout, 34 bytes per entry, big-endian::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64

``lastOffset`` is the ABORT marker's offset, ``lastStableOffset`` the partition's LSO once the
transaction completed. The file is created by the first entry (most segments never see an
aborted transaction); entries are kept in memory once read, as they are few.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import structlog

from storage.checkpoints import fsync_file

log = structlog.get_logger(__name__)

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
ENTRY_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    complete: bool  # an entry's LSO reached the upper bound: later segments cannot add any


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False  # entries written since the last fsync

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_SIZE
        if whole != len(data):
            # A torn last entry (a crash mid-write): recovery replays the log tail and adds it again.
            log.warning("txn_index.partial_entry_dropped", file=str(self.path), bytes=len(data) - whole)
            os.truncate(self.path, whole)
        entries = []
        for position in range(0, whole, ENTRY_SIZE):
            version, producer_id, first, last, lso = ENTRY.unpack_from(data, position)
            if version != ENTRY_VERSION:
                log.warning("txn_index.unknown_version", file=str(self.path), version=version, position=position)
                os.truncate(self.path, position)
                break
            entries.append(AbortedTxn(producer_id, first, last, lso))
        return entries

    @property
    def last_offset(self) -> int:
        """The marker offset of the last entry, -1 without entries."""
        entries = self.entries
        return entries[-1].last_offset if entries else -1

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is not after the last one of {self.path} ({entries[-1].last_offset})")
        with open(self.path, "ab") as f:
            f.write(ENTRY.pack(ENTRY_VERSION, *txn))
        entries.append(txn)
        self._dirty = True

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset) (Kafka's collectAbortedTxns)."""
        aborted = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset``."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if keep:
            os.truncate(self.path, keep * ENTRY_SIZE)
        else:
            self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        if not self._dirty or not self.path.exists():
            return
        fsync_file(self.path)
        self._dirty = False

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path
