"""streams.version: whether the cluster has turned on KIP-1071's streams groups.

Kafka 4.4's StreamsVersion has two levels: SV_0 (no streams groups) and SV_1
(streamsGroupSupported), bootstrapped from metadata.version 4.2-IV1 with no dependencies; SV_1 is
its LATEST_PRODUCTION. KafkaApis.isStreamsGroupProtocolEnabled also needs "streams" among
group.coordinator.rebalance.protocols, which Kafka 4.4 enables by default and kbroker does not
read. Below level 1 StreamsGroupHeartbeat answers UNSUPPORTED_VERSION, and StreamsGroupDescribe
UNSUPPORTED_VERSION for every group.

kbroker supports levels 0-1 and, as Kafka 4.4, finalizes 1 on a cluster formatted at 4.2-IV1 or
later (broker/controller/feature_control_manager.py); an older cluster, or one downgraded to 0,
refuses streams groups until it is upgraded.
"""

from __future__ import annotations

from typing import Mapping

from broker.metadata.metadata_version import STREAMS_VERSION_FEATURE

# StreamsVersion.SV_1: the first level with streams groups.
STREAMS_GROUPS_LEVEL = 1


def streams_groups_enabled(finalized: Mapping[str, int]) -> bool:
    """StreamsVersion.streamsGroupSupported of the finalized levels."""
    return finalized.get(STREAMS_VERSION_FEATURE, 0) >= STREAMS_GROUPS_LEVEL


__all__ = ["STREAMS_GROUPS_LEVEL", "streams_groups_enabled"]
