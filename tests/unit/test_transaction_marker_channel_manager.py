"""TransactionMarkerChannelManager without sockets: partitions grouped by their leader, local
markers appended at once, one WriteTxnMarkers per remote leader on the inter-broker listener,
retries that resolve the leader again until each partition is written or gone, and the
coordinator told only then (or never, when fenced or withdrawn)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable, Coroutine, Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from broker.network_client import DisconnectError, RequestTimeoutError
from broker.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
    TxnMarkerEntry,
    group_by_leader,
    write_txn_markers_request,
)

TopicPartition = tuple[str, int]
NODE = 1
LISTENER = "INTERNAL"
TOPIC = "t"


def port(broker_id: int) -> int:
    return 9000 + broker_id


def image(leaders: dict[int, int], *, brokers: Iterable[int] = (1, 2, 3), topic: bool = True) -> MetadataImage:
    """Brokers registered with a client and an inter-broker listener; TOPIC with partition -> leader."""
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=uuid.UUID(int=b),
            broker_epoch=1,
            end_points=(RegisteredEndpoint(name="PLAINTEXT", host="clients", port=8000 + b), RegisteredEndpoint(name=LISTENER, host="brokers", port=port(b))),
            fenced=False,
        )
        for b in brokers
    ]
    if topic:
        topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)
        records.append(TopicRecord(name=TOPIC, topic_id=topic_id))
        for index, leader in leaders.items():
            records.append(PartitionRecord(partition_id=index, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=leader, leader_epoch=0, partition_epoch=0))
    return apply_records(MetadataImage(), records)


def entry(partitions: Iterable[int], *, commit: bool = True, txn_partition: int = 0, coordinator_epoch: int = 5) -> TxnMarkerEntry:
    return TxnMarkerEntry("tx", txn_partition, 42, 3, coordinator_epoch, commit, frozenset((TOPIC, p) for p in partitions))


class FakeWriter:
    """This node's partitions; ``answers`` gives a partition's error codes in turn (0 once used up)."""

    def __init__(self, answers: dict[int, list[int]] | None = None) -> None:
        self.answers = answers or {}
        self.written: list[TopicPartition] = []
        self.calls: list[tuple[int, int, int, bool, list[TopicPartition]]] = []

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        partitions = list(partitions)
        self.calls.append((producer_id, producer_epoch, coordinator_epoch, commit, partitions))
        out = {}
        for tp in partitions:
            queue = self.answers.get(tp[1], [])
            out[tp] = queue.pop(0) if queue else 0
            if out[tp] == 0:
                self.written.append(tp)
        return out


Answer = Callable[[int, WriteTxnMarkersRequest], "WriteTxnMarkersResponse | Exception"]


def ok(broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    return answer_with(request, {})


def answer_with(request: WriteTxnMarkersRequest, codes: dict[int, int], drop: Iterable[int] = ()) -> WriteTxnMarkersResponse:
    """Every partition of the request answered 0 unless ``codes`` says otherwise; ``drop``: left out."""
    results = []
    for marker in request.markers:
        topics = tuple(
            WritableTxnMarkerTopicResult(
                name=t.name,
                partitions=tuple(WritableTxnMarkerPartitionResult(partition_index=p, error_code=ErrorCode(codes.get(p, 0))) for p in t.partition_indexes if p not in drop),
            )
            for t in marker.topics
        )
        results.append(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=tuple(results))


class FakeSender:
    """The network: ``answers`` is a list of answer functions used in turn (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers) or [ok]
        self.sent: list[tuple[tuple[str, int], WriteTxnMarkersRequest]] = []

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        await asyncio.sleep(0)
        self.sent.append((destination, body))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        result = answer(destination[1] - 9000, body)
        if isinstance(result, Exception):
            raise result
        return result

    def partitions_sent_to(self, broker_id: int) -> list[list[int]]:
        """The partitions of each request sent to ``broker_id``, in order."""
        return [[int(p) for t in r.markers[0].topics for p in t.partition_indexes] for (_, dest_port), r in self.sent if dest_port == port(broker_id)]


