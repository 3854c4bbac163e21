"""The streams group protocol (KIP-1071, StreamsGroupHeartbeat), sans-IO: the streams groups of one
``__consumer_offsets`` partition. Rules, error codes and records follow Kafka 4.4's
GroupMetadataManager (streamsGroupHeartbeat, streamsGroupLeave, streamsGroupFenceMember) and
GroupCoordinatorService's request validation.

Like ``share_group_manager.ShareGroupManager``, each call returns records, a response and timers,
and the state moves only by replaying those records, as a new coordinator rebuilds it.

One heartbeat:
1. the member joins (epoch 0, with the member id the client generated) or its metadata (process,
   endpoint, client tags, topology epoch, ...) changes: the group epoch is bumped;
2. the first member's topology becomes the group's (a later member's must be the same one);
3. the topology is checked against the topics that exist: missing source topics, internal
   (repartition and changelog) topics to create, wrongly partitioned topics come back as the
   response's status list, and the topics to create as ``StreamsGroupResult.internal_topics``
   (the shell creates them). A topology validated for the first time bumps the group epoch, as a
   change of the topics it uses (metadata hash) or of the assignment configs does;
4. the group epoch is past the target assignment epoch: the sticky task assignor computes a new
   target, over the tasks of a validated topology (none while the group is NOT_READY). Not while
   the initial rebalance delay runs (the first member of an empty group starts it, a group timer
   computes the target when it ends), nor within the assignment interval of the last target:
   the member is told ASSIGNMENT_DELAYED and the next heartbeat after it computes the target;
5. the member reconciles towards its target: a task is revoked from its old member, which must
   confirm in a heartbeat that it no longer owns it, before another member gets it.

Kafka 4.4 hands out no warm-up tasks: its sticky assignor returns active and standby tasks only,
and its AssignmentRefiner (which would add warm-ups from the reported task offsets) returns the
target it is given. Nor does it place standbys by rack: ``rack.aware.assignment.tags`` is part of
the assignment configs (a change of them is a rebalance), and a v1 member lacking one of the
tags is told MISSING_CLIENT_TAGS, but the sticky assignor does not read them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import structlog

from broker.group import streams_assignor
from broker.group.modern_group_manager import (
    GroupError,
    GroupResult,
    ModernGroupManager,
    Response,
    ScheduleTimer,
    TimerAction,
    is_subset,
    throw_if_empty_string,
    throw_if_instance_id_is_fenced,
    throw_if_member_epoch_is_invalid,
    timer_key,
)
from broker.group.share_group import metadata_hash
from broker.group.streams_group import (
    ASSIGNMENT_DELAYED,
    MISSING_CLIENT_TAGS,
    MISSING_INTERNAL_TOPICS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    AssignedTasks,
    ConfiguredTopology,
    FencedMemberError,
    InternalTopic,
    MemberState,
    OwnerLookup,
    Record,
    StreamsGroup,
    StreamsGroupMember,
    StreamsInvalidTopologyError,
    Tasks,
    TasksTuple,
    Topics,
    active_from_record,
    configure_topics,
    current_assignment_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    metadata_record,
    next_member,
    required_topics,
    target_assignment_epoch_record,
    target_assignment_record,
    tasks,
    topology_record,
)
from broker.group.streams_group_records import (
    CopartitionGroup,
    Endpoint,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsTopicConfig,
    StreamsTopicInfo,
    Subtopology,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
STREAMS_INVALID_TOPOLOGY = 130

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

SESSION_TIMEOUT_TIMER = "streams-session-timeout"
REBALANCE_TIMEOUT_TIMER = "streams-rebalance-timeout"
INITIAL_REBALANCE_TIMER = "streams-initial-rebalance"  # a group's timer: (kind, group id)

INITIAL_REBALANCE_DELAYED = "Assignment delayed due to the configured initial rebalance delay."
ASSIGNMENT_INTERVAL_DELAYED = "Assignment delayed due to the configured assignment interval."


def session_timeout_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return timer_key(SESSION_TIMEOUT_TIMER, group_id, member_id)


def rebalance_timeout_key(group_id: str, member_id: str) -> tuple[str, ...]:
    return timer_key(REBALANCE_TIMEOUT_TIMER, group_id, member_id)


def initial_rebalance_key(group_id: str) -> tuple[str, ...]:
    return (INITIAL_REBALANCE_TIMER, group_id)


class StreamsGroupConfigLookup(Protocol):
    """A group's own streams.* configs: None where it sets none. The initial rebalance delay, the
    assignment interval and the rack-aware assignment tags come with the broker's setting folded
    in, since the lookup (broker/group/streams_group_configs.py) is what reads those."""

    def streams_session_timeout_ms(self, group_id: str) -> int | None: ...

    def streams_heartbeat_interval_ms(self, group_id: str) -> int | None: ...

    def streams_num_standby_replicas(self, group_id: str) -> int | None: ...

    def streams_task_offset_interval_ms(self, group_id: str) -> int | None: ...

    def streams_acceptable_recovery_lag(self, group_id: str) -> int | None: ...

    def streams_initial_rebalance_delay_ms(self, group_id: str) -> int: ...

    def streams_assignment_interval_ms(self, group_id: str) -> int: ...

    def streams_rack_aware_assignment_tags(self, group_id: str) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class Status:
    status_code: int
    status_detail: str


def with_internal_topic_errors(statuses: Iterable[Status], unauthorized: Iterable[str] = (), creation_errors: Mapping[str, str] | None = None) -> tuple[Status, ...]:
    """What Kafka 4.4's KafkaApis.handleStreamsGroupHeartbeat adds to a heartbeat's statuses after
    the coordinator asked for internal topics. ``unauthorized``: the topics the member may not
    CREATE (then none is created); ``creation_errors``: topic -> error of an earlier failed
    creation still remembered, told only while the status says MISSING_INTERNAL_TOPICS."""
    out = list(statuses)
    missing = next((i for i, st in enumerate(out) if st.status_code == MISSING_INTERNAL_TOPICS), None)
    # Kafka joins both lists with ", " (KafkaApis' mkString(", ")).
    denied = ", ".join(unauthorized)
    if denied:
        if missing is None:
            out.append(Status(MISSING_INTERNAL_TOPICS, f"Unauthorized to CREATE on topics {denied}."))
        else:
            out[missing] = Status(MISSING_INTERNAL_TOPICS, f"{out[missing].status_detail}; Unauthorized to CREATE on topics {denied}.")
        return tuple(out)
    if creation_errors and missing is not None:
        shown = ", ".join(f"{topic} ({error})" for topic, error in list(creation_errors.items())[:3])
        if len(creation_errors) > 3:
            shown += f" and {len(creation_errors) - 3} more"
        out[missing] = Status(MISSING_INTERNAL_TOPICS, f"{out[missing].status_detail}; Creation failed: {shown}.")
    return tuple(out)


def can_compute_next_target_assignment(assignment_timestamp_ms: int, interval_ms: int, now_ms: int) -> bool:
    """GroupMetadataManager.canComputeNextTargetAssignment: never computed, no interval, or past it."""
    return assignment_timestamp_ms == 0 or interval_ms == 0 or now_ms >= assignment_timestamp_ms + interval_ms


@dataclass(frozen=True, slots=True)
class EndpointToPartitions:
    """Which partitions a member's user endpoint serves: topic -> partitions, active and standby."""

    user_endpoint: Endpoint
    active_partitions: dict[str, tuple[int, ...]]
    standby_partitions: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeatResponse:
    """StreamsGroupHeartbeat v0's response; task lists are None when unchanged."""

    error_code: int = NONE
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval_ms: int = 0
    status: tuple[Status, ...] | None = None
    active_tasks: dict[str, tuple[int, ...]] | None = None
    standby_tasks: dict[str, tuple[int, ...]] | None = None
    warmup_tasks: dict[str, tuple[int, ...]] | None = None
    endpoint_information_epoch: int = 0
    partitions_by_user_endpoint: tuple[EndpointToPartitions, ...] | None = None


