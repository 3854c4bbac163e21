"""Kafka's Histogram (a Yammer histogram: count, mean, max and percentiles of recent samples),
exported as the JMX exporter exports one: a summary with quantiles 0.5 ... 0.999 and a count.

Recording is O(1) and allocation-free: a count, a sum, a max and one slot of a ring of the
latest ``RESERVOIR`` samples (Kafka's reservoir holds 1028, exponentially decayed; the ring
keeps the most recent ones). Quantiles are computed from the ring when Prometheus scrapes.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from prometheus_client.core import Metric

RESERVOIR = 1024  # a power of two: the slot is ``count & MASK``
MASK = RESERVOIR - 1
# The percentiles the JMX exporter turns into quantile labels (50thPercentile ... 999thPercentile).
QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)


class Histogram:
    __slots__ = ("count", "sum", "max", "_ring")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.max = 0.0
        self._ring = [0.0] * RESERVOIR

    def update(self, value: float) -> None:
        self._ring[self.count & MASK] = value
        self.count += 1
        self.sum += value
        if value > self.max:
            self.max = value

    def samples(self) -> list[float]:
        """The reservoir's samples, sorted."""
        n = self.count
        return sorted(self._ring if n >= RESERVOIR else self._ring[:n])

    def quantiles(self) -> list[tuple[float, float]]:
        return quantiles(self.samples())


def quantiles(ordered: Sequence[float]) -> list[tuple[float, float]]:
    """Each of QUANTILES of sorted ``ordered`` (as Yammer's Snapshot: the value at rank q*(n+1),
    interpolated); zeros when it is empty."""
    n = len(ordered)
    out = []
    for q in QUANTILES:
        if n == 0:
            out.append((q, 0.0))
            continue
        pos = q * (n + 1)
        if pos < 1:
            value = ordered[0]
        elif pos >= n:
            value = ordered[-1]
        else:
            lower = ordered[int(pos) - 1]
            value = lower + (pos - int(pos)) * (ordered[int(pos)] - lower)
        out.append((q, float(value)))
    return out


def add_summary(family: Metric, labels: dict[str, str], histogram: Histogram) -> None:
    """``histogram`` into ``family`` as the JMX exporter's rules give a Kafka histogram: one sample
    per quantile, ``_count``, and ``_sum`` (which the JMX exporter lacks: rate(_sum)/rate(_count)
    is the mean over any window)."""
    add_summary_values(family, labels, histogram.count, histogram.sum, histogram.quantiles())


def add_summary_values(family: Metric, labels: dict[str, str], count: int, total: float, points: Iterable[tuple[float, float]]) -> None:
    name = family.name
    for q, value in points:
        family.add_sample(name, {**labels, "quantile": str(q)}, value)
    family.add_sample(name + "_count", labels, float(count))
    family.add_sample(name + "_sum", labels, total)


__all__ = ["Histogram", "MASK", "QUANTILES", "RESERVOIR", "add_summary", "add_summary_values", "quantiles"]
