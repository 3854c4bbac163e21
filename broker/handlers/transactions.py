"""The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
WriteTxnMarkers, DescribeTransactions and ListTransactions.

AddPartitionsToTxn, AddOffsetsToTxn and EndTxn are answered once the coordinator's write to
``__transaction_state`` is replicated: at once on a one-replica log, else from a coroutine."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import re
import uuid
from typing import Any, Callable, Iterable

import structlog
from kio.schema.errors import ErrorCode

from broker.add_partitions_to_txn_manager import AddPartitionsToTxnManager, TransactionSupportedOperation
from broker.auth_helper import AuthHelper
from broker.group.consumer_group import INTERNAL_TOPICS
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group_coordinator import GROUP_METADATA_TOPIC, CoordinatorNotAvailable, GroupCoordinator, now_ms
from broker.handlers.settled import when_settled
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from broker.transaction.transaction_coordinator import EndTxnResult, TransactionCoordinator
from broker.transaction.transaction_marker_writer import TransactionMarkerWriter
from broker.transaction.transaction_metadata import TV_0, TV_2
from broker.transaction.transaction_state_manager import Settled, settled, then
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from storage.errors import StorageError
from storage.producer_state_manager import SENTINEL_VERIFICATION_GUARD, VerificationGuard

log = structlog.get_logger(__name__)

NO_LEADER_EPOCH = -1
END_TXN_EPOCH_BUMP_VERSION = 5
TXN_OFFSET_COMMIT_ADD_PARTITION_VERSION = 5
# KIP-1319: TxnOffsetCommit names topics by topic ID.
FIRST_TXN_OFFSETS_BY_TOPIC_ID_VERSION = 6
TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_NONE_DENIED: frozenset[str] = frozenset()

# KIP-588: a client older than these versions does not know PRODUCER_FENCED and is told
# INVALID_PRODUCER_EPOCH instead, as Kafka does.
PRODUCER_FENCED_SINCE: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


def client_error(api_key: int, version: int, error: int) -> int:
    if error == ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


def _by_topic(results: Iterable[tuple[TopicPartition, int]]) -> dict[str, list[tuple[int, int]]]:
    grouped: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), code in results:
        grouped.setdefault(topic, []).append((partition, code))
    return grouped


class AddPartitionsToTxnHandler:
    """v0-v3 (clients): one transaction; v4+ (brokers): a batch of transactions, each either
    added or, with verify_only, checked to be in its transaction already."""

    def __init__(self, coordinator: TransactionCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.version)
        topic_cls = nested(schema, "AddPartitionsToTxnTopicResult")
        part_cls = nested(schema, "AddPartitionsToTxnPartitionResult")

        def topic_results(results: dict[TopicPartition, int]) -> tuple[Any, ...]:
            code = lambda c: client_error(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.version, c)  # noqa: E731
            return tuple(
                build(topic_cls, name=topic, results_by_partition=tuple(build(part_cls, partition_index=p, partition_error_code=ErrorCode(code(c))) for p, c in parts))
                for topic, parts in _by_topic(results.items()).items()
            )

        if ctx.version < 4:
            transactional_id = request.v3_and_below_transactional_id
            topics = request.v3_and_below_topics
            denied = _NONE_DENIED
            if self._auth.enabled:
                if not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                    refused = {(t.name, p): ErrorCode.transactional_id_authorization_failed for t in topics for p in t.partitions}
                    return build(schema, throttle_time=0, results_by_topic_v3_and_below=topic_results(refused))
                denied = self._unwritable(ctx, topics)
            added = self._add(transactional_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, False, topics, denied)
            return when_settled(added, lambda results: build(schema, throttle_time=0, results_by_topic_v3_and_below=topic_results(results)))
        # Batches come only from brokers verifying their produce requests: Kafka checks no
        # transactional id or topic in them, the brokers having done so for their clients.
        if not self._auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            return build(schema, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
        result_cls = nested(schema, "AddPartitionsToTxnResult")
        each = [(t.transactional_id, self._add(t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only, t.topics)) for t in request.transactions]

        def answer(done: list[tuple[str, dict[TopicPartition, int]]]) -> Any:
            out = tuple(build(result_cls, transactional_id=t, topic_results=topic_results(results)) for t, results in done)
            return build(schema, throttle_time=0, error_code=0, results_by_transaction=out)

        if any(isinstance(added, asyncio.Future) for _, added in each):
            return self._all_added(each, answer)
        return answer(each)  # type: ignore[arg-type]  # every one settled

    @staticmethod
    async def _all_added(each: list[tuple[str, Settled[dict[TopicPartition, int]]]], answer: Callable[[list[tuple[str, dict[TopicPartition, int]]]], Any]) -> Any:
        return answer([(t, await settled(added)) for t, added in each])

    def _unwritable(self, ctx: RequestContext, topics) -> frozenset[str]:  # type: ignore[no-untyped-def]
        """The topics a client may not add: those it may not write and, as with Kafka, every
        internal one, which only the brokers' own coordinators add."""
        names = {t.name for t in topics}
        return frozenset(names - self._auth.filter_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, names - INTERNAL_TOPICS))

    def _add(  # type: ignore[no-untyped-def]
        self, transactional_id: str, producer_id: int, producer_epoch: int, verify_only: bool, topics, denied: frozenset[str] = _NONE_DENIED
    ) -> Settled[dict[TopicPartition, int]]:
        wanted = [(t.name, p) for t in topics for p in t.partitions]
        image = self._metadata.image
        refused = {tp: ErrorCode.topic_authorization_failed for tp in wanted if tp[0] in denied} if denied else {}
        refused.update((tp, ErrorCode.unknown_topic_or_partition) for tp in wanted if tp not in refused and not image.has_partition(*tp))
        if refused:
            # Kafka adds nothing when one partition is refused or unknown, and says so about the others.
            return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
        if verify_only:
            return self._coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)

        def results(error: int) -> dict[TopicPartition, int]:
            # CONCURRENT_TRANSACTIONS is the usual answer while the last transaction's markers are
            # written, retried by the client every 20 ms or so: at info it filled the log.
            if error:
                (log.debug if error == ErrorCode.concurrent_transactions else log.info)("txn.add_partitions_failed", transactional_id=transactional_id, error=ErrorCode(error).name)
            return {tp: error for tp in wanted}

        return then(self._coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted), results)


