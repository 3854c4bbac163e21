"""Appending transaction markers to the partitions this node leads.

What Kafka's WriteTxnMarkers handler does on the partition leader: a marker is a COMMIT or
ABORT control batch appended as the coordinator, which the log takes as the end of the
producer's transaction (txn index, last stable offset). A marker for a ``__consumer_offsets``
partition is written by this node's group coordinator instead, as one of its shard's writes:
it settles the offsets the producer committed in the transaction, in log order with them.
Both the transaction coordinator (for the
partitions it leads itself) and the WriteTxnMarkers handler (for other coordinators) write here.

A marker counts as written once it is replicated (Kafka appends markers with acks=-1): a
transaction completed while its marker sat only on a leader that then died would leave that
partition's last stable offset waiting for a marker nobody sends again.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

import structlog

from broker.group_coordinator import GROUP_METADATA_TOPIC, GroupCoordinator, now_ms
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ACKS_ALL, ReplicaManager
from protocol.control_records import build_control_batch
from storage.errors import StorageError
from storage.producer_state_manager import TRANSACTION_VERSION_2, AppendOrigin, check_tv2_marker_epoch

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
# Kafka's request.timeout.ms default, which bounds a marker append's wait for its followers.
MARKER_REPLICATION_TIMEOUT_MS = 30000


class TransactionMarkerWriter:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, group_coordinator: GroupCoordinator) -> None:
        self._rm = replica_manager
        self._metadata = metadata
        self._groups = group_coordinator

    def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
        transaction_version: int = 0,
    ) -> dict[TopicPartition, int | asyncio.Future[int]]:
        """Append one marker per partition; the error code of each (0: written and replicated), or
        a future of it while the partition's followers have yet to copy the marker.

        NOT_LEADER_OR_FOLLOWER for a partition this node does not lead, UNKNOWN_TOPIC_OR_PARTITION
        for one its image does not have; a fenced producer or coordinator epoch is the log's answer.
        A marker of transaction version 2 (WriteTxnMarkers v2, KIP-1228) must carry an epoch above
        the producer's on the partition: INVALID_PRODUCER_EPOCH otherwise."""
        results: dict[TopicPartition, int | asyncio.Future[int]] = {}
        image = self._metadata.image
        timestamp = now_ms()
        for topic, index in sorted(partitions):
            if transaction_version >= TRANSACTION_VERSION_2 and (refused := self._tv2_epoch_refused(topic, index, producer_id, producer_epoch)):
                results[(topic, index)] = refused
                continue
            if topic == GROUP_METADATA_TOPIC:
                results[(topic, index)] = self._groups.complete_transaction(index, producer_id, producer_epoch, coordinator_epoch, commit, MARKER_REPLICATION_TIMEOUT_MS)
                continue
            batch = build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, timestamp)
            try:
                partition = self._rm.leader_partition(topic, index, image)
                info = partition.append_records_to_leader(memoryview(bytearray(batch)), AppendOrigin.COORDINATOR, ACKS_ALL)
            except StorageError as e:
                log.warning("txn_marker.append_failed", topic=topic, partition=index, producer_id=producer_id, error=str(e))
                results[(topic, index)] = e.error_code
                continue
            required = info.last_offset + 1
            code = self._rm.replicated((topic, index), required)
            results[(topic, index)] = code if code is not None else asyncio.ensure_future(self._rm.wait_replicated((topic, index), required, MARKER_REPLICATION_TIMEOUT_MS))
            self._rm.fetch_purgatory.touch((topic, index))
        return results

    def _tv2_epoch_refused(self, topic: str, index: int, producer_id: int, producer_epoch: int) -> int:
        """Kafka checks a TV2 marker's epoch as the log appends it; the append below follows at once
        on this event loop, so checking the producer's state first is the same check."""
        replica = self._rm.partitions.get((topic, index))
        if replica is None or not replica.is_leader:
            return 0  # the append's own checks answer
        try:
            check_tv2_marker_epoch(f"{topic}-{index}", producer_id, replica.log.producer_state.last_entry(producer_id), producer_epoch)
        except StorageError as e:
            log.warning("txn_marker.append_failed", topic=topic, partition=index, producer_id=producer_id, error=str(e))
            return e.error_code
        return 0
