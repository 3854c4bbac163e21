"""ElectLeaders on the controller: election types on the wire, QuorumController.elect_leaders'
answers per topic, and every version at the controller listener (NOT_CONTROLLER while inactive,
INVALID_REQUEST for an unknown election type, the forwarding timeout's answer)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.controller.controller_apis import ControllerApis
from broker.controller.controller_result import ApiError
from broker.controller.partition_change_builder import Election
from broker.controller.quorum_controller import NotControllerError
from broker.controller.replication_control_manager import election_for_type
from broker.controller_channel import is_not_controller
from broker.handlers.forwarding import error_response
from protocol.api_keys import CONTROLLER_APIS, SUPPORTED_APIS, ApiKey, request_schema
from protocol.entities import build, nested
from protocol.messages import encode_body
from tests.unit.preferred_leaders_fakes import balanced, failed_over, partitions_of, rejoin, single
from tests.unit.quorum_controller_fakes import CLUSTER_ID, Clock, FakeQuorum, Node, run
from tests.unit.test_quorum_controller import topic

ELECT_VERSIONS = range(CONTROLLER_APIS[ApiKey.ELECT_LEADERS].min_version, CONTROLLER_APIS[ApiKey.ELECT_LEADERS].max_version + 1)


def elect_request(version: int, topics: dict[str, list[int]] | None, election_type: int = 0) -> Any:
    schema = request_schema(ApiKey.ELECT_LEADERS, version)
    topic_cls = nested(schema, "TopicPartitions")
    listed = None if topics is None else tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in topics.items())
    return build(schema, election_type=election_type, topic_partitions=listed, timeout=datetime.timedelta(seconds=5))


def results_of(response: Any) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
    return [(t.topic, [(p.partition_id, p.error_code, p.error_message) for p in t.partition_result]) for t in response.replica_election_results]


def test_election_types_on_the_wire() -> None:
    assert (election_for_type(0), election_for_type(1)) == (Election.PREFERRED, Election.UNCLEAN)
    with pytest.raises(ApiError) as refused:
        election_for_type(2)
    assert (refused.value.error_code, refused.value.message) == (ErrorCode.invalid_request, "Unknown election type 2")


def test_elect_leaders_is_served_to_clients_and_to_forwarding_brokers() -> None:
    assert SUPPORTED_APIS[ApiKey.ELECT_LEADERS] == CONTROLLER_APIS[ApiKey.ELECT_LEADERS]
    assert (CONTROLLER_APIS[ApiKey.ELECT_LEADERS].min_version, CONTROLLER_APIS[ApiKey.ELECT_LEADERS].max_version) == (0, 2)


# --- QuorumController ---------------------------------------------------------------


def test_answers_per_requested_topic_or_for_every_topic() -> None:
    async def scenario() -> None:
        quorum, node, _ = single()
        quorum.elect(1)
        c = node.controller
        epochs, preferred = await failed_over(node)
        [other] = await c.create_topics([topic("quiet", 1)], validate_only=False)
        assert other.error_code == 0
        moved = next(i for i, p in enumerate(partitions_of(node)) if p.leader != preferred[i])
        answer = await c.elect_leaders(0, [("t", [moved, 9]), ("nope", [0]), ("quiet", [])])
        assert [(name, [(r.partition, r.error_code) for r in results]) for name, results in answer] == [
            ("t", [(moved, ErrorCode.preferred_leader_not_available), (9, ErrorCode.unknown_topic_or_partition)]),
            ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
            ("quiet", []),
        ]
        await rejoin(node, epochs, 1)
        answer = await c.elect_leaders(0, None)
        # Every topic, but only the partitions that needed an election.
        assert [(name, [(r.partition, r.error_code) for r in results]) for name, results in answer] == [("quiet", []), ("t", [(moved, ErrorCode.none)])]
        assert balanced(node, preferred)
        assert await c.elect_leaders(1, None) == [("quiet", []), ("t", [])]  # unclean: every partition has a leader
        with pytest.raises(ApiError):
            await c.elect_leaders(7, [("t", [0])])

    run(scenario())


def test_on_an_inactive_controller() -> None:
    async def scenario() -> None:
        _, node, _ = single()
        assert await node.controller.elect_leaders(9, []) == []  # nothing asked: answered at once, as Kafka
        with pytest.raises(NotControllerError):
            await node.controller.elect_leaders(9, [("t", [0])])  # NOT_CONTROLLER before the election type is looked at

    run(scenario())


# --- the controller listener -----------------------------------------------------------


@pytest.mark.parametrize("version", ELECT_VERSIONS)
def test_every_version_elects_and_answers(version: int) -> None:
    async def scenario() -> None:
        quorum, node, _ = single()
        apis = ControllerApis(node.controller, node.config, CLUSTER_ID, node.raft)
        quorum.elect(1)
        epochs, preferred = await failed_over(node)
        await rejoin(node, epochs, 1)
        moved = [i for i, p in enumerate(partitions_of(node)) if p.leader != preferred[i]]
        response = await apis.handle(elect_request(version, {"t": [*moved, 5], "gone": [1]}))
        encode_body(response)
        assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none
        assert results_of(response) == [
            ("t", [*((i, ErrorCode.none, None) for i in moved), (5, ErrorCode.unknown_topic_or_partition, "No such partition as t-5")]),
            ("gone", [(1, ErrorCode.unknown_topic_or_partition, "No such topic as gone")]),
        ]
        assert balanced(node, preferred)
        again = await apis.handle(elect_request(version, {"t": [moved[0]]}))
        assert results_of(again) == [("t", [(moved[0], ErrorCode.election_not_needed, "Leader election not needed for topic partition.")])]
        everything = await apis.handle(elect_request(version, None))
        assert results_of(everything) == [("t", [])]
        nothing = await apis.handle(elect_request(version, {}))
        assert results_of(nothing) == []

    run(scenario())


@pytest.mark.parametrize("version", [1, 2])
def test_an_unknown_election_type_fails_the_request(version: int) -> None:
    async def scenario() -> None:
        quorum, node, _ = single()
        apis = ControllerApis(node.controller, node.config, CLUSTER_ID, node.raft)
        quorum.elect(1)
        response = await apis.handle(elect_request(version, {"t": [0, 1]}, election_type=3))
        encode_body(response)
        assert response.error_code == ErrorCode.invalid_request
        message = "Unknown election type 3"
        assert results_of(response) == [("t", [(0, ErrorCode.invalid_request, message), (1, ErrorCode.invalid_request, message)])]

    run(scenario())


@pytest.mark.parametrize("version", ELECT_VERSIONS)
def test_not_controller_while_inactive(version: int) -> None:
    async def scenario() -> None:
        quorum = FakeQuorum()
        nodes = {n: Node(quorum, n, Clock()) for n in (1, 2)}
        apis = ControllerApis(nodes[1].controller, nodes[1].config, CLUSTER_ID, nodes[1].raft)
        quorum.elect(2)
        response = await apis.handle(elect_request(version, {"t": [0, 1]}))
        encode_body(response)
        assert [code for _, results in results_of(response) for _, code, _ in results] == [ErrorCode.not_controller] * 2
        # What makes a broker's ControllerChannel look for the active controller again; v0 has no top-level code.
        assert is_not_controller(response)
        if version >= 1:
            assert response.error_code == ErrorCode.not_controller

    run(scenario())


@pytest.mark.parametrize("version", ELECT_VERSIONS)
def test_a_forwarded_election_that_times_out(version: int) -> None:
    listed = error_response(ApiKey.ELECT_LEADERS, version, elect_request(version, {"t": [2]}), ErrorCode.request_timed_out, "no controller")
    assert results_of(listed) == [("t", [(2, ErrorCode.request_timed_out, "no controller")])]
    everything = error_response(ApiKey.ELECT_LEADERS, version, elect_request(version, None), ErrorCode.request_timed_out, "no controller")
    assert results_of(everything) == []
    for response in (listed, everything):
        encode_body(response)
        assert getattr(response, "error_code", ErrorCode.request_timed_out) == ErrorCode.request_timed_out
