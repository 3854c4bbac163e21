"""Kafka's AssignmentsManager (KIP-858): a broker of several log dirs tells the controller which dir
holds each of its replicas, in AssignReplicasToDirs requests.

The controller places a new replica on a broker of several dirs in no dir in particular
(DirectoryId.UNASSIGNED); the broker picks one (LogManager.next_log_dirs) and says which. Only then
can the controller act on a dir going offline: the partitions whose replica it knows to be in that
dir lose this broker as leader and ISR member. The logs to check come from the LogManager (every log
loaded at start-up, every log created since); a log whose dir the metadata already names is done,
and so is one whose partition no longer lists this broker. Answers are retried while the
controller cannot be reached or refuses the whole request; a partition it refuses on its own
(unknown topic or partition, not a replica any more) is dropped, as Kafka's manager drops it.

``on_assignment`` is Kafka's onAssignment (its DirectoryEventHandler.handleAssignment): a dir
asked for explicitly, whatever the log's dir is now, with a callback run once the controller has
accepted it. The ReplicaAlterLogDirsManager asks so for a moving replica's new dir before the swap
(and for its old dir back when the move is given up). A request for the same partition replaces
one not sent yet; a refused one is sent again unless a newer one came meanwhile (putIfAbsent).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Callable, Mapping

import structlog
from kio.schema.assign_replicas_to_dirs.v0.request import AssignReplicasToDirsRequest, DirectoryData, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from broker.broker_log_dirs import assigned_directory
from broker.controller_channel import ControllerChannel, ControllerUnavailableError
from broker.metadata import metadata_version as mv
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage
from storage.log_manager import LogManager

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
# Kafka's AssignmentsManager.MAX_ASSIGNMENTS_PER_REQUEST.
MAX_ASSIGNMENTS_PER_REQUEST = 2250
RETRY_BACKOFF_S = 0.5
# What on_assignment was given: the dir, and what to run once the controller has accepted it.
Requested = tuple[uuid.UUID, Callable[[], None] | None]


def pending_assignments(
    node_id: int,
    image: MetadataImage,
    log_manager: LogManager,
    keys: set[TopicPartition],
    requested: Mapping[TopicPartition, uuid.UUID] | None = None,
) -> tuple[dict[uuid.UUID, dict[uuid.UUID, list[TopicPartition]]], set[TopicPartition]]:
    """Of ``keys``, the replicas whose dir the metadata does not name yet, by directory id and topic
    id (at most MAX_ASSIGNMENTS_PER_REQUEST), and the keys still to check after this request.
    ``requested`` (on_assignment) are sent with their dir even where the metadata names it, as
    Kafka sends them; one whose partition or replica here is gone is dropped (Kafka's
    Assignment.valid). A replica moving to the dir the metadata names is left to its move: the
    swap makes the metadata right (after a restart between the assignment and the swap)."""
    requested = requested or {}
    batch: dict[uuid.UUID, dict[uuid.UUID, list[TopicPartition]]] = {}
    left: set[TopicPartition] = set()
    count = 0
    for key in sorted(keys | requested.keys()):
        plog = log_manager.get_log(*key)
        topic = image.topics.get(key[0])
        registration = topic.partitions.get(key[1]) if topic is not None else None
        if key in requested:
            directory: uuid.UUID | None = requested[key]
        else:
            directory = log_manager.directory_id(plog.parent_dir) if plog is not None else None
        if registration is None or directory is None or topic is None or node_id not in registration.replicas:
            if plog is not None and topic is None and key not in requested:
                left.add(key)  # created from a delta the loader has not given us yet
            continue
        if key not in requested:
            future = log_manager.future_logs.get(key)
            named = assigned_directory(registration, node_id)
            if named == directory or (future is not None and named == log_manager.directory_id(future.parent_dir)):
                continue
        if count >= MAX_ASSIGNMENTS_PER_REQUEST:
            left.add(key)
            continue
        batch.setdefault(directory, {}).setdefault(topic.topic_id, []).append(key)
        count += 1
    return batch, left


class AssignmentsManager:
    def __init__(self, node_id: int, log_manager: LogManager, channel: ControllerChannel, broker_epoch: Callable[[], int]) -> None:
        self._node_id = node_id
        self._log_manager = log_manager
        self._channel = channel
        self._broker_epoch = broker_epoch
        self._image = EMPTY_IMAGE
        self._pending: set[TopicPartition] = set()
        self._requested: dict[TopicPartition, Requested] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(node=node_id)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self._image = image
        self._wake.set()

    def on_assignment(self, key: TopicPartition, directory: uuid.UUID, on_accepted: Callable[[], None] | None = None) -> None:
        """Kafka's onAssignment: have the controller name ``directory`` as the dir of this node's
        replica of ``key``; ``on_accepted`` runs once it has (never, if the replica is gone)."""
        self._requested[key] = (directory, on_accepted)
        self._wake.set()

    def start(self) -> None:
        if len(self._log_manager.log_dirs) > 1:
            self._task = asyncio.create_task(self._run(), name="assignments-manager")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._pending |= self._log_manager.take_new_logs()
            # Below metadata.version 3.7-IV2 the records have no directories: the replicas wait
            # for an upgrade (a metadata update wakes this loop), as Kafka's broker sends none.
            level = self._image.features.get(mv.METADATA_VERSION_FEATURE)
            supported = mv.for_level(level).is_directory_assignment_supported
            if level is not None and not supported:
                # No dir in the metadata to keep right: a move's new dir is as good as accepted
                # (Kafka's DirectoryEventHandler.NOOP).
                for _, on_accepted in self._take_requested(set(self._requested)).values():
                    if on_accepted is not None:
                        on_accepted()
            sendable = self._broker_epoch() >= 0 and supported
            if (self._pending or self._requested) and sendable:
                requested = {key: directory for key, (directory, _) in self._requested.items()}
                batch, left = pending_assignments(self._node_id, self._image, self._log_manager, self._pending, requested)
                self._pending = left - requested.keys()
                sent = self._take_requested(requested.keys() - left)
                retry, accepted = await self._send(batch) if batch else (set(), set())
                self._pending |= retry - sent.keys()
                for key, (directory, on_accepted) in sent.items():
                    if key in retry:
                        self._requested.setdefault(key, (directory, on_accepted))
                    elif key in accepted and on_accepted is not None:
                        on_accepted()
            # Woken by metadata updates; and every RETRY_BACKOFF_S for retries and for the logs the
            # replica manager creates a slice at a time after the delta that named them.
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallowed a close's cancel
            # that arrived with a wake-up, and this loop ran on for ever.
            try:
                async with asyncio.timeout(RETRY_BACKOFF_S if sendable else None):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    def _take_requested(self, keys: set[TopicPartition]) -> dict[TopicPartition, Requested]:
        return {key: self._requested.pop(key) for key in keys}

    async def _send(self, batch: dict[uuid.UUID, dict[uuid.UUID, list[TopicPartition]]]) -> tuple[set[TopicPartition], set[TopicPartition]]:
        """Send one request; the replicas to try again, and those the controller accepted."""
        names = {(topic_id, p): (t, p) for topics in batch.values() for topic_id, keys in topics.items() for t, p in keys}
        everything = set(names.values())
        request = AssignReplicasToDirsRequest(
            broker_id=i32(self._node_id),
            broker_epoch=i64(self._broker_epoch()),
            directories=tuple(
                DirectoryData(
                    id_=directory,
                    topics=tuple(TopicData(topic_id=topic_id, partitions=tuple(PartitionData(partition_index=i32(p)) for _, p in keys)) for topic_id, keys in topics.items()),
                )
                for directory, topics in batch.items()
            ),
        )
        try:
            response = await self._channel.send(request)
        except ControllerUnavailableError as e:
            self._log.info("broker.assign_replicas_to_dirs_pending", reason=str(e), replicas=len(everything))
            return everything, set()
        if response.error_code != ErrorCode.none:
            self._log.warning("broker.assign_replicas_to_dirs_refused", error=response.error_code.name, replicas=len(everything))
            return everything, set()
        accepted: set[TopicPartition] = set()
        dropped: set[TopicPartition] = set()
        for directory in response.directories:
            for topic in directory.topics:
                for partition in topic.partitions:
                    key = names.get((topic.topic_id, int(partition.partition_index)))
                    if key is None:
                        continue
                    if partition.error_code == ErrorCode.none:
                        accepted.add(key)
                        continue
                    self._log.info("broker.assignment_refused", topic=key[0], partition=key[1], error=partition.error_code.name)
                    if partition.error_code in (ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower):
                        dropped.add(key)
        # A partition the response does not mention is sent again, as Kafka's manager does.
        retry = everything - accepted - dropped
        self._log.info("broker.replicas_assigned_to_dirs", replicas=len(accepted))
        return retry, accepted


__all__ = ["AssignmentsManager", "MAX_ASSIGNMENTS_PER_REQUEST", "pending_assignments"]
