"""Server-side partition assignors of the consumer group protocol (KIP-848), sans-IO.

The group coordinator runs an assignor whenever the group epoch moves past the target
assignment epoch. An assignor sees, per member, the topics it subscribes to and its
previous *target* assignment, plus the partition count of every subscribed topic, and
returns the new target assignment of every member. Both assignors here are:

- complete: every partition of a subscribed topic goes to exactly one of its subscribers;
- sticky: a member keeps the partitions it had as long as balance allows, so a stable
  group gets back exactly its previous assignment;
- deterministic: members and partitions are visited in sorted order, so the same input
  gives the same output whatever the order of the mappings.

``UniformAssignor`` ("uniform", Kafka's default) balances the number of partitions per
member; ``RangeAssignor`` ("range") balances each topic on its own, giving contiguous
ranges on a fresh assignment so that co-partitioned topics line up.
Racks are accepted but not used for placement.
"""

from __future__ import annotations

import enum
import heapq
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

TopicPartition = tuple[uuid.UUID, int]
MemberAssignment = dict[uuid.UUID, frozenset[int]]
GroupAssignment = dict[str, MemberAssignment]
Item = TypeVar("Item")


class SubscriptionType(enum.Enum):
    HOMOGENEOUS = "homogeneous"
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class MemberSubscriptionAndAssignment:
    rack_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    assigned_partitions: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSubscriptionAndAssignment]

    def subscription_type(self) -> SubscriptionType:
        subscriptions = {m.subscribed_topic_ids for m in self.members.values()}
        return SubscriptionType.HOMOGENEOUS if len(subscriptions) <= 1 else SubscriptionType.HETEROGENEOUS