class AddOffsetsToTxnHandler:
    """Adds the group's ``__consumer_offsets`` partition to the transaction, so its marker
    settles the offsets TxnOffsetCommit writes."""

    def __init__(self, coordinator: TransactionCoordinator, groups: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._groups = groups
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version)
        if not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return build(schema, throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return build(schema, throttle_time=0, error_code=ErrorCode.group_authorization_failed)
        await self._groups.ensure_offsets_topic()
        partition = (GROUP_METADATA_TOPIC, self._groups.partition_for(request.group_id))
        error = await settled(self._coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch, [partition]))
        return build(schema, throttle_time=0, error_code=client_error(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version, error))


class TxnOffsetCommitHandler:
    """Writes the offsets in the producer's transaction. First (KIP-890) the group's
    ``__consumer_offsets`` partition is verified to be in the transaction (``verify``:
    transaction.partition.verification.enable), or, for v5+ (transaction version 2, whose
    clients send no AddOffsetsToTxn), added to it. v6 (KIP-1319) names topics by topic ID."""

    def __init__(
        self,
        groups: GroupCoordinator,
        txn_partitions: AddPartitionsToTxnManager | None = None,
        *,
        verify: bool = True,
        auth: AuthHelper | None = None,
        metadata: MetadataCache | None = None,
    ) -> None:
        self._groups = groups
        self._txn_partitions = txn_partitions
        self.verify = verify
        self._auth = auth or AuthHelper(None)
        # None: every partition is taken to exist (unit tests without a metadata image).
        self._metadata = metadata

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.TXN_OFFSET_COMMIT, ctx.version)
        by_id = ctx.version >= FIRST_TXN_OFFSETS_BY_TOPIC_ID_VERSION
        if self._auth.enabled:
            # As Kafka, before the partition is verified or added: the transactional id, then the group.
            error = 0
            if not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
                error = ErrorCode.transactional_id_authorization_failed
            elif not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
                error = ErrorCode.group_authorization_failed
            if error:
                # Kafka's getErrorResponse: every requested partition, as the request names it.
                answers = [(_key(t, by_id), p.partition_index, error) for t in request.topics for p in t.partitions]
                return self._response(ctx.version, schema, answers)
        commits, refused, topic_ids = self._commits(ctx, request, by_id)
        if not commits:
            # Nothing for the coordinator (no topics, or all refused): Kafka answers without asking it.
            return self._response(ctx.version, schema, refused)
        if self._txn_partitions is not None and (self.verify or ctx.version >= TXN_OFFSET_COMMIT_ADD_PARTITION_VERSION):
            return self._verified_commit(ctx, request, commits, refused, topic_ids)
        return self._commit(ctx, request, commits, refused, topic_ids)

    def _commits(self, ctx: RequestContext, request, by_id: bool) -> tuple[list[PartitionCommit], list[Answer], dict[str, uuid.UUID]]:  # type: ignore[no-untyped-def]
        """The commits for the coordinator, the partitions answered already (in request order,
        as Kafka's KafkaApis answers them before the coordinator's), and v6's topic IDs by name."""
        image = self._metadata.image if self._metadata is not None else None
        topics: list[tuple[str | None, Any]] = []
        topic_ids: dict[str, uuid.UUID] = {}
        for t in request.topics:
            if not by_id:
                topics.append((t.name, t))
                continue
            known = image.topics_by_id.get(t.topic_id) if image is not None and t.topic_id is not None else None
            if known is not None:
                topic_ids[known.name] = t.topic_id
            topics.append((known.name if known is not None else None, t))
        denied: set[str] = set()
        if self._auth.enabled:
            names = {name for name, _ in topics if name is not None}
            denied = names - self._auth.filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)
        commits: list[PartitionCommit] = []
        refused: list[Answer] = []
        for name, t in topics:
            for p in t.partitions:
                if name is None:
                    # An ID no topic has, the zero UUID included.
                    refused.append((t.topic_id, p.partition_index, ErrorCode.unknown_topic_id))
                elif name in denied:
                    refused.append((_key(t, by_id), p.partition_index, ErrorCode.topic_authorization_failed))
                elif image is not None and not image.has_partition(name, p.partition_index):
                    # Kafka answers a partition its metadata does not have without the coordinator.
                    refused.append((_key(t, by_id), p.partition_index, ErrorCode.unknown_topic_or_partition))
                else:
                    # The topic ID a consumer group checks its members' assignments with, as Kafka's KafkaApis resolves it.
                    known = image.topics.get(name) if image is not None else None
                    topic_id = known.topic_id if known is not None else None
                    commits.append(PartitionCommit(name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), p.committed_metadata, topic_id))
        return commits, refused, topic_ids

    async def _verified_commit(self, ctx: RequestContext, request, commits: list[PartitionCommit], refused: list[Answer], topic_ids: dict[str, uuid.UUID]):  # type: ignore[no-untyped-def]
        assert self._txn_partitions is not None
        partition = (GROUP_METADATA_TOPIC, self._groups.partition_for(request.group_id))
        if ctx.version >= TXN_OFFSET_COMMIT_ADD_PARTITION_VERSION:
            operation = TransactionSupportedOperation.ADD_PARTITION
        elif ctx.version >= 4:
            operation = TransactionSupportedOperation.GENERIC_ERROR
        else:
            operation = TransactionSupportedOperation.DEFAULT_ERROR
        try:
            guard = self._groups.maybe_start_transaction_verification(request.group_id, request.producer_id, request.producer_epoch)
        except StorageError as e:
            guard, error = None, e.error_code
        else:
            # Not this node's partition: Kafka answers without asking the transaction coordinator.
            error = 0 if guard is not None else (self._groups.runtime.coordinator_error(request.group_id) or ErrorCode.not_coordinator)
        if error:
            schema = response_schema(ApiKey.TXN_OFFSET_COMMIT, ctx.version)
            return self._response(ctx.version, schema, refused + _answers(commits, error, topic_ids))
        if guard is not SENTINEL_VERIFICATION_GUARD:
            # As Kafka: the coordinator is asked only when the transaction is not open on the partition yet.
            unverified = await self._txn_partitions.verify_transaction(request.transactional_id, request.producer_id, request.producer_epoch, [partition], operation)
            error = unverified.get(partition, 0)
        if error:
            # Kafka's maybeConvertOffsetCommitError: older clients retry COORDINATOR_LOAD_IN_PROGRESS
            # without looking the coordinator up again, and do not know NETWORK_EXCEPTION here.
            error = ErrorCode.coordinator_load_in_progress if error == ErrorCode.network_exception else error
            log.info("txn.offset_commit_unverified", transactional_id=request.transactional_id, group_id=request.group_id, error=ErrorCode(error).name)
            schema = response_schema(ApiKey.TXN_OFFSET_COMMIT, ctx.version)
            return self._response(ctx.version, schema, refused + _answers(commits, error, topic_ids))
        answer = self._commit(ctx, request, commits, refused, topic_ids, guard)
        return await answer if inspect.isawaitable(answer) else answer

    def _commit(  # type: ignore[no-untyped-def]
        self, ctx: RequestContext, request, commits: list[PartitionCommit], refused: list[Answer], topic_ids: dict[str, uuid.UUID], guard: VerificationGuard | None = None
    ):
        """``refused``: the partitions already answered, which come first as in Kafka's response.
        ``guard``: the verified transaction's KIP-890 guard, which the offsets' batch carries into
        the log, so that a marker written since the verification refuses it (INVALID_TXN_STATE)."""
        schema = response_schema(ApiKey.TXN_OFFSET_COMMIT, ctx.version)
        try:
            shard = self._groups.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._response(ctx.version, schema, refused + _answers(commits, e.error_code, topic_ids))
        answers, records = shard.offsets.txn_commit(
            request.group_id,
            # v6 calls it GenerationIdOrMemberEpoch (kio's v3-v5 entities, GenerationId).
            getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1)),
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            commits,
            now_ms(),
            ctx.version,
        )
        written = self._groups.execute_transactional(request.group_id, request.producer_id, request.producer_epoch, records, guard) if records else 0

        def answer(error: int) -> Any:
            return self._response(ctx.version, schema, refused + [(topic_ids.get(c.topic, c.topic), c.partition, error if code == 0 else code) for c, code in answers])

        return when_settled(written, answer)

    @staticmethod
    def _response(version: int, schema: Any, answers: list[Answer]) -> Any:
        """One response topic per topic key (a name, or from v6 a topic ID), in first-answered order."""
        topic_cls = nested(schema, "TxnOffsetCommitResponseTopic")
        part_cls = nested(schema, "TxnOffsetCommitResponsePartition")
        by_topic: dict[Any, list[Any]] = {}
        for key, partition, code in answers:
            by_topic.setdefault(key, []).append(build(part_cls, partition_index=partition, error_code=client_error(ApiKey.TXN_OFFSET_COMMIT, version, code)))
        field = "topic_id" if version >= FIRST_TXN_OFFSETS_BY_TOPIC_ID_VERSION else "name"
        topics = tuple(build(topic_cls, **{field: key}, partitions=tuple(parts)) for key, parts in by_topic.items())
        return build(schema, throttle_time=0, topics=topics)


