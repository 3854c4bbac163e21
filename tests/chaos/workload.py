"""What a chaos workload is to the campaign, and what a check returns.

A workload drives stock Kafka clients against the cluster from threads of its own, recording
every operation in the shared History, and knows how to judge the history it produced. The
campaign calls, in order: ``setup`` (topics), ``start``, then (while the nemesis runs) nothing,
then ``stop`` (clients finish and close), the cluster is healed and every node restarted,
``drain`` (a final read of everything), and ``check`` over the whole history.

The campaign also uses, where a workload has them (tests/chaos/campaign.py):
- ``topics: dict[str, int]``, topic -> partition count: the partitions whose leaders the nemesis
  kills or isolates, and whose ISRs must be full again before the next fault;
- ``progress() -> dict[str, int]``, a count per client that grows while it makes progress: after
  each fault window every count must grow again (else a ``stalled`` nemesis op is recorded);
- ``failures() -> list[str]``, client threads that died (the history is then incomplete);
- ``describe() -> str``, one line for the printed summary.
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from tests.chaos.history import History, Op


def stuck_threads(threads: Iterable[threading.Thread]) -> str:
    """The threads still alive, each with the Python stack it is blocked in (for a client call
    into librdkafka, the call), so that a workload that does not stop says where; "" if none."""
    frames = sys._current_frames()
    parts = []
    for thread in threads:
        if thread.is_alive() and thread.ident is not None:
            frame = frames.get(thread.ident)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
            parts.append(f"{thread.name}:\n{stack}")
    return "".join(parts)


@dataclass
class Verdict:
    """One check over the history: ``count`` anomalies found (0 = valid), with up to a few ``examples``."""

    workload: str
    check: str
    count: int
    examples: list[Any] = field(default_factory=list)
    # What the check looked at, so a 0 means something: {"acknowledged": 5120, ...}.
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.count == 0


class Workload(Protocol):
    name: str

    def setup(self, admin_bootstrap: str) -> None:
        """Create the workload's topics (through any broker)."""

    def start(self, history: History, bootstrap: Callable[[], str]) -> None:
        """Start the clients; ``bootstrap()`` gives the bootstrap servers of the running brokers."""

    def stop(self) -> None:
        """Stop issuing operations, wait (bounded) for the outstanding ones, close the clients."""

    def drain(self, history: History, bootstrap: str) -> None:
        """After healing: read everything back and record it as the workload's final reads."""

    def check(self, ops: list[Op]) -> list[Verdict]:
        """Judge the whole history (the ops of every workload and the nemesis)."""
