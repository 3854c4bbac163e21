"""Deterministic simulation of the Raft core: whole quorums of KafkaRaftClients on one virtual clock.

Kafka checks its Raft implementation by running quorums in one thread against a simulated
clock and network (RaftEventSimulationTest); this is the same idea for
raft/kafka_raft_client.py. One event queue ordered by (virtual ms, sequence) holds polls at
the times the clients ask for, message deliveries, appends, snapshots and faults; one seeded
random.Random makes every choice, so a seed replays exactly. No threads, no asyncio, no sleep.

The network carries the kio entities the clients exchange. A share of them goes through the
wire format and back (requests through the server's own ``decode_request``, which hands a
Fetch over as protocol.fetch_request.FetchRequest), so serialization is exercised too. Faults
are seeded: loss, delay (hence reordering), duplication, requests from another cluster, cut
links (the leader isolated, a 2-against-3 split), crashes and graceful shutdowns (the log
keeps what was flushed, the quorum-state store what was written), a wiped disk (a new empty
log and store, as a re-formatted node), and with kraft.version 1 an administrator's
AddRaftVoter and RemoveRaftVoter; half of those quorums start static (kraft.version 0) and are
upgraded first (kafka-features upgrade --feature kraft.version=1, KafkaRaftClient.upgrade_kraft_version).

After every event the invariants are checked; at the end, the committed data of every node
and the liveness of the healed quorum. A violation raises SimulationFailure, which names the
seed, the scenario, the invariant and the last events, with the command that replays it.
"""

from __future__ import annotations

import bisect
import datetime
import heapq
import io
import random
import struct
import traceback
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Callable, Sequence

from kio.schema.add_raft_voter.v0.request import AddRaftVoterRequest
from kio.schema.add_raft_voter.v0.request import Listener as AddListener
from kio.schema.errors import ErrorCode
from kio.schema.remove_raft_voter.v0.request import RemoveRaftVoterRequest
from kio.serial import entity_reader, entity_writer

from protocol.api_keys import ApiKey, response_schema
from protocol.messages import decode_request
from protocol.records import iter_batches, iter_records
from raft.control_records import ControlRecordType, KRaftVersion
from raft.kafka_raft_client import CommittedBatch, KafkaRaftClient, LeaderChange, LoadSnapshot, NotLeaderError, Respond, Send
from raft.kraft_version_upgrade import InvalidUpdateVersionError
from raft.memory_log import MemoryLog
from raft.quorum_state import LeaderState
from raft.quorum_state_store import MemoryQuorumStateStore
from raft.raft_config import RaftConfig
from raft.replicated_log import OffsetAndEpoch, ValidationKind
from raft.voter_history import write_bootstrap_checkpoint
from raft.voter_set import Endpoint, VoterNode, VoterSet

CLUSTER_ID = "raft-simulation"
WRONG_CLUSTER_ID = "another-cluster"
LISTENER = "CONTROLLER"
REPLAY_COMMAND = "RAFT_SIM_SEED={seed} .venv/bin/python -m pytest tests/unit/test_raft_simulation.py -k replay"
DEFAULT_WINDOW_MS = 1500
CONTROL = -1  # the committed history's mark for an offset that holds a control record
ADMIN = -1  # the source of AddRaftVoter and RemoveRaftVoter: an administrator outside the quorum
VOTER_CHANGE_APIS = frozenset({ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER})
LIVENESS_BOUND_MS = 30_000
TRACE_LENGTH = 80
_INT = struct.Struct(">i")


class IntSerde:
    """Records are distinct non-negative ints: each value is appended once, so it may commit once."""

    def encode(self, record: int) -> bytes:
        return _INT.pack(record)

    def decode(self, value: bytes | memoryview) -> int:
        return int(_INT.unpack(value)[0])


SERDE = IntSerde()


# -- scenarios -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    loss: bool = False  # random loss, duplication and delay (reordering) of messages
    isolate_leader: bool = False
    split: bool = False  # 5 voters, 2 against 3
    crash: bool = False
    wipe: bool = False
    snapshot_heavy: bool = False  # frequent snapshots, a node kept behind, small fetch sizes
    reconfig: bool = False  # kraft.version 1 (from the start, or by an upgrade) with AddRaftVoter and RemoveRaftVoter from an administrator


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("steady"),
    Scenario("lossy", loss=True),
    Scenario("leader_isolation", isolate_leader=True),
    Scenario("split", split=True),
    Scenario("crash", crash=True),
    Scenario("wipe", wipe=True, loss=True, crash=True),
    Scenario("snapshot", snapshot_heavy=True, crash=True),
    Scenario("chaos", loss=True, isolate_leader=True, crash=True, snapshot_heavy=True),
    Scenario("reconfig", reconfig=True, loss=True, crash=True),
)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


def scenario_for(seed: int) -> Scenario:
    """The seed alone picks the scenario, so a seed is all a replay needs."""
    return SCENARIOS[seed % len(SCENARIOS)]


@dataclass(slots=True)
class Params:
    """Everything drawn from the seed before the run starts."""

    voters: int
    observers: int
    dynamic: bool  # kraft.version 1: voters from a bootstrap checkpoint; observers find them through bootstrap servers
    config: RaftConfig
    serialize_share: float
    latency_ms: tuple[int, int]
    loss: float
    duplicate: float
    delay: float
    max_delay_ms: int
    report_lost: float  # how often a lost request is reported as failed (the shell's timeout) rather than never
    foreign: float  # how often a request arrives with another cluster's id (it must be refused with INCONSISTENT_CLUSTER_ID)
    fault_window_ms: int
    fault_gap_ms: tuple[int, int]
    append_gap_ms: tuple[int, int]
    snapshot_gap_ms: tuple[int, int]

    @classmethod
    def draw(cls, rng: random.Random, scenario: Scenario, window_ms: int) -> "Params":
        voters = 5 if scenario.split else rng.randint(3, 5) if scenario.wipe else rng.randint(1, 3) if scenario.reconfig else rng.randint(1, 5)
        small_fetch = scenario.snapshot_heavy and rng.random() < 0.7
        # Timeouts a quarter of Kafka's defaults: several elections fit a fault window of a few virtual seconds.
        config = RaftConfig(
            election_timeout_ms=250,
            fetch_timeout_ms=500,
            election_backoff_max_ms=rng.choice((50, 250)),
            request_timeout_ms=rng.choice((300, 500)),
            retry_backoff_ms=rng.choice((20, 50)),
            append_linger_ms=rng.choice((0, 5, 10)),
            fetch_max_wait_ms=rng.choice((150, 250)),
            max_batch_size_bytes=rng.choice((200, 1024)) if small_fetch else 8 * 1024 * 1024,
            max_fetch_size_bytes=rng.choice((150, 400, 1000)) if small_fetch else 8 * 1024 * 1024,
        )
        return cls(
            voters=voters,
            observers=rng.randint(1, 2) if scenario.reconfig else rng.randint(0, 2),
            dynamic=rng.random() < 0.5 if scenario.reconfig else rng.random() < 0.25,
            config=config,
            serialize_share=0.1,
            latency_ms=(1, rng.choice((2, 5, 10))),
            loss=rng.choice((0.02, 0.05, 0.15)) if scenario.loss else 0.0,
            duplicate=rng.choice((0.01, 0.05)) if scenario.loss else 0.0,
            delay=rng.choice((0.05, 0.2)) if scenario.loss else 0.0,
            max_delay_ms=rng.choice((30, 150, 600)),
            report_lost=rng.choice((0.0, 0.5, 1.0)),
            foreign=0.01 if scenario.loss else 0.0,
            fault_window_ms=window_ms,
            fault_gap_ms=(100, 600),
            append_gap_ms=(20, rng.choice((150, 300, 600))),
            snapshot_gap_ms=(50, 300) if scenario.snapshot_heavy else (300, 1500),
        )


