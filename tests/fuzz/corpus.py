"""The valid requests a run starts from, and the mutant at each index of the run.

Building a valid request from its entity costs far more than mutating one, so each run builds a
few requests per API version once (from the run's seed) and every frame mutates one of them.
The frame at ``index`` depends only on the seed and the index: ``FUZZ_SEED`` and ``FUZZ_FRAME``
replay it alone.
"""

from __future__ import annotations

import random

from protocol.api_keys import KNOWN_APIS, ApiRange
from tests.fuzz.generate import Request, RequestGenerator
from tests.fuzz.mutate import Mutant, Mutator

FUZZ_TOPICS = ("fuzz-a", "fuzz-b")
PER_VERSION = 3


class Corpus:
    """Build through ``corpus()``: a run's requests are built once per process."""

    def __init__(self, seed: int, apis: dict[int, ApiRange] = KNOWN_APIS, topics: tuple[str, ...] = FUZZ_TOPICS) -> None:
        self.seed = seed
        generator = RequestGenerator(random.Random(seed), topics)
        self.requests: list[Request] = [
            generator.request(key, version)
            for key, r in sorted(apis.items())
            for version in range(r.min_version, r.max_version + 1)
            for _ in range(PER_VERSION)
        ]

    def mutant(self, index: int) -> Mutant:
        rng = random.Random(f"{self.seed}/{index}")
        request, other = rng.choice(self.requests), rng.choice(self.requests)
        return Mutator(rng).mutate(request, other, index & 0x7FFFFFFF)


_BUILT: dict[tuple[int, tuple[tuple[int, int, int], ...]], Corpus] = {}


def corpus(seed: int, apis: dict[int, ApiRange] = KNOWN_APIS) -> Corpus:
    key = (seed, tuple((k, r.min_version, r.max_version) for k, r in sorted(apis.items())))
    if key not in _BUILT:
        _BUILT[key] = Corpus(seed, apis)
    return _BUILT[key]
