"""The history of a chaos campaign: every operation a client or the nemesis began and how it ended.

The form is Jepsen's. Each operation is recorded twice: once as ``invoke`` when it begins, then as
``ok`` (it happened), ``fail`` (it certainly did not happen) or ``info`` (unknown: a timeout, a
killed connection), with the same ``process`` and ``f``. A process runs one operation at a time,
so an invoke and its completion pair up by process. The nemesis records its faults as ``info``
operations of process ``nemesis`` (``f`` = ``start-<fault>`` / ``stop-<fault>``) and what it
observed, such as a new partition leader, as ``f`` = ``observe``.

Times are seconds since the campaign began (time.monotonic). Values are JSON: a record is
``[partition, offset, value]``, offsets and partitions ints, values str.

Recording is thread-safe and cheap (a lock and a list append); the JSON lines are written once,
at the end, by ``dump``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

OpType = Literal["invoke", "ok", "fail", "info"]
NEMESIS = "nemesis"


@dataclass(frozen=True, slots=True)
class Op:
    index: int
    time: float
    process: str
    type: OpType
    f: str
    value: Any = None

    def to_json(self) -> str:
        return json.dumps({"index": self.index, "time": round(self.time, 6), "process": self.process, "type": self.type, "f": self.f, "value": self.value}, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "Op":
        d = json.loads(line)
        return cls(d["index"], d["time"], d["process"], d["type"], d["f"], d.get("value"))


class History:
    """Appends operations from any thread; ``ops`` is the history so far, in the order recorded."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._ops: list[Op] = []

    def now(self) -> float:
        return self._clock() - self._start

    def record(self, process: str, type: OpType, f: str, value: Any = None) -> Op:
        with self._lock:
            op = Op(len(self._ops), self._clock() - self._start, process, type, f, value)
            self._ops.append(op)
            return op

    def invoke(self, process: str, f: str, value: Any = None) -> Op:
        return self.record(process, "invoke", f, value)

    def ok(self, process: str, f: str, value: Any = None) -> Op:
        return self.record(process, "ok", f, value)

    def fail(self, process: str, f: str, value: Any = None) -> Op:
        return self.record(process, "fail", f, value)

    def info(self, process: str, f: str, value: Any = None) -> Op:
        return self.record(process, "info", f, value)

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def dump(self, path: Path) -> None:
        path.write_text("".join(op.to_json() + "\n" for op in self.ops))


def load(path: Path) -> list[Op]:
    return [Op.from_json(line) for line in path.read_text().splitlines() if line]


def completions(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Each client invoke with the op that completed it (None if the history ended first), in invoke order."""
    invokes: list[Op] = []
    pending: dict[str, Op] = {}
    done: dict[int, Op] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            pending[op.process] = op
            invokes.append(op)
        elif (invoke := pending.pop(op.process, None)) is not None and invoke.f == op.f:
            done[invoke.index] = op
    for invoke in invokes:
        yield invoke, done.get(invoke.index)
