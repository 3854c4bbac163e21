"""Kafka's FeatureControlManager, the part a new cluster needs: finalized feature levels.

metadata.version is a FeatureLevelRecord and must be the first record of a metadata log.
kraft.version is not: as in Kafka, it belongs to the Raft layer (its KRaftVersionRecord
control record), read and upgraded through a KRaftVersionAccessor; the controller adds the
Raft layer's level to the finalized features it checks brokers against, and an upgrade of it
asks the Raft leader to write KRaftVersionRecord(1) with the voters (a NoOpRecord here waits for it). A new cluster also finalizes Kafka's
defaults for its metadata.version of the features kbroker implements (transaction.version 2,
group.version 1, eligible.leader.replicas.version 1, share.version 2, streams.version 1). UpdateFeatures (update_features) moves
finalized levels once this controller, every registered broker and (from metadata.version
3.7-IV0, KIP-919) every registered controller support them and their dependencies hold, all of
them or none, as Kafka 4.4's does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ControllerResult
from broker.metadata.metadata_image import MetadataImage
from broker.metadata import metadata_version as mv
from broker.metadata.metadata_records import FeatureLevelRecord, MetadataRecord, NoOpRecord
from raft.kafka_raft_client import SUPPORTED_KRAFT_VERSION, NotLeaderError
from raft.kraft_version_upgrade import InvalidUpdateVersionError

METADATA_VERSION_FEATURE = mv.METADATA_VERSION_FEATURE
KRAFT_VERSION_FEATURE = mv.KRAFT_VERSION_FEATURE
# metadata.version feature levels (broker/metadata/metadata_version.py): 3.3-IV3 (7) is the oldest
# KRaft supports; 4.4-IV2 (33) is Kafka 4.4's latest production level and a new cluster's default.
# 4.5-IV0 (34) is in development: supported only with unstable.feature.versions.enable.
MINIMUM_METADATA_VERSION_LEVEL = mv.MINIMUM_VERSION.level
METADATA_VERSION_LEVEL = mv.LATEST_PRODUCTION.level
LATEST_TESTING_METADATA_VERSION_LEVEL = mv.LATEST_TESTING.level
# KIP-966's eligible leader replicas. Kafka finalizes level 1 when it formats a new cluster at
# 4.1-IV0 or later; kbroker's first active controller does too (NEW_CLUSTER_FEATURES). A metadata
# log that began without it keeps the rules from before KIP-966. Level 1 needs metadata.version 4.0-IV1.
ELIGIBLE_LEADER_REPLICAS_FEATURE = mv.ELIGIBLE_LEADER_REPLICAS_FEATURE
ELIGIBLE_LEADER_REPLICAS_LEVEL = 1
# transaction.version (KIP-890): 2 bumps the producer epoch at every transaction's end and has
# partition leaders add partitions to transactions. Kafka finalizes its latest production level
# on a new cluster (from metadata.version 4.0-IV2); a cluster made before keeps what it has, 0.
TRANSACTION_VERSION_FEATURE = mv.TRANSACTION_VERSION_FEATURE
TRANSACTION_VERSION_LEVEL = 2
# group.version (KIP-848): 1 turns on the consumer rebalance protocol (below it ConsumerGroupHeartbeat
# and ConsumerGroupDescribe answer UNSUPPORTED_VERSION: broker/group/group_version.py). Kafka
# finalizes 1 on a cluster formatted at 4.0-IV0 or later; it depends on no metadata.version.
GROUP_VERSION_FEATURE = mv.GROUP_VERSION_FEATURE
GROUP_VERSION_LEVEL = 1
# share.version (KIP-932): 1 turns on share groups, 2 their dead-letter queue (KIP-1191;
# broker/group/share_version.py). Kafka finalizes 1 on a cluster formatted at 4.2-IV0 or later,
# 2 (its latest production level) at 4.4-IV0 or later; neither depends on another feature.
SHARE_VERSION_FEATURE = mv.SHARE_VERSION_FEATURE
SHARE_VERSION_LEVEL = 2
# streams.version (KIP-1071): 1 turns on streams groups (broker/group/streams_version.py). Kafka
# finalizes 1, its latest production level, on a cluster formatted at 4.2-IV1 or later; it depends
# on no other feature.
STREAMS_VERSION_FEATURE = mv.STREAMS_VERSION_FEATURE
STREAMS_VERSION_LEVEL = 1
# The features besides metadata.version that kbroker implements, with the highest level of each.
IMPLEMENTED_FEATURES: Mapping[str, int] = {
    ELIGIBLE_LEADER_REPLICAS_FEATURE: ELIGIBLE_LEADER_REPLICAS_LEVEL,
    GROUP_VERSION_FEATURE: GROUP_VERSION_LEVEL,
    SHARE_VERSION_FEATURE: SHARE_VERSION_LEVEL,
    STREAMS_VERSION_FEATURE: STREAMS_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE: TRANSACTION_VERSION_LEVEL,
}


# Feature levels kbroker supports only with unstable.feature.versions.enable, as Kafka its levels
# in development: none at present.
UNSTABLE_FEATURES: Mapping[str, int] = {}


def new_cluster_features(metadata_version: int = METADATA_VERSION_LEVEL) -> dict[str, int]:
    """The finalized levels besides metadata.version a cluster formatted at ``metadata_version`` starts
    with: Kafka's defaults for that level (Feature.defaultLevel), for the features kbroker implements."""
    return {name: min(mv.default_level(name, metadata_version), top) for name, top in IMPLEMENTED_FEATURES.items()}


