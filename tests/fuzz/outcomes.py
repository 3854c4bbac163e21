"""What became of the fuzzed frames, counted, and the failures worth a bug report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Failure:
    """A frame that made the code under test misbehave, with what replays it."""

    seed: int
    index: int
    mutation: str
    frame: bytes
    problem: str

    def replay(self) -> str:
        return f"FUZZ_SEED={self.seed} FUZZ_FRAME={self.index} ({self.mutation}): {self.problem}\nframe: {self.frame.hex()}"


@dataclass
class Outcomes:
    frames: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    # Network runs: tracebacks found in the broker's log, and whether the broker still ran.
    tracebacks: list[str] = field(default_factory=list)

    def count(self, outcome: str, n: int = 1) -> None:
        self.counts[outcome] += n

    def report(self, title: str, seconds: float) -> str:
        rate = self.frames / seconds if seconds > 0 else 0.0
        lines = [f"{title}: {self.frames} frames in {seconds:.1f} s ({rate:,.0f}/s)"]
        lines += [f"  {name:<22} {n}" for name, n in sorted(self.counts.items())]
        lines.append(f"  {'crashes':<22} {len(self.failures)}")
        lines.append(f"  {'tracebacks':<22} {len(self.tracebacks)}")
        lines.append("  mutations: " + ", ".join(f"{name} {n}" for name, n in sorted(self.mutations.items())))
        lines += [f"  FAILURE {f.replay()}" for f in self.failures[:10]]
        lines += [f"  TRACEBACK {t}" for t in self.tracebacks[:5]]
        return "\n".join(lines)
