"""Kafka's ClusterControlManager and BrokerHeartbeatManager: broker registration and liveness.

Registrations, fencing and controlled shutdown are records (RegisterBrokerRecord,
FenceBrokerRecord, UnfenceBrokerRecord, BrokerRegistrationChangeRecord); the image says
who is registered, fenced or shutting down. Heartbeat times and the metadata offsets
brokers report are soft state kept here, never in the log: a newly active controller
starts them over (``activate``) and so gives every broker a fresh session, as Kafka does.

A broker's life, as Kafka's BrokerControlState:
- it registers (new incarnation: a new broker epoch, the offset the record will take)
  and starts fenced;
- it is unfenced by the first heartbeat that reports a metadata offset at or past its
  registration record (is_caught_up), which also lets it lead leaderless partitions;
- a heartbeat asking to shut down moves it into controlled shutdown (leadership and ISR
  membership move away); once it leads nothing and every active broker has caught up
  with those moves, it is fenced and told to shut down;
- missing heartbeats for ``broker.session.timeout.ms`` fences it (``fence_stale_brokers``);
  its partitions get new leaders.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ApiError, ControllerResult
from broker.metadata import metadata_version as mv
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, MINIMUM_KRAFT_METADATA_VERSION_LEVEL, FeatureControlManager
from broker.controller.replication_control_manager import ReplicationControlManager
from broker.metadata.metadata_image import BrokerRegistration, MetadataImage
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

DEFAULT_SESSION_TIMEOUT_MS = 9000  # broker.session.timeout.ms
DIRECTORY_ASSIGNMENT_LEVEL = 17  # metadata.version 3.7-IV2: brokers register their log directories
_RESERVED_DIRECTORIES = 100  # Kafka's DirectoryId.reserved: the first 100 UUIDs


class BrokerControlState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    features: Mapping[str, tuple[int, int]]  # name -> (min supported, max supported)
    rack: str | None = None
    log_dirs: tuple[uuid.UUID, ...] = ()
    # The epoch of the broker's last clean shutdown (-1: none); anything but its registered epoch
    # means it restarted uncleanly and leaves the eligible leader replicas (KIP-966).
    previous_broker_epoch: int = -1
    is_migrating_zk_broker: bool = False


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    error_code: int
    broker_epoch: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    in_controlled_shutdown: bool = False
    should_shut_down: bool = False
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class UnregisterBrokerReply:
    error_code: int
    error_message: str | None = None


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    metadata_offset: int = -1
    fenced: bool = False  # fenced by this controller and not heard from since
    controlled_shutdown_offset: int = -1


@dataclass(slots=True)
class BrokerHeartbeatManager:
    """The soft state: when each broker was last heard from and how far its metadata is."""

    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    sessions: dict[int, _Session] = field(default_factory=dict)

    def session(self, broker_id: int, now_ms: int) -> _Session:
        """The broker's session; one it never had starts now, fresh."""
        return self.sessions.setdefault(broker_id, _Session(now_ms))

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int, *, fenced: bool) -> None:
        session = self.session(broker_id, now_ms)
        session.last_contact_ms = now_ms
        session.metadata_offset = metadata_offset
        session.fenced = fenced
        if fenced:
            session.controlled_shutdown_offset = -1

    def remove(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def has_valid_session(self, registration: BrokerRegistration, now_ms: int) -> bool:
        session = self.sessions.get(registration.broker_id)
        if registration.fenced or session is None or session.fenced:
            return False
        return session.last_contact_ms + self.session_timeout_ms >= now_ms

    def stale_brokers(self, image: MetadataImage, now_ms: int) -> list[int]:
        """Unfenced brokers whose session ran out, longest silent first."""
        stale = []
        for broker in image.brokers.values():
            if broker.fenced:
                continue
            session = self.session(broker.broker_id, now_ms)
            if not session.fenced and session.last_contact_ms + self.session_timeout_ms < now_ms:
                stale.append((session.last_contact_ms, broker.broker_id))
        return [broker_id for _, broker_id in sorted(stale)]

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the next session of an unfenced broker runs out (None: no session to watch)."""
        times = [
            s.last_contact_ms + self.session_timeout_ms
            for b in image.brokers.values()
            if not b.fenced and (s := self.sessions.get(b.broker_id)) is not None and not s.fenced
        ]
        return min(times, default=None)

    def lowest_active_offset(self, image: MetadataImage) -> int:
        """The lowest metadata offset reported by an active broker (-1 for one not heard from yet)."""
        offsets = [
            s.metadata_offset if (s := self.sessions.get(b.broker_id)) is not None else -1
            for b in image.brokers.values()
            if not b.fenced and not b.in_controlled_shutdown
        ]
        return min(offsets, default=2**63 - 1)


class ClusterControlManager:
    def __init__(
        self,
        *,
        cluster_id: str,
        replication: ReplicationControlManager,
        features: FeatureControlManager,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        self._cluster_id = cluster_id
        self._replication = replication
        self._features = features
        self.heartbeats = BrokerHeartbeatManager(session_timeout_ms)
        self._registration_offsets: dict[int, int] = {}

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """Become the active controller: every registered broker gets a fresh session from now."""
        self.heartbeats = BrokerHeartbeatManager(self.heartbeats.session_timeout_ms)
        self._registration_offsets.clear()
        for broker in image.brokers.values():
            self.heartbeats.session(broker.broker_id, now_ms)

    # --- registration -----------------------------------------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, *, image: MetadataImage, controller_offset: int, now_ms: int
    ) -> ControllerResult[BrokerRegistrationReply]:
        """BrokerRegistration. ``controller_offset`` is the offset the record will take: the new epoch."""
        try:
            record = self._registration_record(request, image, controller_offset, now_ms)
        except ApiError as refused:
            return ControllerResult([], BrokerRegistrationReply(refused.error_code, error_message=refused.message))
        existing = image.brokers.get(request.broker_id)
        records: list[MetadataRecord] = [record]
        if existing is None or existing.incarnation_id != request.incarnation_id:
            self.heartbeats.remove(request.broker_id)
            if existing is None or request.previous_broker_epoch != existing.epoch:
                # Kafka's unclean shutdown detection (KAFKA-18635): after the registration record, whose offset is the epoch.
                records.extend(self._replication.handle_broker_unclean_shutdown(image, request.broker_id))
        self.heartbeats.touch(request.broker_id, now_ms, -1, fenced=record.fenced)
        self._registration_offsets[request.broker_id] = controller_offset
        return ControllerResult(records, BrokerRegistrationReply(ErrorCode.none, record.broker_epoch))

    def _registration_record(self, request: BrokerRegistrationRequest, image: MetadataImage, offset: int, now_ms: int) -> RegisterBrokerRecord:
        if request.cluster_id != self._cluster_id:
            raise ApiError(ErrorCode.inconsistent_cluster_id, f"Expected cluster ID {self._cluster_id}, but got cluster ID {request.cluster_id}")
        broker_id = request.broker_id
        existing = image.brokers.get(broker_id)
        if existing is not None and existing.incarnation_id != request.incarnation_id and self.heartbeats.has_valid_session(existing, now_ms):
            raise ApiError(ErrorCode.duplicate_broker_registration, "Another broker is registered with that broker id.")
        if request.is_migrating_zk_broker:
            raise ApiError(ErrorCode.broker_id_not_registered, "Controller does not support registering ZK brokers.")
        finalized = self._features.finalized_features(image)
        if finalized.get(METADATA_VERSION_FEATURE, MINIMUM_KRAFT_METADATA_VERSION_LEVEL) >= DIRECTORY_ASSIGNMENT_LEVEL:
            _check_log_dirs(request, image)
        features = dict(request.features)
        # A broker that sends no metadata.version range is taken to support only the oldest KRaft level.
        features.setdefault(METADATA_VERSION_FEATURE, (MINIMUM_KRAFT_METADATA_VERSION_LEVEL, MINIMUM_KRAFT_METADATA_VERSION_LEVEL))
        for name, (low, high) in features.items():
            level = finalized.get(name, MINIMUM_KRAFT_METADATA_VERSION_LEVEL if name == METADATA_VERSION_FEATURE else 0)
            if not low <= level <= high:
                raise ApiError(ErrorCode.unsupported_version, _unsupported(name, level, low, high))
        for name, level in sorted(finalized.items()):
            if name not in features and level != 0:
                raise ApiError(ErrorCode.unsupported_version, _unsupported(name, level, 0, 0))
        same_incarnation = existing is not None and existing.incarnation_id == request.incarnation_id
        return RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=request.incarnation_id,
            # Re-registering the same incarnation amends the registration and keeps its state.
            broker_epoch=existing.epoch if same_incarnation and existing else offset,
            end_points=tuple(request.listeners),
            features=tuple(BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in features.items()),
            rack=request.rack,
            fenced=existing.fenced if same_incarnation and existing else True,
            in_controlled_shutdown=existing.in_controlled_shutdown if same_incarnation and existing else False,
            log_dirs=tuple(request.log_dirs),
            record_version=mv.for_level(finalized.get(METADATA_VERSION_FEATURE)).register_broker_record_version,
        )

    def unregister_broker(self, broker_id: int, image: MetadataImage) -> ControllerResult[UnregisterBrokerReply]:
        """UnregisterBroker: out of every ISR and leadership, then gone."""
        registration = image.brokers.get(broker_id)
        if registration is None:
            return ControllerResult([], UnregisterBrokerReply(ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered"))
        records: list[MetadataRecord] = list(self._replication.handle_broker_unregistered(image, broker_id))
        records.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch))
        self.heartbeats.remove(broker_id)
        self._registration_offsets.pop(broker_id, None)
        return ControllerResult(records, UnregisterBrokerReply(ErrorCode.none))

    # --- heartbeats -------------------------------------------------------------------

    def heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
        *,
        now_ms: int,
        image: MetadataImage,
        committed_offset: int,
        cordoned_log_dirs: Sequence[uuid.UUID] | None = None,
        offline_log_dirs: Sequence[uuid.UUID] = (),
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """BrokerHeartbeat. ``image`` is the committed image and ``committed_offset`` its last offset;
        ``cordoned_log_dirs`` the broker's cordoned dirs (v2, KIP-1066), None when it sent none;
        ``offline_log_dirs`` its dirs gone offline (v1, KIP-858)."""
        registration = image.brokers.get(broker_id)
        if registration is None:
            return ControllerResult([], BrokerHeartbeatReply(ErrorCode.stale_broker_epoch, error_message=f"No broker registration found for broker id {broker_id}"))
        if registration.epoch != broker_epoch:
            message = f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}"
            return ControllerResult([], BrokerHeartbeatReply(ErrorCode.stale_broker_epoch, error_message=message))
        session = self.heartbeats.session(broker_id, now_ms)
        # The offset of the registration record; after a failover the epoch stands in for it
        # (it is the offset the controller meant the record to take).
        registered_at = self._registration_offsets.get(broker_id, registration.epoch)
        current = _current_state(registration)
        following = self._next_state(current, registration, session, current_metadata_offset, want_fence, want_shut_down, registered_at, image, committed_offset)
        records: list[MetadataRecord] = []
        if following in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW) and not registration.fenced:
            records.extend(self._replication.handle_broker_fenced(image, broker_id))
            records.append(FenceBrokerRecord(id=broker_id, epoch=registration.epoch))
        elif following is BrokerControlState.UNFENCED and current is BrokerControlState.FENCED:
            records.append(UnfenceBrokerRecord(id=broker_id, epoch=registration.epoch))
            records.extend(self._replication.handle_broker_unfenced(image, broker_id))
        elif following is BrokerControlState.CONTROLLED_SHUTDOWN and current is BrokerControlState.UNFENCED:
            records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=registration.epoch, in_controlled_shutdown=1))
            records.extend(self._replication.handle_broker_in_controlled_shutdown(image, broker_id))
        if not records:
            # A broker being fenced or shut down loses every leadership already: its offline dirs,
            # named in every heartbeat, are handled at the next one, from the image this one makes.
            records.extend(self._directories_offline(image, registration, offline_log_dirs))
        records.extend(_cordoned_dirs_change(registration, cordoned_log_dirs, image))
        fenced = following in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)
        self.heartbeats.touch(broker_id, now_ms, current_metadata_offset, fenced=fenced)
        reply = BrokerHeartbeatReply(
            ErrorCode.none,
            is_caught_up=current_metadata_offset >= registered_at,
            is_fenced=fenced,
            in_controlled_shutdown=following is BrokerControlState.CONTROLLED_SHUTDOWN,
            should_shut_down=following is BrokerControlState.SHUTDOWN_NOW,
        )
        return ControllerResult(records, reply)

    def _directories_offline(self, image: MetadataImage, registration: BrokerRegistration, offline: Sequence[uuid.UUID]) -> list[MetadataRecord]:
        """Kafka's handleDirectoriesOffline: the replicas in the newly offline dirs move away, and the
        registration keeps only the dirs still online (a directory no longer registered is offline
        to every later election, DirectoryId.isOnline)."""
        lost = set(offline).intersection(registration.directories)
        if not lost:
            return []
        records: list[MetadataRecord] = list(self._replication.handle_directories_offline(image, registration.broker_id, lost))
        online = tuple(d for d in registration.directories if d not in lost)
        records.append(BrokerRegistrationChangeRecord(broker_id=registration.broker_id, broker_epoch=registration.epoch, log_dirs=online))
        return records

    def _next_state(
        self,
        current: BrokerControlState,
        registration: BrokerRegistration,
        session: _Session,
        metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
        registered_at: int,
        image: MetadataImage,
        committed_offset: int,
    ) -> BrokerControlState:
        """Kafka's BrokerHeartbeatManager.calculateNextBrokerState."""
        if current is BrokerControlState.FENCED:
            if want_shut_down:
                return BrokerControlState.SHUTDOWN_NOW
            if not want_fence and metadata_offset >= registered_at:
                return BrokerControlState.UNFENCED
            return BrokerControlState.FENCED
        if current is BrokerControlState.UNFENCED:
            if want_fence:
                return BrokerControlState.SHUTDOWN_NOW if want_shut_down else BrokerControlState.FENCED
            if want_shut_down:
                if self._replication.has_leaderships(image, registration.broker_id):
                    return BrokerControlState.CONTROLLED_SHUTDOWN
                return BrokerControlState.SHUTDOWN_NOW
            return BrokerControlState.UNFENCED
        if self._replication.has_leaderships(image, registration.broker_id):
            return BrokerControlState.CONTROLLED_SHUTDOWN
        # Leadership has moved away in the committed image, so the moves are at or before
        # committed_offset: shut down once every active broker has caught up that far.
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = committed_offset
        if session.controlled_shutdown_offset <= self.heartbeats.lowest_active_offset(image):
            return BrokerControlState.SHUTDOWN_NOW
        return BrokerControlState.CONTROLLED_SHUTDOWN

    # --- session expiry ---------------------------------------------------------------

    def track_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int, image: MetadataImage) -> None:
        """A heartbeat of the registered incarnation arrived: it counts as contact now, before it
        waits its turn to be written (Kafka 4.4's trackBrokerHeartbeat). Counted only once it was
        processed, heartbeats queued behind slowly committing writes let a live broker's session
        run out: after a controller failover at seed 756070550 a live broker was fenced so, with
        another, and librdkafka, shown one broker of three, dropped its connections for good."""
        registration = image.brokers.get(broker_id)
        session = self.heartbeats.sessions.get(broker_id)
        if registration is not None and registration.epoch == broker_epoch and session is not None:
            session.last_contact_ms = max(session.last_contact_ms, now_ms)

    def fence_stale_brokers(self, now_ms: int, image: MetadataImage) -> ControllerResult[list[int]]:
        """Fence the unfenced broker silent longest, if its session ran out; the response lists it.

        One per write, as Kafka's maybeFenceOneStaleBroker: the controller checks again at once,
        after the heartbeats that arrived meanwhile, before it fences another.
        """
        stale = self.heartbeats.stale_brokers(image, now_ms)[:1]
        if not stale:
            return ControllerResult([], [])
        records: list[MetadataRecord] = list(self._replication.handle_brokers_fenced(image, stale))
        for broker_id in stale:
            records.append(FenceBrokerRecord(id=broker_id, epoch=image.brokers[broker_id].epoch))
            self.heartbeats.sessions[broker_id].fenced = True
        return ControllerResult(records, stale)

    def next_session_expiry_ms(self, image: MetadataImage) -> int | None:
        """When to call fence_stale_brokers next (None: no unfenced broker is being watched)."""
        return self.heartbeats.next_expiry_ms(image)


