"""One node of the simulated cluster: a KafkaRaftClient over a MemoryLog, the metadata loader,
the quorum controller (on voters), the broker's lifecycle, its replica manager and fetchers.

Everything runs on the simulation's virtual clock and event queue; messages go through the
simulated network as Python objects (Raft's are kio entities, the broker's small dataclasses).
A crash drops every field but the disk: the Raft log keeps what it flushed, the quorum-state
store what it wrote, each partition log what the crash kind allows.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.controller.cluster_control_manager import BrokerHeartbeatReply, BrokerRegistrationReply, BrokerRegistrationRequest
from broker.controller.controller_logic import CreatableTopic
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES
from broker.controller.replication_control_manager import AlterPartitionReply, AlterPartitionTopic, IsrMember, PartitionIsrChange
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig
from broker.group.offset_metadata_manager import PartitionCommit
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import BrokerEndpoint, MetadataRecord
from broker.raft_manager import MetadataRecordSerde
from raft.kafka_raft_client import CommittedBatch, KafkaRaftClient, LeaderChange, LoadSnapshot, Respond, Send
from raft.memory_log import MemoryLog
from raft.quorum_state_store import MemoryQuorumStateStore
from replication.partition_state import AlterPartitionIntent
from tests.simulation.sim_controller import NotController, SimController
from tests.simulation.sim_replica import FetchRequest, FetchResponse, SimReplica, TopicPartition
from tests.simulation.simulated_disk import SimulatedPartitionLog

if TYPE_CHECKING:
    from tests.simulation.cluster_simulation import Simulation

SERDE = MetadataRecordSerde()
OFFSETS_TOPIC = "__consumer_offsets"
NOT_COORDINATOR = 16
OFFSET_COMMIT_VERSION = 9
ALTER_PARTITION_RETRY_MS = 50  # alter_partition_manager.RETRY_BACKOFF_S
MIN_INSYNC_REPLICAS = "min.insync.replicas"


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    kind: str  # register, heartbeat, alter_partition, create_topics
    payload: Any


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    tp: TopicPartition
    values: tuple[int, ...]
    acks_all: bool


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    error_code: int
    base_offset: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    tp: TopicPartition  # the __consumer_offsets partition of the group
    group: str
    committed: TopicPartition  # the partition whose position is committed
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    error_code: int
    base_offset: int = -1
    records: tuple[Any, ...] = ()  # what the coordinator wrote: the simulation checks they stay


@dataclass(eq=False, slots=True)
class PendingProduce:
    required_offset: int
    base_offset: int
    reply: Any  # Callable[[ProduceResponse], None]


@dataclass(slots=True)
class Disk:
    """What survives a crash."""

    raft_log: MemoryLog = field(default_factory=MemoryLog)
    raft_store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    partition_logs: dict[TopicPartition, SimulatedPartitionLog] = field(default_factory=dict)


class SimNode:
    def __init__(self, sim: "Simulation", node_id: int, is_voter: bool) -> None:
        self.sim = sim
        self.node_id = node_id
        self.is_voter = is_voter
        self.address = (f"node{node_id}", 9000 + node_id)
        self.directory_id = uuid.UUID(int=sim.rng.getrandbits(128))
        self.disk = Disk()
        self.incarnation = 0
        self.running = False
        self.paused_until = 0
        self.damaged = False  # lost unflushed writes and not yet back in every ISR
        self._reset()

    def _reset(self) -> None:
        self.client: KafkaRaftClient[MetadataRecord] | None = None
        self.loader: MetadataLoader | None = None
        self.controller: SimController | None = None
        self.image = MetadataImage()  # what the replica manager was last published
        self.replicas: dict[TopicPartition, SimReplica] = {}
        self.poll_at: int | None = None
        self.polls_at_now = 0
        self.raft_pending: dict[int, tuple[int, int, int]] = {}  # handle -> (source, its incarnation, correlation id)
        self.handles = 0
        self.correlation = 0
        self.broker_epoch = -1
        # As the server's client listeners (which brokers fetch on too): open once the controller
        # has unfenced this incarnation, so nobody reaches a broker that does not know the cluster yet.
        self.serving = False
        self.incarnation_id = uuid.UUID(int=self.sim.rng.getrandbits(128))
        self.lifecycle_inflight: int | None = None
        self.fetch_inflight: dict[TopicPartition, int] = {}
        # broker/alter_partition_manager.py: the latest change per partition, and the one request in flight.
        self.alter_waiting: dict[TopicPartition, AlterPartitionIntent] = {}
        self.alter_inflight: tuple[int, dict[TopicPartition, AlterPartitionIntent]] | None = None
        self.produces: dict[TopicPartition, list[PendingProduce]] = {}
        # The group coordinator: one shard per __consumer_offsets partition this broker leads and serves.
        self.coordinators: dict[TopicPartition, GroupCoordinatorShard] = {}

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> None:
        sim = self.sim
        self._reset()
        self.incarnation += 1
        self.running = True
        self.client = KafkaRaftClient(
            node_id=self.node_id,
            directory_id=self.directory_id,
            cluster_id=sim.cluster_id,
            config=sim.params.raft,
            log=self.disk.raft_log,
            store=self.disk.raft_store,
            serde=SERDE,
            voters=sim.voter_set,
            bootstrap_servers=[],
            now_ms=sim.now,
            rng=random.Random(sim.rng.getrandbits(64)),
        )
        client = self.client
        self.loader = MetadataLoader(high_watermark=lambda: client.high_watermark)
        self.loader.install_publisher(self)
        if self.is_voter:
            self.controller = SimController(self.node_id, sim.cluster_id, sim.params.session_timeout_ms, random.Random(sim.rng.getrandbits(64)), lambda: sim.now)
        sim.note("start", f"node {self.node_id} #{self.incarnation}")
        self.poll()
        self.schedule(sim.now + sim.rng.randint(0, 20), self.lifecycle_tick)
        self.schedule(sim.now + sim.params.isr_check_ms, self.isr_tick)
        self.schedule(sim.now + sim.rng.randint(*sim.params.flush_gap_ms), self.flush_tick)

    def crash(self, lose_unflushed: bool) -> None:
        self.sim.note("crash", f"node {self.node_id}", "losing unflushed writes" if lose_unflushed else "keeping unflushed writes", self.summary())
        self.running = False
        self.incarnation += 1
        self.disk.raft_log = self.disk.raft_log.recover()
        for plog in self.disk.partition_logs.values():
            plog.crash(lose_unflushed)
        if lose_unflushed:
            self.damaged = True
        self._reset()

    def schedule(self, time_ms: int, action: Any, *args: Any) -> None:
        self.sim.at(time_ms, self.sim.node_event, self.node_id, self.incarnation, action, args)

    def summary(self) -> str:
        if not self.running or self.client is None:
            return f"{self.node_id}: down"
        leader, epoch = self.client.leader_and_epoch
        parts = [f"{self.node_id}: raft epoch={epoch} leader={leader} hw={self.client.high_watermark} image@{self.image.provenance} epoch={self.broker_epoch}"]
        for tp, r in sorted(self.replicas.items()):
            role = "L" if r.is_leader else "F"
            parts.append(f"{tp[0]}-{tp[1]}:{role}{r.leader_epoch} leo={r.log.end_offset} hw={r.log.high_watermark} isr={list(r.isr)}")
        return " ".join(parts)

    # -- Raft -------------------------------------------------------------------------------------

    def poll(self) -> None:
        sim = self.sim
        client = self.client
        assert client is not None and self.loader is not None
        sim.touched.add(self.node_id)
        actions = client.poll(sim.now)
        for action in actions:
            if isinstance(action, Send):
                self._raft_send(action)
            elif isinstance(action, Respond):
                self._raft_respond(action)
            elif isinstance(action, CommittedBatch):
                self._on_commit(action)
            elif isinstance(action, LoadSnapshot):
                self.loader.handle_load_snapshot(action.snapshot_id, action.records)
                if self.controller is not None:
                    self.controller.handle_commit(action.snapshot_id.offset - 1)
            elif isinstance(action, LeaderChange):
                self._on_leader_change(action)
        self.loader.maybe_finish_catching_up()
        if self.controller is not None:
            self.controller.run(self.loader.image, client, sim.now)
            if self.controller.is_active:
                self.controller.fence_stale_brokers(self.loader.image)
                self.controller.run(self.loader.image, client, sim.now)
        deadline = client.next_deadline_ms()
        if deadline <= sim.now:
            self.polls_at_now += 1
            if self.polls_at_now > 500:
                sim.fail_plain(f"node {self.node_id} asks to be polled again at once, 500 times at {sim.now} ms")
            deadline = sim.now if actions else sim.now + 1
        else:
            self.polls_at_now = 0
        if self.poll_at is None or deadline < self.poll_at or self.poll_at < sim.now:
            self.poll_at = deadline
            self.schedule(deadline, self.poll_event, deadline)

    def poll_event(self, time_ms: int) -> None:
        if self.poll_at != time_ms:
            return
        self.poll_at = None
        self.poll()

    def _raft_send(self, send: Send) -> None:
        target = self.sim.by_address[send.destination]
        self.sim.transmit(self.node_id, target, "raft_request", self.node_id, self.incarnation, send.correlation_id, send.body)

    def raft_request(self, source: int, source_incarnation: int, correlation_id: int, body: Any) -> None:
        assert self.client is not None
        self.handles += 1
        self.raft_pending[self.handles] = (source, source_incarnation, correlation_id)
        self.client.handle_request(self.handles, body, self.sim.now)
        self.poll()

    def _raft_respond(self, respond: Respond) -> None:
        pending = self.raft_pending.pop(respond.handle, None)
        if pending is None:
            self.sim.fail_plain(f"node {self.node_id} answered Raft handle {respond.handle}, which it was not given")
            return
        source, source_incarnation, correlation_id = pending
        self.sim.transmit_to(self.node_id, source, source_incarnation, "raft_response", correlation_id, respond.body)

    def raft_response(self, correlation_id: int, body: Any) -> None:
        assert self.client is not None
        self.client.handle_response(correlation_id, body, self.sim.now)
        self.poll()

    def _on_commit(self, action: CommittedBatch[MetadataRecord]) -> None:
        assert self.loader is not None
        batch = action.batch
        if batch.records:
            for i, record in enumerate(batch.records):
                self.sim.invariants.metadata_committed(self.node_id, batch.base_offset + i, record)
        else:
            for offset in range(batch.base_offset, batch.last_offset + 1):
                self.sim.invariants.metadata_committed(self.node_id, offset, None)
        if batch.records:
            self.sim.note("commit", f"node {self.node_id} [{batch.base_offset},{batch.last_offset}]@{batch.epoch}", ", ".join(type(r).__name__ for r in batch.records[:4]))
            self.loader.handle_commit(batch)
        if self.controller is not None:
            self.controller.handle_commit(batch.last_offset)

    def _on_leader_change(self, action: LeaderChange) -> None:
        assert self.client is not None and self.loader is not None
        self.sim.note("raft-leader", f"node {self.node_id} leader={action.leader_id} epoch={action.epoch}")
        if action.leader_id == self.node_id:
            self.sim.invariants.raft_leader(self.node_id, action.epoch)
        if self.controller is not None:
            self.controller.handle_leader_change(action.leader_id, action.epoch, self.loader.image, self.client, self.sim.now)

    # -- the controller's side of broker requests ---------------------------------------------------

    def controller_request(self, source: int, source_incarnation: int, correlation_id: int, request: ControllerRequest) -> None:
        controller = self.controller
        assert self.client is not None

        def reply(answer: Any) -> None:
            self.sim.transmit_to(self.node_id, source, source_incarnation, "controller_response", correlation_id, answer)

        if controller is None or not controller.is_active:
            reply(NotController())
            return
        controller.submit(self._decision(controller, request), reply)
        self.poll()

    def _decision(self, controller: SimController, request: ControllerRequest) -> Any:
        sim = self.sim
        client = self.client
        assert client is not None
        payload = request.payload
        if request.kind == "register":

            def decide(image: MetadataImage) -> tuple[list[MetadataRecord], Any]:
                offset = client.quorum.state.accumulator.next_offset  # type: ignore[union-attr]
                result = controller.cluster.register_broker(payload, image=image, controller_offset=offset, now_ms=sim.now)
                return result.records, result.response

        elif request.kind == "heartbeat":
            broker_id, broker_epoch, metadata_offset = payload

            def decide(image: MetadataImage) -> tuple[list[MetadataRecord], Any]:
                result = controller.cluster.heartbeat(
                    broker_id, broker_epoch, metadata_offset, False, False, now_ms=sim.now, image=image, committed_offset=controller.committed
                )
                return result.records, result.response

        elif request.kind == "alter_partition":
            broker_id, broker_epoch, topics = payload

            def decide(image: MetadataImage) -> tuple[list[MetadataRecord], Any]:
                result = controller.logic.replication.alter_partition(image, broker_id, broker_epoch, topics)
                return result.records, result.response

        else:
            topics: list[CreatableTopic] = payload

            def decide(image: MetadataImage) -> tuple[list[MetadataRecord], Any]:
                usable = sorted(b.broker_id for b in image.brokers.values() if not b.fenced and not b.in_controlled_shutdown)
                return controller.logic.create_topics(
                    image, topics, validate_only=False, broker_ids=usable, default_partitions=1, default_replication_factor=1, validate_config=lambda c: None
                )

        return decide

    # -- the broker's lifecycle: registration and heartbeats ----------------------------------------

    def to_controller(self, kind: str, payload: Any) -> int | None:
        assert self.client is not None
        leader, _ = self.client.leader_and_epoch
        if leader is None:
            return None
        self.correlation += 1
        self.sim.transmit(self.node_id, leader, "controller_request", self.node_id, self.incarnation, self.correlation, ControllerRequest(kind, payload))
        return self.correlation

    def lifecycle_tick(self) -> None:
        sim = self.sim
        self.schedule(sim.now + sim.params.heartbeat_interval_ms, self.lifecycle_tick)
        if self.lifecycle_inflight is not None:
            return
        if self.broker_epoch < 0:
            request = BrokerRegistrationRequest(
                broker_id=self.node_id,
                cluster_id=sim.cluster_id,
                incarnation_id=self.incarnation_id,
                listeners=(BrokerEndpoint(name="PLAINTEXT", host=self.address[0], port=self.address[1], security_protocol=0),),
                features=dict(BROKER_SUPPORTED_FEATURES),
                log_dirs=(self.directory_id,),
            )
            self.lifecycle_inflight = self.to_controller("register", request)
        else:
            assert self.loader is not None
            self.lifecycle_inflight = self.to_controller("heartbeat", (self.node_id, self.broker_epoch, self.loader.image.provenance))
        if self.lifecycle_inflight is not None:
            self.schedule(sim.now + sim.params.request_timeout_ms, self._lifecycle_timeout, self.lifecycle_inflight)

    def _lifecycle_timeout(self, correlation_id: int) -> None:
        if self.lifecycle_inflight == correlation_id:
            self.lifecycle_inflight = None

    def controller_response(self, correlation_id: int, answer: Any) -> None:
        if correlation_id == self.lifecycle_inflight:
            self.lifecycle_inflight = None
            if isinstance(answer, BrokerRegistrationReply) and answer.error_code == 0:
                self.broker_epoch = answer.broker_epoch
                self.sim.note("registered", f"broker {self.node_id} epoch {answer.broker_epoch}")
            elif isinstance(answer, BrokerHeartbeatReply) and answer.error_code == ErrorCode.stale_broker_epoch:
                self.broker_epoch = -1
            elif isinstance(answer, BrokerHeartbeatReply) and answer.error_code == 0 and not answer.is_fenced and not self.serving:
                self.serving = True
                self.sim.note("unfenced", f"broker {self.node_id} opens its listeners")
                for tp, replica in sorted(self.replicas.items()):
                    if replica.is_leader and self.sim.is_current_leader_epoch(tp, replica.leader_epoch):
                        self.sim.invariants.holds_acknowledged(tp, self.node_id, f"leader in epoch {replica.leader_epoch} opening its listeners", replica.log.entry)
                    if replica.is_leader and tp[0] == OFFSETS_TOPIC:
                        self._load_coordinator(tp, replica)
            return
        if self.alter_inflight is not None and self.alter_inflight[0] == correlation_id:
            self._alter_partition_answered(answer)
            return
        if isinstance(answer, list):  # CreateTopics: the simulation asked through this node
            self.sim.topics_created(answer)

    # -- the replica manager: a metadata publisher ----------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        sim = self.sim
        self.image = image
        if delta.topics_delta is None:
            return
        changes = delta.topics_delta.local_changes(self.node_id)
        for tp, info in changes.leaders.items():
            replica = self._replica(tp)
            reg = info.registration
            min_isr = int(image.topic_config(tp[0]).get(MIN_INSYNC_REPLICAS, "1"))
            if replica.make_leader(reg, self.broker_epoch, min_isr, sim.now, self.is_eligible):
                sim.note("leader", f"broker {self.node_id} leads {tp[0]}-{tp[1]} epoch {reg.leader_epoch} isr={list(reg.isr)} leo={replica.log.end_offset} hw={replica.log.high_watermark}")
                sim.invariants.partition_leader(tp, reg.leader_epoch, self.node_id)
                if self.serving and sim.is_current_leader_epoch(tp, reg.leader_epoch):
                    sim.invariants.holds_acknowledged(tp, self.node_id, f"new leader in epoch {reg.leader_epoch}", replica.log.entry)
                if self.serving and tp[0] == OFFSETS_TOPIC:
                    self._load_coordinator(tp, replica)
                self.fetch_inflight.pop(tp, None)
            self._complete_produces(tp)
        for tp, info in changes.followers.items():
            replica = self._replica(tp)
            was_leader = replica.is_leader
            self.coordinators.pop(tp, None)
            if replica.make_follower(info.registration):
                self.fetch_inflight.pop(tp, None)
                if was_leader:
                    self._fail_produces(tp, int(ErrorCode.not_leader_or_follower))
                if info.registration.leader >= 0:
                    self.schedule(sim.now, self.fetch_tick, tp, replica.leader_epoch)

    def _replica(self, tp: TopicPartition) -> SimReplica:
        replica = self.replicas.get(tp)
        if replica is None:
            plog = self.disk.partition_logs.setdefault(tp, SimulatedPartitionLog())
            replica = self.replicas[tp] = SimReplica(tp, self.node_id, plog, self.sim.params.replica_lag_time_max_ms)
        return replica

    def is_eligible(self, broker_id: int) -> bool:
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced and not registration.in_controlled_shutdown

    # -- replication: the follower's fetcher ----------------------------------------------------------

    def fetch_tick(self, tp: TopicPartition, leader_epoch: int) -> None:
        replica = self.replicas.get(tp)
        if replica is None or replica.is_leader or replica.leader_epoch != leader_epoch or replica.leader_id < 0 or tp in self.fetch_inflight:
            return
        self.correlation += 1
        self.fetch_inflight[tp] = self.correlation
        request = replica.fetch_request(self.broker_epoch)
        self.sim.transmit(self.node_id, replica.leader_id, "fetch_request", self.node_id, self.incarnation, self.correlation, request)
        self.schedule(self.sim.now + self.sim.params.request_timeout_ms, self._fetch_timeout, tp, self.correlation, leader_epoch)

    def _fetch_timeout(self, tp: TopicPartition, correlation_id: int, leader_epoch: int) -> None:
        if self.fetch_inflight.get(tp) == correlation_id:
            del self.fetch_inflight[tp]
            self.fetch_tick(tp, leader_epoch)

    def fetch_request(self, source: int, source_incarnation: int, correlation_id: int, request: FetchRequest) -> None:
        sim = self.sim
        if not self.serving:
            return  # connection refused: the fetcher's timeout notices
        replica = self.replicas.get(request.tp)
        if replica is None:
            response = FetchResponse(int(ErrorCode.not_leader_or_follower))
        else:
            response, intent = replica.read_for_follower(request, sim.params.fetch_max_records, sim.now, self.is_eligible)
            if intent is not None:
                self._submit_alter_partition(request.tp, intent)
            self._complete_produces(request.tp)
        sim.transmit_to(self.node_id, source, source_incarnation, "fetch_response", correlation_id, request, response)

    def fetch_response(self, correlation_id: int, request: FetchRequest, response: FetchResponse) -> None:
        sim = self.sim
        tp = request.tp
        if self.fetch_inflight.get(tp) != correlation_id:
            return
        del self.fetch_inflight[tp]
        replica = self.replicas.get(tp)
        if replica is None or replica.is_leader or replica.leader_epoch != request.current_leader_epoch or replica.log.end_offset != request.fetch_offset:
            return
        delay = sim.params.fetch_backoff_ms
        if response.error_code == ErrorCode.offset_out_of_range:
            replica.restart_out_of_range(response.high_watermark)
            delay = 0
        elif response.error_code != 0:
            pass
        elif response.diverging is not None:
            offset = replica.truncate_on_divergence(response.diverging)
            sim.stats.truncations += 1
            sim.note("truncate", f"broker {self.node_id} {tp[0]}-{tp[1]} to {offset} (diverging {response.diverging.end_offset}@{response.diverging.epoch})")
            delay = 0
        else:
            sim.invariants.follower_append(tp, self.node_id, replica.leader_id, request.fetch_offset, replica.log.prefix[request.fetch_offset], response.prefix_digest)
            replica.append_as_follower(response.records, response.high_watermark)
            if response.records:
                delay = 0
        self.schedule(sim.now + delay, self.fetch_tick, tp, replica.leader_epoch)

    # -- replication: the leader's ISR changes ---------------------------------------------------------

    def isr_tick(self) -> None:
        sim = self.sim
        self.schedule(sim.now + sim.params.isr_check_ms, self.isr_tick)
        for tp, replica in sorted(self.replicas.items()):
            intent = replica.maybe_shrink_isr(sim.now)
            if intent is not None:
                self._submit_alter_partition(tp, intent)

    def _submit_alter_partition(self, tp: TopicPartition, intent: AlterPartitionIntent) -> None:
        self.alter_waiting[tp] = intent
        self.sim.note("alter-partition", f"broker {self.node_id} asks {tp[0]}-{tp[1]} isr={list(intent.isr)} at partition epoch {intent.partition_epoch}")
        self._send_alter_partition()

    def _send_alter_partition(self) -> None:
        """AlterPartitionManager._run: what waits goes out in one request, one request at a time; a
        request that gets no answer goes again after a backoff, unchanged."""
        if self.alter_inflight is not None or not self.alter_waiting:
            return
        batch = dict(self.alter_waiting)
        by_topic: dict[Any, list[PartitionIsrChange]] = {}
        for (topic_name, index), intent in sorted(batch.items()):
            topic = self.image.topics.get(topic_name)
            if topic is None:
                continue
            members = tuple(IsrMember(b, e) for b, e in intent.new_isr)
            by_topic.setdefault(topic.topic_id, []).append(PartitionIsrChange(index, intent.leader_epoch, members, intent.leader_recovery_state, intent.partition_epoch))
        topics = [AlterPartitionTopic(topic_id, tuple(changes)) for topic_id, changes in by_topic.items()]
        correlation = self.to_controller("alter_partition", (self.node_id, self.broker_epoch, topics))
        self.alter_inflight = (correlation if correlation is not None else -1, batch)
        self.schedule(self.sim.now + (self.sim.params.request_timeout_ms if correlation is not None else ALTER_PARTITION_RETRY_MS), self._alter_partition_timeout, self.alter_inflight[0])

    def _alter_partition_timeout(self, correlation_id: int) -> None:
        if self.alter_inflight is not None and self.alter_inflight[0] == correlation_id:
            self.alter_inflight = None
            self.schedule(self.sim.now + ALTER_PARTITION_RETRY_MS, self._send_alter_partition)

    def _alter_partition_answered(self, answer: Any) -> None:
        """AlterPartitionManager._handle: each partition of the batch gets its answer."""
        assert self.alter_inflight is not None
        batch = self.alter_inflight[1]
        self.alter_inflight = None
        if isinstance(answer, NotController):
            self.schedule(self.sim.now + ALTER_PARTITION_RETRY_MS, self._send_alter_partition)
            return  # the channel's ControllerUnavailableError: the same batch again, to the next active controller
        assert isinstance(answer, AlterPartitionReply)
        if answer.error_code != 0:
            self.sim.note("alter-partition", f"broker {self.node_id} refused as a whole: {answer.error_code}")
            self.schedule(self.sim.now + ALTER_PARTITION_RETRY_MS, self._send_alter_partition)
            return
        answered = {(t.topic_id, p.partition_index): p for t in answer.topics for p in t.partitions}
        for tp, intent in batch.items():
            topic = self.image.topics.get(tp[0])
            result = answered.get((topic.topic_id, tp[1])) if topic is not None else None
            if result is None:
                continue
            if self.alter_waiting.get(tp) == intent:
                del self.alter_waiting[tp]
            replica = self.replicas.get(tp)
            if replica is None:
                continue
            if result.error_code != 0:
                self.sim.note("alter-partition", f"broker {self.node_id} {tp[0]}-{tp[1]} isr={list(intent.isr)} refused: {result.error_code}")
                replica.alter_partition_failed(result.error_code)
                continue
            self.sim.note("alter-partition", f"broker {self.node_id} {tp[0]}-{tp[1]} isr={list(result.isr)} at partition epoch {result.partition_epoch}")
            replica.alter_partition_succeeded(result.isr, result.leader_epoch, result.partition_epoch, self.sim.now, self.is_eligible)
            self._complete_produces(tp)
        self._send_alter_partition()

    # -- produce -----------------------------------------------------------------------------------

    def produce_request(self, source: int, source_incarnation: int, correlation_id: int, request: ProduceRequest) -> None:
        sim = self.sim
        tp = request.tp
        if not self.serving:
            return

        def reply(response: ProduceResponse) -> None:
            sim.transmit_to(self.node_id, source, source_incarnation, "produce_response", correlation_id, request, response)

        replica = self.replicas.get(tp)
        if replica is None:
            reply(ProduceResponse(int(ErrorCode.not_leader_or_follower)))
            return
        error, base, last = replica.append_as_leader(list(request.values), request.acks_all, sim.now, self.is_eligible)
        if error or not request.acks_all:
            reply(ProduceResponse(error, base))
            return
        pending = PendingProduce(last + 1, base, reply)
        self.produces.setdefault(tp, []).append(pending)
        self.schedule(sim.now + sim.params.produce_timeout_ms, self._produce_timeout, tp, pending)
        self._complete_produces(tp)

    def _complete_produces(self, tp: TopicPartition) -> None:
        waiting = self.produces.get(tp)
        replica = self.replicas.get(tp)
        if not waiting or replica is None:
            return
        still = []
        for pending in waiting:
            code = replica.replicated_through(pending.required_offset)
            if code is None:
                still.append(pending)
            else:
                pending.reply(ProduceResponse(code, pending.base_offset))
        self.produces[tp] = still

    def _produce_timeout(self, tp: TopicPartition, pending: PendingProduce) -> None:
        waiting = self.produces.get(tp, [])
        if pending in waiting:
            waiting.remove(pending)
            pending.reply(ProduceResponse(int(ErrorCode.request_timed_out), pending.base_offset))

    def _fail_produces(self, tp: TopicPartition, code: int) -> None:
        for pending in self.produces.pop(tp, []):
            pending.reply(ProduceResponse(code, pending.base_offset))

    # -- the group coordinator -----------------------------------------------------------------------

    def _load_coordinator(self, tp: TopicPartition, replica: SimReplica) -> None:
        """A new leadership of a __consumer_offsets partition: the shard is rebuilt from its log, as Kafka's coordinator loads."""
        shard = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=4096, offsets_retention_ms=7 * 24 * 3600 * 1000)
        for key, value in replica.log.values:
            shard.replay(key, value)
        self.coordinators[tp] = shard
        self.sim.stats.coordinator_loads += 1
        self.sim.invariants.coordinator_loaded(tp, self.node_id, replica.log.values, lambda group, committed: _committed_offset(shard, group, committed))

    def offset_commit_request(self, source: int, source_incarnation: int, correlation_id: int, request: OffsetCommitRequest) -> None:
        """OffsetCommit from a simple consumer (generation -1): the shard's records, appended as the
        leader's with acks=all, replayed into the shard and answered once the high watermark passes them."""
        sim = self.sim
        if not self.serving:
            return

        def reply(response: OffsetCommitResponse) -> None:
            sim.transmit_to(self.node_id, source, source_incarnation, "offset_commit_response", correlation_id, request, response)

        tp = request.tp
        shard = self.coordinators.get(tp)
        replica = self.replicas.get(tp)
        if shard is None or replica is None or not replica.is_leader:
            reply(OffsetCommitResponse(NOT_COORDINATOR))
            return
        commit = PartitionCommit(request.committed[0], request.committed[1], request.offset, -1, None)
        answers, records = shard.offsets.commit(request.group, -1, "", None, -1, [commit], OFFSET_COMMIT_VERSION, sim.now)
        if any(code for _, code in answers) or not records:
            reply(OffsetCommitResponse(next(code for _, code in answers if code)))
            return
        error, base, last = replica.append_as_leader(list(records), True, sim.now, self.is_eligible)
        if error:
            reply(OffsetCommitResponse(error))
            return

        def written(response: ProduceResponse) -> None:
            if response.error_code == 0 and self.coordinators.get(tp) is shard:
                for key, value in records:
                    shard.replay(key, value)
            reply(OffsetCommitResponse(response.error_code, base, tuple(records)))

        pending = PendingProduce(last + 1, base, written)
        self.produces.setdefault(tp, []).append(pending)
        self.schedule(sim.now + sim.params.produce_timeout_ms, self._produce_timeout, tp, pending)
        self._complete_produces(tp)

    # -- the disk --------------------------------------------------------------------------------

    def flush_tick(self) -> None:
        sim = self.sim
        self.schedule(sim.now + sim.rng.randint(*sim.params.flush_gap_ms), self.flush_tick)
        for plog in self.disk.partition_logs.values():
            plog.flush()


def _committed_offset(shard: GroupCoordinatorShard, group: str, committed: TopicPartition) -> int | None:
    [(_, _, offset)] = shard.offsets.fetch(group, [committed])
    return None if offset is None else offset.offset
