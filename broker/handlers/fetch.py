"""Fetch: read file regions from the logs, long-poll on appends, answer with sendfile."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict

from kio.schema.errors import ErrorCode

from broker.fetch_session import CachedPartition, FetchSessionCache, SessionContext
from broker.kafka_apis import RequestContext
from broker.metadata_cache import MetadataCache
from broker.network import TransferMetrics
from broker.replica_manager import ReadResult, ReplicaManager
from protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response

TopicPartition = tuple[str, int]


class FetchHandler:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, sessions: FetchSessionCache, metrics: TransferMetrics, max_response_bytes: int) -> None:
        self._rm = replica_manager
        self._metadata = metadata
        self._sessions = sessions
        self._metrics = metrics
        self._max_response_bytes = max_response_bytes

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        version = ctx.version
        image = self._metadata.image
        requested: OrderedDict[TopicPartition, CachedPartition] = OrderedDict()
        unknown_ids: dict[uuid.UUID, list[int]] = {}
        for t in request.topics:
            if version >= 13:
                topic = image.topics_by_id.get(t.topic_id)
                if topic is None:
                    unknown_ids[t.topic_id] = [p.partition for p in t.partitions]
                    continue
                name = topic.name
            else:
                name = t.topic
            for p in t.partitions:
                requested[(name, p.partition)] = CachedPartition(p.fetch_offset, p.partition_max_bytes)
        forgotten: list[TopicPartition] = []
        for f in getattr(request, "forgotten_topics_data", ()):
            if version >= 13:
                topic = image.topics_by_id.get(f.topic_id)
                if topic is None:
                    continue
                name = topic.name
            else:
                name = f.topic
            forgotten.extend((name, p) for p in f.partitions)

        if version >= 7:
            session = self._sessions.new_context(request.session_id, request.session_epoch, requested, forgotten)
        else:
            session = SessionContext(0, 0, requested, incremental=False)
        if session.error:
            return encode_fetch_response(version, ctx.header.correlation_id, [], error_code=session.error)

        isolation = getattr(request, "isolation_level", 0)
        max_bytes = min(request.max_bytes, self._max_response_bytes)
        min_bytes = request.min_bytes
        deadline = time.monotonic() + request.max_wait.total_seconds()
        keys = list(session.partitions)
        while True:
            results = self._read_all(session.partitions, max_bytes, isolation)
            total = sum(r.size for r in results.values())
            done = total >= min_bytes or any(r.error_code for r in results.values()) or not keys
            remaining = deadline - time.monotonic()
            if done or remaining <= 0:
                break
            await self._rm.fetch_purgatory.wait(keys, remaining)
        return encode_fetch_response(
            version,
            ctx.header.correlation_id,
            self._topics(session, results, unknown_ids),
            session_id=session.session_id,
        )

    def _read_all(self, partitions: OrderedDict[TopicPartition, CachedPartition], max_bytes: int, isolation: int) -> dict[TopicPartition, ReadResult]:
        image = self._metadata.image
        budget = max_bytes
        results: dict[TopicPartition, ReadResult] = {}
        for (topic, index), cached in partitions.items():
            limit = min(cached.max_bytes, budget)
            # Until something is in the response, the first batch goes out whole even if it
            # is over the limits, so a consumer can never get stuck behind a large batch.
            min_one = budget == max_bytes
            result = self._rm.read(topic, index, cached.fetch_offset, max(limit, 0), isolation, min_one, image)
            budget -= result.size
            results[(topic, index)] = result
        return results

    def _topics(self, session: SessionContext, results: dict[TopicPartition, ReadResult], unknown_ids: dict[uuid.UUID, list[int]]) -> list[FetchTopicResult]:
        image = self._metadata.image
        by_topic: OrderedDict[str, list[FetchPartitionResult]] = OrderedDict()
        for (topic, index), cached in session.partitions.items():
            result = results[(topic, index)]
            read = result.read
            if read is None:
                part = FetchPartitionResult(index, error_code=result.error_code)
                include = cached.needs_response(-1, -1, -1, False, result.error_code)
            else:
                regions = list(read.info.regions)
                part = FetchPartitionResult(
                    index,
                    high_watermark=read.high_watermark,
                    last_stable_offset=read.last_stable_offset,
                    log_start_offset=read.log_start_offset,
                    aborted_transactions=None,
                    records=regions,  # type: ignore[arg-type]
                )
                include = cached.needs_response(read.high_watermark, read.last_stable_offset, read.log_start_offset, bool(regions), 0)
            if include or not session.incremental:
                by_topic.setdefault(topic, []).append(part)
        topics = []
        for name, parts in by_topic.items():
            topic_image = image.topics.get(name)
            topic_id = topic_image.topic_id if topic_image is not None else uuid.UUID(int=0)
            topics.append(FetchTopicResult(name, topic_id, parts))
        for topic_id, indexes in unknown_ids.items():
            topics.append(FetchTopicResult("", topic_id, [FetchPartitionResult(i, error_code=ErrorCode.unknown_topic_id) for i in indexes]))
        return topics
