"""BrokerServer: the broker role of a node — logs, partitions, coordinators and the client listeners.

Kafka's BrokerServer. Metadata reaches it only through the metadata loader's publishers, and it
reaches the controller only through the ControllerChannel: admin writes are forwarded, topics a
broker creates on its own go through the AutoTopicCreationManager, producer-id blocks through
AllocateProducerIds, and the BrokerLifecycleManager registers and heartbeats. Its client
listeners open only once the controller has unfenced it (it has caught up with the metadata log),
as Kafka's do, so a client never sees a broker that does not know the cluster yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import concurrent.futures
import gc
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable, Mapping, TypeVar

import structlog

from broker.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from broker.alter_partition_manager import AlterPartitionManager
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.assignments_manager import AssignmentsManager
from broker.broker_log_dirs import BrokerLogDirs
from broker.broker_lifecycle_manager import AdvertisedListener, BrokerLifecycleManager
from broker.channel_builders import TLS_PROTOCOLS, ListenerSecurityBuilder, inter_broker_channel
from broker.config import BrokerConfig
from broker.connection_quotas import broker_connection_quotas
from broker.controller.feature_control_manager import supported_features, with_kraft_version
from broker.controller_channel import ControllerChannel, LocalController
from broker.fetch_session import FetchSessionCache
from broker.default_state_persister import DefaultStatePersister
from broker.group_coordinator import GroupCoordinator
from broker.handlers.acls import DescribeAclsHandler, create_acls, delete_acls
from broker.handlers.admin_configs import DescribeConfigsHandler
from broker.handlers.alter_replica_log_dirs import AlterReplicaLogDirsHandler
from broker.handlers.api_versions import FeatureInfo, NodeIdentity, api_versions_answer
from broker.client_metrics_manager import ClientMetricsManager
from broker.handlers.list_config_resources import ListConfigResourcesHandler
from broker.handlers.telemetry import ClientMetricsPublisher, GetTelemetrySubscriptionsHandler, PushTelemetryHandler, recording_client_software
from broker.handlers.cluster import DescribeClusterHandler, DescribeLogDirsHandler
from broker.handlers.delete_records import DeleteRecordsHandler
from broker.handlers.describe_producers import DescribeProducersHandler
from broker.handlers.describe_topic_partitions import DescribeTopicPartitionsHandler
from broker.handlers.fetch import FetchHandler
from broker.auth_helper import AuthHelper
from broker.dynamic_broker_config import REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND, DynamicBrokerConfig
from broker.dynamic_listener_config import DynamicListenerConfig, listener_store_config, reconfiguration_problem, with_overrides
from broker.client_quota_manager import FETCH, PRODUCE, ClientQuotaManager
from broker.client_request_quota_manager import ClientRequestQuotaManager
from broker.controller_mutation_quota_manager import ControllerMutationQuotaManager
from broker.metadata import metadata_version as mv
from broker.metadata.acl_publisher import AclPublisher
from broker.security.standard_authorizer import parse_super_users
from broker.security.standard_acl import AclOperation
from broker.controller.envelope import FORWARDABLE_APIS
from broker.handlers.forwarding import ForwardAlterConfigsHandler, ForwardToControllerHandler
from broker.handlers.share_group_state import (
    DeleteShareGroupStateHandler,
    InitializeShareGroupStateHandler,
    ReadShareGroupStateHandler,
    ReadShareGroupStateSummaryHandler,
    WriteShareGroupStateHandler,
)
from broker.handlers.share_fetch import (
    ReplicaManagerLogReader,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
    group_share_settings,
    release_on_disconnect,
)
from broker.handlers.share_groups import ShareGroupDescribeHandler, ShareGroupHeartbeatHandler
from broker.handlers.streams_groups import StreamsGroupDescribeHandler, StreamsGroupHeartbeatHandler, StreamsGroupTopologyDescriptionUpdateHandler
from broker.handlers.share_group_offsets import (
    AlterShareGroupOffsetsHandler,
    DeleteShareGroupOffsetsHandler,
    DescribeShareGroupOffsetsHandler,
    PartitionLatestOffsets,
)
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
from broker.handlers.init_producer_id import InitProducerIdHandler
from broker.handlers.list_offsets import ListOffsetsHandler
from broker.handlers.metadata import MetadataHandler
from broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from broker.handlers.produce import ProduceHandler
from broker.handlers.client_quotas import DescribeClientQuotasHandler
from broker.handlers.sasl import sasl_authenticate, sasl_handshake
from broker.handlers.scram_credentials import DescribeUserScramCredentialsHandler
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
from broker.metrics.kafka_metrics_exporter import KafkaMetricsExporter
from broker.metrics.node_metrics import broker_collectors
from broker.metrics.share_coordinator_metrics import ShareCoordinatorMetricsCollector
from broker.metrics.share_group_metrics import ShareGroupMetrics, ShareGroupMetricsCollector
from broker.metadata.metadata_image import QuotaEntity, ScramCredential
from broker.network import SharedConnectionQuotas, SocketServer, TransferMetrics
from broker.produce_verification import ProduceVerifier
from broker.producer_id_manager import ControllerProducerIdAllocator, ProducerIdManager
from broker.replica_fetcher_manager import FetcherSettings, ReplicaFetcherManager
from broker.replication_quota_manager import ReplicationQuotaManager
from broker.replica_alter_log_dirs_manager import ReplicaAlterLogDirsManager, throttle_rate
from broker.replica_manager import ReplicaManager
from broker.share.share_group_configs import ShareGroupConfigs
from broker.share.share_group_dlq_manager import DLQBrokerSettings, ShareGroupDLQManager
from broker.share.share_partition_manager import SharePartitionManager
from broker.share.share_session_cache import ShareSessionCache
from broker.share_coordinator.share_coordinator_service import ShareCoordinatorService
from broker.shared_server import SharedServer
from broker.transaction.transaction_coordinator import TransactionCoordinator
from broker.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from broker.transaction.transaction_marker_writer import TransactionMarkerWriter
from broker.transaction.transaction_state_manager import TransactionStateManager
from protocol.api_keys import SUPPORTED_APIS, UNRELEASED_APIS, ApiKey, with_unstable_versions
from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_manager import LogManager

log = structlog.get_logger(__name__)

T = TypeVar("T")
ROLLED_SEGMENT_FLUSH_MS = 1000
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerServer:
    def __init__(self, shared: SharedServer, metrics: TransferMetrics, local_controller: LocalController | None) -> None:
        cfg = shared.config
        self.config = cfg
        self.metrics = metrics
        # unstable.api.versions.enable also brings the APIs kbroker has not finished (UNRELEASED_APIS).
        self._apis = with_unstable_versions(SUPPORTED_APIS) | UNRELEASED_APIS if cfg.unstable_api_versions_enable else SUPPORTED_APIS
        self._shared = shared
        # The id of the one log dir this broker registers (meta.properties' directory.id).
        self._directory_id: uuid.UUID = shared.directory_id
        self._tasks: list[asyncio.Task[None]] = []
        self.socket_servers: list[SocketServer] = []
        raft = shared.raft_manager
        assert raft is not None and shared.network is not None
        # Server.properties with the cluster's and this broker's dynamic configs on top, as they change.
        self.dynamic_config = DynamicBrokerConfig(cfg.node_id, cfg)
        defaults = LogConfig.from_properties(cfg.topic_defaults())
        self.log_manager = LogManager(cfg.log_dir_paths, defaults, now_ms, shared.log_dir_failure_channel)
        self.log_manager.cordoned_log_dirs = lambda: self.dynamic_config.config.cordoned_log_dir_paths
        self.log_manager.producer_id_expiration_ms = cfg.producer_id_expiration_ms
        self.log_manager.startup()
        self.log_dirs = BrokerLogDirs(self.log_manager, self.log_manager.cordoned_log_dirs, self._directory_id)
        listener = cfg.advertised_listener
        self.metadata = MetadataCache(cfg.node_id, shared.cluster_id, BrokerEndpoint(cfg.node_id, listener.host, listener.port, cfg.broker_rack), listener_name=listener.name)
        self.replica_manager = ReplicaManager(
            cfg.node_id,
            self.log_manager,
            lambda: self.dynamic_config.config.topic_defaults(),
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            broker_epoch=lambda: self.lifecycle.broker_epoch,
        )
        self.channel = ControllerChannel(
            shared.network,
            raft,
            local_controller,
            request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
            retry_backoff_ms=cfg.controller_quorum_retry_backoff_ms,
        )
        self.auto_topic_creation = AutoTopicCreationManager(self.channel)
        self.alter_partition_manager = AlterPartitionManager(
            self.channel, cfg.node_id, lambda: self.lifecycle.broker_epoch, self.replica_manager.high_watermark_moved
        )
        self.replica_manager.alter_partition_manager = self.alter_partition_manager
        self.replica_alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            self.replica_manager, lambda: throttle_rate(self.dynamic_config.value_of(REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND))
        )
        self.replica_fetcher_manager = ReplicaFetcherManager(
            FetcherSettings(
                node_id=cfg.node_id,
                listener_name=cfg.inter_broker_listener.name,
                num_fetchers=cfg.num_replica_fetchers,
                fetch_max_bytes=cfg.replica_fetch_max_bytes,
                fetch_response_max_bytes=cfg.replica_fetch_response_max_bytes,
                fetch_wait_max_ms=cfg.replica_fetch_wait_max_ms,
                fetch_min_bytes=cfg.replica_fetch_min_bytes,
                fetch_backoff_ms=cfg.replica_fetch_backoff_ms,
                request_timeout_ms=cfg.replica_socket_timeout_ms,
                channel=inter_broker_channel(cfg),
            ),
            self.metadata,
            lambda: self.lifecycle.broker_epoch,
            ReplicationQuotaManager.follower(self.metadata),
        )
        self.replica_manager.fetcher_manager = self.replica_fetcher_manager
        self.replica_manager.rack_aware_selection = cfg.replica_selector_class == RACK_AWARE_REPLICA_SELECTOR
        self.group_coordinator = GroupCoordinator(cfg, self.auto_topic_creation, self.metadata, self.replica_manager)
        self.txn_state_manager = TransactionStateManager(cfg, self.auto_topic_creation, self.metadata, self.replica_manager)
        self.share_coordinator = ShareCoordinatorService(cfg, self.auto_topic_creation, self.metadata, self.replica_manager)
        # Share groups' partitions become assignable once their share coordinator has initialized them.
        self.group_coordinator.share_state_initializer = share_persister = DefaultStatePersister(
            self.metadata,
            shared.inter_broker_network,
            self.share_coordinator.config.state_topic_num_partitions,
            inter_broker_listener_name=cfg.inter_broker_listener.name,
        )
        # KIP-227's incremental fetch sessions of consumers and followers (Fetch).
        self.fetch_sessions = FetchSessionCache(cfg.max_incremental_fetch_session_cache_slots)
        # KIP-932's ShareFetch/ShareAcknowledge: share sessions, and the share partitions this node leads.
        self.share_sessions = ShareSessionCache(cfg.group_share_max_share_sessions)
        share_group_configs = ShareGroupConfigs.of_metadata(cfg, self.metadata)
        self.share_settings = group_share_settings(share_group_configs)
        share_log_reader = ReplicaManagerLogReader(self.replica_manager, self.metadata)
        # KIP-1191: with share.version 2, what share partitions archive goes to their group's DLQ topic.
        self.share_group_dlq = ShareGroupDLQManager(
            self.metadata,
            shared.inter_broker_network,
            share_group_configs,
            self.auto_topic_creation,
            share_log_reader,
            lambda: DLQBrokerSettings.of(self.dynamic_config.config),
            inter_broker_listener_name=cfg.inter_broker_listener.name,
        )
        self.share_partition_manager = SharePartitionManager(
            cfg.node_id, share_log_reader, share_persister, self.share_settings, self.replica_manager.fetch_purgatory, dlq=self.share_group_dlq,
            metrics=ShareGroupMetrics(self.replica_manager.topic_stats),
        )
        self.txn_marker_writer = TransactionMarkerWriter(self.replica_manager, self.metadata, self.group_coordinator)
        self.txn_markers = TransactionMarkerChannelManager(
            self.metadata, self.txn_marker_writer, shared.inter_broker_network, inter_broker_listener_name=cfg.inter_broker_listener.name
        )
        loader = shared.metadata_loader
        self.lifecycle = BrokerLifecycleManager(
            broker_id=cfg.node_id,
            cluster_id=shared.cluster_id,
            rack=cfg.broker_rack,
            listeners=[AdvertisedListener(lst.name, lst.host, lst.port) for lst in cfg.advertised_broker_listeners],
            features=supported_features(self.config.unstable_feature_versions_enable),
            previous_broker_epoch=self.log_manager.clean_shutdown_broker_epoch,
            log_dir_ids=self.log_dirs.registered_ids(),
            heartbeat_interval_ms=cfg.broker_heartbeat_interval_ms,
            session_timeout_ms=cfg.broker_session_timeout_ms,
            quorum_fetch_timeout_ms=cfg.controller_quorum_fetch_timeout_ms,
            channel=self.channel,
            metadata_offset=lambda: loader.image.provenance,
            cordoned_log_dirs=self.log_dirs.cordoned_ids,
            cordoned_log_dirs_supported=self._cordoned_log_dirs_supported,
            offline_log_dirs=self.log_dirs.offline_ids,
        )
        raft.add_leader_change_hook(self.lifecycle.handle_leader_change)
        self.replica_manager.in_session = self._in_session
        self.assignments_manager = AssignmentsManager(cfg.node_id, self.log_manager, self.channel, lambda: self.lifecycle.broker_epoch)
        # A moving replica swaps dirs once the controller names the new one (Kafka's directoryEventHandler).
        self.replica_alter_log_dirs_manager.assignments = self.assignments_manager
        self.producer_id_manager = ProducerIdManager(cfg.node_id, ControllerProducerIdAllocator(self.channel, lambda: self.lifecycle.broker_epoch))
        self.txn_coordinator = TransactionCoordinator(
            self.txn_state_manager,
            self.producer_id_manager,
            self.txn_markers,
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            transactional_id_expiration_ms=cfg.transactional_id_expiration_ms,
        )
        self.add_partitions_to_txn_manager = AddPartitionsToTxnManager(
            self.metadata,
            self.txn_coordinator,
            shared.inter_broker_network,
            self.txn_state_manager.partition_for,
            inter_broker_listener_name=cfg.inter_broker_listener.name,
        )
        # The config the listeners serve with: server.properties and this broker's dynamic store configs.
        self.listener_security = ListenerSecurityBuilder(cfg, self._scram_credential)
        self.dynamic_listener_config = DynamicListenerConfig(cfg.node_id, cfg, self._reconfigure_listeners)
        self.acl_publisher = AclPublisher(bool(cfg.authorizer_class_name), parse_super_users(cfg.super_users), cfg.allow_everyone_if_no_acl_found)
        self.auth = AuthHelper(self.acl_publisher)
        self.produce_quota = ClientQuotaManager(PRODUCE, self._client_quotas, cfg.quota_window_num, cfg.quota_window_size_seconds)
        self.fetch_quota = ClientQuotaManager(FETCH, self._client_quotas, cfg.quota_window_num, cfg.quota_window_size_seconds)
        self.request_quota = ClientRequestQuotaManager(self._client_quotas, cfg.quota_window_num, cfg.quota_window_size_seconds)
        self.mutation_quota = ControllerMutationQuotaManager(self._client_quotas, cfg.controller_quota_window_num, cfg.controller_quota_window_size_seconds)
        self.init_producer_id = InitProducerIdHandler(self.producer_id_manager, self.auth)
        self.init_producer_id.transaction_coordinator = self.txn_coordinator
        self._connection_quotas: SharedConnectionQuotas | None = None
        self._cleaner_restart: asyncio.Task[None] | None = None
        self.produce_verifier = ProduceVerifier(
            self.replica_manager,
            self.add_partitions_to_txn_manager,
            verify=cfg.transaction_partition_verification_enable,
            retry_backoff_ms=cfg.add_partitions_to_txn_retry_backoff_ms,
            retry_max_ms=cfg.add_partitions_to_txn_retry_backoff_max_ms,
        )
        self.txn_offset_commit = TxnOffsetCommitHandler(
            self.group_coordinator, self.add_partitions_to_txn_manager, verify=cfg.transaction_partition_verification_enable, auth=self.auth, metadata=self.metadata
        )
        self.dynamic_config.add_reconfigurable("log-config", self._reconfigure_log_configs)
        self.dynamic_config.add_reconfigurable("log-cleaner", self._reconfigure_cleaner)
        self.dynamic_config.add_reconfigurable("replica-fetchers", self._reconfigure_fetchers)
        self.dynamic_config.add_reconfigurable("connection-quotas", self._reconfigure_connection_quotas)
        self.dynamic_config.add_reconfigurable("producer-state", self._reconfigure_producer_state)
        self.dynamic_config.add_reconfigurable("cordoned-log-dirs", self._reconfigure_cordoned_log_dirs)
        # Client metrics (KIP-714): subscriptions from the image, the clients' latest pushes.
        self.client_metrics = ClientMetricsManager(cfg.telemetry_max_bytes)
        # In this order: the dynamic configs first (the replicas' log configs read them), readers
        # see the new image next, then replicas exist before the coordinators load them.
        self._publishers = (
            self.dynamic_config,
            self.metadata,
            self.acl_publisher,
            self.dynamic_listener_config,
            self.replica_manager,
            self.assignments_manager,
            self.group_coordinator,
            self.txn_state_manager,
            self.share_coordinator,
            self.share_partition_manager,
            ClientMetricsPublisher(self.client_metrics),
        )
        for publisher in self._publishers:
            loader.install_publisher(publisher)
        # metrics.listener (broker/metrics/, docs/metrics.md): this broker's collectors on the node's endpoint.
        self.metrics_exporter = KafkaMetricsExporter.for_node(shared)
        self._metrics_collectors = broker_collectors(self) if self.metrics_exporter is not None else []
        if self.metrics_exporter is not None:
            self._metrics_collectors += [
                ShareGroupMetricsCollector(self.share_partition_manager.metrics, self.share_partition_manager, self.share_sessions, self.group_coordinator),
                ShareCoordinatorMetricsCollector(self.share_coordinator),
            ]
        for collector in self._metrics_collectors:
            self.metrics_exporter.register(collector)  # type: ignore[union-attr]

    def _client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return self.metadata.image.client_quotas

    def _feature_info(self) -> FeatureInfo:
        image = self.metadata.image
        # Kafka's KRaftMetadataCache.features: kraft.version from the Raft layer, not the image.
        raft = self._shared.raft_manager
        finalized = with_kraft_version(image.features, raft.kraft_version() if raft is not None else 0)
        return FeatureInfo(supported_features(self.config.unstable_feature_versions_enable), finalized, image.provenance)

    def _reconfigure_listeners(self, cfg: BrokerConfig) -> None:
        """This broker's dynamic store configs changed: TLS listeners serve new connections with them."""
        self.listener_security.config = cfg
        for server in self.socket_servers:
            if cfg.security_protocol_map[server.listener] in TLS_PROTOCOLS:
                server.reconfigure(dataclasses.replace(server.security, ssl_context=self.listener_security.tls_context(server.listener)))
                log.info("listener.reconfigured", listener=server.listener)

    def _check_listener_stores(self, changes: dict[str, str | None]) -> str | None:
        """Before forwarding: why this broker's TLS listeners could not serve with these stores."""
        updated = with_overrides(self.listener_security.config, changes)
        tls = {name for name, protocol in self.config.security_protocol_map.items() if protocol in ("SSL", "SASL_SSL")}
        for key in changes:
            listener = listener_store_config(key)
            if listener is not None and listener.upper() in tls:
                problem = reconfiguration_problem(self.listener_security.config, updated, listener.upper())
                if problem is not None:
                    return problem
        return None

    def _scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        """A SCRAM exchange's credential: the metadata log's, as this broker has applied it."""
        return self.metadata.image.scram_credentials.get((user, mechanism))

    def _in_session(self) -> bool:
        """The controller cannot have fenced this broker yet (BrokerSessionLease)."""
        return self.lifecycle.lease.holds(asyncio.get_running_loop().time())

    def _handlers(self) -> dict[ApiKey, Callable[[RequestContext, object], object]]:
        cfg = self.config
        identity = NodeIdentity(self.metadata.cluster_id, cfg.node_id)
        handlers: dict[ApiKey, Callable[[RequestContext, object], object]] = {
            ApiKey.API_VERSIONS: lambda ctx, req: api_versions_answer(ctx.version, req, self._apis, features=self._feature_info(), identity=identity if ctx.client.authenticated else None),
            ApiKey.METADATA: MetadataHandler(self.metadata, self.auto_topic_creation, cfg.auto_create_topics_enable, self.auth),
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: DescribeTopicPartitionsHandler(self.metadata, cfg.max_request_partition_size_limit, self.auth),
            ApiKey.PRODUCE: ProduceHandler(self.replica_manager, self.metadata, self.produce_verifier, self.auth, self.produce_quota),
            ApiKey.FETCH: FetchHandler(
                self.replica_manager, self.metadata, self.fetch_sessions, self.metrics, cfg.fetch_max_bytes, ReplicationQuotaManager.leader(self.metadata), self.auth, self.fetch_quota
            ),
            ApiKey.LIST_OFFSETS: ListOffsetsHandler(self.replica_manager, self.metadata, self.auth),
            ApiKey.DESCRIBE_CONFIGS: DescribeConfigsHandler(self.metadata, self.dynamic_config, self.log_manager.describe_cleaning, self.auth),
            ApiKey.DESCRIBE_CLUSTER: DescribeClusterHandler(self.metadata, self.auth),
            ApiKey.DELETE_RECORDS: DeleteRecordsHandler(self.replica_manager, self.metadata, self.auth),
            ApiKey.ALTER_REPLICA_LOG_DIRS: AlterReplicaLogDirsHandler(
                self.replica_manager, self.metadata, self.replica_alter_log_dirs_manager, self.auth, lambda: self.dynamic_config.config.cordoned_log_dir_paths
            ),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochHandler(self.replica_manager, self.metadata, self.auth),
            ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsHandler(
                self.replica_manager, cfg, self.auth, lambda d: self._cordoned_log_dirs_supported() and self.log_dirs.is_cordoned(d)
            ),
            ApiKey.FIND_COORDINATOR: FindCoordinatorHandler(self.group_coordinator, self.metadata, self.txn_state_manager, self.share_coordinator, self.auth),
            ApiKey.JOIN_GROUP: JoinGroupHandler(self.group_coordinator, self.auth),
            ApiKey.SYNC_GROUP: SyncGroupHandler(self.group_coordinator, self.auth),
            ApiKey.HEARTBEAT: HeartbeatHandler(self.group_coordinator, self.auth),
            ApiKey.LEAVE_GROUP: LeaveGroupHandler(self.group_coordinator, self.auth),
            ApiKey.OFFSET_COMMIT: OffsetCommitHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DescribeUserScramCredentialsHandler(self.metadata, self.auth),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasHandler(self.metadata, self.auth),
            ApiKey.DESCRIBE_ACLS: DescribeAclsHandler(self.acl_publisher, self.auth),
            ApiKey.SASL_HANDSHAKE: sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
            ApiKey.OFFSET_FETCH: OffsetFetchHandler(self.group_coordinator, self.metadata, self._in_session, cfg.offsets_commit_timeout_ms, self.auth),
            ApiKey.OFFSET_DELETE: OffsetDeleteHandler(self.group_coordinator, self.auth),
            ApiKey.DESCRIBE_GROUPS: DescribeGroupsHandler(self.group_coordinator, self.auth),
            ApiKey.LIST_GROUPS: ListGroupsHandler(self.group_coordinator, self.auth),
            ApiKey.DELETE_GROUPS: DeleteGroupsHandler(self.group_coordinator, self.auth),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribeHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.SHARE_GROUP_HEARTBEAT: ShareGroupHeartbeatHandler(self.group_coordinator, self.metadata, self.auth, self.share_partition_manager.metrics),
            ApiKey.SHARE_GROUP_DESCRIBE: ShareGroupDescribeHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.STREAMS_GROUP_HEARTBEAT: StreamsGroupHeartbeatHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.STREAMS_GROUP_DESCRIBE: StreamsGroupDescribeHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: StreamsGroupTopologyDescriptionUpdateHandler(self.metadata, self.auth),
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: DescribeShareGroupOffsetsHandler(
                self.group_coordinator,
                self.metadata,
                PartitionLatestOffsets(self.metadata, self.replica_manager, self._shared.inter_broker_network, cfg.inter_broker_listener.name),
                self.auth,
            ),
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: AlterShareGroupOffsetsHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: DeleteShareGroupOffsetsHandler(self.group_coordinator, self.metadata, self.auth),
            ApiKey.SHARE_FETCH: ShareFetchHandler(self.share_partition_manager, self.share_sessions, self.metadata, self.auth, self.share_settings),
            ApiKey.SHARE_ACKNOWLEDGE: ShareAcknowledgeHandler(self.share_partition_manager, self.share_sessions, self.metadata, self.auth, self.share_settings),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: InitializeShareGroupStateHandler(self.share_coordinator, self.auth),
            ApiKey.READ_SHARE_GROUP_STATE: ReadShareGroupStateHandler(self.share_coordinator, self.auth),
            ApiKey.WRITE_SHARE_GROUP_STATE: WriteShareGroupStateHandler(self.share_coordinator, self.auth),
            ApiKey.DELETE_SHARE_GROUP_STATE: DeleteShareGroupStateHandler(self.share_coordinator, self.auth),
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: ReadShareGroupStateSummaryHandler(self.share_coordinator, self.auth),
            ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnHandler(self.txn_coordinator, self.metadata, self.auth),
            ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnHandler(self.txn_coordinator, self.group_coordinator, self.auth),
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            ApiKey.END_TXN: EndTxnHandler(self.txn_coordinator, self.auth),
            ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersHandler(self.txn_marker_writer, self.auth),
            ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsHandler(self.txn_coordinator, self.auth),
            ApiKey.LIST_TRANSACTIONS: ListTransactionsHandler(self.txn_coordinator, self.auth),
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.DESCRIBE_PRODUCERS: DescribeProducersHandler(self.replica_manager, self.metadata, self.auth),
        }
        handlers[ApiKey.API_VERSIONS] = recording_client_software(self.client_metrics, handlers[ApiKey.API_VERSIONS])
        handlers[ApiKey.GET_TELEMETRY_SUBSCRIPTIONS] = GetTelemetrySubscriptionsHandler(self.client_metrics)
        handlers[ApiKey.PUSH_TELEMETRY] = PushTelemetryHandler(self.client_metrics)
        handlers[ApiKey.LIST_CONFIG_RESOURCES] = ListConfigResourcesHandler(self.metadata, self.client_metrics.subscription_names, self.auth)
        for key in FORWARDABLE_APIS:
            handlers[key] = ForwardToControllerHandler(key, self.channel, self.auth, lambda: self.metadata.image, self.mutation_quota, cfg.num_partitions)
        for key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            handlers[key] = ForwardAlterConfigsHandler(key, self.channel, cfg.node_id, self.auth, self._check_listener_stores, self.dynamic_config)
        if not self.auth.enabled:
            handlers[ApiKey.CREATE_ACLS] = create_acls
            handlers[ApiKey.DELETE_ACLS] = delete_acls
        return handlers

    async def start(self, started_at: float) -> None:
        """Register, wait to be unfenced, then open the client listeners and the background jobs."""
        cfg = self.config
        if self.metrics_exporter is not None:
            await self.metrics_exporter.start()  # scraped while the broker waits to be unfenced, too
        self.alter_partition_manager.start()
        self.lifecycle.start()
        self.assignments_manager.start()
        self.replica_alter_log_dirs_manager.start()
        log.info("broker.waiting_for_unfence", node_id=cfg.node_id)
        await self.lifecycle.unfenced.wait()
        # Unfenced means caught up with the metadata log: what is not assigned here now never will be.
        self.replica_manager.delete_stray_logs()
        request_metrics = self.metrics_exporter.request_metrics if self.metrics_exporter is not None else None
        apis = KafkaApis(
            self._handlers(),  # type: ignore[arg-type]
            self._apis,
            request_quota=self.request_quota,
            cluster_action=lambda ctx: self.auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION, log_if_denied=False),
            request_metrics=request_metrics,
        )
        # What start-up built (every partition's log, the metadata image, the modules) mostly
        # lives as long as the process, yet every full collection walked all of it again: with
        # 10,000 partitions that stopped the loop for 130 ms at unforeseeable moments, 18 ms once
        # frozen. Garbage is collected first so that none is frozen; a frozen object dropped later
        # is still freed by reference counting (only a cycle among such objects would stay).
        gc.collect()
        gc.freeze()
        quotas = self._connection_quotas = SharedConnectionQuotas(broker_connection_quotas(self.dynamic_config.config))
        for listen in cfg.client_listeners:
            server = SocketServer(
                listen.host,
                listen.port,
                apis.dispatch,
                max_request_size=cfg.socket_request_max_bytes,
                max_in_flight=cfg.queued_max_requests,
                metrics=self.metrics,
                security=self.listener_security.listener_security(listen.name),
                quotas=quotas,
                request_metrics=request_metrics,
                # As Kafka's SocketServer tells ClientMetricsManager: a closed connection's client instance goes.
                disconnect_listeners=(self.client_metrics.connection_closed, release_on_disconnect(self.share_sessions, self.share_partition_manager)),
            )
            await server.start()
            self.socket_servers.append(server)
        self._schedule("log-retention", cfg.log_retention_check_interval_ms, self._retention)
        # Rolled segments are fsynced by this job, so it runs at least every second even
        # when log.flush.scheduler.interval.ms (Kafka's default: never) is longer.
        self._schedule("log-flush", min(cfg.log_flush_scheduler_interval_ms, ROLLED_SEGMENT_FLUSH_MS), self._flush)
        self._schedule("recovery-point-checkpoint", cfg.log_flush_offset_checkpoint_interval_ms, self._checkpoint)
        self._schedule("delete-segments", 1000, self._delete_segments)
        self._schedule("high-watermark-checkpoint", cfg.replica_high_watermark_checkpoint_interval_ms, self.log_manager.checkpoint_high_watermarks)
        # Kafka's isr-expiration: half the lag limit, so a stuck follower leaves within 1.5 times it.
        self._schedule("isr-expiration", max(cfg.replica_lag_time_max_ms // 2, 1), self.replica_manager.maybe_shrink_isr)
        self._schedule("producer-id-expiration", cfg.producer_id_expiration_check_interval_ms, self._expire_producers)
        self._schedule("group-metadata-cleanup", cfg.offsets_retention_check_interval_ms, self.group_coordinator.cleanup_group_metadata)
        self._schedule("transaction-abort", cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms, self.txn_coordinator.abort_timed_out_transactions)
        self._schedule(
            "transactional-id-expiration", cfg.transaction_remove_expired_transaction_cleanup_interval_ms, self.txn_coordinator.remove_expired_transactional_ids
        )
        self.log_manager.start_cleaner(self.dynamic_config.config.cleaner_config(), run_on_loop(asyncio.get_running_loop()))
        first = cfg.client_listeners[0]
        log.info(
            "broker.started",
            node_id=cfg.node_id,
            cluster_id=self._shared.cluster_id,
            listener=f"{first.name}://{first.host}:{self.socket_servers[0].port}",
            log_dir=str(cfg.data_dir),
            broker_epoch=self.lifecycle.broker_epoch,
            partitions=len(self.replica_manager.partitions),
            startup_s=round(time.monotonic() - started_at, 3),
        )

    def _schedule(self, name: str, interval_ms: int, job: Callable[[], Awaitable[None] | None]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    result = job()
                    if result is not None:
                        await result
                except KafkaStorageError as e:
                    # Its cause is logged once by the LogDirFailureChannel; no traceback each run.
                    log.warning("scheduler.job_failed", job=name, error=str(e))
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
            await asyncio.to_thread(self.log_manager.flush_partition_metadata, files)

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()
        self.log_manager.checkpoint_high_watermarks()

    async def _delete_segments(self) -> None:
        self.log_manager.delete_pending_segments()
        deleted = self.log_manager.take_deleted_logs()
        if deleted:
            # Kafka's kafka-delete-logs thread: a deleted topic of 8,192 partitions is seconds of
            # unlink and close calls, which would stall every client on the loop.
            await asyncio.to_thread(self.log_manager.finish_deleting_logs, deleted)

    def _expire_producers(self) -> None:
        self.log_manager.remove_expired_producers(self.dynamic_config.config.producer_id_expiration_ms)

    # -- dynamic broker configs (broker/dynamic_broker_config.py) ------------------------------------

    def _reconfigure_log_configs(self, old: BrokerConfig, new: BrokerConfig) -> None:
        if old.topic_defaults() != new.topic_defaults():
            self.replica_manager.reapply_topic_configs()

    def _reconfigure_cleaner(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """As Kafka's LogCleaner.reconfigure: the cleaner threads stop and start again with the new
        settings. Before start() or with the cleaner off there is nothing to restart."""
        if old.cleaner_config() == new.cleaner_config() or self.log_manager.cleaner is None:
            return
        previous = self._cleaner_restart
        self._cleaner_restart = asyncio.get_running_loop().create_task(self._restart_cleaner(previous))

    async def _restart_cleaner(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await previous
        cleaner = self.log_manager.cleaner
        if cleaner is None:
            return
        config = self.dynamic_config.config.cleaner_config()
        # In a thread: the cleaner threads finish their step on this loop before they stop.
        await asyncio.to_thread(cleaner.reconfigure, config)
        log.info("log_cleaner.reconfigured", node_id=self.config.node_id, threads=config.threads)

    def _reconfigure_fetchers(self, old: BrokerConfig, new: BrokerConfig) -> None:
        if old.num_replica_fetchers != new.num_replica_fetchers:
            self._tasks.append(asyncio.get_running_loop().create_task(self.replica_fetcher_manager.resize(new.num_replica_fetchers)))

    def _reconfigure_connection_quotas(self, old: BrokerConfig, new: BrokerConfig) -> None:
        if self._connection_quotas is not None:
            self._connection_quotas.reconfigure(new)

    def _reconfigure_producer_state(self, old: BrokerConfig, new: BrokerConfig) -> None:
        self.produce_verifier.verify = new.transaction_partition_verification_enable
        self.txn_offset_commit.verify = new.transaction_partition_verification_enable

    def _reconfigure_cordoned_log_dirs(self, old: BrokerConfig, new: BrokerConfig) -> None:
        if old.cordoned_log_dir_paths != new.cordoned_log_dir_paths:
            self.lifecycle.propagate_directory_cordoned()

    # -- cordoned log dirs (KIP-1066) ------------------------------------------------------------------

    def _cordoned_log_dirs_supported(self) -> bool:
        return mv.for_level(self.metadata.image.features.get(mv.METADATA_VERSION_FEATURE)).is_cordoned_log_dirs_supported

    def handle_log_dir_failure(self, log_dir: Path) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure, once the node goes on without ``log_dir``:
        its replicas stop fetching, its logs are closed, and the controller hears of it at once."""
        for key in self.log_manager.handle_log_dir_failure(log_dir):
            self.replica_fetcher_manager.remove_fetcher_for(key)
        self.lifecycle.propagate_directory_failure()

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move this broker's leaderships away before the listeners close."""
        if await self.lifecycle.controlled_shutdown(timeout_s):
            log.info("broker.controlled_shutdown_complete", node_id=self.config.node_id)

    async def stop_listeners(self) -> None:
        """Kafka's SocketServer.stopProcessingRequests: no new connections, and every open one
        closed at once. A produce still waiting for its ISR (a node cut off from its followers)
        or a long-polling fetch is not answered: waiting for it held the stop up for seconds,
        and its client retries at the new leader all the same."""
        for server in self.socket_servers:
            await server.stop_accepting()
        for server in self.socket_servers:
            await server.close_connections()

    async def shutdown(self) -> None:
        # First, as Kafka's BrokerServer: the metadata log goes on committing while this broker
        # stops, and a delta applied after the fetchers stopped started a new one, which appended
        # to a log already closed (EBADF: the log dir offline, the broker halted).
        for publisher in self._publishers:
            self._shared.metadata_loader.remove_publisher(publisher)
        await self.lifecycle.close()
        await self.assignments_manager.close()
        await self.replica_alter_log_dirs_manager.close()
        await self.replica_manager.shutdown()
        await self.replica_fetcher_manager.shutdown()
        await self.alter_partition_manager.shutdown()
        self.group_coordinator.shutdown()
        self.txn_state_manager.shutdown()
        await self.share_partition_manager.shutdown()
        await self.share_group_dlq.shutdown()
        self.share_coordinator.shutdown()
        self.txn_markers.shutdown()
        self.add_partitions_to_txn_manager.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._cleaner_restart is not None:
            await asyncio.gather(self._cleaner_restart, return_exceptions=True)
        # In a thread: the cleaner threads finish their step on this loop before they stop.
        await asyncio.to_thread(self.log_manager.stop_cleaner)
        # The marker keeps this registration's epoch: registering with it next time shows a clean shutdown (KIP-966).
        self.log_manager.shutdown(self.lifecycle.broker_epoch)
        if self.metrics_exporter is not None:
            for collector in self._metrics_collectors:
                self.metrics_exporter.unregister(collector)
            await self.metrics_exporter.stop()
        log.info("fetch.bytes", sendfile_bytes=self.metrics.sendfile_bytes, copied_bytes=self.metrics.copied_bytes)


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


__all__ = ["BrokerServer", "run_on_loop"]
