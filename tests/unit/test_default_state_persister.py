"""The persister's InitializeShareGroupState: one request per share coordinator, Kafka's
retriable coordinator errors retried, any other error failing the initialization."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0.response import InitializeShareGroupStateResponse, InitializeStateResult, PartitionResult

from broker.default_state_persister import MAX_ATTEMPTS, DefaultStatePersister
from broker.group.share_group_manager import InitializeShareGroupState
from tests.unit.test_share_coordinator_service import TOPIC_ID, metadata


class Coordinators:
    """Answers each InitializeShareGroupState with the next error of ``errors``, for every partition."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.sent: list[tuple[tuple[str, int], Any]] = []

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append((destination, body))
        error = self.errors.pop(0) if len(self.errors) > 1 else self.errors[0]
        return InitializeShareGroupStateResponse(
            results=tuple(InitializeStateResult(topic_id=t.topic_id, partitions=tuple(PartitionResult(partition=p.partition, error_code=ErrorCode(error)) for p in t.partitions)) for t in body.topics)
        )


def initialize(network: Coordinators, partitions: frozenset[int] = frozenset({0, 1})) -> bool:
    # Every __share_group_state partition is led by broker 2, at its inter-broker endpoint.
    persister = DefaultStatePersister(metadata({i: 2 for i in range(4)}), network, 4, inter_broker_listener_name="INTERNAL", backoff_ms=1, backoff_max_ms=2)
    return asyncio.run(persister.initialize_share_group_state(InitializeShareGroupState("g", 3, {TOPIC_ID: partitions})))


def test_one_request_per_coordinator_with_kafkas_values() -> None:
    network = Coordinators(ErrorCode.none)
    assert initialize(network)
    [(destination, body)] = network.sent
    assert destination == ("internal2", 19092)
    assert body.group_id == "g"
    [topic] = body.topics
    assert (topic.topic_id, [(p.partition, p.state_epoch, p.start_offset) for p in topic.partitions]) == (TOPIC_ID, [(0, 3, -1), (1, 3, -1)])


def test_coordinator_errors_are_retried() -> None:
    network = Coordinators(ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.none)
    assert initialize(network)
    assert len(network.sent) == 3


def test_retries_are_bounded() -> None:
    network = Coordinators(ErrorCode.coordinator_not_available)
    assert not initialize(network)
    assert len(network.sent) == MAX_ATTEMPTS


def test_another_error_fails_at_once() -> None:
    network = Coordinators(ErrorCode.fenced_state_epoch)
    assert not initialize(network)
    assert len(network.sent) == 1

