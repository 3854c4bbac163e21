"""KafkaRaftClient: the metadata quorum's Raft core (KIP-595, KIP-996 pre-vote, KIP-630 snapshots), sans-IO.

Requests, responses and the time come in; ``poll`` hands back what to do: requests to send,
answers to give, committed batches, snapshots to load and leader changes for the listener.
Nothing here blocks, sleeps or reads a clock, so one process can run a whole quorum on a
virtual clock (tests/unit/raft_simulation.py) and the asyncio shell (broker/raft_manager.py)
only carries messages.

Replication is pull based as in Kafka: followers and observers Fetch from the leader with
their log end and last fetched epoch; the leader answers with records, with the point where
their log diverged (they truncate and fetch again), or with the snapshot to fetch when they
are below its log start. The high watermark is the offset a majority of voters have flushed,
counted only once it passes the LeaderChange batch that opens the leader's epoch.

Voters are either static (controller.quorum.voters, kraft.version 0) or the latest VotersRecord
of the log or snapshot (kraft.version 1, KIP-853, raft/voter_history.py): the leader then takes
AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter, one change at a time. A static quorum's voters
tell its leader their directory ids, endpoints and kraft.version ranges (UpdateRaftVoter, kept in
memory), which lets ``upgrade_kraft_version`` write KRaftVersionRecord(1) and the VotersRecord
that makes it dynamic, as Kafka 4.4's kafka-features upgrade --feature kraft.version=1 does.

Answers are built in the version of the request they answer (protocol.entities.build), so
tools speaking older DescribeQuorum versions are served too. Fetch requests may arrive as kio
entities (from the simulation) or as protocol.fetch_request.FetchRequest (from the server's
fast reader); both are read by field name.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import random
import uuid
from dataclasses import dataclass
from typing import Any, Generic, Sequence

from kio.schema.begin_quorum_epoch.v1.request import BeginQuorumEpochRequest
from kio.schema.begin_quorum_epoch.v1.request import LeaderEndpoint as BeginLeaderEndpoint
from kio.schema.begin_quorum_epoch.v1.request import PartitionData as BeginPartition
from kio.schema.begin_quorum_epoch.v1.request import TopicData as BeginTopic
from kio.schema.end_quorum_epoch.v1.request import EndQuorumEpochRequest
from kio.schema.end_quorum_epoch.v1.request import LeaderEndpoint as EndLeaderEndpoint
from kio.schema.end_quorum_epoch.v1.request import PartitionData as EndPartition
from kio.schema.end_quorum_epoch.v1.request import ReplicaInfo
from kio.schema.end_quorum_epoch.v1.request import TopicData as EndTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v18.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v18.request import ReplicaState as FetchReplicaState
from kio.schema.fetch_snapshot.v1.request import FetchSnapshotRequest, PartitionSnapshot, TopicSnapshot
from kio.schema.fetch_snapshot.v1.request import SnapshotId as RequestSnapshotId
from kio.schema.update_raft_voter.v0.request import KRaftVersionFeature as UpdateVoterKRaftVersionFeature
from kio.schema.update_raft_voter.v0.request import Listener as UpdateVoterListener
from kio.schema.update_raft_voter.v0.request import UpdateRaftVoterRequest
from kio.schema.vote.v2.request import PartitionData as VotePartition
from kio.schema.vote.v2.request import TopicData as VoteTopic
from kio.schema.vote.v2.request import VoteRequest

from kio.static.primitive import i16, i32, i64, u16

from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested, nested_or_none
from protocol.fetch_request import NO_HIGH_WATERMARK
from protocol.records import build_batch, iter_batches, iter_records
from raft.batch_accumulator import BatchAccumulator, RecordBatchTooLargeError
from raft.control_records import KRaftVersion, build_control_batch, decode_control_record, kraft_version_record, leader_change_message, snapshot_footer, snapshot_header
from raft.kraft_version_upgrade import InvalidUpdateVersionError, Version, Voters
from raft.quorum_state import (
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    QuorumState,
    ReplicaState,
    ResignedState,
    UnattachedState,
)
from raft.quorum_state_store import QuorumStateStore
from raft.raft_config import RaftConfig
from raft.records import Batch, RecordSerde, T
from raft.replicated_log import OffsetAndEpoch, RawSnapshotWriter, ReplicatedLog, ValidationKind
from raft.voter_history import VoterSetHistory, snapshot_control_batch
from raft.voter_set import Endpoint, VoterNode, VoterSet, directory_or_none

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)
METADATA_PARTITION = 0
# The Fetch versions a Raft follower or observer can send. Kafka's Raft client sends the newest one
# its peer's ApiVersions allows (KafkaNetworkChannel's FetchRequest.SimpleBuilder; its NetworkClient
# discovers the versions), whatever the metadata.version: v18 to a Kafka 4.1+ node, whose leader
# answers at once a follower whose HighWatermark (KIP-1166) is behind its own. It is built at the
# newest and rebuilt older by ``fetch_request_in_version`` for an older peer; v13 is Kafka 3.3's.
FETCH_VERSIONS = range(13, 19)
FIRST_REPLICA_STATE_VERSION = 15  # Fetch: ReplicaState (id and epoch) replaces ReplicaId
FETCH_VERSION = FETCH_VERSIONS[-1]  # the one built; also the answer's when the caller gives no version
# The kraft.version range this build supports (Kafka 4.4's KRaftVersion 0 and 1), told to the leader in UpdateRaftVoter.
SUPPORTED_KRAFT_VERSION = (KRaftVersion.KRAFT_VERSION_0, KRaftVersion.KRAFT_VERSION_1)
# Kafka's KafkaRaftClient checks the metadata log's retention this often (a constant there too).
METADATA_LOG_CLEAN_INTERVAL_MS = 60_000
_RECORD_OVERHEAD = 21
_BATCH_OVERHEAD = 61


class NotLeaderError(Exception):
    """``append`` on a node that is not the leader (or is resigning)."""


# -- actions -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    correlation_id: int
    destination_id: int  # -1 for a bootstrap server
    destination: tuple[str, int]
    body: Any
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Respond:
    handle: int
    body: Any


@dataclass(frozen=True, slots=True)
class CommittedBatch(Generic[T]):
    batch: Batch[T]


@dataclass(frozen=True, slots=True)
class LoadSnapshot(Generic[T]):
    snapshot_id: OffsetAndEpoch
    records: list[T]


@dataclass(frozen=True, slots=True)
class LeaderChange:
    leader_id: int | None
    epoch: int


Action = Send | Respond | CommittedBatch[Any] | LoadSnapshot[Any] | LeaderChange


# -- snapshot writing ----------------------------------------------------------------------------------


class SnapshotWriter(Generic[T]):
    """A snapshot as record batches: a header control batch, the records, a footer; offsets from 0."""

    def __init__(self, raw: RawSnapshotWriter, serde: RecordSerde[T], last_contained_log_time_ms: int, max_batch_size: int, voters: VoterSet | None = None) -> None:
        self._raw = raw
        self._serde = serde
        self._time_ms = last_contained_log_time_ms
        self._max_batch_size = max_batch_size
        self._epoch = raw.snapshot_id.epoch
        self._raw.append(build_control_batch([snapshot_header(last_contained_log_time_ms)], last_contained_log_time_ms, base_offset=0, epoch=self._epoch))
        self._next_offset = 1
        if voters is not None:
            # kraft.version 1: the snapshot carries the voter set, as the log it replaces did.
            self._raw.append(snapshot_control_batch(voters, last_contained_log_time_ms, base_offset=1, epoch=self._epoch))
            self._next_offset = 3
        self._frozen = False

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._raw.snapshot_id

    def append(self, records: Sequence[T]) -> None:
        if self._frozen:
            raise ValueError(f"snapshot {self.snapshot_id} is frozen")
        chunk: list[bytes] = []
        size = _BATCH_OVERHEAD
        for record in records:
            value = self._serde.encode(record)
            if chunk and size + len(value) + _RECORD_OVERHEAD > self._max_batch_size:
                self._write(chunk)
                chunk, size = [], _BATCH_OVERHEAD
            chunk.append(value)
            size += len(value) + _RECORD_OVERHEAD
        if chunk:
            self._write(chunk)

    def _write(self, values: list[bytes]) -> None:
        entries = [(None, v, (), self._time_ms) for v in values]
        self._raw.append(build_batch(entries, base_offset=self._next_offset, partition_leader_epoch=self._epoch))
        self._next_offset += len(values)

    def freeze(self) -> None:
        self._raw.append(build_control_batch([snapshot_footer()], self._time_ms, base_offset=self._next_offset, epoch=self._epoch))
        self._raw.freeze()
        self._frozen = True

    def close(self) -> None:
        self._raw.close()


# -- bookkeeping -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Inflight:
    destination_key: int
    api_key: ApiKey
    expires_ms: int


@dataclass(slots=True)
class _ParkedFetch:
    """A Fetch with nothing to return yet: answered when data arrives, the high watermark moves,
    the leadership changes or ``max_wait`` passes (Kafka's fetch purgatory)."""

    body: Any
    version: int
    deadline_ms: int
    fetch_offset: int
    epoch: int


@dataclass(slots=True)
class _PendingVoterChange:
    """An AddRaftVoter/RemoveRaftVoter/UpdateRaftVoter whose VotersRecord is in the log: answered once it is committed."""

    handle: int
    api_key: ApiKey
    version: int
    offset: int
    deadline_ms: int
    removes_leader: bool
    # AddRaftVoter v1 with AckWhenCommitted false: answered once written, still one change at a time.
    answered: bool = False


def _java_enum(kraft_version: KRaftVersion) -> str:
    """How Kafka's messages print a KRaftVersion (its enum constant's name)."""
    return f"KRAFT_VERSION_{int(kraft_version)}"


def fetch_request_in_version(body: FetchRequest, version: int) -> Any | None:
    """The Raft Fetch ``body`` as Fetch ``version``, for a peer whose newest is that (Kafka's
    SimpleBuilder.build): the fields the version has; below v15 the replica id moves from
    ReplicaState to the top. None below the oldest version this client speaks."""
    if version == FETCH_VERSION:
        return body
    if version not in FETCH_VERSIONS:
        return None
    schema = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    topics = tuple(
        build(schema.FetchTopic, topic_id=t.topic_id, partitions=tuple(build(schema.FetchPartition, **_fields(p)) for p in t.partitions)) for t in body.topics
    )
    if version >= FIRST_REPLICA_STATE_VERSION:
        replica: dict[str, Any] = {"replica_state": build(schema.ReplicaState, **_fields(body.replica_state))}
    else:
        replica = {"replica_id": body.replica_state.replica_id}
    return build(schema.FetchRequest, **_fields(body) | replica | {"topics": topics, "forgotten_topics_data": ()})


def _fields(entity: Any) -> dict[str, Any]:
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def _request_version(body: Any, default: int) -> int:
    return int(getattr(type(body), "__version__", default))


def _one_partition(topics: Any, partitions_attr: str = "partitions") -> Any | None:
    """The single partition of a Raft request or response, None when the shape is not one topic, one partition."""
    if not topics or len(topics) != 1:
        return None
    partitions = getattr(topics[0], partitions_attr, None)
    if not partitions or len(partitions) != 1:
        return None
    return partitions[0]


def _is_metadata_topic(topic: Any) -> bool:
    topic_id = getattr(topic, "topic_id", None)
    if topic_id is not None and topic_id != uuid.UUID(int=0):
        return bool(topic_id == METADATA_TOPIC_ID)
    name = getattr(topic, "topic", None) or getattr(topic, "topic_name", None) or getattr(topic, "name", None)
    return bool(name == METADATA_TOPIC)


class KafkaRaftClient(Generic[T]):
    def __init__(
        self,
        *,
        node_id: int,
        directory_id: uuid.UUID,
        cluster_id: str,
        config: RaftConfig,
        log: ReplicatedLog,
        store: QuorumStateStore,
        serde: RecordSerde[T],
        voters: VoterSet | None,
        bootstrap_servers: list[tuple[str, int]],
        now_ms: int,
        rng: random.Random | None = None,
        local_listeners: Sequence[Endpoint] = (),
    ) -> None:
        """``voters``: the static voters of controller.quorum.voters, None when the log names them;
        once the log names them (a dynamic quorum, or a static one upgraded to kraft.version 1) the
        log wins. ``local_listeners``: this node's controller endpoints, which it tells the leader
        (UpdateRaftVoter); by default its own entry in ``voters``."""
        self.node_id = node_id
        self.directory_id = directory_id
        self.cluster_id = cluster_id
        self.config = config
        self.log = log
        self.serde = serde
        self.bootstrap_servers = list(bootstrap_servers)
        self.random = rng if rng is not None else random.Random()
        self._static_voters = voters
        self._history = VoterSetHistory()
        self._pending_voter_change: _PendingVoterChange | None = None
        own = voters.get(node_id) if voters is not None else None
        self._local_listeners = tuple(local_listeners) or (own.endpoints if own is not None else ())
        voters = self._read_voter_history(log) or voters
        self.quorum = QuorumState(node_id, directory_id, voters if voters is not None else VoterSet([]), config, store, self.random)
        self.quorum.initialize(now_ms)
        if isinstance(self.quorum.state, ResignedState) and self._is_only_voter():
            # As Kafka's initialize: the only voter stands at once rather than waiting out an election
            # timeout no other node can end (every restart of a single node paid 1-2 s of it).
            self.quorum.state.election_deadline_ms = now_ms
        self._now = now_ms
        self._actions: list[Action] = []
        self._correlation = 0
        self._inflight: dict[int, _Inflight] = {}
        self._busy: dict[int, int] = {}  # destination key -> correlation id of its one request in flight
        self._backoff_until: dict[int, int] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        self._high_watermark: int | None = None
        self._next_delivery = log.start_offset()
        self._next_clean_ms = now_ms + METADATA_LOG_CLEAN_INTERVAL_MS
        self._cleaned_for_snapshot: OffsetAndEpoch | None = None  # the latest snapshot when the log was last cleaned
        self._fired_leader: tuple[int | None, int] | None = None
        self._shutdown_deadline_ms: int | None = None
        self._dirty = True
        self._leader_addresses: dict[int, tuple[str, int]] = {}
        snapshot = log.latest_snapshot()
        if snapshot is not None:
            self._load_snapshot(snapshot)

    def _read_voter_history(self, log: ReplicatedLog) -> VoterSet | None:
        snapshot = log.latest_snapshot()
        start = log.start_offset()
        if snapshot is not None:
            self._history.load_snapshot(snapshot.snapshot_id, snapshot.read(0, snapshot.size_in_bytes()))
            start = max(start, snapshot.snapshot_id.offset)
        while start < log.end_offset():
            data = log.read(start, self.config.max_fetch_size_bytes).records
            self._history.scan(data)
            ends = [header.next_offset for header, _ in iter_batches(data)]
            if not ends:
                break
            start = ends[-1]
        return self._history.latest()

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def quorum_state(self) -> QuorumState:
        return self.quorum

    @property
    def voters(self) -> VoterSet:
        return self.quorum.voters

    @property
    def high_watermark(self) -> int | None:
        return self._high_watermark

    @property
    def kraft_version(self) -> KRaftVersion:
        """The latest kraft.version in the local log, committed or not (Kafka's RaftClient.kraftVersion)."""
        return self._history.kraft_version

    def _reconfig_supported(self) -> bool:
        return self._history.kraft_version >= KRaftVersion.KRAFT_VERSION_1

    @property
    def leader_and_epoch(self) -> tuple[int | None, int]:
        state = self.quorum.state
        if isinstance(state, ResignedState):
            return None, state.epoch
        if isinstance(state, ProspectiveState):
            return state.known_leader_id, state.epoch
        return state.leader_id, state.epoch

    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    def leader_endpoint(self) -> tuple[str, int] | None:
        leader_id, _ = self.leader_and_epoch
        if leader_id is None:
            return None
        return self._address_of(leader_id)

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == node_id and state.leader_address is not None:
            return state.leader_address
        address = self.quorum.voters.address(node_id)
        return address if address is not None else self._leader_addresses.get(node_id)

    # -- the caller's operations -------------------------------------------------------------------------

    def append(self, records: Sequence[T], now_ms: int) -> int:
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.resign_requested or self._shutdown_deadline_ms is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader (epoch {state.epoch})")
        self._dirty = True
        return state.accumulator.append(records, now_ms)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> SnapshotWriter[T] | None:
        """A writer for a snapshot of the state up to ``snapshot_id.offset`` (at most the high watermark); None if it exists."""
        if self._high_watermark is None or snapshot_id.offset > self._high_watermark:
            raise ValueError(f"snapshot {snapshot_id} is past the high watermark {self._high_watermark}")
        raw = self.log.create_new_snapshot(snapshot_id)
        if raw is None:
            return None
        self._dirty = True
        # A VotersRecord exists only at kraft.version 1: a snapshot from before an upgrade names none.
        voters = self._history.as_of(snapshot_id.offset)
        return SnapshotWriter(raw, self.serde, last_contained_log_time_ms, self.config.max_batch_size_bytes, voters)

    def begin_shutdown(self, now_ms: int, timeout_ms: int) -> None:
        if self._shutdown_deadline_ms is None:
            self._shutdown_deadline_ms = now_ms + timeout_ms
            self._dirty = True

    def is_shutdown_complete(self, now_ms: int) -> bool:
        """Done when the timeout passed, or when this node no longer matters to the quorum's progress:
        an observer, the only voter, or a voter that sees another node lead."""
        if self._shutdown_deadline_ms is None:
            return False
        if now_ms >= self._shutdown_deadline_ms:
            return True
        if self.quorum.is_observer() or not (self.quorum.voters.ids() - {self.node_id}):
            return True
        state = self.quorum.state
        return isinstance(state, FollowerState)

    # -- events ------------------------------------------------------------------------------------------

    def handle_request(self, handle: int, body: Any, now_ms: int, version: int | None = None) -> None:
        """``version``: the request's, when ``body`` does not carry it (the broker's own Fetch
        reader's requests): the answer is built in that version."""
        self._now = max(self._now, now_ms)
        self._dirty = True
        api_key = getattr(type(body), "__api_key__", None)
        if api_key is None and hasattr(body, "replica_id") and hasattr(body, "max_wait_ms"):
            api_key = ApiKey.FETCH
        handler = {
            ApiKey.VOTE: self._handle_vote_request,
            ApiKey.BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch_request,
            ApiKey.END_QUORUM_EPOCH: self._handle_end_quorum_epoch_request,
            ApiKey.FETCH: self._handle_fetch_request,
            ApiKey.FETCH_SNAPSHOT: self._handle_fetch_snapshot_request,
            ApiKey.DESCRIBE_QUORUM: self._handle_describe_quorum_request,
            ApiKey.ADD_RAFT_VOTER: self._handle_voter_change_request,
            ApiKey.REMOVE_RAFT_VOTER: self._handle_voter_change_request,
            ApiKey.UPDATE_RAFT_VOTER: self._handle_update_voter_request,
        }.get(api_key)  # type: ignore[call-overload]
        if handler is None:
            raise TypeError(f"{type(body).__name__} is not a Raft request")
        if handler == self._handle_fetch_request:
            self._handle_fetch_request(handle, body, self._now, version)
            return
        handler(handle, body, self._now)

    def handle_response(self, correlation_id: int, body: Any | None, now_ms: int) -> None:
        self._now = max(self._now, now_ms)
        self._dirty = True
        inflight = self._inflight.pop(correlation_id, None)
        if inflight is None:
            return  # from an earlier state, or expired: nothing waits for it
        if self._busy.get(inflight.destination_key) == correlation_id:
            del self._busy[inflight.destination_key]
        if inflight.api_key == ApiKey.UPDATE_RAFT_VOTER and body is not None and body.error_code == ErrorCode.unsupported_version:
            return self._handle_update_voter_response(inflight.destination_key, body, self._now)
        if body is None or getattr(body, "error_code", ErrorCode.none) != ErrorCode.none:
            state = self.quorum.state
            if body is None and inflight.api_key == ApiKey.VOTE and isinstance(state, CandidateState):
                state.unanswered.add(inflight.destination_key)
            self._backoff(inflight.destination_key)
            return
        handler = {
            ApiKey.VOTE: self._handle_vote_response,
            ApiKey.BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch_response,
            ApiKey.END_QUORUM_EPOCH: self._handle_end_quorum_epoch_response,
            ApiKey.FETCH: self._handle_fetch_response,
            ApiKey.FETCH_SNAPSHOT: self._handle_fetch_snapshot_response,
            ApiKey.UPDATE_RAFT_VOTER: self._handle_update_voter_response,
        }[inflight.api_key]
        handler(inflight.destination_key, body, self._now)

    def poll(self, now_ms: int) -> list[Action]:
        self._now = now = max(self._now, now_ms)
        self._expire_inflight(now)
        for _ in range(8):  # a state change may allow the next at once (a lone voter: prospective, candidate, leader)
            before = self.quorum.state
            self._poll_state(now)
            if self.quorum.state is before:
                break
        self._complete_parked_fetches(now)
        self._maybe_complete_voter_change(now)
        self._maybe_clean(now)
        self._deliver_committed()
        self._maybe_fire_leader_change()
        self._dirty = False
        actions, self._actions = self._actions, []
        return actions

    def next_deadline_ms(self) -> int:
        if self._dirty or self._actions:
            return self._now
        deadlines = [inflight.expires_ms for inflight in self._inflight.values()]
        deadlines.extend(parked.deadline_ms for parked in self._parked.values())
        state = self.quorum.state
        if isinstance(state, LeaderState):
            deadlines.append(state.check_quorum_deadline_ms)
            deadlines.append(state.begin_epoch_resend_ms)
            drain = state.accumulator.drain_deadline_ms()
            if drain is not None:
                deadlines.append(max(drain, self._now))
        elif isinstance(state, (UnattachedState, ProspectiveState, CandidateState, ResignedState)):
            if state.election_deadline_ms is not None:
                deadlines.append(state.election_deadline_ms)
            if isinstance(state, CandidateState) and state.backoff_until_ms is not None:
                deadlines.append(state.backoff_until_ms)
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
        deadlines.extend(t for t in self._backoff_until.values() if t > self._now)
        if self.quorum.is_observer() and not isinstance(state, FollowerState) and not self._busy:
            deadlines.append(self._now + self.config.retry_backoff_ms)
        if self._shutdown_deadline_ms is not None:
            deadlines.append(self._shutdown_deadline_ms)
        if self._pending_voter_change is not None:
            deadlines.append(self._pending_voter_change.deadline_ms)
        return max(min(min(deadlines, default=self._now + self.config.fetch_timeout_ms), self._next_clean_ms), self._now)

    # -- requests out --------------------------------------------------------------------------------------

    def _can_send(self, key: int, now: int) -> bool:
        return key not in self._busy and self._backoff_until.get(key, 0) <= now

    def _send(self, key: int, destination_id: int, address: tuple[str, int], api_key: ApiKey, body: Any, now: int) -> None:
        self._correlation += 1
        correlation_id = self._correlation
        timeout_ms = self.config.request_timeout_ms
        self._inflight[correlation_id] = _Inflight(key, api_key, now + timeout_ms)
        self._busy[key] = correlation_id
        self._actions.append(Send(correlation_id, destination_id, address, body, timeout_ms))

    def _send_to_voter(self, voter_id: int, api_key: ApiKey, body: Any, now: int) -> bool:
        address = self._address_of(voter_id)
        if address is None or not self._can_send(voter_id, now):
            return False
        self._send(voter_id, voter_id, address, api_key, body, now)
        return True

    def _backoff(self, key: int) -> None:
        self._backoff_until[key] = self._now + self.config.retry_backoff_ms

    def _expire_inflight(self, now: int) -> None:
        """Forget requests whose answer is overdue: the shell normally reports them, a lossy network may not."""
        for correlation_id, inflight in list(self._inflight.items()):
            if inflight.expires_ms <= now:
                del self._inflight[correlation_id]
                if self._busy.get(inflight.destination_key) == correlation_id:
                    del self._busy[inflight.destination_key]
                self._backoff(inflight.destination_key)

    def _reset_connections(self) -> None:
        """A new state sends afresh: answers to the old state's requests are dropped when they come."""
        self._inflight.clear()
        self._busy.clear()
        self._backoff_until.clear()

    def _leader_endpoints(self) -> list[tuple[str, str, int]]:
        voter = self.quorum.voters.get(self.node_id)
        return [] if voter is None else [(e.listener, e.host, e.port) for e in voter.endpoints]

    def _current_leader_endpoint(self) -> tuple[int, str, int] | None:
        leader_id, _ = self.leader_and_epoch
        if leader_id is None:
            return None
        address = self._address_of(leader_id)
        return None if address is None else (leader_id, address[0], address[1])

    # -- state transitions -----------------------------------------------------------------------------

    def _on_leave_state(self) -> None:
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.snapshot_writer is not None:
            state.snapshot_writer.close()
            state.snapshot_writer = None
        self._reset_connections()

    def _after_transition(self, was_leader: bool) -> None:
        if was_leader and not isinstance(self.quorum.state, LeaderState):
            self._complete_parked_fetches(self._now, force=True)
            self._maybe_complete_voter_change(self._now)

    def _transition_to_unattached(self, epoch: int, now: int, election_deadline_ms: int | None = None) -> None:
        was_leader = self.is_leader()
        self._on_leave_state()
        self.quorum.transition_to_unattached(epoch, now, election_deadline_ms)
        self._after_transition(was_leader)

    def _transition_to_follower(self, epoch: int, leader_id: int, address: tuple[str, int] | None, now: int) -> None:
        was_leader = self.is_leader()
        self._on_leave_state()
        self.quorum.transition_to_follower(epoch, leader_id, address, now)
        self._after_transition(was_leader)

    def _transition_to_prospective(self, now: int, retries: int = 1) -> None:
        self._on_leave_state()
        self.quorum.transition_to_prospective(now, retries)

    def _transition_to_candidate(self, now: int) -> None:
        self._on_leave_state()
        self.quorum.transition_to_candidate(now)

    def _transition_to_leader(self, now: int) -> None:
        self._on_leave_state()
        epoch = self.quorum.epoch
        start = self.log.end_offset()
        accumulator: BatchAccumulator[Any] = BatchAccumulator(epoch, start, self.config.append_linger_ms, self.config.max_batch_size_bytes, self.serde)
        state = self.quorum.transition_to_leader(start, accumulator, now)
        self.log.initialize_leader_epoch(epoch)
        voter_ids = self.quorum.voters.ids()
        accumulator.append_control([leader_change_message(self.node_id, voter_ids, state.granting_voters & voter_ids)], now)
        latest_offset = self._history.latest_offset()
        if latest_offset is not None and latest_offset < 0:
            # The voters come from the bootstrap checkpoint only: the first leader writes them into the
            # log, so a replica that fetches from offset 0 learns them too (Kafka does the same).
            accumulator.append_control([kraft_version_record(KRaftVersion.KRAFT_VERSION_1), self.quorum.voters.to_voters_record()], now)
        if not self._reconfig_supported():
            # Kafka's LeaderState: at kraft.version 0 the leader knows itself fully; the other voters
            # fill in their directory ids, endpoints and kraft.version ranges with UpdateRaftVoter.
            volatile = self.quorum.voters.update_voter_ignoring_directory_id(self._local_voter_node())
            if volatile is None:
                raise AssertionError(f"leader {self.node_id} is not one of the voters {self.quorum.voters}")
            state.kraft_version_upgrade = Voters(volatile)
        state.begin_epoch_resend_ms = now
        self._append_batches(state, now, force=True)

    def _transition_to_resigned(self, state: LeaderState, now: int) -> None:
        self._append_batches(state, now, force=True)
        successors = sorted(
            (rs for vid, rs in state.voter_states.items() if vid != self.node_id and vid in self.quorum.voters),
            key=lambda rs: (-rs.end_offset, rs.replica_id),
        )
        self._on_leave_state()
        self.quorum.transition_to_resigned([rs.replica_id for rs in successors], now)
        self._after_transition(True)

    def _maybe_transition(self, leader_id: int | None, epoch: int, address: tuple[str, int] | None, now: int) -> None:
        """Align with what another node reports: a higher epoch, or the leader of this epoch we did not know."""
        if leader_id is not None and leader_id == self.node_id:
            return  # a report of this node's own leadership adds nothing it does not know
        current = self.quorum.epoch
        if epoch > current:
            if leader_id is not None:
                self._transition_to_follower(epoch, leader_id, address, now)
            else:
                self._transition_to_unattached(epoch, now)
        elif epoch == current and leader_id is not None and not self._knows_leader():
            self._transition_to_follower(epoch, leader_id, address, now)

    def _election_lost(self, state: ProspectiveState, now: int) -> None:
        """KIP-996: a failed pre-vote goes back to the leader it knew, or waits out a backoff unattached."""
        if state.known_leader_id is not None and state.known_leader_id != self.node_id:
            self._transition_to_follower(state.epoch, state.known_leader_id, self._address_of(state.known_leader_id), now)
        else:
            backoff = self.quorum.election_backoff_ms(state.retries)
            self._transition_to_unattached(state.epoch, now, now + max(backoff, self.config.retry_backoff_ms))

    # -- polling by state ------------------------------------------------------------------------------

    def _poll_state(self, now: int) -> None:
        state = self.quorum.state
        if isinstance(state, LeaderState):
            self._poll_leader(state, now)
        elif isinstance(state, ResignedState):
            self._poll_resigned(state, now)
        elif isinstance(state, ProspectiveState):
            self._poll_prospective(state, now)
        elif isinstance(state, CandidateState):
            self._poll_candidate(state, now)
        elif isinstance(state, FollowerState):
            self._poll_follower(state, now)
        else:
            self._poll_unattached(state, now)

    def _may_stand(self) -> bool:
        return self.quorum.is_voter() and self._shutdown_deadline_ms is None

    def _poll_unattached(self, state: UnattachedState, now: int) -> None:
        if self.quorum.is_voter():
            if state.election_deadline_ms is not None and now >= state.election_deadline_ms:
                if self._may_stand():
                    self._transition_to_prospective(now)
                else:
                    state.election_deadline_ms = self.quorum.random_election_timeout_ms(now)
            elif self._is_only_voter() and self._may_stand():
                self._transition_to_prospective(now)
        else:
            self._send_fetch_to_any(now)

    def _is_only_voter(self) -> bool:
        return self.quorum.voters.ids() == {self.node_id}

    def _poll_prospective(self, state: ProspectiveState, now: int) -> None:
        voters = self.quorum.voters
        if len(state.granted & voters.ids()) >= voters.majority_size():
            self._transition_to_candidate(now)
            return
        if len(state.rejected & voters.ids()) > len(voters) - voters.majority_size() or now >= state.election_deadline_ms or self._shutdown_deadline_ms is not None:
            self._election_lost(state, now)
            return
        self._send_votes(state, pre_vote=True, now=now)

    def _poll_candidate(self, state: CandidateState, now: int) -> None:
        voters = self.quorum.voters
        if len(state.granted & voters.ids()) >= voters.majority_size():
            self._transition_to_leader(now)
            return
        if state.backoff_until_ms is not None:
            if now >= state.backoff_until_ms:
                if self._may_stand():
                    self._transition_to_prospective(now, state.retries + 1)
                else:
                    self._transition_to_unattached(state.epoch, now)
            return
        if now >= state.election_deadline_ms or len((state.rejected | state.unanswered) & voters.ids()) > len(voters) - voters.majority_size():
            state.backoff_until_ms = now + self.quorum.election_backoff_ms(state.retries)
            return
        self._send_votes(state, pre_vote=False, now=now)

    def _poll_leader(self, state: LeaderState, now: int) -> None:
        if self._shutdown_deadline_ms is not None or state.resign_requested:
            self._transition_to_resigned(state, now)
            return
        if now >= state.check_quorum_deadline_ms:
            if self.quorum.voters.majority_size() > 1:
                self._transition_to_resigned(state, now)
                return
            state.check_quorum_deadline_ms = now + self.config.check_quorum_timeout_ms
        self._append_batches(state, now, force=False)
        if now >= state.begin_epoch_resend_ms:
            self._send_begin_quorum_epoch(state, now)

    def _poll_resigned(self, state: ResignedState, now: int) -> None:
        if not self.quorum.is_voter() and (not state.unacked_voters or now >= state.election_deadline_ms):
            self._transition_to_unattached(state.epoch, now)  # removed from the voters: fetch as an observer
            return
        if now >= state.election_deadline_ms:
            if self._may_stand():
                # Kafka 4.4's pollResigned: unattached in the next epoch, never back to the one it led.
                # A pre-vote lost in that epoch would store it with no leader and the vote for itself,
                # which Kafka reads back as a candidate there; its followers, which stored it as leader,
                # then name it leader of its own epoch and Kafka halts (IllegalStateException in
                # transitionToFollower), as a Kafka node started on a kbroker directory did.
                self._transition_to_unattached(state.epoch + 1, now, election_deadline_ms=now)
                return
            state.election_deadline_ms = self.quorum.random_election_timeout_ms(now)
        for voter_id in sorted(state.unacked_voters):
            if self._can_send(voter_id, now):
                self._send_to_voter(voter_id, ApiKey.END_QUORUM_EPOCH, self._end_quorum_epoch_request(state), now)

    def _poll_follower(self, state: FollowerState, now: int) -> None:
        if now >= state.fetch_deadline_ms:
            if not self.quorum.is_voter():
                self._transition_to_unattached(state.epoch, now)
                return
            if self._may_stand():
                self._transition_to_prospective(now)
                return
            state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
        address = state.leader_address or self._address_of(state.leader_id_)
        if address is None or not self._can_send(state.leader_id_, now):
            return
        if self._should_send_update_voter(state, now):
            # In place of one Fetch, as Kafka's pollFollowerAsVoter.
            state.update_voter_deadline_ms = now + self.config.fetch_timeout_ms
            self._send(state.leader_id_, state.leader_id_, address, ApiKey.UPDATE_RAFT_VOTER, self._update_voter_request(state), now)
            return
        if state.snapshot_writer is not None:
            body: Any = self._fetch_snapshot_request(state)
            self._send(state.leader_id_, state.leader_id_, address, ApiKey.FETCH_SNAPSHOT, body, now)
        else:
            self._send(state.leader_id_, state.leader_id_, address, ApiKey.FETCH, self._fetch_request(), now)

    def _should_send_update_voter(self, state: FollowerState, now: int) -> bool:
        """Kafka's shouldSendUpdateVoteRequest. At kraft.version 0 a voter tells each leader about
        itself once, so an upgrade to kraft.version 1 can name every voter fully; at 1, whenever the
        log's voters describe it otherwise than it is (it restarted with other controller listeners
        or another kraft.version range), so that the leader writes it anew. A node that knows none
        of its listeners (a test harness's) cannot describe itself, and the leader would refuse it."""
        if not (self.quorum.is_voter() and now >= state.update_voter_deadline_ms):
            return False
        if self._reconfig_supported():
            return bool(self._local_listeners) and self.quorum.voters.voter_node_needs_update(self._local_voter_node())
        return not state.has_updated_leader

    def _update_voter_request(self, state: FollowerState) -> UpdateRaftVoterRequest:
        node = self._local_voter_node()
        return UpdateRaftVoterRequest(
            cluster_id=self.cluster_id,
            current_leader_epoch=i32(state.epoch),
            voter_id=i32(self.node_id),
            voter_directory_id=self.directory_id,
            listeners=tuple(UpdateVoterListener(name=e.listener, host=e.host, port=u16(e.port)) for e in node.endpoints),
            k_raft_version_feature=UpdateVoterKRaftVersionFeature(min_supported_version=i16(node.min_kraft_version), max_supported_version=i16(node.max_kraft_version)),
        )

    def _handle_update_voter_response(self, source: int, body: Any, now: int) -> None:
        """NONE, or UNSUPPORTED_VERSION from a leader that has no UpdateRaftVoter: this leader is told."""
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id_ == source:
            state.has_updated_leader = True
            state.fetch_deadline_ms = now + self.config.fetch_timeout_ms

    def _send_fetch_to_any(self, now: int) -> None:
        """An observer with no leader asks any voter (or bootstrap server); the answer names the leader."""
        if self._busy:
            return
        targets: list[tuple[int, int, tuple[str, int]]] = []
        for voter in self.quorum.voters:
            address = voter.address()
            if voter.voter_id != self.node_id and address is not None:
                targets.append((voter.voter_id, voter.voter_id, address))
        if not targets:
            targets = [(-1 - i, -1, address) for i, address in enumerate(self.bootstrap_servers)]
        ready = [t for t in targets if self._can_send(t[0], now)]
        if not ready:
            return
        key, destination_id, address = self.random.choice(ready)
        self._send(key, destination_id, address, ApiKey.FETCH, self._fetch_request(), now)

    # -- building requests -------------------------------------------------------------------------------

    def _send_votes(self, state: ProspectiveState | CandidateState, pre_vote: bool, now: int) -> None:
        for voter in self.quorum.voters:
            if voter.voter_id in state.granted or voter.voter_id in state.rejected or not self._can_send(voter.voter_id, now):
                continue
            body = VoteRequest(
                cluster_id=self.cluster_id,
                voter_id=voter.voter_id,
                topics=(
                    VoteTopic(
                        topic_name=METADATA_TOPIC,
                        partitions=(
                            VotePartition(
                                partition_index=METADATA_PARTITION,
                                replica_epoch=state.epoch,
                                replica_id=self.node_id,
                                replica_directory_id=self.directory_id,
                                voter_directory_id=voter.directory_id,
                                last_offset_epoch=self.log.last_fetched_epoch(),
                                last_offset=self.log.end_offset(),
                                pre_vote=pre_vote,
                            ),
                        ),
                    ),
                ),
            )
            self._send_to_voter(voter.voter_id, ApiKey.VOTE, body, now)

    def _send_begin_quorum_epoch(self, state: LeaderState, now: int) -> None:
        """To every voter that has not fetched lately: one that restarted learns the leader again from it."""
        period = max(self.config.fetch_timeout_ms // 2, 1)
        for voter in self.quorum.voters:
            if voter.voter_id == self.node_id:
                continue
            replica = state.voter_states.get(voter.voter_id)
            if (replica is not None and replica.last_fetch_ms >= 0 and now - replica.last_fetch_ms < period) or not self._can_send(voter.voter_id, now):
                continue
            body = BeginQuorumEpochRequest(
                cluster_id=self.cluster_id,
                voter_id=voter.voter_id,
                topics=(
                    BeginTopic(
                        topic_name=METADATA_TOPIC,
                        partitions=(
                            BeginPartition(
                                partition_index=METADATA_PARTITION,
                                voter_directory_id=voter.directory_id,
                                leader_id=self.node_id,
                                leader_epoch=state.epoch,
                            ),
                        ),
                    ),
                ),
                leader_endpoints=tuple(BeginLeaderEndpoint(name=n, host=h, port=p) for n, h, p in self._leader_endpoints()),
            )
            self._send_to_voter(voter.voter_id, ApiKey.BEGIN_QUORUM_EPOCH, body, now)
        state.begin_epoch_resend_ms = now + period

    def _end_quorum_epoch_request(self, state: ResignedState) -> EndQuorumEpochRequest:
        voters = self.quorum.voters
        candidates = tuple(
            ReplicaInfo(candidate_id=vid, candidate_directory_id=(voters.get(vid).directory_id if voters.get(vid) else None))  # type: ignore[union-attr]
            for vid in state.preferred_successors
        )
        return EndQuorumEpochRequest(
            cluster_id=self.cluster_id,
            topics=(
                EndTopic(
                    topic_name=METADATA_TOPIC,
                    partitions=(EndPartition(partition_index=METADATA_PARTITION, leader_id=self.node_id, leader_epoch=state.epoch, preferred_candidates=candidates),),
                ),
            ),
            leader_endpoints=tuple(EndLeaderEndpoint(name=n, host=h, port=p) for n, h, p in self._leader_endpoints()),
        )

    def _fetch_request(self) -> FetchRequest:
        state = self.quorum.state
        # With no high watermark yet (just started, or a new leader) the answer should not wait for new data.
        eager = self._high_watermark is None or not isinstance(state, FollowerState) or not state.has_fetched
        return FetchRequest(
            cluster_id=self.cluster_id,
            replica_state=FetchReplicaState(replica_id=self.node_id, replica_epoch=-1),
            max_wait=datetime.timedelta(milliseconds=0 if eager else self.config.fetch_max_wait_ms),
            min_bytes=0,
            max_bytes=self.config.max_fetch_size_bytes,
            topics=(
                FetchTopic(
                    topic_id=METADATA_TOPIC_ID,
                    partitions=(
                        FetchPartition(
                            partition=METADATA_PARTITION,
                            current_leader_epoch=self.quorum.epoch,
                            fetch_offset=self.log.end_offset(),
                            last_fetched_epoch=self.log.last_fetched_epoch(),
                            log_start_offset=self.log.start_offset(),
                            partition_max_bytes=self.config.max_fetch_size_bytes,
                            replica_directory_id=self.directory_id,
                            # Kafka's follower sends the high watermark it knows, -1 for none.
                            high_watermark=i64(-1 if self._high_watermark is None else self._high_watermark),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )

    def _fetch_snapshot_request(self, state: FollowerState) -> FetchSnapshotRequest:
        assert state.snapshot_writer is not None
        snapshot_id = state.snapshot_writer.snapshot_id
        return FetchSnapshotRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            max_bytes=self.config.max_fetch_size_bytes,
            topics=(
                TopicSnapshot(
                    name=METADATA_TOPIC,
                    partitions=(
                        PartitionSnapshot(
                            partition=METADATA_PARTITION,
                            current_leader_epoch=state.epoch,
                            snapshot_id=RequestSnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch),
                            position=state.snapshot_position,
                            replica_directory_id=self.directory_id,
                        ),
                    ),
                ),
            ),
        )

    # -- validation shared by the handlers ---------------------------------------------------------------

    def _valid_cluster_id(self, cluster_id: str | None) -> bool:
        return cluster_id is None or cluster_id == self.cluster_id

    def _validate_voter_only(self, remote_id: int, request_epoch: int) -> ErrorCode | None:
        if request_epoch < self.quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if remote_id < 0:
            return ErrorCode.invalid_request
        # Only a configured voter set is known for sure; a log's may be stale (KIP-853).
        if self._static_voters is not None and not self._reconfig_supported() and (self.quorum.is_observer() or remote_id not in self.quorum.voters):
            return ErrorCode.inconsistent_voter_set
        return None

    def _validate_leader_only(self, request_epoch: int) -> ErrorCode | None:
        if request_epoch < self.quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if request_epoch > self.quorum.epoch:
            return ErrorCode.unknown_leader_epoch
        if not isinstance(self.quorum.state, LeaderState):
            return ErrorCode.not_leader_or_follower
        return None

    def _is_local_voter_key(self, voter_id: int, voter_directory_id: uuid.UUID | None) -> bool:
        if voter_id < 0:
            return True
        directory = directory_or_none(voter_directory_id)
        return voter_id == self.node_id and (directory is None or directory == self.directory_id)

    def _node_endpoints(self, schema: type) -> tuple[Any, ...]:
        leader = self._current_leader_endpoint()
        node_type = nested_or_none(schema, "NodeEndpoint")
        if leader is None or node_type is None or "node_endpoints" not in schema.__dataclass_fields__:  # type: ignore[attr-defined]
            return ()
        return (build(node_type, node_id=leader[0], host=leader[1], port=leader[2]),)

    def _respond(self, handle: int, body: Any) -> None:
        self._actions.append(Respond(handle, body))

    # -- Vote ----------------------------------------------------------------------------------------------

    def _vote_response(self, version: int, error: ErrorCode, partition_error: ErrorCode | None = None, granted: bool = False) -> Any:
        schema = response_schema(ApiKey.VOTE, version)
        topics: tuple[Any, ...] = ()
        if partition_error is not None:
            leader_id, epoch = self.leader_and_epoch
            partition = build(
                nested(schema, "PartitionData"),
                partition_index=METADATA_PARTITION,
                error_code=partition_error,
                leader_id=-1 if leader_id is None else leader_id,
                leader_epoch=epoch,
                vote_granted=granted,
            )
            topics = (build(nested(schema, "TopicData"), topic_name=METADATA_TOPIC, partitions=(partition,)),)
        return build(schema, error_code=error, topics=topics, node_endpoints=self._node_endpoints(schema))

    def _handle_vote_request(self, handle: int, body: Any, now: int) -> None:
        version = _request_version(body, 2)
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return self._respond(handle, self._vote_response(version, ErrorCode.inconsistent_cluster_id))
        partition = _one_partition(body.topics)
        if partition is None or body.topics[0].topic_name != METADATA_TOPIC or partition.partition_index != METADATA_PARTITION:
            return self._respond(handle, self._vote_response(version, ErrorCode.invalid_request))
        candidate_id = partition.replica_id
        candidate_epoch = partition.replica_epoch
        pre_vote = bool(getattr(partition, "pre_vote", False))
        last_epoch, last_offset = partition.last_offset_epoch, partition.last_offset
        if last_offset < 0 or last_epoch < 0 or last_epoch > candidate_epoch or (not pre_vote and last_epoch == candidate_epoch):
            return self._respond(handle, self._vote_response(version, ErrorCode.none, ErrorCode.invalid_request))
        error = self._validate_voter_only(candidate_id, candidate_epoch)
        if error is not None:
            return self._respond(handle, self._vote_response(version, ErrorCode.none, error))
        if not pre_vote and candidate_epoch > self.quorum.epoch:
            self._transition_to_unattached(candidate_epoch, now)
        if not self._is_local_voter_key(getattr(body, "voter_id", -1), getattr(partition, "voter_directory_id", None)):
            return self._respond(handle, self._vote_response(version, ErrorCode.none, ErrorCode.invalid_voter_key))
        # Kafka's OffsetAndEpoch order: the epoch first, then the offset.
        up_to_date = (last_epoch, last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset())
        candidate_directory = directory_or_none(getattr(partition, "replica_directory_id", None))
        granted = self.quorum.state.can_grant_vote(candidate_id, candidate_directory, up_to_date, pre_vote)
        state = self.quorum.state
        if granted and not pre_vote and isinstance(state, (UnattachedState, ProspectiveState)) and state.voted_id is None:
            # Durable before the answer leaves (the store write is synchronous).
            self._on_leave_state()
            self.quorum.transition_to_unattached_voted(candidate_epoch, candidate_id, candidate_directory, now)
        self._respond(handle, self._vote_response(version, ErrorCode.none, ErrorCode.none, granted))

    def _handle_vote_response(self, source: int, body: Any, now: int) -> None:
        partition = _one_partition(body.topics)
        if partition is None:
            return
        error = partition.error_code
        if self._handle_common_response(error, partition.leader_id, partition.leader_epoch, body, now):
            return
        if error != ErrorCode.none:
            self._backoff(source)
            return
        state = self.quorum.state
        if not isinstance(state, (ProspectiveState, CandidateState)):
            return
        if partition.leader_epoch != state.epoch:
            return
        (state.granted if partition.vote_granted else state.rejected).add(source)
        if isinstance(state, CandidateState):
            state.unanswered.discard(source)

    def _handle_common_response(self, error: ErrorCode, leader_id: int, epoch: int, body: Any, now: int) -> bool:
        """Kafka's maybeHandleCommonResponse: True when the response was about epochs and leaders only."""
        leader = None if leader_id is None or leader_id < 0 else int(leader_id)
        address = self._endpoint_from(body, leader)
        if epoch < self.quorum.epoch or error == ErrorCode.unknown_leader_epoch:
            return True
        if epoch > self.quorum.epoch or error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
            self._maybe_transition(leader, epoch, address, now)
            return True
        if epoch == self.quorum.epoch and leader is not None and not self._knows_leader():
            self._maybe_transition(leader, epoch, address, now)
            return error != ErrorCode.none
        return False

    def _knows_leader(self) -> bool:
        """A prospective voter still counts the leader it followed (KIP-996): voters that answer its
        pre-vote name that leader, and it must not fall back to following it while canvassing."""
        state = self.quorum.state
        if isinstance(state, ProspectiveState):
            return state.known_leader_id is not None
        return state.leader_id is not None

    def _endpoint_from(self, body: Any, leader_id: int | None) -> tuple[str, int] | None:
        if leader_id is None:
            return None
        for endpoint in getattr(body, "node_endpoints", ()) or ():
            if endpoint.node_id == leader_id:
                address = (str(endpoint.host), int(endpoint.port))
                self._leader_addresses[leader_id] = address
                return address
        return self._address_of(leader_id)

    # -- BeginQuorumEpoch ---------------------------------------------------------------------------------

    def _epoch_response(self, api_key: ApiKey, version: int, error: ErrorCode, partition_error: ErrorCode | None = None) -> Any:
        schema = response_schema(api_key, version)
        topics: tuple[Any, ...] = ()
        if partition_error is not None:
            leader_id, epoch = self.leader_and_epoch
            partition = build(nested(schema, "PartitionData"), partition_index=METADATA_PARTITION, error_code=partition_error, leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch)
            topics = (build(nested(schema, "TopicData"), topic_name=METADATA_TOPIC, partitions=(partition,)),)
        return build(schema, error_code=error, topics=topics, node_endpoints=self._node_endpoints(schema))

    def _handle_begin_quorum_epoch_request(self, handle: int, body: Any, now: int) -> None:
        version = _request_version(body, 1)
        api = ApiKey.BEGIN_QUORUM_EPOCH
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.inconsistent_cluster_id))
        partition = _one_partition(body.topics)
        if partition is None or body.topics[0].topic_name != METADATA_TOPIC or partition.partition_index != METADATA_PARTITION:
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.invalid_request))
        leader_id, epoch = partition.leader_id, partition.leader_epoch
        error = self._validate_voter_only(leader_id, epoch)
        if error is not None:
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.none, error))
        if not self._is_local_voter_key(getattr(body, "voter_id", -1), getattr(partition, "voter_directory_id", None)):
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.none, ErrorCode.invalid_voter_key))
        if leader_id == self.node_id:
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.none, ErrorCode.invalid_request))
        address = self._address_from_leader_endpoints(body, leader_id)
        if isinstance(self.quorum.state, (LeaderState, ResignedState)) and epoch == self.quorum.epoch:
            # Two leaders in one epoch cannot be: refuse rather than follow.
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.none, ErrorCode.invalid_request))
        self._maybe_transition(leader_id, epoch, address, now)
        self._respond(handle, self._epoch_response(api, version, ErrorCode.none, ErrorCode.none))

    def _address_from_leader_endpoints(self, body: Any, leader_id: int) -> tuple[str, int] | None:
        endpoints = getattr(body, "leader_endpoints", ()) or ()
        voter = self.quorum.voters.get(leader_id)
        listeners = {e.listener for e in voter.endpoints} if voter is not None else set()
        chosen = next((e for e in endpoints if e.name in listeners), endpoints[0] if endpoints else None)
        if chosen is not None:
            address = (str(chosen.host), int(chosen.port))
            self._leader_addresses[leader_id] = address
            return address
        return self._address_of(leader_id)

    def _handle_begin_quorum_epoch_response(self, source: int, body: Any, now: int) -> None:
        partition = _one_partition(body.topics)
        if partition is None:
            return
        if self._handle_common_response(partition.error_code, partition.leader_id, partition.leader_epoch, body, now):
            return
        state = self.quorum.state
        if isinstance(state, LeaderState) and partition.error_code == ErrorCode.none and partition.leader_epoch == state.epoch:
            state.begin_epoch_acked.add(source)

    # -- EndQuorumEpoch -----------------------------------------------------------------------------------

    def _handle_end_quorum_epoch_request(self, handle: int, body: Any, now: int) -> None:
        version = _request_version(body, 1)
        api = ApiKey.END_QUORUM_EPOCH
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.inconsistent_cluster_id))
        partition = _one_partition(body.topics)
        if partition is None or body.topics[0].topic_name != METADATA_TOPIC or partition.partition_index != METADATA_PARTITION:
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.invalid_request))
        leader_id, epoch = partition.leader_id, partition.leader_epoch
        error = self._validate_voter_only(leader_id, epoch)
        if error is not None:
            return self._respond(handle, self._epoch_response(api, version, ErrorCode.none, error))
        if leader_id != self.node_id:
            self._maybe_transition(leader_id, epoch, self._address_from_leader_endpoints(body, leader_id), now)
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == leader_id and state.epoch == epoch:
            successors = [int(c.candidate_id) for c in getattr(partition, "preferred_candidates", ())]
            state.fetch_deadline_ms = min(state.fetch_deadline_ms, now + self.quorum.end_epoch_backoff_ms(successors))
            # The leader is leaving: nothing to protect from a pre-vote any more.
            state.has_fetched = False
        self._respond(handle, self._epoch_response(api, version, ErrorCode.none, ErrorCode.none))

    def _handle_end_quorum_epoch_response(self, source: int, body: Any, now: int) -> None:
        partition = _one_partition(body.topics)
        if partition is None:
            return
        if self._handle_common_response(partition.error_code, partition.leader_id, partition.leader_epoch, body, now):
            return
        state = self.quorum.state
        if isinstance(state, ResignedState) and partition.error_code == ErrorCode.none:
            state.unacked_voters.discard(source)

    # -- Fetch (leader side) -------------------------------------------------------------------------------

    def _fetch_response(
        self,
        version: int,
        error: ErrorCode,
        partition_error: ErrorCode | None = None,
        *,
        records: Any = b"",
        diverging: OffsetAndEpoch | None = None,
        snapshot_id: OffsetAndEpoch | None = None,
    ) -> Any:
        schema = response_schema(ApiKey.FETCH, version)
        responses: tuple[Any, ...] = ()
        if partition_error is not None:
            leader_id, epoch = self.leader_and_epoch
            fields: dict[str, Any] = dict(
                partition_index=METADATA_PARTITION,
                error_code=partition_error,
                high_watermark=self._leader_high_watermark(),
                last_stable_offset=-1,
                log_start_offset=self.log.start_offset(),
                current_leader=build(nested(schema, "LeaderIdAndEpoch"), leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch),
                aborted_transactions=None,
                records=records,
            )
            if diverging is not None:
                fields["diverging_epoch"] = build(nested(schema, "EpochEndOffset"), epoch=diverging.epoch, end_offset=diverging.offset)
            if snapshot_id is not None:
                fields["snapshot_id"] = build(nested(schema, "SnapshotId"), end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
            partition = build(nested(schema, "PartitionData"), **fields)
            responses = (build(nested(schema, "FetchableTopicResponse"), topic_id=METADATA_TOPIC_ID, topic=METADATA_TOPIC, partitions=(partition,)),)
        return build(schema, throttle_time=0, error_code=error, session_id=0, responses=responses, node_endpoints=self._node_endpoints(schema))

    def _handle_fetch_request(self, handle: int, body: Any, now: int, version: int | None = None) -> None:
        if version is None:
            version = _request_version(body, FETCH_VERSION)
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return self._respond(handle, self._fetch_response(version, ErrorCode.inconsistent_cluster_id))
        topics = getattr(body, "topics", ())
        partition = _one_partition(topics)
        if partition is None or not _is_metadata_topic(topics[0]) or partition.partition != METADATA_PARTITION:
            return self._respond(handle, self._fetch_response(version, ErrorCode.invalid_request))
        if partition.fetch_offset < 0 or partition.last_fetched_epoch < 0 or partition.last_fetched_epoch > partition.current_leader_epoch:
            return self._respond(handle, self._fetch_response(version, ErrorCode.none, ErrorCode.invalid_request))
        error = self._validate_leader_only(partition.current_leader_epoch)
        if error is not None:
            return self._respond(handle, self._fetch_response(version, ErrorCode.none, error))
        answer, empty = self._try_complete_fetch(body, version, now)
        max_wait_ms = self._max_wait_ms(body)
        if empty and max_wait_ms > 0:
            self._parked[handle] = _ParkedFetch(body, version, now + max_wait_ms, partition.fetch_offset, self.quorum.epoch)
            return
        self._respond(handle, answer)

    @staticmethod
    def _max_wait_ms(body: Any) -> int:
        if hasattr(body, "max_wait_ms"):
            return int(body.max_wait_ms)
        wait = getattr(body, "max_wait", None)
        return 0 if wait is None else int(wait.total_seconds() * 1000)

    @staticmethod
    def _fetch_replica_id(body: Any) -> int:
        if hasattr(body, "replica_state"):
            return int(body.replica_state.replica_id)
        return int(getattr(body, "replica_id", -1))

    def _try_complete_fetch(self, body: Any, version: int, now: int) -> tuple[Any, bool]:
        """The answer to a Fetch the leader accepts, and whether it is empty (worth waiting on)."""
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        partition = body.topics[0].partitions[0]
        replica_id = self._fetch_replica_id(body)
        if replica_id in self.quorum.voters:
            self._record_voter_contact(state, replica_id, now)
        validation = self.log.validate_offset_and_epoch(partition.fetch_offset, partition.last_fetched_epoch)
        if validation.kind is ValidationKind.DIVERGING:
            return self._fetch_response(version, ErrorCode.none, ErrorCode.none, diverging=validation.offset_and_epoch), False
        if validation.kind is ValidationKind.SNAPSHOT:
            return self._fetch_response(version, ErrorCode.none, ErrorCode.none, snapshot_id=validation.offset_and_epoch), False
        self._update_replica(state, replica_id, getattr(partition, "replica_directory_id", None), partition.fetch_offset, now)
        max_bytes = max(min(partition.partition_max_bytes, self.config.max_fetch_size_bytes), 1)
        records = self.log.read(partition.fetch_offset, max_bytes).records
        replica = self._replica(state, replica_id)
        hw = self._leader_high_watermark()
        # News: a high watermark this replica was not sent, or (v18) one above what it says it has,
        # as after an answer that never reached it (Kafka's isHighWatermarkUpdated).
        follower_hw = getattr(partition, "high_watermark", NO_HIGH_WATERMARK)  # none before v18: never behind
        hw_news = (replica is not None and replica.sent_high_watermark != hw) or follower_hw < hw
        if replica is not None:
            replica.sent_high_watermark = hw
        return self._fetch_response(version, ErrorCode.none, ErrorCode.none, records=records), not records and not hw_news

    def _replica(self, state: LeaderState, replica_id: int) -> ReplicaState | None:
        return state.voter_states.get(replica_id) or state.observer_states.get(replica_id)

    def _record_voter_contact(self, state: LeaderState, voter_id: int, now: int) -> None:
        """Check-quorum: the timer restarts once a majority (the leader with them) has been heard from."""
        state.fetched_voters.add(voter_id)
        state.begin_epoch_acked.add(voter_id)
        if len((state.fetched_voters | {self.node_id}) & self.quorum.voters.ids()) >= self.quorum.voters.majority_size():
            state.fetched_voters.clear()
            state.check_quorum_deadline_ms = now + self.config.check_quorum_timeout_ms

    def _update_replica(self, state: LeaderState, replica_id: int, directory_id: uuid.UUID | None, fetch_offset: int, now: int) -> None:
        if replica_id < 0:
            return
        leader_end = self.log.end_offset()
        if replica_id in state.voter_states:
            state.voter_states[replica_id].update_fetch(fetch_offset, leader_end, now)
            self._maybe_advance_high_watermark(state)
        else:
            replica = state.observer_states.get(replica_id)
            if replica is None:
                replica = state.observer_states[replica_id] = ReplicaState(replica_id, directory_or_none(directory_id))
            replica.update_fetch(fetch_offset, leader_end, now)

    def _maybe_advance_high_watermark(self, state: LeaderState) -> None:
        own = state.voter_states.get(self.node_id)
        if own is not None:
            own.end_offset = self.log.last_flushed_offset()
        voters = self.quorum.voters
        offsets = sorted((state.voter_states[v].end_offset for v in voters.ids() if v in state.voter_states), reverse=True)
        if len(offsets) < voters.majority_size():
            return
        candidate = offsets[voters.majority_size() - 1]
        if candidate > state.epoch_start_offset and (self._high_watermark is None or candidate > self._high_watermark):
            self._set_high_watermark(candidate)

    def _leader_high_watermark(self) -> int:
        """The high watermark the leader tells its followers and DescribeQuorum: none (-1) until it
        has committed a record of its own epoch, as Kafka's LeaderState, whose high watermark starts
        empty. The one this node learned as a follower can be below what another follower learned
        from the previous leader, and a Kafka follower halts on a high watermark that goes back
        (FollowerState.updateHighWatermark: "Non-monotonic update of high watermark")."""
        state = self.quorum.state
        if not isinstance(state, LeaderState) or self._high_watermark is None or self._high_watermark <= state.epoch_start_offset:
            return -1
        return self._high_watermark

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = offset
        self.log.update_high_watermark(offset)

    def _complete_parked_fetches(self, now: int, force: bool = False) -> None:
        if not self._parked:
            return
        state = self.quorum.state
        for handle, parked in list(self._parked.items()):
            still_leading = isinstance(state, LeaderState) and state.epoch == parked.epoch
            if not still_leading:
                del self._parked[handle]
                self._respond(handle, self._fetch_response(parked.version, ErrorCode.none, ErrorCode.not_leader_or_follower))
                continue
            if force:
                continue
            replica = self._replica(state, self._fetch_replica_id(parked.body))  # type: ignore[arg-type]
            hw = self._leader_high_watermark()
            hw_moved = replica is not None and replica.sent_high_watermark != hw
            if now >= parked.deadline_ms or self.log.end_offset() > parked.fetch_offset or hw_moved:
                del self._parked[handle]
                answer, _ = self._try_complete_fetch(parked.body, parked.version, now)
                self._respond(handle, answer)

    # -- Fetch (follower side) ----------------------------------------------------------------------------

    def _handle_fetch_response(self, source: int, body: Any, now: int) -> None:
        topics = getattr(body, "responses", ())
        partition = _one_partition(topics)
        if partition is None:
            self._backoff(source)
            return
        leader = partition.current_leader
        error = partition.error_code
        before = self.quorum.state
        if self._handle_common_response(error, leader.leader_id, leader.leader_epoch, body, now):
            if self.quorum.state is before:
                self._backoff(source)
            return
        state = self.quorum.state
        if not isinstance(state, FollowerState):
            return
        if error != ErrorCode.none:
            self._backoff(source)
            return
        if leader.leader_id != state.leader_id or leader.leader_epoch != state.epoch:
            return
        state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
        state.has_fetched = True
        diverging = partition.diverging_epoch
        snapshot_id = partition.snapshot_id
        if diverging.epoch >= 0 and diverging.end_offset >= 0:
            self._truncate_to_end_offset(OffsetAndEpoch(int(diverging.end_offset), int(diverging.epoch)))
        elif snapshot_id.epoch >= 0 and snapshot_id.end_offset >= 0:
            self._begin_snapshot_fetch(state, OffsetAndEpoch(int(snapshot_id.end_offset), int(snapshot_id.epoch)))
        else:
            records = self._from_log_end(partition.records)
            if records is None:
                self._backoff(source)
                return
            if records:
                self.log.append_as_follower(records, state.epoch)
                self.log.flush()
                if self._history.scan(records):
                    self._apply_voter_set()
            self._update_follower_high_watermark(int(partition.high_watermark))

    def _from_log_end(self, records: Any) -> Any | None:
        """The fetched batches from this log's end on; None when none starts there (a stale answer)."""
        if not records:
            return b""
        end = self.log.end_offset()
        for header, _ in iter_batches(records):
            if header.base_offset == end:
                return memoryview(records)[header.position :]
            if header.base_offset > end or header.last_offset >= end:
                return None
        return b""

    def _truncate_to_end_offset(self, diverging: OffsetAndEpoch) -> None:
        """Kafka's truncateToEndOffset: to the leader's end of that epoch, or this log's own end of it when shorter."""
        local = self.log.end_offset_for_epoch(diverging.epoch)
        offset = max(min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset, self.log.start_offset())
        self.log.truncate_to(offset)
        if self._history.truncate_from(offset):
            self._apply_voter_set()

    def _update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        if leader_high_watermark < 0:
            return
        offset = min(leader_high_watermark, self.log.end_offset())
        if self._high_watermark is None or offset > self._high_watermark:
            self._set_high_watermark(offset)

    def _begin_snapshot_fetch(self, state: FollowerState, snapshot_id: OffsetAndEpoch) -> None:
        writer = self.log.create_new_snapshot_unchecked(snapshot_id)
        if writer is None:
            # This snapshot is here already (fetched before a crash, say): start the log from it.
            self._start_log_at_latest_snapshot()
            return
        state.snapshot_writer = writer
        state.snapshot_size = -1
        state.snapshot_position = 0

    # -- FetchSnapshot -------------------------------------------------------------------------------------

    def _fetch_snapshot_response(
        self, version: int, error: ErrorCode, partition_error: ErrorCode | None = None, *, snapshot_id: Any = None, size: int = -1, position: int = -1, data: bytes = b""
    ) -> Any:
        schema = response_schema(ApiKey.FETCH_SNAPSHOT, version)
        topics: tuple[Any, ...] = ()
        if partition_error is not None:
            leader_id, epoch = self.leader_and_epoch
            snapshot = build(
                nested(schema, "PartitionSnapshot"),
                index=METADATA_PARTITION,
                error_code=partition_error,
                snapshot_id=build(nested(schema, "SnapshotId"), end_offset=snapshot_id.offset if snapshot_id else -1, epoch=snapshot_id.epoch if snapshot_id else -1),
                current_leader=build(nested(schema, "LeaderIdAndEpoch"), leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch),
                size=size,
                position=position,
                unaligned_records=data,
            )
            topics = (build(nested(schema, "TopicSnapshot"), name=METADATA_TOPIC, partitions=(snapshot,)),)
        return build(schema, throttle_time=0, error_code=error, topics=topics, node_endpoints=self._node_endpoints(schema))

    def _handle_fetch_snapshot_request(self, handle: int, body: Any, now: int) -> None:
        version = _request_version(body, 1)
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.inconsistent_cluster_id))
        partition = _one_partition(body.topics)
        if partition is None or body.topics[0].name != METADATA_TOPIC or partition.partition != METADATA_PARTITION:
            return self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.invalid_request))
        requested = OffsetAndEpoch(int(partition.snapshot_id.end_offset), int(partition.snapshot_id.epoch))
        error = self._validate_leader_only(partition.current_leader_epoch)
        if error is not None:
            return self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.none, error, snapshot_id=requested))
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        if body.replica_id in self.quorum.voters:
            self._record_voter_contact(state, int(body.replica_id), now)
        reader = self.log.read_snapshot(requested) if requested.offset >= 0 and requested.epoch >= 0 else None
        if reader is None:
            return self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.none, ErrorCode.snapshot_not_found, snapshot_id=requested))
        size = reader.size_in_bytes()
        position = int(partition.position)
        if position < 0 or position >= size:
            return self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.none, ErrorCode.position_out_of_range, snapshot_id=requested))
        max_bytes = max(min(int(body.max_bytes), self.config.max_fetch_size_bytes), 1)
        data = reader.read(position, max_bytes)
        self._respond(handle, self._fetch_snapshot_response(version, ErrorCode.none, ErrorCode.none, snapshot_id=requested, size=size, position=position, data=data))

    def _handle_fetch_snapshot_response(self, source: int, body: Any, now: int) -> None:
        partition = _one_partition(body.topics)
        if partition is None:
            self._backoff(source)
            return
        leader = partition.current_leader
        error = partition.error_code
        if self._handle_common_response(error, leader.leader_id, leader.leader_epoch, body, now):
            return
        state = self.quorum.state
        if not isinstance(state, FollowerState) or state.snapshot_writer is None:
            return
        writer = state.snapshot_writer
        if error in (ErrorCode.snapshot_not_found, ErrorCode.position_out_of_range):
            # The leader moved on to a newer snapshot: fetch again to learn which.
            writer.close()
            state.snapshot_writer = None
            return
        if error != ErrorCode.none:
            self._backoff(source)
            return
        state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
        state.has_fetched = True
        snapshot_id = OffsetAndEpoch(int(partition.snapshot_id.end_offset), int(partition.snapshot_id.epoch))
        if snapshot_id != writer.snapshot_id or int(partition.position) != state.snapshot_position:
            writer.close()
            state.snapshot_writer = None
            return
        data = bytes(partition.unaligned_records or b"")
        writer.append(data)
        state.snapshot_size = int(partition.size)
        state.snapshot_position += len(data)
        if state.snapshot_position > state.snapshot_size or (not data and state.snapshot_position < state.snapshot_size):
            writer.close()
            state.snapshot_writer = None
            return
        if state.snapshot_position == state.snapshot_size:
            writer.freeze()
            state.snapshot_writer = None
            self._start_log_at_latest_snapshot()

    def _start_log_at_latest_snapshot(self) -> None:
        if not self.log.truncate_to_latest_snapshot():
            return
        self._update_follower_high_watermark(self.log.high_watermark())
        self._read_voter_history(self.log)
        self._apply_voter_set()

    # -- DescribeQuorum ------------------------------------------------------------------------------------

    def _handle_describe_quorum_request(self, handle: int, body: Any, now: int) -> None:
        version = _request_version(body, 2)
        schema = response_schema(ApiKey.DESCRIBE_QUORUM, version)
        partition = _one_partition(getattr(body, "topics", ()))
        if partition is None or body.topics[0].topic_name != METADATA_TOPIC or partition.partition_index != METADATA_PARTITION:
            return self._respond(handle, build(schema, error_code=ErrorCode.invalid_request, error_message="DescribeQuorum names one partition: __cluster_metadata-0", topics=(), nodes=()))
        state = self.quorum.state
        leader_id, epoch = self.leader_and_epoch
        partition_type = nested(schema, "PartitionData")
        if not isinstance(state, LeaderState):
            data = build(partition_type, partition_index=METADATA_PARTITION, error_code=ErrorCode.not_leader_or_follower, error_message=None,
                         leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch, high_watermark=-1, current_voters=(), observers=())
        else:
            replica_type = nested(schema, "ReplicaState")
            own = state.voter_states.get(self.node_id)
            if own is not None:
                own.end_offset = self.log.end_offset()
                own.last_fetch_ms = own.last_caught_up_ms = now

            def describe(replica: ReplicaState) -> Any:
                return build(replica_type, replica_id=replica.replica_id, replica_directory_id=replica.directory_id, log_end_offset=replica.end_offset,
                             last_fetch_timestamp=replica.last_fetch_ms, last_caught_up_timestamp=replica.last_caught_up_ms)

            voters = tuple(describe(state.voter_states[v]) for v in sorted(state.voter_states))
            observers = tuple(describe(state.observer_states[o]) for o in sorted(state.observer_states))
            data = build(partition_type, partition_index=METADATA_PARTITION, error_code=ErrorCode.none, error_message=None, leader_id=self.node_id,
                         leader_epoch=state.epoch, high_watermark=self._leader_high_watermark(), current_voters=voters, observers=observers)
        topic = build(nested(schema, "TopicData"), topic_name=METADATA_TOPIC, partitions=(data,))
        nodes: tuple[Any, ...] = ()
        if "nodes" in schema.__dataclass_fields__:  # type: ignore[attr-defined]
            node_type, listener_type = nested(schema, "Node"), nested(schema, "Listener")
            nodes = tuple(
                build(node_type, node_id=v.voter_id, listeners=tuple(build(listener_type, name=e.listener, host=e.host, port=e.port) for e in v.endpoints))
                for v in self.quorum.voters
            )
        self._respond(handle, build(schema, error_code=ErrorCode.none, error_message=None, topics=(topic,), nodes=nodes))

    # -- voter changes (KIP-853) -----------------------------------------------------------------------------

    def _apply_voter_set(self) -> None:
        """Make the history's latest set the quorum's; the leader moves replicas between voters and observers."""
        voters = self._history.latest() or self._static_voters or VoterSet([])
        old = self.quorum.voters
        if voters == old:
            return
        self.quorum.voters = voters
        state = self.quorum.state
        if isinstance(state, LeaderState):
            for voter_id in voters.ids() - old.ids():
                replica = state.observer_states.pop(voter_id, None) or ReplicaState(voter_id, voters.get(voter_id).directory_id)  # type: ignore[union-attr]
                state.voter_states[voter_id] = replica
            for voter_id in voters.ids() & old.ids():
                # An upgrade to kraft.version 1 names the directories a static set left out.
                state.voter_states[voter_id].directory_id = voters.get(voter_id).directory_id  # type: ignore[union-attr]
            for voter_id in old.ids() - voters.ids():
                replica = state.voter_states.pop(voter_id)
                if voter_id != self.node_id:
                    state.observer_states[voter_id] = replica
                else:
                    state.voter_states[voter_id] = replica  # it still leads until the change commits
            self._maybe_advance_high_watermark(state)
        elif isinstance(state, UnattachedState) and self.quorum.is_voter() and state.election_deadline_ms is None:
            state.election_deadline_ms = self.quorum.random_election_timeout_ms(self._now)

    def _voter_change_response(self, api_key: ApiKey, version: int, error: ErrorCode, message: str | None = None) -> Any:
        schema = response_schema(api_key, version)
        fields: dict[str, Any] = dict(throttle_time=0, error_code=error, error_message=message)
        if "current_leader" in schema.__dataclass_fields__:  # type: ignore[attr-defined]
            leader = self._current_leader_endpoint()
            _, epoch = self.leader_and_epoch
            fields["current_leader"] = build(
                nested(schema, "CurrentLeader"), leader_id=leader[0] if leader else -1, leader_epoch=epoch, host=leader[1] if leader else "", port=leader[2] if leader else -1
            )
        return build(schema, **fields)

    def _voter_change_refusal(self, body: Any, now: int) -> ErrorCode | tuple[ErrorCode, str] | None:
        """Kafka's checks before any voter change: the leader, kraft.version 1, one change at a time, committed epoch."""
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return ErrorCode.inconsistent_cluster_id
        state = self.quorum.state
        if not isinstance(state, LeaderState) or self._shutdown_deadline_ms is not None:
            return ErrorCode.not_leader_or_follower
        if not self._reconfig_supported():
            # Kafka's words: the voter set is static (controller.quorum.voters decides it).
            change = {ApiKey.ADD_RAFT_VOTER: "adding", ApiKey.REMOVE_RAFT_VOTER: "removing"}.get(ApiKey(int(type(body).__api_key__)), "updating")
            return ErrorCode.unsupported_version, f"Cluster doesn't support {change} voter because the kraft.version feature is {int(self._history.kraft_version)}"
        if self._pending_voter_change is not None:
            return ErrorCode.request_timed_out, "a previous voter change is still waiting to commit"
        latest = self._history.latest_offset()
        if self._high_watermark is None or (latest is not None and latest >= self._high_watermark):
            return ErrorCode.request_timed_out, "waiting for the latest voter set to be committed"
        return None

    def _handle_voter_change_request(self, handle: int, body: Any, now: int) -> None:
        api_key = ApiKey(int(type(body).__api_key__))
        version = _request_version(body, 0)
        refusal = self._voter_change_refusal(body, now)
        if refusal is not None:
            error, message = refusal if isinstance(refusal, tuple) else (refusal, None)
            return self._respond(handle, self._voter_change_response(api_key, version, error, message))
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        voters = self.quorum.voters
        voter_id = int(body.voter_id)
        directory_id = directory_or_none(getattr(body, "voter_directory_id", None))
        if api_key == ApiKey.ADD_RAFT_VOTER:
            if voter_id in voters:
                return self._respond(handle, self._voter_change_response(api_key, version, ErrorCode.duplicate_voter, f"voter {voter_id} is already in the voter set"))
            endpoints = tuple(Endpoint(str(e.name), str(e.host), int(e.port)) for e in getattr(body, "listeners", ()))
            replica = state.observer_states.get(voter_id)
            caught_up = replica is not None and replica.last_caught_up_ms >= now - self.config.fetch_timeout_ms
            if directory_id is None or not endpoints or not caught_up or (replica is not None and replica.directory_id not in (None, directory_id)):
                message = f"voter {voter_id} must be an observer with directory {directory_id} that has caught up, with a listener"
                return self._respond(handle, self._voter_change_response(api_key, version, ErrorCode.request_timed_out, message))
            new = voters.with_voter(VoterNode(voter_id, directory_id, endpoints))
        else:
            current = voters.get(voter_id)
            if current is None or not current.matches(directory_id):
                return self._respond(handle, self._voter_change_response(api_key, version, ErrorCode.voter_not_found, f"voter {voter_id} is not in the voter set"))
            if len(voters) == 1:
                return self._respond(handle, self._voter_change_response(api_key, version, ErrorCode.invalid_request, "the last voter cannot be removed"))
            new = voters.without_voter(voter_id)
        timeout = getattr(body, "timeout", None)
        timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None else self.config.request_timeout_ms
        offset = state.accumulator.append_control([new.to_voters_record()], now)
        self._append_batches(state, now, force=True)
        removes_leader = voter_id == self.node_id and api_key != ApiKey.ADD_RAFT_VOTER
        # AddRaftVoter v1's AckWhenCommitted false (a controller joining by itself): Kafka answers
        # once the leader has written the new voter set, and takes no other change until it commits.
        answered = api_key == ApiKey.ADD_RAFT_VOTER and not getattr(body, "ack_when_committed", True)
        self._pending_voter_change = _PendingVoterChange(handle, api_key, version, offset, now + timeout_ms, removes_leader, answered)
        if answered:
            self._respond(handle, self._voter_change_response(api_key, version, ErrorCode.none))

    def _update_voter_refusal(self, body: Any) -> ErrorCode | None:
        """Kafka's checks of an UpdateRaftVoter before its handler: the cluster, the leader's epoch, a
        directory id, an endpoint on the Raft listener and a sane kraft.version range."""
        if not self._valid_cluster_id(getattr(body, "cluster_id", None)):
            return ErrorCode.inconsistent_cluster_id
        error = self._validate_leader_only(int(body.current_leader_epoch))
        if error is not None:
            return error
        if self._shutdown_deadline_ms is not None:
            return ErrorCode.not_leader_or_follower
        if directory_or_none(body.voter_directory_id) is None or not body.listeners:
            return ErrorCode.invalid_request
        feature = body.k_raft_version_feature
        if feature.min_supported_version < 0 or feature.max_supported_version < 0 or feature.max_supported_version < feature.min_supported_version:
            return ErrorCode.invalid_request
        return None

    def _handle_update_voter_request(self, handle: int, body: Any, now: int) -> None:
        """A voter's directory id, endpoints and kraft.version range (Kafka's UpdateVoterHandler). At
        kraft.version 1 the leader writes them in a VotersRecord, answered once committed; at 0 it
        keeps them in memory for an upgrade and answers at once."""
        api_key = ApiKey.UPDATE_RAFT_VOTER
        version = _request_version(body, 0)

        def answer(error: ErrorCode, message: str | None = None) -> None:
            self._respond(handle, self._voter_change_response(api_key, version, error, message))

        error = self._update_voter_refusal(body)
        if error is not None:
            return answer(error)
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        if self._pending_voter_change is not None or self._high_watermark is None:
            return answer(ErrorCode.request_timed_out)
        kraft_version = self._history.kraft_version
        if self._reconfig_supported():
            latest = self._history.latest_offset()
            if latest is not None and latest >= self._high_watermark:
                return answer(ErrorCode.request_timed_out)
            voters = self.quorum.voters
        else:
            upgrade = state.kraft_version_upgrade
            if not isinstance(upgrade, Voters):
                return answer(ErrorCode.request_timed_out)
            voters = upgrade.voters
        feature = body.k_raft_version_feature
        if not feature.min_supported_version <= kraft_version <= feature.max_supported_version:
            return answer(ErrorCode.invalid_request)
        voter_id = int(body.voter_id)
        directory_id = directory_or_none(body.voter_directory_id)
        current = voters.get(voter_id)
        if current is None or (self._reconfig_supported() and not current.matches(directory_id)):
            return answer(ErrorCode.voter_not_found)
        updated = VoterNode(
            voter_id,
            directory_id,
            tuple(Endpoint(str(e.name), str(e.host), int(e.port)) for e in body.listeners),
            int(feature.min_supported_version),
            int(feature.max_supported_version),
        )
        if not self._reconfig_supported():
            # In memory only: DescribeQuorum keeps showing the configured voters until an upgrade writes these.
            state.kraft_version_upgrade = Voters(voters.with_voter(updated))
            return answer(ErrorCode.none)
        updated = VoterNode(voter_id, current.directory_id, updated.endpoints, updated.min_kraft_version, updated.max_kraft_version)
        if updated == current:
            return answer(ErrorCode.none)
        offset = state.accumulator.append_control([voters.with_voter(updated).to_voters_record()], now)
        self._append_batches(state, now, force=True)
        self._pending_voter_change = _PendingVoterChange(handle, api_key, version, offset, now + self.config.request_timeout_ms, False)

    # -- the kraft.version upgrade (KIP-853) ---------------------------------------------------------------

    def _local_voter_node(self) -> VoterNode:
        low, high = SUPPORTED_KRAFT_VERSION
        return VoterNode(self.node_id, directory_or_none(self.directory_id), self._local_listeners, int(low), int(high))

    def upgrade_kraft_version(self, epoch: int, kraft_version: int, validate_only: bool, now_ms: int) -> bool:
        """Kafka's upgradeKRaftVersion (LeaderState.maybeAppendUpgradedKRaftVersion): on the leader of
        ``epoch``, write KRaftVersionRecord(``kraft_version``) and, when the log names no voters yet,
        the VotersRecord of the voters as they reported themselves, in one control batch. False when
        there is nothing to write (already at that version, or asked for in this epoch). Raises
        NotLeaderError, InvalidUpdateVersionError (a concurrent upgrade, a downgrade, voters that do
        not support it) or RuntimeError (voters the leader cannot describe fully)."""
        self._now = now = max(self._now, now_ms)
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            raise NotLeaderError("Upgrade kraft version failed because the replica is not the current leader")
        if epoch < state.epoch:
            raise NotLeaderError(f"Upgrade kraft version failed because the given epoch {epoch} is stale. Current leader epoch is {state.epoch}")
        try:
            requested = KRaftVersion(kraft_version)
        except ValueError:
            raise ValueError(f"Unknown KRaft feature level: {kraft_version}") from None
        current = self._history.kraft_version
        upgrade = state.kraft_version_upgrade
        if isinstance(upgrade, Version):
            if upgrade.kraft_version == requested:
                return False
            # Kafka prints the Version record itself here.
            raise InvalidUpdateVersionError(
                f"Invalid concurrent upgrade of kraft.version from version Version[kraftVersion={_java_enum(upgrade.kraft_version)}] to {_java_enum(requested)}"
            )
        if current == requested:
            return False
        if current > requested:
            raise InvalidUpdateVersionError(f"Invalid upgrade of kraft.version from version {_java_enum(current)} to {_java_enum(requested)} because the new version is a downgrade")
        if not isinstance(upgrade, Voters):
            raise RuntimeError(f"Unable to upgrade kraft.version from {_java_enum(current)} to {_java_enum(requested)}: the leader holds no voter set to write")
        voters = upgrade.voters
        if voters.ids() != self.quorum.voters.ids():
            raise RuntimeError(f"Unable to update kraft.version to {_java_enum(requested)} due to missing voters {sorted(voters.ids())} compared to {sorted(self.quorum.voters.ids())}")
        if not voters.supports_version(requested):
            raise InvalidUpdateVersionError(f"Invalid upgrade of kraft.version to {_java_enum(requested)} because not all of the voters support it")
        if any(v.directory_id is None for v in voters):
            raise RuntimeError(f"Directory id must be known for all of the voters: {voters}")
        if validate_only:
            return True
        state.kraft_version_upgrade = Version(requested)
        records: list[Any] = [kraft_version_record(requested)]
        if voters != self.quorum.voters:
            records.append(voters.to_voters_record())
        state.accumulator.append_control(records, now)
        self._dirty = True
        self._append_batches(state, now, force=True)
        return True

    def _maybe_complete_voter_change(self, now: int) -> None:
        pending = self._pending_voter_change
        if pending is None:
            return
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            error: ErrorCode | None = ErrorCode.not_leader_or_follower
        elif self._high_watermark is not None and self._high_watermark > pending.offset:
            error = ErrorCode.none
        elif now >= pending.deadline_ms:
            error = ErrorCode.request_timed_out
        else:
            return
        self._pending_voter_change = None
        if not pending.answered:
            self._respond(pending.handle, self._voter_change_response(pending.api_key, pending.version, error))
        if error == ErrorCode.none and pending.removes_leader and isinstance(state, LeaderState):
            # No longer a voter: hand the quorum over to those who are.
            state.resign_requested = True

    # -- the leader's log writes ---------------------------------------------------------------------------

    def _append_batches(self, state: LeaderState, now: int, force: bool) -> None:
        completed = state.accumulator.drain(now, force)
        if not completed:
            return
        changed = False
        for batch in completed:
            info = self.log.append_as_leader(batch.data, state.epoch)
            if info.first_offset != batch.base_offset:
                raise AssertionError(f"the log put batch {batch.base_offset} at {info.first_offset}: the accumulator and the log disagree")
            changed = self._history.scan(batch.data) or changed
        self.log.flush()
        if changed:
            self._apply_voter_set()
        self._maybe_advance_high_watermark(state)

    # -- log cleaning --------------------------------------------------------------------------------------

    def _maybe_clean(self, now: int) -> None:
        """Kafka's RaftMetadataLogCleanerManager: the log's retention is checked every
        METADATA_LOG_CLEAN_INTERVAL_MS. Also as soon as a new snapshot is committed and delivered:
        a snapshot is what cleaning can advance to, and a log under a limit of 0 bytes (the
        simulation's) is cut behind each one at once rather than up to a minute later."""
        if self._high_watermark is None:
            return
        limit = min(self._high_watermark, self._next_delivery)
        latest = self.log.latest_snapshot_id()
        new_snapshot = latest is not None and latest != self._cleaned_for_snapshot and latest.offset <= limit
        if now < self._next_clean_ms and not new_snapshot:
            return
        self._next_clean_ms = now + METADATA_LOG_CLEAN_INTERVAL_MS
        if latest is not None and latest.offset <= limit:
            self._cleaned_for_snapshot = latest
        self.log.maybe_clean(now, limit)

    # -- delivery to the listener --------------------------------------------------------------------------

    def _load_snapshot(self, reader: Any) -> None:
        data = reader.read(0, reader.size_in_bytes())
        records: list[T] = []
        for header, view in iter_batches(data):
            if header.is_control:
                continue
            records.extend(self.serde.decode(r.value) for r in iter_records(view, header) if r.value is not None)
        self._actions.append(LoadSnapshot(reader.snapshot_id, records))
        self._next_delivery = reader.snapshot_id.offset

    def _deliver_committed(self) -> None:
        if self._next_delivery < self.log.start_offset():
            snapshot = self.log.latest_snapshot()
            if snapshot is not None:
                self._load_snapshot(snapshot)
        hw = self._high_watermark
        if hw is None:
            return
        while self._next_delivery < hw:
            info = self.log.read(self._next_delivery, self.config.max_fetch_size_bytes)
            progressed = False
            for header, view in iter_batches(info.records):
                if header.last_offset >= hw:
                    break
                if header.last_offset < self._next_delivery:
                    continue
                self._actions.append(CommittedBatch(self._decode_batch(header, view)))
                self._next_delivery = header.next_offset
                progressed = True
            if not progressed:
                break

    def _decode_batch(self, header: Any, view: memoryview) -> Batch[T]:
        records: list[T] = []
        controls: list[object] = []
        if header.is_control:
            controls = [decode_control_record(r) for r in iter_records(view, header)]
        else:
            records = [self.serde.decode(r.value) for r in iter_records(view, header) if r.value is not None]
        return Batch(header.base_offset, header.last_offset, header.partition_leader_epoch, header.max_timestamp, header.size, records, controls)

    def _maybe_fire_leader_change(self) -> None:
        state = self.quorum.state
        current = self.leader_and_epoch
        if current == self._fired_leader:
            return
        if isinstance(state, LeaderState) and self._next_delivery <= state.epoch_start_offset:
            return  # the listener hears of its own leadership once it holds everything committed before it
        self._fired_leader = current
        self._actions.append(LeaderChange(*current))


__all__ = [
    "Action",
    "CommittedBatch",
    "KafkaRaftClient",
    "LeaderChange",
    "LoadSnapshot",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "NotLeaderError",
    "RecordBatchTooLargeError",
    "Respond",
    "Send",
    "SnapshotWriter",
]
