"""SharedServer: what every node runs whatever its roles — storage checks, the network clients,
the metadata quorum's Raft manager and the metadata loader.

Kafka's SharedServer. A controller takes part in the quorum as a voter, a broker-only node as an
observer that fetches the log; both feed the committed batches to one MetadataLoader, whose
publishers are the broker's and the controller's own.

Raft has a NetworkClient of its own, as in Kafka: a request that times out closes its connection,
so a forwarded CreateTopics left waiting on an overloaded controller must not take the Fetch that
would let that controller commit down with it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Callable

import structlog

from broker.channel_builders import controller_channel, inter_broker_channel
from broker.config import BrokerConfig
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.snapshot_generator import SnapshotGenerator
from broker.network_client import NetworkClient
from broker.raft_manager import KafkaRaftManager
from raft.kafka_metadata_log import MetadataLogConfig
from raft.raft_config import RaftConfig
from raft.snapshot_retention import MetadataRetention
from raft.voter_set import Endpoint, VoterNode, VoterSet
from broker.storage_tool import verify_storage
from storage.file_lock import DirLockError, FileLock, lock_dir
from storage.log_dir_failure_channel import LogDirFailureChannel, describe_os_error
from storage.meta_properties import directories_of, parse_kafka_uuid, read_meta_properties

log = structlog.get_logger(__name__)

# How long a node's own calls to other nodes wait for an answer by default (Kafka's request.timeout.ms).
INTER_NODE_REQUEST_TIMEOUT_MS = 30000


def quorum_voter_set(config: BrokerConfig) -> VoterSet | None:
    """controller.quorum.voters as a VoterSet on the controller listener; None when only bootstrap servers are given.
    Static voters support kraft.version 0 only until they tell the leader otherwise (Kafka's VoterSet.fromInetSocketAddresses)."""
    voters = config.quorum_voters
    if not voters:
        return None
    listener = config.controller_listener_name_list[0] if config.controller_listener_name_list else "CONTROLLER"
    return VoterSet(VoterNode(v.node_id, None, (Endpoint(listener, v.host, v.port),), 0, 0) for v in voters)


def _in_worker_thread(work: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
    """The snapshot generator's offload: ``work`` on the default executor, ``done`` back on the loop."""
    future = asyncio.get_running_loop().run_in_executor(None, work)
    future.add_done_callback(lambda f: done(asyncio.CancelledError() if f.cancelled() else f.exception()))


class SharedServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # One per process, as Kafka's: every log of every dir, and the metadata log, report to it.
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.cluster_id = ""
        self.directory_id = uuid.UUID(int=0)
        self.network: NetworkClient | None = None  # to the controllers' listener
        self.inter_broker_network: NetworkClient | None = None  # to the brokers': transaction markers and their verification
        self.raft_network: NetworkClient | None = None
        self.raft_manager: KafkaRaftManager | None = None
        self.metadata_loader = MetadataLoader(high_watermark=self._raft_high_watermark)
        self.dir_locks: dict[Path, FileLock] = {}

    def _raft_high_watermark(self) -> int | None:
        return None if self.raft_manager is None else self.raft_manager.high_watermark()

    def check_storage(self) -> str:
        """Every directory locked, then every log dir formatted for this node and cluster (the
        zero-config node formats its own); the cluster id."""
        cfg = self.config
        self.lock_dirs()
        self.cluster_id = verify_storage(cfg)
        meta = read_meta_properties(cfg.metadata_dir)
        if meta is not None and meta.directory_id:
            self.directory_id = parse_kafka_uuid(meta.directory_id)
        return self.cluster_id

    def lock_dirs(self) -> None:
        """Kafka's `.lock` on every log dir of a broker and on the metadata log dir, held until
        ``shutdown``. Taken before anything in them is read or written: Kafka's own order (the
        meta.properties check, then the metadata log, then the LogManager's locks) lets a combined
        node open, and write, a metadata log that another process runs on before its lock fails.
        Raises DirLockError with Kafka's message when another process holds one. A dir that cannot
        be locked for a disk error goes offline, as Kafka's LogManager takes it (the failure
        handler must be installed), unless it is the metadata log dir or the only one: then the
        node does not start, as Kafka's KafkaRaftManager does not."""
        cfg = self.config
        directories = directories_of(cfg.log_dir_paths, cfg.metadata_dir) if cfg.is_broker else [cfg.metadata_dir]
        try:
            for directory in directories:
                if not directory.is_dir():
                    if not cfg.implicit_quorum:
                        continue  # not formatted: the start-up check refuses it
                    directory.mkdir(parents=True)
                try:
                    self.dir_locks[directory] = lock_dir(directory)
                except OSError as e:
                    message = f"Disk error while locking directory {directory}"
                    if directory == cfg.metadata_dir or len(directories) == 1:
                        raise DirLockError(f"{message}: {describe_os_error(e)}") from None
                    self.log_dir_failure_channel.maybe_add_offline_log_dir(directory, message, e)
        except DirLockError:
            # What this start took, let go; the files stay, as the JVM's exit leaves them.
            for lock in self.dir_locks.values():
                lock.unlock_and_close()
            self.dir_locks.clear()
            raise

    def release_dir_lock(self, directory: Path) -> None:
        """An offline dir's lock, deleted (Kafka's LogManager.handleLogDirFailure destroys it)."""
        lock = self.dir_locks.pop(directory, None)
        if lock is not None:
            try:
                lock.destroy()
            except OSError as e:
                log.warning("log_dir.lock_not_released", dir=str(directory), cause=describe_os_error(e))

    def start_raft(self) -> KafkaRaftManager:
        """Open the metadata log and start the Raft manager; the loader is its first listener."""
        cfg = self.config
        to_controllers = controller_channel(cfg)
        self.network = NetworkClient(f"kbroker-{cfg.node_id}", request_timeout_ms=INTER_NODE_REQUEST_TIMEOUT_MS, channel=to_controllers)
        # The Raft client's Fetch goes out in the newest version each controller takes, as Kafka's (ApiVersions).
        # Its requests, the ApiVersions of a new connection included, time out after the quorum's
        # request timeout, as in Kafka's KafkaRaftManager: an ApiVersions lost in a partition held the
        # connection, and every Raft request to that node, for the whole connection setup timeout.
        self.raft_network = NetworkClient(
            f"kbroker-{cfg.node_id}-raft", request_timeout_ms=cfg.controller_quorum_request_timeout_ms, channel=to_controllers, discover_api_versions=True
        )
        if cfg.is_broker:
            self.inter_broker_network = NetworkClient(
                f"kbroker-{cfg.node_id}-inter-broker", request_timeout_ms=INTER_NODE_REQUEST_TIMEOUT_MS, channel=inter_broker_channel(cfg)
            )
        raft = KafkaRaftManager(
            node_id=cfg.node_id,
            directory_id=self.directory_id,
            cluster_id=self.cluster_id,
            metadata_dir=cfg.metadata_dir,
            raft_config=RaftConfig(
                election_timeout_ms=cfg.controller_quorum_election_timeout_ms,
                fetch_timeout_ms=cfg.controller_quorum_fetch_timeout_ms,
                election_backoff_max_ms=cfg.controller_quorum_election_backoff_max_ms,
                request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
                retry_backoff_ms=cfg.controller_quorum_retry_backoff_ms,
                append_linger_ms=cfg.controller_quorum_append_linger_ms,
            ),
            voters=quorum_voter_set(cfg),
            local_listeners=[Endpoint(lst.name, lst.host, lst.port) for lst in cfg.advertised_controller_listeners] if cfg.is_controller else [],
            bootstrap_servers=cfg.quorum_bootstrap_servers,
            network=self.raft_network,
            log_config=MetadataLogConfig(
                segment_bytes=cfg.metadata_log_segment_bytes,
                segment_min_bytes=cfg.metadata_log_segment_min_bytes,
                segment_ms=cfg.metadata_log_segment_ms,
                retention=MetadataRetention(max_bytes=cfg.metadata_max_retention_bytes, max_ms=cfg.metadata_max_retention_ms),
            ),
            failure_channel=self.log_dir_failure_channel,
        )
        # Before the loader: the generator counts a committed batch's bytes before the loader
        # publishes the image that batch produced.
        self.snapshot_generator = SnapshotGenerator(
            raft,
            max_bytes_since_last_snapshot=cfg.metadata_log_max_record_bytes_between_snapshots,
            max_time_since_last_snapshot_ms=cfg.metadata_log_max_snapshot_interval_ms,
            node_id=cfg.node_id,
            offload=_in_worker_thread,
        )
        raft.register_listener(self.snapshot_generator)
        raft.register_listener(self.metadata_loader)
        raft.add_poll_hook(self.metadata_loader.maybe_finish_catching_up)
        self.metadata_loader.install_publisher(self.snapshot_generator)
        self.raft_manager = raft
        return raft

    def start(self) -> None:
        assert self.raft_manager is not None
        self.raft_manager.start()

    async def resign(self, timeout_ms: int) -> None:
        if self.raft_manager is not None:
            await self.raft_manager.resign(timeout_ms)

    async def shutdown(self) -> None:
        if self.raft_manager is not None:
            await self.raft_manager.shutdown()
        for network in (self.raft_network, self.network, self.inter_broker_network):
            if network is not None:
                network.close()
                await network.wait_closed()
        # Last, once every log is closed: the next process may take the directories.
        for directory in list(self.dir_locks):
            self.release_dir_lock(directory)


__all__ = ["SharedServer", "quorum_voter_set"]
