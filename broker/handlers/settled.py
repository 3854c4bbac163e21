"""Answering a request whose coordinator write may still be waiting for its followers."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def when_settled(value: T | asyncio.Future[T], answer: Callable[[T], Any]) -> Any:
    """The answer at once when the coordinator's write is settled (replicated or failed), else a
    coroutine that waits for it: a client is told its write happened only once it would survive
    a failover, and a write to an unreplicated partition costs no coroutine."""
    if isinstance(value, asyncio.Future):
        return _answer_later(value, answer)
    return answer(value)


async def _answer_later(value: asyncio.Future[T], answer: Callable[[T], Any]) -> Any:
    return answer(await value)
