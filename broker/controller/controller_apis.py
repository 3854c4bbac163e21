"""ControllerApis: what a controller listener answers besides Raft, and what a combined node's
broker asks its own controller without a socket.

Kafka's ControllerApis. Forwarded admin writes reuse the request handlers of broker/handlers,
given the QuorumController; ElectLeaders, the partition reassignments, registrations, heartbeats, UnregisterBroker,
AllocateProducerIds and the partition leaders' AlterPartition are translated to the controller's
calls here. While this controller is not the active one every write answers NOT_CONTROLLER (per
item where the API has items), which is what makes a broker's ControllerChannel look for the
leader again.
ControllerRegistration (KIP-919) writes a controller's registration; DescribeCluster answers with
the registered controllers. The Raft APIs are the Raft manager's,
routed by the controller server (and by ``handle`` for the ones a broker forwards).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

import structlog
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from broker.config import BrokerConfig
from broker.controller.cluster_control_manager import BrokerRegistrationRequest
from broker.controller.controller_registrations import ControllerRegistrationRequest, controller_endpoints
from broker.controller.controller_result import ApiError
from broker.controller.feature_control_manager import ALL_FAILED, METADATA_VERSION_FEATURE, UpgradeType
from broker.controller.quorum_controller import NotControllerError, QuorumController
from broker.controller.reassignment_control_manager import ReassignablePartition, ReassignableTopic
from broker.controller.replication_control_manager import AlterPartitionTopic, IsrMember, PartitionIsrChange
from broker.auth_helper import CLUSTER_AUTHORIZATION_FAILED, AuthHelper
from broker.security.standard_acl import AclOperation
from broker.handlers.acls import CreateAclsHandler, DeleteAclsHandler, DescribeAclsHandler
from broker.handlers.admin_configs import AlterConfigsHandler, IncrementalAlterConfigsHandler
from broker.handlers.admin_topics import CreatePartitionsHandler, CreateTopicsHandler, DeleteTopicsHandler
from broker.handlers.forwarding import (
    alter_partition_reassignments_response,
    elect_leaders_response,
    error_response,
    list_partition_reassignments_response,
    update_features_response,
)
from broker.handlers.client_quotas import alter_client_quotas_response
from broker.handlers.client_quotas import alter_request_items as quota_alterations
from broker.handlers.scram_credentials import alter_request_items, alter_user_scram_credentials_response
from broker.kafka_apis import RequestContext
from broker.metadata.acl_publisher import AclPublisher
from broker.metadata import metadata_version as mv
from broker.metadata.metadata_records import BrokerEndpoint, BrokerFeature
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, error_only, nested

log = structlog.get_logger(__name__)

BROKER_ENDPOINT_TYPE = 1
CONTROLLER_ENDPOINT_TYPE = 2  # KIP-919: DescribeCluster sent to a controller
NO_AUTHORIZED_OPERATIONS = -(2**31)  # the schema's default: not asked for

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

# Forwarded admin writes: NOT_CONTROLLER goes on every item of their answer.
_ITEMIZED = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.UPDATE_FEATURES,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
    }
)
# The Raft APIs a broker forwards (kafka-metadata-quorum's describe, add-controller and
# remove-controller). Over a socket the controller listener routes them to the Raft manager; a
# combined node's broker asks its own controller here, which must route them the same way.
FORWARDED_RAFT_APIS = frozenset({ApiKey.DESCRIBE_QUORUM, ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER})
# ElectLeaders v0 predates election types: it always asks for preferred leaders.
PREFERRED_ELECTION_TYPE = 0

# With an authorizer, the operation on the cluster each API of a controller listener needs, as
# Kafka's ControllerApis checks it. The admin writes a broker forwards are let through for a
# principal with CLUSTER_ACTION (a broker): kbroker forwards them without Kafka's Envelope, after
# the broker has authorized them for its client. Anyone else's go to ``for_clients`` when given
# (authorized per resource, as a broker would before forwarding them).
CONTROLLER_CLUSTER_OPERATIONS: dict[ApiKey, int] = {
    **dict.fromkeys(
        (
            ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT,
            ApiKey.UPDATE_RAFT_VOTER, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
            ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.ENVELOPE, ApiKey.CONTROLLER_REGISTRATION, ApiKey.ASSIGN_REPLICAS_TO_DIRS,
        ),
        AclOperation.CLUSTER_ACTION,
    ),
    **dict.fromkeys((ApiKey.DESCRIBE_QUORUM, ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_ACLS), AclOperation.DESCRIBE),
    **dict.fromkeys(
        (
            ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.ELECT_LEADERS, ApiKey.UNREGISTER_BROKER, ApiKey.UNREGISTER_CONTROLLER,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.UPDATE_FEATURES,
            ApiKey.DESCRIBE_CLUSTER, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.CREATE_PARTITIONS,
        ),
        AclOperation.ALTER,
    ),
    **dict.fromkeys((ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS), AclOperation.ALTER_CONFIGS),
    ApiKey.CREATE_TOPICS: AclOperation.CREATE,
    ApiKey.DELETE_TOPICS: AclOperation.DELETE,
}
FORWARDED_APIS = _ITEMIZED | FORWARDED_RAFT_APIS | {ApiKey.UNREGISTER_BROKER, ApiKey.UNREGISTER_CONTROLLER, ApiKey.DESCRIBE_ACLS}


def authorized(
    key: ApiKey, handler: Callable[[RequestContext, Any], Any], auth: AuthHelper, for_clients: Callable[[RequestContext, Any], Any] | None = None
) -> Callable[[RequestContext, Any], Any]:
    """``handler`` behind the controller listener's check of ``key``'s operation on the cluster."""
    operation = CONTROLLER_CLUSTER_OPERATIONS[key]
    forwarded = key in FORWARDED_APIS

    def call(ctx: RequestContext, request: Any) -> Any:
        if not auth.enabled:
            return handler(ctx, request)
        if forwarded and auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION, log_if_denied=False):
            return handler(ctx, request)
        if forwarded and for_clients is not None:
            return for_clients(ctx, request)
        if auth.authorize_cluster(ctx, operation):
            return handler(ctx, request)
        code, message = CLUSTER_AUTHORIZATION_FAILED
        if key in _ITEMIZED:
            return _answered(error_response(key, ctx.version, request, ErrorCode(code), message or ""))
        return _answered(error_only(response_schema(key, ctx.version), code, message))

    return call


async def _answered(response: Any) -> Any:
    return response


class QuorumLeader(Protocol):
    @property
    def leader(self) -> tuple[int | None, int]:
        """(leader id or None, epoch) of the metadata quorum."""
        ...

    async def handle_request(self, body: Any) -> Any:
        """Answer a Raft request."""
        ...


@dataclass(frozen=True, slots=True)
class _LocalContext:
    """A request handed over in process: from this node's own broker, the inner request of an
    Envelope, or a client's request the controller listener authorized first. The handlers read
    only its version and whether a broker forwarded it."""

    version: int
    forwarded: bool = True


# kbroker's brokers forward admin requests without Kafka's Envelope: plain requests from the
# network client every node opens to the controllers (SharedServer's, client id kbroker-<node.id>).
_NODE_CLIENT_ID = re.compile(r"kbroker-\d+")


def is_forwarded(ctx: RequestContext | _LocalContext) -> bool:
    """Kafka's Request.isForwarded (the request came in an Envelope): whether a broker sent the
    request on for its client, which it checked first, rather than a client straight to a controller
    (``--bootstrap-controller``). On a controller listener, a kbroker broker's request is told by
    its client id."""
    if isinstance(ctx, _LocalContext):
        return ctx.forwarded
    return _NODE_CLIENT_ID.fullmatch(ctx.header.client_id or "") is not None


class ControllerApis:
    def __init__(self, controller: QuorumController, config: BrokerConfig, cluster_id: str, raft: QuorumLeader, acls: AclPublisher | None = None) -> None:
        acls = acls or AclPublisher(False, frozenset(), False)
        self._controller = controller
        self._config = config
        self._cluster_id = cluster_id
        self._raft = raft
        writes: dict[ApiKey, Handler] = {
            ApiKey.CREATE_TOPICS: CreateTopicsHandler(controller),
            ApiKey.DELETE_TOPICS: DeleteTopicsHandler(controller),
            ApiKey.CREATE_PARTITIONS: CreatePartitionsHandler(controller),
            ApiKey.ALTER_CONFIGS: AlterConfigsHandler(controller, is_forwarded),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsHandler(controller, is_forwarded),
            ApiKey.ELECT_LEADERS: self._elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_partition_reassignments,
            ApiKey.UPDATE_FEATURES: self._update_features,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_user_scram_credentials,
            ApiKey.ALTER_CLIENT_QUOTAS: self._alter_client_quotas,
            # The controller's links are not authenticated yet: whoever reaches them is trusted, and
            # a broker authorizes the requests it forwards (ForwardToControllerHandler).
            ApiKey.CREATE_ACLS: CreateAclsHandler(controller if acls.authorizer is not None else None, AuthHelper(None)),
            ApiKey.DELETE_ACLS: DeleteAclsHandler(controller if acls.authorizer is not None else None, AuthHelper(None)),
            ApiKey.BROKER_REGISTRATION: self._broker_registration,
            ApiKey.BROKER_HEARTBEAT: self._broker_heartbeat,
            ApiKey.CONTROLLER_REGISTRATION: self._controller_registration,
            ApiKey.UNREGISTER_BROKER: self._unregister_broker,
            ApiKey.UNREGISTER_CONTROLLER: self._unregister_controller,
            ApiKey.ALLOCATE_PRODUCER_IDS: self._allocate_producer_ids,
            ApiKey.ALTER_PARTITION: self._alter_partition,
            ApiKey.ASSIGN_REPLICAS_TO_DIRS: self._assign_replicas_to_dirs,
        }
        self._handlers: dict[ApiKey, Handler] = {key: self._guarded(key, handler) for key, handler in writes.items()}
        self._handlers[ApiKey.DESCRIBE_CLUSTER] = self._describe_cluster
        describe_acls = DescribeAclsHandler(acls, AuthHelper(None))
        self._handlers[ApiKey.DESCRIBE_ACLS] = lambda ctx, request: _answered(describe_acls(ctx, request))

    @property
    def is_active(self) -> bool:
        return self._controller.is_active

    def handlers(self) -> dict[ApiKey, Callable[[RequestContext, Any], Any]]:
        """This class's part of a controller listener's table (the Raft APIs and ApiVersions are not in it)."""
        return dict(self._handlers)

    async def handle(self, body: Any, forwarded: bool = True) -> Any:
        """A request from this node's own broker, answered at the version it was built at.
        ``forwarded`` False: a client's, sent straight to this controller and authorized by it."""
        key = ApiKey(int(body.__api_key__))
        if key in FORWARDED_RAFT_APIS:
            return await self._raft.handle_request(body)
        handler = self._handlers[key]
        return await handler(_LocalContext(int(body.__version__), forwarded), body)  # type: ignore[arg-type]

    def _guarded(self, key: ApiKey, handler: Handler) -> Handler:
        async def call(ctx: RequestContext, request: Any) -> Any:
            try:
                return await handler(ctx, request)
            except NotControllerError as e:
                if key in _ITEMIZED:
                    return error_response(key, ctx.version, request, ErrorCode.not_controller, str(e))
                return build(
                    response_schema(key, ctx.version),
                    throttle_time=0,
                    error_code=ErrorCode.not_controller,
                    error_message=str(e),
                    broker_epoch=-1,
                    is_caught_up=False,
                    is_fenced=True,
                    should_shut_down=False,
                    producer_id_start=-1,
                    producer_id_len=0,
                    topics=(),
                    directories=(),
                )

        return call

    async def _broker_registration(self, ctx: RequestContext, request: Any) -> Any:
        registration = BrokerRegistrationRequest(
            broker_id=int(request.broker_id),
            cluster_id=request.cluster_id,
            incarnation_id=request.incarnation_id or uuid.UUID(int=0),
            listeners=tuple(
                BrokerEndpoint(name=lst.name, host=lst.host, port=int(lst.port), security_protocol=int(lst.security_protocol)) for lst in request.listeners
            ),
            features={f.name: (int(f.min_supported_version), int(f.max_supported_version)) for f in request.features},
            rack=request.rack,
            log_dirs=tuple(d or uuid.UUID(int=0) for d in getattr(request, "log_dirs", ())),
            previous_broker_epoch=int(getattr(request, "previous_broker_epoch", -1)),
            is_migrating_zk_broker=bool(getattr(request, "is_migrating_zk_broker", False)),
        )
        reply = await self._controller.register_broker(registration)
        return build(response_schema(ApiKey.BROKER_REGISTRATION, ctx.version), throttle_time=0, error_code=reply.error_code, broker_epoch=reply.broker_epoch)

    async def _broker_heartbeat(self, ctx: RequestContext, request: Any) -> Any:
        reply = await self._controller.broker_heartbeat(
            int(request.broker_id),
            int(request.broker_epoch),
            int(request.current_metadata_offset),
            bool(request.want_fence),
            bool(request.want_shut_down),
            # v2 (KIP-1066); null before the broker caught up, and in v0-1.
            cordoned_log_dirs=getattr(request, "cordoned_log_dirs", None),
            # v1 (KIP-858).
            offline_log_dirs=tuple(d for d in getattr(request, "offline_log_dirs", ()) if d is not None),
        )
        return build(
            response_schema(ApiKey.BROKER_HEARTBEAT, ctx.version),
            throttle_time=0,
            error_code=reply.error_code,
            is_caught_up=reply.is_caught_up,
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
        )

    async def _controller_registration(self, ctx: RequestContext, request: Any) -> Any:
        """ControllerRegistration v0 (KIP-919): NONE once the RegisterControllerRecord is committed."""
        registration = ControllerRegistrationRequest(
            controller_id=int(request.controller_id),
            incarnation_id=request.incarnation_id or uuid.UUID(int=0),
            listeners=tuple(
                BrokerEndpoint(name=lst.name, host=lst.host, port=int(lst.port), security_protocol=int(lst.security_protocol)) for lst in request.listeners
            ),
            features=tuple(
                BrokerFeature(name=f.name, min_supported_version=int(f.min_supported_version), max_supported_version=int(f.max_supported_version))
                for f in request.features
            ),
        )
        schema = response_schema(ApiKey.CONTROLLER_REGISTRATION, ctx.version)
        try:
            await self._controller.register_controller(registration)
        except ApiError as refused:
            return build(schema, throttle_time=0, error_code=refused.error_code, error_message=refused.message)
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None)

    async def _alter_client_quotas(self, ctx: RequestContext, request: Any) -> Any:
        results = await self._controller.alter_client_quotas(quota_alterations(request), bool(request.validate_only))
        return alter_client_quotas_response(ctx.version, results)

    async def _alter_user_scram_credentials(self, ctx: RequestContext, request: Any) -> Any:
        deletions, upsertions = alter_request_items(request)
        results = await self._controller.alter_user_scram_credentials(deletions, upsertions)
        return alter_user_scram_credentials_response(ctx.version, results)

    async def _unregister_broker(self, ctx: RequestContext, request: Any) -> Any:
        reply = await self._controller.unregister_broker(int(request.broker_id))
        return build(
            response_schema(ApiKey.UNREGISTER_BROKER, ctx.version), throttle_time=0, error_code=reply.error_code, error_message=reply.error_message
        )

    async def _unregister_controller(self, ctx: RequestContext, request: Any) -> Any:
        """UnregisterController v0: NONE once the UnregisterControllerRecord is committed."""
        schema = response_schema(ApiKey.UNREGISTER_CONTROLLER, ctx.version)
        try:
            await self._controller.unregister_controller(int(request.controller_id))
        except ApiError as refused:
            # Not build(): CONTROLLER_ID_NOT_REGISTERED is no kio ErrorCode (protocol/schema/unregister_controller/).
            return schema(throttle_time=datetime.timedelta(0), error_code=i16(refused.error_code), error_message=refused.message)
        return schema(throttle_time=datetime.timedelta(0), error_code=i16(ErrorCode.none), error_message=None)

    async def _allocate_producer_ids(self, ctx: RequestContext, request: Any) -> Any:
        block = await self._controller.allocate_producer_id_block(int(request.broker_id), int(request.broker_epoch))
        return build(
            response_schema(ApiKey.ALLOCATE_PRODUCER_IDS, ctx.version),
            throttle_time=0,
            error_code=block.error_code,
            producer_id_start=block.first_producer_id,
            producer_id_len=block.size,
        )

    async def _elect_leaders(self, ctx: RequestContext, request: Any) -> Any:
        """ElectLeaders v0-2, forwarded by a broker: preferred (0) or unclean (1) elections for the
        listed partitions, or every partition when the list is null. Each partition answers NONE,
        ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
        UNKNOWN_TOPIC_OR_PARTITION; an unknown election type fails the whole request INVALID_REQUEST."""
        requested = None if request.topic_partitions is None else [(t.topic, [int(p) for p in t.partitions]) for t in request.topic_partitions]
        election_type = int(getattr(request, "election_type", PREFERRED_ELECTION_TYPE))
        try:
            answer = await self._controller.elect_leaders(election_type, requested)
        except ApiError as refused:
            return error_response(ApiKey.ELECT_LEADERS, ctx.version, request, ErrorCode(refused.error_code), refused.message or "")
        return elect_leaders_response(
            ctx.version, ErrorCode.none, ((topic, ((r.partition, r.error_code, r.error_message) for r in results)) for topic, results in answer)
        )

    async def _alter_partition_reassignments(self, ctx: RequestContext, request: Any) -> Any:
        """AlterPartitionReassignments v0-1, forwarded by a broker: per partition the target replicas,
        or null to cancel. Each partition answers NONE, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS or (v1, without
        allow_replication_factor_change) INVALID_REPLICATION_FACTOR with Kafka's messages."""
        topics = [
            ReassignableTopic(
                t.name, tuple(ReassignablePartition(int(p.partition_index), None if p.replicas is None else tuple(int(b) for b in p.replicas)) for p in t.partitions)
            )
            for t in request.topics
        ]
        allow = bool(getattr(request, "allow_replication_factor_change", True))
        results = await self._controller.alter_partition_reassignments(topics, allow)
        answers = ((t.name, ((p.partition_index, p.error_code, p.error_message) for p in t.partitions)) for t in results)
        return alter_partition_reassignments_response(ctx.version, ErrorCode.none, None, answers, allow)

    async def _list_partition_reassignments(self, ctx: RequestContext, request: Any) -> Any:
        """ListPartitionReassignments v0: the moves in progress, of every topic (null) or of the listed partitions."""
        wanted = None if request.topics is None else [(t.name, [int(p) for p in t.partition_indexes]) for t in request.topics]
        ongoing = await self._controller.list_partition_reassignments(wanted)
        answers = ((t.name, ((p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) for p in t.partitions)) for t in ongoing)
        return list_partition_reassignments_response(ctx.version, ErrorCode.none, None, answers)

    async def _update_features(self, ctx: RequestContext, request: Any) -> Any:
        """UpdateFeatures v0-2, forwarded by a broker: all the features move or none (Kafka 4.4), with
        Kafka's messages; a feature named twice, or with no name, fails the whole request
        INVALID_REQUEST. v0's allow_downgrade is a safe downgrade."""
        names = [u.feature for u in request.feature_updates]
        if len(set(names)) != len(names) or "" in names:
            message = "The request names a feature more than once." if "" not in names else "A feature name can not be empty."
            return update_features_response(ctx.version, ErrorCode.invalid_request, message, {})
        updates = {u.feature: int(u.max_version_level) for u in request.feature_updates}
        upgrade_types = {u.feature: _upgrade_type(ctx.version, u) for u in request.feature_updates}
        result = await self._controller.update_features(updates, upgrade_types, bool(getattr(request, "validate_only", False)))
        if result.error_code == ErrorCode.none:
            return update_features_response(ctx.version, ErrorCode.none, None, {name: (ErrorCode.none, None) for name in names})
        # As Kafka 4.4's QuorumController.updateFeatures: all or nothing. The top level tells which
        # feature failed and why, and no feature has a result of its own, at any version (its admin
        # client fails every feature with the top-level error).
        return update_features_response(ctx.version, result.error_code, ALL_FAILED + (result.error_message or ""), {})

    async def _alter_partition(self, ctx: RequestContext, request: Any) -> Any:
        """AlterPartition v2-3 from a partition leader, answered once its ISR changes are committed.

        What the leader puts in the request: its broker_id and the broker_epoch of its current
        registration (else STALE_BROKER_EPOCH for the whole request); per topic its topic_id; per
        partition the leader_epoch and partition_epoch it last saw in the metadata, the whole ISR
        it wants (itself included; at v3 new_isr_with_epochs gives each member's broker epoch as
        the leader knows it, -1 to skip that check) and its leader_recovery_state. Each partition
        answers its error code and, on success, its state after the change: the leader adopts
        that ISR and partition_epoch.
        """
        topics = [AlterPartitionTopic(t.topic_id, tuple(_isr_change(ctx.version, p) for p in t.partitions)) for t in request.topics]
        reply = await self._controller.alter_partition(int(request.broker_id), int(request.broker_epoch), topics)
        schema = response_schema(ApiKey.ALTER_PARTITION, ctx.version)
        topic_cls = nested(schema, "TopicData")
        partition_cls = nested(schema, "PartitionData")
        answers = tuple(
            build(topic_cls, topic_id=t.topic_id, partitions=tuple(build(partition_cls, **dataclasses.asdict(p)) for p in t.partitions)) for t in reply.topics
        )
        return build(schema, throttle_time=0, error_code=reply.error_code, topics=answers)

    async def _assign_replicas_to_dirs(self, ctx: RequestContext, request: Any) -> Any:
        """AssignReplicasToDirs v0 (KIP-858), answered once the directory changes are committed."""
        directories = [(d.id_, [(t.topic_id, [int(p.partition_index) for p in t.partitions]) for t in d.topics]) for d in request.directories]
        reply = await self._controller.assign_replicas_to_dirs(int(request.broker_id), int(request.broker_epoch), directories)
        schema = response_schema(ApiKey.ASSIGN_REPLICAS_TO_DIRS, ctx.version)
        dir_cls, topic_cls, partition_cls = nested(schema, "DirectoryData"), nested(schema, "TopicData"), nested(schema, "PartitionData")
        answers = tuple(
            build(
                dir_cls,
                id_=directory,
                topics=tuple(
                    build(topic_cls, topic_id=topic_id, partitions=tuple(build(partition_cls, partition_index=i, error_code=e) for i, e in errors))
                    for topic_id, errors in topics
                ),
            )
            for directory, topics in reply.directories
        )
        return build(schema, throttle_time=0, error_code=reply.error_code, directories=answers)

    async def _describe_cluster(self, ctx: RequestContext, request: Any) -> Any:
        """KIP-919, as Kafka's ControllerApis.handleDescribeCluster: a controller describes the
        registered controllers, each at its endpoint on the listener the request came in on.
        UNSUPPORTED_VERSION before metadata.version 3.7-IV0, when controllers do not register."""
        schema = response_schema(ApiKey.DESCRIBE_CLUSTER, ctx.version)
        # An error answer sets only the error and its message, as Kafka's computeDescribeClusterResponse.
        common = {"throttle_time": 0, "cluster_id": "", "controller_id": -1, "brokers": (), "endpoint_type": BROKER_ENDPOINT_TYPE}
        image = self._controller.image
        level = image.features.get(METADATA_VERSION_FEATURE)
        if level is None or not mv.for_level(level).is_controller_registration_supported:
            message = (
                "There is no finalized MetadataVersion, so direct-to-controller communication is not supported."
                if level is None
                else "Direct-to-controller communication is not supported with the current MetadataVersion."
            )
            return build(schema, error_code=ErrorCode.unsupported_version, error_message=message, **common)
        wanted = int(getattr(request, "endpoint_type", BROKER_ENDPOINT_TYPE))
        if wanted not in (BROKER_ENDPOINT_TYPE, CONTROLLER_ENDPOINT_TYPE):
            code = ErrorCode.invalid_request if ctx.version == 0 else ErrorCode.unsupported_endpoint_type
            return build(schema, error_code=code, error_message=f"Unsupported endpoint type {wanted}", **common)
        if wanted != CONTROLLER_ENDPOINT_TYPE:
            code = ErrorCode.invalid_request if ctx.version == 0 else ErrorCode.mismatched_endpoint_type
            message = "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER"
            return build(schema, error_code=code, error_message=message, **common)
        node_cls = nested(schema, "DescribeClusterBroker")
        registered = controller_endpoints(image, self._listener_name(ctx))
        nodes = tuple(build(node_cls, broker_id=node_id, host=e.host, port=e.port, rack=None, is_fenced=False) for node_id, e in registered)
        leader_id, _ = self._raft.leader
        # A leader missing from the node list would confuse a client: -1 instead, as Kafka answers.
        controller_id = leader_id if leader_id is not None and any(node_id == leader_id for node_id, _ in registered) else -1
        return build(
            schema,
            error_code=ErrorCode.none,
            error_message=None,
            cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
            **{**common, "cluster_id": self._cluster_id, "endpoint_type": CONTROLLER_ENDPOINT_TYPE, "controller_id": controller_id, "brokers": nodes},
        )

    def _listener_name(self, ctx: RequestContext) -> str:
        # A request from this node's own broker (no socket) counts as one on the first controller listener.
        client = getattr(ctx, "client", None)
        if client is not None:
            return str(client.listener)
        names = self._config.controller_listener_name_list
        return names[0] if names else ""


