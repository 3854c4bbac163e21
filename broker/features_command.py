"""`kbroker features`: kafka-features.sh, over the wire.

describe prints what a broker's ApiVersions answer tells of the features (the ranges this
broker supports, the cluster's finalized levels and their epoch); upgrade and downgrade send
UpdateFeatures, which the broker forwards to the active controller, and print each feature's
outcome as Kafka 4.4's tool does. describe prints metadata.version levels as Kafka's release names;
upgrade and downgrade print every level as a number, as Kafka's tool does.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Mapping, TextIO

from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16

from broker import wire_client
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, UpgradeType
from broker.metadata import metadata_version as mv

CLIENT_ID = "kbroker-features"
API_TIMEOUT = datetime.timedelta(seconds=60)
# Kafka's MetadataVersion names by feature level, 3.0-IV1 (1) to 4.5-IV0 (34).
METADATA_VERSIONS: Mapping[int, str] = {v.level: v.name for v in mv.METADATA_VERSIONS}


class FeatureCommandError(Exception):
    """What the tool prints before exiting 1 (Kafka's TerseException)."""


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: UpgradeType


def level_to_string(feature: str, level: int) -> str:
    """Kafka's FeatureCommand.levelToString: metadata.version by its release name."""
    if feature == METADATA_VERSION_FEATURE:
        return METADATA_VERSIONS.get(level, str(level))
    return str(level)


def metadata_level(version: str) -> int:
    """Kafka's MetadataVersion.fromVersionString: "4.4-IV1", or "4.4" for that release's last level
    (4.5-IV0, still in development, too: the controller decides whether it takes it)."""
    try:
        return mv.from_version_string(version, unstable=True).level
    except ValueError as e:
        raise FeatureCommandError(str(e)) from None


def parse_feature_levels(specs: list[str]) -> dict[str, int]:
    """--feature name=level, repeatable, each feature once (Kafka's parseNameAndLevel)."""
    levels: dict[str, int] = {}
    for spec in specs:
        name, sep, level = spec.partition("=")
        if not sep or not name.strip():
            raise FeatureCommandError(f"Can't parse feature=level string {spec}: equals sign not found.")
        try:
            value = int(level.strip())
        except ValueError:
            raise FeatureCommandError(f"Can't parse feature=level string {spec}: unable to parse {level.strip()} as a short.") from None
        if name.strip() in levels:
            raise FeatureCommandError(f"Feature {name.strip()} was specified more than once.")
        levels[name.strip()] = value
    return levels


def describe(bootstrap: str, out: TextIO) -> None:
    """ApiVersions v4: before it (KIP-1022) a broker leaves out the features whose range starts at 0."""
    response = wire_client.request(bootstrap, ApiVersionsRequest(client_software_name=CLIENT_ID, client_software_version="1"), client_id=CLIENT_ID)
    finalized = {f.name: int(f.max_version_level) for f in response.finalized_features}
    epoch = int(response.finalized_features_epoch)
    for feature in sorted(response.supported_features, key=lambda f: f.name):
        name = feature.name
        out.write(
            f"Feature: {name:<40}  SupportedMinVersion: {level_to_string(name, int(feature.min_version)):<15}  "
            f"SupportedMaxVersion: {level_to_string(name, int(feature.max_version)):<15}  "
            f"FinalizedVersionLevel: {level_to_string(name, finalized.get(name, 0)):<15}  "
            f"Epoch: {epoch if epoch >= 0 else '-'}\n"
        )


def update(bootstrap: str, updates: list[FeatureUpdate], dry_run: bool, out: TextIO, operation: str | None = None) -> None:
    """UpdateFeatures v1 (validate_only for --dry-run); each feature's outcome in Kafka 4.4's words,
    in feature-name order: "<feature> was upgraded to <level>." (levels as numbers, metadata.version's
    too), "Could not upgrade <feature> to <level>. <error>" ("Can not" for a dry run), "disabled" for
    ``operation`` disable. ``operation`` is the command (upgrade, downgrade, disable); without it, it
    follows from the first update. Raises FeatureCommandError when any failed."""
    request = update_v1.UpdateFeaturesRequest(
        timeout=API_TIMEOUT,
        feature_updates=tuple(
            update_v1.FeatureUpdateKey(feature=u.feature, max_version_level=i16(u.level), upgrade_type=i8(u.upgrade_type)) for u in updates
        ),
        validate_only=dry_run,
    )
    response = wire_client.request(bootstrap, request, client_id=CLIENT_ID)
    results: dict[str, tuple[int, str | None]] = {r.feature: (r.error_code, r.error_message) for r in response.results}
    op = operation or (_operation(updates[0]) if updates else "upgrade")
    failures = 0
    for u in sorted(updates, key=lambda u: u.feature):
        code, message = results.get(u.feature, (response.error_code, response.error_message))
        if response.error_code != ErrorCode.none:
            # All or nothing (Kafka 4.4): the top level names the feature that failed them all.
            code, message = response.error_code, response.error_message
        if code != ErrorCode.none:
            failures += 1
            target = f"disable {u.feature}" if op == "disable" else f"{op} {u.feature} to {u.level}"
            out.write(f"{'Can not' if dry_run else 'Could not'} {target}. {message or ErrorCode(code).name}\n")
        else:
            done = "disabled." if op == "disable" else f"{op}d to {u.level}."
            out.write(f"{u.feature} {'can be' if dry_run else 'was'} {done}\n")
    if failures:
        raise FeatureCommandError(f"{failures} out of {len(updates)} operation(s) failed.")


def _operation(u: FeatureUpdate) -> str:
    if u.upgrade_type == UpgradeType.UPGRADE:
        return "upgrade"
    return "disable" if u.level == 0 else "downgrade"


def release_levels(release: str, upgrade_type: UpgradeType) -> dict[str, int]:
    """--release-version: metadata.version at that release and every production feature at its
    default for it (Kafka's FeatureCommand: an upgrade leaves out the features whose default is 0)."""
    level = metadata_level(release)
    levels = {METADATA_VERSION_FEATURE: level}
    for name, default in mv.default_features(level).items():
        if default > 0 or upgrade_type != UpgradeType.UPGRADE:
            levels[name] = default
    return levels


def version_mapping(release: str | None, out: TextIO) -> None:
    """kafka-features version-mapping: the levels a release version sets."""
    level = mv.LATEST_PRODUCTION.level if release is None else metadata_level(release)
    out.write(f"metadata.version={level} ({mv.BY_LEVEL[level].release})\n")
    for name, default in mv.default_features(level).items():
        out.write(f"{name}={default}\n")


def updates_for(feature_specs: list[str], metadata: str | None, upgrade_type: UpgradeType, release: str | None = None) -> list[FeatureUpdate]:
    """The updates --feature and --metadata ask for (one of them at least), or --release-version's."""
    if release is not None:
        if feature_specs or metadata is not None:
            raise FeatureCommandError("Can not specify `release-version` with other feature flags.")
        return [FeatureUpdate(name, level, upgrade_type) for name, level in release_levels(release, upgrade_type).items()]
    levels = parse_feature_levels(feature_specs)
    if metadata is not None:
        if METADATA_VERSION_FEATURE in levels:
            raise FeatureCommandError("Feature metadata.version was specified more than once.")
        levels[METADATA_VERSION_FEATURE] = metadata_level(metadata)
    if not levels:
        raise FeatureCommandError("You must specify at least one feature to " + ("upgrade" if upgrade_type == UpgradeType.UPGRADE else "downgrade"))
    return [FeatureUpdate(name, level, upgrade_type) for name, level in levels.items()]


def disables_for(features: list[str], unsafe: bool) -> list[FeatureUpdate]:
    if not features:
        raise FeatureCommandError("You must specify at least one feature to disable")
    kind = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    return [FeatureUpdate(name, 0, kind) for name in features]
