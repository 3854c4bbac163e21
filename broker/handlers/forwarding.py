"""Admin writes a broker forwards to the active controller, as Kafka's brokers do.

CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
ElectLeaders, the partition reassignments (Alter/ListPartitionReassignments) and UpdateFeatures are the
controller's decisions, as is UnregisterBroker; DescribeQuorum, AddRaftVoter
and RemoveRaftVoter are the quorum leader's (the active controller) to answer. A broker passes
the client's request on unchanged (the controller listener serves the same versions) and hands
the controller's answer back, so a client never sees NOT_CONTROLLER from a broker. When no
controller answers within the request's timeout the client gets REQUEST_TIMED_OUT for each item,
as Kafka's forwarding does.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any, Awaitable, Callable, Iterable, Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.client_quota_manager import user_name
from broker.controller_channel import ControllerChannel, ControllerUnavailableError
from broker.controller_mutation_quota_manager import STRICT_SINCE, UNBOUNDED, ControllerMutationQuota, ControllerMutationQuotaManager
from broker.handlers.admin_topics import mutation_permits
from broker.handlers.acls import create_acls_response, delete_acls_response
from broker.handlers.client_quotas import alter_client_quotas_response, every_entry_answered
from broker.handlers.scram_credentials import alter_user_scram_credentials_response, every_user_answered
from broker.controller.configuration_control_manager import LIST_CONFIGS, OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, incremental_value
from broker.dynamic_broker_config import DynamicBrokerConfig, InvalidDynamicConfigError, kafka_default, validate_dynamic_broker_config
from broker.dynamic_listener_config import listener_store_config
from broker.kafka_apis import RequestContext
from broker.logging_controller import LOGGING_CONTROLLER
from broker.runtime_logger_manager import RuntimeLoggerManager
from broker.auth_helper import CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, AuthHelper, Refusal
from broker.metadata.metadata_image import BROKER_LOGGER_RESOURCE, BROKER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE, MetadataImage
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

log = structlog.get_logger(__name__)

# For each forwarded API: the response's list field, its item class, and how a request item names its result.
_ITEMS: dict[ApiKey, tuple[str, str, str]] = {
    ApiKey.CREATE_TOPICS: ("topics", "CreatableTopicResult", "topics"),
    ApiKey.DELETE_TOPICS: ("responses", "DeletableTopicResult", "topics"),
    ApiKey.CREATE_PARTITIONS: ("results", "CreatePartitionsTopicResult", "topics"),
    ApiKey.ALTER_CONFIGS: ("responses", "AlterConfigsResourceResponse", "resources"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("responses", "AlterConfigsResourceResponse", "resources"),
}


def _request_timeout_ms(request: Any) -> int | None:
    timeout = getattr(request, "timeout", None) or getattr(request, "timeout_ms", None)
    if timeout is None:
        return None
    return int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)


def error_response(api_key: ApiKey, version: int, request: Any, error_code: ErrorCode, message: str) -> Any:
    """Every item of the request answered ``error_code`` (DescribeQuorum, the voter changes and the unregistrations: the whole answer)."""
    schema = response_schema(api_key, version)
    if api_key == ApiKey.DESCRIBE_QUORUM:
        return build(schema, error_code=error_code, error_message=message, topics=(), nodes=())
    if api_key in (ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UNREGISTER_BROKER, ApiKey.UNREGISTER_CONTROLLER):
        return build(schema, throttle_time=0, error_code=error_code, error_message=message)
    if api_key == ApiKey.ELECT_LEADERS:
        # Kafka's ElectLeadersRequest.getErrorResponse: a request for every partition names none.
        requested = ((t.topic, ((p, error_code, message) for p in t.partitions)) for t in request.topic_partitions or ())
        return elect_leaders_response(version, error_code, requested)
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        topics = ((t.name, ((int(p.partition_index), error_code, message) for p in t.partitions)) for t in request.topics)
        return alter_partition_reassignments_response(version, error_code, message, topics, bool(getattr(request, "allow_replication_factor_change", True)))
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return alter_client_quotas_response(version, every_entry_answered(request, error_code, message))
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return alter_user_scram_credentials_response(version, every_user_answered(request, error_code, message))
    if api_key == ApiKey.CREATE_ACLS:
        return create_acls_response(version, [(error_code, message)] * len(request.creations))
    if api_key == ApiKey.DELETE_ACLS:
        return delete_acls_response(version, [(error_code, message, [])] * len(request.filters))
    if api_key == ApiKey.UPDATE_FEATURES:
        return update_features_response(version, error_code, message, {u.feature: (error_code, message) for u in request.feature_updates})
    if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
        # Kafka's ListPartitionReassignmentsRequest.getErrorResponse: the asked partitions, with no replicas.
        listed = ((t.name, ((int(p), (), (), ()) for p in t.partition_indexes)) for t in request.topics or ())
        return list_partition_reassignments_response(version, error_code, message, listed)
    field, item_name, request_field = _ITEMS[api_key]
    item_cls = nested(schema, item_name)
    if api_key == ApiKey.DELETE_TOPICS and version < 6:
        names = [(name, None) for name in request.topic_names]
    else:
        # By the field the item has: an empty name is a name (the fuzzer's "" became None here).
        names = [(i.name if hasattr(i, "name") else i.resource_name, i) for i in getattr(request, request_field)]
    items = []
    for name, item in names:
        items.append(
            build(
                item_cls,
                name=name,
                topic_id=getattr(item, "topic_id", None),
                resource_name=name,
                resource_type=getattr(item, "resource_type", 0),
                error_code=error_code,
                error_message=message,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            )
        )
    return build(schema, throttle_time=0, **{field: tuple(items)})


def elect_leaders_response(version: int, error_code: int, topics: Iterable[tuple[str, Iterable[tuple[int, int, str | None]]]]) -> Any:
    """An ElectLeaders answer: the top-level code (v1+) and each topic's (partition, error code, message)."""
    schema = response_schema(ApiKey.ELECT_LEADERS, version)
    topic_cls = nested(schema, "ReplicaElectionResult")
    partition_cls = nested(schema, "PartitionResult")
    results = tuple(
        build(topic_cls, topic=topic, partition_result=tuple(build(partition_cls, partition_id=p, error_code=c, error_message=m) for p, c, m in partitions))
        for topic, partitions in topics
    )
    return build(schema, throttle_time=0, error_code=error_code, replica_election_results=results)


