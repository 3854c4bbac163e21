"""KafkaRaftClient scenarios: a few clients driven by hand on a virtual clock, over MemoryLog and MemoryQuorumStateStore.

``Quorum`` is a tiny deterministic network: a Send is handed to its destination's
``handle_request`` after ``latency_ms``, the Respond goes back the same way, and links can be
cut. Time only moves when the test moves it (``run``/``run_until``), to the earliest deadline
any client asks for, so every scenario is exact and fast.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.begin_quorum_epoch.v1.request import BeginQuorumEpochRequest
from kio.schema.begin_quorum_epoch.v1.request import PartitionData as BeginPartition
from kio.schema.begin_quorum_epoch.v1.request import TopicData as BeginTopic
from kio.schema.describe_quorum.v0.request import DescribeQuorumRequest as DescribeQuorumRequestV0
from kio.schema.describe_quorum.v0.request import PartitionData as P0
from kio.schema.describe_quorum.v0.request import TopicData as T0
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.request import PartitionData as DescribePartition
from kio.schema.describe_quorum.v2.request import TopicData as DescribeTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v18.request import FetchRequest
from kio.schema.vote.v2.request import PartitionData as VotePartition
from kio.schema.vote.v2.request import TopicData as VoteTopic
from kio.schema.vote.v2.request import VoteRequest

from protocol.messages import encode_body
from raft.control_records import ControlRecordType
from raft.kafka_raft_client import (
    METADATA_TOPIC,
    CommittedBatch,
    KafkaRaftClient,
    LeaderChange,
    LoadSnapshot,
    NotLeaderError,
    Respond,
    Send,
    fetch_request_in_version,
)
from raft.kafka_metadata_log import KafkaMetadataLog, MetadataLogConfig
from raft.snapshot_retention import MetadataRetention
from raft.memory_log import MemoryLog
from raft.quorum_state import CandidateState, FollowerState, LeaderState, ProspectiveState, ResignedState, UnattachedState
from raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from raft.raft_config import RaftConfig
from raft.replicated_log import OffsetAndEpoch
from raft.voter_history import write_bootstrap_checkpoint
from raft.voter_set import Endpoint, VoterNode, VoterSet

CLUSTER_ID = "raft-test-cluster"
CONFIG = RaftConfig(
    election_timeout_ms=1000,
    fetch_timeout_ms=2000,
    election_backoff_max_ms=1000,
    request_timeout_ms=2000,
    retry_backoff_ms=20,
    append_linger_ms=0,
    fetch_max_wait_ms=500,
)


class StrSerde:
    def encode(self, record: str) -> bytes:
        return record.encode()

    def decode(self, value: bytes | memoryview) -> str:
        return bytes(value).decode()


def directory(node_id: int) -> uuid.UUID:
    return uuid.UUID(int=1000 + node_id)


def voter_set(ids: list[int], with_directories: bool = False) -> VoterSet:
    """Static voters (no directories) support kraft.version 0 only, as controller.quorum.voters' do."""
    high = 1 if with_directories else 0
    return VoterSet(VoterNode(i, directory(i) if with_directories else None, (Endpoint("CONTROLLER", f"node{i}", 9000 + i),), 0, high) for i in ids)


@dataclasses.dataclass
class Node:
    node_id: int
    log: Any  # MemoryLog or KafkaMetadataLog
    store: MemoryQuorumStateStore
    client: KafkaRaftClient[str]
    committed: list[Any] = dataclasses.field(default_factory=list)  # CommittedBatch and LoadSnapshot, in order
    leader_changes: list[LeaderChange] = dataclasses.field(default_factory=list)
    up: bool = True

    def records(self) -> list[str]:
        """The listener's state: a snapshot's records, then committed records."""
        out: list[str] = []
        for action in self.committed:
            if isinstance(action, LoadSnapshot):
                out = list(action.records)
            else:
                out.extend(action.batch.records)
        return out


ADMIN = -100  # the source of requests from outside the quorum


@dataclasses.dataclass(order=True)
class _Message:
    at_ms: int
    seq: int
    kind: str = dataclasses.field(compare=False)  # "request" or "response"
    source: int = dataclasses.field(compare=False)
    target: int = dataclasses.field(compare=False)
    payload: Any = dataclasses.field(compare=False)


