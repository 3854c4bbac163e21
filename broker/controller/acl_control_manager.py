"""AclControlManager: CreateAcls and DeleteAcls decided over the committed image, sans-IO.

Kafka's rules (AclApis on the controller, then AclControlManager): the cluster resource is named
``kafka-cluster``; a name is never empty; types, patterns, operations and permissions must be
concrete. An ACL that exists already is answered as created and written once. A delete filter
removes every ACL it matches, each at most once however many filters match it, and answers the
ones it matched; a filter with an UNKNOWN part is INVALID_REQUEST.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.controller.feature_control_manager import metadata_version_of
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord
from broker.security.standard_acl import CLUSTER_NAME, AclBindingFilter, ResourceType, StandardAcl, validate_new_acl

# Kafka's MAX_RECORDS_PER_USER_OP: one request may not write more.
MAX_RECORDS_PER_USER_OP = 10000

# One answer per creation: (error code, message or None).
AclCreateResult = tuple[int, str | None]
# One answer per filter: (error code, message or None, the ACLs it deleted).
AclDeleteResult = tuple[int, str | None, list[StandardAcl]]


def create_acls(image: MetadataImage, acls: list[StandardAcl], new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> tuple[list[MetadataRecord], list[AclCreateResult]]:
    existing = set(image.acls.values())
    taken = set(image.acls)
    records: list[MetadataRecord] = []
    results: list[AclCreateResult] = []
    cidr_supported = metadata_version_of(image).is_cidr_acl_supported
    for acl in acls:
        problem = _creation_problem(acl)
        if problem is None:
            host_problem = _host_problem(acl.host, cidr_supported)
            if host_problem is not None:
                results.append(host_problem)
                continue
        if problem is not None:
            results.append((ErrorCode.invalid_request, problem))
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = new_id()
            while acl_id in taken:
                acl_id = new_id()
            taken.add(acl_id)
            records.append(AccessControlEntryRecord(id=acl_id, **dataclasses.asdict(acl)))
        results.append((ErrorCode.none, None))
    if len(records) > MAX_RECORDS_PER_USER_OP:
        # Kafka's controller turns its BoundedListTooLongException into this policy violation.
        return [], [(ErrorCode.policy_violation, "Unable to perform excessively large batch operation")] * len(acls)
    return records, results


def delete_acls(image: MetadataImage, filters: list[AclBindingFilter]) -> tuple[list[MetadataRecord], list[AclDeleteResult]]:
    removed: dict[uuid.UUID, None] = {}
    results: list[AclDeleteResult] = []
    for acl_filter in filters:
        if acl_filter.is_unknown():
            results.append((ErrorCode.invalid_request, "Unknown patternFilter." if _pattern_unknown(acl_filter) else "Unknown entryFilter.", []))
            continue
        matched = [(acl_id, acl) for acl_id, acl in image.acls.items() if acl_filter.matches(acl)]
        removed.update(dict.fromkeys(acl_id for acl_id, _ in matched))
        if len(removed) > MAX_RECORDS_PER_USER_OP:
            message = f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation."
            return [], [(ErrorCode.invalid_request, message, [])] * len(filters)
        results.append((ErrorCode.none, None, [acl for _, acl in matched]))
    return [RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed], results


def _creation_problem(acl: StandardAcl) -> str | None:
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if not acl.host:
        return "Host pattern cannot be null or empty"
    if ":" not in acl.principal:
        return f"expected a string in format principalType:principalName but got {acl.principal}"
    return validate_new_acl(acl)


def _host_problem(host: str, cidr_supported: bool) -> AclCreateResult | None:
    """Kafka 4.4's validateHostPattern: a host with "/" is a CIDR range (KIP-1172), stored only from
    metadata.version 4.4-IV1 on (older brokers would read it as a literal host) and only if valid."""
    if host == "*" or "/" not in host:
        return None
    if not cidr_supported:
        return ErrorCode.unsupported_version, "CIDR-based ACL host patterns require metadata version 4.4-IV1 or higher."
    try:
        ipaddress.ip_network(host, strict=False)
    except ValueError:
        return ErrorCode.invalid_request, f"Invalid CIDR notation '{host}': Could not parse [{host}]"
    return None


def _pattern_unknown(acl_filter: AclBindingFilter) -> bool:
    return 0 in (acl_filter.resource_type, acl_filter.pattern_type)