# A partition's answer: its topic as the response names it (a name, or from v6 a topic ID), its index, its error.
Answer = tuple[Any, int, int]


def _key(topic: Any, by_id: bool) -> Any:
    return topic.topic_id if by_id else topic.name


def _answers(commits: list[PartitionCommit], error: int, topic_ids: dict[str, uuid.UUID]) -> list[Answer]:
    return [(topic_ids.get(c.topic, c.topic), c.partition, error) for c in commits]


class EndTxnHandler:
    def __init__(self, coordinator: TransactionCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.END_TXN, ctx.version)
        if not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return build(
                schema, throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH
            )

        def answer(result: EndTxnResult) -> Any:
            if result.error_code:
                log.info("txn.end_failed", transactional_id=request.transactional_id, commit=request.committed, error=ErrorCode(result.error_code).name)
            fields: dict[str, Any] = {"error_code": client_error(ApiKey.END_TXN, ctx.version, result.error_code)}
            if ctx.version >= END_TXN_EPOCH_BUMP_VERSION:
                fields.update(producer_id=result.producer_id, producer_epoch=result.producer_epoch)
            return build(schema, throttle_time=0, **fields)

        # KIP-890 part 2: v5 is sent only by clients on transaction version 2, whose every end bumps the epoch.
        version = TV_2 if ctx.version >= END_TXN_EPOCH_BUMP_VERSION else TV_0
        ended = self._coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch, request.committed, version)
        return when_settled(ended, answer)


