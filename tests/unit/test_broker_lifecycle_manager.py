"""BrokerLifecycleManager's controlled shutdown after heartbeats went unanswered: given up at once
only while no new controller could have given the broker a fresh session."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.schema.broker_heartbeat.v2.request import BrokerHeartbeatRequest
from kio.schema.errors import ErrorCode

from broker.broker_lifecycle_manager import BrokerLifecycleManager
from broker.controller_channel import ControllerUnavailableError

SESSION_MS = 300


class Controllers:
    """Registers the broker; answers its heartbeats only while ``up``, and lets it shut down."""

    def __init__(self) -> None:
        self.up = True

    async def send(self, body: Any, timeout_ms: int | None = None) -> Any:
        if not isinstance(body, BrokerHeartbeatRequest):
            return SimpleNamespace(error_code=ErrorCode.none, broker_epoch=7)
        if not self.up:
            raise ControllerUnavailableError("no controller")
        return SimpleNamespace(error_code=ErrorCode.none, is_fenced=False, is_caught_up=True, should_shut_down=body.want_shut_down)


def manager(controllers: Controllers) -> BrokerLifecycleManager:
    return BrokerLifecycleManager(
        broker_id=4,
        cluster_id="c",
        rack=None,
        listeners=[],
        features={},
        log_dir_ids=[],
        heartbeat_interval_ms=20,
        session_timeout_ms=SESSION_MS,
        quorum_fetch_timeout_ms=SESSION_MS,
        channel=controllers,  # type: ignore[arg-type]
        metadata_offset=lambda: 0,
    )


async def outage_then_shutdown(elect_a_new_controller: bool) -> bool:
    controllers = Controllers()
    lifecycle = manager(controllers)
    lifecycle.start()
    try:
        await asyncio.wait_for(lifecycle.unfenced.wait(), 5)
        controllers.up = False
        await asyncio.sleep(2 * SESSION_MS / 1000)  # unanswered for longer than a session
        if elect_a_new_controller:
            lifecycle.handle_leader_change(5, 3)
        controllers.up = True
        return await lifecycle.controlled_shutdown(5.0)
    finally:
        await lifecycle.close()


def test_a_broker_unanswered_for_a_session_stops_without_waiting() -> None:
    # Cut off from the controllers: they have fenced it, which moved its leaderships.
    assert asyncio.run(outage_then_shutdown(elect_a_new_controller=False)) is False


def test_after_a_new_controller_was_elected_the_controlled_shutdown_is_asked_for() -> None:
    # The new controller's sessions start at its activation: this broker is not fenced, so it
    # asks for its leaderships to move and stops once they have.
    assert asyncio.run(outage_then_shutdown(elect_a_new_controller=True)) is True
