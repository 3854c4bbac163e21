"""KIP-932's share group membership: ShareGroupHeartbeat and ShareGroupDescribe, answered as Kafka
4.4's KafkaApis (handleShareGroupHeartbeat, handleShareGroupDescribe) answers them.

Both refuse everything while share.version is below 1 (broker/group/share_version.py), before
any authorization.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.group.share_group_manager import LEAVE_GROUP_MEMBER_EPOCH, DescribedShareGroup, DescribedTopicPartitions, ShareGroupHeartbeatResponse
from broker.group.share_version import share_groups_enabled
from broker.group_coordinator import CoordinatorNotAvailable, GroupCoordinator, now_ms, topic_partition_counts
from broker.handlers.groups import HIDDEN_TOPICS_MESSAGE
from broker.handlers.metadata import AUTHORIZED_OPERATIONS_UNKNOWN
from broker.handlers.settled import when_settled
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metrics.share_group_metrics import ShareGroupMetrics
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

# Kafka's KafkaApis.isMemberIdValid: the client generates a UUID; a longer id is refused.
MAX_MEMBER_ID_LENGTH = 36


class ShareGroupHeartbeatHandler:
    """A share consumer heartbeats its subscription; the coordinator answers with its epoch and,
    when it changed, its assignment (only partitions whose share-group state is initialized)."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None, metrics: ShareGroupMetrics | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)
        self._metrics = metrics if metrics is not None else ShareGroupMetrics()

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.SHARE_GROUP_HEARTBEAT, ctx.version)
        if not share_groups_enabled(self._metadata.image.features):
            return self._failed(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return self._failed(schema, ErrorCode.group_authorization_failed)
        if not request.member_id or len(request.member_id) > MAX_MEMBER_ID_LENGTH:
            # Kafka's "Invalid member id in the request." is not sent: its error answers carry no message.
            return self._failed(schema, ErrorCode.invalid_request)
        if self._auth.enabled and request.subscribed_topic_names:
            names = set(request.subscribed_topic_names)
            if len(self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(names):
                return self._failed(schema, ErrorCode.topic_authorization_failed)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._failed(schema, e.error_code)
        before = shard.snapshot([request.group_id])
        group = shard.share_groups.groups.get(request.group_id)
        epoch = group.group_epoch if group is not None else 0
        result = shard.share_groups.heartbeat(
            request,
            topic_partition_counts(self._metadata.image),
            now_ms(),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client.address.split(":")[0],
        )
        group = shard.share_groups.groups.get(request.group_id)
        if group is not None and group.group_epoch > epoch and request.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            self._metrics.share_group_rebalanced()  # Kafka's sensor, on a heartbeat's epoch bump (a leave's is not one)
        written = self._coordinator.execute_share_group(request.group_id, result, before)
        return when_settled(written, lambda error: self._response(schema, result.response, error))

    @staticmethod
    def _failed(schema: Any, error: int) -> Any:
        """ShareGroupHeartbeatRequest.getErrorResponse: the error code alone."""
        return build(schema, throttle_time=0, error_code=error, error_message=None, member_id=None, member_epoch=0, heartbeat_interval=datetime.timedelta(0), assignment=None)

    @classmethod
    def _response(cls, schema: Any, r: ShareGroupHeartbeatResponse | None, error: int) -> Any:
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


class ShareGroupDescribeHandler:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.SHARE_GROUP_DESCRIBE, ctx.version)
        group_cls = nested(schema, "DescribedGroup")
        member_cls = nested(schema, "Member")
        assignment_cls = nested(schema, "Assignment")
        tp_cls = nested(schema, "TopicPartitions")
        names = {topic.topic_id: name for name, topic in self._metadata.image.topics.items()}

        def assignment(parts: tuple[DescribedTopicPartitions, ...]) -> Any:
            return build(assignment_cls, topic_partitions=tuple(build(tp_cls, topic_id=p.topic_id, topic_name=p.topic_name, partitions=p.partitions) for p in parts))

        def failed(group_id: str, error: int, message: str | None = None) -> Any:
            return build(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0, assignor_name="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN)

        if not share_groups_enabled(self._metadata.image.features):
            # ShareGroupDescribeRequest.getErrorResponse: every group UNSUPPORTED_VERSION, in request order.
            return build(schema, throttle_time=0, groups=tuple(failed(group_id, ErrorCode.unsupported_version) for group_id in request.group_ids))
        denied: set[str] = set()
        if self._auth.enabled:
            denied = set(request.group_ids) - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
        # Kafka answers the refused groups first, then the ones it described.
        out = [failed(group_id, ErrorCode.group_authorization_failed) for group_id in request.group_ids if group_id in denied]
        described: list[DescribedShareGroup] = []
        for group_id in request.group_ids:
            if group_id in denied:
                continue
            try:
                shard = self._coordinator.shard_for(group_id)
            except CoordinatorNotAvailable as e:
                described.append(DescribedShareGroup(group_id, error_code=e.error_code))
                continue
            described.extend(shard.share_groups.describe([group_id], names))
        hidden: set[str] = set()
        if self._auth.enabled:
            # KAFKA-18813: a group whose members hold a topic the client may not describe is withheld.
            topics = {p.topic_name for g in described for m in g.members for p in m.assignment}
            hidden = topics - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
        for g in described:
            if hidden and any(p.topic_name in hidden for m in g.members for p in m.assignment):
                out.append(failed(g.group_id, ErrorCode.topic_authorization_failed, HIDDEN_TOPICS_MESSAGE))
                continue
            members = tuple(
                build(
                    member_cls,
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    assignment=assignment(m.assignment),
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