class WriteTxnMarkersHandler:
    """Writes the markers another node's transaction coordinator sends to the partitions this
    node leads (this node's own coordinator appends its local ones directly). A marker on a
    ``__consumer_offsets`` partition is written by this node's group coordinator, which settles
    the transaction's offsets with it."""

    def __init__(self, markers: TransactionMarkerWriter, auth: AuthHelper | None = None) -> None:
        self._markers = markers
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.WRITE_TXN_MARKERS, ctx.version)
        result_cls = nested(schema, "WritableTxnMarkerResult")
        topic_cls = nested(schema, "WritableTxnMarkerTopicResult")
        part_cls = nested(schema, "WritableTxnMarkerPartitionResult")

        def answer(settled: list[tuple[int, dict[TopicPartition, int]]]) -> Any:
            out: list[Any] = []
            for producer_id, results in settled:
                topics: tuple[Any, ...] = tuple(
                    build(topic_cls, name=topic, partitions=tuple(build(part_cls, partition_index=p, error_code=code) for p, code in parts))
                    for topic, parts in _by_topic(results.items()).items()
                )
                out.append(build(result_cls, producer_id=producer_id, topics=topics))
            return build(schema, markers=tuple(out))

        if self._auth.enabled and not self._may_write_markers(ctx):
            refused = ErrorCode.cluster_authorization_failed
            return answer([(m.producer_id, {(t.name, p): refused for t in m.topics for p in t.partition_indexes}) for m in request.markers])
        written = [
            (
                marker.producer_id,
                self._markers.write_markers(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    marker.transaction_result,
                    [(t.name, p) for t in marker.topics for p in t.partition_indexes],
                    # v2 (KIP-1228): 2 makes the leader refuse an epoch not above the producer's.
                    int(getattr(marker, "transaction_version", 0)),
                ),
            )
            for marker in request.markers
        ]
        if any(isinstance(code, asyncio.Future) for _, results in written for code in results.values()):
            # Answered once every marker is replicated, as Kafka's acks=-1 append of them is.
            return self._answer_replicated(written, answer)
        return answer(written)  # type: ignore[arg-type]

    def _may_write_markers(self, ctx: RequestContext) -> bool:
        # Kafka's order: ALTER on the cluster, whose denial is not logged, then CLUSTER_ACTION.
        return self._auth.authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False) or self._auth.authorize_cluster(
            ctx, AclOperation.CLUSTER_ACTION
        )

    @staticmethod
    async def _answer_replicated(written: list[tuple[int, dict[TopicPartition, Any]]], answer: Callable[[Any], Any]) -> Any:
        return answer([(pid, {tp: await c if isinstance(c, asyncio.Future) else c for tp, c in results.items()}) for pid, results in written])


