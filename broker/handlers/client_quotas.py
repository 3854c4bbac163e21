"""DescribeClientQuotas (answered by any broker from its metadata image, with Kafka's filter
rules) and the answer of AlterClientQuotas (decided by the active controller, which brokers
forward it to). The quotas are kept and described; they are not enforced yet."""

from __future__ import annotations

from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from broker.controller.client_quota_control_manager import CLIENT_ID, IP, USER, QuotaAlteration, QuotaResult
from broker.java_hash_map import java_hash_map_order
from broker.auth_helper import CLUSTER_AUTHORIZATION_FAILED, AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metadata.metadata_image import QuotaEntity
from broker.security.standard_acl import AclOperation
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def alter_client_quotas_response(version: int, results: Iterable[QuotaResult]) -> Any:
    schema = response_schema(ApiKey.ALTER_CLIENT_QUOTAS, version)
    entry_cls = nested(schema, "EntryData")
    entity_cls = nested(schema, "EntityData")
    entries = tuple(
        build(entry_cls, error_code=code, error_message=message, entity=tuple(build(entity_cls, entity_type=t, entity_name=n) for t, n in entity))
        for entity, code, message in results
    )
    return build(schema, throttle_time=0, entries=entries)


def alter_request_items(request: Any) -> list[QuotaAlteration]:
    return [
        QuotaAlteration(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops),
        )
        for entry in request.entries
    ]


def every_entry_answered(request: Any, error_code: int, message: str) -> list[QuotaResult]:
    return [(a.entity, error_code, message) for a in alter_request_items(request)]


class QuotaFilterError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]]:
    """Kafka's ClientQuotasImage.describe checks: (exact matches, types that must be present)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise QuotaFilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in present:
            raise QuotaFilterError(ErrorCode.invalid_request, f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in (IP, USER, CLIENT_ID):
            raise QuotaFilterError(ErrorCode.unsupported_version, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaFilterError(ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(c.entity_type)
        else:
            raise QuotaFilterError(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    used = exact.keys() | present
    if IP in used and (USER in used or CLIENT_ID in used):
        raise QuotaFilterError(
            ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component."
        )
    return exact, present


def _matches(entity: QuotaEntity, exact: dict[str, str | None], present: set[str], strict: bool) -> bool:
    parts = dict(entity)
    if strict and len(parts) != len(exact) + len(present):
        return False
    return all(t in parts and parts[t] == name for t, name in exact.items()) and all(t in parts for t in present)


class DescribeClientQuotasHandler:
    def __init__(self, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, ctx.version)
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
            return build(schema, throttle_time=0, error_code=CLUSTER_AUTHORIZATION_FAILED[0], error_message=CLUSTER_AUTHORIZATION_FAILED[1], entries=None)
        entry_cls, entity_cls, value_cls = nested(schema, "EntryData"), nested(schema, "EntityData"), nested(schema, "ValueData")
        try:
            exact, present = _filter(request.components)
        except QuotaFilterError as e:
            return build(schema, throttle_time=0, error_code=e.error_code, error_message=str(e), entries=None)
        entries = tuple(
            build(
                entry_cls,
                entity=tuple(build(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(build(value_cls, key=k, value=values[k]) for k in java_hash_map_order(values)),
            )
            for entity, values in self._metadata.image.client_quotas.items()
            if _matches(entity, exact, present, request.strict)
        )
        return build(schema, throttle_time=0, error_code=ErrorCode.none, error_message=None, entries=entries)