class Quorum:
    def __init__(
        self,
        voters: list[int],
        observers: list[int] = (),  # type: ignore[assignment]
        *,
        config: RaftConfig = CONFIG,
        seed: int = 1,
        latency_ms: int = 1,
        disk: Path | None = None,  # KafkaMetadataLog under it instead of MemoryLog
        dynamic: bool = False,  # kraft.version 1: voters from a bootstrap checkpoint, not configured
    ) -> None:
        self.voters = voter_set(voters, with_directories=dynamic)
        self.dynamic = dynamic
        self.config = config
        self.now = 0
        self.latency_ms = latency_ms
        self.seed = seed
        self.nodes: dict[int, Node] = {}
        self.cut: set[tuple[int, int]] = set()
        self.in_flight: list[_Message] = []
        self._seq = 0
        self._handles: dict[int, tuple[int, int]] = {}  # handle -> (requesting node, correlation id)
        self.admin_answers: dict[int, Any] = {}  # answers to ``request``, by handle
        self._next_handle = 0
        self.address_to_id = {v.address(): v.voter_id for v in self.voters}
        self.disk = disk
        for node_id in [*voters, *observers]:
            log = self._open_log(node_id)
            if dynamic and node_id in voters:
                write_bootstrap_checkpoint(log, self.voters, 0)
            self.nodes[node_id] = self._start(node_id, log, MemoryQuorumStateStore())

    def add_node(self, node_id: int) -> Node:
        """A new node with an empty log (an observer until the voters take it in)."""
        self.address_to_id[(f"node{node_id}", 9000 + node_id)] = node_id
        node = self.nodes[node_id] = self._start(node_id, self._open_log(node_id), MemoryQuorumStateStore())
        return node

    def _open_log(self, node_id: int) -> Any:
        if self.disk is None:
            return MemoryLog()
        return KafkaMetadataLog.open(self.disk / f"node{node_id}" / "__cluster_metadata-0", MetadataLogConfig(segment_bytes=4096, segment_min_bytes=1024, retention=MetadataRetention(max_bytes=0, max_ms=-1)))

    def _start(self, node_id: int, log: Any, store: MemoryQuorumStateStore, listeners: tuple[Endpoint, ...] | None = None) -> Node:
        client: KafkaRaftClient[str] = KafkaRaftClient(
            node_id=node_id,
            directory_id=directory(node_id),
            cluster_id=CLUSTER_ID,
            config=self.config,
            log=log,
            store=store,
            serde=StrSerde(),
            voters=None if self.dynamic else self.voters,
            bootstrap_servers=[v.address() for v in self.voters] if self.dynamic else [],  # type: ignore[misc]
            now_ms=self.now,
            rng=random.Random(self.seed * 1000 + node_id),
            local_listeners=listeners or (Endpoint("CONTROLLER", f"node{node_id}", 9000 + node_id),),
        )
        return Node(node_id, log, store, client)

    # -- faults ---------------------------------------------------------------------------------------

    def isolate(self, node_id: int) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut.add((node_id, other))
                self.cut.add((other, node_id))

    def heal(self) -> None:
        self.cut.clear()

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.up = False
        self.in_flight = [m for m in self.in_flight if node_id not in (m.source, m.target)]

    def restart(self, node_id: int, listeners: tuple[Endpoint, ...] | None = None) -> Node:
        """``listeners``: the controller endpoints it restarts with (its first stays where the others reach it)."""
        old = self.nodes[node_id]
        if isinstance(old.log, MemoryLog):
            log = old.log.recover()
        else:
            old.log.close()
            log = self._open_log(node_id)
        node = self._start(node_id, log, old.store, listeners)
        self.nodes[node_id] = node
        return node

    # -- driving --------------------------------------------------------------------------------------

    def _queue(self, kind: str, source: int, target: int, payload: Any) -> None:
        self._seq += 1
        self.in_flight.append(_Message(self.now + self.latency_ms, self._seq, kind, source, target, payload))

    def _poll(self, node: Node) -> None:
        for action in node.client.poll(self.now):
            if isinstance(action, Send):
                target = action.destination_id if action.destination_id >= 0 else self.address_to_id[action.destination]
                assert self.voters.address(target) in (None, action.destination) or target not in self.voters
                self._queue("request", node.node_id, target, action)
            elif isinstance(action, Respond):
                source, correlation_id = self._handles.pop(action.handle)
                if source == ADMIN:
                    encode_body(action.body)
                    self.admin_answers[action.handle] = action.body
                else:
                    self._queue("response", node.node_id, source, (correlation_id, action.body))
            elif isinstance(action, LeaderChange):
                node.leader_changes.append(action)
            else:
                node.committed.append(action)

    def _deliver(self, message: _Message) -> None:
        target = self.nodes.get(message.target)
        if target is None or not target.up or (message.source, message.target) in self.cut:
            if message.kind == "request" and self.nodes[message.source].up:
                # The sender's network client reports the failure (a refused connection).
                send: Send = message.payload
                self.nodes[message.source].client.handle_response(send.correlation_id, None, self.now)
            return
        if message.kind == "request":
            self._next_handle += 1
            self._handles[self._next_handle] = (message.source, message.payload.correlation_id)
            body = message.payload.body
            encode_body(body)  # every request the client builds must be encodable
            target.client.handle_request(self._next_handle, body, self.now)
        else:
            correlation_id, body = message.payload
            encode_body(body)
            target.client.handle_response(correlation_id, body, self.now)

    def request(self, node: Node, body: Any) -> int:
        """A request from an admin tool; its answer lands in ``admin_answers``."""
        self._next_handle += 1
        self._handles[self._next_handle] = (ADMIN, -1)
        node.client.handle_request(self._next_handle, body, self.now)
        return self._next_handle

    def step(self) -> None:
        for node in self.nodes.values():
            if node.up:
                self._poll(node)
        due = sorted(m for m in self.in_flight if m.at_ms <= self.now)
        self.in_flight = [m for m in self.in_flight if m.at_ms > self.now]
        for message in due:
            self._deliver(message)
        for node in self.nodes.values():
            if node.up:
                self._poll(node)

    def next_time(self) -> int:
        times = [n.client.next_deadline_ms() for n in self.nodes.values() if n.up]
        times.extend(m.at_ms for m in self.in_flight)
        return max(min(times, default=self.now + 1), self.now + 1) if not self._ready() else self.now

    def _ready(self) -> bool:
        return any(m.at_ms <= self.now for m in self.in_flight)

    def run(self, ms: int) -> None:
        end = self.now + ms
        while True:
            self.step()
            nxt = self.next_time()
            if nxt > end:
                self.now = end
                self.step()
                return
            self.now = max(nxt, self.now)
            if nxt == self.now and not self._ready():
                self.now += 1

    def run_until(self, condition: Callable[[], bool], max_ms: int = 20_000) -> None:
        end = self.now + max_ms
        while not condition():
            if self.now >= end:
                raise AssertionError(f"condition not met within {max_ms} ms (now {self.now})")
            self.run(1 if self._ready() else max(1, min(self.next_time(), end) - self.now))

    # -- queries --------------------------------------------------------------------------------------

    def leader(self) -> Node | None:
        leaders = [n for n in self.nodes.values() if n.up and n.client.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    def elect(self, max_ms: int = 20_000) -> Node:
        self.run_until(lambda: self.leader() is not None and self.leader().client.high_watermark is not None, max_ms)  # type: ignore[union-attr]
        leader = self.leader()
        assert leader is not None
        return leader


# -- elections -----------------------------------------------------------------------------------------


def test_single_voter_elects_itself_at_once_and_commits_alone() -> None:
    quorum = Quorum([1])
    quorum.step()
    node = quorum.nodes[1]
    assert node.client.is_leader()
    assert node.client.leader_and_epoch == (1, 1)
    assert node.store.read_election_state() == ElectionState(1, 1, 1, uuid.UUID(int=1001))
    offset = node.client.append(["a", "b"], quorum.now)
    quorum.run(10)
    assert node.client.high_watermark == offset + 1
    assert node.records() == ["a", "b"]
    assert node.leader_changes == [LeaderChange(1, 1)]


def test_three_voters_elect_one_leader_after_a_pre_vote() -> None:
    quorum = Quorum([1, 2, 3])
    seen: set[type] = set()
    while quorum.leader() is None:
        quorum.run(1)
        seen.update(type(n.client.quorum_state.state) for n in quorum.nodes.values())
        assert quorum.now < 10_000
    assert ProspectiveState in seen and CandidateState in seen
    leader = quorum.leader()
    assert leader is not None
    epoch = leader.client.leader_and_epoch[1]
    assert epoch == 1  # the pre-vote kept the epoch from moving for a lost round
    quorum.run_until(lambda: all(n.client.leader_and_epoch == (leader.node_id, epoch) for n in quorum.nodes.values()))
    for node in quorum.nodes.values():
        state = node.store.read_election_state()
        assert state is not None and state.epoch == epoch


def test_leader_append_commits_on_majority_and_every_node_delivers_it_once() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    last = leader.client.append(["x1", "x2"], quorum.now)
    leader.client.append(["x3"], quorum.now)
    quorum.run_until(lambda: all(n.client.high_watermark is not None and n.client.high_watermark > last + 1 for n in quorum.nodes.values()))
    quorum.run(100)
    for node in quorum.nodes.values():
        assert node.records() == ["x1", "x2", "x3"]
        offsets = [b.batch.base_offset for b in node.committed if isinstance(b, CommittedBatch)]
        assert offsets == sorted(set(offsets))
        first = node.committed[0]
        assert isinstance(first, CommittedBatch) and first.batch.is_control
        assert first.batch.control_records[0].type is ControlRecordType.LEADER_CHANGE


def test_leader_change_for_the_local_leader_comes_after_the_leader_change_batch() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.run(50)
    assert leader.leader_changes[-1] == LeaderChange(leader.node_id, leader.client.leader_and_epoch[1])
    # Nothing of its own epoch was delivered before the listener heard it leads.
    first = leader.committed[0]
    assert isinstance(first, CommittedBatch) and first.batch.epoch == leader.client.leader_and_epoch[1]


def test_high_watermark_needs_a_majority_not_just_the_leader() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.run(100)
    hw = leader.client.high_watermark
    for other in quorum.nodes:
        if other != leader.node_id:
            quorum.isolate(other)
    quorum.cut = {pair for pair in quorum.cut if leader.node_id in pair}
    leader.client.append(["lonely"], quorum.now)
    quorum.run(1500)
    assert leader.client.high_watermark == hw
    assert "lonely" not in leader.records()


def test_a_new_leader_tells_no_high_watermark_until_it_commits_in_its_own_epoch() -> None:
    # Kafka's LeaderState starts without one. The one the new leader learned as a follower can be
    # below what another follower learned from the old leader, and a Kafka 4.4 follower told a lower
    # one halts ("Non-monotonic update of high watermark"), as a rolling migration showed.
    quorum = Quorum([1, 2, 3])
    old = quorum.elect()
    old.client.append(["a"], quorum.now)
    quorum.run_until(lambda: all(n.client.high_watermark == old.client.high_watermark for n in quorum.nodes.values()))
    epoch = old.client.leader_and_epoch[1]
    quorum.crash(old.node_id)
    quorum.run_until(lambda: quorum.leader() is not None and quorum.leader().client.leader_and_epoch[1] > epoch)  # type: ignore[union-attr]
    new = quorum.leader()
    assert new is not None
    quorum.isolate(new.node_id)  # the record of its own epoch cannot commit
    state = new.client.quorum_state.state
    assert isinstance(state, LeaderState)
    start = state.epoch_start_offset
    known = new.client.high_watermark
    assert known is not None and known <= start  # what it learned as a follower
    other = next(n for n in quorum.nodes.values() if n.up and n is not new)

    def fetch_answer() -> Any:
        fetch = other.client._fetch_request()
        partition = dataclasses.replace(fetch.topics[0].partitions[0], current_leader_epoch=new.client.leader_and_epoch[1])
        fetch = dataclasses.replace(fetch, max_wait=datetime.timedelta(0), topics=(dataclasses.replace(fetch.topics[0], partitions=(partition,)),))
        return answer(new, fetch, quorum.now).responses[0].partitions[0]

    assert fetch_answer().high_watermark == -1
    describe = DescribeQuorumRequest(topics=(DescribeTopic(topic_name=METADATA_TOPIC, partitions=(DescribePartition(partition_index=0),)),))
    assert answer(new, describe, quorum.now).topics[0].partitions[0].high_watermark == -1
    quorum.heal()
    quorum.run_until(lambda: new.client.high_watermark is not None and new.client.high_watermark > start)
    assert fetch_answer().high_watermark == new.client.high_watermark


def test_append_on_a_follower_raises_not_leader() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    with pytest.raises(NotLeaderError):
        follower.client.append(["nope"], quorum.now)


# -- failures and recovery ----------------------------------------------------------------------------


def test_a_new_leader_is_elected_when_the_leader_crashes() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    leader.client.append(["before"], quorum.now)
    quorum.run(200)
    old_epoch = leader.client.leader_and_epoch[1]
    quorum.crash(leader.node_id)
    quorum.run_until(lambda: quorum.leader() is not None and quorum.leader().client.leader_and_epoch[1] > old_epoch)  # type: ignore[union-attr]
    new = quorum.leader()
    assert new is not None and new.node_id != leader.node_id
    new.client.append(["after"], quorum.now)
    quorum.run(300)
    for node in quorum.nodes.values():
        if node.up:
            assert node.records() == ["before", "after"]


def test_follower_truncates_its_uncommitted_tail_on_diverging_epoch() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    leader.client.append(["committed"], quorum.now)
    quorum.run(200)
    # The leader is cut off; what it appends now reaches no one and is never committed.
    quorum.isolate(leader.node_id)
    leader.client.append(["lost-1"], quorum.now)
    leader.client.append(["lost-2"], quorum.now)
    quorum.run(10)
    assert b"lost-1" in bytes(leader.log.read(0, 1 << 20).records)
    quorum.run_until(lambda: any(n.client.is_leader() and n is not leader for n in quorum.nodes.values()))
    new = next(n for n in quorum.nodes.values() if n.client.is_leader() and n is not leader)
    new.client.append(["new-1"], quorum.now)
    quorum.run(100)
    quorum.heal()
    quorum.run_until(lambda: leader.client.leader_and_epoch == new.client.leader_and_epoch and leader.log.end_offset() == new.log.end_offset())
    quorum.run(200)
    assert b"lost-1" not in bytes(leader.log.read(0, 1 << 20).records)  # truncated away
    assert bytes(leader.log.read(0, 1 << 20).records) == bytes(new.log.read(0, 1 << 20).records)
    for node in quorum.nodes.values():
        assert node.records() == ["committed", "new-1"]


def test_restart_from_store_keeps_the_epoch_and_the_vote() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    leader.client.append(["a"], quorum.now)
    quorum.run(200)
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    epoch = follower.client.leader_and_epoch[1]
    quorum.crash(follower.node_id)
    restarted = quorum.restart(follower.node_id)
    state = restarted.client.quorum_state.state
    assert isinstance(state, UnattachedState) and state.epoch == epoch
    quorum.run_until(lambda: restarted.client.leader_and_epoch == (leader.node_id, epoch), 5000)
    quorum.run(200)
    assert restarted.records() == ["a"]


def test_a_restarted_leader_resigns_its_epoch() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    epoch = leader.client.leader_and_epoch[1]
    quorum.crash(leader.node_id)
    restarted = quorum.restart(leader.node_id)
    assert isinstance(restarted.client.quorum_state.state, ResignedState)
    assert not restarted.client.is_leader()
    quorum.run_until(lambda: quorum.leader() is not None and quorum.leader().client.leader_and_epoch[1] > epoch)  # type: ignore[union-attr]


def test_a_restarted_only_voter_leads_a_new_epoch_at_once() -> None:
    """As Kafka's initialize: no election timeout waited out, as no other voter can end it."""
    quorum = Quorum([1])
    quorum.step()
    node = quorum.nodes[1]
    node.client.append(["a"], quorum.now)
    quorum.run(10)
    quorum.crash(1)
    restarted = quorum.restart(1)
    state = restarted.client.quorum_state.state
    assert isinstance(state, ResignedState) and state.epoch == 1
    quorum.step()  # no virtual time passes
    assert restarted.client.is_leader() and restarted.client.leader_and_epoch[1] > 1
    quorum.run(10)
    assert restarted.records() == ["a"]


def test_an_isolated_voter_does_not_disturb_the_leader_when_it_returns() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    epoch = leader.client.leader_and_epoch[1]
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    quorum.isolate(follower.node_id)
    quorum.run(6000)  # many election timeouts: it only pre-votes, so its epoch stays
    assert follower.client.leader_and_epoch[1] == epoch
    quorum.heal()
    quorum.run(3000)
    assert leader.client.is_leader() and leader.client.leader_and_epoch[1] == epoch
    assert follower.client.leader_and_epoch == (leader.node_id, epoch)


# -- check quorum and graceful shutdown ----------------------------------------------------------------


def test_check_quorum_makes_a_cut_off_leader_resign() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.isolate(leader.node_id)
    start = quorum.now
    quorum.run_until(lambda: not leader.client.is_leader(), 10_000)
    assert quorum.now - start >= CONFIG.check_quorum_timeout_ms
    assert quorum.now - start <= CONFIG.check_quorum_timeout_ms + 100
    assert isinstance(leader.client.quorum_state.state, (ResignedState, ProspectiveState, UnattachedState))
    assert leader.leader_changes[-1].leader_id is None


def test_a_resigned_leader_never_stores_its_epoch_without_itself_as_leader() -> None:
    """Kafka 4.4's pollResigned: once its election timeout passes, a resigned leader goes
    unattached in the next epoch. Had it stood again in the epoch it led and lost, its store would
    say "epoch E, no leader, voted for itself", which Kafka restarts as a candidate of E; a
    follower that stored it as E's leader answers its Vote naming it, and Kafka halts on following
    itself (seen on a Kafka 4.4 cluster started on the directories of a kbroker cluster)."""
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    epoch = leader.client.leader_and_epoch[1]
    writes: list[ElectionState] = []
    write = leader.store.write_election_state
    leader.store.write_election_state = lambda state: (writes.append(state), write(state))[1]  # type: ignore[method-assign]
    quorum.isolate(leader.node_id)
    quorum.run(CONFIG.check_quorum_timeout_ms + 4 * CONFIG.election_timeout_ms)
    assert not leader.client.is_leader()
    assert writes, "it stood again, in a later epoch"
    assert all(s.epoch > epoch or s.leader_id == leader.node_id for s in writes), writes
    # Restarted from the store (a leader that crashed): the same from its resigned start.
    quorum.heal()
    new_leader = quorum.leader()
    assert new_leader is not None and new_leader is not leader
    quorum.crash(new_leader.node_id)
    crashed_epoch = new_leader.client.leader_and_epoch[1]
    quorum.isolate(new_leader.node_id)
    restarted = quorum.restart(new_leader.node_id)
    assert isinstance(restarted.client.quorum_state.state, ResignedState)
    quorum.run(4 * CONFIG.election_timeout_ms)
    stored = restarted.store.read_election_state()
    assert stored is not None and (stored.epoch > crashed_epoch or stored.leader_id == restarted.node_id), stored


def test_a_split_vote_with_a_dead_voter_is_retried_without_waiting_out_the_election_timeout() -> None:
    """The leader of three died and both others stood in the same epoch: each refuses the other,
    the dead one answers nothing, so neither can win. They back off at once (Kafka waits for the
    election timeout first) and one of them leads well before an election timeout has passed."""
    quorum = Quorum([1, 2, 3])
    quorum.crash(3)
    for node_id in (1, 2):
        quorum.nodes[node_id].client._transition_to_candidate(quorum.now)
    split_epoch = quorum.nodes[1].client.leader_and_epoch[1]
    assert quorum.nodes[2].client.leader_and_epoch[1] == split_epoch
    quorum.run_until(lambda: quorum.leader() is not None, max_ms=CONFIG.election_timeout_ms - 1)
    leader = quorum.leader()
    assert leader is not None and leader.client.leader_and_epoch[1] > split_epoch


def test_graceful_shutdown_hands_leadership_over_with_end_quorum_epoch() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    leader.client.append(["last words"], quorum.now)
    quorum.run(200)
    epoch = leader.client.leader_and_epoch[1]
    leader.client.begin_shutdown(quorum.now, 5000)
    start = quorum.now
    ends: list[Any] = []
    while not leader.client.is_shutdown_complete(quorum.now):
        quorum.step()
        for m in quorum.in_flight:
            if m.kind == "request" and type(m.payload.body).__name__ == "EndQuorumEpochRequest":
                ends.append(m.payload.body)
        quorum.run(1)
        assert quorum.now - start < 5000
    assert ends, "the resigning leader told the voters"
    # Far quicker than waiting for a fetch timeout (2000 ms) and an election.
    assert quorum.now - start < CONFIG.fetch_timeout_ms
    new = quorum.leader()
    assert new is not None and new is not leader and new.client.leader_and_epoch[1] == epoch + 1
    candidates = [c.candidate_id for c in ends[0].topics[0].partitions[0].preferred_candidates]
    assert sorted(candidates) == sorted(n for n in quorum.nodes if n != leader.node_id)
    with pytest.raises(NotLeaderError):
        leader.client.append(["too late"], quorum.now)


def test_shutdown_of_a_follower_completes_while_it_sees_a_leader() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    quorum.run(100)
    follower.client.begin_shutdown(quorum.now, 5000)
    assert follower.client.is_shutdown_complete(quorum.now)


# -- votes refused --------------------------------------------------------------------------------------


def vote_request(candidate_id: int, epoch: int, last_epoch: int = 0, last_offset: int = 0, *, pre_vote: bool = False, cluster_id: str | None = CLUSTER_ID, voter_id: int = -1) -> VoteRequest:
    return VoteRequest(
        cluster_id=cluster_id,
        voter_id=voter_id,
        topics=(
            VoteTopic(
                topic_name=METADATA_TOPIC,
                partitions=(
                    VotePartition(
                        partition_index=0,
                        replica_epoch=epoch,
                        replica_id=candidate_id,
                        replica_directory_id=None,
                        voter_directory_id=None,
                        last_offset_epoch=last_epoch,
                        last_offset=last_offset,
                        pre_vote=pre_vote,
                    ),
                ),
            ),
        ),
    )


def answer(node: Node, body: Any, now: int = 0) -> Any:
    node.client.handle_request(77, body, now)
    responses = [a for a in node.client.poll(now) if isinstance(a, Respond) and a.handle == 77]
    assert len(responses) == 1
    encode_body(responses[0].body)
    return responses[0].body


def lone_node(node_id: int = 1, voters: list[int] = (1, 2, 3)) -> Node:  # type: ignore[assignment]
    quorum = Quorum(list(voters))
    return quorum.nodes[node_id]


def test_vote_is_granted_once_per_epoch_and_persisted_first() -> None:
    node = lone_node()
    response = answer(node, vote_request(2, 1))
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none and partition.vote_granted
    assert node.store.read_election_state() == ElectionState(1, None, 2, None)
    again = answer(node, vote_request(2, 1)).topics[0].partitions[0]
    assert again.vote_granted  # a retried request gets the same answer
    other = answer(node, vote_request(3, 1)).topics[0].partitions[0]
    assert not other.vote_granted


def test_vote_refused_from_a_non_voter() -> None:
    node = lone_node()
    partition = answer(node, vote_request(9, 1)).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.inconsistent_voter_set and not partition.vote_granted
    assert node.store.read_election_state() == ElectionState(0, None, None, None)


def test_vote_refused_for_a_stale_epoch() -> None:
    node = lone_node()
    assert answer(node, vote_request(2, 5)).topics[0].partitions[0].vote_granted
    partition = answer(node, vote_request(3, 4)).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.fenced_leader_epoch and partition.leader_epoch == 5


def test_vote_refused_for_a_wrong_cluster_id() -> None:
    node = lone_node()
    response = answer(node, vote_request(2, 1, cluster_id="another-cluster"))
    assert response.error_code == ErrorCode.inconsistent_cluster_id
    assert node.store.read_election_state() == ElectionState(0, None, None, None)


def test_vote_refused_to_a_candidate_with_a_shorter_log() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    leader.client.append(["a"], quorum.now)
    quorum.run(200)
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    epoch = follower.client.leader_and_epoch[1]
    partition = answer(follower, vote_request(3 if follower.node_id != 3 else 2, epoch + 1, 0, 0), quorum.now).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none and not partition.vote_granted
    assert follower.client.leader_and_epoch[1] == epoch + 1  # the higher epoch is adopted all the same


def test_vote_with_a_last_epoch_not_below_the_candidate_epoch_is_invalid() -> None:
    node = lone_node()
    partition = answer(node, vote_request(2, 3, last_epoch=3, last_offset=10)).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.invalid_request


def test_vote_for_another_voter_key_is_refused() -> None:
    node = lone_node()
    partition = answer(node, vote_request(2, 1, voter_id=3)).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.invalid_voter_key and not partition.vote_granted


def test_pre_vote_changes_nothing_and_a_following_voter_refuses_it() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.run(100)
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    third = next(n for n in quorum.nodes.values() if n is not leader and n is not follower)
    epoch = follower.client.leader_and_epoch[1]
    stored = follower.store.read_election_state()
    end = follower.log.end_offset()
    partition = answer(follower, vote_request(third.node_id, epoch, epoch, end, pre_vote=True), quorum.now).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none and not partition.vote_granted
    assert follower.store.read_election_state() == stored
    # An unattached voter grants a pre-vote without recording a vote.
    fresh = lone_node()
    granted = answer(fresh, vote_request(2, 0, 0, 0, pre_vote=True)).topics[0].partitions[0]
    assert granted.vote_granted and fresh.store.read_election_state() == ElectionState(0, None, None, None)


def test_begin_quorum_epoch_from_a_non_voter_is_refused() -> None:
    node = lone_node()
    body = BeginQuorumEpochRequest(
        cluster_id=CLUSTER_ID,
        voter_id=1,
        topics=(BeginTopic(topic_name=METADATA_TOPIC, partitions=(BeginPartition(partition_index=0, voter_directory_id=None, leader_id=9, leader_epoch=3),)),),
        leader_endpoints=(),
    )
    partition = answer(node, body).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.inconsistent_voter_set
    assert isinstance(node.client.quorum_state.state, UnattachedState)


def test_malformed_requests_get_errors_not_exceptions() -> None:
    node = lone_node()
    empty_vote = VoteRequest(cluster_id=CLUSTER_ID, voter_id=1, topics=())
    assert answer(node, empty_vote).error_code == ErrorCode.invalid_request
    fetch = FetchRequest(max_wait=datetime.timedelta(0), min_bytes=0, topics=(), forgotten_topics_data=())
    assert answer(node, fetch).error_code == ErrorCode.invalid_request


# -- fetch, observers, describe quorum -----------------------------------------------------------------


def test_fetch_to_a_follower_names_the_leader() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    quorum.run(100)
    follower = next(n for n in quorum.nodes.values() if n is not leader and n.node_id != 4)
    fetch = quorum.nodes[4].client._fetch_request()
    fetch = dataclasses.replace(fetch, topics=(dataclasses.replace(fetch.topics[0], partitions=(dataclasses.replace(fetch.topics[0].partitions[0], current_leader_epoch=follower.client.leader_and_epoch[1]),)),))
    partition = answer(follower, fetch, quorum.now).responses[0].partitions[0]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert partition.current_leader.leader_id == leader.node_id


def test_observer_finds_the_leader_and_follows_the_log() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    leader.client.append(["o1"], quorum.now)
    observer = quorum.nodes[4]
    quorum.run_until(lambda: observer.records() == ["o1"])
    assert not observer.client.quorum_state.is_voter()
    assert observer.client.leader_and_epoch == leader.client.leader_and_epoch
    assert isinstance(observer.client.quorum_state.state, FollowerState)
    # Observers never vote and never stand: cut the leader off, the observer stays out of it.
    epoch = leader.client.leader_and_epoch[1]
    quorum.crash(leader.node_id)
    quorum.run_until(lambda: quorum.leader() is not None and quorum.leader().client.leader_and_epoch[1] > epoch)  # type: ignore[union-attr]
    new = quorum.leader()
    assert new is not None and new.node_id != 4
    new.client.append(["o2"], quorum.now)
    quorum.run_until(lambda: observer.records() == ["o1", "o2"])


def test_describe_quorum_lists_voters_and_observers() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    leader.client.append(["d"], quorum.now)
    quorum.run(600)
    request = DescribeQuorumRequest(topics=(DescribeTopic(topic_name=METADATA_TOPIC, partitions=(DescribePartition(partition_index=0),)),))
    response = answer(leader, request, quorum.now)
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none and partition.leader_id == leader.node_id
    assert partition.high_watermark == leader.client.high_watermark
    assert [v.replica_id for v in partition.current_voters] == [1, 2, 3]
    assert [o.replica_id for o in partition.observers] == [4]
    for replica in (*partition.current_voters, *partition.observers):
        assert replica.log_end_offset == leader.log.end_offset()
        assert replica.last_fetch_timestamp > 0 and replica.last_caught_up_timestamp > 0
    assert [n.node_id for n in response.nodes] == [1, 2, 3]
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    assert answer(follower, request, quorum.now).topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    old = answer(leader, DescribeQuorumRequestV0(topics=(T0(topic_name=METADATA_TOPIC, partitions=(P0(partition_index=0),)),)), quorum.now)
    assert [v.replica_id for v in old.topics[0].partitions[0].current_voters] == [1, 2, 3]


# -- snapshots ------------------------------------------------------------------------------------------


def write_snapshot(node: Node, records: list[str]) -> OffsetAndEpoch:
    hw = node.client.high_watermark
    assert hw is not None
    epoch = node.log.end_offset_for_epoch(node.client.leader_and_epoch[1]).epoch
    # The id's epoch is that of the last record below the high watermark.
    last = max(b.batch.epoch for b in node.committed if isinstance(b, CommittedBatch) and b.batch.last_offset < hw)
    snapshot_id = OffsetAndEpoch(hw, last if last <= epoch else epoch)
    writer = node.client.create_snapshot(snapshot_id, 1234)
    assert writer is not None
    writer.append(records)
    writer.freeze()
    return snapshot_id


def test_snapshot_deletes_the_log_before_it_and_a_lagging_follower_fetches_it_in_chunks() -> None:
    config = dataclasses.replace(CONFIG, max_fetch_size_bytes=64)
    quorum = Quorum([1, 2, 3], config=config)
    leader = quorum.elect()
    lagging = next(n for n in quorum.nodes.values() if n is not leader)
    quorum.crash(lagging.node_id)
    for i in range(10):
        leader.client.append([f"r{i}"], quorum.now)
        quorum.run(20)
        if i == 4:
            quorum.run(200)
            first_id = write_snapshot(leader, leader.records())
            quorum.run(50)
            # As Kafka's cleanSnapshots: the log start moves only to a snapshot after the oldest.
            assert leader.log.start_offset() == 0 and leader.log.latest_snapshot_id() == first_id
    quorum.run(200)
    snapshot_id = write_snapshot(leader, leader.records())
    quorum.run(50)
    # The memory log's size limit of 0 bytes is breached: the oldest snapshot and the log before the newest go.
    assert leader.log.start_offset() == snapshot_id.offset and leader.log.earliest_snapshot_id() == snapshot_id
    restarted = quorum.restart(lagging.node_id)
    fetch_snapshots = 0
    while restarted.log.latest_snapshot_id() != snapshot_id:
        quorum.step()
        fetch_snapshots += sum(1 for m in quorum.in_flight if m.kind == "request" and type(m.payload.body).__name__ == "FetchSnapshotRequest")
        quorum.run(1)
        assert quorum.now < 60_000
    assert fetch_snapshots > 1  # 64-byte chunks
    leader.client.append(["after"], quorum.now)
    quorum.run_until(lambda: restarted.records() == [f"r{i}" for i in range(10)] + ["after"])
    loads = [a for a in restarted.committed if isinstance(a, LoadSnapshot)]
    assert len(loads) == 1 and loads[0].snapshot_id == snapshot_id
    assert restarted.log.start_offset() == snapshot_id.offset


def test_snapshot_is_loaded_at_start_up() -> None:
    quorum = Quorum([1])
    quorum.step()
    node = quorum.nodes[1]
    node.client.append(["s1", "s2"], quorum.now)
    quorum.run(10)
    snapshot_id = write_snapshot(node, node.records())
    node.client.append(["tail"], quorum.now)
    quorum.run(10)
    node.log.flush()
    quorum.crash(1)
    restarted = quorum.restart(1)
    quorum.run(3000)
    first = restarted.committed[0]
    assert isinstance(first, LoadSnapshot) and first.snapshot_id == snapshot_id and first.records == ["s1", "s2"]
    assert restarted.records() == ["s1", "s2", "tail"]


def test_create_snapshot_past_the_high_watermark_is_refused() -> None:
    quorum = Quorum([1])
    quorum.step()
    node = quorum.nodes[1]
    quorum.run(10)
    with pytest.raises(ValueError):
        node.client.create_snapshot(OffsetAndEpoch(node.client.high_watermark + 5, 1), 0)  # type: ignore[operator]


def test_fetch_from_the_servers_fetch_reader_is_served_like_a_kio_one() -> None:
    """The controller listener hands the client protocol.fetch_request.FetchRequest, not kio's entity."""
    from protocol.fetch_request import read_fetch_request

    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    leader.client.append(["via-reader"], quorum.now)
    quorum.run(100)
    kio_fetch = dataclasses.replace(quorum.nodes[4].client._fetch_request(), max_wait=datetime.timedelta(0))
    kio_fetch = dataclasses.replace(kio_fetch, topics=(dataclasses.replace(kio_fetch.topics[0], partitions=(dataclasses.replace(kio_fetch.topics[0].partitions[0], current_leader_epoch=leader.client.leader_and_epoch[1], fetch_offset=0, last_fetched_epoch=0),)),))
    parsed = read_fetch_request(bytearray(encode_body(kio_fetch)), 0, 18)
    assert parsed.topics[0].partitions[0].high_watermark == quorum.nodes[4].client.high_watermark
    response = answer(leader, parsed, quorum.now)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert partition.high_watermark == leader.client.high_watermark
    assert b"via-reader" in bytes(partition.records)


def caught_up_fetch(quorum: Quorum, leader: Node, replica_id: int, max_wait_ms: int) -> FetchRequest:
    fetch = quorum.nodes[replica_id].client._fetch_request()
    partition = dataclasses.replace(
        fetch.topics[0].partitions[0],
        current_leader_epoch=leader.client.leader_and_epoch[1],
        fetch_offset=leader.log.end_offset(),
        last_fetched_epoch=leader.log.last_fetched_epoch(),
    )
    return dataclasses.replace(fetch, max_wait=datetime.timedelta(milliseconds=max_wait_ms), topics=(dataclasses.replace(fetch.topics[0], partitions=(partition,)),))


def test_a_caught_up_fetch_waits_for_new_data_or_its_max_wait() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    quorum.run(700)
    quorum.crash(4)  # the test plays node 4 by hand
    now = quorum.now
    assert answer(leader, caught_up_fetch(quorum, leader, 4, 0), now)  # a zero wait answers at once
    leader.client.handle_request(500, caught_up_fetch(quorum, leader, 4, 400), now)
    assert not [a for a in leader.client.poll(now + 100) if isinstance(a, Respond) and a.handle == 500]
    leader.client.append(["wake up"], now + 100)
    woken = [a for a in leader.client.poll(now + 101) if isinstance(a, Respond) and a.handle == 500]
    assert len(woken) == 1 and b"wake up" in bytes(woken[0].body.responses[0].partitions[0].records)
    # With nothing to send, the answer comes at max_wait, empty.
    quorum.now = now + 200
    quorum.run(300)
    leader.client.handle_request(501, caught_up_fetch(quorum, leader, 4, 400), quorum.now)
    assert leader.client.next_deadline_ms() <= quorum.now + 400
    late = [a for a in leader.client.poll(quorum.now + 400) if isinstance(a, Respond) and a.handle == 501]
    assert len(late) == 1 and not late[0].body.responses[0].partitions[0].records


def test_a_fetch_whose_high_watermark_is_behind_the_leaders_is_answered_at_once() -> None:
    """KIP-1166 (Fetch v18): the follower says which high watermark it has, and the leader answers
    at once when its own is higher, as after an answer that never reached the follower."""
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    quorum.run(700)
    quorum.crash(4)
    hw = leader.client.high_watermark
    assert hw is not None and hw > 0
    caught_up = caught_up_fetch(quorum, leader, 4, 400)
    answer(leader, dataclasses.replace(caught_up, max_wait=datetime.timedelta(0)))  # the leader has sent it hw

    def with_high_watermark(value: int) -> FetchRequest:
        partition = dataclasses.replace(caught_up.topics[0].partitions[0], high_watermark=value)
        return dataclasses.replace(caught_up, topics=(dataclasses.replace(caught_up.topics[0], partitions=(partition,)),))

    leader.client.handle_request(700, with_high_watermark(hw), quorum.now)
    assert not [a for a in leader.client.poll(quorum.now + 1) if isinstance(a, Respond)]  # parked: nothing new
    leader.client.handle_request(701, with_high_watermark(hw - 1), quorum.now)
    (early,) = [a for a in leader.client.poll(quorum.now + 1) if isinstance(a, Respond) and a.handle == 701]
    assert early.body.responses[0].partitions[0].high_watermark == hw


def test_the_raft_fetch_carries_the_followers_high_watermark_and_is_rebuilt_for_older_peers() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    quorum.elect()
    quorum.run(700)
    observer = quorum.nodes[4].client
    fetch = observer._fetch_request()
    partition = fetch.topics[0].partitions[0]
    assert type(fetch).__version__ == 18 and partition.high_watermark == observer.high_watermark
    assert fetch_request_in_version(fetch, 18) is fetch
    for version in range(13, 18):
        older = fetch_request_in_version(fetch, version)
        assert type(older).__version__ == version
        (older_partition,) = older.topics[0].partitions
        assert not hasattr(older_partition, "high_watermark")
        assert (older_partition.fetch_offset, older_partition.last_fetched_epoch, older_partition.current_leader_epoch) == (
            partition.fetch_offset, partition.last_fetched_epoch, partition.current_leader_epoch,
        )
        replica_id = older.replica_state.replica_id if version >= 15 else older.replica_id
        assert (replica_id, older.cluster_id, older.max_wait, older.topics[0].topic_id) == (4, fetch.cluster_id, fetch.max_wait, fetch.topics[0].topic_id)
        encode_body(older)
    assert fetch_request_in_version(fetch, 17).topics[0].partitions[0].replica_directory_id == partition.replica_directory_id
    assert fetch_request_in_version(fetch, 12) is None


def test_a_waiting_fetch_is_answered_when_the_leader_steps_down() -> None:
    quorum = Quorum([1, 2, 3], observers=[4])
    leader = quorum.elect()
    quorum.run(700)
    quorum.crash(4)
    leader.client.handle_request(600, caught_up_fetch(quorum, leader, 4, 5000), quorum.now)
    leader.client.begin_shutdown(quorum.now, 1000)
    answers = [a for a in leader.client.poll(quorum.now + 1) if isinstance(a, Respond) and a.handle == 600]
    assert len(answers) == 1
    assert answers[0].body.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_fetch_snapshot_errors() -> None:
    from kio.schema.fetch_snapshot.v1.request import FetchSnapshotRequest, PartitionSnapshot, SnapshotId, TopicSnapshot

    quorum = Quorum([1])
    quorum.step()
    node = quorum.nodes[1]
    node.client.append(["s"], quorum.now)
    quorum.run(10)
    snapshot_id = write_snapshot(node, ["s"])

    def request(snapshot: OffsetAndEpoch, position: int, epoch: int = 1) -> FetchSnapshotRequest:
        partition = PartitionSnapshot(partition=0, current_leader_epoch=epoch, snapshot_id=SnapshotId(end_offset=snapshot.offset, epoch=snapshot.epoch), position=position)
        return FetchSnapshotRequest(cluster_id=CLUSTER_ID, replica_id=7, max_bytes=10, topics=(TopicSnapshot(name=METADATA_TOPIC, partitions=(partition,)),))

    ok = answer(node, request(snapshot_id, 0), quorum.now).topics[0].partitions[0]
    assert ok.error_code == ErrorCode.none and len(ok.unaligned_records) == 10 and ok.size > 10
    missing = answer(node, request(OffsetAndEpoch(1, 1), 0), quorum.now).topics[0].partitions[0]
    assert missing.error_code == ErrorCode.snapshot_not_found
    beyond = answer(node, request(snapshot_id, ok.size), quorum.now).topics[0].partitions[0]
    assert beyond.error_code == ErrorCode.position_out_of_range
    fenced = answer(node, request(snapshot_id, 0, epoch=0), quorum.now).topics[0].partitions[0]
    assert fenced.error_code == ErrorCode.fenced_leader_epoch
    wrong_cluster = FetchSnapshotRequest(cluster_id="other", replica_id=7, max_bytes=10, topics=())
    assert answer(node, wrong_cluster, quorum.now).error_code == ErrorCode.inconsistent_cluster_id


def test_voter_changes_are_refused_while_the_voter_set_is_static() -> None:
    from kio.schema.add_raft_voter.v0.request import AddRaftVoterRequest
    from kio.schema.remove_raft_voter.v0.request import RemoveRaftVoterRequest

    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    add = AddRaftVoterRequest(cluster_id=CLUSTER_ID, timeout=datetime.timedelta(seconds=1), voter_id=4, voter_directory_id=uuid.uuid4(), listeners=())
    remove = RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=3, voter_directory_id=None)
    assert answer(leader, add, quorum.now).error_code == ErrorCode.unsupported_version
    assert answer(leader, remove, quorum.now).error_code == ErrorCode.unsupported_version
    assert answer(follower, add, quorum.now).error_code == ErrorCode.not_leader_or_follower


