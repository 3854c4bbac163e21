"""BrokerLifecycleManager: a broker's registration with the active controller and its heartbeats.

Kafka's broker lifecycle (KIP-631): register with a fresh incarnation id and get a broker epoch;
stay fenced (no partitions led, not in Metadata answers) until the controller says this
broker has caught up with the metadata log; heartbeat every `broker.heartbeat.interval.ms`,
which keeps the session alive and carries the broker's metadata offset. A controlled shutdown
asks, through the heartbeat's WantShutDown, for leadership to move away first, and the broker
exits once the controller answers ShouldShutDown, or once no heartbeat has been answered for
`broker.session.timeout.ms`: the controller has fenced it by then, which moves its leaderships
and takes it out of every ISR, so there is nothing left to wait for (Kafka waits out its whole
shutdown timeout, five minutes, when cut off from the controller). A broker that is fenced for
missing heartbeats keeps heartbeating with the same epoch; a registration the controller no
longer knows (STALE_BROKER_EPOCH) registers again and gets a new epoch.

A node with several log dirs registers the directory id of each dir online at start-up, and names
a dir that goes offline later in every heartbeat's OfflineLogDirs (KIP-858): the controller then
takes this broker out of the leadership and ISR of the replicas in that dir.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass
from typing import Callable

import structlog
from kio.schema.broker_heartbeat.v2.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64, u16

from broker.broker_session_lease import BrokerSessionLease
from broker.controller_channel import ControllerChannel, ControllerUnavailableError

log = structlog.get_logger(__name__)

PLAINTEXT = 0
# How long to wait before retrying a registration the controller refused or did not answer.
REGISTRATION_RETRY_MS = 500
STARTUP_HEARTBEAT_MS = 20


class BrokerState(enum.Enum):
    STARTING = "starting"
    RECOVERY = "recovery"  # registered, fenced, catching up with the metadata log
    RUNNING = "running"
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    name: str
    host: str
    port: int


class BrokerLifecycleManager:
    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        rack: str | None,
        listeners: list[AdvertisedListener],
        features: dict[str, tuple[int, int]],
        log_dir_ids: list[uuid.UUID],
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        quorum_fetch_timeout_ms: int,
        channel: ControllerChannel,
        metadata_offset: Callable[[], int],
        previous_broker_epoch: int = -1,
        cordoned_log_dirs: Callable[[], tuple[uuid.UUID, ...]] = tuple,
        cordoned_log_dirs_supported: Callable[[], bool] = lambda: False,
        offline_log_dirs: Callable[[], tuple[uuid.UUID, ...]] = tuple,
    ) -> None:
        self._broker_id = broker_id
        self._cluster_id = cluster_id
        self._rack = rack
        self._listeners = listeners
        self._features = features
        self._log_dir_ids = log_dir_ids
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._session_timeout_s = session_timeout_ms / 1000
        # Loop time the controller's session for this broker last started: its last accepted
        # heartbeat or registration, or a new quorum leader's election (see handle_leader_change).
        self._last_answered = 0.0
        self.lease = BrokerSessionLease(session_timeout_ms, quorum_fetch_timeout_ms)
        self._channel = channel
        self._metadata_offset = metadata_offset
        # The epoch this broker had when it last shut down cleanly (-1: it did not): the controller
        # takes it out of every eligible leader replica set unless it matches (KIP-966).
        self._previous_broker_epoch = previous_broker_epoch
        # KIP-1066: the ids of the log dirs cordoned now, sent in every heartbeat once caught up
        # and the finalized metadata.version (4.3-IV0 or later) lets the controller record them.
        self._cordoned_log_dirs = cordoned_log_dirs
        self._cordoned_log_dirs_supported = cordoned_log_dirs_supported
        self._offline_log_dirs = offline_log_dirs
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.state = BrokerState.STARTING
        self.caught_up = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._shutdown_allowed = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(node=broker_id)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="broker-lifecycle")

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move leadership away; True once it allowed this broker to stop,
        False when it did not within ``timeout_s`` or has not answered for a broker session."""
        if self.state in (BrokerState.STARTING, BrokerState.SHUTTING_DOWN):
            return False
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._shutdown_allowed.is_set():
            now = loop.time()
            unanswered_s = now - self._last_answered
            if unanswered_s >= self._session_timeout_s:
                self._log.warning("broker.controlled_shutdown_unanswered", unanswered_s=round(unanswered_s, 3), session_timeout_s=self._session_timeout_s)
                return False
            if now >= deadline:
                self._log.warning("broker.controlled_shutdown_timed_out", timeout_s=timeout_s)
                return False
            try:
                await asyncio.wait_for(self._shutdown_allowed.wait(), min(deadline, self._last_answered + self._session_timeout_s) - now)
            except asyncio.TimeoutError:
                pass
        self._log.info("broker.controlled_shutdown_complete", broker_epoch=self.broker_epoch)
        return True

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """A new quorum leader: its controller gives every registered broker a fresh session when
        it activates, as Kafka's does, so this broker is not fenced yet however long the previous
        controllers left it unanswered; a controlled shutdown right after a controller outage then
        waits for the new controller instead of giving up at once."""
        if leader_id is not None:
            self._last_answered = max(self._last_answered, asyncio.get_running_loop().time())

    def propagate_directory_cordoned(self) -> None:
        """Kafka's propagateDirectoryCordoned: tell the controller at once, not a heartbeat later."""
        if self.broker_epoch >= 0:
            self._wake.set()

    def propagate_directory_failure(self) -> None:
        """Kafka's propagateDirectoryFailure: the next heartbeat, sent now, names the offline dir."""
        if self.broker_epoch >= 0:
            self._wake.set()

    async def close(self) -> None:
        self.state = BrokerState.SHUTTING_DOWN
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            if self.broker_epoch < 0:
                await self._register()
                continue
            await self._heartbeat()
            self._wake.clear()
            # While fenced at start-up the broker asks again at once (as Kafka's does): every
            # interval spent waiting here is start-up time.
            interval_s = self._heartbeat_interval_s if self.state != BrokerState.RECOVERY else STARTUP_HEARTBEAT_MS / 1000
            # asyncio.timeout, not wait_for: on Python 3.11 a cancel (close) arriving as the wake is
            # set was left waiting on wait_for's inner task for ever.
            try:
                async with asyncio.timeout(interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _register(self) -> None:
        request = BrokerRegistrationRequest(
            broker_id=i32(self._broker_id),
            cluster_id=self._cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=tuple(Listener(name=lst.name, host=lst.host, port=u16(lst.port), security_protocol=i16(PLAINTEXT)) for lst in self._listeners),
            features=tuple(Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high)) for name, (low, high) in sorted(self._features.items())),
            rack=self._rack,
            log_dirs=tuple(self._log_dir_ids),
            previous_broker_epoch=i64(self._previous_broker_epoch),
        )
        try:
            response = await self._channel.send(request)
        except ControllerUnavailableError as e:
            self._log.info("broker.registration_pending", reason=str(e))
            await asyncio.sleep(REGISTRATION_RETRY_MS / 1000)
            return
        if response.error_code != ErrorCode.none:
            self._log.warning("broker.registration_refused", error=response.error_code.name)
            await asyncio.sleep(REGISTRATION_RETRY_MS / 1000)
            return
        self.broker_epoch = int(response.broker_epoch)
        self._last_answered = asyncio.get_running_loop().time()
        if self.state == BrokerState.STARTING:
            self.state = BrokerState.RECOVERY
        self._log.info("broker.registered", broker_epoch=self.broker_epoch, incarnation_id=str(self.incarnation_id))

    async def _heartbeat(self) -> None:
        want_shut_down = self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
        request = BrokerHeartbeatRequest(
            broker_id=i32(self._broker_id),
            broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(self._metadata_offset()),
            want_fence=False,
            want_shut_down=want_shut_down,
            offline_log_dirs=self._offline_log_dirs(),
            # Null until the broker caught up (Kafka's RECOVERY state): the registration record
            # starts with none, and the controller keeps what it has while it gets null.
            cordoned_log_dirs=self._cordoned_log_dirs() if self.caught_up.is_set() and self._cordoned_log_dirs_supported() else None,
        )
        sent_at = asyncio.get_running_loop().time()
        try:
            response = await self._channel.send(request)
        except ControllerUnavailableError as e:
            self._log.debug("broker.heartbeat_failed", reason=str(e))
            return
        if response.error_code == ErrorCode.stale_broker_epoch:
            self._log.warning("broker.stale_epoch", broker_epoch=self.broker_epoch)
            self.broker_epoch = -1
            self.lease.revoked()
            return
        if response.error_code != ErrorCode.none:
            self._log.info("broker.heartbeat_refused", error=response.error_code.name)
            return
        self._last_answered = asyncio.get_running_loop().time()
        if response.is_fenced:
            self.lease.revoked()
        else:
            self.lease.renewed(sent_at)
        if response.is_caught_up and not self.caught_up.is_set():
            self._log.info("broker.caught_up", metadata_offset=int(request.current_metadata_offset))
            self.caught_up.set()
        if not response.is_fenced and not self.unfenced.is_set():
            self._log.info("broker.unfenced", broker_epoch=self.broker_epoch)
            self.unfenced.set()
            if self.state == BrokerState.RECOVERY:
                self.state = BrokerState.RUNNING
        elif response.is_fenced and self.unfenced.is_set():
            self._log.warning("broker.fenced", broker_epoch=self.broker_epoch)
            self.unfenced.clear()
        if want_shut_down and response.should_shut_down:
            self._shutdown_allowed.set()
        elif want_shut_down:
            # Leadership is moving away: ask again soon rather than a whole interval later.
            await asyncio.sleep(min(self._heartbeat_interval_s, 0.1))
            self._wake.set()
