"""kafka.server FetchSessionCache: the incremental fetch sessions (KIP-227) this broker keeps for
its consumers and followers, read from the cache when Prometheus scrapes.

``kafka_server_fetchsessioncache_numincrementalfetchsessions``,
``..._numincrementalfetchpartitionscached``, ``..._incrementalfetchsessionevictions_total``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.fetch_session import FetchSessionCache

PREFIX = "kafka_server_fetchsessioncache_"
MBEAN = "kafka.server:type=FetchSessionCache,name="


class FetchSessionCacheMetricsCollector:
    def __init__(self, cache: FetchSessionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self._cache
        yield GaugeMetricFamily(PREFIX + "numincrementalfetchsessions", MBEAN + "NumIncrementalFetchSessions: sessions in the cache.", value=len(cache))
        yield GaugeMetricFamily(
            PREFIX + "numincrementalfetchpartitionscached", MBEAN + "NumIncrementalFetchPartitionsCached: partitions over every session.", value=cache.partitions_cached
        )
        yield CounterMetricFamily(
            PREFIX + "incrementalfetchsessionevictions", MBEAN + "IncrementalFetchSessionEvictionsPerSec: sessions evicted to make room for new ones.", value=cache.evictions
        )


__all__ = ["FetchSessionCacheMetricsCollector"]
