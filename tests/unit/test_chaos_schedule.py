"""The nemesis schedule of tests/chaos/nemesis.py: exact counts per kind, only allowed mixes,
the same windows for the same seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.chaos.nemesis import KINDS, MIXES, schedule


@pytest.mark.parametrize("seed", range(20))
def test_every_kind_gets_its_count_and_a_second_fault_only_where_the_first_allows_it(seed: int) -> None:
    windows = schedule(random.Random(seed), KINDS, 3, mixed=0.5)
    assert Counter(kind for window in windows for kind in window) == {kind: 3 for kind in KINDS}
    for window in windows:
        assert len(window) in (1, 2)
        if len(window) == 2:
            assert window[1] in MIXES[window[0]]


def test_the_seed_decides_the_schedule() -> None:
    assert schedule(random.Random(7), KINDS, 4, 0.3) == schedule(random.Random(7), KINDS, 4, 0.3)
    assert schedule(random.Random(7), KINDS, 4, 0.3) != schedule(random.Random(8), KINDS, 4, 0.3)


def test_no_mixing_gives_one_fault_a_window_and_full_mixing_pairs_what_it_can() -> None:
    assert all(len(w) == 1 for w in schedule(random.Random(1), KINDS, 5, mixed=0.0))
    assert any(len(w) == 2 for w in schedule(random.Random(1), KINDS, 5, mixed=1.0))
