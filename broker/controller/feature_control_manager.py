"""Kafka's FeatureControlManager, the part a new cluster needs: finalized feature levels.

metadata.version is a FeatureLevelRecord and must be the first record of a metadata log.
kraft.version is not: as in Kafka, it belongs to the Raft layer (its KRaftVersionRecord
control record), so it is never written here; the controller adds the Raft layer's level
to the finalized features it checks brokers against. A new cluster also finalizes
transaction.version 2, as Kafka 4.0 does. UpdateFeatures is not handled.
"""

from __future__ import annotations

from typing import Mapping

from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import FeatureLevelRecord

METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"
# metadata.version feature levels: 3.3-IV3 (7) is the oldest KRaft supports; 4.0-IV3 (25)
# is Kafka 4.0's latest production level. 4.0-IV3 writes PartitionRecord and
# PartitionChangeRecord v2 and RegisterBrokerRecord v3, the versions encode() writes.
MINIMUM_METADATA_VERSION_LEVEL = 7
METADATA_VERSION_LEVEL = 25
# KIP-966's eligible leader replicas. Kafka 4.1 finalizes level 1 when it formats a new cluster;
# kbroker's first active controller does too (NEW_CLUSTER_FEATURES). A metadata log that began
# without it keeps the rules from before KIP-966.
ELIGIBLE_LEADER_REPLICAS_FEATURE = "eligible.leader.replicas.version"
ELIGIBLE_LEADER_REPLICAS_LEVEL = 1
# transaction.version (KIP-890): 2 bumps the producer epoch at every transaction's end and has
# partition leaders add partitions to transactions. Kafka 4.0 finalizes its latest production
# level on a new cluster (the default for metadata.version 4.0-IV3); a cluster made before
# keeps what it has, 0.
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION_LEVEL = 2
# The finalized levels besides metadata.version that a new cluster starts with.
NEW_CLUSTER_FEATURES: Mapping[str, int] = {
    ELIGIBLE_LEADER_REPLICAS_FEATURE: ELIGIBLE_LEADER_REPLICAS_LEVEL,
    TRANSACTION_VERSION_FEATURE: TRANSACTION_VERSION_LEVEL,
}
# The ranges a broker of this build registers with and shows in ApiVersions (Kafka's
# BrokerFeatures.defaultSupportedFeatures, for the features kbroker has).
BROKER_SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (MINIMUM_METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    ELIGIBLE_LEADER_REPLICAS_FEATURE: (0, ELIGIBLE_LEADER_REPLICAS_LEVEL),
    TRANSACTION_VERSION_FEATURE: (0, TRANSACTION_VERSION_LEVEL),
}
# What Kafka assumes of a broker that registers without a metadata.version range:
# only MetadataVersion.MINIMUM_KRAFT_VERSION (3.0-IV1).
MINIMUM_KRAFT_METADATA_VERSION_LEVEL = 1


class FeatureControlManager:
    def __init__(self, *, kraft_version: int = 0) -> None:
        self._kraft_version = kraft_version

    @staticmethod
    def bootstrap_records(metadata_version: int = METADATA_VERSION_LEVEL, features: Mapping[str, int] | None = None) -> list[FeatureLevelRecord]:
        """metadata.version first, then the other finalized features by name (level 0 means off: no record)."""
        records = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)]
        for name, level in sorted((features or {}).items()):
            if name not in (METADATA_VERSION_FEATURE, KRAFT_VERSION_FEATURE) and level > 0:
                records.append(FeatureLevelRecord(name=name, feature_level=level))
        return records

    def finalized_features(self, image: MetadataImage) -> dict[str, int]:
        """The image's finalized levels plus kraft.version from the Raft layer (0, static quorum: absent)."""
        features = dict(image.features)
        if self._kraft_version > 0:
            features[KRAFT_VERSION_FEATURE] = self._kraft_version
        return features


__all__ = [
    "BROKER_SUPPORTED_FEATURES",
    "ELIGIBLE_LEADER_REPLICAS_FEATURE",
    "ELIGIBLE_LEADER_REPLICAS_LEVEL",
    "FeatureControlManager",
    "KRAFT_VERSION_FEATURE",
    "METADATA_VERSION_FEATURE",
    "METADATA_VERSION_LEVEL",
    "MINIMUM_KRAFT_METADATA_VERSION_LEVEL",
    "MINIMUM_METADATA_VERSION_LEVEL",
    "NEW_CLUSTER_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "TRANSACTION_VERSION_LEVEL",
]
