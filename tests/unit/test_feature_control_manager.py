"""FeatureControlManager.update_features: Kafka 4.4's UpdateFeatures rules, over a replayed log.

The messages are Kafka 4.4's, as its controller answered them (a Kafka 4.4.0 node driven by its own
kafka-features tool); metadata.version levels are those of broker/metadata/metadata_version.py."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from broker.controller.feature_control_manager import (
    BROKER_SUPPORTED_FEATURES,
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    GROUP_VERSION_FEATURE,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    SHARE_VERSION_FEATURE,
    STREAMS_VERSION_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    FeatureControlManager,
    FeatureUpdateResult,
    UpgradeType,
    new_cluster_features,
    supported_features,
)
from broker.metadata.metadata_records import BrokerFeature, FeatureLevelRecord
from tests.unit.control_manager_images import Log, registration

OK = FeatureUpdateResult(ErrorCode.none)
SAFE = UpgradeType.SAFE_DOWNGRADE
UNSAFE = UpgradeType.UNSAFE_DOWNGRADE


def current_broker(broker_id: int, unstable: bool = False) -> object:
    """A broker of this build: it registers every feature range kbroker has."""
    ranges = supported_features(unstable)
    features = tuple(BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in ranges.items())
    return dataclasses.replace(registration(broker_id), features=features)


def cluster(metadata_version: int = METADATA_VERSION_LEVEL, *brokers: object, features: dict[str, int] | None = None) -> Log:
    log = Log()
    log.commit(FeatureControlManager.bootstrap_records(metadata_version, features))
    log.commit(list(brokers))  # type: ignore[arg-type]
    return log


def old_cluster(*brokers: object) -> Log:
    """A cluster formatted before transaction.version 2 and ELR: metadata.version only."""
    return cluster(METADATA_VERSION_LEVEL, *brokers)


def update(log: Log, updates: dict[str, int], types: dict[str, int] | None = None, validate_only: bool = False, **kw: object) -> FeatureUpdateResult:
    result = FeatureControlManager(**kw).update_features(log.image, updates, types or {}, validate_only=validate_only)  # type: ignore[arg-type]
    log.commit(result.records)
    return result.response


def refused(answer: FeatureUpdateResult) -> str:
    assert answer.error_code == ErrorCode.invalid_update_version
    assert answer.error_message is not None
    return answer.error_message


def test_upgrade_writes_feature_level_records_every_broker_supports() -> None:
    log = old_cluster(current_broker(1), current_broker(2))
    assert update(log, {TRANSACTION_VERSION_FEATURE: 2, ELIGIBLE_LEADER_REPLICAS_FEATURE: 1}) == OK
    assert log.image.features[TRANSACTION_VERSION_FEATURE] == 2
    assert log.image.features[ELIGIBLE_LEADER_REPLICAS_FEATURE] == 1


def test_validate_only_answers_without_records() -> None:
    log = old_cluster(current_broker(1))
    result = FeatureControlManager().update_features(log.image, {TRANSACTION_VERSION_FEATURE: 2}, {}, validate_only=True)
    assert result.response == OK
    assert result.records == []


def test_a_broker_without_the_feature_refuses_the_level() -> None:
    log = old_cluster(current_broker(1), registration(2))  # broker 2 registered metadata.version only
    answer = update(log, {TRANSACTION_VERSION_FEATURE: 2})
    assert refused(answer) == "Invalid update version 2 for feature transaction.version. Broker 2 does not support this feature."
    assert TRANSACTION_VERSION_FEATURE not in log.image.features


def test_a_level_beyond_a_brokers_range_names_the_range() -> None:
    narrow = dataclasses.replace(
        current_broker(3), features=(BrokerFeature(name=TRANSACTION_VERSION_FEATURE, min_supported_version=0, max_supported_version=1),)
    )
    answer = update(old_cluster(current_broker(1), narrow), {TRANSACTION_VERSION_FEATURE: 2})
    assert refused(answer) == "Invalid update version 2 for feature transaction.version. Broker 3 only supports versions 0-1"


def test_the_controller_refuses_what_this_build_lacks() -> None:
    log = old_cluster(current_broker(1))
    assert refused(update(log, {TRANSACTION_VERSION_FEATURE: 3}, node_id=1)) == (
        "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2"
    )
    assert refused(update(log, {STREAMS_VERSION_FEATURE: 2}, node_id=1)) == "Invalid update version 2 for feature streams.version. Local controller 1 only supports versions 0-1"


def test_streams_version_moves_down_and_up_with_no_dependency() -> None:
    """As a Kafka 4.4 node did with kafka-features: downgrade to 0 (safe), upgrade back to 1."""
    log = cluster(METADATA_VERSION_LEVEL, current_broker(1), features=new_cluster_features())
    assert log.image.features[STREAMS_VERSION_FEATURE] == 1
    assert update(log, {STREAMS_VERSION_FEATURE: 0}, {STREAMS_VERSION_FEATURE: SAFE}) == OK
    assert STREAMS_VERSION_FEATURE not in log.image.features
    assert update(log, {STREAMS_VERSION_FEATURE: 1}) == OK
    assert log.image.features[STREAMS_VERSION_FEATURE] == 1


def test_one_refused_feature_fails_them_all() -> None:
    """Kafka 4.4: all or nothing, and the answer is the first refused feature's (by name)."""
    log = old_cluster(current_broker(1))
    answer = update(log, {TRANSACTION_VERSION_FEATURE: 2, ELIGIBLE_LEADER_REPLICAS_FEATURE: 5}, node_id=1)
    assert refused(answer) == "Invalid update version 5 for feature eligible.leader.replicas.version. Local controller 1 only supports versions 0-1"
    assert TRANSACTION_VERSION_FEATURE not in log.image.features


