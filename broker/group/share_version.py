"""share.version: whether the cluster has turned on KIP-932's share groups.

Kafka 4.4's KafkaApis.isShareGroupProtocolEnabled reads the finalized share.version (absent is 0)
and answers ShareGroupHeartbeat with UNSUPPORTED_VERSION, and ShareGroupDescribe with
UNSUPPORTED_VERSION for every group, below level 1 (ShareVersion.supportsShareGroups). Level 1
(ShareVersion.SV_1) is bootstrapped from metadata.version 4.2-IV0.

Level 2 (ShareVersion.SV_2, bootstrapped from metadata.version 4.4-IV0, no dependencies; Kafka
4.4's LATEST_PRODUCTION, which a new cluster finalizes) is ShareVersion.supportsShareGroupDLQ:
BrokerServer hands it to SharePartitionManager to turn on KIP-1191's dead-letter queue
(broker/share/share_group_dlq_manager.py). It does not gate KIP-1222's renew acknowledgements or
ShareAcquireMode record_limit: those follow the ShareFetch/ShareAcknowledge version (v2) alone
(broker/handlers/share_fetch.py).
"""

from __future__ import annotations

from typing import Mapping

from broker.metadata.metadata_version import SHARE_VERSION_FEATURE

# ShareVersion.SV_1: the first level with share groups.
SHARE_GROUPS_LEVEL = 1
# ShareVersion.SV_2: share groups' dead-letter queue (KIP-1191).
SHARE_GROUP_DLQ_LEVEL = 2


def share_groups_enabled(finalized: Mapping[str, int]) -> bool:
    """ShareVersion.supportsShareGroups of the finalized levels."""
    return finalized.get(SHARE_VERSION_FEATURE, 0) >= SHARE_GROUPS_LEVEL


def share_group_dlq_enabled(finalized: Mapping[str, int]) -> bool:
    """ShareVersion.supportsShareGroupDLQ of the finalized levels."""
    return finalized.get(SHARE_VERSION_FEATURE, 0) >= SHARE_GROUP_DLQ_LEVEL


__all__ = ["SHARE_GROUPS_LEVEL", "SHARE_GROUP_DLQ_LEVEL", "share_group_dlq_enabled", "share_groups_enabled"]
