"""The server-side assignors (uniform, range): complete, exclusive, balanced, sticky, deterministic."""

from __future__ import annotations

import random
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.assignors import (
    ASSIGNORS,
    GroupAssignment,
    GroupSpec,
    MemberSubscriptionAndAssignment,
    PartitionAssignor,
    RangeAssignor,
    UniformAssignor,
)

TOPICS = [uuid.UUID(int=i + 1) for i in range(5)]
MEMBER_IDS = [f"member-{i}" for i in range(8)]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[GroupSpec, dict[uuid.UUID, int]]:
    """A group and its topics; current assignments are arbitrary, even invalid (partitions
    out of range, of unsubscribed topics, claimed twice), as after topics shrink or vanish."""
    counts = {t: draw(st.integers(0, 12)) for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))}
    members = draw(st.lists(st.sampled_from(MEMBER_IDS), min_size=1, max_size=8, unique=True))
    all_topics = sorted(counts) + [uuid.UUID(int=99)]  # a subscribed topic that does not exist
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = frozenset(draw(st.lists(st.sampled_from(all_topics), unique=True)))
    specs = {}
    for member in members:
        subscribed = shared if homogeneous else frozenset(draw(st.lists(st.sampled_from(all_topics), unique=True)))
        current = {t: frozenset(draw(st.lists(st.integers(0, 14), max_size=6))) for t in draw(st.lists(st.sampled_from(all_topics), unique=True, max_size=3))}
        specs[member] = MemberSubscriptionAndAssignment(None, subscribed, current)
    return GroupSpec(specs), counts


def assert_complete_and_exclusive(spec: GroupSpec, counts: dict[uuid.UUID, int], result: GroupAssignment) -> None:
    assert set(result) == set(spec.members)
    owners: Counter[tuple[uuid.UUID, int]] = Counter()
    for member, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert partitions, "no empty topic entries"
            assert topic_id in spec.members[member].subscribed_topic_ids, "only subscribers get a topic"
            assert all(0 <= p < counts[topic_id] for p in partitions)
            owners.update((topic_id, p) for p in partitions)
    subscribed = set().union(*(m.subscribed_topic_ids for m in spec.members.values()))
    expected = {(t, p) for t, n in counts.items() if t in subscribed for p in range(n)}
    assert set(owners) == expected, "every subscribed partition is assigned"
    assert all(n == 1 for n in owners.values()), "and to one member only"


