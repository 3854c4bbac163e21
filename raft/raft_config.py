"""RaftConfig: the ``controller.quorum.*`` settings the Raft core runs on, with Kafka's defaults.

Timing values are the ones Kafka's QuorumConfig reads; the two size limits are constants in
Kafka's KafkaRaftClient, kept here so the simulation can make snapshot chunks small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
MAX_FETCH_SIZE_BYTES = 8 * 1024 * 1024

_PROPERTIES = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
    "controller.quorum.append.linger.ms": "append_linger_ms",
}


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500
    max_batch_size_bytes: int = MAX_BATCH_SIZE_BYTES
    max_fetch_size_bytes: int = MAX_FETCH_SIZE_BYTES

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative: {getattr(self, name)}")
        if self.election_timeout_ms == 0 or self.fetch_timeout_ms == 0:
            raise ValueError("the election and fetch timeouts must be positive")

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader that has not heard from a majority for this long resigns (Kafka: 1.5 x fetch timeout)."""
        return self.fetch_timeout_ms * 3 // 2

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> "RaftConfig":
        """The ``controller.quorum.*`` entries of a node's properties; absent ones keep Kafka's defaults."""
        values = {field: int(properties[key]) for key, field in _PROPERTIES.items() if key in properties}
        return cls(**values)


__all__ = ["MAX_BATCH_SIZE_BYTES", "MAX_FETCH_SIZE_BYTES", "RaftConfig"]