@dataclass(slots=True)
class StreamsGroupResult(GroupResult[Response]):
    internal_topics: dict[str, InternalTopic] = field(default_factory=dict)  # for the shell to create


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeat:
    """StreamsGroupHeartbeat v0's fields, whatever decoded them; tasks as subtopology -> partitions."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StreamsGroupTopologyValue | None = None
    active_tasks: Tasks | None = None
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: Endpoint | None = None
    client_tags: Mapping[str, str] | None = None
    task_offsets: Mapping[str, Mapping[int, int]] | None = None
    shutdown_application: bool = False
    uses_source_topic_regex: bool = False

    @classmethod
    def of(cls, request: Any) -> StreamsGroupHeartbeat:
        timeout = getattr(request, "rebalance_timeout_ms", None)
        if timeout is None:
            # kio names the field after Kafka's JSON minus "Ms" and decodes it to a timedelta.
            timeout = request.rebalance_timeout
        if not isinstance(timeout, int):
            timeout = round(timeout.total_seconds() * 1000)
        topology = None if request.topology is None else _topology_value(request.topology)
        endpoint = request.user_endpoint
        offsets = None
        if request.task_offsets is not None:
            offsets = {}
            for o in request.task_offsets:
                offsets.setdefault(o.subtopology_id, {})[o.partition] = o.offset
        return cls(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            endpoint_information_epoch=request.endpoint_information_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=timeout,
            topology=topology,
            active_tasks=_request_tasks(request.active_tasks),
            standby_tasks=_request_tasks(request.standby_tasks),
            warmup_tasks=_request_tasks(request.warmup_tasks),
            process_id=request.process_id,
            user_endpoint=None if endpoint is None else Endpoint(host=endpoint.host, port=endpoint.port),
            client_tags=None if request.client_tags is None else {kv.key: kv.value for kv in request.client_tags},
            task_offsets=offsets,
            shutdown_application=request.shutdown_application,
            uses_source_topic_regex=request.topology is not None and any(s.source_topic_regex for s in request.topology.subtopologies),
        )

    def owned(self) -> TasksTuple | None:
        if self.active_tasks is None or self.standby_tasks is None or self.warmup_tasks is None:
            return None
        return TasksTuple(self.active_tasks, self.standby_tasks, self.warmup_tasks)


def _request_tasks(entries: Iterable[Any] | None) -> Tasks | None:
    return None if entries is None else tasks((t.subtopology_id, t.partitions) for t in entries)


def _topic_info(info: Any) -> StreamsTopicInfo:
    return StreamsTopicInfo(
        name=info.name,
        partitions=info.partitions,
        replication_factor=info.replication_factor,
        topic_configs=tuple(StreamsTopicConfig(key=c.key, value=c.value) for c in info.topic_configs),
    )


def _topology_value(topology: Any) -> StreamsGroupTopologyValue:
    """convertToStreamsGroupTopologyRecord: the request's topology as the record stores it."""
    return StreamsGroupTopologyValue(
        epoch=topology.epoch,
        subtopologies=tuple(
            Subtopology(
                subtopology_id=s.subtopology_id,
                source_topics=tuple(s.source_topics),
                source_topic_regex=tuple(s.source_topic_regex),
                state_changelog_topics=tuple(_topic_info(t) for t in s.state_changelog_topics),
                repartition_sink_topics=tuple(s.repartition_sink_topics),
                repartition_source_topics=tuple(_topic_info(t) for t in s.repartition_source_topics),
                copartition_groups=tuple(
                    CopartitionGroup(
                        source_topics=tuple(g.source_topics),
                        source_topic_regex=tuple(g.source_topic_regex),
                        repartition_source_topics=tuple(g.repartition_source_topics),
                    )
                    for g in s.copartition_groups
                ),
            )
            for s in topology.subtopologies
        ),
    )


