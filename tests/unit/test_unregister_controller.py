"""UnregisterController (API 94, Kafka 4.4's kafka-cluster.sh unregister-controller) and the
features a controller listener's ApiVersions carries: the v0 codec from the 4.4 spec, the active
controller's checks and its UnregisterControllerRecord, the answer through ControllerApis, the
error counting of the answer, and FeaturesPublisher's levels and epoch.
(tests/cluster/test_controller_tools.py runs the Kafka tools against real processes.)"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from broker.controller.controller_apis import CONTROLLER_CLUSTER_OPERATIONS, ControllerApis
from broker.controller.controller_registrations import (
    CONTROLLER_ID_NOT_REGISTERED,
    ControllerRegistrationRequest,
    unregister_controller,
)
from broker.controller.controller_result import ApiError
from broker.controller.envelope import FORWARDABLE_APIS
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES, METADATA_VERSION_FEATURE
from broker.handlers.api_versions import FeatureInfo, api_versions_response
from broker.handlers.forwarding import error_response
from broker.metadata.features_publisher import FeaturesPublisher
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint, BrokerFeature, FeatureLevelRecord, RegisterControllerRecord, UnregisterControllerRecord
from broker.metrics.request_errors import count_response, error_name
from broker.security.standard_acl import AclOperation
from protocol.api_keys import CONTROLLER_APIS, SUPPORTED_APIS, ApiKey, request_schema, response_schema
from tests.unit.quorum_controller_fakes import CLUSTER_ID, Clock, FakeQuorum, Node, run
from tests.unit.test_kafka44_schemas import decode, encode


# -- the v0 codec and where it is served ---------------------------------------------------------------


def test_v0_request_and_response_bytes_are_the_4_4_spec_s() -> None:
    request = request_schema(ApiKey.UNREGISTER_CONTROLLER, 0)(controller_id=i32(3))
    # ControllerId int32, then the empty tagged fields (flexible from v0).
    assert encode(request) == struct.pack(">i", 3) + b"\x00"
    assert decode(type(request), encode(request)) == request
    schema = response_schema(ApiKey.UNREGISTER_CONTROLLER, 0)
    message = "Controller ID 3 is not currently registered."
    response = schema(throttle_time=datetime.timedelta(0), error_code=i16(CONTROLLER_ID_NOT_REGISTERED), error_message=message)
    wire = struct.pack(">ih", 0, 136) + bytes([len(message) + 1]) + message.encode() + b"\x00"
    assert encode(response) == wire
    assert decode(schema, wire) == response
    assert schema.__header_schema__.__name__ == "ResponseHeader" and "v1" in schema.__header_schema__.__module__


def test_served_on_both_listeners_forwarded_by_brokers_and_authorized_as_cluster_alter() -> None:
    """The spec's listeners are broker and controller; Kafka's KafkaApis forwards it, and
    ControllerApis authorizes CLUSTER ALTER."""
    assert SUPPORTED_APIS[ApiKey.UNREGISTER_CONTROLLER] == CONTROLLER_APIS[ApiKey.UNREGISTER_CONTROLLER]
    assert (SUPPORTED_APIS[ApiKey.UNREGISTER_CONTROLLER].min_version, SUPPORTED_APIS[ApiKey.UNREGISTER_CONTROLLER].max_version) == (0, 0)
    assert ApiKey.UNREGISTER_CONTROLLER in FORWARDABLE_APIS
    assert CONTROLLER_CLUSTER_OPERATIONS[ApiKey.UNREGISTER_CONTROLLER] == AclOperation.ALTER


def test_an_error_answer_counts_its_code_and_not_none() -> None:
    schema = response_schema(ApiKey.UNREGISTER_CONTROLLER, 0)
    counts: dict[int, int] = {}
    count_response(counts, ApiKey.UNREGISTER_CONTROLLER, schema(throttle_time=datetime.timedelta(0), error_code=i16(0), error_message=None))
    assert counts == {}
    count_response(counts, ApiKey.UNREGISTER_CONTROLLER, schema(throttle_time=datetime.timedelta(0), error_code=i16(136), error_message="x"))
    assert counts == {136: 1} and error_name(136) == "CONTROLLER_ID_NOT_REGISTERED"
    refused = error_response(ApiKey.UNREGISTER_CONTROLLER, 0, None, ErrorCode.not_controller, "moved")
    assert (refused.error_code, refused.error_message) == (ErrorCode.not_controller, "moved")
    assert encode(refused) == encode(schema(throttle_time=datetime.timedelta(0), error_code=i16(ErrorCode.not_controller), error_message="moved"))


# -- the decision over the image ---------------------------------------------------------------------------


def registered(controller_id: int) -> RegisterControllerRecord:
    return RegisterControllerRecord(
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=controller_id),
        end_points=(BrokerEndpoint(name="CONTROLLER", host="127.0.0.1", port=9092 + controller_id, security_protocol=0),),
        features=(BrokerFeature(name=METADATA_VERSION_FEATURE, min_supported_version=7, max_supported_version=33),),
    )


def image_at(level: int, *records: Any) -> MetadataImage:
    return apply_records(EMPTY_IMAGE, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level), *records])


def refusal(image: MetadataImage, controller_id: int) -> tuple[int, str | None]:
    with pytest.raises(ApiError) as refused:
        unregister_controller(image, controller_id)
    return refused.value.error_code, refused.value.message


def test_the_record_removes_a_registration_voter_or_not() -> None:
    image = image_at(33, registered(1), registered(2))
    result = unregister_controller(image, 2)
    assert result.records == [UnregisterControllerRecord(controller_id=2)]
    assert apply_records(image, result.records).controllers.keys() == {1}


def test_an_unknown_id_is_controller_id_not_registered() -> None:
    assert refusal(image_at(33, registered(1)), 5) == (136, "Controller ID 5 is not currently registered.")


def test_below_4_4_iv2_the_metadata_version_is_too_old() -> None:
    # Checked before the id, as Kafka's ClusterControlManager.unregisterController.
    message = "The current MetadataVersion is too old to support controller unregistration."
    assert refusal(image_at(32, registered(1)), 1) == (ErrorCode.unsupported_version, message)
    assert refusal(image_at(32), 5) == (ErrorCode.unsupported_version, message)


# -- the active controller, through ControllerApis ------------------------------------------------------


def controller_registration(controller_id: int) -> ControllerRegistrationRequest:
    record = registered(controller_id)
    return ControllerRegistrationRequest(controller_id, record.incarnation_id, record.end_points, record.features)


def test_the_active_controller_unregisters_others_but_never_itself() -> None:
    async def scenario() -> None:
        quorum = FakeQuorum()
        quorum.auto_commit = True
        nodes = {n: Node(quorum, n, Clock()) for n in (1, 2)}
        apis = ControllerApis(nodes[1].controller, nodes[1].config, CLUSTER_ID, nodes[1].raft)
        quorum.elect(1)
        for n in (1, 2):
            await nodes[1].controller.register_controller(controller_registration(n))
        body = request_schema(ApiKey.UNREGISTER_CONTROLLER, 0)
        done = await apis.handle(body(controller_id=i32(2)))
        assert (done.error_code, done.error_message) == (0, None)
        assert nodes[1].loader.image.controllers.keys() == {1}
        again = await apis.handle(body(controller_id=i32(2)))
        assert (again.error_code, again.error_message) == (136, "Controller ID 2 is not currently registered.")
        itself = await apis.handle(body(controller_id=i32(1)))
        assert (itself.error_code, itself.error_message) == (ErrorCode.invalid_request, "Controller cannot unregister itself while it is active.")
        assert nodes[1].loader.image.controllers.keys() == {1}
        for answer in (done, again, itself):
            encode(answer)

    run(scenario())


# -- a controller listener's ApiVersions features ---------------------------------------------------------


def test_features_publisher_keeps_the_levels_and_the_offset_they_were_last_replayed_at() -> None:
    publisher = FeaturesPublisher()
    assert (dict(publisher.finalized), publisher.epoch) == ({}, -1)
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=33))
    image = delta.apply(4, 1)
    publisher.on_metadata_update(delta, image)
    assert (dict(publisher.finalized), publisher.epoch) == ({METADATA_VERSION_FEATURE: 33}, 4)
    # A batch without a feature record leaves the epoch where it was.
    later = MetadataDelta(image)
    later.replay(registered(1))
    publisher.on_metadata_update(later, later.apply(9, 1))
    assert publisher.epoch == 4
    # A feature record, even one that keeps the level, moves it.
    again = MetadataDelta(image)
    again.replay(FeatureLevelRecord(name="group.version", feature_level=1))
    publisher.on_metadata_update(again, again.apply(12, 1))
    assert (dict(publisher.finalized), publisher.epoch) == ({METADATA_VERSION_FEATURE: 33, "group.version": 1}, 12)


def test_the_controller_answer_lists_the_supported_ranges_and_the_published_levels() -> None:
    publisher = FeaturesPublisher()
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=33))
    publisher.on_metadata_update(delta, delta.apply(0, 1))
    answer = api_versions_response(4, CONTROLLER_APIS, FeatureInfo(BROKER_SUPPORTED_FEATURES, publisher.finalized, publisher.epoch))
    assert {f.name: (f.min_version, f.max_version) for f in answer.supported_features} == dict(BROKER_SUPPORTED_FEATURES)
    assert [(f.name, f.max_version_level) for f in answer.finalized_features] == [(METADATA_VERSION_FEATURE, 33)]
    assert answer.finalized_features_epoch == 0 and answer.zk_migration_ready is False