class DirectControllerChannel:
    """Where the controller listener sends a client's admin request it authorized for the client:
    to ControllerApis, as not forwarded (an Envelope's goes through envelope.LocalControllerChannel)."""

    def __init__(self, apis: ControllerApis) -> None:
        self._apis = apis

    def send(self, body: Any, timeout_ms: int | None = None) -> Awaitable[Any]:
        return self._apis.handle(body, forwarded=False)


def _upgrade_type(version: int, update: Any) -> int:
    if version == 0:
        return UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade else UpgradeType.UPGRADE
    return int(update.upgrade_type)


def _isr_change(version: int, partition: Any) -> PartitionIsrChange:
    # v2 names the ISR by broker id only: as Kafka, its members' epochs go unchecked (-1).
    if version >= 3:
        isr = tuple(IsrMember(int(m.broker_id), int(m.broker_epoch)) for m in partition.new_isr_with_epochs)
    else:
        isr = tuple(IsrMember(int(b)) for b in partition.new_isr)
    return PartitionIsrChange(
        partition_index=int(partition.partition_index),
        leader_epoch=int(partition.leader_epoch),
        new_isr=isr,
        leader_recovery_state=int(partition.leader_recovery_state),
        partition_epoch=int(partition.partition_epoch),
    )


__all__ = ["CONTROLLER_ENDPOINT_TYPE", "ControllerApis", "DirectControllerChannel", "is_forwarded"]
