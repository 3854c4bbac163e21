"""Issue 34, the sans-IO part: what the versions raised to Kafka 4.4's tops change, handler by handler.

Each expectation was checked against a Kafka 4.4 node with the same raw request (see
tests/integration/test_kafka44_versions.py for the ones run over TCP).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.cluster import DescribeClusterHandler
from broker.handlers.transactions import ListTransactionsHandler
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import MetadataRecord, RegisterBrokerRecord
from broker.network import ClientInfo
from broker.transaction.transaction_coordinator import TransactionListing
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from protocol.messages import encode_body
from storage.producer_state_manager import InvalidProducerEpochError, ProducerStateEntry, check_tv2_marker_epoch
from tests.unit.test_kafka_raft_client import Quorum, add_voter_request, ask


def context(api_key: ApiKey, version: int, listener: str = "PLAINTEXT") -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1", listener))


def entity(api_key: ApiKey, version: int, nested_name: str | None = None, /, **fields: Any) -> Any:
    schema = request_schema(api_key, version)
    return build(schema if nested_name is None else nested(schema, nested_name), **fields)


# -- DescribeCluster v2 (KIP-1073) -------------------------------------------------------------------------


def cluster_with_a_fenced_broker() -> MetadataCache:
    def register(broker_id: int, fenced: bool, rack: str | None = None) -> RegisterBrokerRecord:
        endpoints = (RegisteredEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9090 + broker_id), RegisteredEndpoint(name="INTERNAL", host="10.0.0.1", port=19090 + broker_id))
        return RegisterBrokerRecord(broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=1, end_points=endpoints, fenced=fenced, rack=rack)

    records: list[MetadataRecord] = [register(3, False), register(2, True, "r2"), register(1, False)]
    return MetadataCache(1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9091), apply_records(MetadataImage(), records))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_lists_fenced_brokers_only_when_asked_at_v2(version: int) -> None:
    handler = DescribeClusterHandler(cluster_with_a_fenced_broker())
    fields: dict[str, Any] = {"include_cluster_authorized_operations": False, "endpoint_type": 1}

    def brokers(include_fenced: bool, listener: str = "PLAINTEXT") -> list[tuple[Any, ...]]:
        answer = handler(context(ApiKey.DESCRIBE_CLUSTER, version, listener), entity(ApiKey.DESCRIBE_CLUSTER, version, **fields, include_fenced_brokers=include_fenced))
        encode_body(answer)
        assert answer.error_code == ErrorCode.none
        return [(b.broker_id, b.port, b.rack, getattr(b, "is_fenced", None)) for b in answer.brokers]

    unfenced = [(1, 9091, None, False), (3, 9093, None, False)] if version >= 2 else [(1, 9091, None, None), (3, 9093, None, None)]
    assert brokers(False) == unfenced
    if version >= 2:
        # Kafka lists every registered broker by id, each at its endpoint on the client's listener.
        assert brokers(True) == [(1, 9091, None, False), (2, 9092, "r2", True), (3, 9093, None, False)]
        assert [port for _, port, _, _ in brokers(True, "INTERNAL")] == [19091, 19092, 19093]
    else:
        assert brokers(True) == unfenced  # older versions cannot ask


@pytest.mark.parametrize(
    ("endpoint_type", "error", "message"),
    [
        (2, ErrorCode.mismatched_endpoint_type, "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"),
        (3, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 3"),
        (0, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 0"),
    ],
)
def test_describe_cluster_refuses_other_endpoint_types_as_kafka(endpoint_type: int, error: ErrorCode, message: str) -> None:
    handler = DescribeClusterHandler(cluster_with_a_fenced_broker())
    body = entity(ApiKey.DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False, endpoint_type=endpoint_type, include_fenced_brokers=True)
    answer = handler(context(ApiKey.DESCRIBE_CLUSTER, 2), body)
    encode_body(answer)
    # Only the error and its message: Kafka leaves the rest at their defaults.
    assert (answer.error_code, answer.error_message, answer.endpoint_type, answer.cluster_id, answer.controller_id, answer.brokers) == (error, message, 1, "", -1, ())


# -- ListTransactions v2 (KIP-1152) ------------------------------------------------------------------------


class Transactions:
    def __init__(self, *ids: str) -> None:
        self.ids = ids

    def list_transactions(self, states: Any, producer_ids: Any, duration_ms: int) -> tuple[int, list[str], list[TransactionListing]]:
        unknown = [s for s in states if s != "Empty"]
        return 0, unknown, [TransactionListing(t, i, "Empty") for i, t in enumerate(self.ids)]


@pytest.mark.parametrize(
    ("pattern", "listed"),
    [
        (None, ["alpha-1", "alpha2-1", "beta-1"]),
        ("", ["alpha-1", "alpha2-1", "beta-1"]),
        ("alpha.*", ["alpha-1", "alpha2-1"]),
        ("alpha", []),  # the whole id must match, as Java's Matcher.matches
        ("(?i)ALPHA-.*", ["alpha-1"]),
        ("(alpha|beta)-1", ["alpha-1", "beta-1"]),
    ],
)
def test_list_transactions_v2_filters_by_a_regular_expression(pattern: str | None, listed: list[str]) -> None:
    handler = ListTransactionsHandler(Transactions("alpha-1", "alpha2-1", "beta-1"))  # type: ignore[arg-type]
    body = entity(ApiKey.LIST_TRANSACTIONS, 2, state_filters=(), producer_id_filters=(), duration_filter=-1, transactional_id_pattern=pattern)
    answer = handler(context(ApiKey.LIST_TRANSACTIONS, 2), body)
    encode_body(answer)
    assert answer.error_code == ErrorCode.none
    assert sorted(t.transactional_id for t in answer.transaction_states) == listed


def test_list_transactions_v2_answers_an_invalid_pattern_with_invalid_regular_expression_alone() -> None:
    handler = ListTransactionsHandler(Transactions("alpha-1"))  # type: ignore[arg-type]
    body = entity(ApiKey.LIST_TRANSACTIONS, 2, state_filters=("Bogus",), producer_id_filters=(), duration_filter=-1, transactional_id_pattern="[")
    answer = handler(context(ApiKey.LIST_TRANSACTIONS, 2), body)
    encode_body(answer)
    assert (answer.error_code, answer.unknown_state_filters, answer.transaction_states) == (ErrorCode.invalid_regular_expression, (), ())


# -- WriteTxnMarkers v2 (KIP-1228) -------------------------------------------------------------------------


def entry(epoch: int, open_txn: bool) -> ProducerStateEntry:
    return ProducerStateEntry(producer_id=7, producer_epoch=epoch, current_txn_first_offset=5 if open_txn else -1)


@pytest.mark.parametrize(
    ("current", "marker_epoch", "refused"),
    [
        (None, 0, False),  # a producer the partition never saw
        (entry(3, open_txn=True), 4, False),  # the epoch the end bumped to
        (entry(3, open_txn=True), 3, True),  # a late marker of the transaction before
        (entry(3, open_txn=True), 2, True),
        (entry(3, open_txn=False), 3, False),  # no transaction open: a retried marker
        (entry(3, open_txn=False), 2, True),
        (entry(32767, open_txn=True), 32767, False),  # the epoch can bump no further
    ],
)
def test_a_tv2_marker_must_carry_an_epoch_above_the_producers(current: ProducerStateEntry | None, marker_epoch: int, refused: bool) -> None:
    if refused:
        with pytest.raises(InvalidProducerEpochError) as caught:
            check_tv2_marker_epoch("t-0", 7, current, marker_epoch)
        assert caught.value.error_code == ErrorCode.invalid_producer_epoch
    else:
        check_tv2_marker_epoch("t-0", 7, current, marker_epoch)


# -- AddRaftVoter v1 ---------------------------------------------------------------------------------------


def add_voter_v1(node_id: int, ack_when_committed: bool) -> Any:
    from kio.schema.add_raft_voter.v1.request import AddRaftVoterRequest

    v0 = add_voter_request(node_id)
    return AddRaftVoterRequest(
        cluster_id=v0.cluster_id,
        timeout=datetime.timedelta(seconds=2),
        voter_id=v0.voter_id,
        voter_directory_id=v0.voter_directory_id,
        listeners=tuple(build(nested(AddRaftVoterRequest, "Listener"), name=e.name, host=e.host, port=e.port) for e in v0.listeners),
        ack_when_committed=ack_when_committed,
    )


@pytest.mark.parametrize("ack_when_committed", [True, False])
def test_add_raft_voter_v1_answers_before_the_commit_when_not_asked_to_wait(ack_when_committed: bool) -> None:
    quorum = Quorum([1, 2, 3], dynamic=True)
    leader = quorum.elect()
    quorum.run(200)
    new = quorum.add_node(4)
    quorum.run_until(lambda: new.client.high_watermark == leader.client.high_watermark)
    quorum.run(600)  # a fetch or two while caught up
    # The other old voters are gone: four voters need three, so the new set cannot commit until
    # they return.
    others = [n for n in quorum.nodes.values() if n is not leader and n is not new]
    for other in others:
        quorum.crash(other.node_id)
    handle = quorum.request(leader, add_voter_v1(4, ack_when_committed))
    quorum.run(1000)
    assert leader.client.voters.ids() == {1, 2, 3, 4}
    if ack_when_committed:
        assert handle not in quorum.admin_answers  # waits for the commit, and times out without it
        quorum.run_until(lambda: handle in quorum.admin_answers, 5000)
        assert quorum.admin_answers.pop(handle).error_code == ErrorCode.request_timed_out
    else:
        answer = quorum.admin_answers.pop(handle)
        assert answer.error_code == ErrorCode.none and type(answer).__version__ == 1
        # Still one change at a time: the next waits for this one to commit.
        assert ask(quorum, leader, add_voter_request(5)).error_code == ErrorCode.request_timed_out
    for other in others:
        quorum.restart(other.node_id)
    quorum.run_until(lambda: new.client.quorum_state.is_voter() and leader.client.high_watermark == new.client.high_watermark)
    assert all(answer_handle != handle for answer_handle in quorum.admin_answers)  # answered once only


def test_add_raft_voter_on_a_static_quorum_is_refused_in_kafkas_words() -> None:
    quorum = Quorum([1, 2, 3])
    leader = quorum.elect()
    answer = ask(quorum, leader, add_voter_v1(4, False))
    assert (answer.error_code, answer.error_message) == (ErrorCode.unsupported_version, "Cluster doesn't support adding voter because the kraft.version feature is 0")


def test_a_controller_describes_itself_at_v2_unfenced_and_refuses_brokers_in_kafkas_shape() -> None:
    import asyncio

    from tests.unit.quorum_controller_fakes import settle
    from tests.unit.test_controller_apis import Ctx, controller_registration, request, setup

    async def scenario() -> None:
        quorum, _, apis = setup(1, 2)
        quorum.elect(2)
        await settle()
        for controller_id in (1, 2, 3):
            await apis[2].handle(controller_registration(controller_id))
        handler = apis[1].handlers()[ApiKey.DESCRIBE_CLUSTER]
        body = request(ApiKey.DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=True)
        answer = await handler(Ctx(2), body)  # type: ignore[arg-type]
        encode_body(answer)
        assert answer.error_code == ErrorCode.none and answer.endpoint_type == 2 and answer.controller_id == 2
        assert [(b.broker_id, b.is_fenced) for b in answer.brokers] == [(1, False), (2, False), (3, False)]
        as_broker = request(ApiKey.DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False)
        refused = await handler(Ctx(2), as_broker)  # type: ignore[arg-type]
        encode_body(refused)
        assert (refused.error_code, refused.endpoint_type, refused.cluster_id, refused.controller_id, refused.brokers) == (ErrorCode.mismatched_endpoint_type, 1, "", -1, ())

    asyncio.run(scenario())