def test_on_disk_logs_replicate_snapshot_and_recover(tmp_path: Path) -> None:
    """The same core over KafkaMetadataLog: segments roll, the log start moves to a snapshot, restarts reopen the files."""
    config = dataclasses.replace(CONFIG, max_fetch_size_bytes=300)
    quorum = Quorum([1, 2, 3], config=config, disk=tmp_path)
    try:
        leader = quorum.elect()
        lagging = next(n for n in quorum.nodes.values() if n is not leader)
        quorum.crash(lagging.node_id)
        expected = []
        for i in range(40):
            expected.append(f"disk-{i:03d}" + "x" * 50)
            leader.client.append([expected[-1]], quorum.now)
            quorum.run(5)
            if i == 19:
                quorum.run(200)
                write_snapshot(leader, leader.records())  # the oldest: the log start never stops at it
        quorum.run(200)
        assert leader.records() == expected
        snapshot_id = write_snapshot(leader, leader.records())
        quorum.run(50)
        assert leader.log.start_offset() == snapshot_id.offset
        restarted = quorum.restart(lagging.node_id)
        leader.client.append(["tail"], quorum.now)
        quorum.run_until(lambda: restarted.records() == [*expected, "tail"])
        assert restarted.log.latest_snapshot_id() == snapshot_id
        # Every node restarts from its files and comes back to the same state.
        for node_id in list(quorum.nodes):
            quorum.crash(node_id)
            quorum.restart(node_id)
        quorum.elect()
        quorum.run_until(lambda: all(n.records() == [*expected, "tail"] for n in quorum.nodes.values()))
    finally:
        for node in quorum.nodes.values():
            node.log.close()


