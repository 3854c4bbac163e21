"""KafkaServer: start-up, the background schedules, and graceful shutdown of one node."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import signal
import time
from typing import Awaitable, Callable, TypeVar

import structlog

from broker.config import BrokerConfig
from broker.controller.quorum_controller import QuorumController
from broker.fetch_session import FetchSessionCache
from broker.group_coordinator import GroupCoordinator
from broker.handlers.admin_configs import (
    AlterConfigsHandler,
    DescribeConfigsHandler,
    IncrementalAlterConfigsHandler,
)
from broker.handlers.admin_topics import (
    CreatePartitionsHandler,
    CreateTopicsHandler,
    DeleteTopicsHandler,
)
from broker.handlers.api_versions import api_versions_response
from broker.handlers.cluster import DescribeClusterHandler, DescribeLogDirsHandler
from broker.handlers.delete_records import DeleteRecordsHandler
from broker.handlers.describe_producers import DescribeProducersHandler
from broker.handlers.fetch import FetchHandler
from broker.handlers.init_producer_id import InitProducerIdHandler
from broker.handlers.groups import (
    ConsumerGroupDescribeHandler,
    ConsumerGroupHeartbeatHandler,
    DeleteGroupsHandler,
    DescribeGroupsHandler,
    FindCoordinatorHandler,
    HeartbeatHandler,
    JoinGroupHandler,
    LeaveGroupHandler,
    ListGroupsHandler,
    OffsetCommitHandler,
    OffsetDeleteHandler,
    OffsetFetchHandler,
    SyncGroupHandler,
)
from broker.handlers.list_offsets import ListOffsetsHandler
from broker.handlers.metadata import MetadataHandler
from broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from broker.handlers.produce import ProduceHandler
from broker.handlers.transactions import (
    AddOffsetsToTxnHandler,
    AddPartitionsToTxnHandler,
    DescribeTransactionsHandler,
    EndTxnHandler,
    ListTransactionsHandler,
    TxnOffsetCommitHandler,
    WriteTxnMarkersHandler,
)
from broker.kafka_apis import KafkaApis, RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_loader import MetadataLoader
from broker.network import SocketServer, TransferMetrics
from broker.producer_id_manager import ProducerIdManager
from broker.replica_manager import ReplicaManager
from broker.transaction.transaction_coordinator import TransactionCoordinator
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from broker.transaction.transaction_state_manager import TransactionStateManager
from protocol.api_keys import ApiKey
from broker.metadata.metadata_log import MetadataLog
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.partition_metadata import flush_partition_metadata

log = structlog.get_logger()

T = TypeVar("T")
SHUTDOWN_GRACE_S = 10.0
ROLLED_SEGMENT_FLUSH_MS = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = TransferMetrics()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.socket_server: SocketServer | None = None

    async def startup(self) -> None:
        cfg = self.config
        started = time.monotonic()
        defaults = LogConfig.from_properties(cfg.topic_defaults())
        self.log_manager = LogManager(cfg.data_dir, defaults, now_ms)
        self.log_manager.startup()
        cluster_id = self.log_manager.ensure_meta_properties(cfg.node_id, cfg.cluster_id)
        listener = cfg.advertised_listener
        endpoint = BrokerEndpoint(cfg.node_id, listener.host, listener.port)
        self.metadata_log = MetadataLog.open(self.log_manager)
        self.metadata_loader = MetadataLoader()
        self.metadata = MetadataCache(cfg.node_id, cluster_id, endpoint)
        self.replica_manager = ReplicaManager(cfg.node_id, self.log_manager, cfg.topic_defaults)
        self.controller = QuorumController(cfg, self.metadata_log, self.metadata, self.metadata_loader)
        self.group_coordinator = GroupCoordinator(cfg, self.controller, self.metadata, self.replica_manager)
        self.txn_state_manager = TransactionStateManager(cfg, self.controller, self.metadata, self.replica_manager)
        self.txn_markers = TransactionMarkerChannelManager(self.replica_manager, self.metadata, self.group_coordinator)
        self.producer_id_manager = ProducerIdManager(cfg.node_id, self.controller)
        self.txn_coordinator = TransactionCoordinator(
            self.txn_state_manager,
            self.producer_id_manager,
            self.txn_markers,
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            transactional_id_expiration_ms=cfg.transactional_id_expiration_ms,
        )
        self.init_producer_id = InitProducerIdHandler(self.producer_id_manager)
        self.init_producer_id.transaction_coordinator = self.txn_coordinator
        # In this order: readers see the new image first, then replicas exist before the
        # coordinators load them.
        for publisher in (self.metadata, self.replica_manager, self.group_coordinator, self.txn_state_manager):
            self.metadata_loader.install_publisher(publisher)
        self.metadata_log.replay(self.metadata_loader)
        self.controller.bootstrap()

        sessions = FetchSessionCache(cfg.max_incremental_fetch_session_cache_slots)
        handlers: dict[ApiKey, Callable[[RequestContext, object], object]] = {
            ApiKey.API_VERSIONS: lambda ctx, req: api_versions_response(ctx.version),
            ApiKey.METADATA: MetadataHandler(self.metadata, self.controller, cfg.auto_create_topics_enable),
            ApiKey.PRODUCE: ProduceHandler(self.replica_manager, self.metadata),
            ApiKey.FETCH: FetchHandler(self.replica_manager, self.metadata, sessions, self.metrics, cfg.fetch_max_bytes),
            ApiKey.LIST_OFFSETS: ListOffsetsHandler(self.replica_manager, self.metadata),
            ApiKey.CREATE_TOPICS: CreateTopicsHandler(self.controller),
            ApiKey.DELETE_TOPICS: DeleteTopicsHandler(self.controller, self.metadata),
            ApiKey.CREATE_PARTITIONS: CreatePartitionsHandler(self.controller),
            ApiKey.DESCRIBE_CONFIGS: DescribeConfigsHandler(self.controller, self.metadata, cfg, self.log_manager.describe_cleaning),
            ApiKey.ALTER_CONFIGS: AlterConfigsHandler(self.controller),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsHandler(self.controller),
            ApiKey.DESCRIBE_CLUSTER: DescribeClusterHandler(self.metadata),
            ApiKey.DELETE_RECORDS: DeleteRecordsHandler(self.replica_manager, self.metadata),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochHandler(self.replica_manager, self.metadata),
            ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsHandler(self.replica_manager, cfg),
            ApiKey.FIND_COORDINATOR: FindCoordinatorHandler(self.group_coordinator, self.metadata, self.txn_state_manager),
            ApiKey.JOIN_GROUP: JoinGroupHandler(self.group_coordinator),
            ApiKey.SYNC_GROUP: SyncGroupHandler(self.group_coordinator),
            ApiKey.HEARTBEAT: HeartbeatHandler(self.group_coordinator),
            ApiKey.LEAVE_GROUP: LeaveGroupHandler(self.group_coordinator),
            ApiKey.OFFSET_COMMIT: OffsetCommitHandler(self.group_coordinator),
            ApiKey.OFFSET_FETCH: OffsetFetchHandler(self.group_coordinator),
            ApiKey.OFFSET_DELETE: OffsetDeleteHandler(self.group_coordinator),
            ApiKey.DESCRIBE_GROUPS: DescribeGroupsHandler(self.group_coordinator),
            ApiKey.LIST_GROUPS: ListGroupsHandler(self.group_coordinator),
            ApiKey.DELETE_GROUPS: DeleteGroupsHandler(self.group_coordinator),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatHandler(self.group_coordinator, self.metadata),
            ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribeHandler(self.group_coordinator, self.metadata),
            ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnHandler(self.txn_coordinator, self.metadata),
            ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnHandler(self.txn_coordinator, self.group_coordinator),
            ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitHandler(self.group_coordinator),
            ApiKey.END_TXN: EndTxnHandler(self.txn_coordinator),
            ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersHandler(self.txn_markers),
            ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsHandler(self.txn_coordinator),
            ApiKey.LIST_TRANSACTIONS: ListTransactionsHandler(self.txn_coordinator),
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.DESCRIBE_PRODUCERS: DescribeProducersHandler(self.replica_manager, self.metadata),
        }
        apis = KafkaApis(handlers)  # type: ignore[arg-type]
        # What start-up built (every partition's log, the metadata image, the modules) mostly
        # lives as long as the process, yet every full collection walked all of it again: with
        # 10,000 partitions that stopped the loop for 130 ms at unforeseeable moments, 18 ms once
        # frozen. Garbage is collected first so that none is frozen; a frozen object dropped later
        # is still freed by reference counting (only a cycle among such objects would stay).
        gc.collect()
        gc.freeze()
        listen = cfg.listener
        self.socket_server = SocketServer(
            listen.host,
            listen.port,
            apis.dispatch,
            max_request_size=cfg.socket_request_max_bytes,
            max_in_flight=cfg.queued_max_requests,
            metrics=self.metrics,
        )
        await self.socket_server.start()
        self._schedule("log-retention", cfg.log_retention_check_interval_ms, self._retention)
        # Rolled segments are fsynced by this job, so it runs at least every second even
        # when log.flush.scheduler.interval.ms (Kafka's default: never) is longer.
        self._schedule("log-flush", min(cfg.log_flush_scheduler_interval_ms, ROLLED_SEGMENT_FLUSH_MS), self._flush)
        self._schedule("recovery-point-checkpoint", cfg.log_flush_offset_checkpoint_interval_ms, self._checkpoint)
        self._schedule("delete-segments", 1000, self._delete_segments)
        self._schedule("producer-id-expiration", cfg.producer_id_expiration_check_interval_ms, self._expire_producers)
        self._schedule("group-metadata-cleanup", cfg.offsets_retention_check_interval_ms, self.group_coordinator.cleanup_group_metadata)
        self._schedule("transaction-abort", cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms, self.txn_coordinator.abort_timed_out_transactions)
        self._schedule(
            "transactional-id-expiration", cfg.transaction_remove_expired_transaction_cleanup_interval_ms, self.txn_coordinator.remove_expired_transactional_ids
        )
        self.log_manager.start_cleaner(cfg.cleaner_config(), run_on_loop(asyncio.get_running_loop()))
        log.info(
            "broker.started",
            node_id=cfg.node_id,
            cluster_id=cluster_id,
            listener=f"{listen.name}://{listen.host}:{self.socket_server.port}",
            log_dir=str(cfg.data_dir),
            partitions=len(self.replica_manager.partitions),
            startup_s=round(time.monotonic() - started, 3),
        )

    def _schedule(self, name: str, interval_ms: int, job: Callable[[], Awaitable[None] | None]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    result = job()
                    if result is not None:
                        await result
                except Exception:
                    log.exception("scheduler.job_failed", job=name)

        self._tasks.append(asyncio.create_task(loop(), name=name))

    def _retention(self) -> None:
        deleted = self.log_manager.cleanup_logs()
        if deleted:
            log.info("log.retention", segments_deleted=deleted)
            self.replica_manager.fetch_purgatory.touch_all()

    async def _flush(self) -> None:
        self.log_manager.flush_dirty_logs()
        files = self.log_manager.take_unflushed_partition_metadata()
        if files:
            # fsync releases the GIL: 50 new partitions' files no longer stall every client.
            await asyncio.to_thread(flush_partition_metadata, files)

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    def _delete_segments(self) -> None:
        self.log_manager.delete_pending_segments()

    def _expire_producers(self) -> None:
        self.log_manager.remove_expired_producers(self.config.producer_id_expiration_ms)

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait_for_stop(self) -> None:
        await self._stopping.wait()

    async def shutdown(self) -> None:
        log.info("broker.stopping")
        if self.socket_server is not None:
            await self.socket_server.stop_accepting()
            self.replica_manager.fetch_purgatory.touch_all()
            await self.socket_server.close_connections(SHUTDOWN_GRACE_S)
        self.group_coordinator.shutdown()
        self.txn_state_manager.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # In a thread: the cleaner threads finish their step on this loop before they stop.
        await asyncio.to_thread(self.log_manager.stop_cleaner)
        self.log_manager.shutdown()
        log.info("fetch.bytes", sendfile_bytes=self.metrics.sendfile_bytes, copied_bytes=self.metrics.copied_bytes)
        log.info("broker.stopped")


class run_on_loop:  # noqa: N801 - used as a function: run_on_loop(loop)(fn)
    """For threads (the log cleaner's): run a function on ``loop`` and wait for its result."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def __call__(self, fn: Callable[[], T]) -> T:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as e:
                done.set_exception(e)

        self._loop.call_soon_threadsafe(call)
        return done.result()


async def serve(config: BrokerConfig) -> None:
    server = KafkaServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    await server.startup()
    await server.wait_for_stop()
    await server.shutdown()
