"""ControllerChannel: finds the active controller, retries NOT_CONTROLLER, and keeps within the caller's budget
without giving a request less than the channel's own timeout."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.controller_channel import ControllerChannel, ControllerUnavailableError, is_not_controller
from broker.handlers.forwarding import elect_leaders_response
from broker.network_client import DisconnectError

REQUEST_TIMEOUT_MS = 2000


@dataclass
class Answer:
    error_code: ErrorCode


class Locator:
    def __init__(self, endpoint: tuple[int, str, int] | None) -> None:
        self.endpoint = endpoint

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        return self.endpoint


class FakeNetwork:
    """Answers from a script: an Answer, an exception to raise, or None to never answer."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.timeouts: list[int | None] = []
        self.cancelled = 0

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        self.timeouts.append(timeout_ms)
        step = self.script.pop(0) if self.script else None
        if isinstance(step, Exception):
            raise step
        if step is None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return step


def channel(network: FakeNetwork, locator: Locator) -> ControllerChannel:
    return ControllerChannel(network, locator, None, request_timeout_ms=REQUEST_TIMEOUT_MS, retry_backoff_ms=10)  # type: ignore[arg-type]


def test_not_controller_and_network_errors_are_retried_until_an_answer() -> None:
    network = FakeNetwork([Answer(ErrorCode.not_controller), DisconnectError("reset"), Answer(ErrorCode.none)])
    answer = asyncio.run(channel(network, Locator((1, "127.0.0.1", 9093))).send(object(), timeout_ms=5000))
    assert answer == Answer(ErrorCode.none)
    assert len(network.timeouts) == 3


def test_no_leader_within_the_budget_is_controller_unavailable() -> None:
    network = FakeNetwork([])
    with pytest.raises(ControllerUnavailableError, match="no active controller"):
        asyncio.run(channel(network, Locator(None)).send(object(), timeout_ms=100))
    assert network.timeouts == []


def test_a_short_budget_abandons_the_wait_but_never_shortens_the_request() -> None:
    """A request given only the budget's last milliseconds would time out and close the connection
    every other request to the controller shares; the caller stops waiting instead."""
    network = FakeNetwork([None])

    async def go() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ControllerUnavailableError, match="did not answer"):
            await channel(network, Locator((1, "127.0.0.1", 9093))).send(object(), timeout_ms=150)
        return loop.time() - started

    elapsed = asyncio.run(go())
    assert elapsed < 5
    assert network.timeouts and all(t is not None and t >= REQUEST_TIMEOUT_MS for t in network.timeouts)
    assert network.cancelled == len(network.timeouts)


class Local:
    def __init__(self) -> None:
        self.is_active = False

    async def handle(self, body: Any) -> Any:
        return Answer(ErrorCode.none)


def test_a_request_waiting_on_a_controller_that_lost_the_leadership_goes_to_its_successor() -> None:
    """A paused controller keeps the request (a heartbeat) until the request timeout, past the
    broker session; once Raft names a new leader the channel asks it at once."""
    network = FakeNetwork([None, Answer(ErrorCode.none)])
    locator = Locator((1, "127.0.0.1", 9093))

    async def go() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_later(0.2, setattr, locator, "endpoint", (2, "127.0.0.1", 9094))
        answer = await channel(network, locator).send(object(), timeout_ms=REQUEST_TIMEOUT_MS)
        return answer, loop.time() - started

    answer, elapsed = asyncio.run(go())
    assert answer == Answer(ErrorCode.none)
    assert elapsed < 1.0, "the request waited on the old controller"
    assert network.cancelled == 1 and len(network.timeouts) == 2


def test_a_request_waiting_on_a_remote_controller_is_answered_by_this_node_once_its_own_is_active() -> None:
    network = FakeNetwork([None])
    local = Local()

    async def go() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_later(0.2, setattr, local, "is_active", True)
        ch = ControllerChannel(network, Locator((1, "127.0.0.1", 9093)), local, request_timeout_ms=REQUEST_TIMEOUT_MS, retry_backoff_ms=10)  # type: ignore[arg-type]
        answer = await ch.send(object())
        return answer, loop.time() - started

    answer, elapsed = asyncio.run(go())
    assert answer == Answer(ErrorCode.none)
    assert elapsed < 1.0
    assert network.cancelled == 1


@pytest.mark.parametrize("version", range(3))
def test_an_elect_leaders_answer_of_not_controller_is_retried_at_every_version(version: int) -> None:
    """ElectLeaders v0 has no top-level code: NOT_CONTROLLER for every partition of every topic is the signal."""
    refused = elect_leaders_response(version, ErrorCode.not_controller, [("a", [(0, ErrorCode.not_controller, None)]), ("b", [(1, ErrorCode.not_controller, None)])])
    elected = elect_leaders_response(version, ErrorCode.none, [("a", [(0, ErrorCode.none, None)]), ("b", [(1, ErrorCode.none, None)])])
    assert is_not_controller(refused) and not is_not_controller(elected)
    if version == 0:
        # One partition answered by a controller that is active: an answer, not a redirection.
        mixed = elect_leaders_response(0, ErrorCode.none, [("a", [(0, ErrorCode.not_controller, None), (1, ErrorCode.election_not_needed, None)])])
        assert not is_not_controller(mixed)
    network = FakeNetwork([refused, elected])
    answer = asyncio.run(channel(network, Locator((1, "127.0.0.1", 9093))).send(object(), timeout_ms=5000))
    assert answer is elected and len(network.timeouts) == 2
