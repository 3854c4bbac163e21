"""ErrorsPerSec: the error codes of each answer, counted as Kafka's ``AbstractResponse.errorCounts()``.

Kafka 4.4 adds every answer's ``errorCounts()`` to ``kafka.network:type=RequestMetrics,
name=ErrorsPerSec,request=R,error=E`` when it is sent (``RequestChannel.sendResponse``), and when
a failed acks=0 produce closes the connection instead (``RequestChannel.closeConnection``).
``errorCounts()`` holds each error code of the answer once per occurrence, ``NONE`` included:
the top-level code and those of every topic, partition, group, ... result.

kbroker's answers are kio entities (or the repository's own schema entities, same shape): every
field of kafka type ``error_code`` anywhere in the entity is one occurrence. The walk is compiled
once per entity class into the paths that lead to such fields, so an answer costs one visit per
nested entity that holds a code, nothing for the rest (brokers, configs, records...). Kafka's
``errorCounts()`` leaves a few codes out; those are the exceptions below.

Produce and Fetch are encoded by their handlers; they add their partitions' codes themselves as
they build the answer (broker/handlers/produce.py, broker/handlers/fetch.py), and so does the
Metadata handler for the all-topics answer it caches encoded.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.api_keys import ApiKey

# code -> occurrences, the ErrorsPerSec of one request name.
ErrorCounts = dict[int, int]

# (error code fields, (field, holds a tuple of entities, the plan of the entity or entities))
Plan = tuple[tuple[str, ...], tuple[tuple[str, bool, "Plan"], ...]]

# Fields Kafka 4.4's errorCounts() leaves out, as dotted paths from the response entity
# (from the bytecode of each response class's errorCounts()).
_SKIPPED: dict[int, frozenset[str]] = {
    # MetadataResponse counts its topics' and partitions' codes only, not v13's top-level one.
    ApiKey.METADATA: frozenset({"error_code"}),
    # DeleteAclsResponse counts each filter's result, not its matching ACLs'.
    ApiKey.DELETE_ACLS: frozenset({"filter_results.matching_acls"}),
    # DescribeUserScramCredentialsResponse counts its results only.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: frozenset({"error_code"}),
}
# Answers whose errorCounts() is empty on success (NONE is not counted).
_NONE_LEFT_OUT: frozenset[int] = frozenset(
    {ApiKey.UNREGISTER_BROKER, ApiKey.UNREGISTER_CONTROLLER, ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER}
)
# Kafka 4.4's Errors that kio's ErrorCode lacks.
_NAMES_KIO_LACKS = {134: "GROUP_DELETION_FAILED", 135: "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", 136: "CONTROLLER_ID_NOT_REGISTERED"}


def error_name(code: int) -> str:
    """Kafka's ``Errors`` name of ``code``; like ``Errors.forCode``, UNKNOWN_SERVER_ERROR for a code it does not know."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return _NAMES_KIO_LACKS.get(code, "UNKNOWN_SERVER_ERROR")


def add(counts: ErrorCounts, code: int) -> None:
    counts[code] = counts.get(code, 0) + 1


def count_response(counts: ErrorCounts, api_key: int, response: Any) -> None:
    """Add the error codes of the answer entity ``response`` to ``counts``, as Kafka's errorCounts()."""
    # Each response class is one API's (and version's): its plan is found by the class alone.
    cls = type(response)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls, _SKIPPED.get(api_key, frozenset()), "")
    if plan is None:
        return
    if api_key in _NONE_LEFT_OUT:
        found: ErrorCounts = {}
        _count(response, plan, found)
        found.pop(0, None)
        for code, n in found.items():
            counts[code] = counts.get(code, 0) + n
        return
    _count(response, plan, counts)


_PLANS: dict[type, Plan | None] = {}


def _count(entity: Any, plan: Plan, counts: ErrorCounts) -> None:
    codes, children = plan
    for name in codes:
        code = getattr(entity, name)
        counts[code] = counts.get(code, 0) + 1
    for name, many, child in children:
        value = getattr(entity, name)
        if value is None:
            continue
        if many:
            for item in value:
                _count(item, child, counts)
        else:
            _count(value, child, counts)


@cache
def _plan(cls: type, skipped: frozenset[str], prefix: str) -> Plan | None:
    """Where ``cls``'s error codes are, None when it holds none (then its values are never visited)."""
    if not dataclasses.is_dataclass(cls):
        return None
    hints = typing.get_type_hints(cls)
    codes: list[str] = []
    children: list[tuple[str, bool, Plan]] = []
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if path in skipped:
            continue
        # Or an int16 named so: our entities whose codes kio's ErrorCode lacks (protocol/schema/).
        if f.metadata.get("kafka_type") == "error_code" or f.name == "error_code":
            codes.append(f.name)
            continue
        nested, many = _entity_type(hints[f.name])
        if nested is None:
            continue
        child = _plan(nested, skipped, path + ".")
        if child is not None:
            children.append((f.name, many, child))
    if not codes and not children:
        return None
    return tuple(codes), tuple(children)


def _entity_type(hint: Any) -> tuple[type | None, bool]:
    """The nested entity class of a field's type (``X``, ``X | None`` or ``tuple[X, ...]``), and whether it is a tuple."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else None
        return (inner, True) if isinstance(inner, type) and dataclasses.is_dataclass(inner) else (None, False)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                return arg, False
        return None, False
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, False
    return None, False


__all__ = ["ErrorCounts", "add", "count_response", "error_name"]