def test_a_prospective_voter_that_grants_a_vote_records_it() -> None:
    quorum = Quorum([1, 2, 3])
    node = quorum.nodes[1]
    node.client.quorum_state.transition_to_unattached(1, 0)
    node.client.quorum_state.transition_to_prospective(0)
    assert isinstance(node.client.quorum_state.state, ProspectiveState)
    # A candidate of the prospective's own epoch: no epoch change on the way to the vote.
    granted = answer(node, vote_request(2, 1)).topics[0].partitions[0]
    assert granted.vote_granted
    assert node.store.read_election_state() == ElectionState(1, None, 2, None)
    # Same epoch, another candidate: the recorded vote stands.
    assert not answer(node, vote_request(3, 1)).topics[0].partitions[0].vote_granted



# -- dynamic voters (KIP-853) ---------------------------------------------------------------------------


def add_voter_request(node_id: int, cluster_id: str = CLUSTER_ID) -> Any:
    from kio.schema.add_raft_voter.v0.request import AddRaftVoterRequest, Listener

    return AddRaftVoterRequest(
        cluster_id=cluster_id,
        timeout=datetime.timedelta(seconds=5),
        voter_id=node_id,
        voter_directory_id=directory(node_id),
        listeners=(Listener(name="CONTROLLER", host=f"node{node_id}", port=9000 + node_id),),
    )


