"""ApiVersions v3+ features: what a broker supports and what the metadata log finalized (KIP-584),
which is how a Kafka 4 client learns it may use transaction version 2."""

from __future__ import annotations

from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES
from broker.handlers.api_versions import FeatureInfo, api_versions_response

FEATURES = FeatureInfo(BROKER_SUPPORTED_FEATURES, {"metadata.version": 25, "transaction.version": 2, "group.version": 0}, 42)


def test_v4_lists_every_supported_and_finalized_feature() -> None:
    r = api_versions_response(4, features=FEATURES)
    assert {f.name: (f.min_version, f.max_version) for f in r.supported_features} == {
        "metadata.version": (7, 33),
        "kraft.version": (0, 1),
        "eligible.leader.replicas.version": (0, 1),
        "group.version": (0, 1),
        "share.version": (0, 2),
        "streams.version": (0, 1),
        "transaction.version": (0, 2),
    }
    # A level of 0 is no finalized feature at all.
    assert {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features} == {"metadata.version": (25, 25), "transaction.version": (2, 2)}
    assert r.finalized_features_epoch == 42


def test_before_v4_a_range_from_0_is_left_out() -> None:
    r = api_versions_response(3, features=FEATURES)
    assert [f.name for f in r.supported_features] == ["metadata.version"]
    assert [f.name for f in r.finalized_features] == ["metadata.version", "transaction.version"]


def test_without_features_the_fields_keep_their_defaults() -> None:
    r = api_versions_response(4)
    assert (r.supported_features, r.finalized_features, r.finalized_features_epoch) == ((), (), -1)
