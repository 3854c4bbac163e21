"""The persister's five share coordinator calls against a fake coordinator: each call's request
and answer, Kafka's retriable errors retried (a moved coordinator looked up again), any other
error returned at once, at most MAX_ATTEMPTS answers, and the share partitions of one coordinator
asked in one request."""

from __future__ import annotations

import asyncio
import typing
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v6.response import Coordinator, FindCoordinatorResponse
from kio.static.primitive import i8, i32

from broker.default_state_persister import MAX_ATTEMPTS, DefaultStatePersister, StateSummary
from broker.group.share_group_manager import InitializeShareGroupState
from broker.network_client import DisconnectError, NetworkError, RequestTimeoutError
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import RecordState
from broker.share_coordinator.share_partition_key import kafka_uuid_string
from protocol.api_keys import response_schema
from protocol.entities import build, nested, nested_or_none
from tests.unit.test_share_coordinator_service import TOPIC_ID, metadata

OTHER_TOPIC = uuid.UUID(int=8)
# What the fake coordinator keeps for every share partition.
STATE_EPOCH, LEADER_EPOCH, START_OFFSET, DELIVERY_COMPLETE = 3, 1, 10, 4
ACKNOWLEDGED = 2
# Brokers 1 (this node), 2 and 3, at their inter-broker endpoints.
FIND_DESTINATION = ("internal1", 19091)
ON = {2: ("internal2", 19092), 3: ("internal3", 19093)}


class Coordinators:
    """FindCoordinator(SHARE) names the next of ``nodes``; every share-state request is answered
    with the next of ``errors`` for each of its partitions (a NetworkError is raised instead), the
    last repeating. A share partition's state is the constants above."""

    def __init__(self, *errors: int | NetworkError, nodes: tuple[int, ...] = (2,)) -> None:
        self.errors = list(errors)
        self.nodes = list(nodes)
        self.sent: list[tuple[tuple[str, int], Any]] = []

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append((destination, body))
        if isinstance(body, FindCoordinatorRequest):
            node = _next(self.nodes)
            [key] = body.coordinator_keys
            host, port = ON[node]
            return FindCoordinatorResponse(throttle_time=i32(0), coordinators=(Coordinator(key=key, node_id=node, host=host, port=i32(port), error_code=ErrorCode.none, error_message=None),))
        error = _next(self.errors)
        if isinstance(error, NetworkError):
            raise error
        schema = response_schema(body.__api_key__, body.__version__)
        [topic_cls] = typing.get_args(typing.get_type_hints(schema)["results"])[:1]
        partition_cls = nested(schema, "PartitionResult")
        batch_cls = nested_or_none(schema, "StateBatch")
        batches = (build(batch_cls, first_offset=10, last_offset=14, delivery_state=ACKNOWLEDGED, delivery_count=1),) if batch_cls is not None else ()

        def answer(partition: int) -> Any:
            return build(
                partition_cls,
                partition=partition,
                error_code=error,
                state_epoch=STATE_EPOCH,
                leader_epoch=LEADER_EPOCH,
                start_offset=START_OFFSET,
                delivery_complete_count=DELIVERY_COMPLETE,
                state_batches=batches,
            )

        return build(schema, results=tuple(build(topic_cls, topic_id=t.topic_id, partitions=tuple(answer(p.partition) for p in t.partitions)) for t in body.topics))

    def requests(self) -> list[tuple[tuple[str, int], Any]]:
        return [(d, b) for d, b in self.sent if not isinstance(b, FindCoordinatorRequest)]


def _next(values: list[Any]) -> Any:
    return values.pop(0) if len(values) > 1 else values[0]


def persister(network: Coordinators, state_topic: bool = True) -> DefaultStatePersister:
    # With the state topic, every __share_group_state partition is led by broker 2.
    return DefaultStatePersister(metadata({i: 2 for i in range(4)} if state_topic else None), network, 4, inter_broker_listener_name="INTERNAL", backoff_ms=1, backoff_max_ms=2)


