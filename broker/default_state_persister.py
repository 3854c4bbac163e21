"""DefaultStatePersister: a broker asking share coordinators to keep share-group state.

Kafka 4.4's DefaultStatePersister and PersisterStateManager, in small form: the five share
coordinator calls (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState v1,
DeleteShareGroupState, ReadShareGroupStateSummary v1) that share-partition leaders and the group
coordinator make. The coordinator of each share partition is the leader of its
``__share_group_state`` partition: read from this node's metadata while the topic exists and that
partition has a leader, found with FindCoordinator(SHARE) otherwise, which creates the topic (Kafka's
ShareCoordinatorMetadataCacheHelper and findShareCoordinatorBuilder).

Each share partition is one of Kafka's handlers: it looks its coordinator up, asks, and on
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION
(which a coordinator answers while the topic is not in its metadata yet) or a network failure backs
off (1 s doubling to 30 s, 20% jitter) and looks the coordinator up again, for at most MAX_ATTEMPTS
answers; the last error is the caller's then. Any other error is the caller's at once. Failed
lookups have their own MAX_ATTEMPTS, counted again once a coordinator is found, as Kafka's
findCoordBackoff. As Kafka's RequestCoalescerHelper, the share partitions asked of one coordinator
for one group in one event-loop turn go in one request, whichever call they came from.

As Kafka's persister, every request goes over the network, also to this node's own coordinator:
one path, which is what the other brokers exercise.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kio.schema.delete_share_group_state.v0 import request as delete_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.initialize_share_group_state.v0 import request as initialize_v0
from kio.schema.read_share_group_state.v0 import request as read_v0
from kio.schema.read_share_group_state_summary.v1 import request as summary_v1
from kio.schema.write_share_group_state.v1 import request as write_v1
from kio.static.primitive import i8, i16, i32, i64

from broker.group.share_group_manager import InitializeShareGroupState
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.network_client import NetworkError, RequestTimeoutError, exponential_backoff_ms
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import RecordState
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
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1
# GroupCoordinatorService asks for summaries with the message's default leader epoch.
SUMMARY_LEADER_EPOCH = 0
# The errors on which every handler of Kafka's PersisterStateManager looks again and retries.
RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.network_exception,
        ErrorCode.request_timed_out,
    }
)


class RequestSender(Protocol):
    """NetworkClient.send."""

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class ReadStateResult:
    error: int
    state: SharePartitionStateData | None  # None on error


@dataclass(frozen=True, slots=True)
class StateSummary:
    error: int
    start_offset: int  # -1 when the group has no state for the partition
    state_epoch: int
    leader_epoch: int
    delivery_complete_count: int  # -1 when the coordinator did not give one


@dataclass(frozen=True, slots=True)
class _Api:
    """One of the five requests: its request and per-topic entities (every response has
    ``results``, each with ``topic_id`` and ``partitions`` carrying ``partition`` and ``error_code``)."""

    name: str
    request: type
    topic: type


_INITIALIZE = _Api("initialize", initialize_v0.InitializeShareGroupStateRequest, initialize_v0.InitializeStateData)
_READ = _Api("read", read_v0.ReadShareGroupStateRequest, read_v0.ReadStateData)
_WRITE = _Api("write", write_v1.WriteShareGroupStateRequest, write_v1.WriteStateData)
_DELETE = _Api("delete", delete_v0.DeleteShareGroupStateRequest, delete_v0.DeleteStateData)
_SUMMARY = _Api("read_summary", summary_v1.ReadShareGroupStateSummaryRequest, summary_v1.ReadStateSummaryData)

# (coordinator, api, group id): the share partitions to ask it for in the next request, each
# with its partition entity and the future of its answer (error code, partition result).
_Slot = tuple[int, _Api, str]
_Batch = dict[SharePartitionKey, tuple[Any, "asyncio.Future[tuple[int, Any]]"]]


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
        self._open: dict[_Slot, _Batch] = {}
        self._sending: set[asyncio.Task[None]] = set()

    # -- Kafka's Persister ---------------------------------------------------------------------------

    async def initialize_state(self, group_id: str, state_epoch: int, start_offsets: Mapping[tuple[uuid.UUID, int], int]) -> dict[tuple[uuid.UUID, int], int]:
        """InitializeShareGroupState: each share partition at ``state_epoch`` from its start offset; its error."""
        answers = await self._each(
            _INITIALIZE,
            group_id,
            {tp: initialize_v0.PartitionData(partition=i32(tp[1]), state_epoch=i32(state_epoch), start_offset=i64(offset)) for tp, offset in start_offsets.items()},
        )
        return {tp: error for tp, (error, _) in answers.items()}

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadStateResult:
        """ReadShareGroupState, which fences older leaders: the state a new share-partition leader starts from."""
        tp = (topic_id, partition)
        [(error, result)] = (await self._each(_READ, group_id, {tp: read_v0.PartitionData(partition=i32(partition), leader_epoch=i32(leader_epoch))})).values()
        if error != ErrorCode.none:
            return ReadStateResult(error, None)
        batches = tuple(
            PersisterStateBatch(int(b.first_offset), int(b.last_offset), RecordState(int(b.delivery_state)), int(b.delivery_count)) for b in result.state_batches
        )
        return ReadStateResult(error, SharePartitionStateData(int(result.start_offset), int(result.state_epoch), leader_epoch, batches))

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state: SharePartitionStateData) -> int:
        """WriteShareGroupState v1: the share partition's changed state batches and its delivery-complete count; the error."""
        data = write_v1.PartitionData(
            partition=i32(partition),
            state_epoch=i32(state.state_epoch),
            leader_epoch=i32(state.leader_epoch),
            start_offset=i64(state.start_offset),
            delivery_complete_count=i32(state.delivery_complete_count),
            state_batches=tuple(
                write_v1.StateBatch(first_offset=i64(b.first_offset), last_offset=i64(b.last_offset), delivery_state=i8(int(b.delivery_state)), delivery_count=i16(b.delivery_count))
                for b in state.state_batches
            ),
        )
        [(error, _)] = (await self._each(_WRITE, group_id, {(topic_id, partition): data})).values()
        return error

    async def read_state_summary(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> dict[tuple[uuid.UUID, int], StateSummary]:
        """ReadShareGroupStateSummary v1 (no fencing): where the group is in each share partition."""
        answers = await self._each(
            _SUMMARY,
            group_id,
            {(t, p): summary_v1.PartitionData(partition=i32(p), leader_epoch=i32(SUMMARY_LEADER_EPOCH)) for t, ps in partitions.items() for p in ps},
        )
        return {
            tp: StateSummary(error, -1, -1, -1, UNKNOWN_DELIVERY_COMPLETE_COUNT)
            if error != ErrorCode.none
            else StateSummary(error, int(r.start_offset), int(r.state_epoch), int(r.leader_epoch), int(r.delivery_complete_count))
            for tp, (error, r) in answers.items()
        }

    async def delete_state(self, group_id: str, partitions: Mapping[uuid.UUID, Sequence[int]]) -> dict[tuple[uuid.UUID, int], int]:
        """DeleteShareGroupState: each share partition's error."""
        answers = await self._each(_DELETE, group_id, {(t, p): delete_v0.PartitionData(partition=i32(p)) for t, ps in partitions.items() for p in ps})
        return {tp: error for tp, (error, _) in answers.items()}

    async def initialize_share_group_state(self, request: InitializeShareGroupState) -> bool:
        """Kafka's Persister.initializeState with GroupCoordinatorService's values (the group's
        state epoch, start offset -1): True once every share partition is initialized."""
        start_offsets = {(t, p): UNINITIALIZED_START_OFFSET for t, ps in request.partitions.items() for p in sorted(ps)}
        errors = await self.initialize_state(request.group_id, request.state_epoch, start_offsets)
        return all(error == ErrorCode.none for error in errors.values())

    # -- Kafka's PersisterStateManager -----------------------------------------------------------------

    async def _each(self, api: _Api, group_id: str, partitions: Mapping[tuple[uuid.UUID, int], Any]) -> dict[tuple[uuid.UUID, int], tuple[int, Any]]:
        """Every share partition's handler at once, so that those of one coordinator share requests."""
        answers = await asyncio.gather(*(self._handle(api, SharePartitionKey(group_id, t, p), data) for (t, p), data in partitions.items()))
        return dict(zip(partitions, answers))

    async def _handle(self, api: _Api, key: SharePartitionKey, data: Any) -> tuple[int, Any]:
        """One share partition's call: (error code, the coordinator's partition result or None)."""
        bound = log.bind(rpc=api.name, group=key.group_id, topic_id=str(key.topic_id), partition=key.partition)
        # DefaultStatePersister.validate: Kafka fails the call before anything is sent.
        if not key.group_id or not key.group_id.strip() or key.partition < 0:
            return ErrorCode.invalid_request, None
        lookups = answers = 0
        while True:
            node, error = await self._coordinator(key)
            if node is None:
                lookups += 1
                if error not in RETRIABLE or lookups >= MAX_ATTEMPTS:
                    bound.warning("persister.find_coordinator_failed", error=error, attempts=lookups)
                    return error, None
                await self._back_off(lookups)
                continue
            lookups = 0
            error, result = await self._ask(api, node, key, data)
            answers += 1
            if error == ErrorCode.none:
                return error, result
            if error not in RETRIABLE or answers >= MAX_ATTEMPTS:
                bound.warning("persister.request_failed", coordinator=node, error=error, attempts=answers)
                return error, None
            bound.info("persister.retrying", coordinator=node, error=error, attempts=answers)
            await self._back_off(answers)

    async def _back_off(self, failures: int) -> None:
        # ExponentialBackoffManager.backOff after ``failures`` attempts: 2 s after the first.
        await asyncio.sleep(exponential_backoff_ms(failures, self._backoff_ms, self._backoff_max_ms, self._rng.random()) / 1000)

    async def _coordinator(self, key: SharePartitionKey) -> tuple[int | None, int]:
        """The node leading the key's ``__share_group_state`` partition, from this node's metadata;
        FindCoordinator (which creates the topic on first need) while the metadata names none."""
        topic = self._metadata.image.topics.get(STATE_TOPIC)
        if topic is not None:
            registration = topic.partitions.get(share_partition_key.partition_for(key, self._num_partitions))
            if registration is not None and registration.leader != NO_LEADER:
                return registration.leader, ErrorCode.none
        endpoint = self._metadata.alive_broker(self._metadata.node_id, self._listener)
        if endpoint is None:
            return None, ErrorCode.coordinator_not_available
        find = FindCoordinatorRequest(key_type=i8(SHARE_KEY_TYPE), coordinator_keys=(key.as_coordinator_key(),))
        try:
            response = await self._network.send((endpoint.host, endpoint.port), find, timeout_ms=self._request_timeout_ms)
        except NetworkError as e:
            return None, _network_error(e)
        if len(response.coordinators) != 1:
            return None, ErrorCode.unknown_server_error
        [coordinator] = response.coordinators
        if coordinator.error_code != ErrorCode.none:
            return None, int(coordinator.error_code)
        return int(coordinator.node_id), ErrorCode.none

    def _ask(self, api: _Api, node: int, key: SharePartitionKey, data: Any) -> asyncio.Future[tuple[int, Any]]:
        """The answer for ``key`` from the next request to ``node``: joins the batch of this
        event-loop turn, or opens one (a second entry for a share partition waits for the next, so
        that one request never carries two)."""
        loop = asyncio.get_running_loop()
        slot = (node, api, key.group_id)
        batch = self._open.get(slot)
        if batch is None or key in batch:
            batch = self._open[slot] = {}
            loop.call_soon(self._flush, slot, batch)
        answer: asyncio.Future[tuple[int, Any]] = loop.create_future()
        batch[key] = (data, answer)
        return answer

    def _flush(self, slot: _Slot, batch: _Batch) -> None:
        if self._open.get(slot) is batch:
            del self._open[slot]
        task = asyncio.get_running_loop().create_task(self._send(slot, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, slot: _Slot, batch: _Batch) -> None:
        """One request for the batch; each share partition's answer to its future."""
        node, api, group_id = slot
        answers: dict[SharePartitionKey, tuple[int, Any]] = {}
        try:
            endpoint = self._metadata.alive_broker(node, self._listener)
            if endpoint is None:
                answers = dict.fromkeys(batch, (ErrorCode.coordinator_not_available, None))
                return
            by_topic: dict[uuid.UUID, list[Any]] = {}
            for key, (data, _) in batch.items():
                by_topic.setdefault(key.topic_id, []).append(data)
            body = api.request(group_id=group_id, topics=tuple(api.topic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
            try:
                response = await self._network.send((endpoint.host, endpoint.port), body, timeout_ms=self._request_timeout_ms)
            except NetworkError as e:
                log.info("persister.send_failed", rpc=api.name, coordinator=node, error=str(e))
                answers = dict.fromkeys(batch, (_network_error(e), None))
                return
            results: dict[tuple[uuid.UUID, int], Any] = {}
            for topic in response.results:
                for p in topic.partitions:
                    results.setdefault((topic.topic_id, int(p.partition)), p)
            for key in batch:
                result = results.get((key.topic_id, key.partition))
                # Kafka's handlers fail a share partition the response leaves out (IllegalStateException).
                answers[key] = (ErrorCode.unknown_server_error, None) if result is None else (int(result.error_code), result)
        finally:
            for key, (_, future) in batch.items():
                if not future.done():
                    future.set_result(answers.get(key, (ErrorCode.unknown_server_error, None)))


def _network_error(e: NetworkError) -> int:
    """Kafka's checkResponseError: a timed-out request is REQUEST_TIMED_OUT, any other lost one NETWORK_EXCEPTION."""
    return ErrorCode.request_timed_out if isinstance(e, RequestTimeoutError) else ErrorCode.network_exception
