"""The consumer group APIs: FindCoordinator, the classic join protocol, offsets and group admin."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.group.consumer_group import DescribedConsumerGroup
from broker.group.group_metadata_manager import (
    CoordinatorResult,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupResponse,
)
from broker.group.group_version import consumer_protocol_enabled
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group_coordinator import (
    GROUP_METADATA_TOPIC,
    CoordinatorNotAvailable,
    Written,
    GroupCoordinator,
    now_ms,
    topic_partition_counts,
)
from broker.handlers.metadata import AUTHORIZED_OPERATIONS_UNKNOWN
from broker.handlers.settled import when_settled
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import NO_LEADER
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from broker.share_coordinator.config import STATE_TOPIC
from broker.share_coordinator.share_coordinator_service import ShareCoordinatorService
from broker.share_coordinator.share_partition_key import parse_share_partition_key
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

log = structlog.get_logger(__name__)

# How long FindCoordinator waits for its partition to load before answering COORDINATOR_LOAD_IN_PROGRESS.
LOAD_WAIT_S = 0.5
# How often a held stable OffsetFetch looks again at the broker's session and the group's pending writes.
STABLE_POLL_S = 0.01
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
# FindCoordinator's first version with key type SHARE (KIP-932); Kafka answers older ones INVALID_REQUEST.
SHARE_KEY_MIN_VERSION = 6
NO_LEADER_EPOCH = -1
_NONE_DENIED: frozenset[str] = frozenset()
# Kafka's answer to a ConsumerGroupDescribe whose group has a topic the client may not describe.
HIDDEN_TOPICS_MESSAGE = "The group has described topic(s) that the client is not authorized to describe."


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def split_by_topic_authorization(
    auth: AuthHelper, ctx: RequestContext, operation: int, commits: list[PartitionCommit]
) -> tuple[list[tuple[PartitionCommit, int]], list[PartitionCommit]]:
    """The commits to topics the principal may not ``operation``, answered TOPIC_AUTHORIZATION_FAILED,
    and the others."""
    names = {c.topic for c in commits}
    denied = names - auth.filter_authorized(ctx, operation, ResourceType.TOPIC, names)
    if not denied:
        return [], commits
    return [(c, ErrorCode.topic_authorization_failed) for c in commits if c.topic in denied], [c for c in commits if c.topic not in denied]


async def _when_all_written(codes: dict[str, Written], answer: Callable[[dict[str, int]], Any]) -> Any:
    return answer({key: await code if isinstance(code, asyncio.Future) else code for key, code in codes.items()})


def coordinator_endpoint(metadata: MetadataCache, topic: str, partition: int, listener: str | None = None) -> tuple[int, BrokerEndpoint | None]:
    """Kafka's FindCoordinator answer: the leader of the coordinator partition, at its endpoint
    on the listener clients use, wherever it is; COORDINATOR_NOT_AVAILABLE while the topic is
    missing, the partition has no leader, or its leader is not a live broker. Whether the leader
    has loaded the partition yet is for the coordinator's own APIs to say."""
    t = metadata.image.topics.get(topic)
    registration = t.partitions.get(partition) if t is not None else None
    if registration is None or registration.leader == NO_LEADER:
        return ErrorCode.coordinator_not_available, None
    endpoint = metadata.alive_broker(registration.leader, listener)
    if endpoint is None:
        return ErrorCode.coordinator_not_available, None
    return 0, endpoint