class FakeCompletion:
    def __init__(self) -> None:
        self.wanted = True
        self.written: list[TxnMarkerEntry] = []

    def markers_still_wanted(self, entry: TxnMarkerEntry) -> bool:
        return self.wanted

    def markers_written(self, entry: TxnMarkerEntry) -> None:
        self.written.append(entry)


class Harness:
    def __init__(self, metadata_image: MetadataImage, writer: FakeWriter | None = None, sender: FakeSender | None = None) -> None:
        self.metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "clients", 8001), image=metadata_image)
        self.writer = writer or FakeWriter()
        self.sender = sender or FakeSender()
        self.completion = FakeCompletion()
        self.markers = TransactionMarkerChannelManager(
            self.metadata, self.writer, self.sender, inter_broker_listener_name=LISTENER.lower(), retry_backoff_ms=1, retry_backoff_max_ms=2
        )

    def add(self, e: TxnMarkerEntry) -> None:
        self.markers.add_txn_markers_to_send(e, self.completion)

    async def until_done(self, timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while self.markers.pending_transactions:
                await asyncio.sleep(0.001)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


# -- grouping --------------------------------------------------------------------------------------------


def test_partitions_are_grouped_by_leader_at_its_inter_broker_endpoint() -> None:
    metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "clients", 8001), image=image({0: 1, 1: 2, 2: 2, 3: 3, 4: -1, 5: 4}))
    partitions = [(TOPIC, p) for p in range(7)] + [("gone", 0)]
    out = group_by_leader(metadata.image, NODE, partitions, lambda b: metadata.broker_endpoint(b, LISTENER))
    assert out.local == [(TOPIC, 0)]
    assert out.remote == {
        2: (BrokerEndpoint(2, "brokers", port(2)), [(TOPIC, 1), (TOPIC, 2)]),
        3: (BrokerEndpoint(3, "brokers", port(3)), [(TOPIC, 3)]),
    }
    # No leader, or a leader that is not registered: tried again later.
    assert out.unknown == [(TOPIC, 4), (TOPIC, 5)]
    assert out.deleted == [("gone", 0), (TOPIC, 6)]


@given(st.dictionaries(st.integers(0, 20), st.integers(-1, 5)), st.sets(st.integers(0, 25)))
def test_grouping_places_every_partition_exactly_once(leaders: dict[int, int], wanted: set[int]) -> None:
    metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "clients", 8001), image=image(leaders))
    out = group_by_leader(metadata.image, NODE, [(TOPIC, p) for p in wanted], lambda b: metadata.broker_endpoint(b, LISTENER))
    placed = out.local + out.unknown + out.deleted + [tp for _, tps in out.remote.values() for tp in tps]
    assert sorted(placed) == sorted((TOPIC, p) for p in wanted)
    for broker_id, (endpoint, tps) in out.remote.items():
        assert endpoint.port == port(broker_id) and all(leaders[p] == broker_id for _, p in tps)


def test_the_request_carries_the_marker() -> None:
    request = write_txn_markers_request(entry([]), [("b", 1), ("a", 2), ("b", 0)])
    [marker] = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.transaction_result) == (42, 3, 5, True)
    assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [("a", [2]), ("b", [0, 1])]


# -- sending ---------------------------------------------------------------------------------------------


def test_local_partitions_complete_at_once_without_the_network() -> None:
    async def test() -> None:
        h = Harness(image({0: 1, 1: 1}))
        h.add(entry([0, 1], commit=False))
        assert h.completion.written == [entry([0, 1], commit=False)]
        assert h.writer.calls == [(42, 3, 5, False, [(TOPIC, 0), (TOPIC, 1)])]
        assert h.sender.sent == [] and h.markers.pending_transactions == set()

    run(test)


def test_one_request_per_remote_leader_then_completion() -> None:
    async def test() -> None:
        h = Harness(image({0: 1, 1: 2, 2: 2, 3: 3}))
        h.add(entry([0, 1, 2, 3]))
        assert h.writer.written == [(TOPIC, 0)]
        assert h.completion.written == []  # the remote ones are still on their way
        await h.until_done()
        assert h.completion.written == [entry([0, 1, 2, 3])]
        assert sorted(dest for dest, _ in h.sender.sent) == [("brokers", port(2)), ("brokers", port(3))]
        assert h.sender.partitions_sent_to(2) == [[1, 2]] and h.sender.partitions_sent_to(3) == [[3]]

    run(test)