def remove_voter_request(node_id: int) -> Any:
    from kio.schema.remove_raft_voter.v0.request import RemoveRaftVoterRequest

    return RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=node_id, voter_directory_id=directory(node_id))


def ask(quorum: Quorum, node: Node, body: Any, max_ms: int = 10_000) -> Any:
    """Hand ``node`` a request from outside the quorum (an admin tool) and run until it answers."""
    handle = quorum.request(node, body)
    quorum.run_until(lambda: handle in quorum.admin_answers, max_ms)
    return quorum.admin_answers.pop(handle)


def test_dynamic_quorum_starts_from_the_bootstrap_checkpoint_and_a_new_node_learns_the_voters() -> None:
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    assert leader.client.voters == voter_set([1, 2, 3], with_directories=True)
    leader.client.append(["dyn"], quorum.now)
    quorum.run(200)
    # The first leader wrote the voters into the log: a node with an empty log learns them from there.
    observer = quorum.add_node(4)
    assert not observer.client.quorum_state.is_voter() and len(observer.client.voters) == 0
    quorum.run_until(lambda: observer.records() == ["dyn"])
    assert observer.client.voters == leader.client.voters
    assert observer.client.leader_and_epoch == leader.client.leader_and_epoch


def test_add_voter_then_remove_the_leader() -> None:
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    quorum.run(200)
    static = Quorum([1, 2, 3])
    static_leader = static.elect()
    assert ask(static, static_leader, add_voter_request(4)).error_code == ErrorCode.unsupported_version
    new = quorum.add_node(4)
    quorum.run_until(lambda: new.client.high_watermark == leader.client.high_watermark)
    quorum.run(600)  # a fetch or two while caught up
    response = ask(quorum, leader, add_voter_request(4))
    assert response.error_code == ErrorCode.none, response
    assert leader.client.voters.ids() == {1, 2, 3, 4}
    quorum.run_until(lambda: new.client.quorum_state.is_voter())
    assert ask(quorum, leader, add_voter_request(4)).error_code == ErrorCode.duplicate_voter
    # Four voters: two of the old three down and no majority is left...
    others = [n for n in quorum.nodes.values() if n is not leader and n is not new]
    quorum.crash(others[0].node_id)
    quorum.crash(others[1].node_id)
    hw = leader.client.high_watermark
    leader.client.append(["needs three of four"], quorum.now)
    quorum.run(500)
    assert leader.client.high_watermark == hw
    quorum.restart(others[0].node_id)
    quorum.run_until(lambda: "needs three of four" in leader.records())
    quorum.restart(others[1].node_id)
    quorum.run(500)
    # The leader removes itself: it resigns once that is committed and the others carry on.
    old_leader = leader
    leader = quorum.elect()
    assert leader is old_leader
    response = ask(quorum, leader, remove_voter_request(leader.node_id))
    assert response.error_code == ErrorCode.none
    quorum.run_until(lambda: quorum.leader() is not None and quorum.leader() is not old_leader)
    successor = quorum.leader()
    assert successor is not None and successor.client.voters.ids() == {1, 2, 3, 4} - {old_leader.node_id}
    successor.client.append(["after removal"], quorum.now)
    quorum.run_until(lambda: all("after removal" in n.records() for n in quorum.nodes.values()))
    assert not old_leader.client.quorum_state.is_voter()
    assert isinstance(old_leader.client.quorum_state.state, FollowerState)


