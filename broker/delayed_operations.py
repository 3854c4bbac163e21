"""Purgatory for operations that wait on a partition's log: woken by events, never by polling.

A DelayedFetch that has not yet met ``min_bytes`` parks a future on every partition it
reads; an append or a high-watermark move on any of them wakes it, and it re-reads.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._watchers: defaultdict[Hashable, set[asyncio.Future[None]]] = defaultdict(set)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Wait until one of ``keys`` is touched or ``timeout_s`` passes; True if touched."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._watchers[key].add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for key in keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.discard(fut)
                    if not watchers:
                        del self._watchers[key]

    def touch(self, key: Hashable) -> None:
        watchers = self._watchers.pop(key, None)
        if watchers:
            for fut in watchers:
                if not fut.done():
                    fut.set_result(None)

    def touch_all(self) -> None:
        """Wake every waiter (shutdown, metadata changes)."""
        for key in list(self._watchers):
            self.touch(key)

    @property
    def watched(self) -> int:
        return len(self._watchers)
