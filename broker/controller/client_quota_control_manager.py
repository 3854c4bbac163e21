"""ClientQuotaControlManager: AlterClientQuotas decided over the committed image, sans-IO.

Kafka's rules and messages: an entity is one or more of user, client-id and ip (ip alone), each
at most once, a name or None (the default) but never empty; user and client-id entities take
producer_byte_rate and consumer_byte_rate (whole numbers), request_percentage and
controller_mutation_rate; an ip entity takes connection_creation_rate (a whole number); every
value is above 0. A removal of a quota that is not set writes nothing, and so does setting a
quota to the value it has.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_delta import quota_entity
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import ClientQuotaRecord, EntityData, MetadataRecord

USER, CLIENT_ID, IP = "user", "client-id", "ip"
# Kafka's QuotaConfig: per key, whether its value must be a whole number (and its largest value).
USER_AND_CLIENT_KEYS = {"producer_byte_rate": 2**63 - 1, "consumer_byte_rate": 2**63 - 1, "request_percentage": None, "controller_mutation_rate": None}
IP_KEYS = {"connection_creation_rate": 2**31 - 1}
INTEGRAL_TYPE_NAMES = {2**63 - 1: "a LONG", 2**31 - 1: "an INT"}


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    entity: tuple[tuple[str, str | None], ...]  # as the request gives it
    ops: tuple[tuple[str, float | None], ...]  # key, value (None: remove)


# One answer per alteration: (its entity as given, error code, message or None).
QuotaResult = tuple[tuple[tuple[str, str | None], ...], int, str | None]


def alter_client_quotas(image: MetadataImage, alterations: list[QuotaAlteration]) -> tuple[list[MetadataRecord], list[QuotaResult]]:
    records: list[MetadataRecord] = []
    results: dict[tuple[tuple[str, str | None], ...], tuple[int, str | None]] = {}
    for alteration in alterations:
        ops: dict[str, float | None] = {}
        error: tuple[int, str] | None = None
        for key, value in alteration.ops:
            if key in ops:
                error = (ErrorCode.invalid_request, f"Duplicate quota key {key} not updating quota for this entity {_entity_text(alteration.entity)}")
            ops[key] = value
        if alteration.entity in results or error is not None:
            results[alteration.entity] = error or (ErrorCode.invalid_request, f"Ignoring duplicate entity {_entity_text(alteration.entity)}")
            continue
        new_records, error = _alter_entity(image, alteration.entity, ops)
        if error is None:
            records.extend(new_records)
        results[alteration.entity] = error or (ErrorCode.none, None)
    return records, [(entity, code, message) for entity, (code, message) in results.items()]


def _alter_entity(image: MetadataImage, parts: tuple[tuple[str, str | None], ...], ops: dict[str, float | None]) -> tuple[list[MetadataRecord], tuple[int, str] | None]:
    if not parts:
        return [], (ErrorCode.invalid_request, "Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, name in parts:
        if entity_type in seen:
            return [], (ErrorCode.invalid_request, f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            return [], (ErrorCode.invalid_request, f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            return [], (ErrorCode.invalid_request, f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            return [], (ErrorCode.invalid_request, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        if not _valid_ip_entity(seen[IP]):
            return [], (ErrorCode.invalid_request, f"{seen[IP]} is not a valid IP or resolvable host.")
        keys = IP_KEYS
    else:
        keys = USER_AND_CLIENT_KEYS
    entity = quota_entity(seen.items())
    current = image.client_quotas.get(entity, {})
    record_entity = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
    records: list[MetadataRecord] = []
    for key, value in ops.items():
        if value is None:
            if key in current:
                records.append(ClientQuotaRecord(entity=record_entity, key=key, remove=True))
            continue
        error = _check_value(keys, key, value)
        if error is not None:
            return [], (ErrorCode.invalid_request, error)
        if current.get(key) != value:
            records.append(ClientQuotaRecord(entity=record_entity, key=key, value=value))
    return records, None


def _check_value(keys: dict[str, int | None], key: str, value: float) -> str | None:
    if key not in keys:
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    largest = keys[key]
    if largest is None:
        return None
    if value > largest:
        return f"Proposed value for {key} is too large for {INTEGRAL_TYPE_NAMES[largest]}."
    if abs(value % 1.0) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def _valid_ip_entity(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
        return True
    except OSError:
        return False


def _entity_text(parts: tuple[tuple[str, str | None], ...]) -> str:
    """As Kafka's ClientQuotaEntity prints."""
    return "ClientQuotaEntity(entries=" + "{" + ", ".join(f"{t}={n}" for t, n in parts) + "})"
