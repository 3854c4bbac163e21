"""Produce: validate and append each partition's batches, answer per partition."""

from __future__ import annotations

import dataclasses
import inspect
import struct
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.client_quota_manager import ClientQuotaManager, user_name
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.network import CloseConnection, Throttle
from broker.produce_verification import Entry, ProduceVerifier, Verification, produce_result
from broker.security.standard_acl import AclOperation, ResourceType
from broker.replica_manager import ACKS_ALL, ProduceResult, ReplicaManager, leader_hint, now_ms
from protocol.produce_request import FIRST_TOPIC_ID_VERSION, ProduceRequest
from protocol.produce_response import encode_produce_response
from protocol.record_batch import (
    ATTRIBUTES,
    BATCH_LENGTH,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_MASK,
    InvalidProduceRecords,
    validate_produce_records,
)

VALID_ACKS = (-1, 0, 1)
# The errors Kafka's handleProduceRequest answers with the partition's current leader (KIP-951).
LEADER_HINT_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})
UNKNOWN_TOPIC_ID = ProduceResult(error_code=ErrorCode.unknown_topic_id)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
# Kafka's smallest batch length (a v0 record's overhead): below it its batch iterator throws.
_MIN_BATCH_LENGTH = 14


class ProduceHandler:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        metadata: MetadataCache,
        verifier: ProduceVerifier | None = None,
        auth: AuthHelper | None = None,
        quota: ClientQuotaManager | None = None,
    ) -> None:
        self._quota = quota
        self._rm = replica_manager
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)
        # KIP-890: the transactional batches' partitions checked with (or added by) their coordinator.
        self._verifier = verifier

    def __call__(self, ctx: RequestContext, request: ProduceRequest):  # type: ignore[no-untyped-def]
        if ctx.version >= FIRST_TOPIC_ID_VERSION:
            request = self._resolve_topic_ids(request)
        acks = request.acks
        # Kafka 4.4 refuses transactional records without a transactional id as not authorized,
        # authorizer or not, before anything else; records that are not transactional are not
        # asked about, whatever id the request names. Both refusals fail the whole request, as
        # Kafka's error response does: every partition, a topic ID no topic has included.
        try:
            transactional = _has_transactional_records(request)
        except InvalidProduceRecords as e:
            return self._refuse_all(ctx, request, ProduceResult(error_code=ErrorCode(e.error_code), error_message=str(e)))
        if transactional and (
            request.transactional_id is None or not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        ):
            return self._refuse_all(ctx, request, ProduceResult(error_code=ErrorCode.transactional_id_authorization_failed))
        denied: set[str] = set()
        if self._auth.enabled:
            names = {t.name for t in request.topic_data if t.name is not None}
            denied = names - self._auth.filter_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
        if acks not in VALID_ACKS:
            results = {
                (t.name, p.index): ProduceResult(error_code=ErrorCode.invalid_required_acks)
                for t in request.topic_data
                if t.name is not None
                for p in t.partition_data
            }
        else:
            results = {}
            entries = []
            for t in request.topic_data:
                if t.name is None:
                    continue
                for p in t.partition_data:
                    if t.name in denied:
                        results[(t.name, p.index)] = ProduceResult(error_code=ErrorCode.topic_authorization_failed)
                        continue
                    try:
                        if p.records is not None:
                            validate_produce_records(p.records, ctx.version)
                    except InvalidProduceRecords as e:
                        # Kafka answers the partition with the error alone (PartitionResponse(Errors)).
                        results[(t.name, p.index)] = ProduceResult(error_code=ErrorCode(e.error_code))
                        continue
                    # A view into this request's own frame: offsets and epochs are rewritten in place.
                    entries.append((t.name, p.index, p.records))
            verification = self._verifier.start(request.transactional_id, entries, ctx.version) if self._verifier is not None else None
            if verification is not None:
                if verification.pending is not None:
                    return self._append_verified(ctx, request, results, entries, verification)
                return self._append(ctx, request, results, entries, verification)
            results.update(self._rm.append_records(entries, self._metadata.image, acks))
        return self._answer(ctx, request, results)

    def _resolve_topic_ids(self, request: ProduceRequest) -> ProduceRequest:
        """v13 names topics by ID (KIP-516): each gets its name from the metadata image, None when
        no topic has that ID (the zero UUID included), which answers UNKNOWN_TOPIC_ID as Kafka does."""
        by_id = self._metadata.image.topics_by_id
        resolved = []
        for t in request.topic_data:
            topic = by_id.get(t.topic_id) if t.topic_id is not None else None
            resolved.append(dataclasses.replace(t, name=topic.name if topic is not None else None))
        return dataclasses.replace(request, topic_data=tuple(resolved))

    async def _append_verified(
        self, ctx: RequestContext, request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], entries: list[Entry], verification: Verification
    ) -> Any:
        """The append once the transaction coordinator has verified the partitions."""
        assert verification.pending is not None
        unverified = await verification.pending
        verification.errors.update((tp, produce_result(code, ctx.version)) for tp, code in unverified.items())
        answer = self._append(ctx, request, results, entries, verification)
        return await answer if inspect.isawaitable(answer) else answer

    def _append(
        self, ctx: RequestContext, request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], entries: list[Entry], verification: Verification
    ) -> Any:
        refused = verification.errors
        results.update(refused)
        verified = [e for e in entries if (e[0], e[1]) not in refused] if refused else entries
        results.update(self._rm.append_records(verified, self._metadata.image, request.acks, verification.guards))
        return self._answer(ctx, request, results)

    def _refuse_all(self, ctx: RequestContext, request: ProduceRequest, refusal: ProduceResult) -> Any:
        results = {(t.name, p.index): refusal for t in request.topic_data if t.name is not None for p in t.partition_data}
        return self._answer(ctx, request, results, nameless=refusal)

    def _answer(
        self, ctx: RequestContext, request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], nameless: ProduceResult = UNKNOWN_TOPIC_ID
    ) -> Any:
        acks = request.acks
        if acks == ACKS_ALL:
            waiting = self._rm.pending_replication(results)
            if waiting:
                return self._await_replication(ctx, request, results, waiting)
        if acks == 0:
            throttle_ms = self._throttle_ms(ctx)
            failed = [key for key, r in results.items() if r.error_code != ErrorCode.none]
            failed += [(str(t.topic_id), p.index) for t in request.topic_data if t.name is None for p in t.partition_data]
            if failed:
                # No response can carry the error, so Kafka drops the connection: the
                # client notices, refreshes metadata and stops writing into the void.
                # Its ErrorsPerSec still counts the answer it would have sent (closeConnection).
                _count_errors(ctx, _partition_results(request, results, nameless))
                return _close_after_earlier_responses(f"acks=0 produce failed for {len(failed)} partition(s), first {failed[0]}")
            return [Throttle(throttle_ms)] if throttle_ms else None
        return self._response(ctx, request, results, nameless)

    async def _await_replication(
        self, ctx: RequestContext, request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], waiting: dict[tuple[str, int], int]
    ) -> list[bytes]:
        await self._rm.wait_for_replication(results, waiting, request.timeout_ms)
        return self._response(ctx, request, results)

    def _response(
        self, ctx: RequestContext, request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], nameless: ProduceResult = UNKNOWN_TOPIC_ID
    ) -> list[bytes]:
        image = self._metadata.image
        for (topic, index), result in results.items():
            # Also an answer decided after the append (a leadership lost while acks=all waited):
            # the client moves to the new leader without a metadata round trip, as with Kafka.
            if result.current_leader is None and result.error_code in LEADER_HINT_ERRORS:
                result.current_leader = leader_hint(image, topic, index)
        topics = _partition_results(request, results, nameless)
        _count_errors(ctx, topics)
        endpoints = self._metadata.leader_endpoints((r.current_leader for r in results.values()), ctx.client.listener)
        throttle_ms = self._throttle_ms(ctx)
        response = encode_produce_response(ctx.version, ctx.header.correlation_id, topics, throttle_time_ms=throttle_ms, node_endpoints=endpoints)
        return [response, Throttle(throttle_ms)] if throttle_ms else [response]

    def _throttle_ms(self, ctx: RequestContext) -> int:
        """The request counted against the client's produce quota, as Kafka counts it once answered."""
        quota = self._quota
        if quota is None or not quota.enabled:
            return 0
        return quota.record(user_name(ctx.client.principal), ctx.header.client_id or "", ctx.size, now_ms())


