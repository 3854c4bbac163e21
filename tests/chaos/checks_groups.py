"""Checks of the groups workload's history, after Jepsen's Kafka checker (sans-IO).

The history they read (processes ``<workload>-<session>``, one consumer session each, every value
carrying its ``session``):

- ``poll`` oks with the ``records`` ``[partition, offset, value]`` delivered;
- ``commit`` operations; the invoke's ``offsets`` ``{partition: next offset}``, committed when ok,
  certainly not when fail, perhaps when info, and ``at``, when the session began it (a clock all
  sessions share: their operations reach the history through pipes of their own, so history
  order across sessions is only nearly the order they happened in);
- membership: ``assign`` and ``revoke`` oks with their ``partitions``, ``join``, ``leave`` and
  ``kill`` operations;
- the drain (process ``<workload>-drain``): a ``committed-offsets`` ok with the group's
  ``offsets``, and a ``read`` ok with every record of the topic (``records``) and the high
  watermarks (``ends``).

A session's position on a partition legitimately starts over at each assignment (from the
committed offset); between two assignments it must move forward one offset at a time.

An assignment that starts at the partition's log start although a higher commit was acknowledged
before it is a *reset*: the consumer's auto.offset.reset (earliest) after a fetch answered
OFFSET_OUT_OF_RANGE. Apache Kafka answers that from a zombie leader: a broker cut off from the
controller (seeds 5 and 6 of the Kafka control: SIGTERMed while partitioned, it stays in
controlled shutdown for minutes) keeps serving Metadata and Fetch from its stale image, so a new
consumer that bootstraps from it fetches the committed offset from it, past its log end. The
commits of such an assignment start the group's progress over; they are reported once, as
``offset-reset``, and not as regressions. A rewind to anywhere else (a stale committed offset)
still is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.chaos.history import Op, completions
from tests.chaos.workload import Verdict

MAX_EXAMPLES = 5


@dataclass
class GroupHistory:
    # Every poll, assign and revoke of every session, in history order: (op index, session, f, value).
    events: list[tuple[int, str, str, Any]] = field(default_factory=list)
    # Commits as (completion index, session, type, offsets).
    commits: list[tuple[int, str, str, dict[int, int]]] = field(default_factory=list)
    # The same, in the order the sessions began them (``at``), where every commit has one.
    commits_begun: list[tuple[int, str, str, dict[int, int]]] = field(default_factory=list)
    final_offsets: dict[int, int] | None = None
    log: dict[tuple[int, int], str] | None = None
    ends: dict[int, int] | None = None


def parse(ops: list[Op], workload: str = "groups") -> GroupHistory:
    prefix = workload + "-"
    mine = [op for op in ops if op.process.startswith(prefix)]
    h = GroupHistory()
    begun: list[tuple[float, int]] = []
    for invoke, completion in completions(mine):
        if invoke.f == "commit":
            index = completion.index if completion is not None else len(ops)
            kind = completion.type if completion is not None else "info"
            h.commits.append((index, str(invoke.value["session"]), kind, {int(p): int(o) for p, o in invoke.value["offsets"].items()}))
            begun.append((invoke.value.get("at", float("nan")), len(h.commits) - 1))
    h.commits_begun = [h.commits[i] for _, i in sorted(begun)] if all(at == at for at, _ in begun) else sorted(h.commits)
    h.commits.sort()
    for op in mine:
        if op.type != "ok" or op.value is None:
            continue
        if op.f in ("poll", "assign", "revoke"):
            h.events.append((op.index, str(op.value["session"]), op.f, op.value))
        elif op.f == "committed-offsets":
            h.final_offsets = {int(p): int(o) for p, o in op.value["offsets"].items()}
        elif op.f == "read":
            h.log = {(int(p), int(o)): v for p, o, v in op.value["records"]}
            h.ends = {int(p): int(o) for p, o in op.value["ends"].items()}
    return h


def check(ops: list[Op], workload: str = "groups") -> list[Verdict]:
    h = parse(ops, workload)
    if h.final_offsets is None or h.log is None or h.ends is None:
        return [Verdict(workload, "drained", 1, ["no final committed offsets or read"])]
    polls = [e for e in h.events if e[2] == "poll"]
    stats = {
        "sessions": len({e[1] for e in h.events}),
        "polls": len(polls),
        "delivered": sum(len(e[3]["records"]) for e in polls),
        "commits ok": sum(c[2] == "ok" for c in h.commits),
        "commits failed": sum(c[2] == "fail" for c in h.commits),
        "commits unknown": sum(c[2] == "info" for c in h.commits),
        "records": len(h.log),
    }
    order, duplicates = _session_order(h)
    resets = _resets(h)
    return [
        _verdict(workload, "offset-regression", _regressions(h, resets), stats),
        _verdict(workload, "offset-reset", [r for r in resets.values() if r is not None], stats),
        _verdict(workload, "commit-past-delivered", _past_delivered(h), stats),
        _verdict(workload, "commit-past-end", _past_end(h), stats),
        _verdict(workload, "session-order", order, stats),
        _verdict(workload, "session-duplicate", duplicates, stats),
        _verdict(workload, "phantom-delivery", _phantoms(h), stats),
    ]


def _verdict(workload: str, name: str, anomalies: list[Any], stats: dict[str, int]) -> Verdict:
    return Verdict(workload, name, len(anomalies), anomalies[:MAX_EXAMPLES], dict(stats))


def _assignment_starts(h: GroupHistory) -> list[tuple[int, str, int, int, int]]:
    """Each (session, partition) assignment that delivered anything: (assign op index, session,
    partition, first offset delivered, index of that poll)."""
    current: dict[tuple[str, int], int] = {}  # (session, partition) -> index of its assign
    starts = []
    for index, session, f, value in h.events:
        if f == "assign":
            for p in value["partitions"]:
                current[(session, int(p))] = index
        elif f == "revoke":
            for p in value["partitions"]:
                current.pop((session, int(p)), None)
        elif f == "poll":
            for p, o, _ in value["records"]:
                assigned = current.pop((session, int(p)), None)
                if assigned is not None:
                    starts.append((assigned, session, int(p), int(o), index))
    return starts


def _resets(h: GroupHistory) -> dict[tuple[str, int, int], Any]:
    """The assignments that started below the partition's committed offset (its last commit
    acknowledged before the assignment): {(session, partition, assign index): example} where the
    start was the partition's log start (a reset), None where it was not."""
    assert h.log is not None
    log_start: dict[int, int] = {}
    for p, o in h.log:
        log_start[p] = min(o, log_start.get(p, o))
    acked = [(index, offsets) for index, _, kind, offsets in h.commits if kind == "ok"]
    resets: dict[tuple[str, int, int], Any] = {}
    committed: dict[int, int] = {}
    i = 0
    for assigned, session, p, first, _ in sorted(_assignment_starts(h)):
        while i < len(acked) and acked[i][0] < assigned:
            committed.update(acked[i][1])
            i += 1
        if first < committed.get(p, 0):
            at_start = first == log_start.get(p, 0)
            resets[(session, p, assigned)] = {"session": session, "partition": p, "committed": committed[p], "started at": first} if at_start else None
    return resets