class DescribeTransactionsHandler:
    def __init__(self, coordinator: TransactionCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_TRANSACTIONS, ctx.version)
        state_cls = nested(schema, "TransactionState")
        topic_cls = nested(schema, "TopicData")
        out: list[Any] = []
        for transactional_id in request.transactional_ids:
            if self._auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                error, metadata = self._coordinator.describe(transactional_id)
            else:
                error, metadata = ErrorCode.transactional_id_authorization_failed, None
            if metadata is None:
                # Kafka leaves every other field at its default (0, "").
                out.append(
                    build(
                        state_cls,
                        error_code=error,
                        transactional_id=transactional_id,
                        transaction_state="",
                        transaction_timeout=datetime.timedelta(0),
                        transaction_start_time=_datetime(0),
                        producer_id=0,
                        producer_epoch=0,
                        topics=(),
                    )
                )
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(metadata.topic_partitions):
                by_topic.setdefault(topic, []).append(partition)
            if self._auth.enabled:
                # Only the partitions of topics the principal may describe are told.
                allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
                by_topic = {t: p for t, p in by_topic.items() if t in allowed}
            out.append(
                build(
                    state_cls,
                    error_code=0,
                    transactional_id=transactional_id,
                    transaction_state=metadata.state.display_name,
                    transaction_timeout=datetime.timedelta(milliseconds=metadata.txn_timeout_ms),
                    transaction_start_time=_datetime(metadata.txn_start_timestamp),
                    producer_id=metadata.producer_id,
                    producer_epoch=metadata.producer_epoch,
                    topics=tuple(build(topic_cls, topic=t, partitions=tuple(p)) for t, p in by_topic.items()),
                )
            )
        return build(schema, throttle_time=0, transaction_states=tuple(out))


