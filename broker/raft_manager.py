"""KafkaRaftManager: the asyncio shell around the metadata quorum's sans-IO KafkaRaftClient.

The client decides everything (elections, replication, the high watermark, snapshots); this
shell gives it the time, the requests that reach the controller listener and the answers to
what it sent, and carries out what it returns: requests go out on the network client, answers
go back to the waiting connection, and committed batches, snapshots and leader changes go to
the listeners (the metadata loader on every node, the QuorumController on controllers) in log
order. Every node runs one: controllers as voters, brokers as observers that only fetch.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import structlog
from kio.schema.fetch.v18.request import FetchRequest

from broker.log_dir_failure_handler import halt
from broker.metadata.metadata_records import MetadataRecord, decode_metadata_record
from broker.metrics.raft_metrics import CommitLatency
from broker.network import CloseConnection
from broker.network_client import NetworkClient, NetworkError
from raft.file_quorum_state_store import DEFAULT_FILE_NAME, FileQuorumStateStore
from raft.kafka_metadata_log import KafkaMetadataLog, MetadataLogConfig, metadata_log_dir
from raft.kafka_raft_client import (
    CommittedBatch,
    KafkaRaftClient,
    LeaderChange,
    LoadSnapshot,
    NotLeaderError,
    Respond,
    Send,
    fetch_request_in_version,
)
from raft.quorum_state import LeaderState
from raft.snapshot_retention import last_contained_log_timestamp
from raft.raft_config import RaftConfig
from raft.replicated_log import OffsetAndEpoch
from raft.voter_set import Endpoint, VoterSet
from storage.errors import KafkaStorageError
from storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception

log = structlog.get_logger(__name__)

# A deadline already past that poll did nothing about is not polled again sooner than this.
MIN_IDLE_MS = 1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MetadataRecordSerde:
    """Metadata records to and from the values of the Raft log's records."""

    def encode(self, record: MetadataRecord) -> bytes:
        return record.encode()

    def decode(self, value: bytes | memoryview) -> MetadataRecord:
        return decode_metadata_record(value)


class RaftListener(Protocol):
    def handle_commit(self, batch: Any) -> None: ...

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, records: Sequence[MetadataRecord]) -> None: ...

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None: ...