# The finalized levels besides metadata.version that a new cluster starts with.
NEW_CLUSTER_FEATURES: Mapping[str, int] = new_cluster_features()


def supported_features(unstable: bool = False) -> dict[str, tuple[int, int]]:
    """The ranges a node of this build registers with and shows in ApiVersions (Kafka's
    BrokerFeatures.defaultSupportedFeatures, for the features kbroker has): metadata.version up to
    the latest production level, or the latest in development with ``unstable.feature.versions.enable``,
    which also brings the UNSTABLE_FEATURES."""
    top = LATEST_TESTING_METADATA_VERSION_LEVEL if unstable else METADATA_VERSION_LEVEL
    kraft = {KRAFT_VERSION_FEATURE: (int(SUPPORTED_KRAFT_VERSION[0]), int(SUPPORTED_KRAFT_VERSION[1]))}
    features = IMPLEMENTED_FEATURES | UNSTABLE_FEATURES if unstable else IMPLEMENTED_FEATURES
    return {METADATA_VERSION_FEATURE: (MINIMUM_METADATA_VERSION_LEVEL, top)} | kraft | {name: (0, level) for name, level in features.items()}


BROKER_SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = supported_features()
# What Kafka assumes of a broker that registers without a metadata.version range:
# only MetadataVersion.MINIMUM_KRAFT_VERSION (3.0-IV1).
MINIMUM_KRAFT_METADATA_VERSION_LEVEL = mv.MINIMUM_KRAFT_VERSION.level


def metadata_version_of(image: MetadataImage) -> mv.MetadataVersion:
    """The image's finalized metadata.version (the oldest KRaft level before any is finalized)."""
    return mv.for_level(image.features.get(METADATA_VERSION_FEATURE))


def eligible_leader_replicas_enabled(image: MetadataImage) -> bool:
    """Kafka's isElrEnabled: the cluster finalized eligible.leader.replicas.version 1 or later."""
    return image.features.get(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) >= 1


class KRaftVersionAccessor(Protocol):
    """Kafka's KRaftVersionAccessor: the Raft layer's kraft.version, and its upgrade on the leader."""

    def kraft_version(self) -> int: ...

    def upgrade_kraft_version(self, kraft_version: int, validate_only: bool) -> None:
        """Raises InvalidUpdateVersionError, NotLeaderError, ValueError (no such version) or RuntimeError."""
        ...


@dataclass(frozen=True, slots=True)
class FixedKRaftVersion:
    """A controller with no Raft layer behind it (unit tests): a level that never moves."""

    level: int = 0

    def kraft_version(self) -> int:
        return self.level

    def upgrade_kraft_version(self, kraft_version: int, validate_only: bool) -> None:
        raise RuntimeError("there is no Raft layer to upgrade kraft.version in")


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
    return f"{what} only supports versions {low}-{high}" if low != high else f"{what} only supports versions {low}"


