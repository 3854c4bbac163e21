"""A loop closed in the very turn its wake-up event is set still stops.

Python 3.11's ``asyncio.wait_for(event.wait(), timeout)`` swallowed a cancel that arrived once the
event was set but before the waiting task resumed: the loop went round again and its owner's
close waited for it for ever. Each owner here sets its event and is closed at once, so its task
meets exactly that case.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, cast

import pytest

from broker.assignments_manager import AssignmentsManager
from broker.console.collector import Collector
from broker.metadata import metadata_version as mv
from broker.metadata.metadata_cache import MetadataCache
from broker.partition import Partition
from broker.replica_alter_log_dirs_manager import ReplicaAlterLogDirsManager
from broker.replica_fetcher_manager import ReplicaFetcher
from tests.unit.quorum_controller_fakes import Clock, FakeQuorum, Node, settle
from tests.unit.test_broker_lifecycle_manager import Controllers, manager as lifecycle_manager
from tests.unit.test_replica_fetcher_manager import SETTINGS as FETCHER_SETTINGS

CLOSE_BOUND_S = 2.0


@dataclass
class Owner:
    wake: Callable[[], None]  # sets the event its loop waits on
    close: Callable[[], Awaitable[None]]
    task: Callable[[], asyncio.Task[Any] | None]


def broker_lifecycle_manager() -> Owner:
    # Registered and heartbeating: a log dir failure sends the next heartbeat at once.
    lifecycle = lifecycle_manager(Controllers())
    lifecycle.start()

    def wake() -> None:
        assert lifecycle.broker_epoch >= 0, "not registered yet: nothing would wake the loop"
        lifecycle.propagate_directory_failure()

    return Owner(wake=wake, close=lifecycle.close, task=lambda: lifecycle._task)


def replica_fetcher() -> Owner:
    # No endpoint for the leader: the fetcher has nothing to send and waits for a new partition.
    metadata = cast(MetadataCache, SimpleNamespace(broker_endpoint=lambda node_id, listener: None))
    fetcher = ReplicaFetcher(1, 0, FETCHER_SETTINGS, metadata, lambda: 7)
    fetcher.add(cast(Partition, SimpleNamespace(key=("t", 0), leader_epoch=3)))
    return Owner(
        wake=lambda: fetcher.add(cast(Partition, SimpleNamespace(key=("t", 1), leader_epoch=3))),
        close=fetcher.shutdown,
        task=lambda: fetcher._task,
    )


def assignments_manager() -> Owner:
    # Registered, at a metadata.version with directories, nothing to assign: it waits a retry backoff.
    log_manager = SimpleNamespace(log_dirs=["a", "b"], take_new_logs=set)
    manager = AssignmentsManager(1, log_manager, None, lambda: 5)  # type: ignore[arg-type]
    image = SimpleNamespace(features={mv.METADATA_VERSION_FEATURE: mv.LATEST_PRODUCTION.level})
    manager.on_metadata_update(None, image)  # type: ignore[arg-type]
    manager.start()
    return Owner(wake=lambda: manager.on_metadata_update(None, image), close=manager.close, task=lambda: manager._task)  # type: ignore[arg-type]


def replica_alter_log_dirs_manager() -> Owner:
    # No future log to copy: it waits for a new move.
    log_manager = SimpleNamespace(future_logs={}, get_or_create_future_log=lambda topic, partition, log_dir: object())
    manager = ReplicaAlterLogDirsManager(SimpleNamespace(log_manager=log_manager))  # type: ignore[arg-type]
    manager.start()
    return Owner(wake=lambda: manager.alter("t", 0, None), close=manager.close, task=lambda: manager._task)  # type: ignore[arg-type]


def quorum_controller() -> Owner:
    # Becoming the active controller wakes the timer.
    quorum = FakeQuorum()
    controller = Node(quorum, 1, Clock()).controller
    controller.start()
    return Owner(wake=lambda: quorum.elect(1), close=controller.shutdown, task=lambda: controller._timer)


OWNERS = [broker_lifecycle_manager, replica_fetcher, assignments_manager, replica_alter_log_dirs_manager, quorum_controller]


@pytest.mark.parametrize("build", OWNERS, ids=[b.__name__ for b in OWNERS])
def test_close_in_the_turn_the_loop_is_woken_stops_it(build: Callable[[], Owner]) -> None:
    async def scenario() -> None:
        owner = build()
        await settle()  # the loop is waiting on its event
        task = owner.task()
        assert task is not None and not task.done()
        owner.wake()
        async with asyncio.timeout(CLOSE_BOUND_S):
            await owner.close()
        assert task.done()

    asyncio.run(scenario())


def test_a_long_poll_cancelled_as_a_poll_completes_is_cancelled() -> None:
    """The console's long poll, cancelled (the console stopping) as the poll it waits for ends:
    it ends cancelled, rather than answering and serving its connection on."""

    async def scenario() -> bool:
        collector = Collector([("127.0.0.1", 9)])
        long_poll = asyncio.create_task(collector.wait_update(0, 5.0))
        await settle()
        collector.version += 1  # what poll_once does as it ends
        collector._updated.set()
        long_poll.cancel()
        await asyncio.wait([long_poll], timeout=CLOSE_BOUND_S)
        return long_poll.cancelled()

    assert asyncio.run(scenario())