class SimulationFailure(AssertionError):
    def __init__(self, seed: int, scenario: str, message: str, trace: Sequence[str], window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.seed = seed
        self.scenario = scenario
        self.message = message
        self.trace = list(trace)
        replay = REPLAY_COMMAND.format(seed=seed)
        if window_ms != DEFAULT_WINDOW_MS:
            replay = f"RAFT_SIM_WINDOW_MS={window_ms} {replay}"
        super().__init__(f"seed {seed} (scenario {scenario}): {message}\nreplay: {replay}\nlast events:\n  " + "\n  ".join(self.trace))


# -- wire format -----------------------------------------------------------------------------------------


@cache
def _writer(schema: type) -> Callable[[Any, Any], None]:
    return entity_writer(schema)


@cache
def _response_reader(api_key: int, version: int) -> Callable[[Any, int], Any]:
    return entity_reader(response_schema(api_key, version))


def _encode(body: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(body))(out, body)
    return out.getvalue()


def wire_request(body: Any) -> Any:
    """The request as the receiving server decodes it: Fetch arrives as protocol.fetch_request.FetchRequest."""
    return decode_request(int(type(body).__api_key__), int(type(body).__version__), bytearray(_encode(body)), 0)


def wire_response(body: Any) -> Any:
    decoded, _ = _response_reader(int(type(body).__api_key__), int(type(body).__version__))(memoryview(_encode(body)).toreadonly(), 0)
    return decoded


def describe(body: Any) -> str:
    """A short account of a message for the trace."""
    if body is None:
        return "FAILED"
    name = type(body).__name__
    parts: list[str] = []
    error = getattr(body, "error_code", None)
    if error is not None and int(error) != 0:
        parts.append(f"error={int(error)}")
    topics = getattr(body, "topics", None) or getattr(body, "responses", None) or ()
    for topic in topics[:1]:
        for partition in (getattr(topic, "partitions", None) or ())[:1]:
            for attr in (
                "replica_id", "replica_epoch", "pre_vote", "vote_granted", "leader_id", "leader_epoch", "last_offset_epoch", "last_offset",
                "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "high_watermark", "position", "size",
            ):
                value = getattr(partition, attr, None)
                if value is not None:
                    parts.append(f"{attr}={int(value) if not isinstance(value, bool) else value}")
            code = getattr(partition, "error_code", None)
            if code is not None and int(code) != 0:
                parts.append(f"p_error={int(code)}")
            leader = getattr(partition, "current_leader", None)
            if leader is not None:
                parts.append(f"leader={leader.leader_id}@{leader.leader_epoch}")
            diverging = getattr(partition, "diverging_epoch", None)
            if diverging is not None and diverging.epoch >= 0:
                parts.append(f"diverging={diverging.end_offset}@{diverging.epoch}")
            snapshot_id = getattr(partition, "snapshot_id", None)
            if snapshot_id is not None and getattr(snapshot_id, "end_offset", -1) >= 0:
                parts.append(f"snapshot={snapshot_id.end_offset}@{snapshot_id.epoch}")
            records = getattr(partition, "records", None) or getattr(partition, "unaligned_records", None)
            if records:
                parts.append(f"bytes={len(records)}")
    return f"{name}({', '.join(parts)})"


# -- the cluster -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Disk:
    """What survives a crash: the log (as MemoryLog.recover leaves it) and the quorum-state store."""

    log: MemoryLog
    store: MemoryQuorumStateStore
    directory_id: uuid.UUID


@dataclass(slots=True)
class Listener:
    """The state machine above the client: how far it has applied the committed log, and whether it leads."""

    next_offset: int = 0
    last_epoch: int = 0
    claimed_epoch: int | None = None
    last_leader_epoch: int = -1


@dataclass(slots=True)
class Pending:
    """A request handed to a node and not yet answered."""

    source: int
    source_incarnation: int
    correlation_id: int
    api_key: int
    request: Any
    sent_ms: int
    timeout_ms: int
    received_ms: int


@dataclass(slots=True)
class Node:
    node_id: int
    address: tuple[str, int]
    disk: Disk
    client: KafkaRaftClient[int] | None = None
    incarnation: int = 0
    listener: Listener = field(default_factory=Listener)
    poll_at: int | None = None
    polls_at_now: int = 0
    pending: dict[int, Pending] = field(default_factory=dict)
    last_hw: int | None = None
    max_store_epoch: int = 0
    wiped: bool = False  # wiped and waiting for the quorum to recover before it restarts


@dataclass(slots=True)
class Stats:
    events: int = 0
    messages: int = 0
    serialized: int = 0
    elections: int = 0
    committed_offsets: int = 0
    snapshots_created: int = 0
    snapshots_loaded: int = 0  # LoadSnapshot of a non-empty snapshot, at start-up or after FetchSnapshot
    snapshot_fetches: int = 0  # FetchSnapshot requests sent
    crashes: int = 0
    wipes: int = 0
    voter_changes: int = 0  # AddRaftVoter and RemoveRaftVoter that succeeded
    kraft_upgrades: int = 0  # upgrades of a static quorum to kraft.version 1 the leader wrote
    virtual_ms: int = 0


class Simulation:
    def __init__(self, seed: int, *, window_ms: int = DEFAULT_WINDOW_MS, trace_length: int = TRACE_LENGTH) -> None:
        self.seed = seed
        self.scenario = scenario_for(seed)
        self.rng = random.Random(seed)
        self.params = Params.draw(self.rng, self.scenario, window_ms)
        self.now = 0
        self.stats = Stats()
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._handles = 0
        self._trace: deque[tuple[int, str, tuple[Any, ...]]] = deque(maxlen=trace_length)
        self._cut: set[tuple[int, int]] = set()
        self._faults_on = True
        self._next_value = 0
        self._appended: dict[int, tuple[int, int, int]] = {}  # value -> (node, epoch, offset append gave it)
        # The committed history, one entry per offset ever committed by any node: the value (or CONTROL) and its batch epoch.
        self._history: list[int] = []
        self._history_epochs: list[int] = []
        self._data_values: list[int] = []
        self._data_before: list[int] = [0]  # _data_before[o]: how many data records lie below offset o
        self._committed_at: dict[int, int] = {}  # value -> offset
        self._leader_of_epoch: dict[int, int] = {}
        self._committed_voters: dict[int, VoterSet] = {}  # offset of each committed VotersRecord -> the set it names
        self._touched: set[int] = set()  # nodes the current event acted on
        self._leaders: set[int] = set()
        self._wiped_ever = False
        self._wipe_epoch = 0  # the highest epoch any node had stored when a disk was wiped
        self._first_healed_value: int | None = None  # values from here on were appended after the faults stopped
        self._healed_commit: int | None = None  # the offset of the first of them to commit
        self._done = False
        p = self.params
        self.voter_ids = list(range(p.voters))
        self.nodes: dict[int, Node] = {}
        for node_id in range(p.voters + p.observers):
            self.nodes[node_id] = Node(node_id, (f"node{node_id}", 9000 + node_id), self._new_disk())
        self._by_address = {node.address: node.node_id for node in self.nodes.values()}
        # Static voters support kraft.version 0 only until they report otherwise to the leader (UpdateRaftVoter).
        self.voter_set = VoterSet(
            VoterNode(i, None if not p.dynamic else self.nodes[i].disk.directory_id, (Endpoint(LISTENER, *self.nodes[i].address),), 0, 1 if p.dynamic else 0)
            for i in self.voter_ids
        )
        # A static quorum of the reconfig scenario is upgraded to kraft.version 1, then its voters change.
        self._voters_may_change = p.dynamic or self.scenario.reconfig
        if p.dynamic:
            for i in self.voter_ids:
                write_bootstrap_checkpoint(self.nodes[i].disk.log, self.voter_set, 0)

    def _new_disk(self) -> Disk:
        return Disk(MemoryLog(), MemoryQuorumStateStore(), uuid.UUID(int=self.rng.getrandbits(128)))

    # -- the event loop ----------------------------------------------------------------------------------

    def _at(self, time_ms: int, action: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, action, args))

    def run(self) -> Stats:
        p = self.params
        for node in self.nodes.values():
            self._at(self.rng.randrange(0, 50), self._start, node.node_id)
        self._at(self.rng.randint(*p.append_gap_ms), self._append_event)
        self._at(self.rng.randint(*p.snapshot_gap_ms), self._snapshot_event)
        self._at(self.rng.randint(*p.fault_gap_ms), self._fault_event)
        if self.scenario.snapshot_heavy:
            self._at(self.rng.randint(100, 500), self._hold_back_event)
        if self.scenario.reconfig:
            self._at(self.rng.randint(300, 800), self._reconfig_event)
        if self.scenario.wipe:
            self._at(self.rng.randint(300, max(p.fault_window_ms - 300, 301)), self._wipe_one)
        self._at(p.fault_window_ms, self._heal_event)
        deadline = p.fault_window_ms + LIVENESS_BOUND_MS
        try:
            while self._queue and not self._done:
                time_ms, _, action, args = heapq.heappop(self._queue)
                if time_ms > deadline:
                    self._fail(f"liveness: {LIVENESS_BOUND_MS} ms after the faults stopped, {self._liveness_state()}")
                self.now = max(self.now, time_ms)
                self.stats.events += 1
                action(*args)
                self._check_invariants()
            if not self._done:
                self._fail(f"liveness: the event queue ran dry, {self._liveness_state()}")
            self._validate_end()
        except SimulationFailure:
            raise
        except Exception as e:
            self._fail(f"{type(e).__name__} escaped: {e}\n{traceback.format_exc()}")
        self.stats.virtual_ms = self.now
        return self.stats

    def _note(self, kind: str, *details: Any) -> None:
        self._trace.append((self.now, kind, details))

    def trace(self) -> list[str]:
        """The last events, oldest first, and where every node stands now."""
        lines = [f"{time_ms:>7} {kind} " + " ".join(describe(d) if _is_entity(d) else str(d) for d in details) for time_ms, kind, details in self._trace]
        lines.append(f"-- at {self.now} ms; nodes: " + "; ".join(self._node_summary(n) for n in self.nodes.values()))
        return lines

    def _fail(self, message: str) -> None:
        raise SimulationFailure(self.seed, self.scenario.name, message, self.trace(), self.params.fault_window_ms)

    def _node_summary(self, node: Node) -> str:
        if node.client is None:
            return f"{node.node_id}: down"
        client = node.client
        state = type(client.quorum_state.state).__name__.replace("State", "")
        log = node.disk.log
        return f"{node.node_id}: {state} epoch={client.quorum_state.epoch} leader={client.leader_and_epoch[0]} hw={client.high_watermark} log=[{log.start_offset()},{log.end_offset()}) applied={node.listener.next_offset}"

    # -- nodes ---------------------------------------------------------------------------------------

    def is_voter(self, node_id: int) -> bool:
        return node_id in self.voter_ids

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.client is not None]

    def _start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.client is not None or node.wiped:
            return  # running, or its disk was wiped and it waits for _restart_wiped
        p = self.params
        node.incarnation += 1
        node.listener = Listener()
        node.pending.clear()
        node.last_hw = None
        node.poll_at = None
        voters = None if p.dynamic else self.voter_set
        bootstrap = [self.nodes[i].address for i in self.voter_ids] if p.dynamic else []
        self._note("start", f"node {node_id} #{node.incarnation}")
        node.client = KafkaRaftClient(
            node_id=node_id,
            directory_id=node.disk.directory_id,
            cluster_id=CLUSTER_ID,
            config=p.config,
            log=node.disk.log,
            store=node.disk.store,
            serde=SERDE,
            voters=voters,
            bootstrap_servers=bootstrap,
            now_ms=self.now,
            rng=random.Random(self.rng.getrandbits(64)),
        )
        self._poll(node)

    def _crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.client is None:
            return
        self.stats.crashes += 1
        self._note("crash", f"node {node_id}", self._node_summary(node))
        self._touched.add(node_id)
        node.client = None
        node.incarnation += 1
        node.poll_at = None
        node.disk.log = node.disk.log.recover()
        # The connections of requests it held close: their senders hear of it at once.
        for pending in node.pending.values():
            if pending.source == ADMIN:
                continue
            self._at(self.now + 1, self._deliver_response, pending.source, pending.source_incarnation, pending.correlation_id, None, node_id)
        node.pending.clear()

    def _wipe(self, node_id: int) -> None:
        """A new empty log and store with a new directory id, as a re-formatted node (no bootstrap checkpoint)."""
        node = self.nodes[node_id]
        self._crash(node_id)
        self.stats.wipes += 1
        self._wiped_ever = True
        node.disk = self._new_disk()
        node.max_store_epoch = 0
        node.last_hw = None
        node.wiped = True
        self._note("wipe", f"node {node_id}")

    # -- polling -------------------------------------------------------------------------------------

    def _poll_event(self, node_id: int, incarnation: int, time_ms: int) -> None:
        node = self.nodes[node_id]
        if node.client is None or node.incarnation != incarnation or node.poll_at != time_ms:
            return
        node.poll_at = None
        self._poll(node)

    def _poll(self, node: Node) -> None:
        client = node.client
        assert client is not None
        self._touched.add(node.node_id)
        actions = client.poll(self.now)
        for action in actions:
            if isinstance(action, Send):
                self._on_send(node, action)
            elif isinstance(action, Respond):
                self._on_respond(node, action)
            elif isinstance(action, CommittedBatch):
                self._on_committed(node, action)
            elif isinstance(action, LoadSnapshot):
                self._on_load_snapshot(node, action)
            elif isinstance(action, LeaderChange):
                self._on_leader_change(node, action)
            else:
                self._fail(f"node {node.node_id} returned an unknown action {action!r}")
        deadline = client.next_deadline_ms()
        if deadline <= self.now:
            node.polls_at_now += 1
            if node.polls_at_now > 500:
                self._fail(f"node {node.node_id} asks to be polled again at once, 500 times at {self.now} ms, without letting time pass")
            deadline = self.now if actions else self.now + 1
        else:
            node.polls_at_now = 0
        if node.poll_at is None or deadline < node.poll_at or node.poll_at < self.now:
            node.poll_at = deadline
            self._at(deadline, self._poll_event, node.node_id, node.incarnation, deadline)

    # -- the network -----------------------------------------------------------------------------------

    def _latency(self) -> int:
        p = self.params
        latency = self.rng.randint(*p.latency_ms)
        if self._faults_on and p.delay and self.rng.random() < p.delay:
            latency += self.rng.randint(1, p.max_delay_ms)
        return latency

    def _lost(self, source: int, target: int) -> bool:
        if (source, target) in self._cut:
            return True
        return self._faults_on and self.params.loss > 0 and self.rng.random() < self.params.loss

    def _maybe_wire(self, body: Any, request: bool) -> Any:
        if self.rng.random() >= self.params.serialize_share:
            return body
        self.stats.serialized += 1
        return wire_request(body) if request else wire_response(body)

    def _on_send(self, node: Node, send: Send) -> None:
        self.stats.messages += 1
        if type(send.body).__name__ == "FetchSnapshotRequest":
            self.stats.snapshot_fetches += 1
        target = self._by_address.get(send.destination)
        if target is None:
            self._fail(f"node {node.node_id} sent to {send.destination}, which is no node's address")
        if send.destination_id >= 0 and send.destination_id != target:
            self._fail(f"node {node.node_id} sent to node {send.destination_id} at {send.destination}, the address of node {target}")
        if not hasattr(type(send.body), "__api_key__"):
            self._fail(f"node {node.node_id} sent {type(send.body).__name__}, not a kio request entity")
        request = send.body
        if self._faults_on and self.params.foreign and self.rng.random() < self.params.foreign:
            request = replace(request, cluster_id=WRONG_CLUSTER_ID)
        body = self._maybe_wire(request, request=True)
        self._note("send", f"{node.node_id}->{target} c{send.correlation_id}", request)
        target_node = self.nodes[target]
        if self._lost(node.node_id, target):
            if self.rng.random() < self.params.report_lost:
                self._at(self.now + send.timeout_ms, self._deliver_response, node.node_id, node.incarnation, send.correlation_id, None, target)
            return
        copies = 2 if self._faults_on and self.params.duplicate and self.rng.random() < self.params.duplicate else 1
        for _ in range(copies):
            self._at(
                self.now + self._latency(), self._deliver_request,
                node.node_id, node.incarnation, target, target_node.incarnation, send.correlation_id, body, self.now, send.timeout_ms,
            )

    def _deliver_request(self, source: int, source_incarnation: int, target: int, target_incarnation: int, correlation_id: int, body: Any, sent_ms: int, timeout_ms: int) -> None:
        node = self.nodes[target]
        if (source, target) in self._cut:
            return  # lost on the way; the sender's timeout notices
        if node.client is None or node.incarnation != target_incarnation:
            # Refused, or the connection reset by a restart: the sender hears of it.
            self._at(self.now + 1, self._deliver_response, source, source_incarnation, correlation_id, None, target)
            return
        self._handles += 1
        handle = self._handles
        api_key = int(type(body).__api_key__) if hasattr(type(body), "__api_key__") else int(ApiKey.FETCH)
        node.pending[handle] = Pending(source, source_incarnation, correlation_id, api_key, body, sent_ms, timeout_ms, self.now)
        self._note("request", f"{source}->{target} c{correlation_id} h{handle}", body)
        node.client.handle_request(handle, body, self.now)
        self._poll(node)
        if api_key != ApiKey.FETCH and api_key not in VOTER_CHANGE_APIS and handle in node.pending:
            self._fail(f"node {node.node_id} did not answer {type(body).__name__} (handle {handle}) at once; only a Fetch may wait")

    def _on_respond(self, node: Node, respond: Respond) -> None:
        pending = node.pending.pop(respond.handle, None)
        if pending is None:
            self._fail(f"node {node.node_id} answered handle {respond.handle}, which it was not given or already answered")
        answer_key = getattr(type(respond.body), "__api_key__", None)
        if answer_key != pending.api_key:
            self._fail(f"node {node.node_id} answered a request of api {pending.api_key} with {type(respond.body).__name__}")
        if getattr(pending.request, "cluster_id", None) == WRONG_CLUSTER_ID:
            if respond.body.error_code != ErrorCode.inconsistent_cluster_id:
                self._fail(f"node {node.node_id} answered {type(respond.body).__name__} from another cluster with {respond.body.error_code!r}")
        elif pending.api_key == ApiKey.VOTE:
            self._check_vote_durable(node, pending.request, respond.body)
        if pending.source == ADMIN:
            self._on_admin_answer(node, pending, respond.body)
            return
        self.stats.messages += 1
        body = self._maybe_wire(respond.body, request=False)
        self._note("respond", f"{node.node_id}->{pending.source} c{pending.correlation_id} h{respond.handle}", respond.body)
        if self._lost(node.node_id, pending.source):
            if self.rng.random() < self.params.report_lost:
                at = max(self.now, pending.sent_ms + pending.timeout_ms)
                self._at(at, self._deliver_response, pending.source, pending.source_incarnation, pending.correlation_id, None, node.node_id)
            return
        copies = 2 if self._faults_on and self.params.duplicate and self.rng.random() < self.params.duplicate else 1
        for _ in range(copies):
            self._at(self.now + self._latency(), self._deliver_response, pending.source, pending.source_incarnation, pending.correlation_id, body, node.node_id)

    def _deliver_response(self, target: int, target_incarnation: int, correlation_id: int, body: Any | None, source: int) -> None:
        node = self.nodes[target]
        if node.client is None or node.incarnation != target_incarnation:
            return
        if body is not None and (source, target) in self._cut:
            return  # lost on the way back; the sender's timeout notices
        self._note("response", f"{source}->{target} c{correlation_id}", body)
        node.client.handle_response(correlation_id, body, self.now)
        self._poll(node)

    def _check_vote_durable(self, node: Node, request: Any, response: Any) -> None:
        """A granted vote is in the store before the answer leaves: a crash right after cannot make the node vote twice."""
        partitions = [p for t in getattr(response, "topics", ()) for p in t.partitions]
        asked = [p for t in getattr(request, "topics", ()) for p in t.partitions]
        if len(partitions) != 1 or len(asked) != 1 or not partitions[0].vote_granted or asked[0].pre_vote:
            return
        epoch, candidate = int(asked[0].replica_epoch), int(asked[0].replica_id)
        stored = node.disk.store.read_election_state()
        if stored is None or stored.epoch < epoch or (stored.epoch == epoch and stored.voted_id != candidate and stored.leader_id != candidate):
            self._fail(f"node {node.node_id} granted its vote to {candidate} in epoch {epoch} but its store holds {stored}")

    # -- the listener ----------------------------------------------------------------------------------

    def _commit(self, node: Node, offset: int, value: int, epoch: int) -> None:
        history = self._history
        if offset < len(history):
            if history[offset] != value or self._history_epochs[offset] != epoch:
                self._fail(
                    f"node {node.node_id} committed {_show(value)} (epoch {epoch}) at offset {offset}, "
                    f"where {_show(history[offset])} (epoch {self._history_epochs[offset]}) was committed before"
                )
            return
        if offset > len(history):
            self._fail(f"node {node.node_id} committed offset {offset} past the committed history's end {len(history)}")
        if history and epoch < self._history_epochs[-1]:
            self._fail(f"node {node.node_id} committed offset {offset} in epoch {epoch}, below the epoch {self._history_epochs[-1]} of the offset before")
        history.append(value)
        self._history_epochs.append(epoch)
        self.stats.committed_offsets += 1
        if value != CONTROL:
            earlier = self._committed_at.get(value)
            if earlier is not None:
                self._fail(f"value {value} committed twice: at offsets {earlier} and {offset}")
            self._committed_at[value] = offset
            if self._healed_commit is None and self._first_healed_value is not None and value >= self._first_healed_value:
                self._healed_commit = offset
            appended = self._appended.get(value)
            if appended is None:
                self._fail(f"value {value} committed at offset {offset} was never appended")
            elif appended[2] != offset:
                self._fail(f"value {value} was appended on node {appended[0]} in epoch {appended[1]} at offset {appended[2]} but committed at {offset}")
            self._data_values.append(value)
            self._data_before.append(self._data_before[-1] + 1)
        else:
            self._data_before.append(self._data_before[-1])

    def _on_committed(self, node: Node, action: CommittedBatch[int]) -> None:
        batch = action.batch
        listener = node.listener
        client = node.client
        assert client is not None
        self._note("commit", f"node {node.node_id} [{batch.base_offset},{batch.last_offset}]@{batch.epoch}", batch.records[:4] if batch.records else "control")
        if batch.base_offset != listener.next_offset:
            self._fail(f"node {node.node_id} delivered batch [{batch.base_offset},{batch.last_offset}] when its listener expected offset {listener.next_offset}")
        hw = client.high_watermark
        if hw is None or batch.last_offset >= hw:
            self._fail(f"node {node.node_id} delivered batch [{batch.base_offset},{batch.last_offset}] at or past its high watermark {hw}")
        if batch.records:
            if len(batch.records) != batch.last_offset - batch.base_offset + 1:
                self._fail(f"node {node.node_id} delivered {len(batch.records)} records for offsets [{batch.base_offset},{batch.last_offset}]")
            for i, value in enumerate(batch.records):
                self._commit(node, batch.base_offset + i, value, batch.epoch)
        else:
            if not batch.control_records:
                self._fail(f"node {node.node_id} delivered batch [{batch.base_offset},{batch.last_offset}] with neither records nor control records")
            for offset in range(batch.base_offset, batch.last_offset + 1):
                self._commit(node, offset, CONTROL, batch.epoch)
            for i, record in enumerate(batch.control_records):
                if getattr(record, "type", None) == ControlRecordType.KRAFT_VOTERS:
                    self._check_committed_voters(node, batch.base_offset + i, VoterSet.from_voters_record(record.message))
        listener.next_offset = batch.last_offset + 1
        listener.last_epoch = batch.epoch

    def _on_load_snapshot(self, node: Node, action: LoadSnapshot[int]) -> None:
        listener = node.listener
        snapshot_id = action.snapshot_id
        end = snapshot_id.offset
        self._note("load-snapshot", f"node {node.node_id} {end}@{snapshot_id.epoch} ({len(action.records)} records)")
        if listener.claimed_epoch is not None:
            self._fail(f"node {node.node_id} leads epoch {listener.claimed_epoch} and was asked to load snapshot {snapshot_id}")
        if end < listener.next_offset:
            self._fail(f"node {node.node_id} was asked to load snapshot {snapshot_id}, behind the {listener.next_offset} offsets it applied")
        if end > len(self._history):
            self._fail(f"node {node.node_id} loaded snapshot {snapshot_id} past the committed history's end {len(self._history)}")
        if end > 0 and self._history_epochs[end - 1] != snapshot_id.epoch:
            self._fail(f"snapshot {snapshot_id} on node {node.node_id}: offset {end - 1} was committed in epoch {self._history_epochs[end - 1]}")
        expected = self._data_values[: self._data_before[end]]
        if list(action.records) != expected:
            self._fail(f"snapshot {snapshot_id} on node {node.node_id} holds {len(action.records)} records that are not the {len(expected)} committed below {end}")
        if end > 0:
            self.stats.snapshots_loaded += 1
        listener.next_offset = end
        listener.last_epoch = snapshot_id.epoch

    def _on_leader_change(self, node: Node, action: LeaderChange) -> None:
        listener = node.listener
        client = node.client
        assert client is not None
        self._note("leader-change", f"node {node.node_id} leader={action.leader_id} epoch={action.epoch}")
        if action.epoch < listener.last_leader_epoch:
            self._fail(f"node {node.node_id} told its listener of epoch {action.epoch} after epoch {listener.last_leader_epoch}")
        listener.last_leader_epoch = action.epoch
        if action.leader_id != node.node_id:
            listener.claimed_epoch = None
            return
        state = client.quorum_state.state
        if not isinstance(state, LeaderState) or state.epoch != action.epoch:
            self._fail(f"node {node.node_id} announced its own leadership of epoch {action.epoch} while {self._node_summary(node)}")
        hw = client.high_watermark
        if hw is None or hw <= state.epoch_start_offset or listener.next_offset < state.epoch_start_offset:
            self._fail(
                f"node {node.node_id} announced its leadership of epoch {action.epoch} (starting at offset {state.epoch_start_offset}) "
                f"with high watermark {hw} and {listener.next_offset} offsets applied"
            )
        # Kafka's handleLeaderChange rule: the new leader's listener holds everything committed before its epoch.
        committed_before = bisect.bisect_left(self._history_epochs, action.epoch)
        if listener.next_offset < committed_before:
            self._fail(f"node {node.node_id} claimed epoch {action.epoch} having applied {listener.next_offset} offsets; {committed_before} were committed in earlier epochs")
        listener.claimed_epoch = action.epoch
        self.stats.elections += 1

    def _check_committed_voters(self, node: Node, offset: int, voters: VoterSet) -> None:
        """KIP-853: committed voter sets change one voter at a time, so every two majorities meet."""
        known = self._committed_voters.get(offset)
        if known is not None:
            if known != voters:
                self._fail(f"node {node.node_id} committed voters {voters} at offset {offset}, where {known} was committed")
            return
        previous = next(reversed(self._committed_voters.values()), self.voter_set)
        if len(previous.ids() ^ voters.ids()) > 1:
            self._fail(f"the committed voters went from {previous} to {voters} at offset {offset}: more than one voter changed at once")
        self._committed_voters[offset] = voters
        self._note("voters", f"offset {offset}", voters)

    # -- workload ----------------------------------------------------------------------------------------

    def _append_event(self) -> None:
        if self._done:
            return
        self._append()
        self._at(self.now + self.rng.randint(*self.params.append_gap_ms), self._append_event)

    def _append(self) -> None:
        """Fresh values on every leader; now and then one on a follower, which must refuse it."""
        for node in self.running():
            client = node.client
            assert client is not None
            if not client.is_leader():
                if self.rng.random() < 0.02:
                    try:
                        client.append([self._fresh_value()], self.now)
                    except NotLeaderError:
                        pass
                    else:
                        self._fail(f"node {node.node_id} accepted an append while not the leader: {self._node_summary(node)}")
                continue
            values = [self._fresh_value() for _ in range(self.rng.choice((1, 1, 1, 2, 5)))]
            try:
                last = client.append(values, self.now)
            except NotLeaderError:
                continue  # resigning or shutting down
            epoch = client.quorum_state.epoch
            first = last - len(values) + 1
            for i, value in enumerate(values):
                self._appended[value] = (node.node_id, epoch, first + i)
            self._note("append", f"node {node.node_id} epoch {epoch} {values} at {first}")
            self._poll(node)

    def _fresh_value(self) -> int:
        self._next_value += 1
        return self._next_value

    def _snapshot_event(self) -> None:
        if self._done:
            return
        # Past the newest snapshot, not just the log start: retention may keep the log before it.
        candidates = [n for n in self.running() if n.client is not None and n.client.high_watermark is not None and n.listener.next_offset > _snapshot_floor(n.disk.log)]
        if candidates:
            node = self.rng.choice(candidates)
            client = node.client
            assert client is not None
            listener = node.listener
            snapshot_id = OffsetAndEpoch(listener.next_offset, listener.last_epoch)
            writer = client.create_snapshot(snapshot_id, self.now)
            if writer is not None:
                writer.append(self._data_values[: self._data_before[snapshot_id.offset]])
                writer.freeze()
                self.stats.snapshots_created += 1
                self._note("snapshot", f"node {node.node_id} {snapshot_id.offset}@{snapshot_id.epoch}")
                self._poll(node)
        self._at(self.now + self.rng.randint(*self.params.snapshot_gap_ms), self._snapshot_event)

    # -- faults --------------------------------------------------------------------------------------

    def _current_leader(self) -> Node | None:
        leaders = [n for n in self.running() if n.client is not None and n.client.is_leader()]
        return max(leaders, key=lambda n: n.client.quorum_state.epoch if n.client else -1, default=None)

    def _fault_event(self) -> None:
        if not self._faults_on:
            return
        s = self.scenario
        choices: list[Callable[[], None]] = []
        if s.isolate_leader:
            choices.append(self._isolate_leader)
        if s.split:
            choices.append(self._split)
        if s.crash:
            choices.append(self._crash_some)
        if choices:
            self.rng.choice(choices)()
        self._at(self.now + self.rng.randint(*self.params.fault_gap_ms), self._fault_event)

    def _isolate_leader(self) -> None:
        """The leader cut off both ways, or one way only: it hears the others but is not heard, or the reverse."""
        leader = self._current_leader()
        if leader is None:
            return
        self._isolate(leader.node_id, outbound=self.rng.random() < 0.7, inbound=self.rng.random() < 0.7)
        self._at(self.now + self.rng.randint(200, 1500), self._reconnect, leader.node_id)

    def _isolate(self, node_id: int, outbound: bool = True, inbound: bool = True) -> None:
        self._note("isolate", f"node {node_id}", "outbound" if outbound else "", "inbound" if inbound else "")
        for other in self.nodes:
            if other != node_id:
                if outbound:
                    self._cut.add((node_id, other))
                if inbound:
                    self._cut.add((other, node_id))

    def _reconnect(self, node_id: int) -> None:
        if not self._faults_on:
            return
        self._note("reconnect", f"node {node_id}")
        self._cut = {(a, b) for a, b in self._cut if node_id not in (a, b)}

    def _split(self) -> None:
        """Two voters against three (observers fall on either side); the leader may be in either."""
        ids = list(self.voter_ids)
        self.rng.shuffle(ids)
        minority = set(ids[:2])
        for observer in self.nodes:
            if not self.is_voter(observer) and self.rng.random() < 0.5:
                minority.add(observer)
        majority = set(self.nodes) - minority
        self._note("split", sorted(minority), "|", sorted(majority))
        for a in minority:
            for b in majority:
                self._cut.add((a, b))
                self._cut.add((b, a))
        self._at(self.now + self.rng.randint(300, 1500), self._heal_links)

    def _heal_links(self) -> None:
        if self._faults_on:
            self._note("heal-links")
            self._cut.clear()

    def _crash_some(self) -> None:
        running = self.running()
        if not running:
            return
        roll = self.rng.random()
        if roll < 0.2:
            self._shutdown(self.rng.choice(running).node_id)
            return
        if roll < 0.3:
            victims = running  # everyone at once
        elif roll < 0.6 and self._current_leader() is not None:
            victims = [self._current_leader()]  # type: ignore[list-item]
        else:
            victims = [self.rng.choice(running)]
        for node in victims:
            self._crash(node.node_id)
            self._at(self.now + self.rng.randint(0, 1000), self._restart_if_faults, node.node_id)

    def _restart_if_faults(self, node_id: int) -> None:
        if self._faults_on:
            self._start(node_id)

    def _hold_back_event(self) -> None:
        """Keep an observer (or a follower) away long enough for snapshots to move the log start past it."""
        if not self._faults_on:
            return
        leader = self._current_leader()
        others = [n for n in self.nodes if leader is None or n != leader.node_id]
        if not others:
            return
        observers = [n for n in others if not self.is_voter(n)]
        victim = self.rng.choice(observers or others)
        if self.rng.random() < 0.5:
            self._isolate(victim)
            self._at(self.now + self.rng.randint(300, 1200), self._reconnect, victim)
        else:
            self._crash(victim)
            self._at(self.now + self.rng.randint(300, 1200), self._restart_if_faults, victim)
        self._at(self.now + self.rng.randint(500, 1500), self._hold_back_event)

    def _wipe_one(self) -> None:
        victim = self.rng.choice(self.voter_ids)
        self._wipe_epoch = max(n.max_store_epoch for n in self.nodes.values())
        self._wipe(victim)
        self._at(self.now + 10, self._restart_wiped)
        self._at(self.now + self.rng.randint(200, 800), self._nudge_after_wipe)

    def _restart_wiped(self) -> None:
        """Kafka's rule for a node that lost its disk (canRecoverFromSingleNodeCommittedDataLoss), made
        strict: it comes back once every running node agrees on a leader other than it, elected after
        the wipe, that has committed in its own epoch. Its election and that commit needed a majority
        without the wiped node, so that majority holds everything committed before; and no node still
        campaigns in an epoch in which the wiped node may have voted."""
        for node in self.nodes.values():
            if node.wiped and self._recovered_without(node.node_id):
                node.wiped = False
                self._start(node.node_id)
        if any(n.wiped for n in self.nodes.values()):
            self._at(self.now + 50, self._restart_wiped)

    def _recovered_without(self, node_id: int) -> bool:
        running = self.running()
        leader = self._current_leader()
        if leader is None or leader.node_id == node_id or not running:
            return False
        client = leader.client
        assert client is not None
        state = client.quorum_state.state
        assert isinstance(state, LeaderState)
        if state.epoch <= self._wipe_epoch or client.high_watermark is None or client.high_watermark <= state.epoch_start_offset:
            return False
        for node in running:
            stored = node.disk.store.read_election_state()
            if stored is None or stored.epoch != state.epoch or stored.leader_id != leader.node_id:
                return False
        return True

    def _nudge_after_wipe(self) -> None:
        """A wiped follower does not by itself make the quorum change epochs: the leader steps down gracefully."""
        if not any(n.wiped for n in self.nodes.values()):
            return
        leader = self._current_leader()
        if leader is not None and leader.client is not None and leader.client.quorum_state.epoch <= self._wipe_epoch:
            self._shutdown(leader.node_id)
        self._at(self.now + self.rng.randint(500, 1500), self._nudge_after_wipe)

    def _shutdown(self, node_id: int) -> None:
        """Kafka's graceful shutdown: a leader resigns with EndQuorumEpoch; the node stops once that is done or timed out."""
        node = self.nodes[node_id]
        client = node.client
        if client is None:
            return
        self._note("shutdown", f"node {node_id}")
        client.begin_shutdown(self.now, self.rng.choice((300, 1000)))
        self._poll(node)
        self._at(self.now + 5, self._finish_shutdown, node_id, node.incarnation)

    def _finish_shutdown(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        client = node.client
        if client is None or node.incarnation != incarnation:
            return
        if not client.is_shutdown_complete(self.now):
            self._at(self.now + 5, self._finish_shutdown, node_id, incarnation)
            return
        self._crash(node_id)
        self._at(self.now + self.rng.randint(0, 500), self._start, node_id)

    def _reconfig_event(self) -> None:
        """An administrator adds an observer as a voter (kafka-metadata-quorum add-controller) or removes a voter."""
        if not self._faults_on:
            return
        leader = self._current_leader()
        if leader is not None and leader.client is not None and leader.client.kraft_version == KRaftVersion.KRAFT_VERSION_0:
            self._upgrade_kraft_version(leader)
        elif leader is not None and leader.client is not None:
            voters = leader.client.voters
            candidates = [n for n in self.running() if n.node_id not in voters]
            if candidates and (len(voters) < 2 or self.rng.random() < 0.5):
                node = self.rng.choice(candidates)
                body: Any = AddRaftVoterRequest(
                    cluster_id=CLUSTER_ID,
                    timeout=datetime.timedelta(milliseconds=self.params.config.request_timeout_ms),
                    voter_id=node.node_id,
                    voter_directory_id=node.disk.directory_id,
                    listeners=(AddListener(name=LISTENER, host=node.address[0], port=node.address[1]),),
                )
            else:
                # Not the leader of two voters: if it crashed before the removal committed, it would come
                # back outside its own voter set while the other voter still needs its vote and its
                # longer log (a limit of single-voter changes in Raft and in KIP-853, not of this client).
                removable = [v for v in voters if len(voters) != 2 or v.voter_id != leader.node_id]
                voter = self.rng.choice(removable)
                body = RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=voter.voter_id, voter_directory_id=voter.directory_id)
            self._admin_request(leader, body)
        self._at(self.now + self.rng.randint(100, 600), self._reconfig_event)

    def _upgrade_kraft_version(self, leader: Node) -> None:
        """The active controller's UpdateFeatures of kraft.version: refused until every voter reported to this leader."""
        assert leader.client is not None
        try:
            written = leader.client.upgrade_kraft_version(leader.client.quorum_state.epoch, KRaftVersion.KRAFT_VERSION_1, False, self.now)
        except InvalidUpdateVersionError as e:
            self._note("upgrade", f"node {leader.node_id} refused", str(e))
            return
        self._note("upgrade", f"node {leader.node_id} wrote kraft.version 1" if written else f"node {leader.node_id} no-op", None)
        self.stats.kraft_upgrades += int(written)
        self._poll(leader)

    def _admin_request(self, node: Node, body: Any) -> None:
        assert node.client is not None
        self._handles += 1
        handle = self._handles
        request = self._maybe_wire(body, request=True)
        node.pending[handle] = Pending(ADMIN, 0, 0, int(type(body).__api_key__), request, self.now, self.params.config.request_timeout_ms, self.now)
        self._note("admin", f"to node {node.node_id} h{handle}", body)
        node.client.handle_request(handle, request, self.now)
        self._poll(node)

    def _on_admin_answer(self, node: Node, pending: Pending, body: Any) -> None:
        self._note("admin-answer", f"from node {node.node_id}", body)
        error = ErrorCode(body.error_code)
        if error == ErrorCode.none:
            self.stats.voter_changes += 1
            return
        expected = {
            ErrorCode.not_leader_or_follower,
            ErrorCode.request_timed_out,
            ErrorCode.duplicate_voter,
            ErrorCode.voter_not_found,
            ErrorCode.invalid_request,
        }
        if error not in expected:
            self._fail(f"node {node.node_id} answered {type(pending.request).__name__} with {error!r}")

    def _heal_event(self) -> None:
        """The faults stop: links heal, loss ends, every node comes back; from now the quorum must make progress."""
        self._note("heal")
        self._faults_on = False
        self._first_healed_value = self._next_value + 1
        self._cut.clear()
        for node in self.nodes.values():
            self._start(node.node_id)
        self._at(self.now, self._append_event)
        self._at(self.now + 100, self._liveness_event)

    def _liveness_event(self) -> None:
        """Done once a value appended after healing is committed and applied on every node."""
        offset = self._healed_commit
        if offset is not None and not any(n.wiped for n in self.nodes.values()) and all(n.listener.next_offset > offset for n in self.running()):
            self._done = True
            return
        self._at(self.now + 20, self._liveness_event)

    def _liveness_state(self) -> str:
        return f"first commit of a value appended after healing: {self._healed_commit}; nodes: " + "; ".join(self._node_summary(n) for n in self.nodes.values())

    # -- invariants ----------------------------------------------------------------------------------

    def _check_invariants(self) -> None:
        """After every event, on the nodes it touched (their store and state change only when they act)."""
        touched, self._touched = self._touched, set()
        for node_id in touched:
            node = self.nodes[node_id]
            stored = node.disk.store.read_election_state()
            if stored is not None:
                if stored.epoch < node.max_store_epoch:
                    self._fail(f"node {node_id}'s stored epoch went down from {node.max_store_epoch} to {stored.epoch}")
                node.max_store_epoch = stored.epoch
                if stored.leader_id is not None:
                    self._one_leader(stored.epoch, stored.leader_id, f"node {node_id}'s store")
            client = node.client
            if client is None:
                self._leaders.discard(node_id)
                continue
            epoch = client.quorum_state.epoch
            if stored is None or stored.epoch != epoch:
                self._fail(f"node {node_id} is in epoch {epoch} in memory but its store holds {stored}")
            leads = isinstance(client.quorum_state.state, LeaderState)
            if leads:
                self._one_leader(epoch, node_id, f"node {node_id} leads")
                self._leaders.add(node_id)
            else:
                self._leaders.discard(node_id)
            hw = client.high_watermark
            if hw is not None:
                if node.last_hw is not None and hw < node.last_hw:
                    self._fail(f"node {node_id}'s high watermark went down from {node.last_hw} to {hw}")
                if hw > node.disk.log.end_offset():
                    self._fail(f"node {node_id}'s high watermark {hw} is past its log end {node.disk.log.end_offset()}")
                if leads and self._voters_may_change and not self._wiped_ever and hw != node.last_hw:
                    self._check_majority_reached(node)
                node.last_hw = hw
        if touched and not self._wiped_ever and not self._voters_may_change:
            for leader_id in self._leaders:
                self._check_majority_reached(self.nodes[leader_id])

    def _one_leader(self, epoch: int, leader_id: int, source: str) -> None:
        known = self._leader_of_epoch.setdefault(epoch, leader_id)
        if known != leader_id:
            self._fail(f"two leaders in epoch {epoch}: {known} and {leader_id} ({source})")

    def _check_majority_reached(self, leader: Node) -> None:
        """What the leader calls committed is durable on a majority of voters (Kafka's MajorityReachedHighWatermark).

        With a static voter set this holds at all times. When the set changes, a high watermark
        reached under the old set may not be held by a majority of the new one yet: then it is
        checked when it moves, against the set the leader has at that moment."""
        assert leader.client is not None
        hw = leader.client.high_watermark
        if hw is None:
            return
        voter_ids = leader.client.voters.ids()
        ends = sorted((self._durable_end(self.nodes[v]) for v in voter_ids), reverse=True)
        majority = len(voter_ids) // 2 + 1
        if hw > ends[majority - 1]:
            self._fail(f"leader {leader.node_id}'s high watermark {hw} is past what a majority of voters hold durably: {ends}")

    @staticmethod
    def _durable_end(node: Node) -> int:
        log = node.disk.log
        return log.end_offset() if node.client is None else log.last_flushed_offset()

    # -- the end -------------------------------------------------------------------------------------

    def _validate_end(self) -> None:
        for node in self.running():
            self._check_log_against_history(node)
            self._check_snapshot_at_log_start(node)
            self._check_latest_snapshot(node)
        overdue = self.params.config.fetch_max_wait_ms + self.params.config.request_timeout_ms
        for node in self.running():
            for handle, pending in node.pending.items():
                if self.now - pending.received_ms > overdue:
                    self._fail(f"node {node.node_id} never answered handle {handle} (api {pending.api_key}) from node {pending.source}, received at {pending.received_ms}")

    def _check_log_against_history(self, node: Node) -> None:
        """Kafka's ConsistentCommittedData: every node's log below its high watermark is the committed history."""
        client = node.client
        assert client is not None
        hw = client.high_watermark
        if hw is None:
            return
        log = node.disk.log
        offset = log.start_offset()
        while offset < hw:
            data = log.read(offset, 1 << 20).records
            batches = list(iter_batches(data))
            if not batches:
                self._fail(f"node {node.node_id}'s log has no batch at offset {offset}, below its high watermark {hw}")
            for header, view in batches:
                if header.base_offset >= hw:
                    return
                if header.is_control:
                    values = [CONTROL] * (header.last_offset - header.base_offset + 1)
                else:
                    values = [SERDE.decode(r.value) for r in iter_records(view, header) if r.value is not None]
                for i, value in enumerate(values):
                    at = header.base_offset + i
                    if at >= hw or at < offset:
                        continue
                    self._commit(node, at, value, header.partition_leader_epoch)
                offset = header.last_offset + 1

    def _check_latest_snapshot(self, node: Node) -> None:
        reader = node.disk.log.latest_snapshot()
        if reader is None or reader.snapshot_id.offset == 0:
            return
        end = reader.snapshot_id.offset
        data = reader.read(0, reader.size_in_bytes())
        values = [SERDE.decode(r.value) for header, view in iter_batches(data) if not header.is_control for r in iter_records(view, header) if r.value is not None]
        if end > len(self._history) or values != self._data_values[: self._data_before[end]]:
            self._fail(f"node {node.node_id}'s snapshot {reader.snapshot_id} holds {len(values)} records that are not the committed ones below {end}")

    def _check_snapshot_at_log_start(self, node: Node) -> None:
        log = node.disk.log
        earliest = log.earliest_snapshot_id()
        if earliest is None:
            return
        start = log.start_offset()
        if start > earliest.offset or (start > 0 and start != earliest.offset):
            self._fail(f"node {node.node_id}'s log starts at {start} but its earliest snapshot is {earliest}")
        validation = log.validate_offset_and_epoch(earliest.offset, earliest.epoch)
        if validation.kind is not ValidationKind.VALID:
            self._fail(f"node {node.node_id}'s earliest snapshot {earliest} does not validate against its log: {validation}")


def _show(value: int) -> str:
    return "a control record" if value == CONTROL else f"value {value}"


def _is_entity(value: Any) -> bool:
    return hasattr(type(value), "__api_key__") or type(value).__name__ == "FetchRequest"


def run_seed(seed: int, *, window_ms: int = DEFAULT_WINDOW_MS, trace_length: int = TRACE_LENGTH) -> Stats:
    return Simulation(seed, window_ms=window_ms, trace_length=trace_length).run()


__all__ = [
    "CONTROL",
    "DEFAULT_WINDOW_MS",
    "IntSerde",
    "LIVENESS_BOUND_MS",
    "REPLAY_COMMAND",
    "SCENARIOS",
    "SCENARIO_NAMES",
    "Scenario",
    "Simulation",
    "SimulationFailure",
    "Stats",
    "run_seed",
    "scenario_for",
    "wire_request",
    "wire_response",
]


def _snapshot_floor(log: MemoryLog) -> int:
    latest = log.latest_snapshot_id()
    return max(log.start_offset(), latest.offset if latest is not None else 0)
