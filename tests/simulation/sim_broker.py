"""One node of the simulated cluster: a KafkaRaftClient over a MemoryLog, the metadata loader,
the quorum controller (on voters), the broker's lifecycle, its replica manager, fetchers and
produce path; its AlterPartition requests (sim_alter_partition.py), group coordinator
(sim_coordinator.py) and transaction coordinator (sim_transactions.py) have modules of their own.

Everything runs on the simulation's virtual clock and event queue; messages go through the
simulated network as Python objects (Raft's are kio entities, the broker's small dataclasses).
A crash drops every field but the disk: the Raft log keeps what it flushed, the quorum-state
store what it wrote, each partition log what the crash kind allows.
"""

from __future__ import annotations

import random
import traceback
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.controller.cluster_control_manager import BrokerHeartbeatReply, BrokerRegistrationReply, BrokerRegistrationRequest
from broker.controller.controller_logic import CreatableTopic
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import BrokerEndpoint, MetadataRecord
from broker.metadata.snapshot_generator import SnapshotGenerator
from broker.partition import Partition, ReplicationSettings
from broker.raft_manager import MetadataRecordSerde
from raft.kafka_raft_client import CommittedBatch, KafkaRaftClient, LeaderChange, LoadSnapshot, Respond, Send
from raft.memory_log import MemoryLog
from raft.quorum_state_store import MemoryQuorumStateStore
from storage.errors import StorageError
from storage.log_config import LogConfig
from tests.simulation.sim_alter_partition import SimAlterPartitionManager
from tests.simulation.sim_controller import NotController, SimController
from tests.simulation.sim_coordinator import OFFSETS_TOPIC, SimGroupCoordinator
from tests.simulation.sim_transactions import TXN_TOPIC, SimTransactionCoordinator
from tests.simulation.sim_replica import (
    FetchRequest,
    FetchResponse,
    ListOffsetsResponse,
    SimPartition,
    TopicPartition,
    append_to_leader,
    delete_records,
    fetch_request,
    list_offsets_for_follower,
    read_for_follower,
)
from tests.simulation.simulated_disk import ControlMarker, ProducedRecord, SimulatedPartitionLog

if TYPE_CHECKING:
    from tests.simulation.cluster_simulation import Simulation

