"""Replication throttles: the sans-IO windowed rate and throttled-replica lists, and the manager reading them from the image."""

from __future__ import annotations

import pytest

from broker.dynamic_broker_config import FOLLOWER_REPLICATION_THROTTLED_RATE, LEADER_REPLICATION_THROTTLED_RATE
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.replication_quota_manager import ReplicationQuotaManager
from replication.replication_quota import UNLIMITED, ReplicationQuota, parse_throttled_replicas


def test_unlimited_is_never_exceeded() -> None:
    quota = ReplicationQuota()
    quota.record(10**12, 0)
    assert not quota.is_exceeded(1)


def test_rate_over_at_least_one_window() -> None:
    quota = ReplicationQuota(bound=1000)
    quota.record(900, 0)
    # 900 bytes within the first 10 ms count as 900 B/s, not 90,000 B/s.
    assert quota.rate(10) == pytest.approx(900)
    assert not quota.is_exceeded(10)
    quota.record(200, 20)
    assert quota.is_exceeded(20)


def test_rate_falls_as_time_passes() -> None:
    quota = ReplicationQuota(bound=1000)
    quota.record(3000, 0)
    assert quota.is_exceeded(1000)
    assert quota.rate(2000) == pytest.approx(1500)
    assert not quota.is_exceeded(3000)


def test_windows_older_than_the_samples_are_dropped() -> None:
    quota = ReplicationQuota(bound=1000, samples=11, window_ms=1000)
    quota.record(50_000, 0)
    assert quota.is_exceeded(10_999)
    assert quota.rate(11_000) == 0.0
    quota.record(500, 11_000)
    assert quota.rate(11_500) == pytest.approx(500)


def test_sustained_rate_is_measured_over_all_windows() -> None:
    quota = ReplicationQuota(bound=UNLIMITED)
    for second in range(30):
        quota.record(2000, second * 1000)
    # The last 11 windows hold 22,000 bytes, begun 10 s before now: 2,200 B/s at the window
    # start, close to the sent 2,000 B/s.
    assert 1900 < quota.rate(29_999) < 2300


def test_throttled_replicas() -> None:
    assert 7 in parse_throttled_replicas("*", 1)
    throttled = parse_throttled_replicas("0:1, 1:2,2:1", 1)
    assert 0 in throttled and 2 in throttled and 1 not in throttled
    assert 0 not in parse_throttled_replicas("0:2", 1)
    assert 0 not in parse_throttled_replicas("", 1)


def test_manager_reads_rates_and_replicas_from_each_new_image() -> None:
    cache = MetadataCache(2, "cluster", BrokerEndpoint(2, "127.0.0.1", 9092))
    leader = ReplicationQuotaManager.leader(cache)
    follower = ReplicationQuotaManager.follower(cache)
    assert not leader.is_throttled("t", 0)
    cache.image = MetadataImage(
        configs={
            (BROKER_RESOURCE, ""): {LEADER_REPLICATION_THROTTLED_RATE: "1000", FOLLOWER_REPLICATION_THROTTLED_RATE: "1000"},
            (BROKER_RESOURCE, "2"): {FOLLOWER_REPLICATION_THROTTLED_RATE: "50"},
            (TOPIC_RESOURCE, "t"): {"leader.replication.throttled.replicas": "0:2,1:3", "follower.replication.throttled.replicas": "*"},
        }
    )
    assert leader.is_throttled("t", 0) and not leader.is_throttled("t", 1)
    assert follower.is_throttled("t", 1) and not follower.is_throttled("u", 0)
    # This broker's own rate wins over the cluster default.
    follower.record(100)
    leader.record(100)
    assert follower.should_throttle("t", 0, in_sync=False)
    assert not follower.should_throttle("t", 0, in_sync=True)
    assert not leader.should_throttle("t", 0, in_sync=False)
    cache.image = MetadataImage()
    assert not follower.is_throttled("t", 1) and not follower.is_quota_exceeded()