def _cordoned_dirs_change(
    registration: BrokerRegistration, cordoned: Sequence[uuid.UUID] | None, image: MetadataImage
) -> list[BrokerRegistrationChangeRecord]:
    """Kafka's handleDirectoriesCordoned: a record when the set differs from the registration's, or
    the registration has none yet (an empty set is then recorded too). Below metadata.version
    4.3-IV0 the records cannot carry it, and the controller ignores what the broker sends."""
    if cordoned is None or not mv.for_level(image.features.get(METADATA_VERSION_FEATURE)).is_cordoned_log_dirs_supported:
        return []
    if registration.cordoned_directories is not None and set(registration.cordoned_directories) == set(cordoned):
        return []
    return [BrokerRegistrationChangeRecord(broker_id=registration.broker_id, broker_epoch=registration.epoch, cordoned_log_dirs=tuple(cordoned))]


def _current_state(registration: BrokerRegistration) -> BrokerControlState:
    if registration.fenced:
        return BrokerControlState.FENCED
    if registration.in_controlled_shutdown:
        return BrokerControlState.CONTROLLED_SHUTDOWN
    return BrokerControlState.UNFENCED


def _unsupported(name: str, level: int, low: int, high: int) -> str:
    return (
        f"Unable to register because the broker does not support finalized version {level} of {name}. "
        f"The broker wants a version between {low} and {high}, inclusive."
    )


def _check_log_dirs(request: BrokerRegistrationRequest, image: MetadataImage) -> None:
    if not request.log_dirs:
        raise ApiError(ErrorCode.invalid_registration, "No directories specified in request")
    if any(d.int < _RESERVED_DIRECTORIES for d in request.log_dirs):
        raise ApiError(ErrorCode.invalid_registration, "Reserved directory ID in request")
    if len(set(request.log_dirs)) != len(request.log_dirs):
        raise ApiError(ErrorCode.invalid_registration, "Duplicate directory ID in request")
    for other in image.brokers.values():
        if other.broker_id == request.broker_id:
            continue
        for directory in request.log_dirs:
            if directory in other.directories:
                raise ApiError(ErrorCode.invalid_registration, f"Broker {other.broker_id} is already registered with directory {directory}")


__all__ = [
    "BrokerControlState",
    "BrokerHeartbeatManager",
    "BrokerHeartbeatReply",
    "BrokerRegistrationReply",
    "BrokerRegistrationRequest",
    "ClusterControlManager",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "UnregisterBrokerReply",
]