class FindCoordinatorHandler:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        metadata: MetadataCache,
        transactions: TransactionStateManager,
        share_coordinator: ShareCoordinatorService,
        auth: AuthHelper | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._transactions = transactions
        self._share_coordinator = share_coordinator
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
        keys = list(request.coordinator_keys) if ctx.version >= 4 else [request.key]
        refused = self._refused(ctx, key_type, keys) if self._auth.enabled else {}
        if key_type == SHARE_KEY_TYPE:
            # As Kafka's getCoordinator: an old version or a key that is no "group:topicId:partition" is INVALID_REQUEST.
            if ctx.version < SHARE_KEY_MIN_VERSION:
                refused = dict.fromkeys(keys, ErrorCode.invalid_request)
            else:
                refused = {**{key: ErrorCode.invalid_request for key in keys if parse_share_partition_key(key) is None}, **refused}
        wanted = [key for key in keys if key not in refused] if refused else keys
        # As Kafka's getCoordinator: a refused key is answered before its coordinator is looked
        # up, so no coordinator topic is created or partition waited for on its behalf.
        if wanted or not refused:
            await self._prepare(key_type, wanted)
        answers = [_no_coordinator(refused[key]) if key in refused else self._find(key_type, key, ctx.client.listener) for key in keys]
        schema = response_schema(ApiKey.FIND_COORDINATOR, ctx.version)
        if ctx.version >= 4:
            coordinator_cls = nested(schema, "Coordinator")
            return build(schema, throttle_time=0, coordinators=tuple(build(coordinator_cls, key=key, **answer) for key, answer in zip(keys, answers, strict=True)))
        return build(schema, throttle_time=0, **answers[0])

    async def _prepare(self, key_type: int, keys: list[str]) -> None:
        # A partition this node is loading gets a moment: a fresh or small one is ready at once,
        # so the client's next request is not sent away with COORDINATOR_LOAD_IN_PROGRESS.
        if key_type == GROUP_KEY_TYPE:
            await self._coordinator.ensure_offsets_topic()
            for key in keys:
                await self._coordinator.wait_loaded(key, LOAD_WAIT_S)
        elif key_type == TRANSACTION_KEY_TYPE:
            await self._transactions.ensure_topic()
            for key in keys:
                await self._transactions.wait_loaded(key, LOAD_WAIT_S)
        elif key_type == SHARE_KEY_TYPE:
            await self._share_coordinator.ensure_topic()
            for key in keys:
                parsed = parse_share_partition_key(key)
                assert parsed is not None, "an invalid key was refused"
                await self._share_coordinator.wait_loaded(parsed, LOAD_WAIT_S)

    def _refused(self, ctx: RequestContext, key_type: int, keys: list[str]) -> dict[str, int]:
        """The keys the principal may not describe, with Kafka's error for each."""
        if key_type == GROUP_KEY_TYPE:
            resource_type, error = ResourceType.GROUP, ErrorCode.group_authorization_failed
        elif key_type == TRANSACTION_KEY_TYPE:
            resource_type, error = ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed
        elif key_type == SHARE_KEY_TYPE:
            # Only brokers (share partition leaders) look up share coordinators: Kafka fails the
            # whole request when the principal may not CLUSTER_ACTION, which refuses every key.
            if self._auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
                return {}
            return {key: ErrorCode.cluster_authorization_failed for key in keys}
        else:
            return {}
        return {key: error for key in keys if not self._auth.authorize(ctx, AclOperation.DESCRIBE, resource_type, key)}

    def _find(self, key_type: int, key: str, listener: str) -> dict[str, Any]:
        if key_type == GROUP_KEY_TYPE:
            error, endpoint = coordinator_endpoint(self._metadata, GROUP_METADATA_TOPIC, self._coordinator.partition_for(key), listener)
        elif key_type == TRANSACTION_KEY_TYPE and key:
            error, endpoint = coordinator_endpoint(self._metadata, TRANSACTION_STATE_TOPIC, self._transactions.partition_for(key), listener)
        elif key_type == SHARE_KEY_TYPE:
            parsed = parse_share_partition_key(key)
            assert parsed is not None, "an invalid key was refused"
            error, endpoint = coordinator_endpoint(self._metadata, STATE_TOPIC, self._share_coordinator.partition_for(parsed), listener)
        else:
            error, endpoint = ErrorCode.invalid_request, None
        if endpoint is None:
            return _no_coordinator(error)
        return {"error_code": 0, "error_message": None, "node_id": endpoint.node_id, "host": endpoint.host, "port": endpoint.port}


def _no_coordinator(error: int) -> dict[str, Any]:
    return {"error_code": error, "error_message": ErrorCode(error).name, "node_id": -1, "host": "", "port": -1}


class JoinGroupHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return self._response(ctx.version, JoinGroupResponse(ErrorCode.group_authorization_failed))
        session_timeout = _ms(request.session_timeout)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._response(ctx.version, JoinGroupResponse(e.error_code, member_id=request.member_id))
        join = JoinGroupRequest(
            group_id=request.group_id,
            session_timeout_ms=session_timeout,
            # v0 has no rebalance timeout: Kafka uses the session timeout for both.
            rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", session_timeout)),
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client.address.split(":")[0],
            require_known_member_id=ctx.version >= 4,
            supports_skip_assignment=ctx.version >= 9,
        )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        before = shard.snapshot([request.group_id])
        self._coordinator.execute(request.group_id, shard.groups.join_group(join, future, now_ms()), before)
        try:
            response = await future
        except CoordinatorNotAvailable as e:
            response = JoinGroupResponse(e.error_code, member_id=request.member_id)
        log.info(
            "group.join",
            group=request.group_id,
            member=response.member_id,
            client=ctx.header.client_id,
            error=ErrorCode(response.error_code).name,
            generation=response.generation_id,
            leader=response.leader == response.member_id,
        )
        return self._response(ctx.version, response)

    @staticmethod
    def _response(version: int, r: JoinGroupResponse):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.JOIN_GROUP, version)
        member_cls = nested(schema, "JoinGroupResponseMember")
        members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata) for m in r.members)
        # Before v7 the protocol name is not nullable: "" stands for none.
        protocol_name = r.protocol_name if version >= 7 else (r.protocol_name or "")
        return build(
            schema,
            throttle_time=0,
            error_code=r.error_code,
            generation_id=r.generation_id,
            protocol_type=r.protocol_type,
            protocol_name=protocol_name,
            leader=r.leader,
            skip_assignment=r.skip_assignment,
            member_id=r.member_id,
            members=members,
        )


class SyncGroupHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return self._response(ctx.version, SyncGroupResponse(ErrorCode.group_authorization_failed))
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._response(ctx.version, SyncGroupResponse(e.error_code))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        before = shard.snapshot([request.group_id])
        result = shard.groups.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in request.assignments},
            future,
            now_ms(),
        )
        self._coordinator.execute(request.group_id, result, before)
        try:
            response = await future
        except CoordinatorNotAvailable as e:
            response = SyncGroupResponse(e.error_code)
        if response.error_code:
            log.info("group.sync_failed", group=request.group_id, member=request.member_id, error=ErrorCode(response.error_code).name)
        return self._response(ctx.version, response)

    @staticmethod
    def _response(version: int, r: SyncGroupResponse):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.SYNC_GROUP, version)
        return build(
            schema, throttle_time=0, error_code=r.error_code, protocol_type=r.protocol_type, protocol_name=r.protocol_name, assignment=r.assignment
        )


class HeartbeatHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.HEARTBEAT, ctx.version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return build(schema, throttle_time=0, error_code=ErrorCode.group_authorization_failed)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return build(schema, throttle_time=0, error_code=e.error_code)
        error, result = shard.groups.heartbeat(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None), now_ms()
        )
        # A heartbeat only moves its member's session timer: nothing to revert.
        self._coordinator.execute(request.group_id, result, None)
        return build(schema, throttle_time=0, error_code=error)


class LeaveGroupHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LEAVE_GROUP, ctx.version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            # The whole request is refused: from v3 too, with no answer per member.
            return build(schema, throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
        if ctx.version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return build(schema, throttle_time=0, error_code=e.error_code, members=())
        before = shard.snapshot([request.group_id])
        error, answers, result = shard.groups.leave_group(request.group_id, leaving, now_ms())
        self._coordinator.execute(request.group_id, result, before)
        if ctx.version < 3:
            # One member, and its error is the whole answer.
            return build(schema, throttle_time=0, error_code=error or (answers[0][2] if answers else 0))
        member_cls = nested(schema, "MemberResponse")
        members = tuple(build(member_cls, member_id=m, group_instance_id=i, error_code=code) for m, i, code in answers)
        return build(schema, throttle_time=0, error_code=error, members=members)


# OffsetCommit v10 and OffsetFetch v10 (KIP-848) name topics by topic ID.
FIRST_OFFSETS_BY_TOPIC_ID_VERSION = 10
# OffsetFetch v9 (KIP-848) names the fetching member; a consumer group checks it.
FIRST_OFFSET_FETCH_MEMBER_VERSION = 9


def resolve_topic_ids(metadata: MetadataCache, topics: Iterable[Any]) -> tuple[dict[uuid.UUID | None, str], list[Any]]:
    """The names of the requested topics' IDs, as the metadata image knows them, and the requested
    topics whose ID none has (the zero UUID included): Kafka answers those UNKNOWN_TOPIC_ID."""
    by_id = metadata.image.topics_by_id
    names: dict[uuid.UUID | None, str] = {}
    unknown = []
    for t in topics:
        topic = by_id.get(t.topic_id) if t.topic_id is not None else None
        if topic is None:
            unknown.append(t)
        else:
            names[t.topic_id] = topic.name
    return names, unknown


def topic_ids_of(metadata: MetadataCache, names: Iterable[str]) -> dict[str, uuid.UUID]:
    topics = metadata.image.topics
    return {name: topics[name].topic_id for name in names if name in topics}


class OffsetCommitHandler:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.OFFSET_COMMIT, ctx.version)
        unknown: list[Any] = []
        topic_ids: Mapping[str, uuid.UUID] = {}
        if ctx.version >= FIRST_OFFSETS_BY_TOPIC_ID_VERSION:
            names, unknown = resolve_topic_ids(self._metadata, request.topics)
            topic_ids = {name: topic_id for topic_id, name in names.items() if topic_id is not None}
            commits = [
                PartitionCommit(names[t.topic_id], p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata, t.topic_id)
                for t in request.topics
                if t.topic_id in names
                for p in t.partitions
            ]
        else:
            # The topic IDs a consumer group checks its members' assignments with, as Kafka's KafkaApis resolves them.
            ids = topic_ids_of(self._metadata, {t.name for t in request.topics})
            commits = [
                PartitionCommit(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), p.committed_metadata, ids.get(t.name))
                for t in request.topics
                for p in t.partitions
            ]
        refused: list[tuple[PartitionCommit, int]] = []
        if self._auth.enabled:
            if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
                return self._response(schema, [(c, ErrorCode.group_authorization_failed) for c in commits], topic_ids, unknown, ErrorCode.group_authorization_failed)
            refused, commits = split_by_topic_authorization(self._auth, ctx, AclOperation.READ, commits)
        # Kafka's KafkaApis answers a partition the metadata does not have before the coordinator
        # sees the request: UNKNOWN_TOPIC_OR_PARTITION, and nothing is stored for it.
        image = self._metadata.image
        missing = [c for c in commits if not image.has_partition(c.topic, c.partition)]
        if missing:
            commits = [c for c in commits if image.has_partition(c.topic, c.partition)]
            refused += [(c, ErrorCode.unknown_topic_or_partition) for c in missing]
        if not commits and (refused or unknown):
            # Nothing the coordinator could write: Kafka does not ask it.
            return self._response(schema, refused, topic_ids, unknown)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            answers = [(c, e.error_code) for c in commits]
        else:
            retention = _ms(getattr(request, "retention_time", -1))
            before = shard.snapshot_before_commit(request.group_id)
            answers, records = shard.offsets.commit(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                getattr(request, "group_instance_id", None),
                retention,
                commits,
                ctx.version,
                now_ms(),
            )
            # Offsets enter memory only once written; the group a simple consumer's commit made goes.
            written = self._coordinator.execute(request.group_id, CoordinatorResult(records=records), before) if records else 0

            def answer(write_error: int) -> Any:
                return self._response(schema, refused + [(c, write_error if code == 0 else code) for c, code in answers], topic_ids, unknown)

            return when_settled(written, answer)
        return self._response(schema, refused + answers, topic_ids, unknown)

    @staticmethod
    def _response(
        schema: Any,
        answers: list[tuple[PartitionCommit, int]],
        topic_ids: Mapping[str, uuid.UUID],
        unknown: Iterable[Any] = (),
        unknown_error: int = ErrorCode.unknown_topic_id,
    ) -> Any:
        """``topic_ids`` names the answered topics from v10; ``unknown``: the requested topics whose ID
        no topic has, answered ``unknown_error`` (the group's authorization failure goes first)."""
        topic_cls = nested(schema, "OffsetCommitResponseTopic")
        part_cls = nested(schema, "OffsetCommitResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for commit, code in answers:
            by_topic.setdefault(commit.topic, []).append(build(part_cls, partition_index=commit.partition, error_code=code))
        # build() keeps the one of name and topic_id the version has.
        topics = [build(topic_cls, name=name, topic_id=topic_ids.get(name), partitions=tuple(parts)) for name, parts in by_topic.items()]
        topics += [
            build(topic_cls, topic_id=t.topic_id, partitions=tuple(build(part_cls, partition_index=p.partition_index, error_code=unknown_error) for p in t.partitions))
            for t in unknown
        ]
        return build(schema, throttle_time=0, topics=tuple(topics))


class OffsetFetchHandler:
    """A stable fetch (require_stable, what read_committed consumers send: librdkafka's by default)
    is answered once the offsets it reads are settled, as Kafka 4's coordinator holds it as a
    write until the coordinator's earlier writes are committed:

    - every offset commit this coordinator has appended for the group's partition is replicated
      (or failed): a member that takes over a partition while its previous owner's last commit
      waits for the followers reads that commit, not the one before it (chaos soak seed
      1354848650: the new owner was told 4058 while 4067 was on its way, re-read nine records and
      committed 4063 after 4067);
    - ``in_session``: the controller cannot have fenced this broker yet. A broker that may have
      been fenced may be a zombie coordinator, whose offsets a newer coordinator may already have
      moved past (soak seeds 57861548, 483707690 and 1867237364: a read_committed consumer rewound
      to them after an abort and processed its input twice).

    After ``offsets.commit.timeout.ms`` it answers NOT_COORDINATOR, Kafka's answer when that wait
    times out, and the consumer looks the coordinator up again. A plain fetch answers at once
    with the offsets as of the partition's last committed offset, as Kafka's read operation does:
    a commit the followers do not have yet, and so a failover could still lose, is not shown."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        metadata: MetadataCache,
        in_session: Callable[[], bool] = lambda: True,
        stable_wait_ms: int = 5000,
        auth: AuthHelper | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._in_session = in_session
        self._stable_wait_s = stable_wait_ms / 1000
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        group_ids = [g.group_id for g in request.groups] if ctx.version >= 8 else [request.group_id]
        denied = self._denied_groups(ctx, group_ids) if self._auth.enabled else _NONE_DENIED
        member_errors = self._member_errors(request, denied) if ctx.version >= FIRST_OFFSET_FETCH_MEMBER_VERSION else {}
        if getattr(request, "require_stable", False):
            # A refused group is answered at once, as Kafka does: its pending writes are not waited for.
            waiting = [g for g in group_ids if g not in denied and g not in member_errors] if denied or member_errors else group_ids
            # Per group, the offset the latest write waiting for the followers needs: later writes are not waited for.
            pending = {g: o for g in waiting if (o := self._coordinator.last_pending_write(g)) is not None}
            if self._unsettled(waiting, pending):
                return self._answer_when_settled(ctx, request, waiting, pending, denied, member_errors)
        return self._answer(ctx, request, denied, member_errors)

    def _member_errors(self, request, denied: frozenset[str]) -> dict[str, int]:  # type: ignore[no-untyped-def]
        """The groups whose fetching member (OffsetFetch v9+) the consumer group refuses, and why.
        Kafka checks it when the fetch arrives, as a stable fetch's write operation starts, and
        fails that group at once: its answer does not wait for the group's pending writes."""
        errors: dict[str, int] = {}
        for g in request.groups:
            if g.group_id in denied:
                continue
            try:
                shard = self._coordinator.shard_for(g.group_id)
            except CoordinatorNotAvailable:
                continue  # _fetch answers the coordinator's error
            error = shard.offsets.validate_fetch(g.group_id, g.member_id, g.member_epoch)
            if error:
                errors[g.group_id] = error
        return errors

    def _denied_groups(self, ctx: RequestContext, group_ids: list[str]) -> frozenset[str]:
        return frozenset(g for g in group_ids if not self._auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g))

    def _waits_for_session(self, group_ids: list[str]) -> bool:
        return not self._in_session() and any(self._coordinator.coordinator_error(g) == 0 for g in group_ids)

    def _unsettled(self, group_ids: list[str], pending: dict[str, int]) -> bool:
        return self._waits_for_session(group_ids) or any(not self._coordinator.writes_settled_through(g, o) for g, o in pending.items())

    async def _answer_when_settled(  # type: ignore[no-untyped-def]
        self, ctx: RequestContext, request, group_ids: list[str], pending: dict[str, int], denied: frozenset[str], member_errors: dict[str, int]
    ):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stable_wait_s
        if self._waits_for_session(group_ids):
            log.info("group_coordinator.stable_fetch_waits_for_session", groups=group_ids)
        while self._unsettled(group_ids, pending):
            if loop.time() >= deadline:
                log.warning("group_coordinator.stable_fetch_timed_out", groups=group_ids, in_session=self._in_session())
                return self._answer(ctx, request, denied, member_errors, ErrorCode.not_coordinator)
            await asyncio.sleep(STABLE_POLL_S)
        return self._answer(ctx, request, denied, member_errors)

    def _answer(self, ctx: RequestContext, request, denied: frozenset[str], member_errors: dict[str, int], unavailable: int | None = None):  # type: ignore[no-untyped-def]
        """``denied``: the groups the principal may not describe. ``member_errors``: the groups
        refused for their fetching member. ``unavailable``: answer every other group with this
        coordinator error instead of its offsets."""
        schema = response_schema(ApiKey.OFFSET_FETCH, ctx.version)
        if ctx.version >= 8:
            group_cls = nested(schema, "OffsetFetchResponseGroup")
            topic_cls = nested(schema, "OffsetFetchResponseTopics")
            part_cls = nested(schema, "OffsetFetchResponsePartitions")
            groups = []
            for g in request.groups:
                if g.group_id in denied:
                    groups.append(build(group_cls, group_id=g.group_id, topics=(), error_code=ErrorCode.group_authorization_failed))
                    continue
                if g.group_id in member_errors:
                    # As Kafka's KafkaApis: the group's error alone, without the topics it refused itself.
                    groups.append(build(group_cls, group_id=g.group_id, topics=(), error_code=member_errors[g.group_id]))
                    continue
                error, topics = self._fetch(ctx, g.group_id, g.topics, topic_cls, part_cls, False, request.require_stable, unavailable)
                groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=error))
            return build(schema, throttle_time=0, groups=tuple(groups))
        topic_cls = nested(schema, "OffsetFetchResponseTopic")
        part_cls = nested(schema, "OffsetFetchResponsePartition")
        if request.group_id in denied:
            # As Kafka's groupError: v2+ has the top-level error alone, v0-1 only the partitions' errors.
            wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes] if ctx.version < 2 else []
            topics = _group_by_topic(topic_cls, _failed_offset_parts(part_cls, wanted, ErrorCode.group_authorization_failed))
            return build(schema, throttle_time=0, topics=topics, error_code=ErrorCode.group_authorization_failed)
        # v0-1 have no top-level error: a coordinator error goes on every partition.
        error, topics = self._fetch(ctx, request.group_id, request.topics, topic_cls, part_cls, ctx.version < 2, getattr(request, "require_stable", False), unavailable)
        return build(schema, throttle_time=0, topics=topics, error_code=error)

    def _fetch(  # type: ignore[no-untyped-def]
        self, ctx: RequestContext, group_id: str, requested, topic_cls: type, part_cls: type, errors_per_partition: bool, require_stable: bool, unavailable: int | None
    ) -> tuple[int, tuple[Any, ...]]:
        by_id = ctx.version >= FIRST_OFFSETS_BY_TOPIC_ID_VERSION
        unknown: list[Any] = []
        if requested is None:
            wanted = None
        elif by_id:
            id_names, unknown = resolve_topic_ids(self._metadata, requested)
            wanted = [(id_names[t.topic_id], p) for t in requested if t.topic_id in id_names for p in t.partition_indexes]
        else:
            wanted = [(t.name, p) for t in requested for p in t.partition_indexes]
        # Kafka does not tell offsets of topics the principal may not describe: asked for by name,
        # they answer TOPIC_AUTHORIZATION_FAILED after the others; among all the group's, they are left out.
        refused: list[tuple[str, int]] = []
        if self._auth.enabled and wanted:
            names = {topic for topic, _ in wanted}
            denied = names - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
            if denied:
                refused = [tp for tp in wanted if tp[0] in denied]
                wanted = [tp for tp in wanted if tp[0] not in denied]
        try:
            if unavailable is not None:
                raise CoordinatorNotAvailable(unavailable)
            shard = self._coordinator.shard_for(group_id)
        except CoordinatorNotAvailable as e:
            code = e.error_code if errors_per_partition else 0
            parts = _failed_offset_parts(part_cls, wanted or (), code) + _failed_offset_parts(part_cls, refused, ErrorCode.topic_authorization_failed)
            return e.error_code, _group_by_topic(topic_cls, parts, self._topic_ids(by_id, parts))
        found = shard.offsets.fetch(group_id, wanted)
        if wanted is None and self._auth.enabled:
            allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {topic for topic, _, _ in found})
            found = [f for f in found if f[0] in allowed]
        parts = []
        for topic, partition, o in found:
            # KIP-447: a read_committed consumer asks for stable offsets; one a transaction is
            # still writing answers UNSTABLE_OFFSET_COMMIT, and the consumer asks again.
            if require_stable and shard.offsets.has_pending_offset(group_id, topic, partition):
                o, code = None, ErrorCode.unstable_offset_commit
            else:
                code = ErrorCode.none
            parts.append(
                (
                    topic,
                    partition,
                    build(
                        part_cls,
                        partition_index=partition,
                        committed_offset=-1 if o is None else o.offset,
                        committed_leader_epoch=-1 if o is None else o.leader_epoch,
                        metadata="" if o is None else o.metadata,
                        error_code=code,
                    ),
                )
            )
        parts += _failed_offset_parts(part_cls, refused, ErrorCode.topic_authorization_failed)
        topic_ids = self._topic_ids(by_id, parts)
        if by_id and wanted is None:
            # A topic with no ID (deleted since its offsets were committed) cannot be named from v10.
            parts = [part for part in parts if part[0] in topic_ids]
        topics = _group_by_topic(topic_cls, parts, topic_ids)
        unknown_topics = tuple(
            build(topic_cls, topic_id=t.topic_id, partitions=tuple(entity for _, _, entity in _failed_offset_parts(part_cls, (("", p) for p in t.partition_indexes), ErrorCode.unknown_topic_id)))
            for t in unknown
        )
        return 0, topics + unknown_topics

    def _topic_ids(self, by_id: bool, parts: list[tuple[str, int, Any]]) -> Mapping[str, uuid.UUID]:
        return topic_ids_of(self._metadata, {topic for topic, _, _ in parts}) if by_id else {}


