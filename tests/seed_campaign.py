"""Seeded runs of a deterministic simulation, shared by the Raft and the cluster simulations.

Every seed of one scenario runs; their Stats are summed so the caller can check the campaign did
what it says (a harness that stopped injecting faults would pass vacuously). Failures are
collected, not raised one by one: the test fails once, showing the first in full (its seed,
invariant, last events and replay command) and a line for each of the next ones.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Protocol, TypeVar

import pytest

SHOWN_FAILURES = 20


class SeedFailure(Protocol):
    seed: int
    message: str


S = TypeVar("S")
F = TypeVar("F", bound=Exception)


def run_campaign(seeds: list[int], run: Callable[[int], S], totals: S, failure_type: type[Exception], describe: Callable[[SeedFailure], str]) -> S:
    """Run ``run`` for every seed, summing the Stats dataclasses it returns into ``totals``."""
    failures: list[SeedFailure] = []
    for seed in seeds:
        try:
            stats = run(seed)
        except failure_type as failure:
            failures.append(failure)  # type: ignore[arg-type]
            continue
        for field in dataclasses.fields(totals):  # type: ignore[arg-type]
            setattr(totals, field.name, getattr(totals, field.name) + getattr(stats, field.name))
    if failures:
        others = "\n".join(f"  seed {f.seed}: {describe(f)}" for f in failures[1:SHOWN_FAILURES])
        more = f"\n  ... and {len(failures) - SHOWN_FAILURES} more" if len(failures) > SHOWN_FAILURES else ""
        pytest.fail(f"{len(failures)} of {len(seeds)} seeds failed; the first:\n{failures[0]}\nthe others:\n{others}{more}", pytrace=False)
    return totals


def first_failure(seeds: Iterable[int], run: Callable[[int], object], failure_type: type[F]) -> F:
    """The first seed's failure: how a test shows that an injected wrong step is noticed."""
    for seed in seeds:
        try:
            run(seed)
        except failure_type as failure:
            return failure
    raise AssertionError(f"no seed in {seeds} noticed the fault")
