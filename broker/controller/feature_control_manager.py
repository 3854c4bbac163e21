"""Kafka's FeatureControlManager, the part a new cluster needs: finalized feature levels.

metadata.version is a FeatureLevelRecord and must be the first record of a metadata log.
kraft.version is not: as in Kafka, it belongs to the Raft layer (its KRaftVersionRecord
control record), so it is never written here; the controller adds the Raft layer's level
to the finalized features it checks brokers against. A new cluster also finalizes
transaction.version 2, as Kafka 4.0 does. UpdateFeatures (update_features) moves a finalized
level once this controller and every registered broker support it, as Kafka's does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ControllerResult
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


class UpgradeType(enum.IntEnum):
    """UpdateFeatures' upgrade_type (KIP-778): any other value is Kafka's UNKNOWN."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdateResult:
    error_code: int
    error_message: str | None = None


def _reason_not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    """Kafka's QuorumFeatures.reasonNotSupported: (0, 0) is a feature the node does not have."""
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {low}-{high}"


def _invalid_update_version(name: str, level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(ErrorCode.invalid_update_version, f"Invalid update version {level} for feature {name}. {message}")


def _invalid_metadata_version(level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(ErrorCode.invalid_update_version, f"Invalid metadata.version {level}. {message}")


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

    def update_features(
        self, image: MetadataImage, updates: Mapping[str, int], upgrade_types: Mapping[str, int], *, validate_only: bool = False
    ) -> ControllerResult[dict[str, FeatureUpdateResult]]:
        """UpdateFeatures: each feature's answer, and a FeatureLevelRecord for each accepted one
        (none when validate_only). Features fail or pass one by one, as in Kafka."""
        records: list[FeatureLevelRecord] = []
        results: dict[str, FeatureUpdateResult] = {}
        for name in sorted(updates):
            result, record = self._update_feature(image, name, updates[name], upgrade_types.get(name, UpgradeType.UPGRADE))
            results[name] = result
            if record is not None:
                records.append(record)
        return ControllerResult([] if validate_only else records, results)

    def _update_feature(self, image: MetadataImage, name: str, level: int, upgrade_type: int) -> tuple[FeatureUpdateResult, FeatureLevelRecord | None]:
        if upgrade_type not in UpgradeType.__members__.values():
            return _invalid_update_version(name, level, "The controller does not support the given upgrade type."), None
        current = image.features.get(name, 0)
        if level < 0:
            return _invalid_update_version(name, level, "A feature version cannot be less than 0."), None
        reason = self._reason_not_supported(image, name, level)
        if reason is not None:
            return _invalid_update_version(name, level, reason), None
        if level < current and upgrade_type == UpgradeType.UPGRADE:
            return (
                _invalid_update_version(
                    name, level, "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
                ),
                None,
            )
        if level > current and upgrade_type != UpgradeType.UPGRADE:
            return _invalid_update_version(name, level, "Can't downgrade to a newer version."), None
        if name == METADATA_VERSION_FEATURE and level < current:
            # kbroker does not track which metadata.version levels changed the record formats, so every
            # downgrade is one that might lose metadata (Kafka's checkIfMetadataChanged answering true).
            if upgrade_type == UpgradeType.UNSAFE_DOWNGRADE:
                return _invalid_metadata_version(level, "Unsafe metadata downgrade is not supported in this version."), None
            return (
                _invalid_metadata_version(
                    level,
                    "Refusing to perform the requested downgrade because it might delete metadata information. "
                    "Retry using UNSAFE_DOWNGRADE if you want to force the downgrade to proceed.",
                ),
                None,
            )
        return FeatureUpdateResult(ErrorCode.none), FeatureLevelRecord(name=name, feature_level=level)

    @staticmethod
    def _reason_not_supported(image: MetadataImage, name: str, level: int) -> str | None:
        """This controller runs this build, so it supports BROKER_SUPPORTED_FEATURES; every registered
        broker, fenced or not, must support the level too."""
        reason = _reason_not_supported(level, "Local controller", BROKER_SUPPORTED_FEATURES.get(name, (0, 0)))
        if reason is not None:
            return reason
        for broker_id in sorted(image.brokers):
            ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in image.brokers[broker_id].supported_features}
            reason = _reason_not_supported(level, f"broker{broker_id}", ranges.get(name, (0, 0)))
            if reason is not None:
                return reason
        return None

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
    "FeatureUpdateResult",
    "KRAFT_VERSION_FEATURE",
    "METADATA_VERSION_FEATURE",
    "METADATA_VERSION_LEVEL",
    "MINIMUM_KRAFT_METADATA_VERSION_LEVEL",
    "MINIMUM_METADATA_VERSION_LEVEL",
    "NEW_CLUSTER_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "TRANSACTION_VERSION_LEVEL",
    "UpgradeType",
]
