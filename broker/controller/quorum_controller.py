"""QuorumController: the cluster's decisions, made by the Raft leader and committed through the log.

Every controller runs one. It is a listener of the metadata quorum registered after the metadata
loader, so by the time it hears of a committed batch the loader's image already holds it. It is
active only while this node leads the quorum and Raft has reported it as leader of the current
epoch: Raft reports that only once everything committed in earlier epochs has been delivered, so
the active controller never decides over an image that misses an earlier leader's decision.

On the active controller writes run one at a time: the control managers decide over the
committed image, the records are appended, and the caller is answered once they are committed
(and so applied to the image the next write decides over). Losing leadership fails every
waiting write with NotControllerError; a broker's ControllerChannel then finds the new leader
and retries there. On the other controllers this object only follows the log.

Broker liveness is soft state of the ClusterControlManager: a newly active controller gives
every registered broker a fresh session, and a timer fences the brokers whose session runs out.
The same timer, with auto.leader.rebalance.enable, gives leadership back to preferred replicas
every leader.imbalance.check.interval.seconds, and tries an unclean election for each leaderless
partition whose topic allows one every unclean.leader.election.interval.ms, as Kafka 4's
controller does: that check is the only one that elects a partition left leaderless before its
topic allowed unclean elections (enabling the config elects nothing by itself). It also appends
a NoOpRecord every metadata.max.idle.interval.ms (KIP-835; 0 disables it), whatever else is
written, so that the high watermark and every node's last applied offset and timestamp keep
moving and a node that stopped following shows its lag.
A fresh cluster's first active controller writes the finalized feature levels (metadata.version
first, then eligible.leader.replicas.version 1 and transaction.version 2 as Kafka 4.1 formats
new clusters); brokers register themselves through BrokerRegistration.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.controller import controller_logic
from broker.controller import acl_control_manager
from broker.controller.acl_control_manager import AclCreateResult, AclDeleteResult
from broker.controller.client_quota_control_manager import QuotaAlteration, QuotaResult, alter_client_quotas
from broker.controller.cluster_control_manager import (
    BrokerHeartbeatReply,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    UnregisterBrokerReply,
)
from broker.controller import controller_registrations
from broker.controller.controller_logic import CreatableTopic, QuorumControllerLogic
from broker.controller.controller_result import ApiError, ControllerResult
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, NEW_CLUSTER_FEATURES, FeatureUpdateResult, metadata_version_of
from broker.controller.producer_id_control_manager import ProducerIdsBlock
from broker.controller.reassignment_control_manager import OngoingTopicReassignment, ReassignableTopic, ReassignableTopicResult
from broker.controller.replication_control_manager import (
    ELECTION_TYPES,
    AlterPartitionReply,
    AlterPartitionTopic,
    AssignReplicasToDirsReply,
    DirectoryAssignment,
    ElectLeaderResult,
    election_for_type,
)
from broker.controller.scram_control_manager import AlterScramResult, ScramDeletion, ScramUpsertion, alter_credentials
from broker.dynamic_broker_config import kafka_default
from broker.group.group_config import GroupConfigBounds, validate_group_config
from broker.metadata.metadata_image import GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.metadata.metadata_loader import CommittedBatch
from broker.metadata.metadata_records import MetadataRecord, NoOpRecord, ProducerIdsRecord
from broker.security.standard_acl import AclBindingFilter, StandardAcl
from raft.kafka_raft_client import NotLeaderError
from raft.replicated_log import OffsetAndEpoch
from storage.log_config import TIERED_STORAGE_DISABLED, InvalidConfigError, LogConfig

log = structlog.get_logger(__name__)

R = TypeVar("R")
TopicElectionResults = tuple[str, list[ElectLeaderResult]]

# The timer looks for expired broker sessions (and a due leader balance) at least this often while active.
SESSION_CHECK_MAX_MS = 1000
SESSION_CHECK_MIN_MS = 10
# A balancing pass that reached its cap runs again this soon, as Kafka reschedules it.
BALANCE_RERUN_MS = 10
# MetadataVersion.IBP_3_3_IV1, the first level whose log may hold a NoOpRecord (isNoOpRecordSupported);
# below it only before any metadata.version is finalized, as every level kbroker accepts is 3.3-IV3 or later.
NO_OP_RECORD_METADATA_VERSION_LEVEL = 5


class NotControllerError(Exception):
    """This controller is not (or no longer) the active one."""


class RaftClient(Protocol):
    """What the controller needs of the metadata quorum (KafkaRaftManager)."""

    def append(self, records: list[MetadataRecord]) -> int:
        """The offset of the last record; raises unless this node leads the quorum."""
        ...

    def is_leader(self) -> bool: ...

    @property
    def leader(self) -> tuple[int | None, int]:
        """(leader id or None, epoch) as last reported to the listeners."""
        ...

    def next_append_offset(self) -> int:
        """The offset the next appended record takes (a broker epoch is its registration's offset)."""
        ...

    def kraft_version(self) -> int: ...

    def upgrade_kraft_version(self, epoch: int, kraft_version: int, validate_only: bool) -> None: ...


class RaftClientKRaftVersionAccessor:
    """Kafka's accessor of that name: kraft.version upgrades go to the Raft leader of the active
    controller's epoch, so a controller that lost its leadership cannot write one."""

    def __init__(self, raft: RaftClient, epoch: Callable[[], int | None]) -> None:
        self._raft = raft
        self._epoch = epoch

    def kraft_version(self) -> int:
        return self._raft.kraft_version()

    def upgrade_kraft_version(self, kraft_version: int, validate_only: bool) -> None:
        epoch = self._epoch()
        if epoch is None:
            raise NotLeaderError("Upgrade kraft version failed because the replica is not the current leader")
        self._raft.upgrade_kraft_version(epoch, kraft_version, validate_only)


@dataclass(frozen=True, slots=True)
class ConfigResource:
    resource_type: int
    resource_name: str
    ops: list[tuple[str, int, str | None]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class QuorumController:
    def __init__(
        self,
        config: BrokerConfig,
        raft: RaftClient,
        image: Callable[[], MetadataImage],
        cluster_id: str | None = None,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
        bootstrap: Sequence[MetadataRecord] = (),
    ) -> None:
        """``bootstrap``: the records of the metadata directory's bootstrap.checkpoint (feature
        levels, `--add-scram` credentials), appended instead of the default start of a new log."""
        self._config = config
        self._bootstrap = list(bootstrap)
        self._raft = raft
        self._image = image
        self._now_ms = now_ms
        self._node_id = config.node_id
        self._logic = QuorumControllerLogic(
            new_topic_id=new_topic_id,
            config_default=self._config_default,
            node_id=config.node_id,
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            unstable_feature_versions=getattr(config, "unstable_feature_versions_enable", False),
            quorum_node_ids=[voter.node_id for voter in config.quorum_voters],
            kraft_version=RaftClientKRaftVersionAccessor(raft, lambda: self._active_epoch),
        )
        self._cluster = self._logic.new_cluster_control(cluster_id or config.cluster_id or "", session_timeout_ms=config.broker_session_timeout_ms)
        self._lock = asyncio.Lock()
        self._active_epoch: int | None = None
        self._committed = -1  # the last offset delivered to this listener
        self._last_written = -1  # the last offset this controller appended in its active epoch
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # (offset, tie breaker, future), a heap
        self._seq = itertools.count()
        self._timer: asyncio.Task[None] | None = None
        self._wake_timer = asyncio.Event()
        self._balance_interval_ms = config.leader_imbalance_check_interval_seconds * 1000 if config.auto_leader_rebalance_enable else None
        self._next_balance_ms: int | None = None  # set only while active and balancing is on
        self._unclean_interval_ms = config.unclean_leader_election_interval_ms
        self._next_unclean_ms: int | None = None  # set only while active
        self._max_idle_interval_ms = config.metadata_max_idle_interval_ms or None  # 0: no NoOpRecords
        self._next_no_op_ms: int | None = None  # set only while active and NoOpRecords are on
        # QuorumControllerMetrics: LastCommittedRecordOffset, LastAppliedRecordOffset and -Timestamp.
        self._last_committed_record_offset = -1
        self._last_applied_record_offset = -1
        self._last_applied_record_timestamp = -1
        self._log = log.bind(node=config.node_id)

    @property
    def is_active(self) -> bool:
        return self._active_epoch is not None and self._raft.is_leader()

    @property
    def image(self) -> MetadataImage:
        """The committed metadata as this controller's node has loaded it."""
        return self._image()

    @property
    def supported_features(self) -> Mapping[str, tuple[int, int]]:
        """The feature ranges this controller supports (what it registers with, KIP-919)."""
        return self._logic.features.supported

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def last_committed_record_offset(self) -> int:
        return self._last_committed_record_offset

    @property
    def last_applied_record_offset(self) -> int:
        """Kafka's rule: on the active controller the last record it appended, elsewhere the last committed."""
        return self._last_applied_record_offset

    @property
    def last_applied_record_timestamp(self) -> int:
        """The append time of that record (on the active controller, the time it handed it to Raft)."""
        return self._last_applied_record_timestamp

    def start(self) -> None:
        """Start the timer of broker sessions and leader balance (it does work only while this controller is active)."""
        self._timer = asyncio.get_running_loop().create_task(self._periodic_timer(), name="controller-timer")

    async def shutdown(self) -> None:
        self._deactivate("the controller is shutting down")
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None

    # -- the Raft listener ------------------------------------------------------------------------

    def handle_commit(self, batch: CommittedBatch) -> None:
        """A committed batch (the loader has applied it already): release the writes it completes."""
        self._committed = max(self._committed, batch.last_offset)
        self._last_committed_record_offset = batch.last_offset
        if self._active_epoch is None:
            self._last_applied_record_offset = batch.last_offset
            self._last_applied_record_timestamp = getattr(batch, "append_timestamp", self._last_applied_record_timestamp)
        while self._waiters and self._waiters[0][0] <= self._committed:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, records: Sequence[MetadataRecord]) -> None:
        self._committed = snapshot_id.offset - 1
        # As Kafka's OffsetControlManager: the snapshot's end offset (exclusive) stands for both.
        self._last_committed_record_offset = self._last_applied_record_offset = snapshot_id.offset

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if leader_id == self._node_id:
            if self._active_epoch == epoch:
                return
            self._deactivate(f"leadership moved to epoch {epoch}")
            self._activate(epoch)
        elif self._active_epoch is not None:
            self._log.info("controller.resigned", epoch=self._active_epoch, new_leader=leader_id, new_epoch=epoch)
            self._deactivate(f"leadership moved to {leader_id} in epoch {epoch}")

    def _activate(self, epoch: int) -> None:
        image = self._image()
        self._active_epoch = epoch
        self._last_written = self._committed
        self._cluster.activate(image, self._now_ms())
        if self._balance_interval_ms is not None:
            # As Kafka: the first check an interval after taking over, not at once.
            self._next_balance_ms = self._now_ms() + self._balance_interval_ms
        self._next_unclean_ms = self._now_ms() + self._unclean_interval_ms
        if self._max_idle_interval_ms is not None:
            self._next_no_op_ms = self._now_ms() + self._max_idle_interval_ms
        self._log.info("controller.activated", epoch=epoch, committed_offset=self._committed, brokers=len(image.brokers))
        if METADATA_VERSION_FEATURE not in image.features:
            # Appended now, before any write can run: every decision of this epoch sees it committed first.
            records = self._bootstrap or controller_logic.cluster_bootstrap_records(
                features=NEW_CLUSTER_FEATURES, min_insync_replicas=self._logic.configuration.static_min_insync_replicas()
            )
            try:
                self._append(records)
            except NotControllerError:
                return
            self._log.info("controller.bootstrapped", records=len(records))
        self._wake_timer.set()

    def _deactivate(self, reason: str) -> None:
        self._active_epoch = None
        self._next_balance_ms = None
        self._next_no_op_ms = None
        # As Kafka's OffsetControlManager.deactivate: what was appended but not committed is not applied.
        self._last_applied_record_offset = self._committed
        self._next_unclean_ms = None
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(NotControllerError(reason))

    # -- the write path -----------------------------------------------------------------------------

    def _check_active(self) -> None:
        if self._active_epoch is not None and not self._raft.is_leader():
            self._deactivate("this node no longer leads the metadata quorum")
        if self._active_epoch is None:
            leader_id, epoch = self._raft.leader
            raise NotControllerError(f"this controller is not active (the leader is {leader_id} in epoch {epoch})")

    def _append(self, records: list[MetadataRecord]) -> int:
        try:
            offset = self._raft.append(records)
        except Exception as e:
            self._deactivate(f"append failed: {e}")
            raise NotControllerError(f"this controller could not append to the metadata log: {e}") from e
        self._last_written = offset
        self._last_applied_record_offset = offset
        # Not the batch's append time, which Raft sets when it drains the batch: Kafka takes the clock here too.
        self._last_applied_record_timestamp = self._now_ms()
        return offset

    async def _committed_through(self, offset: int) -> None:
        if offset <= self._committed:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), future))
        await future

    async def _write(self, decide: Callable[[MetadataImage], tuple[Sequence[MetadataRecord], R]]) -> R:
        """One decision at a time over the committed image, answered once its records are committed."""
        async with self._lock:
            self._check_active()
            # Whatever this epoch wrote before (the bootstrap, a write whose caller went away) is in
            # the image before the next decision is made over it.
            await self._committed_through(self._last_written)
            self._check_active()
            records, result = decide(self._image())
            if records:
                await self._committed_through(self._append(list(records)))
            return result

    # -- brokers ------------------------------------------------------------------------------------

    async def register_broker(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], BrokerRegistrationReply]:
            result = self._cluster.register_broker(request, image=image, controller_offset=self._raft.next_append_offset(), now_ms=self._now_ms())
            return result.records, result.response

        reply = await self._write(decide)
        if reply.error_code == 0:
            self._log.info("controller.broker_registered", broker=request.broker_id, broker_epoch=reply.broker_epoch)
        else:
            self._log.warning("controller.registration_refused", broker=request.broker_id, error=reply.error_code, message=reply.error_message)
        self._wake_timer.set()
        return reply

    async def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
        *,
        cordoned_log_dirs: Sequence[uuid.UUID] | None = None,
        offline_log_dirs: Sequence[uuid.UUID] = (),
    ) -> BrokerHeartbeatReply:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], BrokerHeartbeatReply]:
            result = self._cluster.heartbeat(
                broker_id,
                broker_epoch,
                current_metadata_offset,
                want_fence,
                want_shut_down,
                now_ms=self._now_ms(),
                image=image,
                committed_offset=self._committed,
                cordoned_log_dirs=cordoned_log_dirs,
                offline_log_dirs=offline_log_dirs,
            )
            return result.records, result.response

        if self.is_active:
            self._cluster.track_heartbeat(broker_id, broker_epoch, self._now_ms(), self._image())
        return await self._write(decide)

    async def unregister_broker(self, broker_id: int) -> UnregisterBrokerReply:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], UnregisterBrokerReply]:
            result = self._cluster.unregister_broker(broker_id, image)
            return result.records, result.response

        reply = await self._write(decide)
        if reply.error_code == 0:
            self._log.info("controller.broker_unregistered", broker=broker_id)
        return reply

    async def register_controller(self, request: controller_registrations.ControllerRegistrationRequest) -> None:
        """ControllerRegistration (KIP-919): done once its RegisterControllerRecord is committed;
        ApiError UNSUPPORTED_VERSION below metadata.version 3.7-IV0."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], None]:
            result = controller_registrations.register_controller(image, request)
            return result.records, result.response

        await self._write(decide)
        self._log.info("controller.controller_registered", controller=request.controller_id, incarnation_id=str(request.incarnation_id))

    async def unregister_controller(self, controller_id: int) -> None:
        """UnregisterController: done once its UnregisterControllerRecord is committed. ApiError
        INVALID_REQUEST for the active controller itself, then as controller_registrations says."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], None]:
            # Checked inside the write: only the active controller knows it is the one asked about.
            if controller_id == self._node_id:
                raise ApiError(ErrorCode.invalid_request, "Controller cannot unregister itself while it is active.")
            result = controller_registrations.unregister_controller(image, controller_id)
            return result.records, result.response

        await self._write(decide)
        self._log.info("controller.controller_unregistered", controller=controller_id)

    async def fence_stale_brokers(self) -> list[int]:
        """Fence the broker whose session ran out first, if one did; the id fenced. The session
        timer's job, which checks again at once while another session has run out."""
        if not self._cluster.heartbeats.stale_brokers(self._image(), self._now_ms()):
            return []

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[int]]:
            result = self._cluster.fence_stale_brokers(self._now_ms(), image)
            return result.records, result.response

        fenced = await self._write(decide)
        for broker_id in fenced:
            # Its last heartbeat (or this controller's activation) to the committed fencing: where a failover's seconds went.
            session = self._cluster.heartbeats.sessions.get(broker_id)
            silent_ms = None if session is None else self._now_ms() - session.last_contact_ms
            self._log.warning("controller.broker_fenced", broker=broker_id, silent_ms=silent_ms, reason="no heartbeat within broker.session.timeout.ms")
        return fenced

    async def balance_partition_leaders(self) -> bool:
        """One pass of the preferred-leader balance (the timer's job under auto.leader.rebalance.enable);
        True if it reached the per-pass cap, so more partitions may be waiting."""
        elected, more = await self._capped_pass(self._logic.replication.maybe_balance_partition_leaders)
        if elected:
            self._log.info("controller.preferred_leaders_elected", partitions=elected, more=more)
        return more

    async def _capped_pass(self, step: Callable[[MetadataImage], ControllerResult[bool]]) -> tuple[int, bool]:
        """A periodic pass of elections, written as one decision: (records written, whether the cap was reached)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], tuple[int, bool]]:
            result = step(image)
            return result.records, (len(result.records), result.response)

        return await self._write(decide)

    async def _balance_if_due(self) -> None:
        interval = self._balance_interval_ms
        if interval is None or self._next_balance_ms is None or self._now_ms() < self._next_balance_ms:
            return
        # Set before the pass, so that a failed one waits an interval too.
        self._next_balance_ms = self._now_ms() + interval
        more = await self.balance_partition_leaders()
        if more and self._next_balance_ms is not None:  # None: this controller resigned meanwhile
            self._next_balance_ms = self._now_ms() + BALANCE_RERUN_MS

    async def elect_unclean_leaders(self) -> bool:
        """One pass of Kafka's maybeElectUncleanLeaders; True if it reached the per-pass cap."""
        elected, more = await self._capped_pass(self._logic.replication.maybe_elect_unclean_leaders)
        if elected:
            self._log.warning("controller.unclean_leaders_elected", partitions=elected, more=more)
        return more

    async def _elect_unclean_if_due(self) -> None:
        """As Kafka's electUnclean periodic task: every interval from activation, again at once if the cap was reached."""
        if self._next_unclean_ms is None or self._now_ms() < self._next_unclean_ms:
            return
        # Set before the pass, so that a failed one waits an interval too.
        self._next_unclean_ms = self._now_ms() + self._unclean_interval_ms
        more = await self.elect_unclean_leaders()
        if more and self._next_unclean_ms is not None:  # None: this controller resigned meanwhile
            self._next_unclean_ms = self._now_ms() + BALANCE_RERUN_MS

    async def maybe_write_no_op_record(self) -> bool:
        """Kafka's writeNoOpRecord periodic task: a NoOpRecord every metadata.max.idle.interval.ms
        while active, counted from activation and from the last one, not from other writes. None
        before metadata.version 3.3-IV1. Not waited for: it decides nothing, and the next write
        waits for it to commit before deciding. True if one was appended."""
        if self._next_no_op_ms is None or self._max_idle_interval_ms is None or self._now_ms() < self._next_no_op_ms:
            return False
        self._next_no_op_ms = self._now_ms() + self._max_idle_interval_ms
        if metadata_version_of(self._image()).level < NO_OP_RECORD_METADATA_VERSION_LEVEL:
            return False
        async with self._lock:
            self._check_active()
            self._append([NoOpRecord()])
        return True

    async def _periodic_timer(self) -> None:
        while True:
            self._wake_timer.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallowed a shutdown's cancel
            # that arrived with a wake-up (an activation, a registration), and the timer ran on for ever.
            try:
                async with asyncio.timeout(self._next_check_ms() / 1000):
                    await self._wake_timer.wait()
            except TimeoutError:
                pass
            if self._active_epoch is not None and not self._raft.is_leader():
                self._deactivate("this node no longer leads the metadata quorum")
            if not self.is_active:
                continue
            for task in (self.fence_stale_brokers, self._balance_if_due, self._elect_unclean_if_due, self.maybe_write_no_op_record):
                try:
                    await task()
                except NotControllerError:
                    break
                except Exception:
                    # A bug here must not stop fencing or balancing for good; it is logged and tried again.
                    self._log.exception("controller.periodic_task_failed", task=task.__name__)

    def next_timer_due_ms(self) -> int | None:
        """When the timer next has work (None while inactive or with none to come): the first
        millisecond past the earliest session expiry, or the next balance, unclean-election or
        NoOpRecord pass. Fencing is due then, not at a check period's next tick: Kafka 4.4 checks
        every broker.session.timeout.ms / 8, so fences up to 1.1 s later than this."""
        if not self.is_active:
            return None
        expiry = self._cluster.next_session_expiry_ms(self._image())
        # A session runs out once the clock is past its expiry, hence the extra millisecond.
        due = [t for t in (None if expiry is None else expiry + 1, self._next_balance_ms, self._next_unclean_ms, self._next_no_op_ms) if t is not None]
        return min(due, default=None)

    def _next_check_ms(self) -> int:
        due = self.next_timer_due_ms()
        if due is None:
            return SESSION_CHECK_MAX_MS
        return min(max(due - self._now_ms(), SESSION_CHECK_MIN_MS), SESSION_CHECK_MAX_MS)

    # -- topics and configs -------------------------------------------------------------------------

    def effective_topic_config(self, overrides: dict[str, str | None]) -> dict[str, str]:
        return self._config.effective_topic_config(overrides)

    def _validate_topic_config(self, configs: dict[str, str]) -> None:
        props = dict(self._config.topic_defaults())
        props.update(configs)
        if LogConfig.from_properties(props).remote_storage_enable:
            raise InvalidConfigError("remote.storage.enable", TIERED_STORAGE_DISABLED)

    def _validate_resource_config(self, resource_type: int, _name: str, configs: dict[str, str]) -> None:
        # A broker resource's values were checked by the broker that received the change, as in
        # Kafka, whose controller checks only the name; a broker leaves out what it cannot apply.
        if resource_type == TOPIC_RESOURCE:
            self._validate_topic_config(configs)
        elif resource_type == GROUP_RESOURCE:  # Kafka 4.4's GroupConfig.validate, with this controller's bounds
            validate_group_config(_name, configs, GroupConfigBounds.of(self._config))

    def _config_default(self, resource_type: int, key: str) -> str | None:
        if resource_type == TOPIC_RESOURCE:
            return self._config.effective_topic_config({}).get(key)
        return kafka_default(key)

    @staticmethod
    def _placeable_broker_ids(image: MetadataImage) -> list[int]:
        """Brokers new replicas go to: registered, unfenced and not shutting down."""
        return sorted(b.broker_id for b in image.brokers.values() if not b.fenced and not b.in_controlled_shutdown)

    async def create_topics(self, topics: list[CreatableTopic], validate_only: bool) -> list[controller_logic.CreateTopicResult]:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[controller_logic.CreateTopicResult]]:
            records, results = self._logic.create_topics(
                image,
                topics,
                validate_only=validate_only,
                broker_ids=self._placeable_broker_ids(image),
                default_partitions=self._config.num_partitions,
                default_replication_factor=self._config.default_replication_factor,
                validate_config=self._validate_topic_config,
            )
            return ([] if validate_only else records), results

        results = await self._write(decide)
        if not validate_only:
            for r in results:
                if r.error_code == 0:
                    self._log.info("topic.created", topic=r.name, partitions=r.num_partitions, topic_id=str(r.topic_id))
        return results

    async def auto_create_topics(self, names: list[str]) -> dict[str, int]:
        """Create topics a Metadata request named; each name's error code (0: it exists now)."""
        topics = [CreatableTopic(name=n, num_partitions=-1, replication_factor=-1, assignments=None, configs={}) for n in dict.fromkeys(names)]
        results = await self.create_topics(topics, validate_only=False)
        return {r.name: 0 if r.error_code == controller_logic.TOPIC_ALREADY_EXISTS else r.error_code for r in results}

    async def delete_topics(self, entries: list[tuple[str | None, uuid.UUID | None]]) -> list[controller_logic.DeleteTopicResult]:
        results = await self._write(lambda image: self._logic.delete_topics(image, entries))
        for r in results:
            if r.error_code == 0:
                self._log.info("topic.deleted", topic=r.name)
        return results

    async def create_partitions(
        self, topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool
    ) -> list[controller_logic.CreatePartitionsResult]:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[controller_logic.CreatePartitionsResult]]:
            records, results = self._logic.create_partitions(image, topics, validate_only=validate_only, broker_ids=self._placeable_broker_ids(image))
            return ([] if validate_only else records), results

        return await self._write(decide)

    async def alter_client_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]:
        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[QuotaResult]]:
            records, results = alter_client_quotas(image, alterations)
            return ([] if validate_only else records), results

        return await self._write(decide)

    async def create_acls(self, acls: list[StandardAcl]) -> list[AclCreateResult]:
        return await self._write(lambda image: acl_control_manager.create_acls(image, acls))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclDeleteResult]:
        return await self._write(lambda image: acl_control_manager.delete_acls(image, filters))

    async def alter_user_scram_credentials(self, deletions: list[ScramDeletion], upsertions: list[ScramUpsertion]) -> list[AlterScramResult]:
        return await self._write(lambda image: alter_credentials(image, deletions, upsertions))

    async def alter_configs(
        self, resources: list[ConfigResource], incremental: bool, validate_only: bool, forwarded: bool = True
    ) -> list[controller_logic.AlterConfigsResult]:
        """``forwarded``: a broker sent the request on for its client (Kafka's isForwarded), as
        opposed to a client sending it straight to the controller (``--bootstrap-controller``)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[controller_logic.AlterConfigsResult]]:
            records, results = self._logic.alter_configs(
                image,
                [(r.resource_type, r.resource_name, r.ops) for r in resources],
                incremental=incremental,
                validate_only=validate_only,
                validate_config=self._validate_resource_config,
                # As Kafka's ControllerApis: that a broker resource names the node that received
                # the request is checked by that broker before it forwards it (ForwardAlterConfigsHandler).
                node_id=None,
                forwarded=forwarded,
            )
            return ([] if validate_only else records), results

        # A topic or broker that now allows unclean elections gets no leader for its leaderless
        # partitions here: as in Kafka 4.4, the periodic check elects them (or ElectLeaders, unclean).
        return await self._write(decide)

    # -- partition leaders ---------------------------------------------------------------------------

    async def elect_leaders(self, election_type: int, topics: Sequence[tuple[str, Sequence[int]]] | None) -> list[TopicElectionResults]:
        """ElectLeaders (``election_type`` as on the wire): each topic with its partitions' results,
        answered once the elections are committed. None elects every partition and answers every
        topic, leaving out the partitions that needed no election. An unknown election type raises
        ApiError(INVALID_REQUEST), as Kafka fails the whole request."""
        if topics is not None and not topics:
            return []  # as Kafka: nothing asked is answered at once, active or not

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[TopicElectionResults]]:
            election = election_for_type(election_type)
            wanted = None if topics is None else [(name, p) for name, partitions in topics for p in partitions]
            result = self._logic.replication.elect_leaders(image, election, wanted)
            return result.records, _by_topic(result.response, topics, image)

        answer = await self._write(decide)
        elected = [f"{r.topic}-{r.partition}" for _, results in answer for r in results if r.error_code == ErrorCode.none]
        if elected:
            self._log.info("controller.leaders_elected", election=ELECTION_TYPES[election_type].value, partitions=elected)
        return answer

    async def alter_partition(self, broker_id: int, broker_epoch: int, topics: Sequence[AlterPartitionTopic]) -> AlterPartitionReply:
        """AlterPartition from a partition leader (``broker_id`` at its registered ``broker_epoch``):
        answered once the ISR changes are committed, each partition's answer its new state."""
        if not topics:
            return AlterPartitionReply(ErrorCode.none)  # as Kafka: answered at once, no epoch check

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], AlterPartitionReply]:
            result = self._logic.replication.alter_partition(image, broker_id, broker_epoch, topics)
            return result.records, result.response

        reply = await self._write(decide)
        if reply.error_code != ErrorCode.none:
            self._log.warning("controller.alter_partition_refused", broker=broker_id, error=reply.error_code, message=reply.error_message)
        for topic in reply.topics:
            for p in topic.partitions:
                fields = {"broker": broker_id, "topic_id": str(topic.topic_id), "partition": p.partition_index}
                if p.error_code == ErrorCode.none:
                    self._log.debug("controller.isr_altered", isr=p.isr, partition_epoch=p.partition_epoch, **fields)
                else:
                    # As Kafka, refusals are worth seeing: a leader whose view of the partition is off.
                    self._log.info("controller.isr_change_refused", error=p.error_code, **fields)
        return reply

    async def assign_replicas_to_dirs(self, broker_id: int, broker_epoch: int, directories: Sequence[DirectoryAssignment]) -> AssignReplicasToDirsReply:
        """AssignReplicasToDirs (KIP-858): answered once the directory changes are committed."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], AssignReplicasToDirsReply]:
            result = self._logic.replication.assign_replicas_to_dirs(image, broker_id, broker_epoch, directories)
            return result.records, result.response

        reply = await self._write(decide)
        if reply.error_code != ErrorCode.none:
            self._log.warning("controller.assign_replicas_to_dirs_refused", broker=broker_id, error=reply.error_code, message=reply.error_message)
        return reply

    # -- reassignments (KIP-455) ---------------------------------------------------------------------

    async def alter_partition_reassignments(self, topics: Sequence[ReassignableTopic], allow_replication_factor_change: bool = True) -> list[ReassignableTopicResult]:
        """AlterPartitionReassignments: each partition's answer, once the records of those that
        succeeded are committed (a move then goes on through AlterPartition)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], list[ReassignableTopicResult]]:
            result = self._logic.reassignment.alter_partition_reassignments(image, topics, allow_replication_factor_change=allow_replication_factor_change)
            return result.records, result.response

        results = await self._write(decide)
        answers = [p.error_code for t in results for p in t.partitions]
        # As Kafka's "Successfully altered X out of Y partition reassignment(s)".
        self._log.info("controller.reassignments_altered", succeeded=answers.count(ErrorCode.none), total=len(answers))
        return results

    async def list_partition_reassignments(self, topics: Sequence[tuple[str, Sequence[int]]] | None) -> list[OngoingTopicReassignment]:
        """ListPartitionReassignments, read by the active controller over everything it committed."""
        return await self._write(lambda image: ([], self._logic.reassignment.list_partition_reassignments(image, topics)))

    # -- features ----------------------------------------------------------------------------------

    async def update_features(self, updates: dict[str, int], upgrade_types: dict[str, int], validate_only: bool) -> FeatureUpdateResult:
        """UpdateFeatures: NONE once the new levels are committed, or the error of the first feature
        refused (then nothing is written)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], FeatureUpdateResult]:
            return self._logic.update_features(image, updates, upgrade_types, validate_only=validate_only)

        result = await self._write(decide)
        if result.error_code == ErrorCode.none and not validate_only:
            for name, level in sorted(updates.items()):
                self._log.info("controller.feature_updated", feature=name, feature_level=level)
        elif result.error_code != ErrorCode.none:
            self._log.warning("controller.feature_update_refused", features=sorted(updates), message=result.error_message)
        return result

    # -- producer ids -------------------------------------------------------------------------------

    async def allocate_producer_id_block(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """AllocateProducerIds: STALE_BROKER_EPOCH unless registered with that epoch; the block's end
        is committed before any id of it is handed out."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], ProducerIdsBlock]:
            result = self._logic.producer_ids.generate_next_producer_id(image, broker_id, broker_epoch)
            return result.records, result.response

        return await self._write(decide)

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdsRecord:
        """A block for a broker in this process, whatever its epoch: the committed record's
        next_producer_id ends it. Raises ProducerIdsExhaustedError past the int64 range."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], ProducerIdsRecord]:
            registration = image.brokers.get(broker_id)
            record = self._logic.allocate_producer_ids(image, broker_id, broker_epoch=registration.epoch if registration else -1)
            return [record], record

        record = await self._write(decide)
        self._log.info("producer_ids.allocated", broker_id=broker_id, next_producer_id=record.next_producer_id)
        return record


def _by_topic(
    results: list[ElectLeaderResult], requested: Sequence[tuple[str, Sequence[int]]] | None, image: MetadataImage
) -> list[TopicElectionResults]:
    """Results grouped as Kafka answers them: per requested topic in request order, or, for every
    partition, one entry per topic of the image, even one left with no partition to report."""
    if requested is None:
        grouped: dict[str, list[ElectLeaderResult]] = {name: [] for name in sorted(image.topics)}
        for r in results:
            grouped[r.topic].append(r)
        return list(grouped.items())
    remaining = iter(results)  # one result per requested partition, in request order
    return [(name, [next(remaining) for _ in partitions]) for name, partitions in requested]


__all__ = ["ConfigResource", "InvalidConfigError", "NotControllerError", "QuorumController", "RaftClient", "wall_clock_ms"]