class KafkaRaftManager:
    def __init__(
        self,
        *,
        node_id: int,
        directory_id: uuid.UUID,
        cluster_id: str,
        metadata_dir: Path,
        raft_config: RaftConfig,
        voters: VoterSet | None,
        bootstrap_servers: list[tuple[str, int]],
        network: NetworkClient,
        local_listeners: Sequence[Endpoint] = (),
        log_config: MetadataLogConfig,
        failure_channel: LogDirFailureChannel | None = None,
        fatal: Callable[[str], None] = halt,
    ) -> None:
        self.node_id = node_id
        self._directory_id = directory_id
        self._cluster_id = cluster_id
        self._metadata_dir = metadata_dir
        self._config = raft_config
        self._voters = voters
        self._local_listeners = tuple(local_listeners)
        self._bootstrap_servers = bootstrap_servers
        self._network = network
        self._log_config = log_config
        # The process's one channel; a node's handler of it halts when the metadata log dir fails.
        self._failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        # What an unexpected error in the Raft loop does: Kafka's raft IO thread halts the process.
        self._fatal = fatal
        self._listeners: list[RaftListener] = []
        # Called after each round of actions, once the listeners have seen them.
        self._poll_hooks: list[Callable[[], None]] = []
        self._leader_change_hooks: list[Callable[[int | None, int], None]] = []
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._handles = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._sends: set[asyncio.Task[None]] = set()
        self._leader: tuple[int | None, int] = (None, 0)
        self._log = log.bind(node=node_id)
        self.client: KafkaRaftClient[MetadataRecord] | None = None
        self.metadata_log: KafkaMetadataLog | None = None
        # raft-metrics commit-latency-avg/-max (broker/metrics/raft_metrics.py): the leader's batches.
        self.commit_latency = CommitLatency()
        # (offset, append timestamp) of the last record every listener has applied: broker-metadata-metrics.
        self.last_applied_record = (-1, -1)

    def register_listener(self, listener: RaftListener) -> None:
        self._listeners.append(listener)

    def add_poll_hook(self, hook: Callable[[], None]) -> None:
        self._poll_hooks.append(hook)

    def add_leader_change_hook(self, hook: Callable[[int | None, int], None]) -> None:
        """Called with each new (leader id or None, epoch) after the listeners."""
        self._leader_change_hooks.append(hook)

    def high_watermark(self) -> int | None:
        """The Raft log's high watermark, None until this node knows it."""
        return None if self.client is None else self.client.high_watermark

    def start(self) -> None:
        # Loading the log, its snapshots and the quorum-state file: an I/O error takes the metadata
        # log dir offline, logged once with the dir and the cause, and the node halts.
        with maybe_handle_io_exception(self._failure_channel, self._metadata_dir, f"Error while loading the metadata log in dir {self._metadata_dir}"):
            self.metadata_log = KafkaMetadataLog.open(metadata_log_dir(self._metadata_dir), self._log_config, failure_channel=self._failure_channel)
            store = FileQuorumStateStore(metadata_log_dir(self._metadata_dir) / DEFAULT_FILE_NAME)
            self.client = KafkaRaftClient(
                node_id=self.node_id,
                directory_id=self._directory_id,
                cluster_id=self._cluster_id,
                config=self._config,
                log=self.metadata_log,
                store=store,
                serde=MetadataRecordSerde(),
                voters=self._voters,
                bootstrap_servers=self._bootstrap_servers,
                now_ms=now_ms(),
                local_listeners=self._local_listeners,
            )
        self._task = asyncio.create_task(self._drive(), name="raft-driver")

    @property
    def leader(self) -> tuple[int | None, int]:
        """(leader id or None, epoch) as this node last learned it."""
        return self._leader

    def leader_endpoint(self) -> tuple[int, str, int] | None:
        leader_id, _ = self._leader
        if leader_id is None or self.client is None:
            return None
        endpoint = self.client.leader_endpoint()
        if endpoint is None:
            return None
        return leader_id, endpoint[0], endpoint[1]

    def is_leader(self) -> bool:
        return self.client is not None and self.client.is_leader()

    def append(self, records: list[MetadataRecord]) -> int:
        """Append on the leader; the offset of the last record. Raises if this node is not the leader."""
        assert self.client is not None
        offset = self.client.append(records, now_ms())
        self._wake.set()
        return offset

    def next_append_offset(self) -> int:
        """The offset the next appended record takes (the leader only): a broker epoch is the
        offset of its registration record."""
        assert self.client is not None
        state = self.client.quorum_state.state
        if not isinstance(state, LeaderState):
            raise NotLeaderError("not the leader of the metadata quorum")
        return state.accumulator.next_offset

    def kraft_version(self) -> int:
        """The quorum's kraft.version as this node's log has it (0 before the log is open)."""
        return 0 if self.client is None else int(self.client.kraft_version)

    def upgrade_kraft_version(self, epoch: int, kraft_version: int, validate_only: bool) -> None:
        """The active controller's UpdateFeatures of kraft.version (Kafka's RaftClientKRaftVersionAccessor):
        the leader appends the upgrade, or raises why it cannot (raft/kafka_raft_client.py)."""
        assert self.client is not None
        # The leader writes the upgrade to the metadata log at once, as it does a voter change.
        with self._metadata_log_io():
            written = self.client.upgrade_kraft_version(epoch, kraft_version, validate_only, now_ms())
        if written:
            self._wake.set()

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> Any:
        assert self.client is not None
        return self.client.create_snapshot(snapshot_id, last_contained_log_time_ms)

    async def handle_request(self, body: Any, version: int | None = None) -> Any:
        """A Raft request from the controller listener; its answer may wait (a long-polling Fetch).
        ``version`` is the request's: a Fetch read by the broker's own reader does not carry it."""
        assert self.client is not None
        handle = next(self._handles)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[handle] = future
        try:
            # A Vote or BeginQuorumEpoch writes the quorum-state file, a Fetch may truncate the log.
            with self._metadata_log_io():
                self.client.handle_request(handle, body, now_ms(), version)
        except KafkaStorageError as e:
            self._pending.pop(handle, None)
            # Logged once by the LogDirFailureChannel, whose handler halts this process.
            raise CloseConnection(f"the metadata log dir is offline: {e}") from None
        self._wake.set()
        try:
            return await future
        finally:
            self._pending.pop(handle, None)

    async def resign(self, timeout_ms: int) -> None:
        """Resign gracefully (EndQuorumEpoch, so another voter takes over without waiting out a
        timeout), until this node sees another leader or ``timeout_ms`` passed. It learns of the new
        leader from its BeginQuorumEpoch: the controller listeners must still be open."""
        if self.client is None:
            return
        self.client.begin_shutdown(now_ms(), timeout_ms)
        self._wake.set()
        deadline = time.monotonic() + timeout_ms / 1000
        while not self.client.is_shutdown_complete(now_ms()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def shutdown(self) -> None:
        """Stop driving the client and close the metadata log; ``resign`` first for a graceful exit."""
        if self.client is None:
            return
        if self._task is not None:
            # A flag, not cancel(): wait_for in 3.11 can swallow a cancellation that meets its timeout.
            self._stopped = True
            self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        for future in self._pending.values():
            future.cancel()
        assert self.metadata_log is not None
        self.metadata_log.close()

    async def _drive(self) -> None:
        client = self.client
        assert client is not None
        while not self._stopped:
            self._wake.clear()
            try:
                with self._metadata_log_io():
                    actions = client.poll(now_ms())
                for action in actions:
                    self._carry_out(action)
                for hook in self._poll_hooks:
                    hook()
            except KafkaStorageError:
                # Logged once by the LogDirFailureChannel, whose handler halts this process.
                return
            except Exception as e:
                # A bug must not leave this node up but out of the quorum, answering nothing Raft
                # asks (a leader whose append failed stays leader until it is seen dead): as
                # Kafka's raft IO thread, it halts, and its supervisor starts it again.
                self._log.exception("raft.poll_failed")
                self._fatal(f"Unexpected error in raft IO thread: {e!r}")
                raise
            delay_ms = client.next_deadline_ms() - now_ms()
            if self._wake.is_set() or (delay_ms <= 0 and actions):
                # Always give the loop a turn: the requests and answers that move Raft on arrive there.
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(delay_ms, MIN_IDLE_MS) / 1000)
            except asyncio.TimeoutError:
                pass

    def _metadata_log_io(self) -> AbstractContextManager[None]:
        # The quorum-state file, the log and a fetched snapshot are written in poll and in
        # handle_response: an I/O error takes the metadata log dir offline like any log dir's
        # (Kafka's raft IO thread then halts).
        return maybe_handle_io_exception(self._failure_channel, self._metadata_dir, f"Error while writing the metadata log in dir {self._metadata_dir}")

    def _carry_out(self, action: object) -> None:
        if isinstance(action, Send):
            task = asyncio.create_task(self._send(action))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        elif isinstance(action, Respond):
            future = self._pending.get(action.handle)  # type: ignore[arg-type]
            if future is not None and not future.done():
                future.set_result(action.body)
        elif isinstance(action, CommittedBatch):
            if self.client is not None and self.client.is_leader() and action.batch.append_timestamp > 0:
                self.commit_latency.record(max(now_ms() - action.batch.append_timestamp, 0))
            for listener in self._listeners:
                listener.handle_commit(action.batch)
            self.last_applied_record = (action.batch.last_offset, action.batch.append_timestamp)
        elif isinstance(action, LoadSnapshot):
            records = list(action.records)
            self._log.info("raft.snapshot_loaded", offset=action.snapshot_id.offset, epoch=action.snapshot_id.epoch, records=len(records))
            for listener in self._listeners:
                listener.handle_load_snapshot(action.snapshot_id, records)
            self.last_applied_record = (action.snapshot_id.offset - 1, self._snapshot_timestamp(action.snapshot_id))
        elif isinstance(action, LeaderChange):
            self._leader = (action.leader_id, action.epoch)
            self._log.info("raft.leader_change", leader=action.leader_id, epoch=action.epoch)
            for listener in self._listeners:
                listener.handle_leader_change(action.leader_id, action.epoch)
            for hook in self._leader_change_hooks:
                hook(action.leader_id, action.epoch)

    def _snapshot_timestamp(self, snapshot_id: OffsetAndEpoch) -> int:
        reader = self.metadata_log.read_snapshot(snapshot_id) if self.metadata_log is not None else None
        return last_contained_log_timestamp(reader) if reader is not None else -1

    async def _send(self, action: Send) -> None:
        assert self.client is not None
        try:
            # Kafka's KafkaNetworkChannel leaves the Fetch version to its NetworkClient: the newest the peer takes.
            downgrade = partial(fetch_request_in_version, action.body) if isinstance(action.body, FetchRequest) else None
            response = await self._network.send(action.destination, action.body, timeout_ms=action.timeout_ms, downgrade=downgrade)
        except NetworkError as e:
            self._log.debug("raft.send_failed", destination=action.destination_id, request=type(action.body).__name__, error=str(e))
            response = None
        try:
            with self._metadata_log_io():
                self.client.handle_response(action.correlation_id, response, now_ms())
        except KafkaStorageError:
            return  # Logged once by the LogDirFailureChannel, whose handler halts this process.
        self._wake.set()
