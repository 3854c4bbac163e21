"""Kafka's LogFlushStats: how often logs are fsynced and how long each flush takes (a process-wide
timer, as Kafka's is static). LocalLog.flush records each flush that writes something; the
broker's metrics endpoint (broker/metrics/log_metrics.py) exports it as
``kafka_log_logflushstats_logflushrateandtimems``. Plain numbers: no cost beyond a clock read.
"""

from __future__ import annotations

RESERVOIR = 1024
MASK = RESERVOIR - 1


class LogFlushStats:
    __slots__ = ("count", "sum_ms", "max_ms", "_recent")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ms = 0.0
        self.max_ms = 0.0
        self._recent = [0.0] * RESERVOIR

    def update(self, ms: float) -> None:
        self._recent[self.count & MASK] = ms
        self.count += 1
        self.sum_ms += ms
        if ms > self.max_ms:
            self.max_ms = ms

    def recent(self) -> list[float]:
        """The latest flush times (up to RESERVOIR), sorted."""
        return sorted(self._recent if self.count >= RESERVOIR else self._recent[: self.count])


LOG_FLUSH_STATS = LogFlushStats()

__all__ = ["LOG_FLUSH_STATS", "LogFlushStats"]
