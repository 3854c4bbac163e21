"""`kbroker features` without a cluster: kafka-features.sh's argument parsing and level names."""

from __future__ import annotations

import pytest

from broker.controller.feature_control_manager import UpgradeType
from broker.features_command import FeatureCommandError, FeatureUpdate, disables_for, level_to_string, metadata_level, parse_feature_levels, updates_for


def test_metadata_version_levels_print_as_kafka_releases() -> None:
    assert level_to_string("metadata.version", 7) == "3.3-IV3"
    assert level_to_string("metadata.version", 21) == "3.9-IV0"
    assert level_to_string("metadata.version", 25) == "4.0-IV3"
    assert level_to_string("transaction.version", 2) == "2"
    assert metadata_level("3.9") == 21 and metadata_level("4.0") == 25 and metadata_level("3.7-IV1") == 16
    with pytest.raises(FeatureCommandError, match="Unknown metadata.version '9.9'"):
        metadata_level("9.9")


def test_feature_levels_parse_once_each() -> None:
    assert parse_feature_levels(["transaction.version=2", " eligible.leader.replicas.version = 1"]) == {
        "transaction.version": 2,
        "eligible.leader.replicas.version": 1,
    }
    with pytest.raises(FeatureCommandError, match="equals sign not found"):
        parse_feature_levels(["transaction.version"])
    with pytest.raises(FeatureCommandError, match="unable to parse x as a short"):
        parse_feature_levels(["transaction.version=x"])
    with pytest.raises(FeatureCommandError, match="specified more than once"):
        parse_feature_levels(["transaction.version=1", "transaction.version=2"])


def test_updates_and_disables() -> None:
    assert updates_for(["transaction.version=2"], "3.9", UpgradeType.UPGRADE) == [
        FeatureUpdate("transaction.version", 2, UpgradeType.UPGRADE),
        FeatureUpdate("metadata.version", 21, UpgradeType.UPGRADE),
    ]
    with pytest.raises(FeatureCommandError, match="at least one feature to downgrade"):
        updates_for([], None, UpgradeType.SAFE_DOWNGRADE)
    assert disables_for(["transaction.version"], unsafe=True) == [FeatureUpdate("transaction.version", 0, UpgradeType.UNSAFE_DOWNGRADE)]


def test_kafka_44_levels_and_release_versions() -> None:
    assert metadata_level("4.4") == 33 and metadata_level("4.3") == 30 and metadata_level("4.1-IV1") == 27
    assert level_to_string("metadata.version", 33) == "4.4-IV2"
    from broker.controller.feature_control_manager import UpgradeType
    from broker.features_command import release_levels

    assert release_levels("4.4", UpgradeType.UPGRADE) == {
        "metadata.version": 33, "kraft.version": 1, "transaction.version": 2, "group.version": 1,
        "eligible.leader.replicas.version": 1, "share.version": 2, "streams.version": 1,
    }
    # An upgrade leaves out the features whose default is 0 (Kafka's FeatureCommand); a downgrade sends them.
    assert release_levels("4.0", UpgradeType.UPGRADE) == {"metadata.version": 25, "kraft.version": 1, "transaction.version": 2, "group.version": 1}
    assert release_levels("4.0", UpgradeType.SAFE_DOWNGRADE)["share.version"] == 0