def test_not_leader_is_retried_at_the_new_leader() -> None:
    async def test() -> None:
        h = Harness(image({0: 2, 1: 2}))

        def moved(broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
            # Broker 2 wrote partition 0 but lost partition 1 to broker 3.
            h.metadata.image = image({0: 2, 1: 3})
            return answer_with(request, {1: ErrorCode.not_leader_or_follower})

        h.sender.answers = [moved, ok]
        h.add(entry([0, 1]))
        await h.until_done()
        assert h.sender.partitions_sent_to(2) == [[0, 1]]
        assert h.sender.partitions_sent_to(3) == [[1]]
        assert len(h.completion.written) == 1

    run(test)


@pytest.mark.parametrize(
    "failure",
    [
        lambda b, r: DisconnectError("connection refused"),
        lambda b, r: RequestTimeoutError("no answer"),
        lambda b, r: answer_with(r, {0: ErrorCode.request_timed_out}),
        lambda b, r: answer_with(r, {0: ErrorCode.not_enough_replicas}),
        lambda b, r: answer_with(r, {0: ErrorCode.coordinator_load_in_progress}),
        lambda b, r: answer_with(r, {0: ErrorCode.kafka_storage_error}),
        lambda b, r: answer_with(r, {}, drop=[0]),  # an answer that leaves the partition out
    ],
)
def test_retriable_failures_are_retried_until_written(failure: Answer) -> None:
    async def test() -> None:
        h = Harness(image({0: 2}), sender=FakeSender(failure, failure, ok))
        h.add(entry([0]))
        await h.until_done()
        assert h.sender.partitions_sent_to(2) == [[0], [0], [0]]
        assert len(h.completion.written) == 1

    run(test)


def test_unknown_partition_is_retried_while_the_topic_exists_and_dropped_once_deleted() -> None:
    async def test() -> None:
        h = Harness(image({0: 2}))
        sent_while_existing = 3

        def unknown(broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
            if len(h.sender.sent) == sent_while_existing:
                h.metadata.image = image({}, topic=False)  # the topic is deleted
            return answer_with(request, {0: ErrorCode.unknown_topic_or_partition})

        h.sender.answers = [unknown]
        h.add(entry([0]))
        await h.until_done()
        assert len(h.sender.sent) == sent_while_existing
        assert h.completion.written == [entry([0])]

    run(test)


def test_a_partition_with_no_leader_waits_for_one() -> None:
    async def test() -> None:
        h = Harness(image({0: -1, 1: 4}))  # broker 4 is not registered yet
        h.add(entry([0, 1]))
        await asyncio.sleep(0.02)
        assert h.sender.sent == [] and h.completion.written == []
        h.metadata.image = image({0: 3, 1: 4}, brokers=(1, 2, 3, 4))
        await h.until_done()
        assert h.sender.partitions_sent_to(3) == [[0]] and h.sender.partitions_sent_to(4) == [[1]]
        assert len(h.completion.written) == 1

    run(test)


class ReplicatingWriter(FakeWriter):
    """Markers appended here wait for the test to say whether the followers copied them."""

    def __init__(self) -> None:
        super().__init__()
        self.replication: list[asyncio.Future[int]] = []

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:  # type: ignore[override]
        answers = super().write_markers(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
        out: dict[TopicPartition, Any] = {}
        for tp in answers:
            self.replication.append(asyncio.get_running_loop().create_future())
            out[tp] = self.replication[-1]
        return out


def test_a_local_marker_counts_once_replicated_and_is_written_again_when_replication_fails() -> None:
    async def test() -> None:
        h = Harness(image({0: 1}), writer=ReplicatingWriter())
        h.add(entry([0]))
        assert h.completion.written == []  # appended, not yet on the followers
        await eventually(lambda: len(h.writer.replication) == 1)
        h.writer.replication[0].set_result(ErrorCode.not_enough_replicas_after_append)
        await eventually(lambda: len(h.writer.replication) == 2)  # the ISR shrank meanwhile: written again
        assert h.completion.written == []
        h.writer.replication[1].set_result(0)
        await h.until_done()
        assert h.completion.written == [entry([0])]

    run(test)


def test_local_failures_are_retried_locally() -> None:
    async def test() -> None:
        h = Harness(image({0: 1}), writer=FakeWriter({0: [ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas]}))
        h.add(entry([0]))
        assert h.completion.written == []
        await h.until_done()
        assert len(h.writer.calls) == 3 and h.writer.written == [(TOPIC, 0)]
        assert len(h.completion.written) == 1

    run(test)


@pytest.mark.parametrize("code", [ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced])
def test_a_fenced_marker_ends_the_attempt_without_completion(code: ErrorCode) -> None:
    async def test() -> None:
        h = Harness(image({0: 2, 1: 2}), sender=FakeSender(lambda b, r: answer_with(r, {1: code})))
        h.add(entry([0, 1]))
        await h.until_done()
        await asyncio.sleep(0.01)
        assert len(h.sender.sent) == 1 and h.completion.written == []

    run(test)


def test_a_fenced_local_marker_ends_at_once() -> None:
    async def test() -> None:
        h = Harness(image({0: 1, 1: 2}), writer=FakeWriter({0: [ErrorCode.transaction_coordinator_fenced]}))
        h.add(entry([0, 1]))
        assert h.markers.pending_transactions == set()
        await asyncio.sleep(0.01)
        assert h.sender.sent == [] and h.completion.written == []

    run(test)


def test_a_partition_that_needs_no_marker_counts_as_written() -> None:
    async def test() -> None:
        h = Harness(image({0: 2}), sender=FakeSender(lambda b, r: answer_with(r, {0: ErrorCode.unsupported_for_message_format})))
        h.add(entry([0]))
        await h.until_done()
        assert len(h.completion.written) == 1

    run(test)


def test_markers_no_longer_wanted_are_not_completed() -> None:
    async def test() -> None:
        h = Harness(image({0: 2}), sender=FakeSender(lambda b, r: DisconnectError("down")))
        h.add(entry([0]))
        await eventually(lambda: len(h.sender.sent) >= 2)
        h.completion.wanted = False  # the transaction moved on (a new coordinator epoch, say)
        await h.until_done()
        sent = len(h.sender.sent)
        await asyncio.sleep(0.01)
        assert len(h.sender.sent) == sent and h.completion.written == []

    run(test)


def test_the_same_markers_asked_twice_are_sent_once_and_new_ones_replace_them() -> None:
    async def test() -> None:
        h = Harness(image({0: 2}), sender=FakeSender(lambda b, r: DisconnectError("down")))
        h.add(entry([0]))
        h.add(entry([0]))
        await eventually(lambda: len(h.sender.sent) >= 1)
        await asyncio.sleep(0.005)
        first_round = [r.markers[0].coordinator_epoch for _, r in h.sender.sent]
        assert set(first_round) == {5}
        h.sender.answers = [ok]
        h.add(entry([0], coordinator_epoch=6))
        await h.until_done()
        assert h.completion.written == [entry([0], coordinator_epoch=6)]
        assert h.sender.sent[-1][1].markers[0].coordinator_epoch == 6

    run(test)


def test_resigning_a_txn_partition_withdraws_only_its_markers() -> None:
    async def test() -> None:
        h = Harness(image({0: 2}), sender=FakeSender(lambda b, r: DisconnectError("down")))
        h.markers.add_txn_markers_to_send(TxnMarkerEntry("a", 7, 1, 0, 5, True, frozenset({(TOPIC, 0)})), h.completion)
        h.markers.add_txn_markers_to_send(TxnMarkerEntry("b", 8, 2, 0, 5, True, frozenset({(TOPIC, 0)})), h.completion)
        h.markers.remove_markers_for_txn_topic_partition(7)
        assert h.markers.pending_transactions == {"b"}
        h.markers.shutdown()
        assert h.markers.pending_transactions == set()
        await asyncio.sleep(0.01)
        assert h.completion.written == []

    run(test)
