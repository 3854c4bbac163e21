"""Checks of the transactions workload's history, after Jepsen's Kafka checker (sans-IO).

The history they read (processes ``<workload>-<n>``, one consume-transform-produce loop each):

- ``txn`` operations. The invoke's value: ``id`` (unique over the campaign), ``inputs`` (the input
  records ``[partition, offset, value]`` consumed), ``outputs`` (the values written to the output
  topic, ``outputs[i]`` derived from ``inputs[i]``), ``offsets`` (``{partition: next offset}`` sent
  to the transaction) and ``commit`` (whether the loop meant to commit). ``ok``: the transaction
  committed; ``fail``: it certainly did not (aborted, or failed before EndTxn); ``info``: unknown.
- The drain (process ``<workload>-drain``): ``read`` oks whose value holds ``isolation`` and
  ``records`` (the output topic from offset 0 to its end), and a ``committed-offsets`` ok with the
  group's ``offsets`` ``{partition: offset}`` on the input topic.

A transaction is *visible* when read_committed saw any of its outputs: that is how the drain
resolves the outcome of ``info`` transactions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.history import Op, completions
from tests.chaos.workload import Verdict

MAX_EXAMPLES = 5


@dataclass
class Txn:
    id: str
    process: str
    inputs: list[tuple[int, int]]
    outputs: list[str]
    offsets: dict[int, int]
    outcome: str  # ok, fail, info (None completion counts as info)


@dataclass
class TxnHistory:
    txns: list[Txn] = field(default_factory=list)
    reads: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)  # isolation -> records
    committed_offsets: dict[int, int] | None = None


def parse(ops: list[Op], workload: str = "transactions") -> TxnHistory:
    prefix = workload + "-"
    history = TxnHistory()
    mine = [op for op in ops if op.process.startswith(prefix)]
    for invoke, completion in completions(mine):
        value: Any = invoke.value or {}
        if invoke.f == "txn":
            history.txns.append(Txn(
                id=value["id"],
                process=invoke.process,
                inputs=[(int(p), int(o)) for p, o, *_ in value["inputs"]],
                outputs=list(value["outputs"]),
                offsets={int(p): int(o) for p, o in value["offsets"].items()},
                outcome=completion.type if completion is not None else "info",
            ))
    for op in mine:
        if op.type != "ok" or op.value is None:
            continue
        if op.f == "read":
            history.reads[op.value["isolation"]] = [(int(p), int(o), v) for p, o, v in op.value["records"]]
        elif op.f == "committed-offsets":
            history.committed_offsets = {int(p): int(o) for p, o in op.value["offsets"].items()}
    return history


def check(ops: list[Op], workload: str = "transactions", loops: int | None = None) -> list[Verdict]:
    """``loops``: how many consume-transform-produce loops ran, each process ``<workload>-<i>``;
    one that never committed a transaction is ``idle-loops`` (its clients never got going, so
    every other check says nothing about it)."""
    h = parse(ops, workload)
    committed_read = h.reads.get("read_committed")
    uncommitted_read = h.reads.get("read_uncommitted")
    if committed_read is None or uncommitted_read is None:
        return [Verdict(workload, "drained", 1, [f"no final read with {iso}" for iso in ("read_committed", "read_uncommitted") if iso not in h.reads])]
    seen = Counter(v for _, _, v in committed_read)
    owner = {out: t for t in h.txns for out in t.outputs}
    visible = [t for t in h.txns if any(out in seen for out in t.outputs)]
    stats = {
        "txns": len(h.txns),
        "committed": sum(t.outcome == "ok" for t in h.txns),
        "aborted": sum(t.outcome == "fail" for t in h.txns),
        "unknown": sum(t.outcome == "info" for t in h.txns),
        "visible": len(visible),
        "read_committed": len(committed_read),
        "read_uncommitted": len(uncommitted_read),
        # Outputs of aborted transactions that reached the log: read_uncommitted shows them, read_committed must not.
        "aborted seen by read_uncommitted": len({v for _, _, v in uncommitted_read} & {out for t in h.txns if t.outcome == "fail" for out in t.outputs}),
    }
    return [
        _verdict(workload, "aborted-read", _aborted_reads(h, seen), stats),
        _verdict(workload, "unexpected-read", _unexpected_reads(committed_read, uncommitted_read, owner), stats),
        _verdict(workload, "lost-write", _lost_writes(h, seen), stats),
        _verdict(workload, "duplicate-read", [(v, n) for v, n in seen.items() if n > 1], stats),
        _verdict(workload, "non-atomic", _partially_visible(h, seen), stats),
        _verdict(workload, "uncommitted-misses-committed", _missed_by_read_uncommitted(committed_read, uncommitted_read), stats),
        _verdict(workload, "double-processed", _double_processed(visible), stats),
        _verdict(workload, "committed-offsets", _committed_offsets(h, visible), stats),
        _verdict(workload, "skipped-input", _skipped_inputs(h, visible), stats),
        *([_verdict(workload, "idle-loops", _idle_loops(h, workload, loops), stats)] if loops is not None else []),
    ]


def _idle_loops(h: TxnHistory, workload: str, loops: int) -> list[Any]:
    committing = {t.process for t in h.txns if t.outcome == "ok"}
    return [process for i in range(loops) if (process := f"{workload}-{i}") not in committing]


def _verdict(workload: str, name: str, anomalies: list[Any], stats: dict[str, int]) -> Verdict:
    return Verdict(workload, name, len(anomalies), anomalies[:MAX_EXAMPLES], dict(stats))


def _aborted_reads(h: TxnHistory, seen: Counter[str]) -> list[Any]:
    """read_committed saw an output of a transaction that certainly aborted."""
    return [{"txn": t.id, "value": out} for t in h.txns if t.outcome == "fail" for out in t.outputs if out in seen]


def _unexpected_reads(committed: list[tuple[int, int, str]], uncommitted: list[tuple[int, int, str]], owner: dict[str, Txn]) -> list[Any]:
    """A record no transaction of the workload wrote."""
    return [{"isolation": iso, "record": r} for iso, read in (("read_committed", committed), ("read_uncommitted", uncommitted)) for r in read if r[2] not in owner]


def _lost_writes(h: TxnHistory, seen: Counter[str]) -> list[Any]:
    """An acknowledged commit whose outputs read_committed does not show."""
    return [{"txn": t.id, "value": out} for t in h.txns if t.outcome == "ok" for out in t.outputs if out not in seen]


def _partially_visible(h: TxnHistory, seen: Counter[str]) -> list[Any]:
    """A transaction of unknown outcome of which read_committed shows some outputs but not all."""
    anomalies = []
    for t in h.txns:
        shown = [out for out in t.outputs if out in seen]
        if t.outcome == "info" and shown and len(shown) < len(t.outputs):
            anomalies.append({"txn": t.id, "visible": len(shown), "written": len(t.outputs)})
    return anomalies


def _missed_by_read_uncommitted(committed: list[tuple[int, int, str]], uncommitted: list[tuple[int, int, str]]) -> list[Any]:
    """read_uncommitted sees everything committed, at the same offsets."""
    everything = set(uncommitted)
    return [r for r in committed if r not in everything]


def _double_processed(visible: list[Txn]) -> list[Any]:
    """An input whose output more than one committed transaction carries: processed twice."""
    by_input: dict[tuple[int, int], list[str]] = defaultdict(list)
    for t in visible:
        for tp in t.inputs:
            by_input[tp].append(t.id)
    return [{"input": list(tp), "txns": ids} for tp, ids in sorted(by_input.items()) if len(ids) > 1]


def _committed_offsets(h: TxnHistory, visible: list[Txn]) -> list[Any]:
    """The group's committed offset on each input partition is the one the last committed
    transaction sent: never an aborted transaction's, never an intermediate position."""
    if h.committed_offsets is None:
        return [{"missing": "the group's committed offsets were not read"}]
    expected: dict[int, int] = {}
    for t in visible:
        for p, o in t.offsets.items():
            expected[p] = max(expected.get(p, 0), o)
    sent_by = {(p, o): t for t in h.txns for p, o in t.offsets.items()}
    anomalies = []
    for p in sorted(set(expected) | set(h.committed_offsets)):
        got, want = h.committed_offsets.get(p, 0), expected.get(p, 0)
        if got != want:
            culprit = sent_by.get((p, got))
            anomalies.append({"partition": p, "committed": got, "last committed txn sent": want, "sent by": None if culprit is None else [culprit.id, culprit.outcome]})
    return anomalies


def _skipped_inputs(h: TxnHistory, visible: list[Txn]) -> list[Any]:
    """An input below the committed offset that no committed transaction processed: lost."""
    if h.committed_offsets is None:
        return []
    processed = {tp for t in visible for tp in t.inputs}
    return [[p, o] for p, end in sorted(h.committed_offsets.items()) for o in range(end) if (p, o) not in processed]
