"""group.version: whether the cluster has turned on KIP-848's consumer rebalance protocol.

Kafka 4.4's KafkaApis.isConsumerGroupProtocolEnabled reads the finalized group.version (absent
is 0, as on a cluster formatted before 4.0-IV0) and answers ConsumerGroupHeartbeat and
ConsumerGroupDescribe with UNSUPPORTED_VERSION below level 1. ApiVersions still lists both APIs
at every level (ApiVersionsResponse.filterApis filters only the telemetry APIs), so a client
learns of the refusal from the answer, as it would from Kafka.
"""

from __future__ import annotations

from typing import Mapping

from broker.metadata.metadata_version import GROUP_VERSION_FEATURE

# GroupVersion.GV_1: the first level with the consumer rebalance protocol.
CONSUMER_PROTOCOL_LEVEL = 1


def consumer_protocol_enabled(finalized: Mapping[str, int]) -> bool:
    """GroupVersion.isConsumerRebalanceProtocolSupported of the finalized levels."""
    return finalized.get(GROUP_VERSION_FEATURE, 0) >= CONSUMER_PROTOCOL_LEVEL


__all__ = ["CONSUMER_PROTOCOL_LEVEL", "consumer_protocol_enabled"]
