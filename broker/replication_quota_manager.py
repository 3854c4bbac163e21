"""One direction's replication throttle, configured by the metadata log.

Kafka's ReplicationQuotaManager as the broker sees it: the bound is this broker's dynamic
`leader.replication.throttled.rate` or `follower.replication.throttled.rate` (a cluster-wide
default when the broker has none, unlimited when neither is set), and the throttled
partitions are this broker's entries of each topic's `*.replication.throttled.replicas`. Both
are read again from the metadata image whenever it changes, so IncrementalAlterConfigs takes
effect as soon as the ConfigRecord is applied.
"""

from __future__ import annotations

import time

import structlog

from broker.dynamic_broker_config import FOLLOWER_REPLICATION_THROTTLED_RATE, LEADER_REPLICATION_THROTTLED_RATE, InvalidDynamicConfigError, check_config_type
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import BROKER_RESOURCE, MetadataImage
from replication.replication_quota import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    NONE,
    UNLIMITED,
    ReplicationQuota,
    ThrottledReplicas,
    parse_throttled_replicas,
)

log = structlog.get_logger(__name__)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicationQuotaManager:
    def __init__(self, rate_config: str, replicas_config: str, metadata: MetadataCache) -> None:
        self._rate_config = rate_config
        self._replicas_config = replicas_config
        self._metadata = metadata
        self._quota = ReplicationQuota()
        self._image: MetadataImage | None = None
        self._throttled: dict[str, ThrottledReplicas] = {}

    @classmethod
    def leader(cls, metadata: MetadataCache) -> ReplicationQuotaManager:
        return cls(LEADER_REPLICATION_THROTTLED_RATE, LEADER_THROTTLED_REPLICAS, metadata)

    @classmethod
    def follower(cls, metadata: MetadataCache) -> ReplicationQuotaManager:
        return cls(FOLLOWER_REPLICATION_THROTTLED_RATE, FOLLOWER_THROTTLED_REPLICAS, metadata)

    def is_throttled(self, topic: str, partition: int) -> bool:
        self._refresh()
        throttled = self._throttled.get(topic)
        if throttled is None:
            value = self._image.topic_config(topic).get(self._replicas_config, "") if self._image is not None else ""
            throttled = self._throttled[topic] = parse_throttled_replicas(value, self._metadata.node_id) if value else NONE
        return partition in throttled

    def should_throttle(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: an out-of-sync throttled replica over quota."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_quota_exceeded()

    def is_quota_exceeded(self) -> bool:
        self._refresh()
        return self._quota.is_exceeded(monotonic_ms())

    def record(self, size: int) -> None:
        if size:
            self._quota.record(size, monotonic_ms())

    def _refresh(self) -> None:
        image = self._metadata.image
        if image is self._image:
            return
        self._image = image
        self._throttled.clear()
        value = image.configs.get((BROKER_RESOURCE, str(self._metadata.node_id)), {}).get(self._rate_config)
        if value is None:
            value = image.configs.get((BROKER_RESOURCE, ""), {}).get(self._rate_config)
        self._quota.bound = UNLIMITED
        if value is not None:
            # Checked by the broker that took the change, not by a controller (broker/dynamic_broker_config.py).
            try:
                check_config_type(self._rate_config, value)
            except InvalidDynamicConfigError as e:
                log.error("replication_quota.invalid_rate", config=self._rate_config, error=str(e))
                return
            self._quota.bound = int(value.strip())
