"""ControllerChannel: the one way broker code reaches the active controller.

Kafka's NodeToControllerChannelManager. The active controller is the Raft leader of the
metadata quorum; it moves when a controller fails, so every call finds it again, waits while
there is none (an election), and retries an answer of NOT_CONTROLLER, all within the call's
timeout; a request waiting on a controller that lost the leadership (stopped, cut off) goes to its
successor as soon as Raft names one, not after the request timeout. In a combined node whose own controller is active the call is a method call, with no
socket in between; everywhere else it goes over the network client.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.network_client import NetworkClient, NetworkError

log = structlog.get_logger(__name__)

# How often a request waiting on a remote controller looks whether the Raft leader moved.
LEADER_CHECK_S = 0.05


class ControllerUnavailableError(Exception):
    """No active controller answered within the call's timeout."""


class ControllerLocator(Protocol):
    """Where the active controller is: the Raft leader as this node knows it."""

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader's controller listener, or None during an election."""
        ...


class LocalController(Protocol):
    @property
    def is_active(self) -> bool: ...

    async def handle(self, body: Any) -> Any:
        """Answer a request a broker sends to the controller (registration, heartbeat, forwarded writes)."""
        ...


def is_not_controller(response: Any) -> bool:
    """NOT_CONTROLLER at the top of the answer, or for every item of its first list with codes (CreateTopics
    and the like). An answer with neither is looked into: ElectLeaders v0 has no top-level code and answers
    per partition within each topic."""
    code = getattr(response, "error_code", None)
    if code is not None:
        return bool(code == ErrorCode.not_controller)
    lists = [items for name in getattr(response, "__dataclass_fields__", ()) if isinstance(items := getattr(response, name), tuple) and items]
    for items in lists:
        if hasattr(items[0], "error_code"):
            return all(item.error_code == ErrorCode.not_controller for item in items)
    for items in lists:
        if hasattr(items[0], "__dataclass_fields__"):
            return all(is_not_controller(item) for item in items)
    return False


class ControllerChannel:
    def __init__(
        self,
        network: NetworkClient,
        locator: ControllerLocator,
        local: LocalController | None,
        *,
        request_timeout_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        self._network = network
        self._locator = locator
        self._local = local
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._last_reason = "no active controller"

    async def send(self, body: Any, timeout_ms: int | None = None) -> Any:
        budget_ms = timeout_ms if timeout_ms is not None else self._request_timeout_ms
        deadline = time.monotonic() + budget_ms / 1000
        reason = self._last_reason
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise ControllerUnavailableError(f"{type(body).__name__}: {reason} within {budget_ms} ms")
            response = await self._try_once(body, remaining_ms)
            if response is not None and not is_not_controller(response):
                return response
            reason = "the controller moved" if response is not None else self._last_reason
            await asyncio.sleep(min(self._retry_backoff_s, max(deadline - time.monotonic(), 0)))

    async def _try_once(self, body: Any, timeout_ms: int) -> Any | None:
        if self._local is not None and self._local.is_active:
            return await self._local.handle(body)
        endpoint = self._locator.leader_endpoint()
        if endpoint is None:
            self._last_reason = "no active controller"
            return None
        node_id, host, port = endpoint
        # The caller's budget bounds the wait, but the request itself gets the channel's full
        # timeout: a request timing out closes its connection, which would fail every other
        # request in flight to the controller (heartbeats among them) for the sake of a retry
        # loop's last few milliseconds. An answer that comes after the caller left is dropped.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        send = asyncio.ensure_future(self._network.send((host, port), body, timeout_ms=max(timeout_ms, self._request_timeout_ms)))
        try:
            while not send.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    self._last_reason = f"controller {node_id} at {host}:{port} did not answer within {timeout_ms} ms"
                    return None
                await asyncio.wait([send], timeout=min(remaining, LEADER_CHECK_S))
                if not send.done() and self._moved_from(endpoint):
                    # A stopped or cut-off controller lost the leadership: ask its successor now. A
                    # heartbeat waiting out the request timeout on it would reach the new controller
                    # only after the broker session it was meant to keep, and a new controller that
                    # hears from no broker within one session fences them all, its own included.
                    self._last_reason = f"controller {node_id} at {host}:{port} is no longer the active controller"
                    return None
            return send.result()
        except TimeoutError:
            self._last_reason = f"controller {node_id} at {host}:{port} did not answer within {timeout_ms} ms"
            return None
        except NetworkError as e:
            self._last_reason = f"controller {node_id} at {host}:{port}: {e}"
            log.debug("controller_channel.send_failed", controller=node_id, error=str(e))
            return None
        finally:
            send.cancel()

    def _moved_from(self, endpoint: tuple[int, str, int]) -> bool:
        if self._local is not None and self._local.is_active:
            return True
        return self._locator.leader_endpoint() != endpoint