# Each call for share partition 0 of TOPIC_ID, reduced to its error.
CALLS: dict[str, Callable[[DefaultStatePersister], Awaitable[int]]] = {}


def call(name: str) -> Callable[[Callable[[DefaultStatePersister], Awaitable[int]]], Callable[[DefaultStatePersister], Awaitable[int]]]:
    def register(f: Callable[[DefaultStatePersister], Awaitable[int]]) -> Callable[[DefaultStatePersister], Awaitable[int]]:
        CALLS[name] = f
        return f

    return register


@call("initialize")
async def _initialize(p: DefaultStatePersister) -> int:
    return (await p.initialize_state("g", STATE_EPOCH, {(TOPIC_ID, 0): START_OFFSET}))[(TOPIC_ID, 0)]


@call("read")
async def _read(p: DefaultStatePersister) -> int:
    return (await p.read_state("g", TOPIC_ID, 0, LEADER_EPOCH)).error


@call("write")
async def _write(p: DefaultStatePersister) -> int:
    return await p.write_state("g", TOPIC_ID, 0, SharePartitionStateData(START_OFFSET, STATE_EPOCH, LEADER_EPOCH))


@call("read_summary")
async def _summary(p: DefaultStatePersister) -> int:
    return (await p.read_state_summary("g", {TOPIC_ID: [0]}))[(TOPIC_ID, 0)].error


@call("delete")
async def _delete(p: DefaultStatePersister) -> int:
    return (await p.delete_state("g", {TOPIC_ID: [0]}))[(TOPIC_ID, 0)]


def run(name: str, network: Coordinators, state_topic: bool = True) -> int:
    return asyncio.run(CALLS[name](persister(network, state_topic)))


@pytest.mark.parametrize("name", CALLS)
def test_success_is_one_request_to_the_coordinator(name: str) -> None:
    network = Coordinators(ErrorCode.none)
    assert run(name, network) == ErrorCode.none
    [(destination, body)] = network.sent
    assert destination == ON[2]
    assert body.group_id == "g"
    [topic] = body.topics
    assert (topic.topic_id, [p.partition for p in topic.partitions]) == (TOPIC_ID, [0])


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize(
    "first",
    [
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.unknown_topic_or_partition,
        DisconnectError("lost"),
        RequestTimeoutError("slow"),
    ],
    ids=lambda e: type(e).__name__ if isinstance(e, NetworkError) else ErrorCode(e).name,
)
def test_a_retriable_error_is_retried(name: str, first: int | NetworkError) -> None:
    network = Coordinators(first, ErrorCode.none)
    assert run(name, network) == ErrorCode.none
    assert [d for d, _ in network.sent] == [ON[2], ON[2]]


@pytest.mark.parametrize("name", CALLS)
def test_a_moved_coordinator_is_looked_up_again(name: str) -> None:
    # No __share_group_state in this node's metadata: FindCoordinator names 2, then 3.
    network = Coordinators(ErrorCode.not_coordinator, ErrorCode.none, nodes=(2, 3))
    assert run(name, network, state_topic=False) == ErrorCode.none
    assert [d for d, _ in network.sent] == [FIND_DESTINATION, ON[2], FIND_DESTINATION, ON[3]]
    [find, asked, again, asked_again] = (b for _, b in network.sent)
    assert (find, again) == (FindCoordinatorRequest(key_type=i8(2), coordinator_keys=(f"g:{kafka_uuid_string(TOPIC_ID)}:0",)),) * 2
    assert asked == asked_again


