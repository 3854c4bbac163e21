"""metadata.version levels, and the feature levels that go with them (Kafka 4.4's MetadataVersion).

One row per level: its release name, whether Kafka ships it as production-ready, whether it
changed what the metadata log can hold (a downgrade across such a level could lose metadata,
so the controller refuses it), and the record versions a controller writes at that level.
Levels 1-6 (3.0-IV1 to 3.3-IV2) predate FeatureLevelRecord: they keep their names for display
only. Kafka 4.4's latest production level is 4.4-IV2 (33); 4.5-IV0 (34) is in development and is
only accepted with ``unstable.feature.versions.enable``.

Also here, as Kafka's Feature enum has them: the default level of each other feature for a
metadata.version (what ``storage format --release-version`` finalizes, and what
``kafka-features upgrade --release-version`` sends) and the features' dependencies on
metadata.version (eligible.leader.replicas.version 1 needs 4.0-IV1; group.version 1 needs none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"
TRANSACTION_VERSION_FEATURE = "transaction.version"
GROUP_VERSION_FEATURE = "group.version"
ELIGIBLE_LEADER_REPLICAS_FEATURE = "eligible.leader.replicas.version"
SHARE_VERSION_FEATURE = "share.version"
STREAMS_VERSION_FEATURE = "streams.version"


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    level: int
    name: str  # "4.4-IV2"
    production: bool
    did_metadata_change: bool
    partition_record_version: int
    partition_change_record_version: int
    register_broker_record_version: int

    @property
    def release(self) -> str:
        """"4.4" of "4.4-IV2"."""
        return self.name.split("-")[0]

    @property
    def is_controller_registration_supported(self) -> bool:  # 3.7-IV0: RegisterControllerRecord (KIP-919)
        return self.level >= 15

    @property
    def is_directory_assignment_supported(self) -> bool:  # 3.7-IV2
        return self.level >= 17

    @property
    def is_elr_supported(self) -> bool:  # 4.0-IV1: PartitionRecord / PartitionChangeRecord v2
        return self.level >= 23

    @property
    def is_cordoned_log_dirs_supported(self) -> bool:  # 4.3-IV0: RegisterBrokerRecord v4
        return self.level >= 30

    @property
    def is_cidr_acl_supported(self) -> bool:  # 4.4-IV1
        return self.level >= 32

    @property
    def is_controller_unregistration_supported(self) -> bool:  # 4.4-IV2: UnregisterControllerRecord
        return self.level >= 33

    @property
    def fetch_request_version(self) -> int:
        """The Fetch version a follower sends at this level (Kafka's MetadataVersion.fetchRequestVersion)."""
        return _step(self.level, ((27, 18), (21, 17), (19, 16), (10, 15), (9, 14)), 13)

    @property
    def list_offset_request_version(self) -> int:
        """The ListOffsets version a follower sends at this level (Kafka's listOffsetRequestVersion)."""
        return _step(self.level, ((29, 11), (25, 10), (21, 9), (9, 8)), 7)


def _step(level: int, steps: tuple[tuple[int, int], ...], lowest: int) -> int:
    return next((version for since, version in steps if level >= since), lowest)


def _mv(level: int, name: str, changed: bool, production: bool = True) -> MetadataVersion:
    partition = 2 if level >= 23 else 1 if level >= 17 else 0
    register = 4 if level >= 30 else 3 if level >= 17 else 2 if level >= 8 else 1 if level >= 7 else 0
    return MetadataVersion(level, name, production, changed, partition, partition, register)


# (level, name, did the level change the metadata): Kafka's MetadataVersion enum.
METADATA_VERSIONS: tuple[MetadataVersion, ...] = tuple(
    _mv(level, name, changed)
    for level, name, changed in (
        (1, "3.0-IV1", True), (2, "3.1-IV0", False), (3, "3.2-IV0", True), (4, "3.3-IV0", True),
        (5, "3.3-IV1", True), (6, "3.3-IV2", True), (7, "3.3-IV3", True), (8, "3.4-IV0", True),
        (9, "3.5-IV0", False), (10, "3.5-IV1", False), (11, "3.5-IV2", True), (12, "3.6-IV0", False),
        (13, "3.6-IV1", True), (14, "3.6-IV2", True), (15, "3.7-IV0", True), (16, "3.7-IV1", False),
        (17, "3.7-IV2", True), (18, "3.7-IV3", False), (19, "3.7-IV4", False), (20, "3.8-IV0", False),
        (21, "3.9-IV0", False),
        (22, "4.0-IV0", False),  # new clusters finalize group.version 1
        (23, "4.0-IV1", True), (24, "4.0-IV2", False), (25, "4.0-IV3", False),
        # Kafka 4.1 to 4.4.
        (26, "4.1-IV0", False),  # new clusters finalize eligible.leader.replicas.version 1
        (27, "4.1-IV1", False),  # replica fetchers send Fetch v18
        (28, "4.2-IV0", False),  # new clusters finalize share.version 1
        (29, "4.2-IV1", False),  # followers send ListOffsets v11; new clusters finalize streams.version 1
        (30, "4.3-IV0", True),  # RegisterBrokerRecord v4 / BrokerRegistrationChangeRecord v3: cordoned log dirs
        (31, "4.4-IV0", False),  # new clusters finalize share.version 2
        (32, "4.4-IV1", True),  # ACLs whose host is a CIDR range
        (33, "4.4-IV2", True),  # UnregisterControllerRecord
    )
) + (_mv(34, "4.5-IV0", False, production=False),)

BY_LEVEL: Mapping[int, MetadataVersion] = {mv.level: mv for mv in METADATA_VERSIONS}
# KRaft's oldest level: the first with FeatureLevelRecord as the log's start (Kafka's MINIMUM_VERSION).
MINIMUM_VERSION = BY_LEVEL[7]
LATEST_PRODUCTION = BY_LEVEL[33]
LATEST_TESTING = BY_LEVEL[34]
# The MetadataVersion fields of the level a cluster has finalized none of (a log with no FeatureLevelRecord yet).
MINIMUM_KRAFT_VERSION = BY_LEVEL[1]


def from_level(level: int) -> MetadataVersion:
    """The level's row; a level below 3.3-IV3 or past the newest is a ValueError."""
    mv = BY_LEVEL.get(level)
    if mv is None or level < MINIMUM_VERSION.level:
        raise ValueError(f"No MetadataVersion with feature level {level}")
    return mv


def for_level(level: int | None) -> MetadataVersion:
    """The row of a finalized level, as lenient as a loader must be: no level is the oldest KRaft
    level; a level newer than this build knows is taken as the newest known."""
    if level is None:
        return MINIMUM_VERSION
    return BY_LEVEL.get(level) or (LATEST_TESTING if level > LATEST_TESTING.level else MINIMUM_VERSION)


def supported_levels(unstable: bool = False) -> list[MetadataVersion]:
    top = LATEST_TESTING if unstable else LATEST_PRODUCTION
    return [mv for mv in METADATA_VERSIONS if MINIMUM_VERSION.level <= mv.level <= top.level]


def from_version_string(version: str, unstable: bool = False) -> MetadataVersion:
    """Kafka's MetadataVersion.fromVersionString: "4.4-IV1", or "4.4" for that release's last level;
    a level past the latest production one only with ``unstable``. ValueError in Kafka's words."""
    known = supported_levels(unstable)
    matches = [mv for mv in known if mv.name == version or mv.release == version]
    if not matches:
        names = ", ".join(mv.name for mv in known)
        raise ValueError(f"Unknown metadata.version '{version}'. Supported metadata.version are: {names}")
    return max(matches, key=lambda mv: mv.level)


def check_if_metadata_changed(a: int, b: int) -> bool:
    """Kafka's checkIfMetadataChanged: did any level after the lower of the two, up to the higher, change metadata?"""
    low, high = min(a, b), max(a, b)
    return any(mv.did_metadata_change for mv in METADATA_VERSIONS if low < mv.level <= high)


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """One level of a feature besides metadata.version: the level a new cluster gets it at from
    ``bootstrap`` on (Kafka's bootstrapMetadataVersion), and what else it needs."""

    level: int
    bootstrap: int
    dependencies: Mapping[str, int]


def _levels(*rows: tuple[int, int, Mapping[str, int]]) -> tuple[FeatureLevel, ...]:
    return tuple(FeatureLevel(level, bootstrap, deps) for level, bootstrap, deps in rows)


# Kafka 4.4's production features (Feature.PRODUCTION_FEATURES, in its order) and their levels; 0 is off.
FEATURE_LEVELS: Mapping[str, tuple[FeatureLevel, ...]] = {
    KRAFT_VERSION_FEATURE: _levels((0, 7, {}), (1, 21, {})),
    TRANSACTION_VERSION_FEATURE: _levels((0, 7, {}), (1, 24, {}), (2, 24, {})),
    GROUP_VERSION_FEATURE: _levels((0, 7, {}), (1, 22, {})),
    ELIGIBLE_LEADER_REPLICAS_FEATURE: _levels((0, 7, {}), (1, 26, {METADATA_VERSION_FEATURE: 23})),
    SHARE_VERSION_FEATURE: _levels((0, 7, {}), (1, 28, {}), (2, 31, {})),
    STREAMS_VERSION_FEATURE: _levels((0, 7, {}), (1, 29, {})),
}


def default_level(feature: str, metadata_version: int) -> int:
    """Kafka's Feature.defaultLevel: the newest level whose bootstrap metadata.version is at most this one."""
    levels = [f.level for f in FEATURE_LEVELS.get(feature, ()) if f.bootstrap <= metadata_version]
    return max(levels, default=0)


def default_features(metadata_version: int) -> dict[str, int]:
    """Every production feature at its default for ``metadata_version`` (kafka-features version-mapping)."""
    return {name: default_level(name, metadata_version) for name in FEATURE_LEVELS}


def dependency_error(feature: str, level: int, finalized: Mapping[str, int]) -> str | None:
    """Kafka's Feature.validateVersion: why ``feature`` cannot be at ``level`` with these finalized
    levels (metadata.version among them), or None. A feature kbroker does not know has no dependencies."""
    row = next((f for f in FEATURE_LEVELS.get(feature, ()) if f.level == level), None)
    if row is None:
        return None
    for name, needed in row.dependencies.items():
        if name == METADATA_VERSION_FEATURE:
            have = finalized.get(METADATA_VERSION_FEATURE)
            if have is None:
                return f"{feature} could not be set to {level} because it depends on metadata.version={MINIMUM_VERSION.level} ({MINIMUM_VERSION.name})"
            if have < needed:
                return f"{feature} could not be set to {level} because it depends on metadata.version level {needed}"
        elif finalized.get(name, 0) < needed:
            return f"{feature} could not be set to {level} because it depends on {name} level {needed}"
    return None


__all__ = [
    "BY_LEVEL",
    "ELIGIBLE_LEADER_REPLICAS_FEATURE",
    "FEATURE_LEVELS",
    "FeatureLevel",
    "GROUP_VERSION_FEATURE",
    "KRAFT_VERSION_FEATURE",
    "LATEST_PRODUCTION",
    "LATEST_TESTING",
    "METADATA_VERSIONS",
    "METADATA_VERSION_FEATURE",
    "MINIMUM_KRAFT_VERSION",
    "MINIMUM_VERSION",
    "MetadataVersion",
    "SHARE_VERSION_FEATURE",
    "STREAMS_VERSION_FEATURE",
    "TRANSACTION_VERSION_FEATURE",
    "check_if_metadata_changed",
    "default_features",
    "default_level",
    "dependency_error",
    "for_level",
    "from_level",
    "from_version_string",
    "supported_levels",
]
