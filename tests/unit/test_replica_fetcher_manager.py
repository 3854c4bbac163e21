"""ReplicaFetcherManager's life: once shut down it starts no fetcher, whatever metadata still arrives."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

from broker.metadata.metadata_cache import MetadataCache
from broker.partition import Partition
from broker.replica_fetcher_manager import FetcherSettings, ReplicaFetcherManager

SETTINGS = FetcherSettings(
    node_id=2,
    listener_name="PLAINTEXT",
    num_fetchers=1,
    fetch_max_bytes=1 << 20,
    fetch_response_max_bytes=10 << 20,
    fetch_wait_max_ms=500,
    fetch_min_bytes=1,
    fetch_backoff_ms=1000,
    request_timeout_ms=30000,
)


def test_no_fetcher_starts_after_shutdown() -> None:
    """A stopping broker's logs close right after its fetchers stop: a fetcher started later (a
    metadata delta applied meanwhile) appended to a closed log, took the log dir offline and
    halted the broker (chaos soak seed 426093043, a rolling restart)."""

    async def scenario() -> int:
        metadata = cast(MetadataCache, SimpleNamespace(broker_endpoint=lambda node_id, listener: None))
        manager = ReplicaFetcherManager(SETTINGS, metadata, lambda: 7)
        await manager.shutdown()
        partition = cast(Partition, SimpleNamespace(key=("t", 0), leader_id=1, leader_epoch=3))
        manager.add_fetcher_for(partition)
        return len(asyncio.all_tasks()) - 1  # but this one

    assert asyncio.run(scenario()) == 0
