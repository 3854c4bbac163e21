"""KIP-1071's streams group membership: StreamsGroupHeartbeat and StreamsGroupDescribe, answered as
Kafka 4.4's KafkaApis (handleStreamsGroupHeartbeat, handleStreamsGroupDescribe) answers them, at
v0-1 (v1's codecs are protocol/schema/'s), and KIP-1331's StreamsGroupTopologyDescriptionUpdate v0,
which a broker without a topology description plugin refuses.

All three refuse everything while streams.version is below 1 (broker/group/streams_version.py), before
any authorization: a new cluster finalizes 1 from metadata.version 4.2-IV1, as Kafka 4.4's does.

v1 is KIP-1331's. The heartbeat carries the real AcceptableRecoveryLag (v0's legacy field stays 0)
and TopologyDescriptionRequired, always false: like a Kafka 4.4 broker without
group.streams.topology.description.plugin.class, kbroker keeps no topology descriptions, so a
describe that asks for one gets TopologyDescriptionStatus NOT_STORED for each group it describes.
The describe also names the task assignor of the next assignment (KIP-1357): "sticky", kbroker's only one.
The coordinator gets the heartbeat's version: only a v1 member may be told MISSING_CLIENT_TAGS
(status 6), which v0 clients do not know (KAFKA-20744).

A heartbeat whose topology needs internal topics that do not exist is answered at once with
MISSING_INTERNAL_TOPICS, and once its records are written the topics are asked for (Kafka's
createStreamsInternalTopics); a later heartbeat finds them. As Kafka's KafkaApis does, none is
asked for when the member may not CREATE some of them, which the status's detail then names
("; Unauthorized to CREATE on topics a, b."); else the detail tells the creation errors of earlier
heartbeats still kept ("; Creation failed: a (error), b (error), c (error) and 2 more."): the
group coordinator keeps each for twice the group's heartbeat interval and does not ask for the
topic again meanwhile. Both lists come in the order Kafka's java.util.HashMaps give them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.controller.replication_control_manager import topic_name_error
from broker.group.group_metadata_manager import CoordinatorResult
from broker.group.modern_group_manager import GroupError
from broker.group.streams_assignor import STICKY_ASSIGNOR_NAME
from broker.group.streams_group import InternalTopic, StreamsGroup, StreamsGroupMember, TasksTuple, creatable_topics_order
from broker.group.streams_group_manager import StreamsGroupHeartbeatResponse, with_internal_topic_errors
from broker.group.streams_version import streams_groups_enabled
from broker.group_coordinator import CoordinatorNotAvailable, GroupCoordinator, now_ms, topic_partition_counts
from broker.handlers.metadata import AUTHORIZED_OPERATIONS_UNKNOWN, INTERNAL_TOPICS
from broker.handlers.settled import when_settled
from broker.java_hash_map import java_hash_map_order
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.security.standard_acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, error_only, nested

log = structlog.get_logger(__name__)

# A member's leave heartbeat: dynamic (-1) or static (-2).
LEAVE_EPOCHS = (-1, -2)
# StreamsGroupDescribe v1's TopologyDescriptionStatus: not asked for, or asked for and not kept.
TOPOLOGY_DESCRIPTION_NOT_REQUESTED, TOPOLOGY_DESCRIPTION_NOT_STORED = 0, 1
# GroupCoordinatorService's refusal of every topology description push without a plugin.
NO_TOPOLOGY_DESCRIPTION_PLUGIN = "The broker has no streams group topology description plugin configured."


def _acceptable_recovery_lag(schema: Any, lag: int | None) -> int:
    """v0's AcceptableRecoveryLagLegacy, which Kafka 4.4 leaves at 0; v1's AcceptableRecoveryLag,
    at its default -1 where Kafka does not set it (an error, a member leaving)."""
    if schema.__version__ < 1:
        return 0
    return -1 if lag is None else lag


def _topology_topics(topology: Any) -> list[str]:
    """Every topic a request's topology names, distinct, in Kafka's order: source, repartition
    sink, repartition source, then changelog topics of each subtopology in turn."""
    names: dict[str, None] = {}
    for s in topology.subtopologies:
        names.update(dict.fromkeys(s.source_topics))
    for s in topology.subtopologies:
        names.update(dict.fromkeys(s.repartition_sink_topics))
    for s in topology.subtopologies:
        names.update(dict.fromkeys(t.name for t in s.repartition_source_topics))
    for s in topology.subtopologies:
        names.update(dict.fromkeys(t.name for t in s.state_changelog_topics))
    return list(names)


class StreamsGroupHeartbeatHandler:
    """A Kafka Streams client heartbeats its topology and owned tasks; the coordinator answers with
    its epoch, its tasks when they changed, and the group's status."""

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.STREAMS_GROUP_HEARTBEAT, ctx.version)
        if not streams_groups_enabled(self._metadata.image.features):
            return self._failed(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return self._failed(schema, ErrorCode.group_authorization_failed)
        if request.topology is not None:
            topics = _topology_topics(request.topology)
            internal = [t for t in topics if t in INTERNAL_TOPICS]
            if internal:
                message = f"Use of Kafka internal topics {','.join(internal)} in a Kafka Streams topology is prohibited."
                return self._failed(schema, ErrorCode.streams_invalid_topology, message)
            invalid = [t for t in topics if topic_name_error(t) is not None]
            if invalid:
                return self._failed(schema, ErrorCode.streams_invalid_topology, f"Topic names {','.join(invalid)} are not valid topic names.")
            if self._auth.enabled and len(self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) < len(topics):
                return self._failed(schema, ErrorCode.topic_authorization_failed)
        try:
            shard = self._coordinator.shard_for(request.group_id)
        except CoordinatorNotAvailable as e:
            return self._failed(schema, e.error_code)
        before = shard.snapshot([request.group_id])
        result = shard.streams_groups.heartbeat(
            request,
            topic_partition_counts(self._metadata.image),
            now_ms(),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client.address.split(":")[0],
            api_version=ctx.version,
        )
        written = self._coordinator.execute(request.group_id, CoordinatorResult(records=result.records, timers=result.timers), before)
        creatable: dict[str, InternalTopic] = {}
        error_ttl_ms = 0
        if result.internal_topics:
            topology = shard.streams_groups.described_group(request.group_id).topology
            assert topology is not None  # the topics to create are its own
            creatable = {name: result.internal_topics[name] for name in creatable_topics_order(topology, result.internal_topics)}
            error_ttl_ms = 2 * shard.streams_groups.heartbeat_interval_ms_of(request.group_id)
        leaving = request.member_epoch in LEAVE_EPOCHS

        def answer(error: int) -> Any:
            response = result.response
            assert response is not None
            if creatable and not error and not response.error_code:
                response = self._create_internal_topics(ctx, request.group_id, response, creatable, error_ttl_ms)
            return self._response(schema, response, error, leaving)

        return when_settled(written, answer)

    def _create_internal_topics(
        self, ctx: RequestContext, group_id: str, response: StreamsGroupHeartbeatResponse, creatable: Mapping[str, InternalTopic], error_ttl_ms: int
    ) -> StreamsGroupHeartbeatResponse:
        """Kafka asks for the topics only when the member may CREATE all of them (on the cluster,
        or on each topic); the status tells which it may not, or the creation errors still kept."""
        denied: list[str] = []
        if not self._auth.authorize_cluster(ctx, AclOperation.CREATE, log_if_denied=False):
            allowed = self._auth.filter_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, creatable)
            denied = [name for name in creatable if name not in allowed]
        errors: dict[str, str] = {}
        if denied:
            log.info("streams_group.internal_topics_unauthorized", group=group_id, topics=denied)
        else:
            self._coordinator.create_streams_internal_topics(creatable, error_ttl_ms)
            kept = self._coordinator.streams_internal_topic_creation_errors(creatable)
            errors = {name: kept[name] for name in java_hash_map_order(kept)}
        statuses = with_internal_topic_errors(response.status or (), unauthorized=denied, creation_errors=errors)
        return response if response.status is None and not statuses else replace(response, status=statuses)

    @staticmethod
    def _failed(schema: Any, error: int, message: str | None = None) -> Any:
        """StreamsGroupHeartbeatRequest.getErrorResponse: the error code (and KafkaApis' message)."""
        return build(
            schema,
            throttle_time=0,
            error_code=error,
            error_message=message,
            member_id="",
            member_epoch=0,
            heartbeat_interval=datetime.timedelta(0),
            acceptable_recovery_lag=_acceptable_recovery_lag(schema, None),
            task_offset_interval=datetime.timedelta(0),
            status=(),
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
            endpoint_information_epoch=0,
            partitions_by_user_endpoint=None,
        )

    @classmethod
    def _response(cls, schema: Any, r: StreamsGroupHeartbeatResponse | None, error: int, leaving: bool) -> Any:
        """``leaving``: Kafka's streamsGroupLeave answers without the recovery lag."""
        assert r is not None
        if error:
            return cls._failed(schema, error)
        if r.error_code:
            return cls._failed(schema, r.error_code, r.error_message)
        task_cls = nested(schema, "TaskIds")
        status_cls = nested(schema, "Status")
        e2p_cls = nested(schema, "EndpointToPartitions")
        endpoint_cls = nested(schema, "Endpoint")
        tp_cls = nested(schema, "TopicPartition")

        def task_ids(tasks: Mapping[str, tuple[int, ...]] | None) -> Any:
            return None if tasks is None else tuple(build(task_cls, subtopology_id=s, partitions=ps) for s, ps in tasks.items())

        def partitions(by_topic: Mapping[str, tuple[int, ...]]) -> tuple[Any, ...]:
            return tuple(build(tp_cls, topic=t, partitions=ps) for t, ps in by_topic.items())

        endpoints = None
        if r.partitions_by_user_endpoint is not None:
            endpoints = tuple(
                build(
                    e2p_cls,
                    user_endpoint=build(endpoint_cls, host=e.user_endpoint.host, port=e.user_endpoint.port),
                    active_partitions=partitions(e.active_partitions),
                    standby_partitions=partitions(e.standby_partitions),
                )
                for e in r.partitions_by_user_endpoint
            )
        return build(
            schema,
            throttle_time=0,
            error_code=r.error_code,
            error_message=r.error_message,
            member_id=r.member_id,
            member_epoch=r.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms),
            acceptable_recovery_lag=_acceptable_recovery_lag(schema, None if leaving else r.acceptable_recovery_lag),
            task_offset_interval=datetime.timedelta(milliseconds=r.task_offset_interval_ms),
            status=None if r.status is None else tuple(build(status_cls, status_code=s.status_code, status_detail=s.status_detail) for s in r.status),
            active_tasks=task_ids(r.active_tasks),
            standby_tasks=task_ids(r.standby_tasks),
            warmup_tasks=task_ids(r.warmup_tasks),
            endpoint_information_epoch=r.endpoint_information_epoch,
            partitions_by_user_endpoint=endpoints,
        )


