"""Controller registrations (KIP-919): RegisterControllerRecord, the image's controllers, the
snapshot writer, UpdateFeatures against registered controllers, and the registration manager
a controller registers itself with."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.schema.controller_registration.v0.response import ControllerRegistrationResponse
from kio.schema.errors import ErrorCode

from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, TRANSACTION_VERSION_FEATURE, FeatureControlManager
from broker.controller_channel import ControllerUnavailableError
from broker.controller_registration_manager import ControllerRegistrationManager, resend_backoff_ms
from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    FeatureLevelRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnregisterControllerRecord,
    decode_metadata_record,
)

CONTROLLER = BrokerEndpoint(name="CONTROLLER", host="127.0.0.1", port=9093, security_protocol=0)


def controller_record(controller_id: int, *, incarnation: int = 1, max_metadata_version: int = 33, **features: tuple[int, int]) -> RegisterControllerRecord:
    ranges = {METADATA_VERSION_FEATURE: (7, max_metadata_version), **features}
    return RegisterControllerRecord(
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=incarnation),
        end_points=(BrokerEndpoint(name="CONTROLLER", host="127.0.0.1", port=9092 + controller_id, security_protocol=0),),
        features=tuple(BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in ranges.items()),
    )


def image_at(level: int, *records: Any) -> MetadataImage:
    return apply_records(EMPTY_IMAGE, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level), *records])


def test_register_controller_record_round_trips_as_kafka_encodes_it() -> None:
    record = RegisterControllerRecord(
        controller_id=3000,
        incarnation_id=uuid.UUID("5c4347f3-a6b7-4e56-b5f7-3141cf0fb454"),
        end_points=(CONTROLLER,),
        features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=33),),
    )
    encoded = record.encode()
    # frame 1, api key 27, version 0, then the flexible v0 body of RegisterControllerRecord.json.
    assert encoded.hex() == (
        "011b00" "00000bb8" "5c4347f3a6b74e56b5f73141cf0fb454" "00"
        "02" "0b434f4e54524f4c4c4552" "0a3132372e302e302e31" "2385" "0000" "00"
        "02" "116d657461646174612e76657273696f6e" "0007" "0021" "00" "00"
    )
    assert decode_metadata_record(encoded) == record
    assert decode_metadata_record(UnregisterControllerRecord(controller_id=3000).encode()) == UnregisterControllerRecord(controller_id=3000)


def test_replay_keeps_one_registration_per_controller() -> None:
    image = image_at(33, controller_record(1), controller_record(2))
    assert sorted(image.controllers) == [1, 2] and not image.is_empty
    # A new incarnation replaces the registration; UnregisterControllerRecord removes it.
    image = apply_records(image, [controller_record(1, incarnation=9), UnregisterControllerRecord(controller_id=2)])
    assert image.controllers[1].incarnation_id == uuid.UUID(int=9) and 2 not in image.controllers
    assert image.controllers[1].endpoints == (BrokerEndpoint(name="CONTROLLER", host="127.0.0.1", port=9093, security_protocol=0),)
    # As Kafka's ClusterDelta, the image takes an unregistration of an id it does not have.
    assert apply_records(image, [UnregisterControllerRecord(controller_id=7)]).controllers.keys() == {1}


def test_a_delta_tells_which_controllers_changed() -> None:
    before = image_at(33, controller_record(1), controller_record(2))
    delta = MetadataDelta(before)
    delta.replay(controller_record(2, incarnation=5))
    assert delta.cluster_delta is not None and set(delta.cluster_delta.changed_controllers) == {2}
    after = delta.apply()
    assert after.controllers[1] is before.controllers[1] and after.controllers[2].incarnation_id == uuid.UUID(int=5)
    diff = MetadataDelta.diff(before, apply_records(after, [UnregisterControllerRecord(controller_id=1)]))
    assert diff.cluster_delta is not None and diff.cluster_delta.changed_controllers == {1: None, 2: after.controllers[2]}


def test_snapshots_write_the_registrations_from_3_7_iv0() -> None:
    broker = RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=8), broker_epoch=4)
    image = image_at(33, broker, controller_record(2), controller_record(1))
    records = image_records(image)
    kinds = [type(r).__name__ for r in records]
    # Kafka's ClusterImage.write: the brokers, then the controllers.
    assert kinds[kinds.index("RegisterBrokerRecord") + 1 :][:2] == ["RegisterControllerRecord", "RegisterControllerRecord"]
    assert [r.controller_id for r in records if isinstance(r, RegisterControllerRecord)] == [1, 2]
    replayed = apply_records(EMPTY_IMAGE, [decode_metadata_record(r.encode()) for r in records])
    assert replayed.controllers == image.controllers
    # 3.6-IV2 (14) has no controller registrations: Kafka's writer reports them lost and writes none.
    assert not any(isinstance(r, RegisterControllerRecord) for r in image_records(image_at(14, controller_record(1))))
    assert any(isinstance(r, RegisterControllerRecord) for r in image_records(image_at(15, controller_record(1))))


def refusal(image: MetadataImage, updates: dict[str, int], **kw: Any) -> str | None:
    result = FeatureControlManager(node_id=1, **kw).update_features(image, updates, {})
    return result.response.error_message


def test_a_feature_upgrade_needs_every_registered_controller() -> None:
    image = image_at(30, controller_record(1), controller_record(2, max_metadata_version=31), controller_record(3))
    assert refusal(image, {METADATA_VERSION_FEATURE: 33}) == (
        "Invalid update version 33 for feature metadata.version. Controller 2 only supports versions 7-31"
    )
    assert refusal(image, {TRANSACTION_VERSION_FEATURE: 2}) == (
        "Invalid update version 2 for feature transaction.version. Controller 2 does not support this feature."
    )
    assert refusal(image, {METADATA_VERSION_FEATURE: 31}) is None
    # The local controller (1) is this build and is not looked up in the image.
    assert refusal(image_at(30, controller_record(1, max_metadata_version=20)), {METADATA_VERSION_FEATURE: 33}) is None


def test_a_static_voter_that_has_not_registered_refuses_every_upgrade() -> None:
    image = image_at(30, controller_record(2))
    assert refusal(image, {METADATA_VERSION_FEATURE: 33}, quorum_node_ids=[1, 2, 3]) == (
        "Invalid update version 33 for feature metadata.version. controller 3 has not registered, and may not support this feature"
    )
    assert refusal(image_at(30, controller_record(2), controller_record(3)), {METADATA_VERSION_FEATURE: 33}, quorum_node_ids=[1, 2, 3]) is None
    # Below 3.7-IV0 controllers do not register, so they are not checked (Kafka logs that it could not).
    assert refusal(image_at(14), {METADATA_VERSION_FEATURE: 33}, quorum_node_ids=[1, 2, 3]) is None


def test_resend_backoff_is_kafkas() -> None:
    assert resend_backoff_ms(0, 0.5) == 100 and resend_backoff_ms(3, 0.5) == 800
    assert resend_backoff_ms(0, 0.0) == pytest.approx(98) and resend_backoff_ms(0, 1.0) == pytest.approx(102)
    assert resend_backoff_ms(40, 0.5) == 120_000


class FakeChannel:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.answers: list[Any] = []

    async def send(self, body: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append(body)
        answer = self.answers.pop(0) if self.answers else ControllerRegistrationResponse(throttle_time=0, error_code=ErrorCode.none, error_message=None)  # type: ignore[arg-type]
        if isinstance(answer, Exception):
            raise answer
        return answer


def publish(manager: ControllerRegistrationManager, before: MetadataImage, *records: Any) -> MetadataImage:
    delta = MetadataDelta(before)
    for record in records:
        delta.replay(record)
    after = delta.apply()
    manager.on_metadata_update(delta, after)
    return after


def test_the_manager_registers_once_the_metadata_version_allows_and_again_when_removed() -> None:
    async def scenario() -> None:
        channel = FakeChannel()
        incarnation = uuid.UUID(int=0x77)
        manager = ControllerRegistrationManager(
            node_id=1, incarnation_id=incarnation, features={METADATA_VERSION_FEATURE: (7, 33)}, channel=channel, request_timeout_ms=1000  # type: ignore[arg-type]
        )
        manager.start([CONTROLLER])
        await asyncio.sleep(0)
        assert channel.sent == []  # the metadata.version is not known yet
        image = publish(manager, EMPTY_IMAGE, FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=14))
        await asyncio.sleep(0)
        assert channel.sent == []  # 3.6-IV2: no KIP-919
        image = publish(manager, image, FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=15))
        await asyncio.sleep(0)
        [sent] = channel.sent
        assert (sent.controller_id, sent.incarnation_id, sent.zk_migration_ready) == (1, incarnation, False)
        assert [(lst.name, lst.host, lst.port, lst.security_protocol) for lst in sent.listeners] == [("CONTROLLER", "127.0.0.1", 9093, 0)]
        assert [(f.name, f.min_supported_version, f.max_supported_version) for f in sent.features] == [(METADATA_VERSION_FEATURE, 7, 33)]
        assert manager.successful_rpcs == 1 and not manager.registered_in_log
        ours = RegisterControllerRecord(controller_id=1, incarnation_id=incarnation, end_points=(CONTROLLER,))
        image = publish(manager, image, ours)
        assert manager.registered_in_log
        image = publish(manager, image, FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=33))
        await asyncio.sleep(0)
        assert len(channel.sent) == 1  # registered: nothing more to send
        image = publish(manager, image, UnregisterControllerRecord(controller_id=1))
        await asyncio.sleep(0)
        assert not manager.registered_in_log and len(channel.sent) == 2
        await manager.close()

    asyncio.run(scenario())


def test_the_manager_sends_again_after_a_refusal_or_no_answer() -> None:
    async def scenario() -> None:
        channel = FakeChannel()
        refused = ControllerRegistrationResponse(throttle_time=0, error_code=ErrorCode.unsupported_version, error_message="too old")  # type: ignore[arg-type]
        channel.answers = [refused, ControllerUnavailableError("no active controller")]
        manager = ControllerRegistrationManager(
            node_id=2, incarnation_id=uuid.UUID(int=5), features={}, channel=channel, request_timeout_ms=1000, random_unit=lambda: 0.5  # type: ignore[arg-type]
        )
        manager.start([CONTROLLER])
        publish(manager, EMPTY_IMAGE, FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=33))
        await asyncio.sleep(0.05)
        assert len(channel.sent) == 1 and manager.failed_rpcs == 1
        await asyncio.sleep(0.12)  # 100 ms after the first failure
        assert len(channel.sent) == 2 and manager.failed_rpcs == 2
        await asyncio.sleep(0.25)  # 200 ms after the second
        assert len(channel.sent) == 3 and (manager.failed_rpcs, manager.successful_rpcs) == (0, 1)
        await manager.close()

    asyncio.run(scenario())