def _failed_offset_parts(part_cls: type, partitions: Iterable[tuple[str, int]], code: int) -> list[tuple[str, int, Any]]:
    return [(t, p, build(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=code)) for t, p in partitions]


def _group_by_topic(topic_cls: type, parts: list[tuple[str, int, Any]], topic_ids: Mapping[str, uuid.UUID] | None = None) -> tuple[Any, ...]:
    """``topic_ids`` names the topics from OffsetFetch v10: build() keeps the one of name and topic_id the version has."""
    by_topic: dict[str, list[Any]] = {}
    for topic, _, entity in parts:
        by_topic.setdefault(topic, []).append(entity)
    ids = topic_ids or {}
    return tuple(build(topic_cls, name=name, topic_id=ids.get(name), partitions=tuple(entities)) for name, entities in by_topic.items())


class OffsetDeleteHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.OFFSET_DELETE, ctx.version)
        topic_cls = nested(schema, "OffsetDeleteResponseTopic")
        part_cls = nested(schema, "OffsetDeleteResponsePartition")
        wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        refused: list[tuple[str, int, int]] = []
        if self._auth.enabled:
            if not self._auth.authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
                return build(schema, throttle_time=0, error_code=ErrorCode.group_authorization_failed, topics=())
            names = {topic for topic, _ in wanted}
            denied = names - self._auth.filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)
            if denied:
                # Unlike OffsetCommit, Kafka asks the coordinator even when every topic is refused.
                refused = [(topic, partition, ErrorCode.topic_authorization_failed) for topic, partition in wanted if topic in denied]
                wanted = [(topic, partition) for topic, partition in wanted if topic not in denied]
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return build(schema, throttle_time=0, error_code=e.error_code, topics=())
        error, answers, records = shard.offsets.delete_offsets(request.group_id, wanted)
        if error:
            return build(schema, throttle_time=0, error_code=error, topics=())
        # Offsets leave memory only once their tombstones are written: nothing to revert.
        written = self._coordinator.execute(request.group_id, CoordinatorResult(records=records), None) if records else 0

        def answer(write_error: int) -> Any:
            if write_error:
                return build(schema, throttle_time=0, error_code=write_error, topics=())
            parts = [(topic, partition, build(part_cls, partition_index=partition, error_code=code)) for topic, partition, code in refused + answers]
            return build(schema, throttle_time=0, error_code=0, topics=_group_by_topic(topic_cls, parts))

        return when_settled(written, answer)


class DescribeGroupsHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_GROUPS, ctx.version)
        group_cls = nested(schema, "DescribedGroup")
        member_cls = nested(schema, "DescribedGroupMember")
        include_operations = getattr(request, "include_authorized_operations", False)
        denied: set[str] | frozenset[str] = _NONE_DENIED
        if self._auth.enabled:
            denied = set(request.groups) - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.groups)
        # Kafka answers the refused groups first, then the ones it described.
        out = [
            build(group_cls, error_code=ErrorCode.group_authorization_failed, group_id=group_id, group_state="", protocol_type="", protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN)
            for group_id in request.groups
            if group_id in denied
        ]
        for group_id in request.groups:
            if group_id in denied:
                continue
            try:
                shard = self._coordinator.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                out.append(build(group_cls, error_code=e.error_code, group_id=group_id, group_state="", protocol_type="", protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN))
                continue
            described = shard.groups.describe(group_id)
            if ctx.version >= 6 and shard.groups.group(group_id) is None:
                # KIP-1043: v6 says GROUP_ID_NOT_FOUND where older versions describe a Dead group.
                modern = group_id in shard.consumer_groups.groups or group_id in shard.streams_groups.groups
                kind = "is not a classic group" if modern else "not found"
                out.append(
                    build(
                        group_cls,
                        error_code=ErrorCode.group_id_not_found,
                        error_message=f"Group {group_id} {kind}.",
                        group_id=group_id,
                        group_state=described.state,
                        protocol_type="",
                        protocol_data="",
                        members=(),
                        authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
                    )
                )
                continue
            members = tuple(
                build(
                    member_cls,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in described.members
            )
            out.append(
                build(
                    group_cls,
                    error_code=described.error_code,
                    group_id=group_id,
                    group_state=described.state,
                    protocol_type=described.protocol_type,
                    protocol_data=described.protocol_data,
                    members=members,
                    authorized_operations=(
                        self._auth.authorized_operations(ctx, ResourceType.GROUP, group_id)
                        if include_operations and described.error_code == 0
                        else AUTHORIZED_OPERATIONS_UNKNOWN
                    ),
                )
            )
        return build(schema, throttle_time=0, groups=tuple(out))


class ListGroupsHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.LIST_GROUPS, ctx.version)
        listed_cls = nested(schema, "ListedGroup")
        states = set(getattr(request, "states_filter", ()) or ())
        types = set(getattr(request, "types_filter", ()) or ())
        listed = [g for shard in self._coordinator.shards.values() for g in shard.list_groups(states, types)]
        # DESCRIBE on the cluster lists every group (Kafka keeps it for compatibility); without
        # it, only the groups the principal may describe are listed, the others left out unsaid.
        if self._auth.enabled and not self._auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
            allowed = self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in listed), log_if_denied=False)
            listed = [g for g in listed if g.group_id in allowed]
        groups = [build(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type) for g in listed]
        error = 0
        if self._coordinator.loading:
            # Kafka answers with what it has and says some coordinators are still loading.
            error = ErrorCode.coordinator_load_in_progress
        return build(schema, throttle_time=0, error_code=error, groups=tuple(groups))