class StreamsGroupTopologyDescriptionUpdateHandler:
    """A member's push of its topology description. Kafka 4.4 checks streams.version, then READ on
    the group (both answered with no message), then hands it to GroupCoordinatorService, whose
    first check is that group.streams.topology.description.plugin.class is set: kbroker has no such
    plugin, so every push that gets that far is refused as Kafka refuses it, before any look at the
    member, the group or its coordinator. (The service's COORDINATOR_NOT_AVAILABLE while it is not
    started has no counterpart: kbroker's coordinator serves from start-up.)"""

    def __init__(self, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, ctx.version)
        if not streams_groups_enabled(self._metadata.image.features):
            return error_only(schema, ErrorCode.unsupported_version)
        if not self._auth.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return error_only(schema, ErrorCode.group_authorization_failed)
        return error_only(schema, ErrorCode.unsupported_version, NO_TOPOLOGY_DESCRIPTION_PLUGIN)


class StreamsGroupDescribeHandler:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._coordinator = coordinator
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.STREAMS_GROUP_DESCRIBE, ctx.version)
        group_cls = nested(schema, "DescribedGroup")

        def failed(group_id: str, error: int, message: str | None = None) -> Any:
            return build(
                group_cls,
                error_code=error,
                error_message=message,
                group_id=group_id,
                group_state="",
                group_epoch=0,
                assignment_epoch=0,
                topology=None,
                members=(),
                authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
                assignor_name=None,
            )

        if not streams_groups_enabled(self._metadata.image.features):
            # StreamsGroupDescribeRequest.getErrorResponse: every group UNSUPPORTED_VERSION, in request order.
            return build(schema, throttle_time=0, groups=tuple(failed(group_id, ErrorCode.unsupported_version) for group_id in request.group_ids))
        denied: set[str] = set()
        if self._auth.enabled:
            denied = set(request.group_ids) - self._auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
        # Kafka answers the refused groups first, then the empty ids (GroupCoordinatorService's
        # INVALID_GROUP_ID), then the ones it described.
        out = [failed(group_id, ErrorCode.group_authorization_failed) for group_id in request.group_ids if group_id in denied]
        out += [failed(group_id, ErrorCode.invalid_group_id) for group_id in request.group_ids if not group_id and group_id not in denied]
        for group_id in request.group_ids:
            if group_id in denied or not group_id:
                continue
            try:
                group = self._coordinator.shard_for(group_id).streams_groups.described_group(group_id)
            except CoordinatorNotAvailable as e:
                out.append(failed(group_id, e.error_code))
                continue
            except GroupError as e:
                out.append(failed(group_id, e.error_code, e.message))
                continue
            operations = AUTHORIZED_OPERATIONS_UNKNOWN
            if request.include_authorized_operations:
                operations = self._auth.authorized_operations(ctx, ResourceType.GROUP, group_id)
            out.append(_described(schema, group, operations, getattr(request, "include_topology_description", False)))
        return build(schema, throttle_time=0, groups=tuple(out))


