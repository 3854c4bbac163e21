"""ControllerRegistrationManager: a controller's own registration with the active controller (KIP-919).

Kafka 4.4's ControllerRegistrationManager. Every controller, the active one included, sends
ControllerRegistration (its id, this process's incarnation id, ZkMigrationReady false, its
controller listeners as advertised with the ports actually bound, and the feature ranges it
supports) to the active controller, which writes a RegisterControllerRecord. It sends once it is
started, the finalized metadata.version is known and is 3.7-IV0 or later, and the image does not
already hold a registration of this incarnation; one request at a time. A refused or unanswered
request is sent again after Kafka's backoff (100 ms doubling up to 120 s, 2% jitter). An answered
one is not: the registration shows up in the metadata log, and if it is replaced (another
incarnation with this id) or removed (UnregisterControllerRecord), the next image that says so
sends it again.

It is a metadata publisher: it hears of metadata.version changes and of changes to this node's
registration, as Kafka's does, and of nothing else.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Callable, Mapping, Sequence

import structlog
from kio.schema.controller_registration.v0.request import ControllerRegistrationRequest, Feature, Listener
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, u16

from broker.controller_channel import ControllerChannel, ControllerUnavailableError
from broker.metadata import metadata_version as mv
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint

log = structlog.get_logger(__name__)

# Kafka's resendExponentialBackoff: ExponentialBackoff(100, 2, 120000, 0.02).
RESEND_INITIAL_MS = 100
RESEND_MAX_MS = 120_000
RESEND_JITTER = 0.02


def resend_backoff_ms(failed_rpcs: int, random_unit: float) -> float:
    """Kafka's ExponentialBackoff.backoff: 100 ms doubled per failure in a row, +-2%, at most 120 s."""
    term = RESEND_INITIAL_MS * 2.0 ** min(failed_rpcs, 32)
    return min(term * (1 - RESEND_JITTER + 2 * RESEND_JITTER * random_unit), RESEND_MAX_MS)


class ControllerRegistrationManager:
    def __init__(
        self,
        *,
        node_id: int,
        incarnation_id: uuid.UUID,
        features: Mapping[str, tuple[int, int]],
        channel: ControllerChannel,
        request_timeout_ms: int,
        random_unit: Callable[[], float] = random.random,
    ) -> None:
        self._node_id = node_id
        self._incarnation_id = incarnation_id
        self._features = dict(features)
        self._channel = channel
        self._request_timeout_ms = request_timeout_ms
        self._random_unit = random_unit
        self._listeners: tuple[BrokerEndpoint, ...] | None = None  # None: not started (or closed)
        self._metadata_version: mv.MetadataVersion | None = None  # None: not known yet
        self.registered_in_log = False
        self._pending: asyncio.Task[None] | None = None
        self._resend: asyncio.TimerHandle | None = None
        self.successful_rpcs = 0
        self.failed_rpcs = 0  # in a row: cleared by a success
        self._log = log.bind(node=node_id, incarnation_id=str(incarnation_id))

    def start(self, listeners: Sequence[BrokerEndpoint]) -> None:
        """Begin registering, at ``listeners``: the controller listeners, once bound."""
        self._listeners = tuple(listeners)
        self._maybe_send()

    async def close(self) -> None:
        self._listeners = None
        if self._resend is not None:
            self._resend.cancel()
            self._resend = None
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)
            self._pending = None

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        cluster = delta.cluster_delta
        own_changed = cluster is not None and self._node_id in cluster.changed_controllers
        if delta.features_delta is None and not own_changed:
            return
        if delta.features_delta is not None:
            level = image.features.get(mv.METADATA_VERSION_FEATURE)
            self._metadata_version = None if level is None else mv.for_level(level)
        if own_changed:
            registration = image.controllers.get(self._node_id)
            if registration is None:
                self._log.info("controller_registration.removed")
                self.registered_in_log = False
            elif registration.incarnation_id != self._incarnation_id:
                self._log.info("controller_registration.other_incarnation", found=str(registration.incarnation_id))
                self.registered_in_log = False
            else:
                self._log.info("controller_registration.persisted")
                self.registered_in_log = True
        self._maybe_send()

    def _maybe_send(self) -> None:
        if self.registered_in_log or self._listeners is None:
            return
        if self._metadata_version is None:
            self._log.info("controller_registration.waiting", reason="the metadata.version is not known yet")
            return
        if not self._metadata_version.is_controller_registration_supported:
            self._log.info("controller_registration.waiting", reason=f"metadata.version {self._metadata_version.name} does not support KIP-919 controller registration")
            return
        if self._pending is not None:
            return
        self._pending = asyncio.create_task(self._send(self._request(self._listeners)), name="controller-registration")

    def _request(self, listeners: tuple[BrokerEndpoint, ...]) -> ControllerRegistrationRequest:
        return ControllerRegistrationRequest(
            controller_id=i32(self._node_id),
            incarnation_id=self._incarnation_id,
            zk_migration_ready=False,
            listeners=tuple(Listener(name=e.name, host=e.host, port=u16(e.port), security_protocol=i16(e.security_protocol)) for e in listeners),
            features=tuple(
                Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high)) for name, (low, high) in sorted(self._features.items())
            ),
        )

    async def _send(self, request: ControllerRegistrationRequest) -> None:
        try:
            response = await self._channel.send(request, self._request_timeout_ms)
        except ControllerUnavailableError as e:
            self._log.warning("controller_registration.unanswered", error=str(e))
            self._schedule_resend()
            return
        finally:
            self._pending = None
        if response.error_code == ErrorCode.none:
            self.successful_rpcs += 1
            self.failed_rpcs = 0
            self._log.info("controller_registration.acknowledged")
            return
        self._log.warning("controller_registration.refused", error=ErrorCode(response.error_code).name, message=response.error_message)
        self._schedule_resend()

    def _schedule_resend(self) -> None:
        delay_ms = resend_backoff_ms(self.failed_rpcs, self._random_unit())
        self.failed_rpcs += 1
        self._resend = asyncio.get_running_loop().call_later(delay_ms / 1000, self._resend_now)

    def _resend_now(self) -> None:
        self._resend = None
        self._maybe_send()


__all__ = ["ControllerRegistrationManager", "resend_backoff_ms"]
