"""StandardAuthorizer: Kafka's KRaft authorizer over the ACLs of the metadata image, sans-IO.

Its rules, as Kafka's StandardAuthorizerData: a super user may do anything. Otherwise the ACLs
that apply to a resource are the literal ones with its exact name, the literal wildcard ``*`` and
the prefixed ones whose name starts it. Among those naming the principal (or ``User:*``) and the
host (or ``*``): a DENY for the operation (or ALL) denies, whatever allows; else an ALLOW allows,
where an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE and an ALLOW of ALTER_CONFIGS
allows DESCRIBE_CONFIGS. A resource with no ACL at all, for anyone, gets
``allow.everyone.if.no.acl.found``; one with ACLs, none of them matching, is denied.

One StandardAuthorizer is built per ACL image; it never changes, so a request sees one set of ACLs.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from broker.security.standard_acl import WILDCARD, WILDCARD_PRINCIPAL, AclBindingFilter, AclOperation, AclPermissionType, PatternType, StandardAcl

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# authorizer.class.name as Kafka's users write it.
STANDARD_AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Action(NamedTuple):
    operation: int
    resource_type: int
    resource_name: str


class StandardAuthorizer:
    def __init__(self, acls: Iterable[StandardAcl], super_users: frozenset[str], allow_everyone_if_no_acl_found: bool) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls = tuple(sorted(set(acls)))
        self._literal: dict[tuple[int, str], list[StandardAcl]] = defaultdict(list)
        self._prefixed: dict[int, dict[str, list[StandardAcl]]] = defaultdict(lambda: defaultdict(list))
        for acl in self._acls:
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed[acl.resource_type][acl.resource_name].append(acl)
            else:
                self._literal[(acl.resource_type, acl.resource_name)].append(acl)
        self._longest_prefix = {t: max(map(len, by_name)) for t, by_name in self._prefixed.items()}

    def authorize(self, principal: str, host: str, action: Action) -> bool:
        if principal in self.super_users:
            return True
        has_resource_acls = allowed = False
        for acl in self._applying(action.resource_type, action.resource_name):
            has_resource_acls = True
            result = _result(acl, principal, host, action.operation)
            if result is AclPermissionType.DENY:
                return False
            if result is AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return not has_resource_acls and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of the type (Kafka's
        Authorizer.authorizeByResourceType, KIP-679): a super user, or an ALLOW not covered by a
        DENY of the same or a shorter prefix, or the default for a type with no ACL at all."""
        if self.authorize(principal, host, Action(operation, resource_type, "hardcode")):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        wildcard_allowed = False
        for acl in self._acls:
            if acl.resource_type != resource_type or not _host_matches(acl.host, host) or acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False  # whatever else allows
                (deny_literal if acl.pattern_type == PatternType.LITERAL else deny_prefixed).add(acl.resource_name)
            elif acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                wildcard_allowed = True
            else:
                allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allowed:
            return True
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def acls(self, acl_filter: AclBindingFilter) -> Iterator[StandardAcl]:
        return (acl for acl in self._acls if acl_filter.matches(acl))

    def _applying(self, resource_type: int, name: str) -> Iterator[StandardAcl]:
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, min(len(name), self._longest_prefix[resource_type]) + 1):
                yield from prefixed.get(name[:end], ())


def _result(acl: StandardAcl, principal: str, host: str, operation: int) -> AclPermissionType | None:
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if not _host_matches(acl.host, host):
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != acl.operation:
                return None
        elif operation != acl.operation:
            return None
    return AclPermissionType.ALLOW if acl.permission_type == AclPermissionType.ALLOW else AclPermissionType.DENY


def _host_matches(acl_host: str, host: str) -> bool:
    """``*``, the client's address, or (Kafka 4.4) a CIDR range holding it."""
    if acl_host == WILDCARD or acl_host == host:
        return True
    if "/" not in acl_host:
        return False
    network = _network(acl_host)
    try:
        return network is not None and ipaddress.ip_address(host) in network
    except ValueError:
        return False


@functools.lru_cache(maxsize=1024)
def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons, as Kafka reads them; each is
    ``Type:name``, else ValueError with Kafka's message."""
    users = frozenset(p.strip() for p in value.split(";") if p.strip())
    for user in users:
        if ":" not in user:
            raise ValueError(f"expected a string in format principalType:principalName but got {user}")
    return users

