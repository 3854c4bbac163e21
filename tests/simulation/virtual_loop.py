"""An asyncio event loop on the simulation's virtual clock, stepped by the simulation.

The transaction coordinator and its marker channel are asyncio code (futures of replicated
writes, a task per transaction's markers, backoffs with ``asyncio.sleep``). The simulation runs
that code unchanged on this loop: its clock is the simulation's, it never waits for I/O, and it
runs only when the simulation steps it, after each event and whenever its earliest timer is
due, so a seed still replays exactly. Reading the loop's ready queue and timer heap (asyncio's
BaseEventLoop keeps them in ``_ready`` and ``_scheduled``) is what tells the simulation when the
loop has work; a test harness may lean on that, the broker never does.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Callable


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, now_ms: Callable[[], int]) -> None:
        super().__init__()
        self._now_ms = now_ms
        self.errors: list[str] = []
        self.set_exception_handler(self._record_error)

    def time(self) -> float:
        return self._now_ms() / 1000

    def next_timer_ms(self) -> int | None:
        """When the earliest timer is due, in virtual ms; None when none is set. (A cancelled one
        still counts until a pass of the loop drops it: at worst the simulation wakes it for nothing.)"""
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        # Rounded up: a timer fires at the first virtual ms at or after its due time.
        return math.ceil(scheduled[0].when() * 1000) if scheduled else None

    def has_work(self) -> bool:
        if self._ready:  # type: ignore[attr-defined]
            return True
        # In whole ms, as next_timer_ms says when: a timer the simulation woke for is run (asyncio
        # itself takes a timer within its clock's resolution of now as due).
        due = self.next_timer_ms()
        return due is not None and due <= self._now_ms()

    def run_ready(self, limit: int = 100_000) -> None:
        """Run callbacks until none is ready and no timer is due at the current virtual time."""
        if not self._ready and not self._scheduled:  # type: ignore[attr-defined]
            return  # the common case, after every event of the simulation: nothing to do
        for _ in range(limit):
            if not self.has_work():
                return
            # One pass of asyncio's own loop: due timers join the ready queue, which runs once;
            # with work ready its select does not wait.
            self.call_soon(self.stop)
            self.run_forever()
        raise RuntimeError(f"the virtual loop still has work after {limit} passes")

    def close(self) -> None:
        """The run is over: what still waits is cancelled, so nothing is left pending."""
        for task in asyncio.all_tasks(self):
            task.cancel()
        self.run_ready()
        super().close()

    def _record_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exception = context.get("exception")
        self.errors.append(f"{context.get('message')}: {exception!r}" if exception is not None else str(context.get("message")))