def _regressions(h: GroupHistory, resets: dict[tuple[str, int, int], Any]) -> list[Any]:
    """A successful commit below an earlier successful commit of the same partition, or a final
    committed offset below the last successful one (the workload never resets the group). A
    commit of an assignment that was reset to the log start (``_resets``) is no regression: it
    starts the partition's progress over."""
    # Each session's assignments of each partition, in history order, for commits to find theirs.
    assignments: dict[tuple[str, int], list[int]] = {}
    for index, session, f, value in h.events:
        if f == "assign":
            for p in value["partitions"]:
                assignments.setdefault((session, int(p)), []).append(index)

    def reset_assignment(session: str, p: int, index: int) -> bool:
        before = [a for a in assignments.get((session, p), []) if a < index]
        return bool(before) and resets.get((session, p, before[-1])) is not None

    highest: dict[int, tuple[int, str]] = {}
    anomalies = []
    for index, session, kind, offsets in h.commits_begun:
        if kind != "ok":
            continue
        for p, o in offsets.items():
            if p in highest and o < highest[p][0]:
                if reset_assignment(session, p, index):
                    highest[p] = (o, session)
                    continue
                anomalies.append({"partition": p, "from": highest[p][0], "to": o, "sessions": [highest[p][1], session]})
            if p not in highest or o >= highest[p][0]:
                highest[p] = (o, session)
    assert h.final_offsets is not None
    for p, (o, session) in sorted(highest.items()):
        final = h.final_offsets.get(p, -1)
        if final < o:
            anomalies.append({"partition": p, "from": o, "to": final, "sessions": [session, "final"]})
    return anomalies


