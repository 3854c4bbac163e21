"""KIP-932's ShareFetch and ShareAcknowledge, answered as Kafka 4.4's KafkaApis
(handleShareFetchRequest, handleShareAcknowledgeRequest) answers them.

Checks in Kafka's order: share.version below 1 UNSUPPORTED_VERSION; no group id INVALID_REQUEST;
READ on the group; the member id; the share session (broker/share/share_session_cache.py), whose
errors answer the whole request. Then per partition: an unknown topic id UNKNOWN_TOPIC_ID, a
topic without READ TOPIC_AUTHORIZATION_FAILED. A ShareFetch's acknowledgements are applied and
persisted before it fetches (broker/share/share_partition_manager.py), each partition answering
its own AcknowledgeErrorCode; a final (-1) request acknowledges, fetches nothing and releases
what the member still holds. A partition this node does not lead is NOT_LEADER_OR_FOLLOWER with
its CurrentLeader and the leaders' NodeEndpoints.

Records go out as Fetch's do: the whole batches covering the acquired offsets (Kafka's
FileRecords slice, compressed batches and read_committed's aborted or control batches included;
AcquiredRecords says which offsets the member holds), as regions of the segment files spliced
into the answer's frame and written with sendfile (copied on TLS listeners); only the batch
headers are read here.

From v2 (gated by the API version, not by share.version): IsRenewAck lets a request carry
acknowledge type 4 (Renew, KIP-1222), which restarts the acquisition locks of the member's
records; elsewhere type 4 is INVALID_REQUEST for its partition. A renewing ShareFetch must set
MaxBytes, MinBytes, MaxRecords and MaxWaitMs to 0 (else INVALID_REQUEST) and fetches nothing.
ShareAcquireMode 1 (record_limit, KIP-1206) makes MaxRecords a hard limit; a mode
Kafka does not know fails the request with UNKNOWN_SERVER_ERROR, as Kafka's ShareAcquireMode.forId
throws, after its acknowledgements were applied.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.group.share_version import share_groups_enabled
from broker.handlers.share_groups import MAX_MEMBER_ID_LENGTH
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import MetadataImage
from broker.metrics.request_errors import count_response
from broker.partition import READ_COMMITTED, READ_UNCOMMITTED
from broker.replica_manager import ReplicaManager, leader_hint
from broker.security.standard_acl import AclOperation, ResourceType
from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.acquired_records import AbortedTransaction, FetchedBatch
from broker.share.share_group_configs import ShareGroupConfigs
from broker.share.share_partition_manager import (
    GroupShareSettings,
    LeaderState,
    LogRead,
    PartitionFetch,
    ShareFetchParams,
    SharePartitionManager,
)
from broker.share.share_session_cache import (
    FINAL_EPOCH,
    ShareFetchContext,
    ShareSessionCache,
    ShareSessionError,
    ShareSessionKey,
    TopicIdPartition,
)
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from protocol.fetch_response import Chunk, SplicedRecords, encode_response_chunks
from storage.fetch_data_info import FileRegion
from storage.log_segment import scan_batches

log = structlog.get_logger(__name__)

# CurrentLeader of a partition answered without a leader error.
_NO_LEADER = (-1, -1)
# ShareFetch v2's ShareAcquireMode (Kafka's ShareAcquireMode ids).
BATCH_OPTIMIZED = 0
RECORD_LIMIT = 1


def _failed(schema: Any, error: int) -> Any:
    """ShareFetchRequest/ShareAcknowledgeRequest.getErrorResponse: the top-level error alone."""
    return build(
        schema, throttle_time=0, error_code=error, error_message=None, acquisition_lock_timeout=datetime.timedelta(0), responses=(), node_endpoints=()
    )


class ReplicaManagerLogReader:
    """SharePartitionManager's view of the logs: consumer reads of the partitions this node leads."""

    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache) -> None:
        self._rm = replica_manager
        self._metadata = metadata

    def leader_state(self, topic: str, partition: int) -> LeaderState | None:
        replica = self._rm.get_partition(topic, partition)
        if replica is None:
            return None
        return LeaderState(replica.leader_epoch, replica.log.log_start_offset, replica.high_watermark)

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        image = self._metadata.image
        result = self._rm.read(topic, partition, fetch_offset, max_bytes, READ_COMMITTED if read_committed else READ_UNCOMMITTED, True, image)
        if result.read is None:
            return LogRead(result.error_code, current_leader=result.current_leader)
        aborted = tuple(AbortedTransaction(pid, first) for pid, first in result.read.aborted_transactions or ())
        return _whole_batches(result.read.info.regions, aborted)