def loads(result: GroupAssignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def as_current(spec: GroupSpec, result: GroupAssignment) -> GroupSpec:
    return GroupSpec({m: MemberSubscriptionAndAssignment(s.rack_id, s.subscribed_topic_ids, result[m]) for m, s in spec.members.items()})


def shuffled(spec: GroupSpec, seed: int) -> GroupSpec:
    items = list(spec.members.items())
    random.Random(seed).shuffle(items)
    return GroupSpec(dict(items))


ASSIGNOR_LIST: list[PartitionAssignor] = [UniformAssignor(), RangeAssignor()]


@settings(max_examples=150, deadline=None)
@given(group=groups(), assignor=st.sampled_from(ASSIGNOR_LIST), seed=st.integers(0, 1000))
def test_complete_exclusive_sticky_deterministic(group: tuple[GroupSpec, dict[uuid.UUID, int]], assignor: PartitionAssignor, seed: int) -> None:
    spec, counts = group
    result = assignor.assign(spec, counts)
    assert_complete_and_exclusive(spec, counts, result)
    assert assignor.assign(shuffled(spec, seed), counts) == result, "deterministic whatever the member order"
    assert assignor.assign(as_current(spec, result), counts) == result, "nothing changed: nothing moves"


@settings(max_examples=100, deadline=None)
@given(group=groups(homogeneous=True))
def test_uniform_homogeneous_counts_differ_by_at_most_one(group: tuple[GroupSpec, dict[uuid.UUID, int]]) -> None:
    spec, counts = group
    result = UniformAssignor().assign(spec, counts)
    per_member = loads(result)
    assert max(per_member.values()) - min(per_member.values()) <= 1


@settings(max_examples=100, deadline=None)
@given(group=groups(homogeneous=False))
def test_uniform_heterogeneous_no_partition_could_move_to_a_much_less_loaded_subscriber(group: tuple[GroupSpec, dict[uuid.UUID, int]]) -> None:
    spec, counts = group
    result = UniformAssignor().assign(spec, counts)
    load = loads(result)
    for owner, assignment in result.items():
        for topic_id in assignment:
            subscribers = [m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids]
            assert min(load[m] for m in subscribers) >= load[owner] - 1


@settings(max_examples=100, deadline=None)
@given(group=groups())
def test_range_balances_each_topic_over_its_subscribers(group: tuple[GroupSpec, dict[uuid.UUID, int]]) -> None:
    spec, counts = group
    result = RangeAssignor().assign(spec, counts)
    for topic_id in counts:
        subscribers = [m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids]
        if subscribers:
            per_member = [len(result[m].get(topic_id, ())) for m in subscribers]
            assert max(per_member) - min(per_member) <= 1


@settings(max_examples=100, deadline=None)
@given(group=groups(homogeneous=True), assignor=st.sampled_from(ASSIGNOR_LIST), newcomer=st.sampled_from(["member-a", "member-z"]))
def test_a_joining_member_takes_only_what_balance_requires(
    group: tuple[GroupSpec, dict[uuid.UUID, int]], assignor: PartitionAssignor, newcomer: str
) -> None:
    spec, counts = group
    before = assignor.assign(spec, counts)
    subscribed = next(iter(spec.members.values())).subscribed_topic_ids
    joined = GroupSpec({**as_current(spec, before).members, newcomer: MemberSubscriptionAndAssignment(None, subscribed, {})})
    after = assignor.assign(joined, counts)
    assert_complete_and_exclusive(joined, counts, after)
    # Nobody gains a partition from anyone but the newcomer's arrival: existing members only lose.
    for member in spec.members:
        for topic_id, partitions in after[member].items():
            assert partitions <= before[member].get(topic_id, frozenset())
    if isinstance(assignor, UniformAssignor):
        moved = sum(len(ps) for ps in after[newcomer].values())
        assert moved == sum(counts[t] for t in subscribed if t in counts) // len(joined.members) or moved == -(
            -sum(counts[t] for t in subscribed if t in counts) // len(joined.members)
        )


def test_uniform_spreads_each_topic_and_range_gives_contiguous_co_partitioned_ranges() -> None:
    t1, t2 = TOPICS[:2]
    spec = GroupSpec({m: MemberSubscriptionAndAssignment(None, frozenset({t1, t2}), {}) for m in ("a", "b", "c")})
    uniform = UniformAssignor().assign(spec, {t1: 6, t2: 6})
    assert all(len(uniform[m][t]) == 2 for m in "abc" for t in (t1, t2))
    ranged = RangeAssignor().assign(spec, {t1: 7, t2: 7})
    assert ranged["a"] == {t1: frozenset({0, 1, 2}), t2: frozenset({0, 1, 2})}
    assert ranged["b"] == {t1: frozenset({3, 4}), t2: frozenset({3, 4})}
    assert ranged["c"] == {t1: frozenset({5, 6}), t2: frozenset({5, 6})}
    # A fourth member joins: the topics stay co-partitioned member by member.
    grown = GroupSpec({**as_current(spec, ranged).members, "d": MemberSubscriptionAndAssignment(None, frozenset({t1, t2}), {})})
    after = RangeAssignor().assign(grown, {t1: 7, t2: 7})
    assert all(after[m][t1] == after[m][t2] for m in "abcd")


def test_registry_names_and_default_order() -> None:
    assert list(ASSIGNORS) == ["uniform", "range"]
    assert GroupSpec({}).subscription_type().value == "homogeneous"
    assert UniformAssignor().assign(GroupSpec({}), {}) == {}
