"""share.version: whether the cluster has turned on KIP-932's share groups.

Kafka 4.4's KafkaApis.isShareGroupProtocolEnabled reads the finalized share.version (absent is 0)
and answers ShareGroupHeartbeat with UNSUPPORTED_VERSION, and ShareGroupDescribe with
UNSUPPORTED_VERSION for every group, below level 1 (ShareVersion.supportsShareGroups). kbroker
supports level 1 only with unstable.feature.versions.enable, and serves the two APIs only with
unstable.api.versions.enable, until its share groups are complete.
"""

from __future__ import annotations

from typing import Mapping

from broker.metadata.metadata_version import SHARE_VERSION_FEATURE

# ShareVersion.SV_1: the first level with share groups.
SHARE_GROUPS_LEVEL = 1


def share_groups_enabled(finalized: Mapping[str, int]) -> bool:
    """ShareVersion.supportsShareGroups of the finalized levels."""
    return finalized.get(SHARE_VERSION_FEATURE, 0) >= SHARE_GROUPS_LEVEL


__all__ = ["SHARE_GROUPS_LEVEL", "share_groups_enabled"]