class PartitionAssignor(Protocol):
    @property
    def name(self) -> str: ...

    def assign(self, group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> GroupAssignment:
        """``partition_counts``: topic id -> partition count of the subscribed topics that exist."""
        ...


class UniformAssignor:
    name = "uniform"

    def assign(self, group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> GroupAssignment:
        members = sorted(group_spec.members)
        if group_spec.subscription_type() is SubscriptionType.HOMOGENEOUS:
            return _uniform_homogeneous(members, group_spec, partition_counts)
        return _uniform_heterogeneous(members, group_spec, partition_counts)


class RangeAssignor:
    name = "range"

    def assign(self, group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> GroupAssignment:
        members = sorted(group_spec.members)
        result: dict[str, dict[uuid.UUID, list[int]]] = {m: {} for m in members}
        for topic_id, subscribers in _subscribers_by_topic(members, group_spec, partition_counts).items():
            count = partition_counts[topic_id]
            current = {m: sorted(p for p in group_spec.members[m].assigned_partitions.get(topic_id, ()) if p < count) for m in subscribers}
            # Every input that matters here is partition numbers, so topics with the same
            # partition count and subscribers get the same layout: co-partitioning holds.
            for member, partitions in _balanced_sticky(subscribers, current, list(range(count)), contiguous=True).items():
                if partitions:
                    result[member][topic_id] = partitions
        return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in result.items()}


def _subscribers_by_topic(members: Sequence[str], group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> dict[uuid.UUID, list[str]]:
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member in members:
        for topic_id in group_spec.members[member].subscribed_topic_ids:
            if partition_counts.get(topic_id, 0) > 0:
                subscribers.setdefault(topic_id, []).append(member)
    return dict(sorted(subscribers.items()))


def _balanced_sticky(members: Sequence[str], current: Mapping[str, Sequence[Item]], universe: Iterable[Item], *, contiguous: bool) -> dict[str, list[Item]]:
    """Spread ``universe`` over ``members`` so that counts differ by at most one, keeping
    as many of each member's ``current`` items (sorted, in the universe) as balance allows.

    Quotas: everyone gets ``total // n``, and ``total % n`` members get one more; members
    that already hold that many keep their extra item first, which maximises what stays.
    """
    total_items = list(universe)
    min_quota, extra = divmod(len(total_items), len(members))
    taken: set[Item] = set()
    kept: dict[str, list[Item]] = {}
    for member in members:
        # A duplicate in the input (two members claiming one item) stays with the first.
        mine = [item for item in current.get(member, ()) if item not in taken][: min_quota + 1]
        taken.update(mine)
        kept[member] = mine
    over = [m for m in members if len(kept[m]) > min_quota]
    for member in over[extra:]:
        taken.discard(kept[member].pop())
    keeps_extra = set(over[:extra])
    extra_left = extra - len(keeps_extra)
    need: dict[str, int] = {}
    for member in members:
        quota = min_quota + 1 if member in keeps_extra else min_quota
        if member not in keeps_extra and extra_left:
            quota += 1
            extra_left -= 1
        if quota > len(kept[member]):
            need[member] = quota - len(kept[member])
    unassigned = [item for item in total_items if item not in taken]
    if contiguous:
        position = 0
        for member, count in need.items():
            kept[member].extend(unassigned[position : position + count])
            position += count
    else:
        # Round robin so that each topic spreads over the members rather than landing on one.
        receivers = deque(need)
        for item in unassigned:
            member = receivers.popleft()
            kept[member].append(item)
            need[member] -= 1
            if need[member]:
                receivers.append(member)
    return kept


def _uniform_homogeneous(members: Sequence[str], group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> GroupAssignment:
    if not members:
        return {}
    subscribed = next(iter(group_spec.members.values())).subscribed_topic_ids
    topics = sorted(t for t in subscribed if partition_counts.get(t, 0) > 0)
    topic_set = set(topics)
    current = {
        member: sorted(
            (topic_id, p)
            for topic_id, partitions in group_spec.members[member].assigned_partitions.items()
            if topic_id in topic_set
            for p in partitions
            if p < partition_counts[topic_id]
        )
        for member in members
    }
    universe = ((topic_id, p) for topic_id in topics for p in range(partition_counts[topic_id]))
    return {member: _by_topic(items) for member, items in _balanced_sticky(members, current, universe, contiguous=False).items()}


def _uniform_heterogeneous(members: Sequence[str], group_spec: GroupSpec, partition_counts: Mapping[uuid.UUID, int]) -> GroupAssignment:
    """Members subscribe to different topics, so equal counts may be impossible. The goal
    is a local optimum: no partition could move to another subscriber of its topic that
    holds at least two partitions fewer than its owner. Current partitions are kept first,
    free partitions go to the least loaded subscriber, then partitions move one at a time
    from the most to the least loaded subscriber of their topic until that optimum holds
    (each move lowers the sum of squared counts, so this ends)."""
    subscribers = _subscribers_by_topic(members, group_spec, partition_counts)
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    load = dict.fromkeys(members, 0)
    taken: set[TopicPartition] = set()
    for member in members:
        spec = group_spec.members[member]
        for topic_id, partitions in sorted(spec.assigned_partitions.items()):
            if topic_id not in spec.subscribed_topic_ids or topic_id not in subscribers:
                continue
            mine = {p for p in partitions if p < partition_counts[topic_id] and (topic_id, p) not in taken}
            if mine:
                owned[member][topic_id] = mine
                taken.update((topic_id, p) for p in mine)
                load[member] += len(mine)
    # Topics with the fewest subscribers first: they have the least freedom.
    for topic_id, subs in sorted(subscribers.items(), key=lambda item: (len(item[1]), item[0])):
        free = [p for p in range(partition_counts[topic_id]) if (topic_id, p) not in taken]
        if not free:
            continue
        heap = [(load[m], m) for m in subs]
        heapq.heapify(heap)
        for p in free:
            count, member = heapq.heappop(heap)
            owned[member].setdefault(topic_id, set()).add(p)
            load[member] = count + 1
            heapq.heappush(heap, (count + 1, member))
    moved = True
    while moved:
        moved = False
        for topic_id, subs in subscribers.items():
            if len(subs) < 2:
                continue
            receiver = min(subs, key=lambda m: (load[m], m))
            giver = max((m for m in subs if owned[m].get(topic_id)), key=lambda m: (load[m], m), default=None)
            if giver is None or load[giver] - load[receiver] < 2:
                continue
            giving = owned[giver][topic_id]
            p = max(giving)
            giving.discard(p)
            if not giving:
                del owned[giver][topic_id]
            owned[receiver].setdefault(topic_id, set()).add(p)
            load[giver] -= 1
            load[receiver] += 1
            moved = True
    return {m: {t: frozenset(ps) for t, ps in sorted(topics.items())} for m, topics in owned.items()}


def _by_topic(items: Iterable[TopicPartition]) -> MemberAssignment:
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, p in items:
        grouped.setdefault(topic_id, []).append(p)
    return {t: frozenset(ps) for t, ps in sorted(grouped.items())}


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
"""Kafka's ``group.consumer.assignors`` default order: the first is the default."""