class StreamsGroupManager(ModernGroupManager[StreamsGroup]):
    """The streams groups of one ``__consumer_offsets`` partition.

    ``is_other_group(group_id)`` tells whether a group of another type (classic, consumer, share) holds the id."""

    group_type = StreamsGroup
    member_type = StreamsGroupMember
    result_type = StreamsGroupResult
    type_name = "streams"
    session_timeout_timer = SESSION_TIMEOUT_TIMER
    rebalance_timeout_timer = REBALANCE_TIMEOUT_TIMER

    def __init__(
        self,
        *,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 5000,
        max_size: int = 2**31 - 1,
        num_standby_replicas: int = 0,
        acceptable_recovery_lag: int = 10000,
        task_offset_interval_ms: int = 60000,
        initial_rebalance_delay_ms: int = 3000,
        assignment_interval_ms: int = 1000,
        rack_aware_assignment_tags: tuple[str, ...] = (),
        is_other_group: Callable[[str], bool] = lambda group_id: False,
        group_configs: StreamsGroupConfigLookup | None = None,
    ) -> None:
        super().__init__(is_other_group=is_other_group)
        # group.streams.session.timeout.ms, .heartbeat.interval.ms, .max.size, .num.standby.replicas,
        # .acceptable.recovery.lag, .task.offset.interval.ms, .initial.rebalance.delay.ms,
        # .assignment.interval.ms, .rack.aware.assignment.tags (the last three where there is no
        # group_configs, which reads them itself).
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.num_standby_replicas = num_standby_replicas
        self.acceptable_recovery_lag = acceptable_recovery_lag
        self.task_offset_interval_ms = task_offset_interval_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.assignment_interval_ms = assignment_interval_ms
        self.rack_aware_assignment_tags = rack_aware_assignment_tags
        self._group_configs = group_configs

    def _own(self, ask: Callable[[StreamsGroupConfigLookup], T | None], broker: T) -> T:
        """The group's own setting where its configs have one, else the broker's."""
        own = None if self._group_configs is None else ask(self._group_configs)
        return broker if own is None else own

    def session_timeout_ms_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_session_timeout_ms(group_id), self.session_timeout_ms)

    def heartbeat_interval_ms_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_heartbeat_interval_ms(group_id), self.heartbeat_interval_ms)

    def task_offset_interval_ms_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_task_offset_interval_ms(group_id), self.task_offset_interval_ms)

    def acceptable_recovery_lag_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_acceptable_recovery_lag(group_id), self.acceptable_recovery_lag)

    def initial_rebalance_delay_ms_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_initial_rebalance_delay_ms(group_id), self.initial_rebalance_delay_ms)

    def assignment_interval_ms_of(self, group_id: str) -> int:
        return self._own(lambda c: c.streams_assignment_interval_ms(group_id), self.assignment_interval_ms)

    def rack_aware_assignment_tags_of(self, group_id: str) -> tuple[str, ...]:
        return self._own(lambda c: c.streams_rack_aware_assignment_tags(group_id), self.rack_aware_assignment_tags)

    def assignment_configs(self, group_id: str) -> dict[str, str]:
        """streamsGroupAssignmentConfigs: what the assignor runs with; a change of it is a rebalance."""
        standbys = self._own(lambda c: c.streams_num_standby_replicas(group_id), self.num_standby_replicas)
        configs = {streams_assignor.NUM_STANDBY_REPLICAS_CONFIG: str(standbys)}
        tags = self.rack_aware_assignment_tags_of(group_id)
        if tags:
            configs[streams_assignor.RACK_AWARE_ASSIGNMENT_TAGS_CONFIG] = ",".join(tags)
        return configs

    # -- StreamsGroupHeartbeat ---------------------------------------------------------------------

    def heartbeat(
        self, request: Any, topics: Topics, now_ms: int, *, client_id: str = "", client_host: str = "", api_version: int = 0
    ) -> StreamsGroupResult[StreamsGroupHeartbeatResponse]:
        """``request``: a StreamsGroupHeartbeat (or kio's request); ``topics``: name -> (id, partition count);
        ``api_version``: the request's version (v1+ members may be told MISSING_CLIENT_TAGS)."""
        hb = request if isinstance(request, StreamsGroupHeartbeat) else StreamsGroupHeartbeat.of(request)
        try:
            _validate(hb)
            if hb.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(hb)
            return self._heartbeat(hb, topics, now_ms, client_id, client_host, api_version)
        except GroupError as e:
            return StreamsGroupResult(response=StreamsGroupHeartbeatResponse(error_code=e.error_code, error_message=e.message))

    def _heartbeat(
        self, hb: StreamsGroupHeartbeat, topics: Topics, now_ms: int, client_id: str, client_host: str, api_version: int
    ) -> StreamsGroupResult[StreamsGroupHeartbeatResponse]:
        joining = hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group(hb.group_id, create=joining)
        if joining and len(group.members) >= self.max_size and hb.member_id not in group.members:
            raise GroupError(GROUP_MAX_SIZE_REACHED, f"The streams group has reached its maximum capacity of {self.max_size} members.")
        records: list[Record] = []
        statuses: list[Status] = []
        timers: list[TimerAction] = []
        if hb.instance_id is None:
            member = self._dynamic_member(group, hb, joining)
            replaced = None
        else:
            member, replaced = self._static_member(group, hb, joining, records, timers)
        known = hb.member_id in group.members or replaced is not None

        # 1. The member, and the group epoch when it changed.
        updated = replace(
            member,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            topology_epoch=hb.topology.epoch if hb.topology is not None else member.topology_epoch,
            client_id=client_id,
            client_host=client_host,
            process_id=hb.process_id if hb.process_id is not None else member.process_id,
            client_tags=dict(hb.client_tags) if hb.client_tags is not None else member.client_tags,
            user_endpoint=hb.user_endpoint if hb.user_endpoint is not None else member.user_endpoint,
        )
        bump = updated.metadata() != member.metadata() or not known
        if bump:
            records.append(member_metadata_record(group.group_id, updated))

        # 2. The topology.
        topology = self._maybe_update_topology(group, hb.topology, records)
        if updated.topology_epoch < topology.epoch:
            statuses.append(Status(STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind the group's topology epoch {topology.epoch}."))

        # 3. The topology against the topics that exist.
        hash_ = metadata_hash(required_topics(topology), topics)
        try:
            configured = configure_topics(topology, topics)
        except StreamsInvalidTopologyError as e:
            raise GroupError(STREAMS_INVALID_TOPOLOGY, str(e)) from e
        validated_epoch = -1
        if configured.is_ready():
            validated_epoch = topology.epoch
            for owned in (hb.active_tasks, hb.standby_tasks, hb.warmup_tasks):
                _throw_if_invalid_tasks(configured, owned)
        configs = self.assignment_configs(group.group_id)
        bump = bump or hash_ != group.metadata_hash or validated_epoch != group.validated_topology_epoch or configs != group.last_assignment_configs
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append(metadata_record(group, group_epoch, hash_, validated_epoch, configs))

        # 4. A new target when the group epoch moved past it. The first member of an empty group
        # starts the initial rebalance delay (unless it runs already).
        initial_delay = initial_rebalance_key(group.group_id)
        if not group.members and initial_delay not in self._deadlines:
            delay = self.initial_rebalance_delay_ms_of(group.group_id)
            if delay > 0:
                timers.append(ScheduleTimer(initial_delay, now_ms + delay))
        delayed = initial_delay in self._deadlines or any(t.key == initial_delay for t in timers)
        members = dict(group.members)
        previous_target = dict(group.target_assignment)
        if replaced is not None:
            # The instance's new member id takes the place, and the target, of its old one.
            members.pop(replaced, None)
            previous_target[updated.member_id] = previous_target.pop(replaced, TasksTuple())
        members[updated.member_id] = updated
        # The offsets this heartbeat reports are what its assignment goes by, as in Kafka.
        task_offsets = dict(group.task_offsets)
        if hb.task_offsets is not None:
            task_offsets[updated.member_id] = hb.task_offsets
        target_epoch, targets = self._maybe_update_target_assignment(
            group,
            group_epoch,
            members,
            previous_target,
            task_offsets,
            configured if validated_epoch >= 0 else None,
            configs,
            now_ms,
            records,
            statuses,
            delayed=delayed,
        )
        target = targets.get(updated.member_id, TasksTuple())

        # 5. Reconciliation.
        owners = OwnerLookup(group.current_active_process, group.current_standby_processes, group.current_warmup_processes)
        try:
            reconciled = next_member(updated, target_epoch, target, owners, hb.owned())
        except FencedMemberError as e:
            raise GroupError(FENCED_MEMBER_EPOCH, str(e)) from e
        timers.append(self._session_timer(group.group_id, reconciled.member_id, now_ms))
        if reconciled != updated:
            records.append(current_assignment_record(group.group_id, reconciled))
            timers.append(self._rebalance_timer(group.group_id, reconciled, now_ms))
        result = self._apply(StreamsGroupResult(records, None, timers))
        # The group may have been created by the records just replayed: its soft state goes there.
        group = self.groups[hb.group_id]
        group.configured_topology = configured
        if hb.task_offsets is not None:
            group.task_offsets[reconciled.member_id] = hb.task_offsets
        if hb.shutdown_application:
            group.shutdown_request_member_id = reconciled.member_id

        response = StreamsGroupHeartbeatResponse(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms_of(group.group_id),
            acceptable_recovery_lag=self.acceptable_recovery_lag_of(group.group_id),
            task_offset_interval_ms=self.task_offset_interval_ms_of(group.group_id),
        )
        if joining or reconciled.assigned != member.assigned:
            assigned = reconciled.assigned
            response = replace(
                response,
                active_tasks=_sorted_tasks(assigned.active_tasks()),
                standby_tasks=_sorted_tasks(assigned.standby),
                warmup_tasks=_sorted_tasks(assigned.warmup),
            )
            if reconciled.user_endpoint is not None:
                group.endpoint_information_epoch += 1
        if group.endpoint_information_epoch != hb.endpoint_information_epoch:
            response = replace(response, partitions_by_user_endpoint=_endpoint_to_partitions(group, reconciled))
        response = replace(response, endpoint_information_epoch=group.endpoint_information_epoch)
        if configured.error is not None:
            statuses.append(Status(configured.error.status, configured.error.message))
            result.internal_topics = dict(configured.internal_topics_to_create)
        if group.shutdown_request_member_id is not None:
            statuses.append(
                Status(
                    SHUTDOWN_APPLICATION,
                    f"Streams group member {group.shutdown_request_member_id} encountered a fatal error and requested a shutdown for the entire application.",
                )
            )
        if api_version >= 1:
            statuses.extend(_missing_client_tags(configs, reconciled))
        if statuses:
            response = replace(response, status=tuple(statuses))
        result.response = response
        return result

    def _maybe_update_topology(self, group: StreamsGroup, topology: StreamsGroupTopologyValue | None, records: list[Record]) -> StreamsGroupTopologyValue:
        if topology is not None:
            if group.topology is None:
                records.append(topology_record(group.group_id, topology))
                return topology
            if group.topology.epoch > topology.epoch:
                # A member with an older topology runs on the group's (it is told STALE_TOPOLOGY).
                return group.topology
            if group.topology != topology:
                raise GroupError(INVALID_REQUEST, "Topology updates are not supported yet.")
            return group.topology
        if group.topology is None:
            raise GroupError(UNKNOWN_SERVER_ERROR, "The topology is null and the group topology is also null.")
        return group.topology

    def _maybe_update_target_assignment(
        self,
        group: StreamsGroup,
        group_epoch: int,
        members: Mapping[str, StreamsGroupMember],
        previous_target: Mapping[str, TasksTuple],
        task_offsets: Mapping[str, Mapping[str, Mapping[int, int]]],
        configured: ConfiguredTopology | None,
        configs: Mapping[str, str],
        now_ms: int,
        records: list[Record],
        statuses: list[Status] | None,
        *,
        delayed: bool,
    ) -> tuple[int, Mapping[str, TasksTuple]]:
        """maybeUpdateStreamsTargetAssignment: the target epoch and the targets the members
        reconcile towards. While the initial rebalance delay runs, no member has a target yet."""
        if delayed:
            if statuses is not None:
                statuses.append(Status(ASSIGNMENT_DELAYED, INITIAL_REBALANCE_DELAYED))
            return group.target_assignment_epoch, {}
        if group.target_assignment_epoch >= group_epoch:
            return group.target_assignment_epoch, previous_target
        if not can_compute_next_target_assignment(group.assignment_timestamp, self.assignment_interval_ms_of(group.group_id), now_ms):
            if statuses is not None:
                statuses.append(Status(ASSIGNMENT_DELAYED, ASSIGNMENT_INTERVAL_DELAYED))
            return group.target_assignment_epoch, previous_target
        return group_epoch, self._update_target_assignment(group, members, previous_target, task_offsets, configured, configs, group_epoch, now_ms, records)

    def _update_target_assignment(
        self,
        group: StreamsGroup,
        members: Mapping[str, StreamsGroupMember],
        previous_target: Mapping[str, TasksTuple],
        task_offsets: Mapping[str, Mapping[str, Mapping[int, int]]],
        configured: ConfiguredTopology | None,
        configs: Mapping[str, str],
        epoch: int,
        now_ms: int,
        records: list[Record],
    ) -> dict[str, TasksTuple]:
        """A new target for every member; only the members whose target changed get a record.
        Before the topology is validated there are no tasks to assign."""
        subtopologies: dict[str, streams_assignor.TopologySubtopology] = {}
        if configured is not None and configured.subtopologies is not None:
            subtopologies = {
                s: streams_assignor.TopologySubtopology(c.num_tasks, bool(c.changelog_topics)) for s, c in sorted(configured.subtopologies.items())
            }
        specs = {}
        for member_id, m in members.items():
            previous = previous_target.get(member_id, TasksTuple())
            specs[member_id] = streams_assignor.AssignmentMemberSpec(
                process_id=m.process_id,
                active_tasks=previous.active,
                standby_tasks=previous.standby,
                warmup_tasks=previous.warmup,
                task_offsets=task_offsets.get(member_id, {}),
            )
        try:
            assigned = streams_assignor.assign(specs, subtopologies, int(configs[streams_assignor.NUM_STANDBY_REPLICAS_CONFIG]))
        except Exception as e:  # an assignor bug must not take the coordinator down
            raise GroupError(UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for epoch {epoch}: {e}") from e
        new_target = {m: TasksTuple(a.active_tasks, a.standby_tasks, {}) for m, a in assigned.items()}
        for member_id in sorted(new_target):
            if previous_target.get(member_id) != new_target[member_id]:
                records.append(target_assignment_record(group.group_id, member_id, new_target[member_id]))
        records.append(target_assignment_epoch_record(group.group_id, epoch, now_ms))
        return new_target

    def _dynamic_member(self, group: StreamsGroup, hb: StreamsGroupHeartbeat, joining: bool) -> StreamsGroupMember:
        member = group.members.get(hb.member_id)
        if member is None:
            if not joining:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Member {hb.member_id} is not a member of group {group.group_id}.")
            return StreamsGroupMember(hb.member_id)
        _throw_if_member_epoch_is_invalid(member, hb)
        return member

    def _static_member(
        self, group: StreamsGroup, hb: StreamsGroupHeartbeat, joining: bool, records: list[Record], timers: list[TimerAction]
    ) -> tuple[StreamsGroupMember, str | None]:
        """getOrMaybeCreateStaticStreamsGroupMember: the member and, when the instance comes back
        under a new member id, the member id it replaces."""
        assert hb.instance_id is not None
        existing = group.static_member(hb.instance_id)
        if not joining:
            if existing is None:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
            throw_if_instance_id_is_fenced(existing, hb.member_id, hb.instance_id)
            _throw_if_member_epoch_is_invalid(existing, hb)
            return existing, None
        if existing is None:
            return group.members.get(hb.member_id) or StreamsGroupMember(hb.member_id, instance_id=hb.instance_id), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(
                UNRELEASED_INSTANCE_ID,
                f"Static member {hb.member_id} with instance id {hb.instance_id} cannot join the group because the instance id "
                f"is owned by {existing.member_id} member.",
            )
        # The instance comes back under a new member id: it takes over the previous member, tasks
        # included, so that nothing moves.
        replacement = replace(existing, member_id=hb.member_id, member_epoch=0, previous_member_epoch=0)
        records.extend(member_tombstones(group.group_id, existing.member_id))
        records.append(member_metadata_record(group.group_id, replacement))
        records.append(target_assignment_record(group.group_id, hb.member_id, group.target_assignment.get(existing.member_id, TasksTuple())))
        records.append(current_assignment_record(group.group_id, replacement))
        timers.extend(self._cancel_timers(group.group_id, existing.member_id))
        return replacement, existing.member_id

    # -- leaving and fencing -----------------------------------------------------------------------

    def _leave(self, hb: StreamsGroupHeartbeat) -> StreamsGroupResult[StreamsGroupHeartbeatResponse]:
        group = self._group(hb.group_id, create=False)
        response = StreamsGroupHeartbeatResponse(member_id=hb.member_id, member_epoch=hb.member_epoch, status=())
        member: StreamsGroupMember = self._leaving_member(group, hb.member_id, hb.instance_id)
        if hb.instance_id is None or hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._fence_member(group, member, response)
        # A static member that leaves for a while keeps its tasks (nobody else gets them) until its
        # session times out or it comes back; the epochs of its active tasks go to 0, as Kafka's
        # streamsGroupStaticMemberGroupLeave resets them.
        active = {s: dict.fromkeys(ps, 0) for s, ps in member.assigned.active.items()}
        leaving = replace(
            member,
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            pending_revocation=AssignedTasks(),
            assigned=replace(member.assigned, active=active),
        )
        return self._apply(
            StreamsGroupResult([current_assignment_record(group.group_id, leaving)], replace(response, member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH))
        )

    def _fence_member(self, group: StreamsGroup, member: StreamsGroupMember, response: Response | None) -> StreamsGroupResult[Response]:
        """Remove the member and bump the group epoch; the others get a new target at their next
        heartbeat. The last member leaving also moves the target epoch, so the empty group is settled."""
        records = member_tombstones(group.group_id, member.member_id)
        epoch = group.group_epoch + 1
        records.append(metadata_record(group, epoch, group.metadata_hash, group.validated_topology_epoch, group.last_assignment_configs))
        if len(group.members) == 1:
            records.append(target_assignment_epoch_record(group.group_id, epoch, 0))
        return self._apply(StreamsGroupResult(records, response, self._cancel_timers(group.group_id, member.member_id)))

    # -- StreamsGroupDescribe ---------------------------------------------------------------------

    def described_group(self, group_id: str) -> StreamsGroup:
        """The group StreamsGroupDescribe answers with, or GroupError (GROUP_ID_NOT_FOUND) in
        Kafka's words for an unknown id or one of another group type."""
        return self._existing_group(group_id)

    # -- timers ------------------------------------------------------------------------------------

    def _revoking(self, member: StreamsGroupMember) -> bool:
        return member.state is MemberState.UNREVOKED_TASKS

    def _on_group_timer(self, key: tuple[str, ...], now_ms: int) -> StreamsGroupResult[None]:
        """computeDelayedTargetAssignment: the initial rebalance delay is over; the target is
        computed for the members there are now (they get it at their next heartbeat)."""
        kind, group_id = key
        group = self.groups.get(group_id)
        if kind != INITIAL_REBALANCE_TIMER or group is None or not group.members:
            log.info("streams_group.delayed_assignment_skipped", group=group_id, reason="the group is gone or empty")
            return StreamsGroupResult()
        configured = group.configured_topology
        if configured is None or group.group_epoch <= group.target_assignment_epoch:
            log.warning("streams_group.delayed_assignment_skipped", group=group_id, reason="no configured topology or nothing to assign")
            return StreamsGroupResult()
        records: list[Record] = []
        configs = group.last_assignment_configs if group.last_assignment_configs is not None else self.assignment_configs(group_id)
        try:
            self._maybe_update_target_assignment(
                group,
                group.group_epoch,
                group.members,
                group.target_assignment,
                group.task_offsets,
                configured if configured.is_ready() else None,
                configs,
                now_ms,
                records,
                None,
                delayed=False,
            )
        except GroupError as e:
            log.error("streams_group.delayed_assignment_failed", group=group_id, error=e.message)
            return StreamsGroupResult()
        return self._apply(StreamsGroupResult(records))

    # -- admin -------------------------------------------------------------------------------------

    def _group_tombstones(self, group: StreamsGroup) -> list[Record]:
        """Its internal topics stay, as in Kafka."""
        return group_tombstones(group)

    # -- records -----------------------------------------------------------------------------------

    def replay(self, key: object, value: object | None) -> None:
        """Apply one record of the partition; records of other kinds are ignored."""
        match key:
            case StreamsGroupMetadataKey(group_id=group_id):
                if isinstance(value, StreamsGroupMetadataValue):
                    group = self._persisted_group(group_id)
                    group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
                    group.validated_topology_epoch = value.validated_topology_epoch
                    configs = value.last_assignment_configs
                    group.last_assignment_configs = None if configs is None else {c.key: c.value for c in configs}
                    group.stored_description_topology_epoch = value.stored_description_topology_epoch
                    group.failed_description_topology_epoch = value.failed_description_topology_epoch
                else:
                    self.groups.pop(group_id, None)
            case StreamsGroupTopologyKey(group_id=group_id):
                if isinstance(value, StreamsGroupTopologyValue):
                    self._persisted_group(group_id).topology = value
                elif group_id in self.groups:
                    self.groups[group_id].topology = None
            case StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id):
                if isinstance(value, StreamsGroupMemberMetadataValue):
                    self._replay_member(
                        group_id,
                        member_id,
                        instance_id=value.instance_id,
                        rack_id=value.rack_id,
                        client_id=value.client_id,
                        client_host=value.client_host,
                        rebalance_timeout_ms=value.rebalance_timeout_ms,
                        topology_epoch=value.topology_epoch,
                        process_id=value.process_id,
                        user_endpoint=value.user_endpoint,
                        client_tags={kv.key: kv.value for kv in value.client_tags},
                    )
                else:
                    self._replay_member_tombstone(group_id, member_id)
            case StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id):
                target = None
                if isinstance(value, StreamsGroupTargetAssignmentMemberValue):
                    target = TasksTuple(
                        tasks((t.subtopology_id, t.partitions) for t in value.active_tasks),
                        tasks((t.subtopology_id, t.partitions) for t in value.standby_tasks),
                        tasks((t.subtopology_id, t.partitions) for t in value.warmup_tasks),
                    )
                self._replay_target_assignment(group_id, member_id, target)
            case StreamsGroupTargetAssignmentMetadataKey(group_id=group_id):
                epoch = value.assignment_epoch if isinstance(value, StreamsGroupTargetAssignmentMetadataValue) else None
                self._replay_target_assignment_epoch(group_id, epoch)
                if group_id in self.groups:
                    self.groups[group_id].assignment_timestamp = value.assignment_timestamp if isinstance(value, StreamsGroupTargetAssignmentMetadataValue) else 0
            case StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id):
                if isinstance(value, StreamsGroupCurrentMemberAssignmentValue):
                    self._replay_member(
                        group_id,
                        member_id,
                        member_epoch=value.member_epoch,
                        previous_member_epoch=value.previous_member_epoch,
                        state=MemberState.from_value(value.state),
                        assigned=_assigned_from_record(value.active_tasks, value.standby_tasks, value.warmup_tasks, value.member_epoch),
                        pending_revocation=_assigned_from_record(
                            value.active_tasks_pending_revocation, value.standby_tasks_pending_revocation, value.warmup_tasks_pending_revocation, value.member_epoch
                        ),
                    )
                else:
                    self._replay_assignment_tombstone(
                        group_id,
                        member_id,
                        member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned=AssignedTasks(),
                        pending_revocation=AssignedTasks(),
                    )


