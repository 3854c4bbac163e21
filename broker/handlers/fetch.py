"""Fetch: read file regions from the logs, long-poll on appends, answer with sendfile."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.client_quota_manager import ClientQuotaManager, user_name
from broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, CachedPartition, FetchSessionCache, SessionContext
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import MetadataImage
from broker.metrics.request_errors import ErrorCounts, add as add_error
from broker.network import Throttle, TransferMetrics
from broker.replica_manager import ReadResult, ReplicaManager, now_ms
from broker.replication_quota_manager import ReplicationQuotaManager
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.fetch_request import FetchRequest
from protocol.fetch_response import (
    Chunk,
    FetchPartitionResult,
    FetchTopicResult,
    encode_fetch_response,
)
from storage.fetch_data_info import FetchDataInfo, FileRegion
from storage.log_segment import whole_batches

TopicPartition = tuple[str, int]
# A Fetch v13+ topic the client gave the all-zero id (Kafka's Uuid.ZERO_UUID): unknown, answered under that id.
ZERO_TOPIC_ID = uuid.UUID(int=0)
FIRST_RACK_AWARE_VERSION = 11
_NONE_DENIED: frozenset[str] = frozenset()
# A partition read that failed rather than was refused: FailedFetchRequestsPerSec.
STORAGE_ERRORS = frozenset({ErrorCode.kafka_storage_error, ErrorCode.unknown_server_error, ErrorCode.corrupt_message})


class FetchHandler:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        metadata: MetadataCache,
        sessions: FetchSessionCache,
        metrics: TransferMetrics,
        max_response_bytes: int,
        leader_quota: ReplicationQuotaManager | None = None,
        auth: AuthHelper | None = None,
        quota: ClientQuotaManager | None = None,
    ) -> None:
        self._auth = auth or AuthHelper(None)
        self._quota = quota
        self._rm = replica_manager
        self._metadata = metadata
        self._sessions = sessions
        self._metrics = metrics
        self._max_response_bytes = max_response_bytes
        self._leader_quota = leader_quota

    def __call__(
        self, ctx: RequestContext, request: FetchRequest
    ) -> list[Chunk] | Awaitable[list[Chunk]]:
        """The response at once when the first read settles the fetch, else a coroutine that long-polls.

        Most consumer fetches find data waiting; answering them without a coroutine spares a
        task, its scheduling and two coroutine frames per request.
        """
        version = ctx.version
        image = self._metadata.image
        requested: OrderedDict[TopicPartition, CachedPartition] = OrderedDict()
        unknown_ids: dict[uuid.UUID, list[int]] = {}
        for t in request.topics:
            if version >= 13:
                topic = image.topics_by_id.get(t.topic_id)
                if topic is None:
                    # The all-zero id reads as None; the answer names it as the client did.
                    unknown_ids[t.topic_id or ZERO_TOPIC_ID] = [p.partition for p in t.partitions]
                    continue
                name = topic.name
            else:
                name = t.topic
            for p in t.partitions:
                requested[(name, p.partition)] = CachedPartition(
                    p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset
                )
        forgotten: list[TopicPartition] = []
        for f in request.forgotten_topics_data:
            if version >= 13:
                topic = image.topics_by_id.get(f.topic_id)
                if topic is None:
                    continue
                name = topic.name
            else:
                name = f.topic
            forgotten.extend((name, p) for p in f.partitions)

        if version >= 7:
            epoch = request.session_epoch
            if unknown_ids and epoch == INITIAL_EPOCH:
                # A session keeps partitions by name: one naming topics this broker cannot name
                # yet is not opened, and the fetcher tries a full fetch again.
                epoch = FINAL_EPOCH
            session = self._sessions.new_context(request.session_id, epoch, requested, forgotten, request.replica_id >= 0, now_ms())
        else:
            session = SessionContext(0, 0, requested, incremental=False)
        if session.error:
            if ctx.errors is not None:
                add_error(ctx.errors, session.error)
            return encode_fetch_response(
                version, ctx.header.correlation_id, [], error_code=session.error
            )

        reader = _Reader(
            self._rm,
            self._leader_quota,
            request.isolation_level,
            request.replica_id,
            request.replica_epoch,
            # KIP-392: from v11 a consumer may be served by, or sent to, a follower.
            request.rack_id if version >= FIRST_RACK_AWARE_VERSION else None,
            self._denied(ctx, session.partitions, request.replica_id) if self._auth.enabled else _NONE_DENIED,
        )
        # A follower may fetch past what one response to a consumer holds: replica.fetch.response.max.bytes is its own limit.
        max_bytes = request.max_bytes if reader.is_follower else min(request.max_bytes, self._max_response_bytes)
        quota = self._quota if not reader.is_follower and self._quota is not None and self._quota.enabled else None
        if quota is not None:
            # Kafka's getMaxValueInQuotaWindow: no single answer larger than the quota lets through in a window.
            window = quota.max_value_in_window(user_name(ctx.client.principal), ctx.header.client_id or "")
            if window is not None:
                max_bytes = min(max_bytes, int(window))
        max_wait = request.max_wait_ms / 1000
        deadline = time.monotonic() + max_wait
        results, done = self._read_all(
            session.partitions, max_bytes, reader, request.min_bytes
        )
        if done or max_wait <= 0:
            return self._respond(ctx, session, results, unknown_ids, reader)
        return self._long_poll(
            ctx, session, unknown_ids, max_bytes, reader, request.min_bytes, deadline
        )

    async def _long_poll(
        self,
        ctx: RequestContext,
        session: SessionContext,
        unknown_ids: dict[uuid.UUID, list[int]],
        max_bytes: int,
        reader: _Reader,
        min_bytes: int,
        deadline: float,
    ) -> list[Chunk]:
        """Kafka's DelayedFetch: re-read whenever a partition is appended to, until min_bytes or the deadline.

        Every answer comes from a read made right before it, never from one older than an
        await (the coroutine may first run after its deadline).
        """
        keys = list(session.partitions)
        reader.update_fetch_state = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining > 0:
                await self._rm.fetch_purgatory.wait(keys, remaining)
            results, done = self._read_all(
                session.partitions, max_bytes, reader, min_bytes
            )
            if done or deadline <= time.monotonic():
                return self._respond(ctx, session, results, unknown_ids, reader)

    def _denied(self, ctx: RequestContext, partitions: OrderedDict[TopicPartition, CachedPartition], replica_id: int) -> frozenset[str]:
        """The topics of this fetch (its session's included) answered TOPIC_AUTHORIZATION_FAILED:
        a follower needs CLUSTER_ACTION, a consumer READ on each topic (Kafka's handleFetchRequest)."""
        names = {topic for topic, _ in partitions}
        if replica_id >= 0:
            return frozenset() if self._auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else frozenset(names)
        return frozenset(names - self._auth.filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names))

    def _respond(
        self,
        ctx: RequestContext,
        session: SessionContext,
        results: dict[TopicPartition, ReadResult],
        unknown_ids: dict[uuid.UUID, list[int]],
        reader: _Reader,
    ) -> list[Chunk]:
        errors = ctx.errors
        if errors is not None:
            # The answer's top-level code, NONE here; its partitions' are added by _topics.
            add_error(errors, ErrorCode.none)
        if not reader.is_follower and self._quota is not None and self._quota.enabled:
            throttle_ms = self._consumer_throttle_ms(ctx, results)
            if throttle_ms:
                # Kafka's getThrottledResponse: nothing this time, and the client waits.
                return [*encode_fetch_response(ctx.version, ctx.header.correlation_id, [], throttle_time_ms=throttle_ms, session_id=session.session_id), Throttle(throttle_ms)]
        quota = self._leader_quota
        if reader.is_follower and quota is not None:
            # Kafka's sizeOfThrottledPartitions: what a throttled partition sends counts whether
            # or not its follower is in sync; only out-of-sync ones are held back.
            quota.record(sum(r.size for key, r in results.items() if quota.is_throttled(*key)))
        return encode_fetch_response(
            ctx.version,
            ctx.header.correlation_id,
            self._topics(session, results, unknown_ids, reader.is_follower, errors),
            session_id=session.session_id,
            node_endpoints=self._metadata.leader_endpoints((r.current_leader for r in results.values()), ctx.client.listener),
        )

    def _consumer_throttle_ms(self, ctx: RequestContext, results: dict[TopicPartition, ReadResult]) -> int:
        """The answer's bytes counted against the client's fetch quota; a throttled answer is sent
        empty, so what it would have held is taken back off the rate, as Kafka does."""
        assert self._quota is not None
        user, client_id, now = user_name(ctx.client.principal), ctx.header.client_id or "", now_ms()
        size = sum(r.size for r in results.values())
        throttle_ms = self._quota.record(user, client_id, size, now)
        if throttle_ms:
            self._quota.unrecord(user, client_id, size, now)
        return throttle_ms

    def _read_all(
        self,
        partitions: OrderedDict[TopicPartition, CachedPartition],
        max_bytes: int,
        reader: _Reader,
        min_bytes: int,
    ) -> tuple[dict[TopicPartition, ReadResult], bool]:
        """Read every partition; True when the fetch can be answered now (min_bytes met, an error, or nothing to read)."""
        image = self._metadata.image
        budget = max_bytes
        results: dict[TopicPartition, ReadResult] = {}
        failed = False
        for key, cached in partitions.items():
            limit = min(cached.max_bytes, budget)
            # Until something is in the response, the first batch goes out whole even if it
            # is over the limits, so a consumer can never get stuck behind a large batch.
            min_one = budget == max_bytes
            result = reader.read(key, cached, max(limit, 0), min_one, image)
            # Bytes as the log handed them, a cut last batch included, as Kafka counts them
            # against max_bytes and min_bytes; _topics drops the cut part from the response.
            budget -= result.size
            failed = failed or result.error_code != 0
            results[key] = result
        return results, max_bytes - budget >= min_bytes or failed or not partitions

    def _topics(
        self,
        session: SessionContext,
        results: dict[TopicPartition, ReadResult],
        unknown_ids: dict[uuid.UUID, list[int]],
        follower: bool = False,
        errors: ErrorCounts | None = None,
    ) -> list[FetchTopicResult]:
        """The answer's topics; each partition in it adds its code to ``errors`` (ErrorsPerSec), as
        Kafka's FetchResponse.errorCounts() counts the partitions of the answer, not of the session.
        A read partition's code is NONE: those are counted per topic, not one by one."""
        image = self._metadata.image
        stats = self._rm.topic_stats  # BrokerTopicMetrics: per partition read, and the record bytes sent
        by_topic: OrderedDict[str, list[FetchPartitionResult]] = OrderedDict()
        with_records: list[TopicPartition] = []
        # Answered partitions without a read (an error): counted one by one, the rest as NONE at the end.
        unread = 0
        for (topic, index), cached in session.partitions.items():
            result = results[(topic, index)]
            read = result.read
            metrics = stats.topic(topic)
            metrics.total_fetch_requests += 1
            if read is None:
                if result.error_code in STORAGE_ERRORS:
                    metrics.failed_fetch_requests += 1
                part = FetchPartitionResult(index, error_code=result.error_code, current_leader=result.current_leader)
                include = cached.needs_response(-1, -1, -1, False, result.error_code)
                if errors is not None and (include or not session.incremental):
                    add_error(errors, result.error_code)
                    unread += 1
            else:
                # The byte limit may have cut the last batch; clients drop such a tail (and
                # a cut first batch is no record at all, Kafka's firstEntryIncomplete answer),
                # so it would only cost both sides the bytes and the fetch that repeats them.
                regions: list[Chunk] = [
                    region
                    for region in map(_without_cut_tail, read.info.regions)
                    if region.length
                ]
                part = FetchPartitionResult(
                    index,
                    high_watermark=read.high_watermark,
                    last_stable_offset=read.last_stable_offset,
                    log_start_offset=read.log_start_offset,
                    aborted_transactions=read.aborted_transactions,
                    records=regions,
                    diverging_epoch=read.diverging_epoch,
                    preferred_read_replica=read.preferred_read_replica,
                )
                # A redirect to another replica is news even with nothing else changed, as in Kafka.
                include = read.preferred_read_replica >= 0 or cached.needs_response(
                    read.high_watermark,
                    read.last_stable_offset,
                    read.log_start_offset,
                    bool(regions),
                    0,
                    read.diverging_epoch is not None,
                )
                if regions:
                    with_records.append((topic, index))
                    sent = sum(region.length for region in regions)
                    if follower:
                        metrics.replication_bytes_out += sent
                    else:
                        metrics.bytes_out += sent
            if include or not session.incremental:
                by_topic.setdefault(topic, []).append(part)
        if errors is not None:
            read_ok = -unread
            for parts in by_topic.values():
                read_ok += len(parts)
            if read_ok:
                errors[ErrorCode.none] = errors.get(ErrorCode.none, 0) + read_ok
        if session.incremental:
            # Kafka's rotation: partitions that just sent data go last, so that under
            # replica.fetch.response.max.bytes the others get their turn first next time.
            for key in with_records:
                session.partitions.move_to_end(key)
        topics = []
        for name, parts in by_topic.items():
            topic_image = image.topics.get(name)
            topic_id = (
                topic_image.topic_id if topic_image is not None else uuid.UUID(int=0)
            )
            topics.append(FetchTopicResult(name, topic_id, parts))
        for topic_id, indexes in unknown_ids.items():
            if errors is not None:
                errors[ErrorCode.unknown_topic_id] = errors.get(ErrorCode.unknown_topic_id, 0) + len(indexes)
            topics.append(
                FetchTopicResult(
                    "",
                    topic_id,
                    [
                        FetchPartitionResult(i, error_code=ErrorCode.unknown_topic_id)
                        for i in indexes
                    ],
                )
            )
        return topics


class _Reader:
    """One partition's read for this request: a consumer's up to the high watermark (or the last
    stable offset), a follower's (replica id >= 0) up to the log end with the divergence check."""

    __slots__ = ("_rm", "_leader_quota", "_isolation", "_replica_id", "_replica_epoch", "_client_rack", "_denied", "update_fetch_state")

    def __init__(
        self,
        rm: ReplicaManager,
        leader_quota: ReplicationQuotaManager | None,
        isolation: int,
        replica_id: int,
        replica_epoch: int,
        client_rack: str | None,
        denied: frozenset[str],
    ) -> None:
        self._rm = rm
        self._denied = denied
        self._leader_quota = leader_quota
        self._client_rack = client_rack
        self._isolation = isolation
        self._replica_id = replica_id
        self._replica_epoch = replica_epoch
        # The first read of a follower's fetch is the follower fetching; a long poll's re-reads are not.
        self.update_fetch_state = True

    @property
    def is_follower(self) -> bool:
        return self._replica_id >= 0

    def read(self, key: TopicPartition, cached: CachedPartition, max_bytes: int, min_one: bool, image: MetadataImage) -> ReadResult:
        if self._denied and key[0] in self._denied:
            return ReadResult(ErrorCode.topic_authorization_failed)
        if self._replica_id < 0:
            return self._rm.read(
                key[0], key[1], cached.fetch_offset, max_bytes, self._isolation, min_one, image, cached.current_leader_epoch, self._client_rack
            )
        result = self._rm.read_for_follower(
            self._replica_id,
            self._replica_epoch,
            key[0],
            key[1],
            cached.fetch_offset,
            cached.last_fetched_epoch,
            cached.fetcher_log_start_offset,
            cached.current_leader_epoch,
            max_bytes,
            image,
            self.update_fetch_state,
        )
        if result.read is not None and result.read.info.regions and self._throttled(key):
            # Kafka's shouldLeaderThrottle: the read still counted (the follower's position,
            # the high watermark), only its records stay behind.
            result.read.info = FetchDataInfo(result.read.info.fetch_offset)
        return result

    def _throttled(self, key: TopicPartition) -> bool:
        quota = self._leader_quota
        if quota is None:
            return False
        partition = self._rm.get_partition(*key)
        return partition is not None and quota.should_throttle(key[0], key[1], self._replica_id in partition.isr)


# A region holding more batches than this is left as read: its cut tail is a small share of it,
# and walking every batch header of a region of small batches would cost more than it saves.
_TRIM_SCAN_BATCHES = 32


def _without_cut_tail(region: FileRegion) -> FileRegion:
    return whole_batches(region, _TRIM_SCAN_BATCHES)
