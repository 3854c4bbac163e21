"""ACLs as Kafka's StandardAcl: a resource pattern and an access control entry, with Kafka's codes
for resource types, pattern types, operations and permissions (the values on the wire and in
AccessControlEntryRecord), and the filters of DescribeAcls and DeleteAcls."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


UNKNOWN = 0
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


@dataclass(frozen=True, slots=True, order=True)
class StandardAcl:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for a name, principal or host matches any; ANY for a type, operation or permission."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def is_unknown(self) -> bool:
        return UNKNOWN in (self.resource_type, self.pattern_type, self.operation, self.permission_type)

    def matches(self, acl: StandardAcl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return self.resource_name == acl.resource_name or acl.resource_name == WILDCARD
        return self.resource_name.startswith(acl.resource_name)

    def _matches_entry(self, acl: StandardAcl) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Why the controller refuses to store ``acl`` (Kafka's AclControlManager.validateNewAcl), or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {ResourceType(acl.resource_type).name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {PatternType(acl.pattern_type).name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {AclOperation(acl.operation).name}"
    if acl.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {AclPermissionType(acl.permission_type).name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    return None


def from_code(enum: type[IntEnum], code: int) -> int:
    """As Kafka's fromCode: a code it does not know reads as UNKNOWN (0)."""
    return code if code in enum._value2member_map_ else UNKNOWN