# -- helpers ---------------------------------------------------------------------------------------


def _assigned_from_record(active: Iterable[Any], standby: Iterable[Any], warmup: Iterable[Any], member_epoch: int) -> AssignedTasks:
    return AssignedTasks(
        active_from_record(active, member_epoch),
        tasks((t.subtopology_id, t.partitions) for t in standby),
        tasks((t.subtopology_id, t.partitions) for t in warmup),
    )


def _sorted_tasks(tasks_: Tasks) -> dict[str, tuple[int, ...]]:
    return {s: tuple(sorted(ps)) for s, ps in sorted(tasks_.items())}


def _endpoint_to_partitions(group: StreamsGroup, updated: StreamsGroupMember) -> tuple[EndpointToPartitions, ...]:
    """Kafka's EndpointToPartitionsManager: for each member with a user endpoint, the partitions of
    its tasks' input topics (active and standby), the updated member last."""
    configured = group.configured_topology
    if configured is None or configured.subtopologies is None:
        return ()
    subtopologies = configured.subtopologies
    ordered = [m for m_id, m in group.members.items() if m_id != updated.member_id] + [updated]
    out = []
    for member in ordered:
        if member.user_endpoint is None:
            continue

        def partitions(role: Tasks) -> dict[str, tuple[int, ...]]:
            by_topic: dict[str, set[int]] = {}
            for s, ps in role.items():
                sub = subtopologies.get(s)
                if sub is None:
                    continue
                for topic in sorted(sub.source_topics | set(sub.repartition_source_topics)):
                    by_topic.setdefault(topic, set()).update(ps)
            return {t: tuple(sorted(ps)) for t, ps in sorted(by_topic.items())}

        out.append(EndpointToPartitions(member.user_endpoint, partitions(member.assigned.active_tasks()), partitions(member.assigned.standby)))
    return tuple(out)


