"""Building kio response entities for any version from one set of keyword arguments.

Each kio class holds only the fields of its version, so a handler passes every field
it knows and ``build`` keeps those the version has: one code path for all versions.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import types
import typing
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

T = TypeVar("T")

_TIMEDELTA_FIELDS = frozenset({"throttle_time"})


def build(cls: type[T], **fields: Any) -> T:
    accepted = cls.__dataclass_fields__  # type: ignore[attr-defined]
    kwargs = {}
    for name, value in fields.items():
        if name not in accepted:
            continue
        if name == "error_code" and not isinstance(value, ErrorCode):
            value = ErrorCode(value)
        elif name in _TIMEDELTA_FIELDS and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        kwargs[name] = value
    return cls(**kwargs)


def error_only(cls: type[T], error_code: int, message: str | None = None) -> T:
    """A response that carries nothing but a top-level error (Kafka's getErrorResponse for an API
    whose whole request failed): every other field without a default is empty or zero."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {"error_code": error_code, "error_message": message}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in fields or f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kind = hints[f.name]
        if typing.get_origin(kind) is tuple:
            fields[f.name] = ()
        elif kind is str:
            fields[f.name] = ""
        elif kind is bool:
            fields[f.name] = False
        elif isinstance(kind, type) and issubclass(kind, datetime.timedelta):
            fields[f.name] = 0
        elif typing.get_origin(kind) in (typing.Union, types.UnionType):
            fields[f.name] = None
        else:
            fields[f.name] = kind(0)
    return build(cls, **fields)


def nested(schema: type, name: str) -> type:
    """A nested entity class declared beside ``schema`` in its version's module."""
    return getattr(sys.modules[schema.__module__], name)  # type: ignore[no-any-return]


def nested_or_none(schema: type, name: str) -> type | None:
    """Like ``nested`` for entities that only some versions have."""
    return getattr(sys.modules[schema.__module__], name, None)


def has_field(schema: type, name: str) -> bool:
    return name in schema.__dataclass_fields__  # type: ignore[attr-defined]