SERDE = MetadataRecordSerde()
OUT_OF_ORDER_SEQUENCE_NUMBER = int(ErrorCode.out_of_order_sequence_number)


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
        self.recovering = False  # crashed and not yet back in every ISR
        self.damaged = False  # crashed losing unflushed writes and not yet back in every ISR
        self._reset()

    def _reset(self) -> None:
        self.client: KafkaRaftClient[MetadataRecord] | None = None
        self.loader: MetadataLoader | None = None
        self.snapshots: SnapshotGenerator | None = None
        self.controller: SimController | None = None
        self.image = MetadataImage()  # what the replica manager was last published
        self.replicas: dict[TopicPartition, SimPartition] = {}
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
        # A clean shutdown under way: heartbeats ask for it until the controller, having moved this
        # broker's leaderships away, says to stop, or until this deadline (the broker stops anyway).
        self.shutdown_deadline: int | None = None
        self.fetch_inflight: dict[TopicPartition, int] = {}
        self.alter_partition = SimAlterPartitionManager(self)
        self.produces: dict[TopicPartition, list[PendingProduce]] = {}
        self.coordinator = SimGroupCoordinator(self)
        self.txn: SimTransactionCoordinator | None = None

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
        interval = sim.params.snapshot_interval_ms
        if interval:
            # No byte threshold: the simulated batches carry no sizes.
            self.snapshots = SnapshotGenerator(client, max_bytes_since_last_snapshot=1 << 62, max_time_since_last_snapshot_ms=interval, now_ms=lambda: sim.now, node_id=self.node_id)
            self.loader.install_publisher(self.snapshots)
        if self.is_voter:
            self.controller = SimController(self.node_id, sim.cluster_id, sim.params.session_timeout_ms, random.Random(sim.rng.getrandbits(64)), lambda: sim.now)
        sim.note("start", f"node {self.node_id} #{self.incarnation}")
        self.poll()
        self.schedule(sim.now + sim.rng.randint(0, 20), self.lifecycle_tick)
        self.schedule(sim.now + sim.params.isr_check_ms, self.isr_tick)
        self.schedule(sim.now + sim.rng.randint(*sim.params.flush_gap_ms), self.flush_tick)
        if sim.params.transactional_producers:
            self.txn = SimTransactionCoordinator(self, sim.params.txn_state_partitions, sim.params.txn_timeout_ms)
            self.schedule(sim.now + sim.params.txn_check_ms, self.txn_tick)

    def crash(self, lose_unflushed: bool) -> None:
        self.sim.note("crash", f"node {self.node_id}", "losing unflushed writes" if lose_unflushed else "keeping unflushed writes", self.summary())
        self._go_down(lose_unflushed)

    def _go_down(self, lose_unflushed: bool) -> None:
        self.running = False
        if self.txn is not None:
            self.txn.shutdown()
        self.incarnation += 1
        self.count_snapshots()
        self.disk.raft_log = self.disk.raft_log.recover()
        for plog in self.disk.partition_logs.values():
            plog.crash(lose_unflushed)
        self.recovering = True
        self.damaged = lose_unflushed
        self._reset()

    def begin_controlled_shutdown(self, timeout_ms: int) -> None:
        self.shutdown_deadline = self.sim.now + timeout_ms
        self.sim.note("controlled-shutdown", f"broker {self.node_id} asks to stop")

    def stop_cleanly(self, why: str) -> None:
        """As Kafka's broker after its controlled shutdown: every log flushed, then the process ends."""
        self.sim.note("stopped", f"broker {self.node_id} {why}", self.summary())
        self.disk.raft_log.flush()
        for plog in self.disk.partition_logs.values():
            plog.flush()
        self._go_down(lose_unflushed=False)
        self.sim.at(self.sim.now + self.sim.rng.randint(50, 800), self.sim.restart, self.node_id)

    def count_snapshots(self) -> None:
        if self.snapshots is not None:
            self.sim.stats.snapshots_written += self.snapshots.snapshots_written
            self.snapshots.snapshots_written = 0

    def schedule(self, time_ms: int, action: Any, *args: Any) -> None:
        self.sim.at(time_ms, self.sim.node_event, self.node_id, self.incarnation, action, args)

    def summary(self) -> str:
        if not self.running or self.client is None:
            return f"{self.node_id}: down"
        leader, epoch = self.client.leader_and_epoch
        parts = [f"{self.node_id}: raft epoch={epoch} leader={leader} hw={self.client.high_watermark} image@{self.image.provenance} epoch={self.broker_epoch}"]
        for tp, r in sorted(self.replicas.items()):
            role = "L" if r.is_leader else "F"
            parts.append(f"{tp[0]}-{tp[1]}:{role}{r.leader_epoch} leo={r.log.log_end_offset} hw={r.log.high_watermark} isr={list(r.isr)}")
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
                image = self.loader.handle_load_snapshot(action.snapshot_id, action.records)
                sim.stats.snapshots_loaded += 1
                sim.note("snapshot-loaded", f"node {self.node_id} {action.snapshot_id.offset}@{action.snapshot_id.epoch}")
                sim.invariants.snapshot_loaded(self.node_id, action.snapshot_id.offset, image)
                if self.snapshots is not None:
                    self.snapshots.handle_load_snapshot(action.snapshot_id, action.records)
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
            broker_id, broker_epoch, metadata_offset, want_shut_down = payload

            def decide(image: MetadataImage) -> tuple[list[MetadataRecord], Any]:
                result = controller.cluster.heartbeat(
                    broker_id, broker_epoch, metadata_offset, False, want_shut_down, now_ms=sim.now, image=image, committed_offset=controller.committed
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
        if self.shutdown_deadline is not None and sim.now >= self.shutdown_deadline:
            self.stop_cleanly("without the controller's word, its controlled shutdown timed out")
            return
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
            heartbeat = (self.node_id, self.broker_epoch, self.loader.image.provenance, self.shutdown_deadline is not None)
            self.lifecycle_inflight = self.to_controller("heartbeat", heartbeat)
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
            elif isinstance(answer, BrokerHeartbeatReply) and answer.error_code == 0 and answer.should_shut_down and self.shutdown_deadline is not None:
                self.sim.stats.controlled_shutdowns_approved += 1
                self.stop_cleanly("once the controller said so")
            elif isinstance(answer, BrokerHeartbeatReply) and answer.error_code == 0 and not answer.is_fenced and not self.serving:
                self.serving = True
                self.sim.note("unfenced", f"broker {self.node_id} opens its listeners")
                for tp, replica in sorted(self.replicas.items()):
                    if replica.is_leader and self.sim.is_current_leader_epoch(tp, replica.leader_epoch):
                        self.sim.invariants.holds_acknowledged(
                            tp, self.node_id, f"leader in epoch {replica.leader_epoch} opening its listeners", replica.log.entry, replica.log.log_start_offset
                        )
                    if replica.is_leader and tp[0] == OFFSETS_TOPIC:
                        self.coordinator.load(tp, replica)
                    if replica.is_leader and tp[0] == TXN_TOPIC and self.txn is not None:
                        self.txn.load(tp[1], replica)
            return
        if self.alter_partition.is_answered_by(correlation_id):
            self.alter_partition.answered(answer)
            return
        if isinstance(answer, list):  # CreateTopics: the simulation asked through this node
            self.sim.topics_created(answer)

    # -- the replica manager: a metadata publisher ----------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        try:
            self._publish(delta, image)
        except Exception as e:
            # The loader would log and swallow it; here it is a failure of the seed.
            self.sim.fail("no exception escapes a core", f"broker {self.node_id}'s replica manager on image {image.provenance}: {type(e).__name__}: {e}\n{traceback.format_exc()}")

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        sim = self.sim
        self.image = image
        if self.txn is not None:
            self.txn.metadata.on_metadata_update(delta, image)
        if delta.topics_delta is None:
            return
        changes = delta.topics_delta.local_changes(self.node_id)
        for tp, info in changes.leaders.items():
            replica = self._replica(tp)
            reg = info.registration
            if replica.make_leader(reg, sim.now):
                sim.note("leader", f"broker {self.node_id} leads {tp[0]}-{tp[1]} epoch {reg.leader_epoch} isr={list(reg.isr)} leo={replica.log.log_end_offset} hw={replica.log.high_watermark}")
                sim.invariants.partition_leader(tp, reg.leader_epoch, self.node_id)
                if self.serving and sim.is_current_leader_epoch(tp, reg.leader_epoch):
                    sim.invariants.holds_acknowledged(tp, self.node_id, f"new leader in epoch {reg.leader_epoch}", replica.log.entry, replica.log.log_start_offset)
                if self.serving and tp[0] == OFFSETS_TOPIC:
                    self.coordinator.load(tp, replica)
                if self.serving and tp[0] == TXN_TOPIC and self.txn is not None:
                    self.txn.load(tp[1], replica)
                self.fetch_inflight.pop(tp, None)
            self.complete_produces(tp)
        for tp, info in changes.followers.items():
            replica = self._replica(tp)
            was_leader = replica.is_leader
            self.coordinator.unload(tp)
            if tp[0] == TXN_TOPIC and self.txn is not None:
                self.txn.resign(tp[1])
            if replica.make_follower(info.registration):
                self.fetch_inflight.pop(tp, None)
                if was_leader:
                    self._fail_produces(tp, int(ErrorCode.not_leader_or_follower))
                if info.registration.leader >= 0:
                    self.schedule(sim.now, self.fetch_tick, tp, replica.leader_epoch)

    def _replica(self, tp: TopicPartition) -> SimPartition:
        """ReplicaManager's: the partition over its log, opened with the topic's config as the image has it."""
        replica = self.replicas.get(tp)
        if replica is None:
            sim = self.sim
            config = LogConfig.from_properties(self.image.topic_config(tp[0]))
            plog = self.disk.partition_logs.get(tp)
            if plog is None:
                plog = self.disk.partition_logs[tp] = SimulatedPartitionLog(f"{tp[0]}-{tp[1]}", config)
            plog.config = config
            settings = ReplicationSettings(self.node_id, sim.params.replica_lag_time_max_ms, lambda: self.broker_epoch, self.is_eligible)
            topic = self.image.topics[tp[0]]
            replica = self.replicas[tp] = Partition(tp[0], tp[1], topic.topic_id, plog, settings, clock=lambda: sim.now)
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
        request = fetch_request(replica, self.node_id, self.broker_epoch)
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
            response, intent = read_for_follower(replica, request, sim.params.fetch_max_records, sim.now)
            if intent is not None:
                self.alter_partition.submit(replica, intent)
            self.complete_produces(request.tp)
        sim.transmit_to(self.node_id, source, source_incarnation, "fetch_response", correlation_id, request, response)

    def fetch_response(self, correlation_id: int, request: FetchRequest, response: FetchResponse) -> None:
        sim = self.sim
        tp = request.tp
        if self.fetch_inflight.get(tp) != correlation_id:
            return
        del self.fetch_inflight[tp]
        replica = self.replicas.get(tp)
        if replica is None or replica.is_leader or replica.leader_epoch != request.current_leader_epoch or replica.log.log_end_offset != request.fetch_offset:
            return
        if response.error_code == ErrorCode.offset_out_of_range:
            self._list_leader_offsets(replica)
            return
        try:
            delay = self._process_fetched(replica, request, response)
        except (StorageError, ValueError) as e:
            # As ReplicaFetcher: the partition's failure backs off that partition alone, and it fetches again.
            sim.note("fetch-failed", f"broker {self.node_id} {tp[0]}-{tp[1]}: {type(e).__name__}: {e}")
            delay = sim.params.fetch_backoff_ms
        self.schedule(sim.now + delay, self.fetch_tick, tp, replica.leader_epoch)

    def _process_fetched(self, replica: SimPartition, request: FetchRequest, response: FetchResponse) -> int:
        """ReplicaFetcher's handling of one partition's answer; returns the delay before the next fetch."""
        sim = self.sim
        tp = request.tp
        if response.error_code != 0:
            return sim.params.fetch_backoff_ms
        if response.diverging is not None:
            offset = replica.truncate_on_divergence(response.diverging)
            sim.stats.truncations += 1
            sim.note("truncate", f"broker {self.node_id} {tp[0]}-{tp[1]} to {offset} (diverging {response.diverging.end_offset}@{response.diverging.epoch})")
            return 0
        local = replica.log.digest(response.digest_from, request.fetch_offset)
        sim.invariants.follower_append(tp, self.node_id, replica.leader_id, request.fetch_offset, response.digest_from, local, response.digest)
        replica.append_records_as_follower(response.records, response.high_watermark, response.log_start_offset)
        return 0 if response.records else sim.params.fetch_backoff_ms

    def _list_leader_offsets(self, replica: SimPartition) -> None:
        """As ReplicaFetcher: an OFFSET_OUT_OF_RANGE answer carries no offsets; ListOffsets asks them."""
        tp = replica.key
        self.correlation += 1
        self.fetch_inflight[tp] = self.correlation
        self.sim.transmit(self.node_id, replica.leader_id, "list_offsets_request", self.node_id, self.incarnation, self.correlation, tp, replica.leader_epoch)
        self.schedule(self.sim.now + self.sim.params.request_timeout_ms, self._fetch_timeout, tp, self.correlation, replica.leader_epoch)

    def list_offsets_request(self, source: int, source_incarnation: int, correlation_id: int, tp: TopicPartition, leader_epoch: int) -> None:
        if not self.serving:
            return
        replica = self.replicas.get(tp)
        response = ListOffsetsResponse(int(ErrorCode.not_leader_or_follower)) if replica is None else list_offsets_for_follower(replica, leader_epoch)
        self.sim.transmit_to(self.node_id, source, source_incarnation, "list_offsets_response", correlation_id, tp, leader_epoch, response)

    def list_offsets_response(self, correlation_id: int, tp: TopicPartition, leader_epoch: int, response: ListOffsetsResponse) -> None:
        sim = self.sim
        if self.fetch_inflight.get(tp) != correlation_id:
            return
        del self.fetch_inflight[tp]
        replica = self.replicas.get(tp)
        if replica is None or replica.is_leader or replica.leader_epoch != leader_epoch:
            return
        if response.error_code:
            self.schedule(sim.now + sim.params.fetch_backoff_ms, self.fetch_tick, tp, leader_epoch)
            return
        offset = replica.restart_out_of_range(response.log_start_offset, response.end_offset)
        sim.stats.out_of_range_restarts += 1
        sim.note("out-of-range", f"broker {self.node_id} {tp[0]}-{tp[1]} restarts at {offset} (leader's log start {response.log_start_offset}, end {response.end_offset})")
        self.schedule(sim.now, self.fetch_tick, tp, leader_epoch)

    def delete_records_request(self, source: int, source_incarnation: int, correlation_id: int, tp: TopicPartition) -> None:
        if not self.serving:
            return
        replica = self.replicas.get(tp)
        error, low = (int(ErrorCode.not_leader_or_follower), -1) if replica is None else delete_records(replica)
        self.sim.transmit_to(self.node_id, source, source_incarnation, "delete_records_response", correlation_id, tp, error, low)

    # -- replication: the leader's ISR changes ---------------------------------------------------------

    def isr_tick(self) -> None:
        sim = self.sim
        self.schedule(sim.now + sim.params.isr_check_ms, self.isr_tick)
        for tp, replica in sorted(self.replicas.items()):
            intent = replica.maybe_shrink_isr(sim.now)
            if intent is not None:
                self.alter_partition.submit(replica, intent)

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
        error, base, last = append_to_leader(replica, request.values, request.acks_all)
        if error == OUT_OF_ORDER_SEQUENCE_NUMBER:
            held = [v for v in replica.log.values_from(replica.log.log_start_offset) if isinstance(v, (ProducedRecord, ControlMarker))]
            sim.invariants.refused(tp, self.node_id, request.values, held)
        if error or not request.acks_all:
            reply(ProduceResponse(error, base))
            return
        self.await_replication(tp, last + 1, base, reply)

    def await_replication(self, tp: TopicPartition, required_offset: int, base_offset: int, reply: Any) -> None:
        """A DelayedProduce: answered once the high watermark reaches ``required_offset``, or on a timeout or leadership lost."""
        pending = PendingProduce(required_offset, base_offset, reply)
        self.produces.setdefault(tp, []).append(pending)
        self.schedule(self.sim.now + self.sim.params.produce_timeout_ms, self._produce_timeout, tp, pending)
        self.complete_produces(tp)

    def complete_produces(self, tp: TopicPartition) -> None:
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

    def offset_commit_request(self, source: int, source_incarnation: int, correlation_id: int, request: Any) -> None:
        if not self.serving:
            return

        def reply(response: Any) -> None:
            self.sim.transmit_to(self.node_id, source, source_incarnation, "offset_commit_response", correlation_id, request, response)

        self.coordinator.offset_commit(request, reply)

    # -- transactions -------------------------------------------------------------------------------

    def txn_request(self, source: int, source_incarnation: int, correlation_id: int, request: Any) -> None:
        """A producer's InitProducerId, AddPartitionsToTxn or EndTxn."""
        if not self.serving or self.txn is None:
            return

        def reply(response: Any) -> None:
            self.sim.transmit_to(self.node_id, source, source_incarnation, "txn_response", correlation_id, response)

        self.txn.handle(request, reply)

    def write_txn_markers_request(self, source: int, source_incarnation: int, correlation_id: int, request: Any) -> None:
        if not self.serving or self.txn is None:
            return

        def reply(response: Any) -> None:
            self.sim.transmit_to(self.node_id, source, source_incarnation, "write_txn_markers_response", correlation_id, response)

        self.txn.write_txn_markers(request, reply)

    def write_txn_markers_response(self, correlation_id: int, response: Any) -> None:
        if self.txn is not None:
            self.txn.sender.answered(correlation_id, response)

    def txn_tick(self) -> None:
        """The coordinator's periodic job: abort transactions past their timeout, ask again for missing markers."""
        self.schedule(self.sim.now + self.sim.params.txn_check_ms, self.txn_tick)
        if self.txn is not None and self.serving:
            self.txn.abort_timed_out_transactions()

    # -- the disk --------------------------------------------------------------------------------

    def flush_tick(self) -> None:
        sim = self.sim
        self.schedule(sim.now + sim.rng.randint(*sim.params.flush_gap_ms), self.flush_tick)
        for plog in self.disk.partition_logs.values():
            plog.flush()

