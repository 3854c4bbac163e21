"""`kbroker features`: kafka-features.sh, over the wire.

describe prints what a broker's ApiVersions answer tells of the features (the ranges this
broker supports, the cluster's finalized levels and their epoch); upgrade and downgrade send
UpdateFeatures, which the broker forwards to the active controller, and print each feature's
outcome as Kafka's tool does. metadata.version levels print as Kafka's release names.
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

CLIENT_ID = "kbroker-features"
API_TIMEOUT = datetime.timedelta(seconds=60)
# Kafka's MetadataVersion names by feature level, 3.0-IV1 (1) to 4.0-IV3 (25).
METADATA_VERSIONS: Mapping[int, str] = dict(
    enumerate(
        (
            "3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1",
            "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0",
            "3.9-IV0", "4.0-IV0", "4.0-IV1", "4.0-IV2", "4.0-IV3",
        ),
        start=1,
    )
)


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
    """Kafka's MetadataVersion.fromVersionString: "3.9-IV0", or "3.9" for that release's last level."""
    matches = [level for level, name in METADATA_VERSIONS.items() if name == version or name.split("-")[0] == version]
    if not matches:
        raise FeatureCommandError(f"Unsupported metadata.version {version}")
    return max(matches)


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
            f"Feature: {name}\tSupportedMinVersion: {level_to_string(name, int(feature.min_version))}\t"
            f"SupportedMaxVersion: {level_to_string(name, int(feature.max_version))}\t"
            f"FinalizedVersionLevel: {level_to_string(name, finalized.get(name, 0))}\t"
            f"Epoch: {epoch if epoch >= 0 else '-'}\n"
        )


def update(bootstrap: str, updates: list[FeatureUpdate], dry_run: bool, out: TextIO) -> None:
    """UpdateFeatures v1 (validate_only for --dry-run); each feature's outcome in Kafka's words.
    Raises FeatureCommandError when any failed."""
    request = update_v1.UpdateFeaturesRequest(
        timeout=API_TIMEOUT,
        feature_updates=tuple(
            update_v1.FeatureUpdateKey(feature=u.feature, max_version_level=i16(u.level), upgrade_type=i8(u.upgrade_type)) for u in updates
        ),
        validate_only=dry_run,
    )
    response = wire_client.request(bootstrap, request, client_id=CLIENT_ID)
    results: dict[str, tuple[int, str | None]] = {r.feature: (r.error_code, r.error_message) for r in response.results}
    failures = 0
    for u in updates:
        code, message = results.get(u.feature, (response.error_code, response.error_message))
        if code == ErrorCode.none and response.error_code != ErrorCode.none:
            code, message = response.error_code, response.error_message
        if code != ErrorCode.none:
            failures += 1
            out.write(f"Could not {_operation(u)} {u.feature}. {message or ErrorCode(code).name}\n")
        else:
            out.write(f"{u.feature} {'can be' if dry_run else 'was'} {_done(u)}.\n")
    if failures:
        raise FeatureCommandError(f"{failures} out of {len(updates)} operation(s) failed.")


def _operation(u: FeatureUpdate) -> str:
    if u.upgrade_type == UpgradeType.UPGRADE:
        return "upgrade"
    return "disable" if u.level == 0 else "downgrade"


def _done(u: FeatureUpdate) -> str:
    operation = _operation(u)
    if operation == "disable":
        return "disabled"
    return f"{operation}d to {level_to_string(u.feature, u.level)}"


def updates_for(feature_specs: list[str], metadata: str | None, upgrade_type: UpgradeType) -> list[FeatureUpdate]:
    """The updates --feature and --metadata ask for (one of them at least)."""
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