def test_a_downgrade_needs_a_downgrade_type_and_level_zero_removes_the_feature() -> None:
    log = old_cluster(current_broker(1))
    update(log, {TRANSACTION_VERSION_FEATURE: 2})
    assert refused(update(log, {TRANSACTION_VERSION_FEATURE: 0})) == (
        "Invalid update version 0 for feature transaction.version. "
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert update(log, {TRANSACTION_VERSION_FEATURE: 0}, {TRANSACTION_VERSION_FEATURE: SAFE}) == OK
    assert TRANSACTION_VERSION_FEATURE not in log.image.features


def test_a_downgrade_type_cannot_raise_a_level() -> None:
    answer = update(old_cluster(current_broker(1)), {TRANSACTION_VERSION_FEATURE: 1}, {TRANSACTION_VERSION_FEATURE: UNSAFE})
    assert refused(answer) == "Invalid update version 1 for feature transaction.version. Can't downgrade to a newer version."


def test_unknown_upgrade_type_and_negative_level() -> None:
    log = old_cluster(current_broker(1))
    assert refused(update(log, {TRANSACTION_VERSION_FEATURE: 2}, {TRANSACTION_VERSION_FEATURE: 7})) == (
        "Invalid update version 2 for feature transaction.version. The controller does not support the given upgrade type."
    )
    assert refused(update(log, {TRANSACTION_VERSION_FEATURE: -1})) == "Invalid update version -1 for feature transaction.version. A feature version cannot be less than 0."


# --- metadata.version ---------------------------------------------------------------------------------


def test_the_default_is_kafka_44s_latest_production_level_with_its_feature_defaults() -> None:
    assert METADATA_VERSION_LEVEL == 33
    assert BROKER_SUPPORTED_FEATURES[METADATA_VERSION_FEATURE] == (7, 33)
    assert supported_features(unstable=True)[METADATA_VERSION_FEATURE] == (7, 34)
    assert new_cluster_features(33) == {ELIGIBLE_LEADER_REPLICAS_FEATURE: 1, GROUP_VERSION_FEATURE: 1, SHARE_VERSION_FEATURE: 2, STREAMS_VERSION_FEATURE: 1, TRANSACTION_VERSION_FEATURE: 2}
    assert new_cluster_features(25) == {ELIGIBLE_LEADER_REPLICAS_FEATURE: 0, GROUP_VERSION_FEATURE: 1, SHARE_VERSION_FEATURE: 0, STREAMS_VERSION_FEATURE: 0, TRANSACTION_VERSION_FEATURE: 2}
    # streams.version 1 bootstraps from 4.2-IV1 (29): a cluster formatted at 4.2-IV0 starts without it.
    assert [new_cluster_features(level)[STREAMS_VERSION_FEATURE] for level in (28, 29)] == [0, 1]
    # Kafka 4.4 formatted at 3.9 (21) finalizes no group.version: GV_1's bootstrap level is 4.0-IV0 (22).
    assert new_cluster_features(22)[GROUP_VERSION_FEATURE] == 1
    assert new_cluster_features(21) == {ELIGIBLE_LEADER_REPLICAS_FEATURE: 0, GROUP_VERSION_FEATURE: 0, SHARE_VERSION_FEATURE: 0, STREAMS_VERSION_FEATURE: 0, TRANSACTION_VERSION_FEATURE: 0}


def test_upgrade_from_40_to_44_level_by_level() -> None:
    log = cluster(25, current_broker(1), current_broker(2))
    for level in range(26, 34):
        assert update(log, {METADATA_VERSION_FEATURE: level}) == OK
        assert log.image.features[METADATA_VERSION_FEATURE] == level


def test_a_level_in_development_needs_unstable_feature_versions() -> None:
    log = cluster(33, current_broker(1))
    assert refused(update(log, {METADATA_VERSION_FEATURE: 34}, node_id=1)) == (
        "Invalid update version 34 for feature metadata.version. Local controller 1 only supports versions 7-33"
    )
    # This controller allows it, but a broker of a build without the option still refuses.
    assert refused(update(log, {METADATA_VERSION_FEATURE: 34}, unstable_feature_versions=True)) == (
        "Invalid update version 34 for feature metadata.version. Broker 1 only supports versions 7-33"
    )
    log = cluster(33, current_broker(1, unstable=True))
    assert update(log, {METADATA_VERSION_FEATURE: 34}, unstable_feature_versions=True) == OK


def test_downgrades_across_a_level_that_changed_metadata_are_refused() -> None:
    log = cluster(33, current_broker(1))
    assert refused(update(log, {METADATA_VERSION_FEATURE: 32}, {METADATA_VERSION_FEATURE: SAFE})) == (
        "Unsupported metadata.version downgrade from 33 to 32. Refusing to perform the requested downgrade because it might delete metadata information."
    )
    assert refused(update(log, {METADATA_VERSION_FEATURE: 32}, {METADATA_VERSION_FEATURE: UNSAFE})) == (
        "Unsupported metadata.version downgrade from 33 to 32. Unsafe metadata downgrade is not supported in this version."
    )
    assert log.image.features[METADATA_VERSION_FEATURE] == 33


def test_downgrades_across_levels_that_changed_nothing_are_allowed() -> None:
    """As on Kafka 4.4: 4.4-IV0 (31) down to 4.3-IV0 (30) is safe; 4.3-IV0 to 4.2-IV1 is not."""
    log = cluster(25, current_broker(1))
    assert update(log, {METADATA_VERSION_FEATURE: 31}) == OK
    assert update(log, {METADATA_VERSION_FEATURE: 30}, {METADATA_VERSION_FEATURE: SAFE}) == OK
    assert refused(update(log, {METADATA_VERSION_FEATURE: 29}, {METADATA_VERSION_FEATURE: SAFE})).startswith(
        "Unsupported metadata.version downgrade from 30 to 29. Refusing"
    )
    log = cluster(29, current_broker(1))
    assert update(log, {METADATA_VERSION_FEATURE: 24}, {METADATA_VERSION_FEATURE: SAFE}) == OK  # 4.2-IV1 to 4.0-IV2: nothing changed


def test_eligible_leader_replicas_needs_metadata_version_40_iv1() -> None:
    log = cluster(21, current_broker(1))  # 3.9-IV0
    assert refused(update(log, {ELIGIBLE_LEADER_REPLICAS_FEATURE: 1})) == (
        "Invalid update version 1 for feature eligible.leader.replicas.version. "
        "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"
    )
    # Named with the metadata.version it needs, it goes through (the dependency is checked on the levels the request leaves).
    assert update(log, {ELIGIBLE_LEADER_REPLICAS_FEATURE: 1, METADATA_VERSION_FEATURE: 25}) == OK
    assert log.image.features[ELIGIBLE_LEADER_REPLICAS_FEATURE] == 1


def test_unknown_metadata_version_levels() -> None:
    log = cluster(33, current_broker(1))
    assert refused(update(log, {METADATA_VERSION_FEATURE: 6}, {METADATA_VERSION_FEATURE: SAFE}, node_id=1)) == (
        "Invalid update version 6 for feature metadata.version. Local controller 1 only supports versions 7-33"
    )


def test_records_are_feature_level_records() -> None:
    result = FeatureControlManager().update_features(old_cluster(current_broker(1)).image, {TRANSACTION_VERSION_FEATURE: 2}, {})
    assert result.records == [FeatureLevelRecord(name=TRANSACTION_VERSION_FEATURE, feature_level=2)]


# --- group.version ------------------------------------------------------------------------------------


def test_group_version_ranges_and_bootstrap_records() -> None:
    """Every node registers group.version 0-1 (Kafka 4.4's BrokerFeatures); a new cluster writes it at 1."""
    assert BROKER_SUPPORTED_FEATURES[GROUP_VERSION_FEATURE] == (0, 1)
    assert supported_features(unstable=True)[GROUP_VERSION_FEATURE] == (0, 1)
    assert FeatureLevelRecord(name=GROUP_VERSION_FEATURE, feature_level=1) in FeatureControlManager.bootstrap_records(33, new_cluster_features(33))
    # At 3.9 it is 0: no record at all, as Kafka's bootstrap writes none.
    assert FeatureControlManager.bootstrap_records(21, new_cluster_features(21)) == [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21)]


