"""ScramControlManager: AlterUserScramCredentials decided over the committed image, sans-IO.

Kafka's rules and messages: a user named twice in one request is DUPLICATE_RESOURCE; an empty
name UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations outside
4096..16384 UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist RESOURCE_NOT_FOUND.
An upsertion carries the salt and the salted password; what is stored is the salt and the keys
derived from it (UserScramCredentialRecord), never the salted password.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord
from broker.security.scram import SCRAM_BY_TYPE, credential_from_salted_password

DUPLICATE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


# One answer per user named: (user, error code, message or None).
AlterScramResult = tuple[str, int, str | None]


def _validate_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in SCRAM_BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def alter_credentials(image: MetadataImage, deletions: list[ScramDeletion], upsertions: list[ScramUpsertion]) -> tuple[list[MetadataRecord], list[AlterScramResult]]:
    errors: dict[str, tuple[int, str]] = {}
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    for d in deletions:
        if d.name in errors:
            continue
        if to_delete.pop(d.name, None) is not None:
            errors[d.name] = DUPLICATE
            continue
        error = _validate_name_and_mechanism(d.name, d.mechanism)
        if error is None and (d.name, d.mechanism) not in image.scram_credentials:
            error = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[d.name] = error
        else:
            to_delete[d.name] = d
    for u in upsertions:
        if u.name in errors:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            errors[u.name] = DUPLICATE
            continue
        error = _validate_name_and_mechanism(u.name, u.mechanism)
        if error is None:
            mechanism = SCRAM_BY_TYPE[u.mechanism]
            if u.iterations < mechanism.min_iterations:
                error = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif u.iterations > mechanism.max_iterations:
                error = (ErrorCode.unacceptable_credential, "Too many iterations")
        if error is not None:
            errors[u.name] = error
        else:
            to_upsert[u.name] = u
    records: list[MetadataRecord] = []
    results: list[AlterScramResult] = []
    for d in to_delete.values():
        records.append(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
        results.append((d.name, ErrorCode.none, None))
    for u in to_upsert.values():
        c = credential_from_salted_password(SCRAM_BY_TYPE[u.mechanism], u.salt, u.salted_password, u.iterations)
        records.append(UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=c.salt, stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations))
        results.append((u.name, ErrorCode.none, None))
    results.extend((name, code, message) for name, (code, message) in errors.items())
    return records, results