def alter_partition_reassignments_response(
    version: int,
    error_code: int,
    error_message: str | None,
    topics: Iterable[tuple[str, Iterable[tuple[int, int, str | None]]]],
    allow_replication_factor_change: bool = True,
) -> Any:
    """An AlterPartitionReassignments answer: the top-level code and each topic's (partition, error
    code, message); v1 repeats the request's allow_replication_factor_change."""
    schema = response_schema(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    topic_cls = nested(schema, "ReassignableTopicResponse")
    partition_cls = nested(schema, "ReassignablePartitionResponse")
    responses = tuple(
        build(topic_cls, name=name, partitions=tuple(build(partition_cls, partition_index=p, error_code=c, error_message=m) for p, c, m in partitions))
        for name, partitions in topics
    )
    return build(
        schema,
        throttle_time=0,
        allow_replication_factor_change=allow_replication_factor_change,
        error_code=error_code,
        error_message=error_message,
        responses=responses,
    )


def update_features_response(version: int, error_code: int, error_message: str | None, results: dict[str, tuple[int, str | None]]) -> Any:
    """An UpdateFeatures answer. v0-1 answer each feature; v2 (KIP-1022) has only the top-level
    code, so a refused feature's error goes there."""
    schema = response_schema(ApiKey.UPDATE_FEATURES, version)
    if version >= 2:
        if error_code == ErrorCode.none:
            error_code, error_message = next(((c, m) for c, m in results.values() if c != ErrorCode.none), (error_code, error_message))
        return build(schema, throttle_time=0, error_code=error_code, error_message=error_message)
    result_cls = nested(schema, "UpdatableFeatureResult")
    answers = tuple(build(result_cls, feature=name, error_code=c, error_message=m) for name, (c, m) in results.items())
    return build(schema, throttle_time=0, error_code=error_code, error_message=error_message, results=answers)


ReplicaLists = tuple[int, Iterable[int], Iterable[int], Iterable[int]]  # partition, replicas, adding, removing


def list_partition_reassignments_response(version: int, error_code: int, error_message: str | None, topics: Iterable[tuple[str, Iterable[ReplicaLists]]]) -> Any:
    """A ListPartitionReassignments answer: each topic's (partition, replicas, adding, removing)."""
    schema = response_schema(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    topic_cls = nested(schema, "OngoingTopicReassignment")
    partition_cls = nested(schema, "OngoingPartitionReassignment")
    answers = tuple(
        build(
            topic_cls,
            name=name,
            partitions=tuple(
                build(partition_cls, partition_index=p, replicas=tuple(r), adding_replicas=tuple(a), removing_replicas=tuple(x)) for p, r, a, x in partitions
            ),
        )
        for name, partitions in topics
    )
    return build(schema, throttle_time=0, error_code=error_code, error_message=error_message, topics=answers)


# Forwarded APIs that need one operation on the cluster (Kafka's ControllerApis and AclApis).
_CLUSTER_OPERATIONS: dict[ApiKey, int] = {
    ApiKey.DESCRIBE_QUORUM: AclOperation.DESCRIBE,
    ApiKey.ADD_RAFT_VOTER: AclOperation.ALTER,
    ApiKey.REMOVE_RAFT_VOTER: AclOperation.ALTER,
    ApiKey.UNREGISTER_BROKER: AclOperation.ALTER,
    ApiKey.UNREGISTER_CONTROLLER: AclOperation.ALTER,
    ApiKey.ELECT_LEADERS: AclOperation.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AclOperation.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: AclOperation.DESCRIBE,
    ApiKey.UPDATE_FEATURES: AclOperation.ALTER,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AclOperation.ALTER,
    ApiKey.ALTER_CLIENT_QUOTAS: AclOperation.ALTER_CONFIGS,
    ApiKey.CREATE_ACLS: AclOperation.ALTER,
    ApiKey.DELETE_ACLS: AclOperation.ALTER,
}


class ControllerSender(Protocol):
    """Where a request goes on: the ControllerChannel of a broker, or a controller's own ControllerApis."""

    def send(self, body: Any, timeout_ms: int | None = None) -> Awaitable[Any]: ...


class ForwardToControllerHandler:
    """Authorizes what Kafka's controller authorizes, answers the refused items itself and sends
    the rest on, answering in request order. A broker uses it before forwarding (kbroker forwards
    no principal, so the broker asks); a controller for a client's request sent straight to it or
    carried in an Envelope, with itself in place of the channel.

    CreateTopics, DeleteTopics and CreatePartitions count against the client's controller
    mutation quota here: on a kbroker broker, which received them, rather than on the controller
    as in Kafka, because the controller sees the forwarding broker, not the client's principal
    and client id the quota is looked up by. A topic the quota refuses is answered here and not
    sent on."""

    def __init__(
        self,
        api_key: ApiKey,
        channel: ControllerSender,
        auth: AuthHelper | None = None,
        image: Callable[[], MetadataImage] | None = None,
        mutation_quota: ControllerMutationQuotaManager | None = None,
        default_partitions: int = 1,
    ) -> None:
        self._api_key = api_key
        self._channel = channel
        self._auth = auth or AuthHelper(None)
        self._image = image
        self._mutation_quota = mutation_quota if api_key in STRICT_SINCE else None
        # num.partitions: what a CreateTopics item asking for the default creates.
        self._default_partitions = default_partitions

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        operation = _CLUSTER_OPERATIONS.get(self._api_key)
        if operation is not None and not self._auth.authorize_cluster(ctx, operation):
            return error_response(self._api_key, ctx.version, request, *CLUSTER_AUTHORIZATION_FAILED)
        if self._api_key not in _ITEMS:
            return await self._forward(ctx, request)
        field = self._request_field(ctx.version)
        items = tuple(getattr(request, field))
        refused = self._refusals(ctx, request, items)
        quota = self._new_mutation_quota(ctx)
        if quota is UNBOUNDED:
            return await self._answer(ctx, request, field, items, refused)
        return await self._answer_within_quota(ctx, request, field, items, refused, quota)

    def _new_mutation_quota(self, ctx: RequestContext) -> ControllerMutationQuota:
        manager = self._mutation_quota
        if manager is None or self._image is None:
            return UNBOUNDED
        return manager.new_quota(user_name(ctx.client.principal), ctx.header.client_id or "", self._api_key, ctx.version, _now_ms())

    async def _answer_within_quota(
        self, ctx: RequestContext, request: Any, field: str, items: tuple[Any, ...], refused: dict[int, Refusal], quota: ControllerMutationQuota
    ) -> Any:
        """Kafka's controller counts each topic's partitions when it creates or deletes them, in
        request order: a strict quota refuses the topics that come once it is used up, a
        permissive one takes them all and throttles the client after."""
        assert self._image is not None
        image, now = self._image(), _now_ms()
        permits = {i: n for i, item in enumerate(items) if i not in refused and (n := mutation_permits(self._api_key, item, image, self._default_partitions))}
        if quota.strict:
            # No message: Kafka's ApiError leaves out one that is the error's default.
            throttled: dict[int, Refusal] = {i: (ErrorCode.throttling_quota_exceeded, None) for i, n in permits.items() if not quota.record(n, now)}
            refused = {**refused, **throttled}
        response = await self._answer(ctx, request, field, items, refused)
        now = _now_ms()
        answers = _response_items(self._api_key, response)
        for i, n in permits.items():
            if i in refused:
                continue
            made = answers[i].error_code == ErrorCode.none
            if quota.strict and not made:
                quota.unrecord(n, now)
            elif not quota.strict and made:
                quota.record(n, now)
        throttle_ms = max(quota.throttle_time_ms(now), round(response.throttle_time.total_seconds() * 1000))
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))

    async def _answer(self, ctx: RequestContext, request: Any, field: str, items: tuple[Any, ...], refused: dict[int, Refusal]) -> Any:
        """The items in ``refused`` answered here, the others by the controller, in request order."""
        if not refused:
            return await self._forward(ctx, request)
        kept = tuple(item for i, item in enumerate(items) if i not in refused)
        forwarded = iter(_response_items(self._api_key, await self._forward(ctx, dataclasses.replace(request, **{field: kept}))) if kept else ())
        answers = tuple(
            self._refused_item(ctx, request, field, item, refused[i])
            if i in refused
            else next(forwarded)
            for i, item in enumerate(items)
        )
        return build(response_schema(self._api_key, ctx.version), throttle_time=0, **{_ITEMS[self._api_key][0]: answers})

    def _refused_item(self, ctx: RequestContext, request: Any, field: str, item: Any, refusal: Refusal) -> Any:
        answer = _response_items(self._api_key, error_response(self._api_key, ctx.version, dataclasses.replace(request, **{field: (item,)}), *refusal))[0]
        if refusal[0] == ErrorCode.throttling_quota_exceeded and self._api_key == ApiKey.DELETE_TOPICS and ctx.version >= 6 and self._image is not None:
            # Kafka's controller names both the topic and its id when it refuses a deletion it resolved.
            image = self._image()
            topic = image.topics.get(item.name) if item.name is not None else image.topics_by_id.get(item.topic_id)
            if topic is not None:
                answer = dataclasses.replace(answer, name=topic.name, topic_id=topic.topic_id)
        return answer

    async def _forward(self, ctx: RequestContext, request: Any) -> Any:
        try:
            response = await self._channel.send(request, timeout_ms=_request_timeout_ms(request))
        except ControllerUnavailableError as e:
            log.warning("forwarding.timed_out", api=self._api_key.name, error=str(e))
            return error_response(self._api_key, ctx.version, request, ErrorCode.request_timed_out, str(e))
        if self._api_key == ApiKey.CREATE_TOPICS and self._auth.enabled and ctx.version >= 5:
            response = self._without_hidden_configs(ctx, response)
        return response

    def _without_hidden_configs(self, ctx: RequestContext, response: Any) -> Any:
        """A created topic's configs only for a principal that may describe them, as Kafka's
        controller answers (TOPIC_AUTHORIZATION_FAILED in topic_config_error_code otherwise)."""
        topics = tuple(
            t
            if t.error_code or self._auth.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name, log_if_denied=False)
            else dataclasses.replace(t, topic_config_error_code=ErrorCode.topic_authorization_failed, configs=None)
            for t in response.topics
        )
        return dataclasses.replace(response, topics=topics)

    def _request_field(self, version: int) -> str:
        if self._api_key == ApiKey.DELETE_TOPICS and version < 6:
            return "topic_names"
        return _ITEMS[self._api_key][2]

    def _refusals(self, ctx: RequestContext, request: Any, items: tuple[Any, ...]) -> dict[int, Refusal]:
        """The request's items (by position) answered here, without the controller."""
        if not self._auth.enabled:
            return {}
        auth, key = self._auth, self._api_key
        if key == ApiKey.CREATE_TOPICS:
            if auth.authorize(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
                return {}
            return {
                i: (ErrorCode.topic_authorization_failed, "Authorization failed.")
                for i, item in enumerate(items)
                if not auth.authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, item.name)
            }
        if key == ApiKey.DELETE_TOPICS:
            if auth.authorize(ctx, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
                return {}
            return {i: refusal for i, item in enumerate(items) if (refusal := self._delete_refusal(ctx, item)) is not None}
        if key == ApiKey.CREATE_PARTITIONS:
            return {i: TOPIC_AUTHORIZATION_FAILED for i, item in enumerate(items) if not auth.authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, item.name)}
        refused: dict[int, Refusal] = {}
        for i, item in enumerate(items):
            if item.resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE):
                allowed, refusal = auth.authorize_cluster(ctx, AclOperation.ALTER_CONFIGS), CLUSTER_AUTHORIZATION_FAILED
            elif item.resource_type == GROUP_RESOURCE:
                allowed, refusal = auth.authorize(ctx, AclOperation.ALTER_CONFIGS, ResourceType.GROUP, item.resource_name), GROUP_AUTHORIZATION_FAILED
            else:
                allowed, refusal = auth.authorize(ctx, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, item.resource_name), TOPIC_AUTHORIZATION_FAILED
            if not allowed:
                refused[i] = refusal
        return refused

    def _delete_refusal(self, ctx: RequestContext, item: Any) -> Refusal | None:
        """Kafka's order: a topic the principal may not describe is refused whether or not it
        exists; one it may describe but not delete is UNKNOWN_TOPIC_OR_PARTITION if it does not."""
        image = self._image() if self._image is not None else None
        name = item if isinstance(item, str) else item.name
        if name is None:
            topic = image.topics_by_id.get(item.topic_id) if image is not None else None
            if topic is None:
                return None  # the controller answers an unknown id
            name = topic.name
        if not self._auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return TOPIC_AUTHORIZATION_FAILED
        if self._auth.authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            return None
        if image is not None and name not in image.topics:
            return (ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        return TOPIC_AUTHORIZATION_FAILED


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _response_items(api_key: ApiKey, response: Any) -> tuple[Any, ...]:
    return tuple(getattr(response, _ITEMS[api_key][0]))


class ForwardAlterConfigsHandler(ForwardToControllerHandler):
    """(Incremental)AlterConfigs, checked first as Kafka's ConfigAdminManager.preprocess does on the
    receiving broker: a broker resource names this broker (or, incrementally, "" for the cluster
    default). The resources that fail are answered here, the others authorized and forwarded."""

    def __init__(
        self,
        api_key: ApiKey,
        channel: ControllerChannel,
        node_id: int,
        auth: AuthHelper | None = None,
        check_listener_stores: Callable[[dict[str, str | None]], str | None] | None = None,
        dynamic_config: DynamicBrokerConfig | None = None,
    ) -> None:
        super().__init__(api_key, channel, auth)
        self._node_id = node_id
        # This broker's own check of a listener's new keystore or truststore: why it cannot serve, or None.
        self._check_listener_stores = check_listener_stores
        self._dynamic_config = dynamic_config
        self._loggers = RuntimeLoggerManager(node_id, LOGGING_CONTROLLER)

    def _refusals(self, ctx: RequestContext, request: Any, items: tuple[Any, ...]) -> dict[int, Refusal]:
        wrong = {i: (ErrorCode.invalid_request, message) for i, r in enumerate(items) if (message := self._wrong_node(r)) is not None}
        invalid = {i: refusal for i, r in enumerate(items) if i not in wrong and (refusal := self._invalid_broker_config(r)) is not None}
        unusable = {i: (ErrorCode.invalid_config, message) for i, r in enumerate(items) if i not in wrong and i not in invalid and (message := self._unusable_stores(r)) is not None}
        unauthorized = super()._refusals(ctx, request, items)
        loggers = self._logger_levels(request, items, unauthorized)
        return {**unauthorized, **unusable, **invalid, **wrong, **loggers}

    def _logger_levels(self, request: Any, items: tuple[Any, ...], unauthorized: dict[int, Refusal]) -> dict[int, Refusal]:
        """Broker-logger resources, answered (and applied) here as Kafka's ConfigAdminManager does:
        they are this process's log levels, not cluster metadata. Legacy AlterConfigs has no such
        resource; the controller refuses it as an unknown type."""
        if self._api_key != ApiKey.INCREMENTAL_ALTER_CONFIGS:
            return {}
        seen = [(r.resource_type, r.resource_name) for r in items]
        answers: dict[int, Refusal] = {}
        for i, r in enumerate(items):
            if r.resource_type != BROKER_LOGGER_RESOURCE:
                continue
            nulls = [c.name for c in r.configs if c.value is None and int(c.config_operation) != OP_DELETE]
            if seen.count((r.resource_type, r.resource_name)) > 1:
                answers[i] = (ErrorCode.invalid_request, "Each resource must appear at most once.")
            elif nulls:
                answers[i] = (ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
            elif i in unauthorized:
                answers[i] = unauthorized[i]
            else:
                ops = [(c.name, int(c.config_operation), c.value) for c in r.configs]
                answers[i] = self._loggers.apply(r.resource_name, ops, request.validate_only) or (ErrorCode.none, None)
        return answers

    def _invalid_broker_config(self, resource: Any) -> Refusal | None:
        """Kafka's ConfigAdminManager.validateBrokerConfigChange: the resource's dynamic configs as
        they would be after the change, checked by DynamicBrokerConfig's rules against this broker."""
        dynamic = self._dynamic_config
        if dynamic is None or resource.resource_type != BROKER_RESOURCE:
            return None
        per_broker = resource.resource_name != ""
        if self._api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            after: dict[str, str | None] = dict(dynamic.layers.own if per_broker else dynamic.layers.default)
            for config in resource.configs:
                op = int(config.config_operation)
                if op in (OP_APPEND, OP_SUBTRACT):
                    if kafka_default(config.name) is None and config.name not in LIST_CONFIGS:
                        return ErrorCode.invalid_config, f"Unknown config name: {config.name}"
                    if config.name not in LIST_CONFIGS:
                        verb = "append" if op == OP_APPEND else "subtract"
                        return ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {config.name}"
                if op in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
                    after[config.name] = incremental_value(config.name, op, config.value, after.get(config.name), kafka_default(config.name))
        else:
            after = {config.name: config.value for config in resource.configs}
        props = {key: value for key, value in after.items() if value is not None}
        try:
            validate_dynamic_broker_config(props, per_broker, dynamic.current, dynamic.layers)
        except InvalidDynamicConfigError as e:
            return ErrorCode.invalid_request, str(e)
        return None

    def _unusable_stores(self, resource: Any) -> str | None:
        if self._check_listener_stores is None or resource.resource_type != BROKER_RESOURCE or resource.resource_name != str(self._node_id):
            return None
        if self._api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            # Operation 0 sets, 1 deletes (back to the static value); appending to a store makes no sense.
            changes = {c.name: (c.value if int(c.config_operation) == 0 else None) for c in resource.configs}
        else:
            changes = {c.name: c.value for c in resource.configs}
        stores = {k: v for k, v in changes.items() if listener_store_config(k) is not None}
        return self._check_listener_stores(stores) if stores else None

    def _wrong_node(self, resource: Any) -> str | None:
        if resource.resource_type != BROKER_RESOURCE or (resource.resource_name == "" and self._api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS):
            return None
        try:
            node = int(resource.resource_name)
        except ValueError:
            return f"Node id must be an integer, but it is: {resource.resource_name}"
        return None if node == self._node_id else f"Unexpected broker id, expected {self._node_id}, but received {resource.resource_name}"