def test_a_new_leader_in_the_metadata_is_asked_next() -> None:
    network = Coordinators(ErrorCode.not_coordinator, ErrorCode.none)
    cache = metadata({i: 2 for i in range(4)})
    p = DefaultStatePersister(cache, network, 4, inter_broker_listener_name="INTERNAL", backoff_ms=1, backoff_max_ms=2)
    answer = network.send

    async def moves(destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        # The state topic's partitions move to broker 3 as broker 2 answers NOT_COORDINATOR.
        cache.image = metadata({i: 3 for i in range(4)}).image
        return await answer(destination, body, timeout_ms)

    network.send = moves  # type: ignore[method-assign]
    assert asyncio.run(CALLS["write"](p)) == ErrorCode.none
    assert [d for d, _ in network.sent] == [ON[2], ON[3]]


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("error", [ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch, ErrorCode.invalid_request, ErrorCode.cluster_authorization_failed])
def test_another_error_is_returned_at_once(name: str, error: int) -> None:
    network = Coordinators(error)
    assert run(name, network) == error
    assert len(network.sent) == 1


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("error", [ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, RequestTimeoutError("slow")], ids=["coordinator_not_available", "not_coordinator", "timeout"])
def test_retries_are_bounded(name: str, error: int | NetworkError) -> None:
    network = Coordinators(error)
    expected = ErrorCode.request_timed_out if isinstance(error, NetworkError) else error
    assert run(name, network) == expected
    assert len(network.sent) == MAX_ATTEMPTS


def test_lookups_are_bounded_apart_from_answers() -> None:
    """Kafka's findCoordBackoff: at most MAX_ATTEMPTS failed FindCoordinator in a row."""
    network = Coordinators(ErrorCode.none)

    async def refused(destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        network.sent.append((destination, body))
        raise DisconnectError("refused")

    network.send = refused  # type: ignore[method-assign]
    assert run("write", network, state_topic=False) == ErrorCode.network_exception
    assert len(network.sent) == MAX_ATTEMPTS


def test_a_missing_answer_is_an_unknown_server_error() -> None:
    network = Coordinators(ErrorCode.none)
    answer = network.send

    async def leaves_out(destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        response = await answer(destination, body, timeout_ms)
        return type(response)(results=())

    network.send = leaves_out  # type: ignore[method-assign]
    assert run("delete", network) == ErrorCode.unknown_server_error
    assert len(network.sent) == 1


@pytest.mark.parametrize("group", ["", "  "])
def test_an_empty_group_id_is_refused_unsent(group: str) -> None:
    network = Coordinators(ErrorCode.none)
    assert asyncio.run(persister(network).delete_state(group, {TOPIC_ID: [0, -1]})) == {(TOPIC_ID, 0): ErrorCode.invalid_request, (TOPIC_ID, -1): ErrorCode.invalid_request}
    assert asyncio.run(persister(network).delete_state("g", {TOPIC_ID: [-1]})) == {(TOPIC_ID, -1): ErrorCode.invalid_request}
    assert network.sent == []


def test_write_sends_v1_with_the_state_batches_and_delivery_complete_count() -> None:
    network = Coordinators(ErrorCode.none)
    state = SharePartitionStateData(20, 5, 7, (PersisterStateBatch(20, 24, RecordState.ARCHIVED, 3),), delivery_complete_count=6)
    assert asyncio.run(persister(network).write_state("g", TOPIC_ID, 1, state)) == ErrorCode.none
    [(_, body)] = network.sent
    assert body.__version__ == 1
    [partition] = body.topics[0].partitions
    assert (partition.partition, partition.state_epoch, partition.leader_epoch, partition.start_offset, partition.delivery_complete_count) == (1, 5, 7, 20, 6)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in partition.state_batches] == [(20, 24, int(RecordState.ARCHIVED), 3)]


def test_read_gives_the_state_with_the_readers_leader_epoch() -> None:
    network = Coordinators(ErrorCode.none)
    result = asyncio.run(persister(network).read_state("g", TOPIC_ID, 0, 9))
    assert result.error == ErrorCode.none
    assert result.state == SharePartitionStateData(START_OFFSET, STATE_EPOCH, 9, (PersisterStateBatch(10, 14, RecordState.ACKNOWLEDGED, 1),))
    [(_, body)] = network.sent
    assert body.topics[0].partitions[0].leader_epoch == 9
    fenced = asyncio.run(persister(Coordinators(ErrorCode.fenced_leader_epoch)).read_state("g", TOPIC_ID, 0, 9))
    assert (fenced.error, fenced.state) == (ErrorCode.fenced_leader_epoch, None)


def test_summary_is_v1_per_share_partition() -> None:
    network = Coordinators(ErrorCode.none)
    summaries = asyncio.run(persister(network).read_state_summary("g", {TOPIC_ID: [0, 1], OTHER_TOPIC: [0]}))
    assert summaries == dict.fromkeys([(TOPIC_ID, 0), (TOPIC_ID, 1), (OTHER_TOPIC, 0)], StateSummary(ErrorCode.none, START_OFFSET, STATE_EPOCH, LEADER_EPOCH, DELIVERY_COMPLETE))
    [(_, body)] = network.sent
    assert body.__version__ == 1
    assert {t.topic_id: [(p.partition, p.leader_epoch) for p in t.partitions] for t in body.topics} == {TOPIC_ID: [(0, 0), (1, 0)], OTHER_TOPIC: [(0, 0)]}
    failed = asyncio.run(persister(Coordinators(ErrorCode.invalid_request)).read_state_summary("g", {TOPIC_ID: [0]}))
    assert failed == {(TOPIC_ID, 0): StateSummary(ErrorCode.invalid_request, -1, -1, -1, -1)}


def test_concurrent_calls_to_one_coordinator_share_a_request() -> None:
    network = Coordinators(ErrorCode.none)
    p = persister(network)

    async def writes() -> list[int]:
        state = SharePartitionStateData(START_OFFSET, STATE_EPOCH, LEADER_EPOCH)
        # Two share partitions, then share partition 0 again: the second write of 0 waits for the next request.
        return list(await asyncio.gather(*(p.write_state("g", TOPIC_ID, partition, state) for partition in (0, 1, 0))))

    assert asyncio.run(writes()) == [ErrorCode.none] * 3
    assert [[p.partition for p in body.topics[0].partitions] for _, body in network.sent] == [[0, 1], [0]]


def test_each_share_partition_is_retried_on_its_own() -> None:
    network = Coordinators(ErrorCode.none)
    answer = network.send

    async def partition_1_loading_once(destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        response = await answer(destination, body, timeout_ms)
        if len(network.sent) > 1:
            return response
        [topic] = response.results
        partitions = tuple(type(p)(partition=p.partition, error_code=ErrorCode.coordinator_load_in_progress if p.partition == 1 else p.error_code) for p in topic.partitions)
        return type(response)(results=(type(topic)(topic_id=topic.topic_id, partitions=partitions),))

    network.send = partition_1_loading_once  # type: ignore[method-assign]
    assert asyncio.run(persister(network).delete_state("g", {TOPIC_ID: [0, 1]})) == {(TOPIC_ID, 0): ErrorCode.none, (TOPIC_ID, 1): ErrorCode.none}
    assert [[p.partition for p in body.topics[0].partitions] for _, body in network.sent] == [[0, 1], [1]]


# The group coordinator's call.


def initialize(network: Coordinators, partitions: frozenset[int] = frozenset({0, 1})) -> bool:
    return asyncio.run(persister(network).initialize_share_group_state(InitializeShareGroupState("g", 3, {TOPIC_ID: partitions})))


def test_one_request_per_coordinator_with_kafkas_values() -> None:
    network = Coordinators(ErrorCode.none)
    assert initialize(network)
    [(destination, body)] = network.sent
    assert destination == ON[2]
    assert body.group_id == "g"
    [topic] = body.topics
    assert (topic.topic_id, [(p.partition, p.state_epoch, p.start_offset) for p in topic.partitions]) == (TOPIC_ID, [(0, 3, -1), (1, 3, -1)])


def test_coordinator_errors_are_retried() -> None:
    network = Coordinators(ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.none)
    assert initialize(network)
    assert len(network.sent) == 3


def test_initialization_retries_are_bounded() -> None:
    network = Coordinators(ErrorCode.coordinator_not_available)
    assert not initialize(network)
    assert len(network.sent) == MAX_ATTEMPTS


def test_another_error_fails_the_initialization_at_once() -> None:
    network = Coordinators(ErrorCode.fenced_state_epoch)
    assert not initialize(network)
    assert len(network.sent) == 1
