"""Controller registrations (KIP-919): the active controller's side.

Kafka's ClusterControlManager.registerController and ControllerRegistrationsPublisher. Every
controller sends ControllerRegistration (broker/controller_registration_manager.py) once the
finalized metadata.version is 3.7-IV0 or later; the active controller answers it by writing a
RegisterControllerRecord, which puts the registration in the image's ``controllers``. What the
registrations are read for: DescribeCluster sent to a controller lists each registered controller
at its endpoint on the listener the request came in on, and UpdateFeatures refuses a level some
registered controller does not support (FeatureControlManager). UnregisterController (API 94,
kafka-cluster.sh unregister-controller) removes a registration with an UnregisterControllerRecord,
as Kafka 4.4's ClusterControlManager.unregisterController.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ApiError, ControllerResult
from broker.controller.feature_control_manager import metadata_version_of
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint, BrokerFeature, RegisterControllerRecord, UnregisterControllerRecord


@dataclass(frozen=True, slots=True)
class ControllerRegistrationRequest:
    controller_id: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...]


def register_controller(image: MetadataImage, request: ControllerRegistrationRequest) -> ControllerResult[None]:
    """The RegisterControllerRecord of ``request``; UNSUPPORTED_VERSION below metadata.version 3.7-IV0.
    As Kafka's, it replaces whatever registration the id had, and ZkMigrationReady is always false."""
    if not metadata_version_of(image).is_controller_registration_supported:
        raise ApiError(ErrorCode.unsupported_version, "The current MetadataVersion is too old to support controller registrations.")
    record = RegisterControllerRecord(
        controller_id=request.controller_id,
        incarnation_id=request.incarnation_id,
        zk_migration_ready=False,
        end_points=request.listeners,
        features=request.features,
    )
    return ControllerResult([record], None)


# Kafka 4.4's Errors.CONTROLLER_ID_NOT_REGISTERED, newer than kio's ErrorCode.
CONTROLLER_ID_NOT_REGISTERED = 136


def unregister_controller(image: MetadataImage, controller_id: int) -> ControllerResult[None]:
    """The UnregisterControllerRecord of ``controller_id``. As Kafka's, whether the controller is a
    voter of the quorum does not matter: only a registration is removed, never a voter."""
    if not metadata_version_of(image).is_controller_unregistration_supported:
        raise ApiError(ErrorCode.unsupported_version, "The current MetadataVersion is too old to support controller unregistration.")
    if controller_id not in image.controllers:
        raise ApiError(CONTROLLER_ID_NOT_REGISTERED, f"Controller ID {controller_id} is not currently registered.")
    return ControllerResult([UnregisterControllerRecord(controller_id=controller_id)], None)


def controller_endpoints(image: MetadataImage, listener_name: str) -> list[tuple[int, BrokerEndpoint]]:
    """Kafka's describeClusterControllers: each registered controller with an endpoint named
    ``listener_name``, at that endpoint; a controller without one is left out."""
    found: list[tuple[int, BrokerEndpoint]] = []
    for controller_id in sorted(image.controllers):
        for endpoint in image.controllers[controller_id].endpoints:
            if endpoint.name == listener_name:
                found.append((controller_id, endpoint))
                break
    return found


__all__ = ["CONTROLLER_ID_NOT_REGISTERED", "ControllerRegistrationRequest", "controller_endpoints", "register_controller", "unregister_controller"]
