"""DescribeAcls, CreateAcls and DeleteAcls, as Kafka's AclApis.

DescribeAcls is answered by the node that receives it, from its own authorizer; CreateAcls and
DeleteAcls are the controller's decisions (brokers forward them). Each needs DESCRIBE or ALTER on
the cluster. Without an authorizer every one answers SECURITY_DISABLED with Kafka's messages, so
`kafka-acls.sh` says what it says against a Kafka cluster without one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.controller.acl_control_manager import AclCreateResult, AclDeleteResult
from broker.kafka_apis import RequestContext
from broker.metadata.acl_publisher import AclPublisher
from broker.network import CloseConnection
from broker.security.standard_acl import AclBindingFilter, AclOperation, PatternType, StandardAcl
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

NO_AUTHORIZER = "No Authorizer is configured."
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


class AclController(Protocol):
    async def create_acls(self, acls: list[StandardAcl]) -> list[AclCreateResult]: ...

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclDeleteResult]: ...


def acl_filter(item: Any, version: int) -> AclBindingFilter:
    return AclBindingFilter(
        int(item.resource_type_filter),
        item.resource_name_filter,
        # v0 predates pattern types: its filters are literal.
        int(item.pattern_type_filter) if version >= 1 else PatternType.LITERAL,
        item.principal_filter,
        item.host_filter,
        int(item.operation),
        int(item.permission_type),
    )


def acl_from_creation(item: Any) -> StandardAcl:
    return StandardAcl(
        int(item.resource_type), item.resource_name, int(item.resource_pattern_type), item.principal, item.host, int(item.operation), int(item.permission_type)
    )


class DescribeAclsHandler:
    def __init__(self, acls: AclPublisher, auth: AuthHelper) -> None:
        self._acls = acls
        self._auth = auth

    def __call__(self, ctx: RequestContext, request: Any) -> Any:
        schema = response_schema(ApiKey.DESCRIBE_ACLS, ctx.version)
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return build(schema, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE, resources=())
        authorizer = self._acls.authorizer
        if authorizer is None:
            return build(schema, throttle_time=0, error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured on the broker", resources=())
        found = acl_filter(request, ctx.version)
        if found.is_unknown():
            # Kafka cannot parse such a request (DescribeAclsRequest.validate) and drops the connection.
            raise CloseConnection("DescribeAclsRequest contains UNKNOWN elements")
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None, resources=_resources(schema, authorizer.acls(found)))


def _resources(schema: Any, acls: Iterable[StandardAcl]) -> tuple[Any, ...]:
    resource_cls = nested(schema, "DescribeAclsResource")
    description_cls = nested(schema, "AclDescription")
    by_pattern: dict[tuple[int, str, int], list[StandardAcl]] = {}
    for acl in acls:
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return tuple(
        build(
            resource_cls,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern_type,
            acls=tuple(build(description_cls, principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type) for a in entries),
        )
        for (resource_type, name, pattern_type), entries in by_pattern.items()
    )


class CreateAclsHandler:
    """The controller's: ``controller`` None when this node has no authorizer."""

    def __init__(self, controller: AclController | None, auth: AuthHelper) -> None:
        self._controller = controller
        self._auth = auth

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        if not self._auth.authorize_cluster(ctx, AclOperation.ALTER):
            return create_acls_response(ctx.version, [(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)] * len(request.creations))
        if self._controller is None:
            return create_acls(ctx, request)
        results = await self._controller.create_acls([acl_from_creation(c) for c in request.creations])
        return create_acls_response(ctx.version, results)


class DeleteAclsHandler:
    """The controller's: ``controller`` None when this node has no authorizer."""

    def __init__(self, controller: AclController | None, auth: AuthHelper) -> None:
        self._controller = controller
        self._auth = auth

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        if not self._auth.authorize_cluster(ctx, AclOperation.ALTER):
            return delete_acls_response(ctx.version, [(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE, [])] * len(request.filters))
        if self._controller is None:
            return delete_acls(ctx, request)
        results = await self._controller.delete_acls([acl_filter(f, ctx.version) for f in request.filters])
        return delete_acls_response(ctx.version, results)


def create_acls_response(version: int, results: Iterable[AclCreateResult]) -> Any:
    schema = response_schema(ApiKey.CREATE_ACLS, version)
    result_cls = nested(schema, "AclCreationResult")
    return build(schema, throttle_time=0, results=tuple(build(result_cls, error_code=code, error_message=message) for code, message in results))


def delete_acls_response(version: int, results: Iterable[AclDeleteResult]) -> Any:
    schema = response_schema(ApiKey.DELETE_ACLS, version)
    result_cls = nested(schema, "DeleteAclsFilterResult")
    matching_cls = nested(schema, "DeleteAclsMatchingAcl")
    return build(
        schema,
        throttle_time=0,
        filter_results=tuple(
            build(
                result_cls,
                error_code=code,
                error_message=message,
                matching_acls=tuple(
                    build(
                        matching_cls,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=a.resource_type,
                        resource_name=a.resource_name,
                        pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission_type,
                    )
                    for a in deleted
                ),
            )
            for code, message, deleted in results
        ),
    )


def create_acls(ctx: RequestContext, request: Any) -> Any:
    """Without an authorizer."""
    return create_acls_response(ctx.version, [(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(request.creations))


def delete_acls(ctx: RequestContext, request: Any) -> Any:
    """Without an authorizer."""
    return delete_acls_response(ctx.version, [(ErrorCode.security_disabled, NO_AUTHORIZER, [])] * len(request.filters))
