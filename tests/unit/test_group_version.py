"""The group.version gate of KIP-848 (Kafka 4.4's KafkaApis.isConsumerGroupProtocolEnabled), and that
ApiVersions lists the consumer group APIs at every level, as Kafka 4.4's does."""

from __future__ import annotations

from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES
from broker.group.group_version import consumer_protocol_enabled
from broker.handlers.api_versions import FeatureInfo, api_versions_response

CONSUMER_GROUP_APIS = {68, 69}


def test_level_1_enables_the_consumer_protocol_and_absent_is_0() -> None:
    assert consumer_protocol_enabled({"metadata.version": 33, "group.version": 1})
    assert not consumer_protocol_enabled({"metadata.version": 33, "group.version": 0})
    assert not consumer_protocol_enabled({"metadata.version": 21})  # formatted at 3.9: never finalized


def test_api_versions_lists_the_consumer_group_apis_at_group_version_0() -> None:
    off = FeatureInfo(BROKER_SUPPORTED_FEATURES, {"metadata.version": 33}, 7)
    keys = {int(k.api_key) for k in api_versions_response(4, features=off).api_keys}
    assert CONSUMER_GROUP_APIS <= keys
