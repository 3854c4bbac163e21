"""A streams group (KIP-1071) and its members, sans-IO: Kafka 4.4's StreamsGroup, StreamsGroupMember,
StreamsTopology with its InternalTopicManager (which topics a topology needs, how many partitions
its internal topics get), the streams CurrentAssignmentBuilder, and the records that persist them
(StreamsCoordinatorRecordHelpers).

A streams group works in tasks, not partitions: a task is (subtopology id, partition), and a
member's assignment is three sets of tasks, active, standby and warm-up. One topology, initialized
by the first member to join, tells which topics each subtopology reads (source and repartition
topics) and which changelog topics hold its state. A group is NOT_READY until that topology has
been validated against the topics that exist (its source topics exist, its internal topics exist
with the partition counts it needs): only then are tasks assigned.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from broker.group.streams_group_records import (
    NO_TOPOLOGY_EPOCH,
    Endpoint,
    KeyValue,
    LastAssignmentConfig,
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
    StreamsTopicInfo,
    Subtopology,
    TaskIds,
    TaskIdsWithEpochs,
)
from broker.java_hash_map import java_hash_map_order

Record = tuple[object, object | None]
Tasks = Mapping[str, frozenset[int]]
"""Subtopology id -> partitions; a subtopology with no task is left out, so equal values compare equal."""
ActiveTasks = Mapping[str, Mapping[int, int]]
"""Subtopology id -> partition -> the epoch at which the member got the active task."""
Topics = Mapping[str, tuple[uuid.UUID, int]]
"""Topic name -> (topic id, partition count): the topics that exist."""

STREAMS_PROTOCOL_TYPE = "streams"

# StreamsGroupHeartbeatResponse.Status codes.
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
MISSING_CLIENT_TAGS = 6  # answered to StreamsGroupHeartbeat v1+ only (KAFKA-20744)


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.IntEnum):
    """The values of StreamsGroupCurrentMemberAssignmentValue.State (they differ from the consumer group's)."""

    STABLE = 1
    UNREVOKED_TASKS = 2
    UNRELEASED_TASKS = 3
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        # A state written by a newer coordinator is kept as UNKNOWN; the member is then fenced.
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class TasksTuple:
    """A target assignment: active, standby and warm-up tasks."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)


@dataclass(frozen=True, slots=True)
class AssignedTasks:
    """Kafka's TasksTupleWithEpochs: what a member holds, its active tasks with their assignment epochs."""

    active: ActiveTasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def active_tasks(self) -> Tasks:
        return {s: frozenset(ps) for s, ps in self.active.items()}


EMPTY_TASKS = AssignedTasks()


def tasks(entries: Iterable[tuple[str, Iterable[int]]]) -> dict[str, frozenset[int]]:
    """Task sets from (subtopology, partitions) pairs, merged, empty subtopologies left out."""
    merged: dict[str, set[int]] = {}
    for subtopology, partitions in entries:
        merged.setdefault(subtopology, set()).update(partitions)
    return {s: frozenset(ps) for s, ps in merged.items() if ps}


def _contains_any(owned: TasksTuple, held: AssignedTasks) -> bool:
    return any(
        owned_role.get(s, frozenset()) & frozenset(ps)
        for owned_role, held_role in ((owned.active, held.active), (owned.standby, held.standby), (owned.warmup, held.warmup))
        for s, ps in held_role.items()
    )


@dataclass(frozen=True, slots=True)
class StreamsGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: Endpoint | None = None
    client_tags: Mapping[str, str] = field(default_factory=dict)
    assigned: AssignedTasks = EMPTY_TASKS
    pending_revocation: AssignedTasks = EMPTY_TASKS

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def metadata(self) -> tuple[object, ...]:
        """What StreamsGroupMemberMetadataValue persists: a change of it bumps the group epoch."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
        )


# -- topology -------------------------------------------------------------------------------------


class TopicConfigurationError(Exception):
    """Kafka's TopicConfigurationException: the topology cannot run on the topics as they are;
    ``status`` is the StreamsGroupHeartbeat status code that tells the members why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StreamsInvalidTopologyError(Exception):
    """Kafka's StreamsInvalidTopologyException (STREAMS_INVALID_TOPOLOGY)."""


@dataclass(frozen=True, slots=True)
class ConfiguredSubtopology:
    num_tasks: int
    source_topics: frozenset[str]
    repartition_source_topics: Mapping[str, int]  # name -> partitions
    changelog_topics: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A topic the shell must create (CreateTopics): replication factor -1 is the broker default."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    """Kafka's ConfiguredTopology: the topology checked against the topics that exist.
    ``subtopologies`` is None when the topics cannot run it at all."""

    topology_epoch: int
    subtopologies: Mapping[str, ConfiguredSubtopology] | None
    internal_topics_to_create: Mapping[str, InternalTopic]
    error: TopicConfigurationError | None

    def is_ready(self) -> bool:
        return self.subtopologies is not None and not self.internal_topics_to_create and self.error is None


def required_topics(topology: StreamsGroupTopologyValue) -> set[str]:
    """Every topic the topology reads or writes: the topics its metadata hash covers."""
    names: set[str] = set()
    for s in topology.subtopologies:
        names.update(s.source_topics, s.repartition_sink_topics)
        names.update(t.name for t in s.repartition_source_topics)
        names.update(t.name for t in s.state_changelog_topics)
    return names


def _summarize(names: Iterable[str]) -> str:
    listed = list(names)
    if not listed:
        return "<none>"
    more = f" and {len(listed) - 3} additional topics" if len(listed) > 3 else ""
    return ", ".join(listed[:3]) + more


def creatable_topics_order(topology: StreamsGroupTopologyValue, missing: Iterable[str]) -> list[str]:
    """The missing internal topics in the order of Kafka's creatableTopics: the HashMap that
    InternalTopicManager.missingInternalTopics fills with every internal topic of the topology
    (subtopologies by id, each one's repartition source topics then its changelog topics, each
    from a HashMap of their own) before it takes out the ones that exist."""
    put: list[str] = []
    for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id):
        put += java_hash_map_order(t.name for t in s.repartition_source_topics)
        put += java_hash_map_order(t.name for t in s.state_changelog_topics)
    wanted = set(missing)
    return [name for name in java_hash_map_order(put) if name in wanted]


def configure_topics(topology: StreamsGroupTopologyValue, topics: Topics) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics."""
    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if t not in topics})
        if missing:
            raise TopicConfigurationError(MISSING_SOURCE_TOPICS, f"Source topics {_summarize(missing)} are missing.")
        decided = _decide_partition_counts(topology, topics)
        configured = {s.subtopology_id: _configured_subtopology(s, topics, decided) for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id)}
        to_create: dict[str, InternalTopic] = {}
        for s in topology.subtopologies:
            for info in (*s.repartition_source_topics, *s.state_changelog_topics):
                to_create[info.name] = _internal_topic(info, decided)
        for name in sorted(required_topics(topology)):
            if name in topics and name in to_create:
                expected = to_create.pop(name)
                if topics[name][1] != expected.num_partitions:
                    raise TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Existing topic {name} has different number of partitions: expected {expected.num_partitions}, found {topics[name][1]}",
                    )
        error = None
        if to_create:
            error = TopicConfigurationError(MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {_summarize(creatable_topics_order(topology, to_create))}")
        return ConfiguredTopology(topology.epoch, configured, to_create, error)
    except TopicConfigurationError as e:
        return ConfiguredTopology(topology.epoch, None, {}, e)


def _partition_count(name: str, topics: Topics, decided: Mapping[str, int]) -> int | None:
    if name in topics:
        return topics[name][1]
    return decided.get(name)


def _decide_partition_counts(topology: StreamsGroupTopologyValue, topics: Topics) -> dict[str, int]:
    """Repartition topics without a fixed count take the largest input of the subtopologies that
    write to them; co-partitioned topics must agree; a changelog topic has one partition per task."""
    decided: dict[str, int] = {}
    repartition: dict[str, int] = {}  # 0: not decided yet
    for s in topology.subtopologies:
        for info in s.repartition_source_topics:
            repartition[info.name] = info.partitions
    needed = True
    while needed:
        needed, progress = False, False
        for name, count in repartition.items():
            if count:
                continue
            candidate = None
            for writer in topology.subtopologies:
                if name not in writer.repartition_sink_topics:
                    continue
                for upstream in (*writer.source_topics, *(t.name for t in writer.repartition_source_topics)):
                    n = repartition.get(upstream) if upstream in repartition else _partition_count(upstream, topics, {})
                    if n and (candidate is None or n > candidate):
                        candidate = n
            if candidate is None:
                needed = True
            else:
                repartition[name] = candidate
                progress = True
        if needed and not progress:
            raise StreamsInvalidTopologyError(
                "Failed to compute number of partitions for all repartition topics, make sure all user input topics are created "
                "and all Pattern subscriptions match at least one topic in the cluster"
            )
    decided.update(repartition)
    fixed = {info.name for s in topology.subtopologies for info in s.repartition_source_topics if info.partitions}
    for s in topology.subtopologies:
        for group in s.copartition_groups:
            names = {s.source_topics[i] for i in group.source_topics} | {s.repartition_source_topics[i].name for i in group.repartition_source_topics}
            decided.update(_enforce_copartitioning(names, fixed, set(repartition), topics, decided))
    for s in topology.subtopologies:
        num_tasks = max((_partition_count(t, topics, decided) or 0 for t in (*s.source_topics, *(i.name for i in s.repartition_source_topics))), default=0)
        for info in s.state_changelog_topics:
            decided[info.name] = num_tasks
    return decided


def _enforce_copartitioning(names: set[str], fixed: set[str], repartition: set[str], topics: Topics, decided: Mapping[str, int]) -> dict[str, int]:
    """Kafka's CopartitionedTopicsEnforcer: external topics of a co-partition group must have the
    same partition count; flexible repartition topics take it."""
    if not names:
        return {}
    external = {n: _partition_count(n, topics, decided) or 0 for n in names - repartition}
    internal = names & repartition
    if external:
        counts = set(external.values())
        if len(counts) > 1:
            raise TopicConfigurationError(INCORRECTLY_PARTITIONED_TOPICS, f"Topics not co-partitioned: [{', '.join(f'{k}={v}' for k, v in sorted(external.items()))}]")
        count = counts.pop()
    elif internal & fixed:
        counts = {decided[n] for n in internal & fixed}
        if len(counts) > 1:
            raise TopicConfigurationError(
                INCORRECTLY_PARTITIONED_TOPICS,
                f"Following topics do not have the same number of partitions: [{', '.join(f'{n}={decided[n]}' for n in sorted(internal))}]",
            )
        count = counts.pop()
    else:
        count = max(decided.get(n, 0) for n in internal)
    for name in sorted(internal & fixed):
        if decided[name] != count:
            raise TopicConfigurationError(
                INCORRECTLY_PARTITIONED_TOPICS,
                f"Number of partitions [{decided[name]}] of repartition topic [{name}] doesn't match number of partitions [{count}] of the source topic.",
            )
    return {n: count for n in internal - fixed}


def _configured_subtopology(s: Subtopology, topics: Topics, decided: Mapping[str, int]) -> ConfiguredSubtopology:
    inputs = (*s.source_topics, *(t.name for t in s.repartition_source_topics))
    return ConfiguredSubtopology(
        num_tasks=max((_partition_count(t, topics, decided) or 0 for t in inputs), default=0),
        source_topics=frozenset(s.source_topics),
        repartition_source_topics={t.name: t.partitions or decided[t.name] for t in s.repartition_source_topics},
        changelog_topics={t.name: decided[t.name] for t in s.state_changelog_topics},
    )


def _internal_topic(info: StreamsTopicInfo, decided: Mapping[str, int]) -> InternalTopic:
    return InternalTopic(
        name=info.name,
        num_partitions=info.partitions or decided[info.name],
        replication_factor=info.replication_factor or -1,
        configs={c.key: c.value for c in info.topic_configs},
    )


# -- the group --------------------------------------------------------------------------------------


TaskId = tuple[str, int]


# Kafka 4.4's StreamsGroup starts at group epoch 1 and target assignment epoch 1
# (TargetAssignmentMetadata.INITIAL), so that a member still at epoch 0 is always joining: within
# the initial rebalance delay the first member reconciles to epoch 1, not 0.
INITIAL_EPOCH = 1


@dataclass(eq=True)
class StreamsGroup:
    group_id: str
    group_epoch: int = INITIAL_EPOCH
    metadata_hash: int = 0
    validated_topology_epoch: int = NO_TOPOLOGY_EPOCH
    last_assignment_configs: Mapping[str, str] | None = None
    stored_description_topology_epoch: int = NO_TOPOLOGY_EPOCH
    failed_description_topology_epoch: int = NO_TOPOLOGY_EPOCH
    topology: StreamsGroupTopologyValue | None = None
    members: dict[str, StreamsGroupMember] = field(default_factory=dict)
    target_assignment_epoch: int = INITIAL_EPOCH
    assignment_timestamp: int = 0  # when the target was computed: the assignment interval counts from it
    target_assignment: dict[str, TasksTuple] = field(default_factory=dict)
    # Which process holds each task now (assigned or still being revoked), derived from the members.
    active_owner: dict[TaskId, str] = field(default_factory=dict)
    standby_owners: dict[TaskId, set[str]] = field(default_factory=dict)
    warmup_owners: dict[TaskId, set[str]] = field(default_factory=dict)
    # Soft state, rebuilt from heartbeats: never written.
    configured_topology: ConfiguredTopology | None = field(default=None, compare=False)
    endpoint_information_epoch: int = field(default=0, compare=False)
    shutdown_request_member_id: str | None = field(default=None, compare=False)
    task_offsets: dict[str, Mapping[str, Mapping[int, int]]] = field(default_factory=dict, compare=False)

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.target_assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.target_assignment_epoch) for m in self.members.values()):
            return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def copy(self) -> StreamsGroup:
        """A copy to revert to: containers copied, members and assignments (immutable) shared."""
        return replace(
            self,
            members=dict(self.members),
            target_assignment=dict(self.target_assignment),
            active_owner=dict(self.active_owner),
            standby_owners={t: set(ps) for t, ps in self.standby_owners.items()},
            warmup_owners={t: set(ps) for t, ps in self.warmup_owners.items()},
            task_offsets=dict(self.task_offsets),
        )

    def static_member(self, instance_id: str) -> StreamsGroupMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def current_active_process(self, subtopology: str, partition: int) -> str | None:
        return self.active_owner.get((subtopology, partition))

    def current_standby_processes(self, subtopology: str, partition: int) -> set[str]:
        return self.standby_owners.get((subtopology, partition), set())

    def current_warmup_processes(self, subtopology: str, partition: int) -> set[str]:
        return self.warmup_owners.get((subtopology, partition), set())

    def update_member(self, member: StreamsGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        self._hold(member)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
        self.task_offsets.pop(member_id, None)
        if not self.members:
            self.shutdown_request_member_id = None

    def _hold(self, member: StreamsGroupMember) -> None:
        for held in (member.assigned, member.pending_revocation):
            for s, ps in held.active.items():
                for p in ps:
                    self.active_owner[(s, p)] = member.process_id
            for owners, role in ((self.standby_owners, held.standby), (self.warmup_owners, held.warmup)):
                for s, partitions in role.items():
                    for p in partitions:
                        owners.setdefault((s, p), set()).add(member.process_id)

    def _release(self, member: StreamsGroupMember) -> None:
        for held in (member.assigned, member.pending_revocation):
            for s, ps in held.active.items():
                for p in ps:
                    if self.active_owner.get((s, p)) == member.process_id:
                        del self.active_owner[(s, p)]
            for owners, role in ((self.standby_owners, held.standby), (self.warmup_owners, held.warmup)):
                for s, partitions in role.items():
                    for p in partitions:
                        holders = owners.get((s, p))
                        if holders is not None:
                            holders.discard(member.process_id)
                            if not holders:
                                del owners[(s, p)]


# -- reconciliation ---------------------------------------------------------------------------------


class FencedMemberError(Exception):
    """The member is in a state this coordinator does not know: it must rejoin."""


@dataclass(frozen=True, slots=True)
class OwnerLookup:
    active: Callable[[str, int], str | None]
    standby: Callable[[str, int], set[str]]
    warmup: Callable[[str, int], set[str]]


def next_member(
    member: StreamsGroupMember, target_epoch: int, target: TasksTuple, owners: OwnerLookup, owned: TasksTuple | None
) -> StreamsGroupMember:
    """Kafka 4.4's streams CurrentAssignmentBuilder.build: a task leaves its old member (which
    must confirm it no longer owns it) before another gets it; a member's own standby or warm-up
    becomes its active task in place, and an active task it loses stays on as a standby at once."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _compute_next(member, member.member_epoch, target_epoch, target, owners, owned)
    if member.state is MemberState.UNREVOKED_TASKS:
        if _has_not_released(owned, member.pending_revocation):
            return member
        return _compute_next(member, member.member_epoch + 1, target_epoch, target, owners, owned)
    if member.state is MemberState.UNRELEASED_TASKS:
        return _compute_next(member, member.member_epoch, target_epoch, target, owners, owned)
    if owned is None or not owned.is_empty():
        raise FencedMemberError("The streams group member is in a unknown state. The member must abandon all its tasks and rejoin.")
    return _compute_next(member, target_epoch, target_epoch, target, owners, owned)


def _has_not_released(owned: TasksTuple | None, pending: AssignedTasks) -> bool:
    # Revocation is acknowledged only by a heartbeat that lists what the member owns.
    return owned is None or _contains_any(owned, pending)


def _difference(
    current: Mapping[str, Iterable[int]], target: Tasks, unreleased: Callable[[str, int], bool]
) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, set[int]], bool]:
    """(kept, pending revocation, pending assignment, some target task is still held elsewhere)."""
    kept: dict[str, set[int]] = {}
    revoked: dict[str, set[int]] = {}
    assignable: dict[str, set[int]] = {}
    has_unreleased = False
    for s in set(current) | set(target):
        have = set(current.get(s, ()))
        want = target.get(s, frozenset())
        keep, drop = have & want, have - want
        new = set()
        for p in want - keep:
            if unreleased(s, p):
                has_unreleased = True
            else:
                new.add(p)
        if keep:
            kept[s] = keep
        if drop:
            revoked[s] = drop
        if new:
            assignable[s] = new
    return kept, revoked, assignable, has_unreleased


def _compute_next(
    member: StreamsGroupMember, member_epoch: int, target_epoch: int, target: TasksTuple, owners: OwnerLookup, owned: TasksTuple | None
) -> StreamsGroupMember:
    held = member.assigned
    pid = member.process_id

    def held_elsewhere_on_process(lookup: Callable[[str, int], set[str]], mine: Tasks, s: str, p: int) -> bool:
        return pid in lookup(s, p) and p not in mine.get(s, frozenset())

    def active_unreleased(s: str, p: int) -> bool:
        return owners.active(s, p) is not None or held_elsewhere_on_process(owners.standby, held.standby, s, p) or held_elsewhere_on_process(owners.warmup, held.warmup, s, p)

    def standby_unreleased(s: str, p: int) -> bool:
        run_by_other = owners.active(s, p) == pid and p not in held.active.get(s, {})
        return run_by_other or pid in owners.standby(s, p) or held_elsewhere_on_process(owners.warmup, held.warmup, s, p)

    def warmup_unreleased(s: str, p: int) -> bool:
        return owners.active(s, p) == pid or held_elsewhere_on_process(owners.standby, held.standby, s, p) or pid in owners.warmup(s, p)

    active_kept, active_revoked, active_new, u1 = _difference(held.active, target.active, active_unreleased)
    standby_kept, standby_revoked, standby_new, u2 = _difference(held.standby, target.standby, standby_unreleased)
    warmup_kept, warmup_revoked, warmup_new, u3 = _difference(held.warmup, target.warmup, warmup_unreleased)

    # Role changes that depend on no other member take effect at once, so the client recycles the task.
    for s, ps in held.active.items():
        for p in ps:
            _grant_now(standby_new, standby_kept, s, p)
    for outgoing, revoked, incoming_new, incoming_kept in ((held.standby, standby_revoked, warmup_new, warmup_kept), (held.warmup, warmup_revoked, standby_new, standby_kept)):
        for s, ps in outgoing.items():
            for p in ps:
                if _grant_now(incoming_new, incoming_kept, s, p):
                    _discard(revoked, s, p)
    # A standby or warm-up promoted to active needs no revocation; it stays until the active task is granted.
    for role, revoked in ((held.standby, standby_revoked), (held.warmup, warmup_revoked)):
        for s, ps in role.items():
            for p in ps:
                if p in target.active.get(s, frozenset()):
                    _discard(revoked, s, p)
    pending_revocation = AssignedTasks(
        {s: {p: held.active[s][p] for p in ps} for s, ps in active_revoked.items()}, _frozen(standby_revoked), _frozen(warmup_revoked)
    )
    to_revoke = not pending_revocation.is_empty() and _has_not_released(owned, pending_revocation)
    for role, kept in ((held.standby, standby_kept), (held.warmup, warmup_kept)):
        for s, ps in role.items():
            for p in ps:
                promoted_now = not to_revoke and p in active_new.get(s, set())
                if p in target.active.get(s, frozenset()) and not promoted_now:
                    kept.setdefault(s, set()).add(p)

    assigned = AssignedTasks({s: {p: held.active[s][p] for p in ps} for s, ps in active_kept.items()}, _frozen(standby_kept), _frozen(warmup_kept))
    if to_revoke:
        return _moved(member, MemberState.UNREVOKED_TASKS, member_epoch, assigned, pending_revocation)
    pending_assignment = AssignedTasks({s: dict.fromkeys(ps, target_epoch) for s, ps in active_new.items()}, _frozen(standby_new), _frozen(warmup_new))
    has_unreleased = u1 or u2 or u3
    if not pending_assignment.is_empty():
        state = MemberState.UNRELEASED_TASKS if has_unreleased else MemberState.STABLE
        return _moved(member, state, target_epoch, _merge(assigned, pending_assignment), EMPTY_TASKS)
    return _moved(member, MemberState.UNRELEASED_TASKS if has_unreleased else MemberState.STABLE, target_epoch, assigned, EMPTY_TASKS)


def _grant_now(pending: dict[str, set[int]], assigned: dict[str, set[int]], s: str, p: int) -> bool:
    if p not in pending.get(s, set()):
        return False
    _discard(pending, s, p)
    assigned.setdefault(s, set()).add(p)
    return True


def _discard(tasks_: dict[str, set[int]], s: str, p: int) -> None:
    ps = tasks_.get(s)
    if ps is not None and p in ps:
        ps.discard(p)
        if not ps:
            del tasks_[s]


def _frozen(tasks_: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return {s: frozenset(ps) for s, ps in tasks_.items() if ps}


def _merge(a: AssignedTasks, b: AssignedTasks) -> AssignedTasks:
    active = {s: dict(ps) for s, ps in a.active.items()}
    for s, ps in b.active.items():
        active.setdefault(s, {}).update(ps)
    return AssignedTasks(
        active,
        tasks([*a.standby.items(), *b.standby.items()]),
        tasks([*a.warmup.items(), *b.warmup.items()]),
    )


def _moved(member: StreamsGroupMember, state: MemberState, epoch: int, assigned: AssignedTasks, pending: AssignedTasks) -> StreamsGroupMember:
    # Kafka's updateMemberEpoch: the previous epoch is the one the member had, even when it stays.
    return replace(member, state=state, member_epoch=epoch, previous_member_epoch=member.member_epoch, assigned=assigned, pending_revocation=pending)


# -- records ---------------------------------------------------------------------------------------


def _config_pairs(configs: Mapping[str, str] | None) -> tuple[LastAssignmentConfig, ...] | None:
    return None if configs is None else tuple(LastAssignmentConfig(key=k, value=v) for k, v in sorted(configs.items()))


def metadata_record(group: StreamsGroup, epoch: int, hash_: int, validated_topology_epoch: int, configs: Mapping[str, str] | None) -> Record:
    return (
        StreamsGroupMetadataKey(group_id=group.group_id),
        StreamsGroupMetadataValue(
            epoch=epoch,
            metadata_hash=hash_,
            validated_topology_epoch=validated_topology_epoch,
            last_assignment_configs=_config_pairs(configs),
            stored_description_topology_epoch=group.stored_description_topology_epoch,
            failed_description_topology_epoch=group.failed_description_topology_epoch,
        ),
    )


def topology_record(group_id: str, topology: StreamsGroupTopologyValue) -> Record:
    return StreamsGroupTopologyKey(group_id=group_id), topology


def member_metadata_record(group_id: str, member: StreamsGroupMember) -> Record:
    return (
        StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id),
        StreamsGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            topology_epoch=member.topology_epoch,
            process_id=member.process_id,
            user_endpoint=member.user_endpoint,
            client_tags=tuple(KeyValue(key=k, value=v) for k, v in sorted(member.client_tags.items())),
        ),
    )


def _task_ids(tasks_: Tasks) -> tuple[TaskIds, ...]:
    return tuple(TaskIds(subtopology_id=s, partitions=tuple(sorted(ps))) for s, ps in sorted(tasks_.items()))


def target_assignment_record(group_id: str, member_id: str, target: TasksTuple) -> Record:
    return (
        StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        StreamsGroupTargetAssignmentMemberValue(active_tasks=_task_ids(target.active), standby_tasks=_task_ids(target.standby), warmup_tasks=_task_ids(target.warmup)),
    )


def target_assignment_epoch_record(group_id: str, epoch: int, now_ms: int) -> Record:
    return StreamsGroupTargetAssignmentMetadataKey(group_id=group_id), StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=now_ms)


def _with_epochs(active: ActiveTasks) -> tuple[TaskIdsWithEpochs, ...]:
    out = []
    for s, ps in sorted(active.items()):
        partitions = tuple(sorted(ps))
        out.append(TaskIdsWithEpochs(subtopology_id=s, partitions=partitions, assignment_epochs=tuple(ps[p] for p in partitions)))
    return tuple(out)


def _plain(tasks_: Tasks) -> tuple[TaskIdsWithEpochs, ...]:
    return tuple(TaskIdsWithEpochs(subtopology_id=s, partitions=tuple(sorted(ps))) for s, ps in sorted(tasks_.items()))


def current_assignment_record(group_id: str, member: StreamsGroupMember) -> Record:
    return (
        StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
        StreamsGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            active_tasks=_with_epochs(member.assigned.active),
            standby_tasks=_plain(member.assigned.standby),
            warmup_tasks=_plain(member.assigned.warmup),
            active_tasks_pending_revocation=_with_epochs(member.pending_revocation.active),
            standby_tasks_pending_revocation=_plain(member.pending_revocation.standby),
            warmup_tasks_pending_revocation=_plain(member.pending_revocation.warmup),
        ),
    )


def active_from_record(entries: Iterable[TaskIdsWithEpochs], fallback_epoch: int) -> dict[str, dict[int, int]]:
    """Kafka's parseActiveTasksWithEpochs: epochs missing or of the wrong length fall back to the member epoch."""
    active: dict[str, dict[int, int]] = {}
    for entry in entries:
        epochs = entry.assignment_epochs
        if epochs is not None and len(epochs) == len(entry.partitions):
            active.setdefault(entry.subtopology_id, {}).update(zip(entry.partitions, epochs, strict=True))
        else:
            active.setdefault(entry.subtopology_id, {}).update(dict.fromkeys(entry.partitions, fallback_epoch))
    return {s: ps for s, ps in active.items() if ps}


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's removeStreamsMember: assignments go before the member."""
    return [
        (StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]


def group_tombstones(group: StreamsGroup) -> list[Record]:
    """StreamsGroup.createGroupTombstoneRecords: what deleting an empty group writes."""
    records: list[Record] = []
    for member_id in group.members:
        records += member_tombstones(group.group_id, member_id)
    records += [
        (StreamsGroupTargetAssignmentMetadataKey(group_id=group.group_id), None),
        (StreamsGroupMetadataKey(group_id=group.group_id), None),
        (StreamsGroupTopologyKey(group_id=group.group_id), None),
    ]
    return records