def _invalid_update_version(name: str, level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(ErrorCode.invalid_update_version, f"Invalid update version {level} for feature {name}. {message}")


def _invalid_metadata_version(level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(ErrorCode.invalid_update_version, f"Invalid metadata.version {level}. {message}")


def _unsupported_metadata_downgrade(current: int, level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(ErrorCode.invalid_update_version, f"Unsupported metadata.version downgrade from {current} to {level}. {message}")


# The text Kafka 4.4's controller puts before the error of the feature that failed an UpdateFeatures.
ALL_FAILED = "The update failed for all features since the following feature had an error: "


class FeatureControlManager:
    def __init__(
        self,
        *,
        kraft_version: KRaftVersionAccessor = FixedKRaftVersion(),
        node_id: int | None = None,
        unstable_feature_versions: bool = False,
        quorum_node_ids: Sequence[int] = (),
    ) -> None:
        """``quorum_node_ids``: the voters of controller.quorum.voters (none with a dynamic quorum),
        each of which must have registered before a feature moves, as Kafka's QuorumFeatures."""
        self._kraft_version = kraft_version
        self._node_id = node_id
        self._quorum_node_ids = tuple(quorum_node_ids)
        self._supported = supported_features(unstable_feature_versions)

    @property
    def supported(self) -> Mapping[str, tuple[int, int]]:
        return self._supported

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
    ) -> ControllerResult[FeatureUpdateResult]:
        """UpdateFeatures, all or nothing as in Kafka 4.4: the first feature refused (by name order)
        fails the whole request and no record is written; else a FeatureLevelRecord for each
        feature (none when validate_only). Dependencies are checked against the levels the request
        leaves: metadata.version and the other features named with it, else the finalized ones.
        A kraft.version upgrade is checked with the others and asked of the Raft leader only once
        every feature passed, so a refused request leaves the quorum as it was."""
        proposed = dict(image.features)
        proposed.setdefault(METADATA_VERSION_FEATURE, metadata_version_of(image).level)
        proposed.update(updates)
        records: list[MetadataRecord] = []
        for name in sorted(updates):
            result, record = self._update_feature(image, name, updates[name], upgrade_types.get(name, UpgradeType.UPGRADE), proposed)
            if result.error_code != ErrorCode.none:
                return ControllerResult([], result)
            if record is not None:
                records.append(record)
        if validate_only:
            return ControllerResult([], FeatureUpdateResult(ErrorCode.none))
        if any(isinstance(record, NoOpRecord) for record in records):
            result = self._upgrade_kraft_version(updates[KRAFT_VERSION_FEATURE], validate_only=False)
            if result.error_code != ErrorCode.none:
                return ControllerResult([], result)
        return ControllerResult(records, FeatureUpdateResult(ErrorCode.none))

    def _upgrade_kraft_version(self, level: int, *, validate_only: bool) -> FeatureUpdateResult:
        """Kafka's updateFeature for kraft.version: the Raft layer's refusals become the answer."""
        try:
            self._kraft_version.upgrade_kraft_version(level, validate_only)
        except InvalidUpdateVersionError as e:
            return FeatureUpdateResult(ErrorCode.invalid_update_version, str(e))
        except ValueError as e:
            return _invalid_update_version(KRAFT_VERSION_FEATURE, level, str(e))
        except NotLeaderError as e:
            return FeatureUpdateResult(ErrorCode.not_controller, str(e))
        except RuntimeError as e:
            return FeatureUpdateResult(ErrorCode.unknown_server_error, str(e))
        return FeatureUpdateResult(ErrorCode.none)

    def _update_feature(
        self, image: MetadataImage, name: str, level: int, upgrade_type: int, proposed: Mapping[str, int]
    ) -> tuple[FeatureUpdateResult, MetadataRecord | None]:
        if upgrade_type not in UpgradeType.__members__.values():
            return _invalid_update_version(name, level, "The controller does not support the given upgrade type."), None
        if name == METADATA_VERSION_FEATURE:
            current = metadata_version_of(image).level
        elif name == KRAFT_VERSION_FEATURE:
            current = self._kraft_version.kraft_version()
        else:
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
        if name == METADATA_VERSION_FEATURE:
            return self._update_metadata_version(current, level, upgrade_type)
        if name == KRAFT_VERSION_FEATURE:
            if upgrade_type != UpgradeType.UPGRADE:
                if level == current:
                    return FeatureUpdateResult(ErrorCode.none), None
                return _invalid_update_version(name, level, "Can't downgrade the version of this feature."), None
            # The NoOpRecord gives the request a record to wait on, committed after the Raft layer's.
            return self._upgrade_kraft_version(level, validate_only=True), NoOpRecord()
        error = mv.dependency_error(name, level, proposed)
        if error is not None:
            return _invalid_update_version(name, level, error), None
        return FeatureUpdateResult(ErrorCode.none), FeatureLevelRecord(name=name, feature_level=level)

    @staticmethod
    def _update_metadata_version(current: int, level: int, upgrade_type: int) -> tuple[FeatureUpdateResult, FeatureLevelRecord | None]:
        """Kafka's updateMetadataVersion: a downgrade across a level that changed the metadata is refused
        (unsafe downgrades are not supported at all); one across levels that changed nothing is allowed."""
        if level not in mv.BY_LEVEL or level < MINIMUM_METADATA_VERSION_LEVEL:
            return _invalid_metadata_version(level, f"Valid versions are from {MINIMUM_METADATA_VERSION_LEVEL} to {LATEST_TESTING_METADATA_VERSION_LEVEL}."), None
        if level < current and mv.check_if_metadata_changed(current, level):
            if upgrade_type == UpgradeType.UNSAFE_DOWNGRADE:
                return _unsupported_metadata_downgrade(current, level, "Unsafe metadata downgrade is not supported in this version."), None
            return (
                _unsupported_metadata_downgrade(current, level, "Refusing to perform the requested downgrade because it might delete metadata information."),
                None,
            )
        return FeatureUpdateResult(ErrorCode.none), FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level)

    def _reason_not_supported(self, image: MetadataImage, name: str, level: int) -> str | None:
        """This controller runs this build, so it supports its own ranges; every registered broker,
        fenced or not, must support the level too, and from metadata.version 3.7-IV0 every other
        registered controller, with every static voter registered (Kafka 4.4's reasonNotSupported)."""
        local = "Local controller" if self._node_id is None else f"Local controller {self._node_id}"
        reason = _reason_not_supported(level, local, self._supported.get(name, (0, 0)))
        if reason is not None:
            return reason
        for broker_id in sorted(image.brokers):
            ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in image.brokers[broker_id].supported_features}
            reason = _reason_not_supported(level, f"Broker {broker_id}", ranges.get(name, (0, 0)))
            if reason is not None:
                return reason
        if not metadata_version_of(image).is_controller_registration_supported:
            return None
        found = {self._node_id}
        for controller_id in sorted(image.controllers):
            if controller_id == self._node_id:
                continue
            reason = _reason_not_supported(level, f"Controller {controller_id}", image.controllers[controller_id].feature_range(name))
            if reason is not None:
                return reason
            found.add(controller_id)
        for node_id in self._quorum_node_ids:
            if node_id not in found:
                return f"controller {node_id} has not registered, and may not support this feature"
        return None

    def finalized_features(self, image: MetadataImage) -> dict[str, int]:
        """The image's finalized levels plus kraft.version from the Raft layer (0, static quorum: absent)."""
        return with_kraft_version(image.features, self._kraft_version.kraft_version())