def _datetime(ms: int) -> datetime.datetime:
    # Kafka's -1 (no transaction started) is written as is: the datetime one millisecond before the epoch.
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


class ListTransactionsHandler:
    def __init__(self, coordinator: TransactionCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LIST_TRANSACTIONS, ctx.version)
        state_cls = nested(schema, "TransactionState")
        # v2 (KIP-1152): only the ids the whole of this regular expression matches; none or "" for all.
        pattern = getattr(request, "transactional_id_pattern", None)
        regex = None
        if pattern:
            try:
                regex = re.compile(pattern)
            except re.error as e:
                # As Kafka: the error alone, no listing and no unknown states.
                log.info("txn.list_invalid_pattern", pattern=pattern, error=str(e))
                return build(schema, throttle_time=0, error_code=ErrorCode.invalid_regular_expression, unknown_state_filters=(), transaction_states=())
        error, unknown, listed = self._coordinator.list_transactions(request.state_filters, request.producer_id_filters, getattr(request, "duration_filter", -1))
        if regex is not None:
            listed = [t for t in listed if regex.fullmatch(t.transactional_id)]
        if self._auth.enabled:
            # Only the transactional ids the principal may describe are listed. Kafka logs each
            # denial here, unlike ListGroups.
            allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (t.transactional_id for t in listed))
            listed = [t for t in listed if t.transactional_id in allowed]
        states: tuple[Any, ...] = tuple(build(state_cls, transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state) for t in listed)
        return build(schema, throttle_time=0, error_code=error, unknown_state_filters=tuple(unknown), transaction_states=states)