def _past_delivered(h: GroupHistory) -> list[Any]:
    """A committed offset (a successful commit, or the final one) past a record the group was
    never delivered before it: the commit skips records no member saw."""
    delivered: set[tuple[int, int]] = set()
    polls = iter(sorted((index, value) for index, _, f, value in h.events if f == "poll"))
    pending = next(polls, None)
    checked: dict[int, int] = {}  # partition -> offset below which every record was delivered
    anomalies = []

    def covered(p: int, end: int) -> int | None:
        """The first offset below ``end`` never delivered, None if all were."""
        for o in range(checked.get(p, 0), end):
            if (p, o) not in delivered:
                return o
        checked[p] = max(checked.get(p, 0), end)
        return None

    assert h.final_offsets is not None
    final = [(float("inf"), "final", "ok", h.final_offsets)]
    for index, session, kind, offsets in [*h.commits, *final]:
        while pending is not None and pending[0] < index:
            delivered.update((int(p), int(o)) for p, o, _ in pending[1]["records"])
            pending = next(polls, None)
        if kind != "ok":
            continue
        for p, o in sorted(offsets.items()):
            if (missing := covered(p, o)) is not None:
                anomalies.append({"partition": p, "committed": o, "never delivered": missing, "session": session})
    return anomalies


def _past_end(h: GroupHistory) -> list[Any]:
    """A committed offset past the partition's high watermark at the end."""
    assert h.ends is not None and h.final_offsets is not None
    commits = [("final", h.final_offsets)] + [(session, offsets) for _, session, kind, offsets in h.commits if kind == "ok"]
    return [{"partition": p, "committed": o, "high watermark": h.ends.get(p, 0), "session": s} for s, offsets in commits for p, o in sorted(offsets.items()) if o > h.ends.get(p, 0)]


def _session_order(h: GroupHistory) -> tuple[list[Any], list[Any]]:
    """Within one session and one assignment, each partition's offsets go up one at a time, and
    no record comes twice."""
    last: dict[tuple[str, int], int] = {}
    seen: set[tuple[str, int, int]] = set()
    epoch: dict[str, int] = {}
    order, duplicates = [], []
    for _, session, f, value in h.events:
        if f == "assign":
            epoch[session] = epoch.get(session, 0) + 1
            for p in value["partitions"]:
                last.pop((session, int(p)), None)
            continue
        if f != "poll":
            continue
        for p, o, _ in value["records"]:
            p, o = int(p), int(o)
            key = (f"{session}#{epoch.get(session, 0)}", p, o)
            if key in seen:
                duplicates.append({"session": session, "partition": p, "offset": o})
            seen.add(key)
            previous = last.get((session, p))
            if previous is not None and o != previous + 1:
                order.append({"session": session, "partition": p, "after": previous, "got": o})
            last[(session, p)] = o
    return order, duplicates


def _phantoms(h: GroupHistory) -> list[Any]:
    """A delivered record that is not in the log at its offset (read above the high watermark and
    then truncated, or misplaced)."""
    assert h.log is not None
    return [
        {"session": session, "record": [p, o, v], "in the log": h.log.get((int(p), int(o)))}
        for _, session, f, value in h.events if f == "poll"
        for p, o, v in value["records"] if h.log.get((int(p), int(o))) != v
    ]
