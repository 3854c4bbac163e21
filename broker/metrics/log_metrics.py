"""kafka.log metrics: LogFlushStats, LogCleaner and LogCleanerManager, read when Prometheus scrapes.

- ``kafka_log_logflushstats_logflushrateandtimems``: Kafka's flush timer (a summary: quantiles,
  ``_count`` is the number of flushes, so rate(_count) is the flush rate).
- ``kafka_log_logcleaner_max_clean_time_secs``, ``..._max_buffer_utilization_percent``,
  ``..._cleaner_recopy_percent``: over the latest cleaning of each cleaner thread (kbroker keeps
  the latest cleaning of each log; the ``log.cleaner.threads`` most recent of them stand for the threads).
- ``kafka_log_logcleanermanager_max_dirty_percent``: the dirtiest compacted log's cleanable ratio now.
- ``kafka_log_logmanager_cordonedlogdirectorycount`` and
  ``kafka_log_logmanager_logdirectorycordoned{logDirectory}``: cordoned.log.dirs (KIP-1066) as in
  effect now, so a dynamic change shows at the next scrape.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from broker.metrics.histogram import add_summary_values, quantiles
from storage.cleaner_manager import log_to_clean
from storage.log_flush_stats import LOG_FLUSH_STATS, LogFlushStats

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from storage.log_manager import LogManager


class LogFlushStatsCollector:
    def __init__(self, stats: LogFlushStats = LOG_FLUSH_STATS) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        family = Metric(
            "kafka_log_logflushstats_logflushrateandtimems",
            "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs: log flushes (fsync) and their time in ms.",
            "summary",
        )
        add_summary_values(family, {}, stats.count, stats.sum_ms, quantiles(stats.recent()))
        yield family


class LogCleanerMetricsCollector:
    def __init__(self, log_manager: LogManager) -> None:
        self._logs = log_manager

    def collect(self) -> Iterator[Metric]:
        cleaner = self._logs.cleaner
        if cleaner is None:
            return
        latest = sorted(cleaner.summaries.values(), key=lambda s: s.finished_ms, reverse=True)[: max(cleaner.config.threads, 1)]
        stats = [s.stats for s in latest]
        clean_time = max((s.elapsed_s for s in stats), default=0.0)
        buffer = max((s.map_utilization for s in stats), default=0.0) * 100.0
        recopy = sum(100.0 * s.bytes_written / max(s.bytes_read, 1) for s in stats) / len(stats) if stats else 0.0
        prefix = "kafka_log_logcleaner_"
        yield GaugeMetricFamily(prefix + "max_clean_time_secs", "kafka.log:type=LogCleaner,name=max-clean-time-secs: the longest of the latest cleanings.", value=clean_time)
        yield GaugeMetricFamily(
            prefix + "max_buffer_utilization_percent",
            "kafka.log:type=LogCleaner,name=max-buffer-utilization-percent: the fullest offset map of the latest cleanings.",
            value=buffer,
        )
        yield GaugeMetricFamily(
            prefix + "cleaner_recopy_percent", "kafka.log:type=LogCleaner,name=cleaner-recopy-percent: bytes written back over bytes read, in percent.", value=recopy
        )
        now = cleaner._now_ms()  # noqa: SLF001 - the cleaner's own clock
        dirtiest = 0.0
        for key, plog in self._logs.all_log_items():
            if plog.config.compacts:
                dirtiest = max(dirtiest, log_to_clean(plog, cleaner.checkpoints.get(key), now).cleanable_ratio)
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "kafka.log:type=LogCleanerManager,name=max-dirty-percent: the dirtiest compacted log's dirty ratio, in percent.",
            value=dirtiest * 100.0,
        )


class LogManagerMetricsCollector:
    """Kafka 4.4's LogManager gauges of cordoned log dirs. ``config``: the broker's config in effect
    (dynamic changes included); ``log_dirs``: the node's log dirs, each with a LogDirectoryCordoned
    series, as Kafka has one per log dir its LogManager keeps."""

    def __init__(self, config: Callable[[], BrokerConfig], log_dirs: Sequence[Path]) -> None:
        self._config = config
        self._log_dirs = [d.absolute() for d in log_dirs]

    def collect(self) -> Iterator[Metric]:
        # Kafka's Set.copyOf(cordonedLogDirs): each cordoned entry of log.dirs once, all of them for "*".
        cordoned = {d.absolute() for d in self._config().cordoned_log_dir_paths}
        yield GaugeMetricFamily(
            "kafka_log_logmanager_cordonedlogdirectorycount",
            "kafka.log:type=LogManager,name=CordonedLogDirectoryCount: the log dirs cordoned.log.dirs cordons.",
            value=len(cordoned),
        )
        family = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectorycordoned",
            "kafka.log:type=LogManager,name=LogDirectoryCordoned,logDirectory=D: 1 while the log dir is cordoned, else 0.",
            labels=["logDirectory"],
        )
        for log_dir in self._log_dirs:
            family.add_metric([str(log_dir)], 1 if log_dir in cordoned else 0)
        yield family


__all__ = ["LogCleanerMetricsCollector", "LogFlushStatsCollector", "LogManagerMetricsCollector"]