def with_kraft_version(finalized: Mapping[str, int], kraft_version: int) -> dict[str, int]:
    """Finalized levels as Kafka 4.4 shows them (FinalizedFeatures.setFinalizedLevel): kraft.version
    from the Raft layer, absent at 0 (a static quorum) as level-0 features are."""
    features = dict(finalized)
    if kraft_version > 0:
        features[KRAFT_VERSION_FEATURE] = kraft_version
    return features


__all__ = [
    "ALL_FAILED",
    "BROKER_SUPPORTED_FEATURES",
    "IMPLEMENTED_FEATURES",
    "LATEST_TESTING_METADATA_VERSION_LEVEL",
    "ELIGIBLE_LEADER_REPLICAS_FEATURE",
    "ELIGIBLE_LEADER_REPLICAS_LEVEL",
    "FeatureControlManager",
    "FixedKRaftVersion",
    "KRaftVersionAccessor",
    "FeatureUpdateResult",
    "GROUP_VERSION_FEATURE",
    "GROUP_VERSION_LEVEL",
    "SHARE_VERSION_FEATURE",
    "SHARE_VERSION_LEVEL",
    "STREAMS_VERSION_FEATURE",
    "STREAMS_VERSION_LEVEL",
    "UNSTABLE_FEATURES",
    "KRAFT_VERSION_FEATURE",
    "METADATA_VERSION_FEATURE",
    "METADATA_VERSION_LEVEL",
    "MINIMUM_KRAFT_METADATA_VERSION_LEVEL",
    "MINIMUM_METADATA_VERSION_LEVEL",
    "NEW_CLUSTER_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "TRANSACTION_VERSION_LEVEL",
    "UpgradeType",
    "eligible_leader_replicas_enabled",
    "metadata_version_of",
    "new_cluster_features",
    "supported_features",
    "with_kraft_version",
]
