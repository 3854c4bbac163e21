"""FeatureControlManager.update_features: Kafka's UpdateFeatures rules, over a replayed log."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from broker.controller.feature_control_manager import (
    BROKER_SUPPORTED_FEATURES,
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE,
    FeatureControlManager,
    FeatureUpdateResult,
    UpgradeType,
)
from broker.metadata.metadata_records import BrokerFeature, FeatureLevelRecord
from tests.unit.control_manager_images import Log, registration

OK = FeatureUpdateResult(ErrorCode.none)


def current_broker(broker_id: int) -> object:
    """A broker of this build: it registers every feature range kbroker has."""
    features = tuple(BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in BROKER_SUPPORTED_FEATURES.items())
    return dataclasses.replace(registration(broker_id), features=features)


def old_cluster(*brokers: object) -> Log:
    """A cluster formatted before transaction.version 2 and ELR: metadata.version only."""
    log = Log()
    log.commit(FeatureControlManager.bootstrap_records())
    log.commit(list(brokers))  # type: ignore[arg-type]
    return log


def update(log: Log, updates: dict[str, int], types: dict[str, int] | None = None, validate_only: bool = False) -> dict[str, FeatureUpdateResult]:
    result = FeatureControlManager().update_features(log.image, updates, types or {}, validate_only=validate_only)
    log.commit(result.records)
    return result.response


def test_upgrade_writes_feature_level_records_every_broker_supports() -> None:
    log = old_cluster(current_broker(1), current_broker(2))
    assert update(log, {TRANSACTION_VERSION_FEATURE: 2, ELIGIBLE_LEADER_REPLICAS_FEATURE: 1}) == {TRANSACTION_VERSION_FEATURE: OK, ELIGIBLE_LEADER_REPLICAS_FEATURE: OK}
    assert log.image.features[TRANSACTION_VERSION_FEATURE] == 2
    assert log.image.features[ELIGIBLE_LEADER_REPLICAS_FEATURE] == 1


def test_validate_only_answers_without_records() -> None:
    log = old_cluster(current_broker(1))
    result = FeatureControlManager().update_features(log.image, {TRANSACTION_VERSION_FEATURE: 2}, {}, validate_only=True)
    assert result.response == {TRANSACTION_VERSION_FEATURE: OK}
    assert result.records == []


def test_a_broker_without_the_feature_refuses_the_level() -> None:
    log = old_cluster(current_broker(1), registration(2))  # broker 2 registered metadata.version only
    answer = update(log, {TRANSACTION_VERSION_FEATURE: 2})[TRANSACTION_VERSION_FEATURE]
    assert answer.error_code == ErrorCode.invalid_update_version
    assert answer.error_message == "Invalid update version 2 for feature transaction.version. broker2 does not support this feature."
    assert TRANSACTION_VERSION_FEATURE not in log.image.features


def test_a_level_beyond_a_brokers_range_names_the_range() -> None:
    narrow = dataclasses.replace(
        current_broker(3), features=(BrokerFeature(name=TRANSACTION_VERSION_FEATURE, min_supported_version=0, max_supported_version=1),)
    )
    answer = update(old_cluster(current_broker(1), narrow), {TRANSACTION_VERSION_FEATURE: 2})[TRANSACTION_VERSION_FEATURE]
    assert answer.error_message == "Invalid update version 2 for feature transaction.version. broker3 only supports versions 0-1"


def test_the_controller_refuses_what_this_build_lacks() -> None:
    log = old_cluster(current_broker(1))
    answer = update(log, {TRANSACTION_VERSION_FEATURE: 3})[TRANSACTION_VERSION_FEATURE]
    assert answer.error_message == "Invalid update version 3 for feature transaction.version. Local controller only supports versions 0-2"
    unknown = update(log, {"share.version": 1})["share.version"]
    assert unknown.error_message == "Invalid update version 1 for feature share.version. Local controller does not support this feature."


def test_each_feature_fails_or_passes_alone() -> None:
    log = old_cluster(current_broker(1))
    answers = update(log, {TRANSACTION_VERSION_FEATURE: 2, ELIGIBLE_LEADER_REPLICAS_FEATURE: 5})
    assert answers[TRANSACTION_VERSION_FEATURE] == OK
    assert answers[ELIGIBLE_LEADER_REPLICAS_FEATURE].error_code == ErrorCode.invalid_update_version
    assert log.image.features.get(TRANSACTION_VERSION_FEATURE) == 2
    assert ELIGIBLE_LEADER_REPLICAS_FEATURE not in log.image.features


def test_a_downgrade_needs_a_downgrade_type_and_level_zero_removes_the_feature() -> None:
    log = old_cluster(current_broker(1))
    update(log, {TRANSACTION_VERSION_FEATURE: 2})
    refused = update(log, {TRANSACTION_VERSION_FEATURE: 0})[TRANSACTION_VERSION_FEATURE]
    assert refused.error_message == (
        "Invalid update version 0 for feature transaction.version. "
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert update(log, {TRANSACTION_VERSION_FEATURE: 0}, {TRANSACTION_VERSION_FEATURE: UpgradeType.SAFE_DOWNGRADE}) == {TRANSACTION_VERSION_FEATURE: OK}
    assert TRANSACTION_VERSION_FEATURE not in log.image.features


def test_a_downgrade_type_cannot_raise_a_level() -> None:
    answer = update(old_cluster(current_broker(1)), {TRANSACTION_VERSION_FEATURE: 1}, {TRANSACTION_VERSION_FEATURE: UpgradeType.UNSAFE_DOWNGRADE})
    assert answer[TRANSACTION_VERSION_FEATURE].error_message == "Invalid update version 1 for feature transaction.version. Can't downgrade to a newer version."


def test_unknown_upgrade_type_and_negative_level() -> None:
    log = old_cluster(current_broker(1))
    unknown = update(log, {TRANSACTION_VERSION_FEATURE: 2}, {TRANSACTION_VERSION_FEATURE: 7})[TRANSACTION_VERSION_FEATURE]
    assert unknown.error_message == "Invalid update version 2 for feature transaction.version. The controller does not support the given upgrade type."
    negative = update(log, {TRANSACTION_VERSION_FEATURE: -1})[TRANSACTION_VERSION_FEATURE]
    assert negative.error_message == "Invalid update version -1 for feature transaction.version. A feature version cannot be less than 0."


def test_metadata_version_never_goes_down() -> None:
    log = old_cluster(current_broker(1))
    safe = update(log, {METADATA_VERSION_FEATURE: 20}, {METADATA_VERSION_FEATURE: UpgradeType.SAFE_DOWNGRADE})[METADATA_VERSION_FEATURE]
    assert safe.error_code == ErrorCode.invalid_update_version
    assert safe.error_message is not None and safe.error_message.startswith("Invalid metadata.version 20. Refusing to perform the requested downgrade")
    unsafe = update(log, {METADATA_VERSION_FEATURE: 20}, {METADATA_VERSION_FEATURE: UpgradeType.UNSAFE_DOWNGRADE})[METADATA_VERSION_FEATURE]
    assert unsafe.error_message == "Invalid metadata.version 20. Unsafe metadata downgrade is not supported in this version."
    assert log.image.features[METADATA_VERSION_FEATURE] == METADATA_VERSION_LEVEL


def test_metadata_version_upgrade_from_an_older_level() -> None:
    log = Log()
    log.commit(FeatureControlManager.bootstrap_records(metadata_version=20))
    log.commit([current_broker(1)])  # type: ignore[list-item]
    assert update(log, {METADATA_VERSION_FEATURE: METADATA_VERSION_LEVEL}) == {METADATA_VERSION_FEATURE: OK}
    assert log.image.features[METADATA_VERSION_FEATURE] == METADATA_VERSION_LEVEL


def test_records_are_feature_level_records() -> None:
    result = FeatureControlManager().update_features(old_cluster(current_broker(1)).image, {TRANSACTION_VERSION_FEATURE: 2}, {})
    assert result.records == [FeatureLevelRecord(name=TRANSACTION_VERSION_FEATURE, feature_level=2)]