def test_one_voter_change_at_a_time() -> None:
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    quorum.run(200)
    follower, third = [n for n in quorum.nodes.values() if n is not leader]
    first = quorum.request(leader, remove_voter_request(follower.node_id))
    second = quorum.request(leader, remove_voter_request(third.node_id))  # before the first is committed
    quorum.run_until(lambda: first in quorum.admin_answers and second in quorum.admin_answers)
    assert quorum.admin_answers[first].error_code == ErrorCode.none
    assert quorum.admin_answers[second].error_code == ErrorCode.request_timed_out
    assert leader.client.voters.ids() == {leader.node_id, third.node_id}
    assert ask(quorum, leader, remove_voter_request(99)).error_code == ErrorCode.voter_not_found


def test_dynamic_snapshot_carries_the_voters() -> None:
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    leader.client.append(["a"], quorum.now)
    quorum.run(300)
    snapshot_id = write_snapshot(leader, leader.records())
    quorum.run(50)
    assert leader.log.start_offset() == snapshot_id.offset
    quorum.crash(leader.node_id)
    restarted = quorum.restart(leader.node_id)
    assert restarted.client.voters == voter_set([1, 2, 3], with_directories=True)
    late = quorum.add_node(5)
    quorum.run_until(lambda: late.records() == ["a"])
    assert late.client.voters == restarted.client.voters


