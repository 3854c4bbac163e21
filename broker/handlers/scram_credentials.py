"""DescribeUserScramCredentials (answered by any broker from its metadata image) and the answer
of AlterUserScramCredentials (decided by the active controller, which brokers forward it to)."""

from __future__ import annotations

from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from broker.controller.scram_control_manager import AlterScramResult, ScramDeletion, ScramUpsertion
from broker.auth_helper import CLUSTER_AUTHORIZATION_FAILED, AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.security.standard_acl import AclOperation
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested


def alter_user_scram_credentials_response(version: int, results: Iterable[AlterScramResult]) -> Any:
    schema = response_schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version)
    result_cls = nested(schema, "AlterUserScramCredentialsResult")
    return build(schema, throttle_time=0, results=tuple(build(result_cls, user=u, error_code=code, error_message=message) for u, code, message in results))


def alter_request_items(request: Any) -> tuple[list[ScramDeletion], list[ScramUpsertion]]:
    deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)) for u in request.upsertions]
    return deletions, upsertions


def every_user_answered(request: Any, error_code: int, message: str) -> list[AlterScramResult]:
    """One result per user the request names: NOT_CONTROLLER and the like."""
    names = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return [(name, error_code, message) for name in names]


class DescribeUserScramCredentialsHandler:
    """Kafka's answers: every user with a credential when none is named; a user named twice is
    DUPLICATE_RESOURCE, one without any credential RESOURCE_NOT_FOUND."""

    def __init__(self, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.version)
        result_cls = nested(schema, "DescribeUserScramCredentialsResult")
        info_cls = nested(schema, "CredentialInfo")
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
            code, message = CLUSTER_AUTHORIZATION_FAILED
            # Kafka's getErrorResponse: one nameless result per user asked for.
            refused = tuple(build(result_cls, user="", error_code=code, error_message=message, credential_infos=()) for _ in request.users or ())
            return build(schema, throttle_time=0, error_code=code, error_message=message, results=refused)
        by_user: dict[str, list[Any]] = {}
        for (user, mechanism), credential in sorted(self._metadata.image.scram_credentials.items()):
            by_user.setdefault(user, []).append(build(info_cls, mechanism=mechanism, iterations=credential.iterations))
        if request.users is None or not request.users:
            wanted = list(by_user)
        else:
            wanted = [u.name for u in request.users]
        results = []
        for name in dict.fromkeys(wanted):
            if wanted.count(name) > 1:
                results.append(build(result_cls, user=name, error_code=ErrorCode.duplicate_resource, error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}", credential_infos=()))
            elif name not in by_user:
                results.append(build(result_cls, user=name, error_code=ErrorCode.resource_not_found, error_message=f"Attempt to describe a user credential that does not exist: {name}", credential_infos=()))
            else:
                results.append(build(result_cls, user=name, error_code=ErrorCode.none, error_message=None, credential_infos=tuple(by_user[name])))
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None, results=tuple(results))