def _described(schema: Any, group: StreamsGroup, authorized_operations: int, include_topology_description: bool) -> Any:
    """StreamsGroup.asDescribedGroup: the group, its configured topology and its members; with no
    topology description plugin, Kafka's attachTopologyDescriptions says NOT_STORED when asked."""
    assignment_cls = nested(schema, "Assignment")
    task_cls = nested(schema, "TaskIds")
    member_cls = nested(schema, "Member")
    kv_cls = nested(schema, "KeyValue")
    offset_cls = nested(schema, "TaskOffset")
    endpoint_cls = nested(schema, "Endpoint")

    def task_ids(tasks: Mapping[str, Iterable[int]]) -> tuple[Any, ...]:
        return tuple(build(task_cls, subtopology_id=s, partitions=tuple(sorted(ps))) for s, ps in sorted(tasks.items()))

    def assignment(active: Mapping[str, Iterable[int]], standby: Mapping[str, Iterable[int]], warmup: Mapping[str, Iterable[int]]) -> Any:
        return build(assignment_cls, active_tasks=task_ids(active), standby_tasks=task_ids(standby), warmup_tasks=task_ids(warmup))

    def member(m: StreamsGroupMember) -> Any:
        target = group.target_assignment.get(m.member_id, TasksTuple())
        offsets = group.task_offsets.get(m.member_id, {})
        return build(
            member_cls,
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            topology_epoch=m.topology_epoch,
            process_id=m.process_id,
            user_endpoint=None if m.user_endpoint is None else build(endpoint_cls, host=m.user_endpoint.host, port=m.user_endpoint.port),
            client_tags=tuple(build(kv_cls, key=k, value=v) for k, v in sorted(m.client_tags.items())),
            task_offsets=tuple(build(offset_cls, subtopology_id=s, partition=p, offset=o) for s, ps in sorted(offsets.items()) for p, o in sorted(ps.items())),
            task_end_offsets=(),
            assignment=assignment(m.assigned.active_tasks(), m.assigned.standby, m.assigned.warmup),
            target_assignment=assignment(target.active, target.standby, target.warmup),
            is_classic=False,
        )

    return build(
        nested(schema, "DescribedGroup"),
        error_code=0,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.target_assignment_epoch,
        topology=_topology(schema, group),
        members=tuple(member(m) for m in group.members.values()),
        authorized_operations=authorized_operations,
        topology_description_status=TOPOLOGY_DESCRIPTION_NOT_STORED if include_topology_description else TOPOLOGY_DESCRIPTION_NOT_REQUESTED,
        assignor_name=STICKY_ASSIGNOR_NAME,
    )