def _whole_batches(regions: Iterable[FileRegion], aborted: tuple[AbortedTransaction, ...]) -> LogRead:
    """A read's regions cut after the last whole batch, with each batch's offsets and end: only
    the batch headers are read (the byte limit may have cut the last batch)."""
    chunks: list[FileRegion] = []
    batches: list[FetchedBatch] = []
    ends: list[int] = []
    size = 0
    for region in regions:
        end = region.position
        for position, h in scan_batches(region.fd, region.position + region.length, region.position):
            end = position + h.size
            size += h.size
            batches.append(FetchedBatch(h.base_offset, h.last_offset, h.producer_id, h.is_transactional, h.is_control))
            ends.append(size)
        if end > region.position:
            chunks.append(region if end == region.position + region.length else FileRegion(region.fd, region.position, end - region.position))
        if end < region.position + region.length:
            break
    return LogRead(chunks=tuple(chunks), batches=tuple(batches), batch_ends=tuple(ends), aborted_transactions=aborted)


class _ShareRequestBase:
    def __init__(
        self,
        manager: SharePartitionManager,
        sessions: ShareSessionCache,
        metadata: MetadataCache,
        auth: AuthHelper | None = None,
        settings: Callable[[str], GroupShareSettings] | None = None,
    ) -> None:
        self._manager = manager
        # A group's share settings: its record lock duration is the answers' AcquisitionLockTimeoutMs.
        self._settings = settings or (lambda group_id: GroupShareSettings())
        self._sessions = sessions
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def _request_error(self, ctx: RequestContext, request: Any) -> ErrorCode | None:
        """The checks that fail a whole request, in KafkaApis' order."""
        if not share_groups_enabled(self._metadata.image.features):
            return ErrorCode.unsupported_version
        if request.group_id is None:
            return ErrorCode.invalid_request
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return ErrorCode.group_authorization_failed
        if not request.member_id or len(request.member_id) > MAX_MEMBER_ID_LENGTH:
            return ErrorCode.invalid_request
        return None

    def _denied_topics(self, ctx: RequestContext, names: set[str]) -> set[str]:
        if not self._auth.enabled or not names:
            return set()
        return names - self._auth.filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)

    async def _acknowledge(
        self,
        ctx: RequestContext,
        group_id: str,
        member_id: str,
        topics: Iterable[Any],
        image: MetadataImage,
        renew: bool = False,
    ) -> dict[TopicIdPartition, int]:
        """KafkaApis.handleAcknowledgements: each partition's acknowledge error."""
        results: dict[TopicIdPartition, int] = {}
        wanted: dict[TopicIdPartition, list[ShareAcknowledgementBatch]] = {}
        named: dict[TopicIdPartition, str] = {}
        for topic in topics:
            topic_image = image.topics_by_id.get(topic.topic_id)
            for p in topic.partitions:
                tip = TopicIdPartition(topic.topic_id, int(p.partition_index))
                if topic_image is None:
                    results[tip] = ErrorCode.unknown_topic_id
                    continue
                named[tip] = topic_image.name
                wanted[tip] = [
                    ShareAcknowledgementBatch(int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
                    for b in p.acknowledgement_batches
                ]
        denied = self._denied_topics(ctx, set(named.values()))
        to_apply: dict[TopicIdPartition, list[ShareAcknowledgementBatch]] = {}
        for tip, batches in wanted.items():
            name = named[tip]
            if name in denied:
                results[tip] = ErrorCode.topic_authorization_failed
            elif not image.has_partition(name, tip.partition):
                results[tip] = ErrorCode.unknown_topic_or_partition
            elif not batches:
                results[tip] = ErrorCode.none
            else:
                to_apply[tip] = batches
        if to_apply:
            results.update(await self._manager.acknowledge(group_id, member_id, to_apply, renew))
            self._manager.metrics.share_acknowledged({tip: named[tip] for tip in to_apply}, results)
        return results

    def _current_leader(self, image: MetadataImage, tip: TopicIdPartition, error: int, hint: tuple[int, int] | None) -> tuple[int, int]:
        if error not in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
            return _NO_LEADER
        if hint is not None:
            return hint
        topic = image.topics_by_id.get(tip.topic_id)
        return (leader_hint(image, topic.name, tip.partition) if topic is not None else None) or _NO_LEADER

    def _node_endpoints(self, schema: Any, ctx: RequestContext, leaders: Iterable[tuple[int, int]]) -> tuple[Any, ...]:
        endpoint_cls = nested(schema, "NodeEndpoint")
        hints = [leader for leader in leaders if leader[0] >= 0]
        return tuple(
            build(endpoint_cls, node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in self._metadata.leader_endpoints(hints, ctx.client.listener)
        )


class ShareFetchHandler(_ShareRequestBase):
    def __call__(self, ctx: RequestContext, request: Any) -> Any | Awaitable[Any]:
        schema = response_schema(ApiKey.SHARE_FETCH, ctx.version)
        error = self._request_error(ctx, request)
        if error is not None:
            return _failed(schema, error)
        renewing = ctx.version >= 2 and request.is_renew_ack
        if renewing and (request.max_bytes or request.min_bytes or request.max_records or request.max_wait):
            # A renewing request only acknowledges: its fetch limits must all be zero.
            return _failed(schema, ErrorCode.invalid_request)
        acknowledging = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
        fetch = [TopicIdPartition(t.topic_id or uuid.UUID(int=0), int(p.partition_index)) for t in request.topics for p in t.partitions]
        forgotten = [TopicIdPartition(t.topic_id or uuid.UUID(int=0), int(p)) for t in request.forgotten_topics_data for p in t.partitions]
        try:
            context = self._sessions.new_context(
                request.group_id, request.member_id, int(request.share_session_epoch), fetch, forgotten, acknowledging, ctx.client.connection_id
            )
        except ShareSessionError as e:
            if e.error_code == ErrorCode.share_session_limit_reached:
                # Kafka's createIdleShareFetchTimerTask: the refusal waits max wait, so that a
                # consumer retrying at once does not spin.
                return self._after(int(request.max_wait.total_seconds() * 1000), _failed(schema, e.error_code))
            return _failed(schema, e.error_code)
        return self._handle(ctx, request, schema, context, acknowledging, renewing, fetching=not (context.final or renewing))

    @staticmethod
    async def _after(delay_ms: int, response: Any) -> Any:
        await asyncio.sleep(max(delay_ms, 0) / 1000)
        return response

    async def _handle(
        self, ctx: RequestContext, request: Any, schema: Any, context: ShareFetchContext, acknowledging: bool, renewing: bool, fetching: bool
    ) -> Any:
        image = self._metadata.image
        group_id, member_id = request.group_id, request.member_id
        # Acknowledged (and persisted) before the fetch, so that what they release can be fetched.
        acks = await self._acknowledge(ctx, group_id, member_id, request.topics, image, renewing) if acknowledging else {}
        acquire_mode = int(request.share_acquire_mode) if ctx.version >= 2 else BATCH_OPTIMIZED
        if fetching and acquire_mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
            return _failed(schema, ErrorCode.unknown_server_error)

        fetched: dict[TopicIdPartition, PartitionFetch] = {}
        readable: list[tuple[TopicIdPartition, str]] = []
        names: dict[TopicIdPartition, str] = {}
        for tip in context.partitions:
            topic = image.topics_by_id.get(tip.topic_id)
            if topic is None:
                fetched[tip] = PartitionFetch(ErrorCode.unknown_topic_id)
            else:
                names[tip] = topic.name
        denied = self._denied_topics(ctx, set(names.values()))
        for tip, name in names.items():
            if name in denied:
                fetched[tip] = PartitionFetch(ErrorCode.topic_authorization_failed)
            elif not image.has_partition(name, tip.partition):
                fetched[tip] = PartitionFetch(ErrorCode.unknown_topic_or_partition)
            else:
                readable.append((tip, name))
        if readable and fetching:
            params = ShareFetchParams(
                max_wait_ms=int(request.max_wait.total_seconds() * 1000),
                min_bytes=int(request.min_bytes),
                max_bytes=int(request.max_bytes),
                max_records=int(request.max_records),
                batch_size=int(request.batch_size),
                record_limit=acquire_mode == RECORD_LIMIT,
            )
            fetched.update(await self._manager.fetch(group_id, member_id, readable, params))
        if context.final:
            session = self._sessions.remove(ShareSessionKey(group_id, member_id))
            if session is not None:
                await self._manager.release_session(group_id, member_id, session.partitions)
        return self._response(ctx, schema, image, context, fetched, acks, self._settings(group_id).partition.record_lock_duration_ms)

    def _response(
        self,
        ctx: RequestContext,
        schema: Any,
        image: MetadataImage,
        context: ShareFetchContext,
        fetched: dict[TopicIdPartition, PartitionFetch],
        acks: dict[TopicIdPartition, int],
        lock_duration_ms: int,
    ) -> list[Chunk]:
        """The answer encoded here, as Fetch's is: its records are spliced in, not copied."""
        topic_cls = nested(schema, "ShareFetchableTopicResponse")
        partition_cls = nested(schema, "PartitionData")
        leader_cls = nested(schema, "LeaderIdAndEpoch")
        acquired_cls = nested(schema, "AcquiredRecords")
        by_topic: dict[uuid.UUID, list[Any]] = {}
        leaders: list[tuple[int, int]] = []
        answered = [tip for tip in context.partitions if tip in fetched and context.answers_for(tip, bool(fetched[tip].records), fetched[tip].error)]
        # Kafka's combined answer: the partitions acknowledged are answered too, fetched or not.
        for tip in dict.fromkeys(answered + list(acks)):
            result = fetched.get(tip, PartitionFetch())
            leader = self._current_leader(image, tip, result.error, result.current_leader)
            if leader != _NO_LEADER:
                leaders.append(leader)
            by_topic.setdefault(tip.topic_id, []).append(
                build(
                    partition_cls,
                    partition_index=tip.partition,
                    error_code=result.error,
                    error_message=None,
                    acknowledge_error_code=acks.get(tip, ErrorCode.none),
                    acknowledge_error_message=None,
                    current_leader=build(leader_cls, leader_id=leader[0], leader_epoch=leader[1]),
                    records=SplicedRecords(result.records),
                    acquired_records=tuple(
                        build(acquired_cls, first_offset=r.first_offset, last_offset=r.last_offset, delivery_count=r.delivery_count) for r in result.acquired
                    ),
                )
            )
        response = build(
            schema,
            throttle_time=0,
            error_code=ErrorCode.none,
            error_message=None,
            acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_duration_ms),
            responses=tuple(build(topic_cls, topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in by_topic.items()),
            node_endpoints=self._node_endpoints(schema, ctx, leaders),
        )
        if ctx.errors is not None:
            # KafkaApis counts the entities handlers return; an answer encoded here counts its own.
            count_response(ctx.errors, ApiKey.SHARE_FETCH, response)
        return encode_response_chunks(ApiKey.SHARE_FETCH, ctx.version, ctx.header.correlation_id, response)


class ShareAcknowledgeHandler(_ShareRequestBase):
    def __call__(self, ctx: RequestContext, request: Any) -> Any | Awaitable[Any]:
        schema = response_schema(ApiKey.SHARE_ACKNOWLEDGE, ctx.version)
        error = self._request_error(ctx, request)
        if error is not None:
            return _failed(schema, error)
        try:
            self._sessions.acknowledge_session_update(request.group_id, request.member_id, int(request.share_session_epoch))
        except ShareSessionError as e:
            return _failed(schema, e.error_code)
        return self._handle(ctx, request, schema)

    async def _handle(self, ctx: RequestContext, request: Any, schema: Any) -> Any:
        image = self._metadata.image
        group_id, member_id = request.group_id, request.member_id
        acks = await self._acknowledge(ctx, group_id, member_id, request.topics, image, ctx.version >= 2 and request.is_renew_ack)
        if request.share_session_epoch == FINAL_EPOCH:
            session = self._sessions.remove(ShareSessionKey(group_id, member_id))
            if session is not None:
                await self._manager.release_session(group_id, member_id, session.partitions)
        topic_cls = nested(schema, "ShareAcknowledgeTopicResponse")
        partition_cls = nested(schema, "PartitionData")
        leader_cls = nested(schema, "LeaderIdAndEpoch")
        by_topic: dict[uuid.UUID, list[Any]] = {}
        leaders: list[tuple[int, int]] = []
        for tip, error in acks.items():
            leader = self._current_leader(image, tip, error, None)
            if leader != _NO_LEADER:
                leaders.append(leader)
            by_topic.setdefault(tip.topic_id, []).append(
                build(partition_cls, partition_index=tip.partition, error_code=error, error_message=None, current_leader=build(leader_cls, leader_id=leader[0], leader_epoch=leader[1]))
            )
        return build(
            schema,
            throttle_time=0,
            error_code=ErrorCode.none,
            error_message=None,
            acquisition_lock_timeout=datetime.timedelta(milliseconds=self._settings(group_id).partition.record_lock_duration_ms),
            responses=tuple(build(topic_cls, topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in by_topic.items()),
            node_endpoints=self._node_endpoints(schema, ctx, leaders),
        )



def group_share_settings(configs: ShareGroupConfigs) -> Callable[[str], GroupShareSettings]:
    """A group's settings for its share partitions, as its configs are at the time of asking."""

    def settings(group_id: str) -> GroupShareSettings:
        return GroupShareSettings(configs.share_partition_config(group_id), configs.share_isolation_level(group_id) == READ_COMMITTED)

    return settings

def release_on_disconnect(sessions: ShareSessionCache, manager: SharePartitionManager) -> Callable[[str], None]:
    """A disconnect listener: the share sessions of a closed connection go, and their members'
    acquired records with them (Kafka's ShareSessionCache listener and onMemberLeave)."""

    def connection_closed(connection_id: str) -> None:
        for session in sessions.connection_closed(connection_id):
            manager.release_in_background(session.key.group_id, session.key.member_id, session.partitions)

    return connection_closed
