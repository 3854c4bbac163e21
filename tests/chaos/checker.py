"""The queue checks over a campaign's history, sans-IO: operations in, Verdicts out.

What a queue workload's history holds, in the vocabulary of Jepsen's Kafka test:
- ``send``: a producer's write of one unique value; ``ok`` carries ``[partition, offset, value]``,
  the offset the cluster acknowledged it at, or null: librdkafka acknowledges some retried
  batches of an idempotent producer without an offset (the write is certain, its place not).
- ``poll``: a group consumer's read, ``ok`` with a list of records in the order delivered. A
  consumer's *session* is its process: it takes a new process name whenever its assignment
  changes, since a new assignment legitimately rewinds to the committed offsets.
- ``drain``: the final read of one partition from offset 0 to its end, after healing; ``ok`` with
  ``{"partition": p, "end": end offset, "records": [...]}``.

The checks, each a Verdict:
- ``lost``: acknowledged, never read by anyone, while a later offset of its partition was read
  (any offset, for a write acknowledged without one).
- ``unseen``: acknowledged and absent from the final drain.
- ``duplicated``: one value read at more than one offset (producers are idempotent).
- ``inconsistent-offsets``: two different values at one offset, among the reads and the offsets
  producers were acknowledged with (acknowledgements without an offset claim none).
- ``nonmonotonic-poll``: within a consumer session, a partition's offsets not strictly increasing.
- ``drain-gaps``: offsets below a partition's end missing from the final drain (offsets are dense).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from tests.chaos.history import Op
from tests.chaos.workload import Verdict

EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Read:
    process: str
    partition: int
    offset: int
    value: str


@dataclass
class QueueHistory:
    """The parts of a history the queue checks look at."""

    acknowledged: dict[str, tuple[int, int | None]]  # value -> (partition, offset) it was acknowledged at
    polls: list[Read]  # every record a group consumer delivered, in history order
    drained: list[Read]  # the final drain's records
    ends: dict[int, int]  # partition -> its end offset when drained


def queue_history(ops: Iterable[Op], prefix: str, send: str = "send", poll: str = "poll", drain: str = "drain") -> QueueHistory:
    """The acknowledged writes, polls and drain of the processes whose names start with ``prefix``."""
    acknowledged: dict[str, tuple[int, int | None]] = {}
    polls: list[Read] = []
    drained: list[Read] = []
    ends: dict[int, int] = {}
    for op in ops:
        if op.type != "ok" or not op.process.startswith(prefix):
            continue
        if op.f == send:
            partition, offset, value = op.value
            acknowledged[value] = (partition, offset)
        elif op.f == poll:
            polls.extend(Read(op.process, p, o, v) for p, o, v in op.value)
        elif op.f == drain:
            ends[op.value["partition"]] = op.value["end"]
            drained.extend(Read(op.process, p, o, v) for p, o, v in op.value["records"])
    return QueueHistory(acknowledged, polls, drained, ends)


def _place(p: int, o: int | None, v: str) -> tuple[int, int, str]:
    """Where an acknowledged write should be, sortable: an unknown offset counts as -1."""
    return (p, -1 if o is None else o, v)


def lost(workload: str, acknowledged: Mapping[str, tuple[int, int | None]], reads: Iterable[Read]) -> Verdict:
    seen: set[str] = set()
    highest: dict[int, int] = defaultdict(lambda: -2)
    for r in reads:
        seen.add(r.value)
        highest[r.partition] = max(highest[r.partition], r.offset)
    found = sorted(_place(p, o, v) for v, (p, o) in acknowledged.items() if v not in seen and highest[p] > (-1 if o is None else o))
    without_offset = sum(1 for _, o in acknowledged.values() if o is None)
    return Verdict(workload, "lost", len(found), found[:EXAMPLES], {"acknowledged": len(acknowledged), "without offset": without_offset, "read": len(seen)})


def unseen(workload: str, acknowledged: Mapping[str, tuple[int, int | None]], drained: Iterable[Read]) -> Verdict:
    seen = {r.value for r in drained}
    found = sorted(_place(p, o, v) for v, (p, o) in acknowledged.items() if v not in seen)
    return Verdict(workload, "unseen", len(found), found[:EXAMPLES], {"acknowledged": len(acknowledged), "drained": len(seen)})


def places_read(reads: Iterable[Read]) -> dict[str, set[tuple[int, int]]]:
    """Each value with every (partition, offset) it was read at."""
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in reads:
        places[r.value].add((r.partition, r.offset))
    return places


def duplicates(reads: Iterable[Read]) -> dict[str, set[tuple[int, int]]]:
    """The values read at more than one offset, with their places."""
    return {v: at for v, at in places_read(reads).items() if len(at) > 1}


def duplicated(workload: str, reads: Iterable[Read]) -> Verdict:
    places = places_read(reads)
    found = sorted((v, sorted(at)) for v, at in places.items() if len(at) > 1)
    return Verdict(workload, "duplicated", len(found), found[:EXAMPLES], {"values": len(places)})


def inconsistent_offsets(workload: str, acknowledged: Mapping[str, tuple[int, int | None]], reads: Iterable[Read]) -> Verdict:
    values: dict[tuple[int, int], set[str]] = defaultdict(set)
    for v, (p, o) in acknowledged.items():
        if o is not None:
            values[(p, o)].add(v)
    for r in reads:
        values[(r.partition, r.offset)].add(r.value)
    found = sorted((p, o, sorted(vs)) for (p, o), vs in values.items() if len(vs) > 1)
    return Verdict(workload, "inconsistent-offsets", len(found), found[:EXAMPLES], {"offsets": len(values)})


def nonmonotonic_polls(workload: str, polls: Iterable[Read]) -> Verdict:
    last: dict[tuple[str, int], int] = {}
    found: list[tuple[str, int, int, int]] = []  # (session, partition, offset before, offset after)
    sessions: set[str] = set()
    for r in polls:
        sessions.add(r.process)
        key = (r.process, r.partition)
        if key in last and r.offset <= last[key]:
            found.append((r.process, r.partition, last[key], r.offset))
        last[key] = r.offset
    return Verdict(workload, "nonmonotonic-poll", len(found), found[:EXAMPLES], {"sessions": len(sessions)})


def drain_gaps(workload: str, drained: Iterable[Read], ends: Mapping[int, int]) -> Verdict:
    """``ends``: each drained partition's end offset, as the drain saw it."""
    offsets: dict[int, set[int]] = defaultdict(set)
    for r in drained:
        offsets[r.partition].add(r.offset)
    found = sorted((p, o) for p, end in ends.items() for o in range(end) if o not in offsets[p])
    return Verdict(workload, "drain-gaps", len(found), found[:EXAMPLES], {"partitions": len(ends), "end-offsets": sum(ends.values())})


def check_queue(workload: str, history: QueueHistory) -> list[Verdict]:
    everything = history.polls + history.drained
    return [
        lost(workload, history.acknowledged, everything),
        unseen(workload, history.acknowledged, history.drained),
        duplicated(workload, everything),
        inconsistent_offsets(workload, history.acknowledged, everything),
        nonmonotonic_polls(workload, history.polls),
        drain_gaps(workload, history.drained, history.ends),
    ]