def _missing_client_tags(configs: Mapping[str, str], member: StreamsGroupMember) -> list[Status]:
    """The rack-aware assignment tags the member's client tags lack (Kafka tells v1+ members)."""
    wanted = configs.get(streams_assignor.RACK_AWARE_ASSIGNMENT_TAGS_CONFIG, "").strip()
    if not wanted:
        return []
    missing = [tag for tag in re.split(r"\s*,\s*", wanted) if tag not in member.client_tags]
    if not missing:
        return []
    return [
        Status(
            MISSING_CLIENT_TAGS,
            f"Missing required client tags for rack-aware standby assignment: [{', '.join(missing)}]. "
            "Configure them via 'client.tag.<tagKey>' in your Streams config.",
        )
    ]


def _validate(hb: StreamsGroupHeartbeat) -> None:
    """Kafka 4.4's throwIfStreamsGroupHeartbeatRequestIsInvalid (and its unsupported-features check)."""
    throw_if_empty_string(hb.member_id, "MemberId can't be empty.")
    throw_if_empty_string(hb.group_id, "GroupId can't be empty.")
    throw_if_empty_string(hb.instance_id, "InstanceId can't be empty.")
    throw_if_empty_string(hb.rack_id, "RackId can't be empty.")
    if hb.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if hb.rebalance_timeout_ms == -1:
            raise GroupError(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        for owned, name in ((hb.active_tasks, "ActiveTasks"), (hb.standby_tasks, "StandbyTasks"), (hb.warmup_tasks, "WarmupTasks")):
            if owned is None or owned:
                raise GroupError(INVALID_REQUEST, f"{name} must be empty when (re-)joining.")
        if hb.topology is None:
            raise GroupError(INVALID_REQUEST, "Topology must be non-null when (re-)joining.")
        for s in hb.topology.subtopologies:
            for changelog in s.state_changelog_topics:
                if changelog.partitions != 0:
                    raise GroupError(
                        STREAMS_INVALID_TOPOLOGY, f"Changelog topic {changelog.name} must have an undefined partition count, but it is set to {changelog.partitions}."
                    )
    elif hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if hb.instance_id is None:
            raise GroupError(INVALID_REQUEST, "InstanceId can't be null.")
    elif hb.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise GroupError(INVALID_REQUEST, f"MemberEpoch is {hb.member_epoch}, but must be greater than or equal to -2.")
    if (hb.active_tasks, hb.standby_tasks, hb.warmup_tasks) != (None, None, None) and None in (hb.active_tasks, hb.standby_tasks, hb.warmup_tasks):
        raise GroupError(INVALID_REQUEST, "If one task-type is non-null, all must be non-null.")
    if hb.member_epoch != JOIN_GROUP_MEMBER_EPOCH and hb.topology is not None:
        raise GroupError(INVALID_REQUEST, "Topology can only be provided when (re-)joining.")
    if hb.uses_source_topic_regex:
        raise GroupError(INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")


def _throw_if_member_epoch_is_invalid(member: StreamsGroupMember, hb: StreamsGroupHeartbeat) -> None:
    def owns_only_what_it_was_given() -> bool:
        assigned = member.assigned
        return is_subset(hb.active_tasks, assigned.active_tasks()) and is_subset(hb.standby_tasks, assigned.standby) and is_subset(hb.warmup_tasks, assigned.warmup)

    throw_if_member_epoch_is_invalid("streams", member, hb.member_epoch, owns_only_what_it_was_given)


def _throw_if_invalid_tasks(configured: ConfiguredTopology, owned: Tasks | None) -> None:
    """throwIfRequestContainsInvalidTasks: owned tasks must exist in the configured topology."""
    assert configured.subtopologies is not None
    for s, ps in sorted((owned or {}).items()):
        sub = configured.subtopologies.get(s)
        if sub is None:
            raise GroupError(STREAMS_INVALID_TOPOLOGY, f"Subtopology {s} does not exist in the topology.")
        for p in sorted(ps):
            if p < 0 or p >= sub.num_tasks:
                raise GroupError(STREAMS_INVALID_TOPOLOGY, f"Task {p} for subtopology {s} is invalid. Number of tasks for this subtopology: {sub.num_tasks}")