class DeleteGroupsHandler:
    def __init__(self, coordinator: GroupCoordinator, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DELETE_GROUPS, ctx.version)
        result_cls = nested(schema, "DeletableGroupResult")
        group_ids = list(dict.fromkeys(request.groups_names))
        denied: set[str] | frozenset[str] = _NONE_DENIED
        if self._auth.enabled:
            denied = set(group_ids) - self._auth.filter_authorized(ctx, AclOperation.DELETE, ResourceType.GROUP, group_ids)
        codes: dict[str, Written] = {}
        for group_id in group_ids:
            if group_id in denied:
                continue
            try:
                shard = self._coordinator.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                codes[group_id] = e.error_code
                continue
            if group_id in shard.share_groups.groups:
                # Its share partitions' state on the share coordinator goes first.
                codes[group_id] = asyncio.ensure_future(self._coordinator.delete_share_group(group_id))
                continue
            before = shard.snapshot([group_id])
            errors, result = shard.delete_groups([group_id], now_ms())
            codes[group_id] = errors[group_id] or self._coordinator.execute(group_id, result, before)
        if denied:
            # Kafka answers the refused groups after the others.
            codes.update((g, ErrorCode.group_authorization_failed) for g in group_ids if g in denied)

        def answer(settled: dict[str, int]) -> Any:
            # v3's ErrorMessage stays null: Kafka 4.4 sets one only for streams groups' topology
            # deletions, which kbroker does not have (the coordinator's errors carry none).
            return build(schema, throttle_time=0, results=tuple(build(result_cls, group_id=g, error_code=code) for g, code in settled.items()))

        if any(isinstance(code, asyncio.Future) for code in codes.values()):
            return _when_all_written(codes, answer)
        return answer(codes)  # type: ignore[arg-type]