def _topology(schema: Any, group: StreamsGroup) -> Any:
    """The group's topology, subtopologies by id; None before any. Once it is configured against
    the topics that exist, with the partition counts it was configured with; before, as its record
    holds it (partition counts 0 where the topology leaves them to the coordinator), as Kafka 4.4
    describes it."""
    if group.topology is None:
        return None
    subtopology_cls = nested(schema, "Subtopology")
    info_cls = nested(schema, "TopicInfo")
    kv_cls = nested(schema, "KeyValue")
    configured = group.configured_topology
    ready = configured.subtopologies if configured is not None and configured.subtopologies is not None else {}

    def info(t: Any, decided: Mapping[str, int]) -> Any:
        configs = tuple(build(kv_cls, key=c.key, value=c.value) for c in t.topic_configs)
        return build(info_cls, name=t.name, partitions=decided.get(t.name, t.partitions), replication_factor=t.replication_factor, topic_configs=configs)

    subtopologies = []
    for s in sorted(group.topology.subtopologies, key=lambda s: s.subtopology_id):
        c = ready.get(s.subtopology_id)
        changelogs: Mapping[str, int] = c.changelog_topics if c is not None else {}
        repartitions: Mapping[str, int] = c.repartition_source_topics if c is not None else {}
        subtopologies.append(
            build(
                subtopology_cls,
                subtopology_id=s.subtopology_id,
                source_topics=tuple(s.source_topics),
                repartition_sink_topics=tuple(s.repartition_sink_topics),
                state_changelog_topics=tuple(info(t, changelogs) for t in s.state_changelog_topics),
                repartition_source_topics=tuple(info(t, repartitions) for t in s.repartition_source_topics),
            )
        )
    return build(nested(schema, "Topology"), epoch=group.topology.epoch, subtopologies=tuple(subtopologies))
