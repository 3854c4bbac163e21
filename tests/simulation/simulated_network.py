"""The simulated network: which messages arrive, when, and how many times.

It decides only; the simulation's event queue carries the messages. Every choice comes from
the run's seeded random.Random, so a seed replays the same losses, delays and duplicates.
A cut link drops everything in its direction, also what was already on the way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class NetworkFaults:
    loss: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0  # the share of messages held back, which reorders them
    max_delay_ms: int = 0
    latency_ms: tuple[int, int] = (1, 3)


@dataclass(slots=True)
class SimulatedNetwork:
    rng: random.Random
    faults: NetworkFaults
    faults_on: bool = True
    cut: set[tuple[int, int]] = field(default_factory=set)
    messages: int = 0

    def delays(self, source: int, target: int) -> list[int]:
        """The delay of each copy that will arrive: none if lost, two if duplicated."""
        self.messages += 1
        if self.is_cut(source, target):
            return []
        f = self.faults
        if self.faults_on and f.loss and self.rng.random() < f.loss:
            return []
        copies = 2 if self.faults_on and f.duplicate and self.rng.random() < f.duplicate else 1
        return [self._latency() for _ in range(copies)]

    def _latency(self) -> int:
        f = self.faults
        latency = self.rng.randint(*f.latency_ms)
        if self.faults_on and f.delay and self.rng.random() < f.delay:
            latency += self.rng.randint(1, f.max_delay_ms)
        return latency

    def is_cut(self, source: int, target: int) -> bool:
        return (source, target) in self.cut

    def isolate(self, node: int, nodes: list[int]) -> None:
        for other in nodes:
            if other != node:
                self.cut.add((node, other))
                self.cut.add((other, node))

    def partition(self, side: list[int], nodes: list[int]) -> None:
        """Cut every link between ``side`` and the rest."""
        for a in side:
            for b in nodes:
                if b not in side:
                    self.cut.add((a, b))
                    self.cut.add((b, a))

    def heal(self) -> None:
        self.cut.clear()
