"""AuthHelper: the authorization questions request handlers ask, as Kafka's AuthHelper.

Without an authorizer every answer is yes. With one, each question goes to the StandardAuthorizer
of the metadata image the node has now, for the principal the connection authenticated as and the
host it connects from; a denial of something the client asked for by name is logged as Kafka's
authorizer logger does.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from kio.schema.errors import ErrorCode

from broker.kafka_apis import RequestContext
from broker.metadata.acl_publisher import AclPublisher
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from broker.security.standard_authorizer import Action

log = structlog.get_logger("kafka.authorizer.logger")

# An item's refusal, with Kafka's default message for the error.
Refusal = tuple[int, str | None]
TOPIC_AUTHORIZATION_FAILED: Refusal = (ErrorCode.topic_authorization_failed, "Topic authorization failed.")
GROUP_AUTHORIZATION_FAILED: Refusal = (ErrorCode.group_authorization_failed, "Group authorization failed.")
CLUSTER_AUTHORIZATION_FAILED: Refusal = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Refusal = (ErrorCode.transactional_id_authorization_failed, "Transactional Id authorization failed.")

# The operations Kafka reports as authorized per resource type (KIP-430), in its order.
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    ),
}


def client_host(ctx: RequestContext) -> str:
    return ctx.client.address.rsplit(":", 1)[0].strip("[]")


class AuthHelper:
    def __init__(self, acls: AclPublisher | None) -> None:
        self._acls = acls

    @property
    def enabled(self) -> bool:
        return self._acls is not None and self._acls.authorizer is not None

    def authorize(self, ctx: RequestContext, operation: int, resource_type: int, name: str, log_if_denied: bool = True) -> bool:
        authorizer = self._acls.authorizer if self._acls is not None else None
        if authorizer is None:
            return True
        host = client_host(ctx)
        if authorizer.authorize(ctx.client.principal, host, Action(operation, resource_type, name)):
            return True
        if log_if_denied:
            log.info(
                "authorizer.denied",
                principal=ctx.client.principal,
                host=host,
                operation=AclOperation(operation).name,
                resource=f"{ResourceType(resource_type).name}:LITERAL:{name}",
                api=ctx.header.api_key,
            )
        return False

    def authorize_cluster(self, ctx: RequestContext, operation: int, log_if_denied: bool = True) -> bool:
        return self.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied)

    def authorize_by_resource_type(self, ctx: RequestContext, operation: int, resource_type: int) -> bool:
        authorizer = self._acls.authorizer if self._acls is not None else None
        return authorizer is None or authorizer.authorize_by_resource_type(ctx.client.principal, client_host(ctx), operation, resource_type)

    def filter_authorized(self, ctx: RequestContext, operation: int, resource_type: int, names: Iterable[str], log_if_denied: bool = True) -> set[str]:
        names = set(names)
        if not self.enabled:
            return names
        return {name for name in names if self.authorize(ctx, operation, resource_type, name, log_if_denied)}

    def authorized_operations(self, ctx: RequestContext, resource_type: int, name: str) -> int:
        """KIP-430's bit field: bit n set when operation n is allowed on the resource."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(ctx, operation, resource_type, name, log_if_denied=False):
                bits |= 1 << operation
        return bits
