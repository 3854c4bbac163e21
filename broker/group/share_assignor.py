"""The share group assignor, sans-IO: Kafka 4.4's SimpleAssignor ("simple") with its
SimpleHomogeneousAssignmentBuilder and SimpleHeterogeneousAssignmentBuilder.

Share group members may read the same partition, so the rule differs from the consumer
assignors': every assignable partition of a subscribed topic goes to at least one member, and a
partition is shared by several members only when there are more members than partitions
(``desired sharing`` = ceil(members / partitions)). Balance comes first (member counts differ by
at most one), stickiness second (a member keeps what it had while that stays balanced).

When all members subscribe to the same topics the balance is over all their partitions
together (homogeneous); otherwise it is computed topic by topic among the members subscribed to
each topic, and the results are combined (heterogeneous), as Kafka does.

Only partitions whose share-group state has been initialized are assignable (Kafka 4.4's
GroupSpec.isPartitionAssignable). Kafka walks hash maps, so the members and partitions it picks
when several would do depend on hash order; here they are taken in sorted order, which keeps the
result deterministic while obeying the same balance and stickiness rules.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

SIMPLE_ASSIGNOR_NAME = "simple"

Partitions = Mapping[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]


def assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    previous: Mapping[str, Partitions],
    assignable: Mapping[uuid.UUID, frozenset[int]],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The target assignment of every member.

    ``subscriptions``: member id -> subscribed topic ids (topics that exist);
    ``previous``: member id -> its previous target assignment;
    ``assignable``: topic id -> the partitions with initialized share-group state."""
    if not subscriptions:
        return {}
    target: dict[str, set[TopicPartition]] = {member_id: set() for member_id in subscriptions}
    if len(set(subscriptions.values())) == 1:
        topics = next(iter(subscriptions.values()))
        _balance(sorted(subscriptions), _partitions_of(topics, assignable), previous, target)
    else:
        for topic_id in sorted({t for topics in subscriptions.values() for t in topics}):
            members = sorted(m for m, topics in subscriptions.items() if topic_id in topics)
            _balance(members, _partitions_of({topic_id}, assignable), previous, target)
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for member_id, tps in target.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in tps:
            by_topic.setdefault(topic_id, set()).add(partition)
        result[member_id] = {topic_id: frozenset(ps) for topic_id, ps in by_topic.items()}
    return result


def _partitions_of(topics: frozenset[uuid.UUID] | set[uuid.UUID], assignable: Mapping[uuid.UUID, frozenset[int]]) -> list[TopicPartition]:
    return [(topic_id, p) for topic_id in sorted(topics) for p in sorted(assignable.get(topic_id, ()))]


def _balance(
    members: list[str], partitions: list[TopicPartition], previous: Mapping[str, Partitions], target: dict[str, set[TopicPartition]]
) -> None:
    """Spread ``partitions`` over ``members`` and add each member's share to ``target``."""
    if not members or not partitions:
        return
    sharing = -(-len(members) // len(partitions))
    # The slots (sharing x partitions) split as evenly as Kafka's ceil(precise * i) rule splits them.
    slots = sharing * len(partitions)
    desired = {m: (slots * (i + 1) + len(members) - 1) // len(members) - (slots * i + len(members) - 1) // len(members) for i, m in enumerate(members)}
    wanted = set(partitions)
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    held: dict[str, list[TopicPartition]] = {m: [] for m in members}
    # Stickiness: a member keeps what it still may hold, up to its share and the partition's sharing.
    for m in members:
        for topic_id, ps in sorted(previous.get(m, {}).items()):
            for p in sorted(ps):
                tp = (topic_id, p)
                if tp in wanted and len(held[m]) < desired[m] and len(holders[tp]) < sharing:
                    holders[tp].append(m)
                    held[m].append(tp)
    # Balance: the partitions held least often go to the members furthest below their share.
    for tp in sorted(partitions, key=lambda tp: len(holders[tp])):
        while len(holders[tp]) < sharing:
            candidates = [m for m in members if len(held[m]) < desired[m] and m not in holders[tp]]
            if not candidates:
                break
            m = max(candidates, key=lambda m: desired[m] - len(held[m]))
            holders[tp].append(m)
            held[m].append(tp)
    for m in members:
        target[m].update(held[m])
