"""ControllerServer: the controller role of a node — the QuorumController and its listeners.

Kafka's ControllerServer. Each controller listener serves the controller's table of APIs only:
the Raft messages go to the Raft manager, everything else (registrations, heartbeats, forwarded
admin writes, producer-id blocks) to ControllerApis. A controller listener is secured as a
broker's is (TLS, SASL with SCRAM credentials from the metadata image), and with an authorizer
every API but ApiVersions is authorized first (ControllerApis.authorized): the admin requests
from anyone but a broker, and those an Envelope carries, per resource for the client.
ApiVersions carries features as Kafka 4.4's controller's does (SimpleApiVersionManager): the
ranges this build supports and the levels finalized in the metadata log (FeaturesPublisher) with
kraft.version from the Raft layer (absent at 0, a static quorum), which
is what Admin.describeFeatures reads, so kafka-features.sh --bootstrap-controller describe works.
Once its listeners are bound, the controller registers itself with the active controller
(KIP-919, broker/controller_registration_manager.py).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import structlog

from broker.auth_helper import AuthHelper
from broker.channel_builders import ListenerSecurityBuilder
from broker.config import SECURITY_PROTOCOLS, BrokerConfig
from broker.controller.controller_apis import ControllerApis, DirectControllerChannel, authorized
from broker.controller.envelope import FORWARDABLE_APIS, EnvelopeHandler, LocalControllerChannel
from broker.controller_mutation_quota_manager import ControllerMutationQuotaManager
from broker.handlers.forwarding import ControllerSender, ForwardToControllerHandler
from broker.controller.quorum_controller import QuorumController
from broker.controller_channel import ControllerChannel
from broker.controller_registration_manager import ControllerRegistrationManager
from broker.controller.feature_control_manager import supported_features, with_kraft_version
from broker.handlers.api_versions import FeatureInfo, api_versions_answer
from broker.handlers.sasl import sasl_authenticate, sasl_handshake
from broker.kafka_apis import KafkaApis, RequestContext
from broker.metadata.acl_publisher import AclPublisher
from broker.metadata.bootstrap_directory import read_bootstrap_metadata
from broker.metadata.features_publisher import FeaturesPublisher
from broker.metadata.metadata_records import BrokerEndpoint
from broker.metrics.kafka_metrics_exporter import KafkaMetricsExporter
from broker.metrics.node_metrics import controller_collectors
from broker.metrics.request_metrics import RequestChannelMetrics
from broker.network import SocketServer, TransferMetrics
from broker.raft_manager import KafkaRaftManager
from broker.security.standard_authorizer import parse_super_users
from broker.shared_server import SharedServer
from protocol.api_keys import CONTROLLER_APIS, ApiKey

log = structlog.get_logger(__name__)

RAFT_APIS = (
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.DESCRIBE_QUORUM,
    ApiKey.FETCH,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.ADD_RAFT_VOTER,
    ApiKey.REMOVE_RAFT_VOTER,
    ApiKey.UPDATE_RAFT_VOTER,
)


class ControllerServer:
    def __init__(self, shared: SharedServer, metrics: TransferMetrics) -> None:
        self.config: BrokerConfig = shared.config
        self._shared = shared
        self._metrics = metrics
        self.socket_servers: list[SocketServer] = []
        raft = shared.raft_manager
        assert raft is not None
        self._raft: KafkaRaftManager = raft
        loader = shared.metadata_loader
        bootstrap = read_bootstrap_metadata(self.config.metadata_dir) or ()
        self.controller = QuorumController(self.config, raft, lambda: loader.image, shared.cluster_id, bootstrap=bootstrap)
        # After the loader: the controller decides over an image that already holds each batch.
        raft.register_listener(self.controller)
        cfg = self.config
        self.acl_publisher = AclPublisher(bool(cfg.authorizer_class_name), parse_super_users(cfg.super_users), cfg.allow_everyone_if_no_acl_found)
        loader.install_publisher(self.acl_publisher)
        self.features_publisher = FeaturesPublisher()
        loader.install_publisher(self.features_publisher)
        # Kafka's controller passes unstable.api.versions.enable, not unstable.feature.versions.enable,
        # to the supported ranges its ApiVersions shows (what it registers with follows the latter).
        self._supported_features = supported_features(cfg.unstable_api_versions_enable)
        self.apis = ControllerApis(self.controller, cfg, shared.cluster_id, raft, self.acl_publisher)
        assert shared.network is not None
        channel = ControllerChannel(
            shared.network, raft, self.apis, request_timeout_ms=cfg.controller_quorum_request_timeout_ms, retry_backoff_ms=cfg.controller_quorum_retry_backoff_ms
        )
        # A new incarnation id per process, as Kafka's ControllerServer draws one.
        self.registration_manager = ControllerRegistrationManager(
            node_id=cfg.node_id,
            incarnation_id=uuid.uuid4(),
            features=self.controller.supported_features,
            channel=channel,
            request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
        )
        loader.install_publisher(self.registration_manager)
        # metrics.listener (broker/metrics/, docs/metrics.md): this controller's collectors on the node's endpoint.
        self.metrics_exporter = KafkaMetricsExporter.for_node(shared)
        self._metrics_collectors = controller_collectors(self, with_transfer=not cfg.is_broker) if self.metrics_exporter is not None else []
        for collector in self._metrics_collectors:
            self.metrics_exporter.register(collector)  # type: ignore[union-attr]

    def _handlers(self, request_metrics: RequestChannelMetrics | None) -> dict[ApiKey, Callable[[RequestContext, Any], Any]]:
        handlers: dict[ApiKey, Callable[[RequestContext, Any], Any]] = dict(self.apis.handlers())
        raft = self._raft
        for key in RAFT_APIS:
            # Answered in the request's version: a Fetch v4-v16 from a client got v17's bytes.
            handlers[key] = lambda ctx, req: raft.handle_request(req, ctx.version)
        auth = AuthHelper(self.acl_publisher)
        # A client's admin request straight to a controller is authorized as an Envelope's would be.
        for_clients, in_envelope = self._client_handlers(auth)
        handlers = {key: authorized(key, handler, auth, for_clients.get(key)) for key, handler in handlers.items()}
        handlers[ApiKey.ENVELOPE] = authorized(ApiKey.ENVELOPE, EnvelopeHandler(in_envelope, request_metrics), auth)
        # No cluster and node check on a controller listener (ControllerApis), only v5's validity.
        handlers[ApiKey.API_VERSIONS] = lambda ctx, req: api_versions_answer(ctx.version, req, CONTROLLER_APIS, features=self._feature_info())
        handlers[ApiKey.SASL_HANDSHAKE] = sasl_handshake
        handlers[ApiKey.SASL_AUTHENTICATE] = sasl_authenticate
        return handlers

    def _feature_info(self) -> FeatureInfo:
        published = self.features_publisher
        if published.epoch < 0:
            return FeatureInfo(self._supported_features, published.finalized, published.epoch)  # Kafka's FinalizedFeatures.unknown
        # Kafka's ControllerServer: the publisher's levels with kraft.version set from the Raft layer.
        return FeatureInfo(self._supported_features, with_kraft_version(published.finalized, self._raft.kraft_version()), published.epoch)

    def _client_handlers(self, auth: AuthHelper) -> tuple[dict[ApiKey, Any], dict[ApiKey, Any]]:
        """A client's admin request answered for it: authorized for the client's principal and
        held to its mutation quota, as a kbroker broker does before it forwards
        (ForwardToControllerHandler, with this controller in place of the channel). The first for
        a request sent straight to this controller, the second for an Envelope's inner request,
        which a broker forwarded (Kafka's isForwarded); one quota for both."""
        cfg = self.config
        loader = self._shared.metadata_loader
        quota = ControllerMutationQuotaManager(lambda: loader.image.client_quotas, cfg.controller_quota_window_num, cfg.controller_quota_window_size_seconds)

        def handlers(channel: ControllerSender) -> dict[ApiKey, Any]:
            return {key: ForwardToControllerHandler(key, channel, auth, lambda: loader.image, quota, cfg.num_partitions) for key in FORWARDABLE_APIS}

        return handlers(DirectControllerChannel(self.apis)), handlers(LocalControllerChannel(self.apis))

    async def start_listeners(self) -> None:
        cfg = self.config
        exporter = self.metrics_exporter
        request_metrics = exporter.request_metrics if exporter is not None else None
        if exporter is not None:
            await exporter.start()
        dispatch = KafkaApis(self._handlers(request_metrics), CONTROLLER_APIS, request_metrics=request_metrics).dispatch  # type: ignore[arg-type]
        loader = self._shared.metadata_loader
        security = ListenerSecurityBuilder(cfg, lambda user, mechanism: loader.image.scram_credentials.get((user, mechanism)))
        for listener in cfg.controller_listeners:
            server = SocketServer(
                listener.host,
                listener.port,
                dispatch,
                max_request_size=cfg.socket_request_max_bytes,
                max_in_flight=cfg.queued_max_requests,
                metrics=self._metrics,
                security=security.listener_security(listener.name),
                request_metrics=request_metrics,
            )
            await server.start()
            self.socket_servers.append(server)
            log.info("controller.listening", node_id=cfg.node_id, listener=f"{listener.name}://{listener.host}:{server.port}")

    def start(self) -> None:
        self.controller.start()
        self.registration_manager.start(self._registration_listeners())

    def _registration_listeners(self) -> list[BrokerEndpoint]:
        """The advertised controller listeners, with the port each actually bound (Kafka's
        withEphemeralPortsCorrected: a listener at port 0 registers the one it got)."""
        cfg = self.config
        bound = {lst.name: server.port for lst, server in zip(cfg.controller_listeners, self.socket_servers)}
        return [
            BrokerEndpoint(
                name=lst.name, host=lst.host, port=lst.port or bound.get(lst.name, 0), security_protocol=SECURITY_PROTOCOLS.index(cfg.security_protocol_map[lst.name])
            )
            for lst in cfg.advertised_controller_listeners
        ]

    async def stop_listeners(self) -> None:
        """At once, as Kafka's ControllerServer: a request still waiting for a commit is dropped."""
        for server in self.socket_servers:
            await server.stop_accepting()
        for server in self.socket_servers:
            await server.close_connections()

    async def shutdown(self) -> None:
        await self.registration_manager.close()
        await self.controller.shutdown()
        if self.metrics_exporter is not None:
            for collector in self._metrics_collectors:
                self.metrics_exporter.unregister(collector)
            await self.metrics_exporter.stop()


__all__ = ["ControllerServer", "RAFT_APIS"]
