"""StripedReplicaPlacer: Kafka's checks and messages, and how it spreads replicas and leaders."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.replica_placer import InvalidReplicationFactorError, StripedReplicaPlacer, UsableBroker


def placer(seed: int = 0) -> StripedReplicaPlacer:
    return StripedReplicaPlacer(random.Random(seed))


def brokers(*ids: int, rack: dict[int, str] | None = None, fenced: tuple[int, ...] = ()) -> list[UsableBroker]:
    return [UsableBroker(b, (rack or {}).get(b), b in fenced) for b in ids]


def test_replication_factor_checks_in_kafkas_order() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="^Invalid replication factor 0: the replication factor must be positive.$"):
        placer().place(1, 0, brokers(1))
    with pytest.raises(InvalidReplicationFactorError, match="^All brokers are currently fenced, or have all their log directories cordoned.$"):
        placer().place(1, 1, brokers(1, 2, fenced=(1, 2)))
    with pytest.raises(InvalidReplicationFactorError, match="^All brokers are currently fenced, or have all their log directories cordoned.$"):
        placer().place(1, 1, [])
    with pytest.raises(
        InvalidReplicationFactorError, match="^The target replication factor of 4 cannot be reached because only 3 broker\\(s\\) are registered or some brokers have all their log directories cordoned.$"
    ):
        placer().place(1, 4, brokers(1, 2, 3))


def test_one_rack_stripes_and_rotates_leaders() -> None:
    placement = placer().place(6, 3, brokers(1, 2, 3))
    assert all(sorted(p) == [1, 2, 3] for p in placement)
    # One full round of three partitions leads on every broker once, then the next round.
    assert sorted(p[0] for p in placement[:3]) == [1, 2, 3] and sorted(p[0] for p in placement[3:]) == [1, 2, 3]


def test_fenced_brokers_are_never_leaders_and_used_only_when_needed() -> None:
    placement = placer().place(12, 2, brokers(1, 2, 3, 4, fenced=(4,)))
    assert all(p[0] != 4 for p in placement)
    assert all(4 not in p for p in placement)  # three unfenced brokers are enough for two replicas
    full = placer().place(6, 4, brokers(1, 2, 3, 4, fenced=(4,)))
    assert all(p[-1] == 4 or 4 in p for p in full) and all(p[0] != 4 for p in full)


def test_each_partition_spans_as_many_racks_as_it_can() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    for p in placer(7).place(30, 3, brokers(1, 2, 3, 4, 5, rack=racks)):
        assert {racks[b] for b in p} == {"a", "b", "c"}
    for p in placer(7).place(30, 4, brokers(1, 2, 3, 4, 5, rack=racks)):
        assert {racks[b] for b in p} == {"a", "b", "c"} and len(set(p)) == 4


def test_a_seeded_random_makes_placement_deterministic() -> None:
    cluster = brokers(1, 2, 3, 4, 5, rack={1: "x", 2: "y", 3: "x", 4: "y", 5: "z"})
    assert placer(3).place(20, 3, cluster) == placer(3).place(20, 3, cluster)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[UsableBroker], int, int, int]:
    count = draw(st.integers(1, 9))
    ids = draw(st.lists(st.integers(0, 50), min_size=count, max_size=count, unique=True))
    racked = draw(st.booleans())
    rack_names = draw(st.lists(st.sampled_from("abc"), min_size=count, max_size=count)) if racked else [None] * count
    fenced = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    if all(fenced):
        fenced[0] = False
    cluster = [UsableBroker(b, r, f) for b, r, f in zip(ids, rack_names, fenced)]
    rf = draw(st.integers(1, count))
    return cluster, rf, draw(st.integers(1, 40)), draw(st.integers(0, 2**16))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_placement_properties(case: tuple[list[UsableBroker], int, int, int]) -> None:
    cluster, rf, partitions, seed = case
    placement = placer(seed).place(partitions, rf, cluster)
    by_id = {b.id: b for b in cluster}
    unfenced = [b.id for b in cluster if not b.fenced]
    racks = {b.rack for b in cluster}
    assert len(placement) == partitions
    for replicas in placement:
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(by_id)
        assert not by_id[replicas[0]].fenced
        # Inside a rack, fenced brokers only once every unfenced one of the rack is in.
        for b in replicas:
            if by_id[b].fenced:
                assert {u for u in unfenced if by_id[u].rack == by_id[b].rack} <= set(replicas)
        # As many racks as the replication factor allows.
        assert len({by_id[b].rack for b in replicas}) == min(rf, len(racks))
    if len(racks) == 1:
        leaders = Counter(p[0] for p in placement)
        counts = [leaders.get(b, 0) for b in unfenced]
        assert max(counts) - min(counts) <= 1
