"""Node 1 of a cluster nobody else runs, leading the partitions its metadata records give it, over real logs."""

from __future__ import annotations

from pathlib import Path

from broker.coordinator.coordinator_runtime import now_ms
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord
from broker.replica_manager import ReplicaManager
from storage.log_config import LogConfig
from storage.log_manager import LogManager


def start_leader_node(data_dir: Path, records: list[MetadataRecord]) -> tuple[MetadataDelta, MetadataCache, LogManager, ReplicaManager]:
    """The delta of ``records`` (for the coordinators to publish), the metadata cache, the started
    log manager and the replica manager that applied the delta."""
    delta = MetadataDelta(MetadataImage())
    for record in records:
        delta.replay(record)
    image = delta.apply(len(records) - 1)
    metadata = MetadataCache(1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9092), image=image)
    log_manager = LogManager(data_dir, LogConfig(), now_ms)
    log_manager.startup()
    rm = ReplicaManager(1, log_manager, dict)
    rm.apply_delta(delta, image)
    return delta, metadata, log_manager, rm