# -- a property: faults never break agreement --------------------------------------------------------

FAULT = st.tuples(
    st.sampled_from(["append", "isolate", "heal", "crash", "restart", "wait", "snapshot", "add", "remove"]),
    st.sampled_from([1, 2, 3, 4]),
    st.integers(10, 1500),
)


def take_snapshot(node: Node) -> None:
    """The listener's snapshot at its last delivered batch, when that is committed and past the log start."""
    hw = node.client.high_watermark
    batches = [b.batch for b in node.committed if isinstance(b, CommittedBatch)]
    if hw is None or not batches or batches[-1].last_offset + 1 != hw or node.log.start_offset() >= hw:
        return
    writer = node.client.create_snapshot(OffsetAndEpoch(hw, batches[-1].epoch), 0)
    if writer is not None:
        writer.append(node.records())
        writer.freeze()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FAULT, min_size=3, max_size=16), st.integers(0, 1000), st.booleans())
def test_agreement_under_faults(faults: list[tuple[str, int, int]], seed: int, dynamic: bool) -> None:
    """Committed data is the same prefix everywhere, is never lost, and an epoch has at most one leader;
    with snapshots, and (dynamic) voters added and removed on the way."""
    quorum = Quorum([1, 2, 3], [] if dynamic else [4], seed=seed, dynamic=dynamic)
    if dynamic:
        quorum.add_node(4)
    leaders: dict[int, int] = {}
    counter = 0

    def check() -> None:
        for node in quorum.nodes.values():
            if node.up and node.client.is_leader():
                epoch = node.client.leader_and_epoch[1]
                assert leaders.setdefault(epoch, node.node_id) == node.node_id
        histories = [n.records() for n in quorum.nodes.values()]
        for a in histories:
            for b in histories:
                shorter = min(len(a), len(b))
                assert a[:shorter] == b[:shorter]

    for kind, node_id, ms in faults:
        node = quorum.nodes[node_id]
        leader = quorum.leader()
        if kind == "append" and node.up and node.client.is_leader():
            counter += 1
            node.client.append([f"v{counter}"], quorum.now)
        elif kind == "isolate":
            quorum.isolate(node_id)
        elif kind == "heal":
            quorum.heal()
        elif kind == "crash" and node.up and all(n.up for n in quorum.nodes.values()):
            quorum.crash(node_id)
        elif kind == "restart" and not node.up:
            quorum.restart(node_id)
        elif kind == "snapshot" and node.up:
            take_snapshot(node)
        elif kind in ("add", "remove") and dynamic and leader is not None:
            quorum.request(leader, add_voter_request(node_id) if kind == "add" else remove_voter_request(node_id))
        for _ in range(ms // 50):
            quorum.run(50)
            check()
    for node_id, node in list(quorum.nodes.items()):
        if not node.up:
            quorum.restart(node_id)
    quorum.heal()

    def final_everywhere() -> bool:
        return all(any(r.startswith("final") for r in n.records()) for n in quorum.nodes.values())

    # An append is only a proposal: a leader may lose it to a successor, so ask again until one lands.
    for attempt in range(10):
        leader = quorum.elect(30_000)
        leader.client.append([f"final{attempt}"], quorum.now)
        for _ in range(60):
            quorum.run(50)
            check()
            if final_everywhere():
                break
        if final_everywhere():
            break
    assert final_everywhere()


# -- the kraft.version upgrade of a static quorum (KIP-853, Kafka 4.4's kafka-features upgrade) ----------


def update_voter_request(node_id: int, epoch: int, low: int = 0, high: int = 1, directory_id: uuid.UUID | None = None) -> Any:
    from kio.schema.update_raft_voter.v0.request import KRaftVersionFeature, Listener, UpdateRaftVoterRequest

    return UpdateRaftVoterRequest(
        cluster_id=CLUSTER_ID,
        current_leader_epoch=epoch,
        voter_id=node_id,
        voter_directory_id=directory(node_id) if directory_id is None else directory_id,
        listeners=(Listener(name="CONTROLLER", host=f"node{node_id}", port=9000 + node_id),),
        k_raft_version_feature=KRaftVersionFeature(min_supported_version=low, max_supported_version=high),
    )


def reported_voters(leader: Node) -> VoterSet:
    """The leader's in-memory voters of a kraft.version 0 quorum, as the voters reported themselves."""
    from raft.kraft_version_upgrade import Voters
    from raft.quorum_state import LeaderState

    state = leader.client.quorum_state.state
    assert isinstance(state, LeaderState) and isinstance(state.kraft_version_upgrade, Voters)
    return state.kraft_version_upgrade.voters


def test_static_voters_report_themselves_to_each_leader_at_kraft_version_0() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    assert leader.client.kraft_version == 0
    # The leader knows itself at once; the others tell it a fetch timeout after following it.
    assert reported_voters(leader).get(leader.node_id) == VoterNode(leader.node_id, directory(leader.node_id), (Endpoint("CONTROLLER", f"node{leader.node_id}", 9000 + leader.node_id),), 0, 1)
    quorum.run(CONFIG.fetch_timeout_ms + 200)
    assert reported_voters(leader) == voter_set([1, 2, 3], with_directories=True)
    # Nothing is written at kraft.version 0: the log's voters stay the configured ones.
    assert leader.client.voters == voter_set([1, 2, 3])
    epoch = leader.client.leader_and_epoch[1]
    assert answer(leader, update_voter_request(2, epoch, low=1, high=1), quorum.now).error_code == ErrorCode.invalid_request  # no kraft.version 0
    assert answer(leader, update_voter_request(2, epoch, low=1, high=0), quorum.now).error_code == ErrorCode.invalid_request
    assert answer(leader, update_voter_request(2, epoch - 1), quorum.now).error_code == ErrorCode.fenced_leader_epoch
    assert answer(leader, update_voter_request(2, epoch, directory_id=uuid.UUID(int=0)), quorum.now).error_code == ErrorCode.invalid_request
    assert answer(leader, update_voter_request(9, epoch), quorum.now).error_code == ErrorCode.voter_not_found


def test_upgrade_of_a_static_quorum_writes_the_reported_voters_then_voters_can_change() -> None:
    from raft.control_records import KRaftVersion
    from raft.kraft_version_upgrade import InvalidUpdateVersionError

    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.run(CONFIG.fetch_timeout_ms + 200)
    epoch = leader.client.leader_and_epoch[1]
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    with pytest.raises(NotLeaderError, match="Upgrade kraft version failed because the replica is not the current leader"):
        follower.client.upgrade_kraft_version(epoch, 1, False, quorum.now)
    with pytest.raises(NotLeaderError, match=f"the given epoch {epoch - 1} is stale. Current leader epoch is {epoch}"):
        leader.client.upgrade_kraft_version(epoch - 1, 1, False, quorum.now)
    with pytest.raises(ValueError):
        leader.client.upgrade_kraft_version(epoch, 2, False, quorum.now)
    assert leader.client.upgrade_kraft_version(epoch, 1, True, quorum.now)  # validate only: nothing written
    assert leader.client.upgrade_kraft_version(epoch, 0, False, quorum.now) is False  # already there
    assert leader.client.upgrade_kraft_version(epoch, 1, False, quorum.now)
    assert leader.client.upgrade_kraft_version(epoch, 1, False, quorum.now) is False  # asked for in this epoch
    with pytest.raises(InvalidUpdateVersionError, match=r"Invalid concurrent upgrade of kraft.version from version Version\[kraftVersion=KRAFT_VERSION_1\] to KRAFT_VERSION_0"):
        leader.client.upgrade_kraft_version(epoch, 0, False, quorum.now)
    dynamic = voter_set([1, 2, 3], with_directories=True)
    quorum.run_until(lambda: all(n.client.kraft_version == KRaftVersion.KRAFT_VERSION_1 and n.client.voters == dynamic for n in quorum.nodes.values()))
    quorum.run_until(lambda: leader.client.high_watermark is not None and leader.client.high_watermark >= leader.log.end_offset())
    # KRaftVersionRecord(1) and the VotersRecord in one control batch, as Kafka writes them.
    kinds = [[c.type for c in a.batch.control_records] for a in leader.committed if isinstance(a, CommittedBatch) and a.batch.control_records]
    assert [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS] in kinds
    # A restarted voter keeps the log's voters over its configured ones.
    restarted = quorum.restart(follower.node_id)
    assert restarted.client.voters == dynamic and restarted.client.kraft_version == KRaftVersion.KRAFT_VERSION_1
    quorum.run(500)
    # kraft.version 1: voters come and go.
    removed = next(n for n in quorum.nodes.values() if n is not leader and n.node_id != follower.node_id)
    assert ask(quorum, leader, remove_voter_request(removed.node_id)).error_code == ErrorCode.none
    assert leader.client.voters.ids() == {1, 2, 3} - {removed.node_id}
    new = quorum.add_node(4)
    quorum.run_until(lambda: new.client.high_watermark == leader.client.high_watermark)
    quorum.run(600)
    assert ask(quorum, leader, add_voter_request(4)).error_code == ErrorCode.none
    quorum.run_until(lambda: new.client.quorum_state.is_voter())
    # A later leader starts at kraft.version 1: a downgrade is refused by the Raft layer too.
    quorum.crash(leader.node_id)
    successor = quorum.elect()
    with pytest.raises(InvalidUpdateVersionError, match="Invalid upgrade of kraft.version from version KRAFT_VERSION_1 to KRAFT_VERSION_0 because the new version is a downgrade"):
        successor.client.upgrade_kraft_version(successor.client.leader_and_epoch[1], 0, False, quorum.now)


def test_upgrade_is_refused_until_every_voter_has_reported_that_it_supports_it() -> None:
    from raft.kraft_version_upgrade import InvalidUpdateVersionError

    quorum = Quorum([1, 2, 3])
    quorum.crash(3)
    leader = quorum.elect()
    quorum.run(CONFIG.fetch_timeout_ms + 200)
    epoch = leader.client.leader_and_epoch[1]
    with pytest.raises(InvalidUpdateVersionError, match="Invalid upgrade of kraft.version to KRAFT_VERSION_1 because not all of the voters support it"):
        leader.client.upgrade_kraft_version(epoch, 1, False, quorum.now)
    assert leader.client.kraft_version == 0
    quorum.restart(3)
    quorum.run_until(lambda: reported_voters(leader).supports_version(1))
    assert leader.client.upgrade_kraft_version(epoch, 1, False, quorum.now)


def voters_records_written(leader: Node) -> int:
    return sum(c.type == ControlRecordType.KRAFT_VOTERS for a in leader.committed if isinstance(a, CommittedBatch) for c in a.batch.control_records)


def test_a_voter_that_restarts_with_other_listeners_has_the_leader_write_them_at_kraft_version_1() -> None:
    """Kafka's voterNodeNeedsUpdate: at kraft.version 1 a voter the log describes otherwise than it
    is sends UpdateRaftVoter, and the leader writes a VotersRecord with its endpoints; a voter the
    log describes rightly sends none."""
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    quorum.run(3 * CONFIG.fetch_timeout_ms)
    written = voters_records_written(leader)
    assert leader.client.voters == voter_set([1, 2, 3], with_directories=True)
    follower = next(n for n in quorum.nodes.values() if n is not leader)
    moved = (Endpoint("CONTROLLER", f"node{follower.node_id}", 9000 + follower.node_id), Endpoint("CONTROLLER_TLS", f"node{follower.node_id}", 9100 + follower.node_id))
    quorum.restart(follower.node_id, listeners=moved)
    quorum.run_until(lambda: all(set(n.client.voters.get(follower.node_id).endpoints) == set(moved) for n in quorum.nodes.values()))  # type: ignore[union-attr]
    assert voters_records_written(leader) == written + 1
    # Described rightly now, on every voter: nothing more is written.
    quorum.run(3 * CONFIG.fetch_timeout_ms)
    assert voters_records_written(leader) == written + 1


def test_a_truncated_upgrade_takes_the_voter_back_to_kraft_version_0() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    quorum.run(CONFIG.fetch_timeout_ms + 200)
    # The leader writes the upgrade alone: cut off, it never commits, and a new leader's log wins.
    quorum.isolate(leader.node_id)
    assert leader.client.upgrade_kraft_version(leader.client.leader_and_epoch[1], 1, False, quorum.now)
    assert leader.client.kraft_version == 1
    others = [n for n in quorum.nodes.values() if n is not leader]
    quorum.run_until(lambda: any(n.client.is_leader() for n in others))
    successor = next(n for n in others if n.client.is_leader())
    successor.client.append(["after"], quorum.now)
    quorum.heal()
    quorum.run_until(lambda: "after" in leader.records())
    assert leader.client.kraft_version == 0 and leader.client.voters == voter_set([1, 2, 3])
