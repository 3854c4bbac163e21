"""Deterministic simulation of a whole kbroker cluster: Raft, the quorum controller, metadata,
replication and ISR, producers, on one virtual clock.

Apache Kafka simulates its Raft layer alone this way (RaftEventSimulationTest), and
tests/unit/raft_simulation.py does the same for raft/. Here every node of a KRaft cluster runs
in one process: a KafkaRaftClient over a MemoryLog per node, the quorum controller's decisions
(QuorumControllerLogic and the control managers) committing records through Raft, every node's
MetadataLoader applying them to its MetadataImage through MetadataDelta, and from the image
each broker leads or follows its partitions (PartitionLeaderState, the follower fetch state,
storage's leader epoch cache). Producers append with acks=all or acks=1; in half the seeds
idempotent producers (tests/simulation/sim_idempotent_producer.py) append too, retrying and
bumping their epochs as the clients do, against storage's own producer state; in half the seeds
transactional producers (tests/simulation/sim_transactional_producer.py) run transactions
through the broker's own transaction coordinator, which runs on an asyncio loop the simulation
steps on its clock (tests/simulation/virtual_loop.py, tests/simulation/sim_transactions.py).

One event queue ordered by (virtual ms, sequence); one random.Random seeded by the seed makes
every choice (scenario, sizes, timings, faults), so a seed replays exactly. After every event
the invariants of tests/simulation/invariants.py are checked; a violation raises
SimulationFailure with the seed, the scenario, the invariant, the last events and the command
that replays the seed alone.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import random
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import structlog

from broker.controller.controller_logic import CreatableTopic
from broker.metadata.metadata_image import MetadataImage, TopicImage
from raft.raft_config import RaftConfig
from raft.voter_set import Endpoint, VoterNode, VoterSet
from tests.simulation.invariants import Invariants
from tests.simulation.sim_broker import ProduceRequest, ProduceResponse, SimNode
from tests.simulation.sim_coordinator import OFFSETS_TOPIC, OffsetCommitRequest, OffsetCommitResponse
from tests.simulation.sim_idempotent_producer import IdempotentProducer
from tests.simulation.sim_transactional_producer import TransactionalProducer
from tests.simulation.sim_transactions import TXN_TOPIC
from tests.simulation.simulated_disk import ControlMarker, ProducedRecord, SimulatedPartitionLog
from tests.simulation.simulated_network import NetworkFaults, SimulatedNetwork
from tests.simulation.virtual_loop import VirtualTimeLoop

CLUSTER_ID = "cluster-simulation"
REPLAY_COMMAND = "CLUSTER_SIM_SEED={seed} .venv/bin/python -m pytest tests/simulation -k replay"
TOPIC = "events"
TOPICS = (TOPIC, OFFSETS_TOPIC)
GROUPS = ("g0", "g1", "g2")
MIN_INSYNC = 2
REPLICATION_FACTOR = 3
DEFAULT_WINDOW_MS = 1500
LIVENESS_BOUND_MS = 20_000
TRACE_LENGTH = 60
PRODUCER = -1  # the producer's address on the network: outside the cluster, never cut
FIRST_PRODUCER_ID = 1000
FIRST_TRANSACTIONAL_PRODUCER_ID = 5000

# A partition with a leader in the committed image: (partition, leader, leader epoch, the rest of
# its ISR in order, each with its disk's partition logs: a node keeps its disk across restarts).
CommittedLeader = tuple[tuple[str, int], SimNode, int, tuple[tuple[SimNode, dict[tuple[str, int], SimulatedPartitionLog]], ...]]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    lossy: bool = False  # message loss, duplication and delay (so reordering)
    isolate: bool = False  # a leader (of the metadata quorum or of a partition) cut off, then back
    split: bool = False  # a minority cut from the majority
    kill: bool = False  # crashes that keep unflushed writes (a killed process), then restarts
    power: bool = False  # crashes that lose unflushed writes (a lost machine), then restarts
    pause: bool = False  # a process stops for a while (a long GC, a stopped VM)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("steady"),
    Scenario("lossy", lossy=True),
    Scenario("isolate", isolate=True),
    Scenario("split", split=True),
    Scenario("kill", kill=True),
    Scenario("power", power=True),
    Scenario("pause", pause=True),
    Scenario("chaos", lossy=True, isolate=True, split=True, kill=True, power=True, pause=True),
)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


def scenario_for(seed: int) -> Scenario:
    """The seed alone picks the scenario, so a seed is all a replay needs."""
    return SCENARIOS[seed % len(SCENARIOS)]


@dataclass(slots=True)
class Params:
    nodes: int
    voters: int
    partitions: int
    offsets_partitions: int
    raft: RaftConfig
    network: NetworkFaults
    session_timeout_ms: int
    heartbeat_interval_ms: int
    request_timeout_ms: int
    replica_lag_time_max_ms: int
    isr_check_ms: int
    fetch_backoff_ms: int
    fetch_max_records: int
    produce_timeout_ms: int
    produce_gap_ms: tuple[int, int]
    acks_all_share: float
    flush_gap_ms: tuple[int, int]
    fault_gap_ms: tuple[int, int]
    window_ms: int
    # Every node's SnapshotGenerator writes a metadata snapshot this often (0: never), and Raft
    # trims its log behind it, so a node that lags or restarts may load its image from one.
    snapshot_interval_ms: int = 0
    idempotent_producers: int = 0
    delivery_timeout_ms: int = 0
    # An administrator's DeleteRecords (up to the high watermark) this often, while the faults last (0: never).
    delete_records_gap_ms: tuple[int, int] = (0, 0)
    transactional_producers: int = 0
    txn_state_partitions: int = 1
    txn_timeout_ms: int = 0  # the producers' transaction.timeout.ms (and the coordinator's maximum)
    txn_check_ms: int = 200  # how often each coordinator aborts timed-out transactions

    @classmethod
    def draw(cls, rng: random.Random, scenario: Scenario, window_ms: int) -> "Params":
        nodes = rng.choice((3, 3, 4))
        # A tenth of Kafka's timeouts, or about: several elections and fencings fit a fault window of a few virtual seconds.
        raft = RaftConfig(
            election_timeout_ms=200,
            fetch_timeout_ms=400,
            election_backoff_max_ms=100,
            request_timeout_ms=300,
            retry_backoff_ms=20,
            append_linger_ms=rng.choice((0, 5)),
            fetch_max_wait_ms=100,
        )
        network = NetworkFaults(
            loss=rng.choice((0.02, 0.05, 0.1)) if scenario.lossy else 0.0,
            duplicate=rng.choice((0.01, 0.05)) if scenario.lossy else 0.0,
            delay=rng.choice((0.05, 0.2)) if scenario.lossy else 0.0,
            max_delay_ms=rng.choice((30, 150, 400)),
            latency_ms=(1, rng.choice((2, 5))),
        )
        return cls(
            nodes=nodes,
            voters=3,
            partitions=rng.randint(1, 3),
            offsets_partitions=rng.randint(1, 2),
            raft=raft,
            network=network,
            session_timeout_ms=rng.choice((600, 900)),
            heartbeat_interval_ms=100,
            request_timeout_ms=300,
            replica_lag_time_max_ms=rng.choice((300, 500)),
            isr_check_ms=100,
            fetch_backoff_ms=rng.choice((25, 50)),
            fetch_max_records=rng.choice((3, 20)),
            produce_timeout_ms=600,
            produce_gap_ms=(20, rng.choice((60, 150))),
            acks_all_share=0.8,
            flush_gap_ms=(20, rng.choice((100, 400))),
            fault_gap_ms=(150, 600),
            window_ms=window_ms,
        )


class SimulationFailure(AssertionError):
    def __init__(self, seed: int, scenario: str, invariant: str, message: str, trace: Sequence[str], window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.seed = seed
        self.scenario = scenario
        self.invariant = invariant
        self.message = message
        self.trace = list(trace)
        replay = REPLAY_COMMAND.format(seed=seed)
        if window_ms != DEFAULT_WINDOW_MS:
            replay = f"CLUSTER_SIM_WINDOW_MS={window_ms} {replay}"
        self.replay = replay
        super().__init__(
            f"seed {seed} (scenario {scenario}) broke the invariant '{invariant}': {message}\nreplay: {replay}\nlast events:\n  " + "\n  ".join(self.trace)
        )


@dataclass(slots=True)
class Stats:
    events: int = 0
    messages: int = 0
    metadata_records: int = 0
    raft_elections: int = 0
    partition_elections: int = 0
    acked_all: int = 0
    acked_one: int = 0
    offset_commits: int = 0
    coordinator_loads: int = 0
    truncations: int = 0
    crashes: int = 0
    lossy_crashes: int = 0
    isolations: int = 0
    pauses: int = 0
    controlled_shutdowns: int = 0
    controlled_shutdowns_approved: int = 0
    snapshots_written: int = 0
    snapshots_loaded: int = 0
    idempotent_acked: int = 0
    idempotent_retries: int = 0
    idempotent_epoch_bumps: int = 0
    idempotent_failed: int = 0
    duplicates_answered: int = 0  # retries the leaders answered with where the batch already was
    records_deleted: int = 0  # DeleteRecords answered
    out_of_range_restarts: int = 0  # followers found below their leader's log start, started over there
    txn_committed: int = 0  # EndTxn(commit) answered OK
    txn_aborted: int = 0  # EndTxn(abort) answered OK
    txn_unknown: int = 0  # transactions whose producer was fenced before it learnt their outcome
    txn_records_acked: int = 0
    txn_request_retries: int = 0  # coordinator requests answered with a retriable error
    txn_markers: int = 0  # markers appended by partition leaders
    txn_coordinator_loads: int = 0
    virtual_ms: int = 0


class Simulation:
    def __init__(self, seed: int, *, window_ms: int = DEFAULT_WINDOW_MS, trace_length: int = TRACE_LENGTH) -> None:
        self.seed = seed
        self.scenario = scenario_for(seed)
        self.rng = random.Random(seed)
        self.params = Params.draw(self.rng, self.scenario, window_ms)
        # Drawn apart from the seed's main stream, so seeds without snapshots run as they did before them.
        self.params.snapshot_interval_ms = random.Random(f"snapshots {seed}").choice((0, 0, 150, 600))
        # Also apart: the seeds without idempotent producers (half) run as they did before them.
        idempotence = random.Random(f"idempotence {seed}")
        if idempotence.random() < 0.5:
            self.params.idempotent_producers = idempotence.randint(1, 2)
            self.params.delivery_timeout_ms = idempotence.choice((1000, 2000, 4000))
        deletes = random.Random(f"delete records {seed}")
        if deletes.random() < 0.5:
            self.params.delete_records_gap_ms = (100, deletes.choice((300, 1000)))
        transactions = random.Random(f"transactions {seed}")
        if transactions.random() < 0.5:
            self.params.transactional_producers = transactions.randint(1, 2)
            self.params.txn_state_partitions = transactions.randint(1, 2)
            self.params.txn_timeout_ms = transactions.choice((1500, 3000))
        self.txn_rng = random.Random(f"marker backoff {seed}")
        self.topics = TOPICS + ((TXN_TOPIC,) if self.params.transactional_producers else ())
        self.cluster_id = CLUSTER_ID
        self.now = 0
        self.stats = Stats()
        self.invariants = Invariants(self._invariant_failed)
        self.network = SimulatedNetwork(self.rng, self.params.network)
        self.touched: set[int] = set()
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._trace: deque[tuple[int, str, tuple[Any, ...]]] = deque(maxlen=trace_length)
        p = self.params
        self.nodes = {i: SimNode(self, i, i < p.voters) for i in range(p.nodes)}
        self.by_address = {n.address: i for i, n in self.nodes.items()}
        self.voter_set = VoterSet(VoterNode(i, None, (Endpoint("CONTROLLER", *self.nodes[i].address),)) for i in range(p.voters))
        self.topic_ready = False
        self._next_value = 0
        self._held: dict[int, list[tuple[int, Callable[..., None], tuple[Any, ...]]]] = {}  # node -> what waits for its pause to end
        self._correlation = 0
        self._produces: dict[int, tuple[ProduceRequest, int]] = {}  # correlation id -> (request, the node asked)
        self._commits: dict[str, int] = {}  # group -> the correlation id of its one OffsetCommit in flight
        self.producers = [
            IdempotentProducer(self, FIRST_PRODUCER_ID + i, p.produce_timeout_ms + 200, p.delivery_timeout_ms, p.raft.retry_backoff_ms)
            for i in range(p.idempotent_producers)
        ]
        self._idempotent_requests: dict[int, Any] = {}  # correlation id -> the idempotent or transactional producer
        self.loop: VirtualTimeLoop  # opened by run(), closed when it ends
        self.txn_producers = [
            TransactionalProducer(self, TOPIC, f"txn-{i}", p.txn_timeout_ms, p.produce_timeout_ms + 200, p.txn_timeout_ms // 2, p.raft.retry_backoff_ms)
            for i in range(p.transactional_producers)
        ]
        self._txn_requests: dict[int, TransactionalProducer] = {}
        self._next_producer_id = FIRST_TRANSACTIONAL_PRODUCER_ID
        self._committed_next = {group: 0 for group in GROUPS}  # the position each group's consumer commits next
        self._faults_on = True
        self._healed_acked: set[tuple[str, int]] = set()  # partitions with an acks=all record acknowledged after the heal
        self._producing = True  # producers stop once the healed cluster acknowledged an acks=all record on every partition
        self._done = False
        self._deadline = p.window_ms * 3 + LIVENESS_BOUND_MS
        self._failure: SimulationFailure | None = None
        self._leaders_image: MetadataImage | None = None  # the committed image _leaders was derived from
        self._leaders: list[CommittedLeader] = []

    # -- the event loop ----------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, action, args))

    def run(self) -> Stats:
        with quiet_logging():
            return self._run()

    def _run(self) -> Stats:
        p = self.params
        self.loop = VirtualTimeLoop(lambda: self.now)
        for node in self.nodes.values():
            self.at(self.rng.randrange(0, 50), self._start, node.node_id)
        self.at(100, self._create_topic_event)
        self.at(self.rng.randint(*p.produce_gap_ms), self._produce_event)
        self.at(self.rng.randint(*p.produce_gap_ms), self._commit_event)
        if self.producers:
            self.at(self.rng.randint(*p.produce_gap_ms), self._idempotent_produce_event)
        for producer in self.txn_producers:
            self.at(self.txn_rng.randint(200, 600), producer.start)
        if p.delete_records_gap_ms[1]:
            self.at(self.rng.randint(*p.delete_records_gap_ms), self._delete_records_event)
        self.at(self.rng.randint(*p.fault_gap_ms), self._fault_event)
        # The faults last window_ms from the topic's creation; this backstop heals a cluster whose faults kept it from creating one.
        self.at(p.window_ms * 3, self._heal_event)
        loop = self.loop
        try:
            while self._queue and not self._done:
                timer = loop.next_timer_ms()
                if timer is not None and timer < self._queue[0][0]:
                    # The coordinators' asyncio timers (backoffs, request timeouts) are events too.
                    time_ms, action, args = timer, _no_action, ()
                    if timer <= self.now and not loop.has_work():
                        self.fail_plain(f"the virtual loop's timer due at {timer} ms does not run at {self.now} ms")
                else:
                    time_ms, _, action, args = heapq.heappop(self._queue)
                if time_ms > self._deadline:
                    self.fail("liveness", f"{LIVENESS_BOUND_MS} ms after the faults stopped the cluster has not settled: {self._unsettled()}")
                self.now = max(self.now, time_ms)
                self.stats.events += 1
                action(*args)
                loop.run_ready()
                if loop.errors:
                    self.fail("no exception escapes a core", "the transaction coordinator's event loop: " + "; ".join(loop.errors))
                if self._failure is not None:
                    raise self._failure  # raised inside a core that catches what its callbacks raise (the loader's publishers)
                self._check_step()
            if not self._done:
                self.fail("liveness", f"the event queue ran dry: {self._unsettled()}")
            self._check_end()
        except SimulationFailure:
            raise
        except Exception as e:
            self.fail("no exception escapes a core", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        finally:
            loop.close()
        self.stats.messages = self.network.messages
        self.stats.virtual_ms = self.now
        self.stats.metadata_records = len(self.invariants.metadata)
        return self.stats

    def node_event(self, node_id: int, incarnation: int, action: Callable[..., None], args: tuple[Any, ...]) -> None:
        """A timer or delivery of one node: dropped if the node restarted since, held while it is paused."""
        node = self.nodes[node_id]
        if not node.running or node.incarnation != incarnation:
            return
        if node.paused_until > self.now:
            held = self._held.setdefault(node_id, [])
            if not held:
                self.at(node.paused_until, self._resume, node_id)
            held.append((incarnation, action, args))
            return
        self.touched.add(node_id)
        action(*args)

    def _resume(self, node_id: int) -> None:
        """A paused node's held timers and deliveries, in the order they came, once it runs again
        (also when the healing cut its pause short: a resumed process reads its sockets at once)."""
        node = self.nodes[node_id]
        if node.paused_until > self.now:
            self.at(node.paused_until, self._resume, node_id)
            return
        for incarnation, action, args in self._held.pop(node_id, []):
            self.node_event(node_id, incarnation, action, args)

    # -- the network ---------------------------------------------------------------------------------

    def transmit(self, source: int, target: int, method: str, *args: Any) -> None:
        """A request to whatever incarnation of ``target`` is running when it arrives."""
        for delay in self.network.delays(source, target):
            self.at(self.now + delay, self._arrive, source, target, None, method, args)

    def transmit_to(self, source: int, target: int, incarnation: int, method: str, *args: Any) -> None:
        """A response: only the incarnation that asked may get it (a restart closed the connection)."""
        if target == PRODUCER:
            for delay in self.network.delays(source, target):
                self.at(self.now + delay, getattr(self, method), *args)
            return
        for delay in self.network.delays(source, target):
            self.at(self.now + delay, self._arrive, source, target, incarnation, method, args)

    def _arrive(self, source: int, target: int, incarnation: int | None, method: str, args: tuple[Any, ...]) -> None:
        if self.network.is_cut(source, target):
            return
        node = self.nodes[target]
        if not node.running or (incarnation is not None and node.incarnation != incarnation):
            return
        self.node_event(target, node.incarnation, getattr(node, method), args)

    # -- tracing and failing -------------------------------------------------------------------------

    def note(self, kind: str, *details: Any) -> None:
        self._trace.append((self.now, kind, details))

    def trace(self) -> list[str]:
        lines = [f"{t:>7} {kind} " + " ".join(str(d) for d in details) for t, kind, details in self._trace]
        lines.append(f"-- at {self.now} ms; nodes: " + " | ".join(n.summary() for n in self.nodes.values()))
        return lines

    def fail(self, invariant: str, message: str) -> None:
        if self._failure is None:
            self._failure = SimulationFailure(self.seed, self.scenario.name, invariant, message, self.trace(), self.params.window_ms)
        raise self._failure

    def fail_plain(self, message: str) -> None:
        self.fail("the cores keep their contracts", message)

    def _invariant_failed(self, invariant: str, detail: str) -> None:
        self.fail(invariant, detail)

    # -- nodes -----------------------------------------------------------------------------------------

    def _start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.running:
            node.start()

    def restart(self, node_id: int) -> None:
        """A node that stopped cleanly comes back, faults or not (so the healed cluster has it)."""
        self._start(node_id)

    def running(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.running]

    def _latest_image_node(self) -> SimNode | None:
        """The running node whose published image is the most recent: the cluster's metadata as a client would learn it."""
        best: SimNode | None = None
        for node in self.nodes.values():
            if node.running and (best is None or node.image.provenance > best.image.provenance):
                best = node
        return best

    def events_topic(self) -> TopicImage | None:
        """The producers' topic as a client learns it from metadata; None before it exists."""
        latest = self._latest_image_node()
        return latest.image.topics.get(TOPIC) if latest is not None else None

    def partition_leader(self, tp: tuple[str, int]) -> int:
        """The partition's leader as a client learns it from metadata; -1 when none is known."""
        latest = self._latest_image_node()
        topic = latest.image.topics.get(tp[0]) if latest is not None else None
        reg = topic.partitions.get(tp[1]) if topic is not None else None
        return reg.leader if reg is not None else -1

    def is_current_leader_epoch(self, tp: tuple[str, int], leader_epoch: int) -> bool:
        """No newer leader epoch of the partition is known committed: a leader of an older one is a zombie
        nobody follows (its followers fence it by epoch), so it can acknowledge nothing and lose nothing."""
        topic = self.invariants.committed.topics.get(tp[0])
        reg = topic.partitions.get(tp[1]) if topic is not None else None
        return reg is None or reg.leader_epoch <= leader_epoch

    # -- the administrator: one topic, RF 3, min.insync.replicas 2 -------------------------------------

    def _create_topic_event(self) -> None:
        if self.topic_ready:
            return
        self.at(self.now + 200, self._create_topic_event)
        latest = self._latest_image_node()
        if latest is None:
            return
        if all(name in latest.image.topics for name in self.topics):
            self.topic_ready = True
            self.at(self.now + self.params.window_ms, self._heal_event)
            return
        unfenced = [b for b in latest.image.brokers.values() if not b.fenced]
        if len(unfenced) < REPLICATION_FACTOR:
            return
        configs: dict[str, str | None] = {"min.insync.replicas": str(MIN_INSYNC)}
        counts = {TOPIC: self.params.partitions, OFFSETS_TOPIC: self.params.offsets_partitions, TXN_TOPIC: self.params.txn_state_partitions}
        topics = [CreatableTopic(name, counts[name], REPLICATION_FACTOR, None, configs) for name in self.topics if name not in latest.image.topics]
        if latest.to_controller("create_topics", topics) is not None:
            self.note("create-topic", f"asked through node {latest.node_id}")

    def topics_created(self, results: list[Any]) -> None:
        self.note("create-topic", ", ".join(f"{r.name}: error {r.error_code}" for r in results))

    # -- producers -------------------------------------------------------------------------------------

    def _produce_event(self) -> None:
        if not self._producing:
            return
        self.at(self.now + self.rng.randint(*self.params.produce_gap_ms), self._produce_event)
        topic = self.events_topic()
        if topic is None:
            return
        partition = self.rng.randrange(len(topic.partitions))
        leader = topic.partitions[partition].leader
        if leader < 0:
            return
        values = self.new_values()
        acks_all = self.rng.random() < self.params.acks_all_share or not self._faults_on
        request = ProduceRequest((TOPIC, partition), values, acks_all)
        self._correlation += 1
        self._produces[self._correlation] = (request, leader)
        self.transmit(PRODUCER, leader, "produce_request", PRODUCER, 0, self._correlation, request)

    @property
    def producing(self) -> bool:
        return self._producing

    def latest_image(self) -> MetadataImage | None:
        latest = self._latest_image_node()
        return latest.image if latest is not None else None

    def send_txn_request(self, producer: TransactionalProducer, coordinator: int, correlation_id: int, request: Any) -> None:
        self._txn_requests[correlation_id] = producer
        self.transmit(PRODUCER, coordinator, "txn_request", PRODUCER, 0, correlation_id, request)

    def txn_response(self, correlation_id: int, response: Any) -> None:
        producer = self._txn_requests.pop(correlation_id, None)
        if producer is not None:
            producer.on_txn_response(correlation_id, response)

    async def generate_producer_id(self) -> int:
        """The transaction coordinators' producer ids: one counter (brokers get blocks of them from the controller)."""
        self._next_producer_id += 1
        return self._next_producer_id

    def _idempotent_produce_event(self) -> None:
        if not self._producing:
            return
        self.at(self.now + self.rng.randint(*self.params.produce_gap_ms), self._idempotent_produce_event)
        topic = self.events_topic()
        if topic is None:
            return
        producer = self.rng.choice(self.producers)
        values = self.new_values()
        producer.send((TOPIC, self.rng.randrange(len(topic.partitions))), values)

    def new_values(self) -> tuple[int, ...]:
        """One to three values never produced before: every value is unique in a run."""
        count = self.rng.randint(1, 3)
        values = tuple(range(self._next_value, self._next_value + count))
        self._next_value += count
        return values

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send_idempotent(self, producer: IdempotentProducer, leader: int, correlation_id: int, request: ProduceRequest) -> None:
        self._idempotent_requests[correlation_id] = producer
        self.transmit(PRODUCER, leader, "produce_request", PRODUCER, 0, correlation_id, request)

    def idempotent_acknowledged(self, tp: tuple[str, int]) -> None:
        if not self._faults_on:
            self._healed_acked.add(tp)

    def produce_response(self, correlation_id: int, request: ProduceRequest, response: ProduceResponse) -> None:
        producer = self._idempotent_requests.pop(correlation_id, None)
        if producer is not None:
            producer.on_response(correlation_id, request, response)
            return
        if self._produces.pop(correlation_id, None) is None:
            return  # a duplicate answer
        if response.error_code != 0:
            return
        self.note("acked", f"{request.tp[0]}-{request.tp[1]} [{response.base_offset}..{response.base_offset + len(request.values) - 1}]", "acks=all" if request.acks_all else "acks=1")
        if not request.acks_all:
            self.stats.acked_one += len(request.values)
            return
        self.stats.acked_all += len(request.values)
        self.invariants.acknowledged(request.tp, response.base_offset, list(request.values))
        if not self._faults_on:
            self._healed_acked.add(request.tp)

    # -- the administrator deleting records -------------------------------------------------------------

    def _delete_records_event(self) -> None:
        """DeleteRecords up to the high watermark of one partition: a follower that was away comes
        back below its leader's log start."""
        if not self._faults_on:
            return
        self.at(self.now + self.rng.randint(*self.params.delete_records_gap_ms), self._delete_records_event)
        topic = self.events_topic()
        if topic is None:
            return
        tp = (TOPIC, self.rng.randrange(len(topic.partitions)))
        leader = topic.partitions[tp[1]].leader
        if leader >= 0:
            self.transmit(PRODUCER, leader, "delete_records_request", PRODUCER, 0, self.next_correlation_id(), tp)

    def delete_records_response(self, correlation_id: int, tp: tuple[str, int], error: int, low_watermark: int) -> None:
        if error == 0:
            self.stats.records_deleted += 1
            self.note("deleted", f"{tp[0]}-{tp[1]} below {low_watermark}")

    # -- consumers committing their positions -----------------------------------------------------------

    def _commit_event(self) -> None:
        """A simple consumer of each group commits a growing position, one OffsetCommit in flight at a time."""
        if not self._producing:
            return
        self.at(self.now + self.rng.randint(*self.params.produce_gap_ms), self._commit_event)
        group = self.rng.choice(GROUPS)
        latest = self._latest_image_node()
        topic = latest.image.topics.get(OFFSETS_TOPIC) if latest is not None else None
        if topic is None or group in self._commits:
            return
        tp = (OFFSETS_TOPIC, GROUPS.index(group) % len(topic.partitions))
        leader = topic.partitions[tp[1]].leader
        if leader < 0:
            return
        self._committed_next[group] += self.rng.randint(1, 5)
        request = OffsetCommitRequest(tp, group, (TOPIC, 0), self._committed_next[group])
        self._correlation += 1
        self._commits[group] = self._correlation
        self.transmit(PRODUCER, leader, "offset_commit_request", PRODUCER, 0, self._correlation, request)
        self.at(self.now + 2 * self.params.produce_timeout_ms, self._commit_timeout, group, self._correlation)

    def _commit_timeout(self, group: str, correlation_id: int) -> None:
        if self._commits.get(group) == correlation_id:
            del self._commits[group]

    def offset_commit_response(self, correlation_id: int, request: OffsetCommitRequest, response: OffsetCommitResponse) -> None:
        if self._commits.get(request.group) == correlation_id:
            del self._commits[request.group]
        if response.error_code != 0 or not response.records:
            return
        self.note("committed", f"{request.group} at {request.offset} in {request.tp[0]}-{request.tp[1]}@{response.base_offset}")
        self.stats.offset_commits += 1
        self.invariants.acknowledged(request.tp, response.base_offset, response.records)

    # -- faults --------------------------------------------------------------------------------------

    def _fault_event(self) -> None:
        if not self._faults_on:
            return
        self.at(self.now + self.rng.randint(*self.params.fault_gap_ms), self._fault_event)
        s = self.scenario
        kinds = [
            k
            for k, on in (("lossy", False), ("isolate", s.isolate), ("split", s.split), ("kill", s.kill), ("power", s.power), ("pause", s.pause), ("restart", s.kill))
            if on
        ]
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        ids = list(self.nodes)
        if kind in ("isolate", "split"):
            if self.network.cut:
                return
            self.at(self.now + self.rng.randint(100, 2 * self.params.session_timeout_ms), self._heal_links_event)
            if kind == "isolate":
                victim = self._a_leader()
                # Half the time the producers still reach it: a leader cut from its followers goes on appending.
                self.network.isolate(victim, ids + ([PRODUCER] if self.rng.random() < 0.5 else []))
                self.stats.isolations += 1
                self.note("isolate", f"node {victim}")
            else:
                side = self.rng.sample(ids, 1 if len(ids) <= 3 else self.rng.randint(1, 2))
                self.network.partition(side, ids)
                self.stats.isolations += 1
                self.note("split", f"{sorted(side)} from the rest")
            return
        running = self.running()
        if kind == "pause":
            node = self.rng.choice(running) if running else None
            if node is not None and node.paused_until <= self.now:
                node.paused_until = self.now + self.rng.randint(50, self.params.session_timeout_ms * 2)
                self.stats.pauses += 1
                self.note("pause", f"node {node.node_id} until {node.paused_until}")
            return
        down = [n for n in self.nodes.values() if not n.running]
        if down:
            self._start(self.rng.choice(down).node_id)
            return
        lossy = kind == "power"
        self._heal_recovered()
        # Fewer than min.insync.replicas (2) failed replicas at once whenever a failure lost writes:
        # a machine is lost only while every other node is whole, a process killed only while no
        # node is damaged. (Kills alone lose nothing, however many: every log stays whole.)
        if lossy and any(n.recovering for n in self.nodes.values()):
            return
        if not lossy and any(n.damaged for n in self.nodes.values()):
            return
        victim_id = self._a_leader() if self.rng.random() < 0.5 else self.rng.choice(ids)
        victim = self.nodes[victim_id]
        if kind == "restart":
            # A clean restart: a controlled shutdown, bounded as the server's is, then a start.
            if victim.shutdown_deadline is None and victim.broker_epoch >= 0:
                victim.begin_controlled_shutdown(2 * self.params.session_timeout_ms)
                self.stats.controlled_shutdowns += 1
            return
        victim.crash(lossy)
        self.stats.crashes += 1
        if lossy:
            self.stats.lossy_crashes += 1
        self.at(self.now + self.rng.randint(50, 800), self._start, victim_id)

    def _heal_recovered(self) -> None:
        """A crashed node is whole again once, registered anew (which took it out of every ISR and ELR:
        the controller cannot tell a killed process from a lost machine), it is back in the ISR of
        every partition it hosts: it fetched again whatever it lost."""
        latest = self._latest_image_node()
        if latest is None:
            return
        image = latest.image
        for node in self.nodes.values():
            if not node.recovering or not node.running or node.broker_epoch < 0:
                continue
            registration = image.brokers.get(node.node_id)
            if registration is None or registration.epoch != node.broker_epoch:
                continue
            hosted = [reg for name in self.topics if name in image.topics for reg in image.topics[name].partitions.values() if node.node_id in reg.replicas]
            if all(node.node_id in reg.isr for reg in hosted):
                node.recovering = node.damaged = False
                self.note("whole-again", f"node {node.node_id}")

    def _a_leader(self) -> int:
        """The metadata quorum's leader or a partition's, as the running nodes see them."""
        leaders = [n.node_id for n in self.running() if n.client is not None and n.client.is_leader()]
        latest = self._latest_image_node()
        topic = latest.image.topics.get(TOPIC) if latest is not None else None
        if topic is not None:
            leaders += [p.leader for p in topic.partitions.values() if p.leader >= 0]
        return self.rng.choice(leaders) if leaders else self.rng.choice(list(self.nodes))

    def _heal_links_event(self) -> None:
        if self.network.cut:
            self.network.heal()
            self.note("heal-links")

    def _heal_event(self) -> None:
        if not self._faults_on:
            return
        self._deadline = self.now + LIVENESS_BOUND_MS
        self._faults_on = False
        self.network.faults_on = False
        self.network.heal()
        self.note("heal", "faults stop; every node starts")
        for node in self.nodes.values():
            node.paused_until = min(node.paused_until, self.now)
            if self._held.get(node.node_id):
                self.at(self.now, self._resume, node.node_id)
            if not node.running:
                self._start(node.node_id)
        self.at(self.now + 100, self._settled_event)

    # -- the end: liveness, then the final checks -----------------------------------------------------

    def _unsettled(self) -> str:
        reasons = []
        latest = self._latest_image_node()
        image = latest.image if latest is not None else None
        if not self.topic_ready or image is None or any(name not in image.topics for name in self.topics):
            return "the topics were never created; " + " | ".join(n.summary() for n in self.nodes.values())
        for name in self.topics:
            for index, reg in sorted(image.topics[name].partitions.items()):
                if reg.leader < 0 or sorted(reg.isr) != sorted(reg.replicas):
                    reasons.append(f"{name}-{index} leader={reg.leader} isr={list(reg.isr)} replicas={list(reg.replicas)}")
                elif name == TOPIC and (name, index) not in self._healed_acked:
                    reasons.append(f"{name}-{index}: no acks=all record acknowledged since the heal")
        provenances = {n.image.provenance for n in self.nodes.values()}
        if len(provenances) != 1 or any(not n.running for n in self.nodes.values()):
            reasons.append(f"nodes at metadata offsets {sorted(provenances)}")
        if not reasons and self._producing:
            self._producing = False
            return "the producers stop; the followers catch up"
        reasons += [p.summary() for p in self.producers if p.pending or p.bumping]
        reasons += [p.summary() for p in self.txn_producers if p.busy]
        for node in self.nodes.values():
            if node.txn is not None and node.txn.markers.pending_transactions:
                reasons.append(f"node {node.node_id} writing the markers of {sorted(node.txn.markers.pending_transactions)}")
        if not reasons:
            for name in self.topics:
                for index, reg in sorted(image.topics[name].partitions.items()):
                    logs = {n.node_id: n.replicas.get((name, index)) for n in self.nodes.values() if n.node_id in reg.replicas}
                    ends = {i: (r.log.log_end_offset, r.log.high_watermark) if r is not None else None for i, r in logs.items()}
                    if len({e for e in ends.values()}) != 1:
                        reasons.append(f"{name}-{index} replicas not level: {ends}")
        return "; ".join(reasons)

    def _settled_event(self) -> None:
        if self._unsettled():
            self.at(self.now + 100, self._settled_event)
            return
        self._done = True

    def _committed_leaders(self) -> list[CommittedLeader]:
        """The partitions of the committed image that have a leader. The image is immutable and
        replaced by each committed record, while _check_step reads it after every event: derived
        once per image (held, so that its identity is not reused)."""
        committed = self.invariants.committed
        if committed is not self._leaders_image:
            nodes = self.nodes
            self._leaders = [
                ((name, index), nodes[reg.leader], reg.leader_epoch, tuple((nodes[b], nodes[b].disk.partition_logs) for b in reg.isr if b != reg.leader))
                for name in self.topics
                if (topic := committed.topics.get(name)) is not None
                for index, reg in topic.partitions.items()
                if reg.leader >= 0
            ]
            self._leaders_image = committed
        return self._leaders

    def _check_step(self) -> None:
        """After every event: the high watermark of every leader replica on the nodes the event touched,
        and of the current leaders against the committed ISR."""
        for tp, leader, epoch, followers in self._committed_leaders():
            if not leader.running:
                continue
            replica = leader.replicas.get(tp)
            if replica is None or replica.leader_state is None or replica.leader_epoch != epoch:
                continue
            hw = replica.log.high_watermark
            for follower, logs in followers:
                plog = logs.get(tp)
                if plog is not None and plog.log_end_offset < hw and not follower.damaged:
                    self.invariants.isr_holds_high_watermark(tp, leader.node_id, epoch, hw, {follower.node_id: plog.log_end_offset})
        high_watermark = self.invariants.high_watermark
        for node_id in self.touched:
            node = self.nodes[node_id]
            for tp, replica in node.replicas.items():
                if replica.leader_state is not None:
                    high_watermark(tp, replica.leader_epoch, node_id, node.incarnation, replica.log.high_watermark)
        self.touched.clear()

    def _check_end(self) -> None:
        images = {n.node_id: n.image for n in self.nodes.values()}
        first = images[0]
        for node_id, image in images.items():
            if image != first:
                self.fail("committed metadata identical on every node", f"node {node_id}'s image at offset {image.provenance} differs from node 0's")
        for name in self.topics:
            for index, reg in first.topics[name].partitions.items():
                for node_id in reg.replicas:
                    replica = self.nodes[node_id].replicas[(name, index)]
                    self.invariants.holds_acknowledged((name, index), node_id, "a replica of the healed cluster", replica.log.entry, replica.log.log_start_offset)
        for index, reg in first.topics[TOPIC].partitions.items():
            for node_id in reg.replicas:
                plog = self.nodes[node_id].replicas[(TOPIC, index)].log
                self.invariants.written_once((TOPIC, index), node_id, [v for v in plog.values_from(plog.log_start_offset) if isinstance(v, ProducedRecord)])
        if self.txn_producers:
            for index, reg in first.topics[TOPIC].partitions.items():
                for node_id in reg.replicas:
                    plog = self.nodes[node_id].replicas[(TOPIC, index)].log
                    start = plog.log_start_offset
                    records = list(enumerate(plog.values_from(start), start))
                    self.invariants.read_committed((TOPIC, index), node_id, start, records, lambda v: isinstance(v, ControlMarker))
            self.invariants.transactions_atomic(lambda tp: first.topics[tp[0]].partitions[tp[1]].leader)
        for node in self.nodes.values():
            node.count_snapshots()
            self.stats.duplicates_answered += sum(plog.duplicates_answered for plog in node.disk.partition_logs.values())
        self.stats.raft_elections = len(self.invariants.raft_leaders)
        self.stats.partition_elections = len(self.invariants.partition_leaders)


def _no_action() -> None:
    """The event of an asyncio timer: the loop runs after it."""


@contextlib.contextmanager
def quiet_logging() -> Any:
    """The cores log as they would in a server; thousands of seeds would print (and pay for) millions of lines."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL), cache_logger_on_first_use=False)
    try:
        yield
    finally:
        structlog.configure(**saved)


def run_seed(seed: int, *, window_ms: int = DEFAULT_WINDOW_MS, trace_length: int = TRACE_LENGTH) -> Stats:
    return Simulation(seed, window_ms=window_ms, trace_length=trace_length).run()
