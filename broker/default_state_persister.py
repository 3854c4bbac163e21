"""DefaultStatePersister: a broker asking share coordinators to keep share-group state.

Kafka 4.4's DefaultStatePersister and PersisterStateManager, in small form and, for now, for the
one call kbroker makes: InitializeShareGroupState, which the group coordinator sends for the
partitions a share group subscribes to before they may be assigned (GroupCoordinatorService.
persisterInitialize). The coordinator of each share partition is the leader of its
``__share_group_state`` partition: read from this node's metadata once the topic exists, found with
FindCoordinator(SHARE) otherwise, which creates it (Kafka's ShareCoordinatorMetadataCacheHelper
and findShareCoordinatorBuilder). The share partitions of one coordinator go in one request.

As Kafka's persister, every request goes over the network, also to this node's own coordinator:
one path, which is what the other brokers exercise. NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and a network failure are retried with
Kafka's backoff (1 s doubling to 30 s, 20% jitter) for at most MAX_ATTEMPTS rounds; any other
error fails the share partition.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.initialize_share_group_state.v0.request import InitializeShareGroupStateRequest, InitializeStateData, PartitionData
from kio.static.primitive import i8, i32, i64

from broker.group.share_group_manager import InitializeShareGroupState
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.network_client import NetworkError, exponential_backoff_ms
from broker.share_coordinator import share_partition_key
from broker.share_coordinator.config import STATE_TOPIC
from broker.share_coordinator.share_partition_key import SharePartitionKey

log = structlog.get_logger(__name__)

# Kafka's PersisterStateManager.REQUEST_BACKOFF_MS, REQUEST_BACKOFF_MAX_MS and MAX_FIND_COORD_ATTEMPTS.
REQUEST_BACKOFF_MS = 1000
REQUEST_BACKOFF_MAX_MS = 30_000
MAX_ATTEMPTS = 5
SHARE_KEY_TYPE = 2
# Kafka's PartitionFactory: the start offset of a share partition whose group has read nothing yet.
UNINITIALIZED_START_OFFSET = -1
RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress})


class RequestSender(Protocol):
    """NetworkClient.send."""

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any: ...


class DefaultStatePersister:
    def __init__(
        self,
        metadata: MetadataCache,
        network: RequestSender,
        num_partitions: int,
        *,
        inter_broker_listener_name: str,
        request_timeout_ms: int | None = None,
        backoff_ms: int = REQUEST_BACKOFF_MS,
        backoff_max_ms: int = REQUEST_BACKOFF_MAX_MS,
        rng: random.Random | None = None,
    ) -> None:
        self._metadata = metadata
        self._network = network
        self._num_partitions = num_partitions
        self._listener = inter_broker_listener_name.upper()
        self._request_timeout_ms = request_timeout_ms
        self._backoff_ms = backoff_ms
        self._backoff_max_ms = backoff_max_ms
        self._rng = rng or random.Random()

    async def initialize_share_group_state(self, request: InitializeShareGroupState) -> bool:
        """Kafka's Persister.initializeState with GroupCoordinatorService's values (the group's
        state epoch, start offset -1): True once every share partition is initialized."""
        pending = {SharePartitionKey(request.group_id, topic_id, p) for topic_id, ps in request.partitions.items() for p in ps}
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(exponential_backoff_ms(attempt - 1, self._backoff_ms, self._backoff_max_ms, self._rng.random()) / 1000)
            by_node: dict[int, list[SharePartitionKey]] = {}
            for key in pending:
                node = await self._coordinator(key)
                if node is not None:
                    by_node.setdefault(node, []).append(key)
            answers = await asyncio.gather(*(self._initialize(node, request.group_id, request.state_epoch, keys) for node, keys in by_node.items()))
            for errors in answers:
                for key, error in errors.items():
                    if error == ErrorCode.none:
                        pending.discard(key)
                    elif error not in RETRIABLE:
                        log.warning("persister.initialize_failed", group=request.group_id, topic_id=str(key.topic_id), partition=key.partition, error=ErrorCode(error).name)
                        return False
            if not pending:
                return True
        log.warning("persister.initialize_gave_up", group=request.group_id, share_partitions=len(pending), attempts=MAX_ATTEMPTS)
        return False

    async def _coordinator(self, key: SharePartitionKey) -> int | None:
        """The node leading the key's ``__share_group_state`` partition, from this node's metadata;
        FindCoordinator (which creates the topic on first need) while the topic is missing."""
        topic = self._metadata.image.topics.get(STATE_TOPIC)
        if topic is not None:
            registration = topic.partitions.get(share_partition_key.partition_for(key, self._num_partitions))
            return None if registration is None or registration.leader == NO_LEADER else registration.leader
        endpoint = self._metadata.alive_broker(self._metadata.node_id, self._listener)
        if endpoint is None:
            return None
        find = FindCoordinatorRequest(key_type=i8(SHARE_KEY_TYPE), coordinator_keys=(key.as_coordinator_key(),))
        try:
            response = await self._network.send((endpoint.host, endpoint.port), find, timeout_ms=self._request_timeout_ms)
        except NetworkError as e:
            log.info("persister.find_coordinator_failed", error=str(e))
            return None
        [coordinator] = response.coordinators
        return int(coordinator.node_id) if coordinator.error_code == ErrorCode.none else None

    async def _initialize(self, node: int, group_id: str, state_epoch: int, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, int]:
        """One InitializeShareGroupState to ``node`` for ``keys``: each key's error (retriable when unsent)."""
        endpoint = self._metadata.alive_broker(node, self._listener)
        if endpoint is None:
            return dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        by_topic: dict[uuid.UUID, list[int]] = {}
        for key in keys:
            by_topic.setdefault(key.topic_id, []).append(key.partition)
        body = InitializeShareGroupStateRequest(
            group_id=group_id,
            topics=tuple(
                InitializeStateData(
                    topic_id=topic_id,
                    partitions=tuple(PartitionData(partition=i32(p), state_epoch=i32(state_epoch), start_offset=i64(UNINITIALIZED_START_OFFSET)) for p in sorted(ps)),
                )
                for topic_id, ps in by_topic.items()
            ),
        )
        try:
            response = await self._network.send((endpoint.host, endpoint.port), body, timeout_ms=self._request_timeout_ms)
        except NetworkError as e:
            log.info("persister.request_failed", coordinator=node, error=str(e))
            return dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        # A share partition the answer leaves out was not initialized; asking again is harmless.
        errors = dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        for topic in response.results:
            for p in topic.partitions:
                key = SharePartitionKey(group_id, topic.topic_id, int(p.partition))
                if key in errors:
                    errors[key] = int(p.error_code)
        return errors
