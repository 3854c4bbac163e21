"""What every control manager operation returns: the records to commit and the answer.

Kafka's ControllerResult. The records take effect only once the caller has committed them
to the metadata log and applied them to the image; the response may be sent only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Iterable, TypeVar

from broker.metadata.metadata_records import MetadataRecord

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: list[MetadataRecord]
    response: T


class ApiError(Exception):
    """A request the controller refuses: a Kafka error code and its message (None: the code's default)."""

    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.error_code = int(error_code)
        self.message = message


def duplicates(keys: Iterable[object]) -> set[object]:
    seen: set[object] = set()
    dups: set[object] = set()
    for key in keys:
        if key in seen:
            dups.add(key)
        seen.add(key)
    return dups


__all__ = ["ApiError", "ControllerResult", "duplicates"]
