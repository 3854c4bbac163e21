"""Who wrote each copy of a duplicated value: the batch headers the nodes' logs hold for it.

A queue value read at two offsets was written twice, and the two batches' headers say by whom.
Two copies from one producer id and epoch are the broker's fault: within an epoch it must know
a retry by its sequence numbers. A later copy under a higher epoch of the same producer is a
client that sent the records again after bumping its epoch, which no broker can recognise as a
retry: librdkafka does so when it has taken an answer such as NOT_LEADER_OR_FOLLOWER for "not
written" (docs/guarantees.md, "The fourth long campaign's duplicates"). The copies are told
apart here so that a campaign names which kind it found; the check counts both.

Read after the drain from the partition's directory on each node, the first node holding the
offset answering; the files are only read, while the brokers run.
"""

from __future__ import annotations

import mmap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from protocol.record_batch import BatchHeader, iter_headers

SAME_EPOCH = "the same producer epoch"
LATER_EPOCH = "a later epoch of the same producer"
OTHER_PRODUCER = "another producer"
NOT_ON_DISK = "a copy not found on disk"


def batch_holding(partition_dir: Path, offset: int) -> BatchHeader | None:
    """The header of the batch that holds ``offset`` in this partition directory's segments."""
    segments = sorted((int(p.stem), p) for p in partition_dir.glob("*.log") if p.stem.isdigit())
    candidates = [path for base, path in segments if base <= offset]
    if not candidates or candidates[-1].stat().st_size == 0:
        return None
    with open(candidates[-1], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for header in iter_headers(memoryview(data)):
            if header.base_offset <= offset <= header.last_offset:
                return header
    return None


def copy_headers(data_dirs: Sequence[Path], topic: str, partition: int, offset: int) -> BatchHeader | None:
    for data_dir in data_dirs:
        found = batch_holding(data_dir / f"{topic}-{partition}", offset)
        if found is not None:
            return found
    return None


def kind(headers: Sequence[BatchHeader | None]) -> str:
    """How the copies of one value, in offset order, were written."""
    if any(h is None for h in headers):
        return NOT_ON_DISK
    first, *later = headers
    assert first is not None
    if any(h is not None and h.producer_id != first.producer_id for h in later):
        return OTHER_PRODUCER
    if any(h is not None and h.producer_epoch == first.producer_epoch for h in later):
        return SAME_EPOCH
    return LATER_EPOCH


def duplicate_origins(topic: str, copies: Mapping[str, Iterable[tuple[int, int]]], data_dirs: Sequence[Path]) -> dict[str, Any]:
    """For values each read at several (partition, offset) places: a count per kind, and each
    copy's producer id, epoch, base sequence and partition leader epoch."""
    values: dict[str, Any] = {}
    kinds: Counter[str] = Counter()
    for value, places in sorted(copies.items()):
        ordered = sorted(places)
        headers = [copy_headers(data_dirs, topic, p, o) for p, o in ordered]
        kinds[value_kind := kind(headers)] += 1
        values[value] = {
            "kind": value_kind,
            "copies": [
                {"partition": p, "offset": o}
                | ({} if h is None else {"producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence, "leader_epoch": h.partition_leader_epoch})
                for (p, o), h in zip(ordered, headers)
            ],
        }
    return {"kinds": dict(kinds), "values": values}