class ConsumerGroupHeartbeatHandler:
    """KIP-848: the member heartbeats its subscription and owned partitions; the coordinator
    answers with its epoch and, when it changed, its assignment."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.CONSUMER_GROUP_HEARTBEAT, ctx.version)
        if not consumer_protocol_enabled(self._metadata.image.features):
            # Kafka 4.4 refuses before it authorizes: group.version 0 has no consumer groups.
            return self._failed(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return self._failed(schema, ErrorCode.group_authorization_failed)
        if self._auth.enabled and request.subscribed_topic_names:
            # A member may not subscribe to a topic it may not describe (KAFKA-18813). A regex
            # subscription is not checked here: Kafka filters what the regex resolves to.
            names = set(request.subscribed_topic_names)
            if len(self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(names):
                return self._failed(schema, ErrorCode.topic_authorization_failed)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._failed(schema, e.error_code)
        before = shard.snapshot([request.group_id])
        result = shard.consumer_groups.heartbeat(
            request,
            topic_partition_counts(self._metadata.image),
            now_ms(),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client.address.split(":")[0],
        )
        written = self._coordinator.execute(request.group_id, CoordinatorResult(records=result.records, timers=result.timers), before)
        return when_settled(written, lambda error: self._response(schema, result.response, error))

    @staticmethod
    def _failed(schema: Any, error: int) -> Any:
        return build(schema, throttle_time=0, error_code=error, error_message=None, member_id=None, member_epoch=0, heartbeat_interval=datetime.timedelta(0), assignment=None)

    @classmethod
    def _response(cls, schema: Any, r: Any, error: int) -> Any:
        assert r is not None
        if error:
            return cls._failed(schema, error)
        assignment = None
        if r.assignment is not None:
            assignment_cls = nested(schema, "Assignment")
            tp_cls = nested(schema, "TopicPartitions")
            assignment = build(assignment_cls, topic_partitions=tuple(build(tp_cls, topic_id=t, partitions=p) for t, p in r.assignment.items()))
        return build(
            schema,
            throttle_time=0,
            error_code=r.error_code,
            error_message=r.error_message,
            member_id=r.member_id,
            member_epoch=r.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms),
            assignment=assignment,
        )


MEMBER_TYPE_CONSUMER = 1


class ConsumerGroupDescribeHandler:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.CONSUMER_GROUP_DESCRIBE, ctx.version)
        group_cls = nested(schema, "DescribedGroup")
        member_cls = nested(schema, "Member")
        assignment_cls = nested(schema, "Assignment")
        tp_cls = nested(schema, "TopicPartitions")
        names = {topic.topic_id: name for name, topic in self._metadata.image.topics.items()}

        def assignment(parts):  # type: ignore[no-untyped-def]
            return build(assignment_cls, topic_partitions=tuple(build(tp_cls, topic_id=p.topic_id, topic_name=p.topic_name, partitions=p.partitions) for p in parts))

        def failed(group_id: str, error: int, message: str | None = None) -> Any:
            return build(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0, assignor_name="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN)

        if not consumer_protocol_enabled(self._metadata.image.features):
            # As Kafka 4.4 at group.version 0: every group UNSUPPORTED_VERSION, in request order, before any authorization.
            return build(schema, throttle_time=0, groups=tuple(failed(group_id, ErrorCode.unsupported_version) for group_id in request.group_ids))
        denied: set[str] | frozenset[str] = _NONE_DENIED
        if self._auth.enabled:
            denied = set(request.group_ids) - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
        # Kafka answers the refused groups first, then the ones it described.
        out = [failed(group_id, ErrorCode.group_authorization_failed) for group_id in request.group_ids if group_id in denied]
        described: list[DescribedConsumerGroup] = []
        for group_id in request.group_ids:
            if group_id in denied:
                continue
            try:
                shard = self._coordinator.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                described.append(DescribedConsumerGroup(group_id, error_code=e.error_code))
                continue
            described.extend(shard.consumer_groups.describe([group_id], names))
        hidden = self._hidden_topics(ctx, described) if self._auth.enabled else _NONE_DENIED
        for g in described:
            if hidden and not hidden.isdisjoint(_assigned_topics(g)):
                # Clients may not see topics they may not describe: the whole group is withheld.
                out.append(failed(g.group_id, ErrorCode.topic_authorization_failed, HIDDEN_TOPICS_MESSAGE))
                continue
            members = tuple(
                build(
                    member_cls,
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    # Kafka's members have "" for no regex, and say so.
                    subscribed_topic_regex=m.subscribed_topic_regex or "",
                    assignment=assignment(m.assignment),
                    target_assignment=assignment(m.target_assignment),
                    # v1 (KIP-1099): every member speaks the consumer protocol (1); kbroker's
                    # consumer groups take no classic members (0).
                    member_type=MEMBER_TYPE_CONSUMER,
                )
                for m in g.members
            )
            out.append(
                build(
                    group_cls,
                    error_code=g.error_code,
                    error_message=g.error_message,
                    group_id=g.group_id,
                    group_state=g.group_state,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor_name=g.assignor_name,
                    members=members,
                    authorized_operations=(
                        self._auth.authorized_operations(ctx, ResourceType.GROUP, g.group_id)
                        if request.include_authorized_operations and not g.error_code
                        else AUTHORIZED_OPERATIONS_UNKNOWN
                    ),
                )
            )
        return build(schema, throttle_time=0, groups=tuple(out))

    def _hidden_topics(self, ctx: RequestContext, described: list[DescribedConsumerGroup]) -> set[str]:
        """The topics of the described groups' assignments and target assignments the principal
        may not describe (KAFKA-18813)."""
        topics = {topic for g in described for topic in _assigned_topics(g)}
        return topics - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)


def _assigned_topics(g: DescribedConsumerGroup) -> set[str]:
    return {p.topic_name for m in g.members for parts in (m.assignment, m.target_assignment) for p in parts}
