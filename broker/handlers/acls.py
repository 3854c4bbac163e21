"""DescribeAcls, CreateAcls and DeleteAcls with no authorizer configured: Kafka's answers
(SECURITY_DISABLED, with Kafka's messages), so `kafka-acls.sh` says what it says against a Kafka
cluster without an authorizer. ACLs themselves come with the authorizer (issue 33)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.kafka_apis import RequestContext
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

NO_AUTHORIZER = "No Authorizer is configured."


def describe_acls(ctx: RequestContext, request):  # type: ignore[no-untyped-def]
    schema = response_schema(ApiKey.DESCRIBE_ACLS, ctx.version)
    return build(schema, throttle_time=0, error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured on the broker", resources=())


def create_acls(ctx: RequestContext, request):  # type: ignore[no-untyped-def]
    schema = response_schema(ApiKey.CREATE_ACLS, ctx.version)
    result_cls = nested(schema, "AclCreationResult")
    results = tuple(build(result_cls, error_code=ErrorCode.security_disabled, error_message=NO_AUTHORIZER) for _ in request.creations)
    return build(schema, throttle_time=0, results=results)


def delete_acls(ctx: RequestContext, request):  # type: ignore[no-untyped-def]
    schema = response_schema(ApiKey.DELETE_ACLS, ctx.version)
    result_cls = nested(schema, "DeleteAclsFilterResult")
    results = tuple(build(result_cls, error_code=ErrorCode.security_disabled, error_message=NO_AUTHORIZER, matching_acls=()) for _ in request.filters)
    return build(schema, throttle_time=0, filter_results=results)
