"""Building kio response entities for any version from one set of keyword arguments.

Each kio class holds only the fields of its version, so a handler passes every field
it knows and ``build`` keeps those the version has: one code path for all versions.
"""

from __future__ import annotations

import datetime
import sys
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


def nested(schema: type, name: str) -> type:
    """A nested entity class declared beside ``schema`` in its version's module."""
    return getattr(sys.modules[schema.__module__], name)  # type: ignore[no-any-return]


def nested_or_none(schema: type, name: str) -> type | None:
    """Like ``nested`` for entities that only some versions have."""
    return getattr(sys.modules[schema.__module__], name, None)


def has_field(schema: type, name: str) -> bool:
    return name in schema.__dataclass_fields__  # type: ignore[attr-defined]