TopicResults = list[tuple[str, uuid.UUID | None, list[tuple[int, ProduceResult]]]]


def _partition_results(request: ProduceRequest, results: dict[tuple[str, int], ProduceResult], nameless: ProduceResult = UNKNOWN_TOPIC_ID) -> TopicResults:
    """Each topic of the request with its partitions' results, in the request's order: the answer.
    A topic ID no topic has gets ``nameless``: UNKNOWN_TOPIC_ID, or the whole request's refusal."""
    return [
        (t.name or "", t.topic_id, [(p.index, results[(t.name, p.index)] if t.name is not None else nameless) for p in t.partition_data])
        for t in request.topic_data
    ]


def _has_transactional_records(request: ProduceRequest) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: is the first whole batch of any partition a
    transactional one of magic 2? Read before the records are validated, with Kafka's batch
    iterator's checks: a first batch whose length is below 14, or whose magic (read once 17 bytes
    are there, whole batch or not) is not 0 to 2, raises CORRUPT_MESSAGE for the whole request,
    unless an earlier partition's first batch was transactional (Kafka stops at the first)."""
    for t in request.topic_data:
        for p in t.partition_data:
            records = p.records
            if records is None or len(records) < LOG_OVERHEAD:
                continue
            (length,) = _I32.unpack_from(records, BATCH_LENGTH)
            if length < _MIN_BATCH_LENGTH:
                raise InvalidProduceRecords(ErrorCode.corrupt_message, f"Record size {length} is less than the minimum record overhead ({_MIN_BATCH_LENGTH})")
            if len(records) <= MAGIC:
                continue
            (magic,) = _I8.unpack_from(records, MAGIC)
            if not 0 <= magic <= 2:
                raise InvalidProduceRecords(ErrorCode.corrupt_message, f"Invalid magic found in record: {magic}")
            if magic == 2 and LOG_OVERHEAD + length <= len(records) and _I16.unpack_from(records, ATTRIBUTES)[0] & TRANSACTIONAL_MASK:
                return True
    return False


def _count_errors(ctx: RequestContext, topics: TopicResults) -> None:
    """ErrorsPerSec: each partition's code once, as Kafka's ProduceResponse.errorCounts()."""
    errors = ctx.errors
    if errors is None:
        return
    for _, _, partitions in topics:
        for _, result in partitions:
            code = result.error_code
            errors[code] = errors.get(code, 0) + 1


async def _close_after_earlier_responses(reason: str) -> None:
    # Raised from the response queue, so answers to earlier requests still go out first.
    raise CloseConnection(reason)