def test_group_version_downgrade_disable_and_upgrade_as_kafka_44() -> None:
    """The answers of a Kafka 4.4 node to its kafka-features, formatted with no release version."""
    log = cluster(33, current_broker(1), features=new_cluster_features(33))
    assert refused(update(log, {GROUP_VERSION_FEATURE: 2}, node_id=1)) == (
        "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"
    )
    assert update(log, {GROUP_VERSION_FEATURE: 1}) == OK  # its own level again: allowed, and written
    assert refused(update(log, {GROUP_VERSION_FEATURE: 0})) == (
        "Invalid update version 0 for feature group.version. "
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert update(log, {GROUP_VERSION_FEATURE: 0}, {GROUP_VERSION_FEATURE: SAFE}) == OK
    assert GROUP_VERSION_FEATURE not in log.image.features
    assert refused(update(log, {GROUP_VERSION_FEATURE: 1}, {GROUP_VERSION_FEATURE: SAFE})) == (
        "Invalid update version 1 for feature group.version. Can't downgrade to a newer version."
    )
    assert update(log, {GROUP_VERSION_FEATURE: 1}) == OK
    assert update(log, {GROUP_VERSION_FEATURE: 0}, {GROUP_VERSION_FEATURE: UNSAFE}) == OK  # unsafe is allowed too: no metadata at stake
    assert GROUP_VERSION_FEATURE not in log.image.features


def test_group_version_1_depends_on_no_metadata_version() -> None:
    """Kafka 4.4 formatted at 3.9 upgrades group.version to 1 without touching metadata.version;
    at the oldest KRaft level too."""
    for level in (21, 7):
        log = cluster(level, current_broker(1), features=new_cluster_features(level))
        assert GROUP_VERSION_FEATURE not in log.image.features
        assert update(log, {GROUP_VERSION_FEATURE: 1}) == OK
        assert log.image.features == {METADATA_VERSION_FEATURE: level, GROUP_VERSION_FEATURE: 1}


def test_a_broker_of_an_older_build_keeps_group_version_off() -> None:
    """A broker that registered before it knew group.version (no range: 0-0) refuses level 1."""
    log = cluster(21, current_broker(1), registration(2))
    assert refused(update(log, {GROUP_VERSION_FEATURE: 1})) == "Invalid update version 1 for feature group.version. Broker 2 does not support this feature."


class RecordingKRaftVersion:
    """The Raft layer behind the controller: its level, the upgrades asked of it, and a refusal to give."""

    def __init__(self, level: int = 0, refusal: Exception | None = None) -> None:
        self.level = level
        self.refusal = refusal
        self.asked: list[tuple[int, bool]] = []

    def kraft_version(self) -> int:
        return self.level

    def upgrade_kraft_version(self, kraft_version: int, validate_only: bool) -> None:
        self.asked.append((kraft_version, validate_only))
        if self.refusal is not None:
            raise self.refusal
        if not validate_only:
            self.level = kraft_version


def test_kraft_version_upgrades_through_the_raft_layer_with_a_no_op_record() -> None:
    from broker.controller.feature_control_manager import KRAFT_VERSION_FEATURE
    from broker.metadata.metadata_records import NoOpRecord

    log = cluster(METADATA_VERSION_LEVEL, current_broker(1))
    raft = RecordingKRaftVersion()
    manager = FeatureControlManager(kraft_version=raft, node_id=1)
    assert manager.finalized_features(log.image).get(KRAFT_VERSION_FEATURE) is None  # level 0: not finalized, as in Kafka
    assert manager.update_features(log.image, {KRAFT_VERSION_FEATURE: 1}, {}, validate_only=True).records == []
    assert raft.asked == [(1, True)] and raft.level == 0
    result = manager.update_features(log.image, {KRAFT_VERSION_FEATURE: 1}, {})
    assert (result.response, result.records) == (OK, [NoOpRecord()])
    assert raft.asked[-1] == (1, False) and manager.finalized_features(log.image)[KRAFT_VERSION_FEATURE] == 1
    # Kafka 4.4's answers to going back: refused, unless it is to the current level.
    downgrade = manager.update_features(log.image, {KRAFT_VERSION_FEATURE: 0}, {KRAFT_VERSION_FEATURE: SAFE}).response
    assert refused(downgrade) == "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature."
    assert manager.update_features(log.image, {KRAFT_VERSION_FEATURE: 1}, {KRAFT_VERSION_FEATURE: SAFE}).response == OK
    assert refused(manager.update_features(log.image, {KRAFT_VERSION_FEATURE: 2}, {}).response) == (
        "Invalid update version 2 for feature kraft.version. Local controller 1 only supports versions 0-1"
    )


def test_kraft_version_refusals_of_the_raft_layer_are_the_answer_and_fail_the_request() -> None:
    from broker.controller.feature_control_manager import KRAFT_VERSION_FEATURE
    from raft.kraft_version_upgrade import InvalidUpdateVersionError

    log = old_cluster(current_broker(1))
    not_all = "Invalid upgrade of kraft.version to KRAFT_VERSION_1 because not all of the voters support it"
    raft = RecordingKRaftVersion(refusal=InvalidUpdateVersionError(not_all))
    answer = FeatureControlManager(kraft_version=raft, node_id=1).update_features(log.image, {KRAFT_VERSION_FEATURE: 1, TRANSACTION_VERSION_FEATURE: 2}, {})
    assert (answer.response, answer.records) == (FeatureUpdateResult(ErrorCode.invalid_update_version, not_all), [])
    # Another feature refused: the Raft layer is asked to check, never to write.
    raft = RecordingKRaftVersion()
    answer = FeatureControlManager(kraft_version=raft, node_id=1).update_features(log.image, {KRAFT_VERSION_FEATURE: 1, TRANSACTION_VERSION_FEATURE: 3}, {})
    assert answer.response.error_code == ErrorCode.invalid_update_version and answer.records == []
    assert raft.asked == [(1, True)] and raft.level == 0
    # A broker registered before kraft.version was advertised does not support it.
    assert refused(update(old_cluster(registration(2)), {KRAFT_VERSION_FEATURE: 1}, kraft_version=RecordingKRaftVersion(), node_id=1)) == (
        "Invalid update version 1 for feature kraft.version. Broker 2 does not support this feature."
    )


# --- share.version ------------------------------------------------------------------------------------


def test_share_version_ranges_and_bootstrap_levels_as_kafka_44() -> None:
    """Every node registers share.version 0-2 (Kafka 4.4's BrokerFeatures); a new cluster finalizes
    ShareVersion's default for its metadata.version: SV_2 from 4.4-IV0 (31), SV_1 from 4.2-IV0 (28)."""
    assert BROKER_SUPPORTED_FEATURES[SHARE_VERSION_FEATURE] == (0, 2)
    assert supported_features(unstable=True)[SHARE_VERSION_FEATURE] == (0, 2)
    assert [new_cluster_features(level)[SHARE_VERSION_FEATURE] for level in (27, 28, 30, 31, 33)] == [0, 1, 1, 2, 2]
    assert FeatureLevelRecord(name=SHARE_VERSION_FEATURE, feature_level=2) in FeatureControlManager.bootstrap_records(33, new_cluster_features(33))
    log = cluster(33, current_broker(1), features=new_cluster_features(33))
    assert log.image.features[SHARE_VERSION_FEATURE] == 2
    assert refused(update(log, {SHARE_VERSION_FEATURE: 3}, node_id=1)) == (
        "Invalid update version 3 for feature share.version. Local controller 1 only supports versions 0-2"
    )
    assert refused(update(log, {SHARE_VERSION_FEATURE: 1})) == (
        "Invalid update version 1 for feature share.version. "
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert update(log, {SHARE_VERSION_FEATURE: 0}, {SHARE_VERSION_FEATURE: SAFE}) == OK
    assert SHARE_VERSION_FEATURE not in log.image.features
    assert update(log, {SHARE_VERSION_FEATURE: 2}) == OK
    assert log.image.features[SHARE_VERSION_FEATURE] == 2


def test_share_version_depends_on_no_metadata_version() -> None:
    """ShareVersion's levels have no dependencies: a cluster formatted at 3.9 takes SV_2."""
    log = cluster(21, current_broker(1), features=new_cluster_features(21))
    assert SHARE_VERSION_FEATURE not in log.image.features
    assert update(log, {SHARE_VERSION_FEATURE: 2}) == OK
    assert log.image.features == {METADATA_VERSION_FEATURE: 21, SHARE_VERSION_FEATURE: 2}


def test_a_broker_of_an_older_build_keeps_share_version_off() -> None:
    """A broker that registered before it advertised share.version (no range: 0-0) refuses level 1."""
    log = cluster(27, current_broker(1), registration(2))
    assert refused(update(log, {SHARE_VERSION_FEATURE: 1})) == "Invalid update version 1 for feature share.version. Broker 2 does not support this feature."
