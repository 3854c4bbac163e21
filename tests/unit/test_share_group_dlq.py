"""KIP-1191's share group dead-letter queue: which records go ARCHIVING for it (SharePartition) and
how a loaded ARCHIVING state resumes, how they are checked and written (ShareGroupDLQManager with a
fake network), and SharePartitionManager handing them over once ARCHIVING is persisted and
archiving them once their write is done. The states are Kafka 4.4's (kafka.server.share.SharePartition
recordStateWithDlq, initiateDLQAndArchive, maybeResumeDlqArchiving). The header names, values and causes are those
Kafka 4.4's ShareGroupDLQStateManager writes (checked against a Kafka 4.4 node in
tests/integration/test_share_group_dlq.py)."""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import TOPIC_RESOURCE
from broker.network_client import RequestTimeoutError
from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.acquired_records import FetchedBatch
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import RecordState
from broker.share.share_group_dlq import (
    DLQCause,
    DlqBatch,
    ShareGroupDLQRecordParameter,
    dlq_batches,
    dlq_partition,
    for_archiving,
    validate_dlq_topic,
)
from broker.share.share_group_dlq_manager import DLQBrokerSettings, ShareGroupDLQManager
from broker.share.share_partition import SharePartition, SharePartitionConfig, ShareAutoOffsetReset
from broker.share.share_partition_manager import SharePartitionManager
from broker.share_coordinator.state_batch_combiner import combine_state_batches
from protocol.record_batch import iter_headers
from protocol.records import iter_batches, iter_records
from tests.unit.test_share_partition_manager import EARLIEST, KEY, PARAMS, TIP, TOPIC_ID, FakeLog, FakePersister, run

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
ARCHIVED, ARCHIVING, ACKNOWLEDGED, AVAILABLE = RecordState.ARCHIVED, RecordState.ARCHIVING, RecordState.ACKNOWLEDGED, RecordState.AVAILABLE
REJECTED, EXCEEDED = DLQCause.CLIENT_REJECT, DLQCause.DELIVERY_COUNT_EXCEEDED


def param(first: int, last: int, count: int = 1, cause: DLQCause = DLQCause.CLIENT_REJECT, partition: int = 0) -> ShareGroupDLQRecordParameter:
    return ShareGroupDLQRecordParameter("g", TOPIC_ID, "t", partition, first, last, count, cause)


# --- which records go ARCHIVING, and back from a persisted state ----------------------------------------


def share_partition(limit: int = 2, persisted: SharePartitionStateData | None = None) -> SharePartition:
    sp = SharePartition("g", TOPIC_ID, 0, SharePartitionConfig(delivery_count_limit=limit, auto_offset_reset=ShareAutoOffsetReset.EARLIEST))
    assert sp.initialize(persisted, earliest_offset=0, latest_offset=0) is ErrorCode.none
    return sp


def acquire(sp: SharePartition, first: int, last: int, now_ms: int = 0) -> list[tuple[int, int, int]]:
    got = sp.acquire("a", [FetchedBatch(first, last)], 500, now_ms)
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records]


def states(sp: SharePartition, first: int, last: int) -> list[tuple[RecordState, int] | None]:
    found = [sp.record_state(o) for o in range(first, last + 1)]
    return [None if s is None else (s.state, s.delivery_count) for s in found]


def written(update: Any) -> list[tuple[int, int, RecordState, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in update.write.state_batches]


def test_a_reject_goes_archiving_with_a_dlq_and_archived_without() -> None:
    acks = [ShareAcknowledgementBatch(0, 3, (REJECT, ACCEPT, RELEASE, GAP))]
    plain = share_partition()
    acquire(plain, 0, 3)
    update = plain.acknowledge("a", acks)
    assert written(update) == [(0, 0, ARCHIVED, 1), (1, 1, ACKNOWLEDGED, 1), (2, 2, AVAILABLE, 1), (3, 3, ARCHIVED, 1)]
    assert update.archiving == () and plain.start_offset == 2

    sp = share_partition()
    acquire(sp, 0, 3)
    update = sp.acknowledge("a", acks, dlq=True)
    # A GAP has no record to write: ARCHIVED at once. The ARCHIVING record holds the start offset.
    assert written(update) == [(0, 0, ARCHIVING, 1), (1, 1, ACKNOWLEDGED, 1), (2, 2, AVAILABLE, 1), (3, 3, ARCHIVED, 1)]
    assert update.archiving == (DlqBatch(0, 0, 1, REJECTED),)
    assert sp.start_offset == 0 and update.write.start_offset == 0
    # Never delivered again, nor acknowledged again.
    assert sp.next_fetch_offset() == 2
    assert acquire(sp, 0, 3) == [(2, 2, 2)]
    assert sp.acknowledge("a", [ShareAcknowledgementBatch(0, 0, (ACCEPT,))], dlq=True).error is ErrorCode.invalid_record_state
    # The DLQ write done: ARCHIVED, persisted, and the start offset moves past it.
    done = sp.complete_archiving(0, 0)
    assert written(done) == [(0, 0, ARCHIVED, 1)] and done.archiving == ()
    assert sp.start_offset == 2 == done.write.start_offset
    assert sp.complete_archiving(0, 0).write is None


def test_the_delivery_count_limit_goes_archiving_on_release_expiry_and_leaving() -> None:
    sp = share_partition(limit=1)
    acquire(sp, 0, 5)
    update = sp.acknowledge("a", [ShareAcknowledgementBatch(0, 1, (RELEASE,))], dlq=True)
    assert written(update) == [(0, 1, ARCHIVING, 1)] and update.archiving == (DlqBatch(0, 1, 1, EXCEEDED),)
    update = sp.release_acquired_records("a", dlq=True)
    assert written(update) == [(2, 5, ARCHIVING, 1)] and update.archiving == (DlqBatch(2, 5, 1, EXCEEDED),)

    sp = share_partition(limit=1)
    acquire(sp, 0, 1, now_ms=0)
    update = sp.expire_acquisition_locks(10**9, dlq=True)
    assert written(update) == [(0, 1, ARCHIVING, 1)] and update.archiving == (DlqBatch(0, 1, 1, EXCEEDED),)
    # Completing part of a batch splits it; the rest stays ARCHIVING and holds the start offset.
    assert written(sp.complete_archiving(1, 1)) == [(1, 1, ARCHIVED, 1)]
    assert states(sp, 0, 1) == [(ARCHIVING, 1), (ARCHIVED, 1)] and sp.start_offset == 0
    assert written(sp.complete_archiving(0, 0)) == [(0, 0, ARCHIVED, 1)] and sp.start_offset == 2


def test_a_loaded_archiving_state_is_written_again() -> None:
    sp = share_partition()
    acquire(sp, 0, 4)
    sp.acknowledge("a", [ShareAcknowledgementBatch(0, 0, (ACCEPT,)), ShareAcknowledgementBatch(1, 1, (REJECT,)), ShareAcknowledgementBatch(2, 4, (RELEASE,))], dlq=True)
    acquire(sp, 2, 4)
    sp.acknowledge("a", [ShareAcknowledgementBatch(2, 2, (RELEASE,)), ShareAcknowledgementBatch(3, 4, (ACCEPT,))], dlq=True)
    persisted = sp.persisted_state()
    # WriteShareGroupState carries ARCHIVING as its id, 3.
    assert [(b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count) for b in persisted.state_batches] == [
        (1, 1, 3, 1), (2, 2, 3, 2), (3, 4, 2, 2)
    ]
    # The next leader: the cause is not persisted, the delivery count tells it (limit 2).
    loaded = share_partition(persisted=persisted)
    assert loaded.archiving_batches() == (DlqBatch(1, 1, 1, REJECTED), DlqBatch(2, 2, 2, EXCEEDED))
    assert loaded.start_offset == 1 and loaded.next_fetch_offset() == 5
    assert written(loaded.complete_archiving(1, 2)) == [(1, 1, ARCHIVED, 1), (2, 2, ARCHIVED, 2)]
    assert loaded.start_offset == 5 and loaded.archiving_batches() == ()


def test_archiving_batches_of_split_batches_coalesce() -> None:
    persisted = SharePartitionStateData(0, 1, 0, (PersisterStateBatch(0, 3, ARCHIVING, 1), PersisterStateBatch(4, 4, AVAILABLE, 1)))
    sp = share_partition(persisted=persisted)
    assert sp.archiving_batches() == (DlqBatch(0, 3, 1, REJECTED),)
    sp.complete_archiving(1, 1)
    assert sp.archiving_batches() == (DlqBatch(0, 0, 1, REJECTED), DlqBatch(2, 3, 1, REJECTED))


def test_archiving_is_not_finished_and_archived_replaces_it_at_the_coordinator() -> None:
    assert RecordState(3) is ARCHIVING and not ARCHIVING.is_terminal and ARCHIVED.is_terminal
    # The share coordinator keeps the ARCHIVED written after the DLQ write over the ARCHIVING
    # before it (same delivery count: the higher state wins), whatever their order.
    held = [PersisterStateBatch(0, 3, ARCHIVING, 1)]
    assert combine_state_batches(held, [PersisterStateBatch(1, 2, ARCHIVED, 1)], 0) == [
        PersisterStateBatch(0, 0, ARCHIVING, 1), PersisterStateBatch(1, 2, ARCHIVED, 1), PersisterStateBatch(3, 3, ARCHIVING, 1)
    ]
    assert combine_state_batches([PersisterStateBatch(1, 2, ARCHIVED, 1)], held, 0)[1] == PersisterStateBatch(1, 2, ARCHIVED, 1)


def test_for_archiving_names_the_share_partition() -> None:
    assert for_archiving("g", TOPIC_ID, "t", 0, [DlqBatch(0, 1, 2, REJECTED), DlqBatch(3, 3, 5, EXCEEDED)]) == [param(0, 1, 2, REJECTED), param(3, 3, 5, EXCEEDED)]


# --- whether the DLQ topic may take them ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "prefix", "exists", "enabled", "auto", "problem"),
    [
        ("dlq.x", "dlq.", True, True, False, None),
        ("anything", "", True, True, False, None),
        ("dlq.new", "dlq.", False, False, True, None),
        (None, "dlq.", False, False, True, "Configured DLQ topic name in share group: g is empty."),
        ("__x", "", True, True, True, "Configured DLQ topic name in share group: g cannot start with __, topic: __x."),
        ("dlq.x", "dlq.", True, False, True, "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.x."),
        ("dlq.x", "dlq.", False, False, False, "DLQ topic does not exist and auto create is disabled on cluster for share group: g, topic: dlq.x."),
        ("other", "dlq.", True, True, False, "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: g, topic: other, prefix: dlq.."),
    ],
)
def test_the_dlq_topic_is_checked_as_kafka_does(topic: str | None, prefix: str, exists: bool, enabled: bool, auto: bool, problem: str | None) -> None:
    assert validate_dlq_topic("g", topic, prefix, exists, enabled, auto) == problem


def test_a_share_partition_writes_to_its_partition_modulo_the_dlq_partitions() -> None:
    assert [dlq_partition(p, 3) for p in range(7)] == [0, 1, 2, 0, 1, 2, 0]


# --- the records ---------------------------------------------------------------------------------------


def records_of(batches: list[bytes]) -> list[Any]:
    return [r for b in batches for h, view in iter_batches(b) for r in iter_records(view, h)]


def test_one_record_per_offset_with_kafkas_headers() -> None:
    batches = dlq_batches(param(5, 6, 2, DLQCause.DELIVERY_COUNT_EXCEEDED), 1234, 1 << 20)
    assert len(batches) == 1 and next(iter_headers(batches[0])).compression == 0
    records = records_of(batches)
    assert [(r.key, r.value, r.timestamp) for r in records] == [(None, None, 1234), (None, None, 1234)]
    assert list(records[1].headers) == [
        ("__dlq.errors.topic", b"t"),
        ("__dlq.errors.partition", b"0"),
        ("__dlq.errors.offset", b"6"),
        ("__dlq.errors.group", b"g"),
        ("__dlq.errors.delivery.count", b"2"),
        ("__dlq.errors.message", b"Offset delivery count exceeded the threshold."),
    ]


def test_copied_records_keep_key_and_value_and_missing_ones_get_headers_only() -> None:
    records = records_of(dlq_batches(param(0, 1), 0, 1 << 20, {0: (b"k", b"v")}))
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (None, None)]
    assert dict(records[0].headers)["__dlq.errors.message"] == b"Offset rejected by client."


def test_batches_stay_within_the_topics_max_message_bytes() -> None:
    originals = {o: (None, b"x" * 300) for o in range(10)}
    batches = dlq_batches(param(0, 9), 0, 1000, originals)
    assert len(batches) > 1 and all(len(b) <= 1000 for b in batches)
    assert [dict(r.headers)["__dlq.errors.offset"] for r in records_of(batches)] == [str(o).encode() for o in range(10)]
    # A record larger than the limit still goes, alone.
    assert len(dlq_batches(param(0, 1), 0, 100, {0: (None, b"y" * 500)})) == 2


# --- ShareGroupDLQManager --------------------------------------------------------------------------------

DLQ_TOPIC_ID = uuid.uuid4()


def image(features: int = 2, exists: bool = True, enabled: bool = True, partitions: int = 2) -> Any:
    registrations = {i: SimpleNamespace(leader=1 + i) for i in range(partitions)}
    return SimpleNamespace(
        features={"share.version": features},
        topics={"dlq.t": SimpleNamespace(topic_id=DLQ_TOPIC_ID, partitions=registrations)} if exists else {},
        topic_config=lambda name: {"errors.deadletterqueue.group.enable": "true"} if enabled and name == "dlq.t" else {},
        configs={(TOPIC_RESOURCE, "dlq.t"): {}},
    )


class FakeMetadata:
    def __init__(self, img: Any) -> None:
        self.image = img

    def alive_broker(self, broker_id: int, listener: str | None = None) -> Any:
        return SimpleNamespace(host="h", port=9000 + broker_id)


class FakeNetwork:
    def __init__(self, *errors: int | Exception) -> None:
        self.errors = list(errors)
        self.sent: list[tuple[tuple[str, int], Any]] = []

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any:
        self.sent.append((destination, body))
        error = self.errors.pop(0) if self.errors else ErrorCode.none
        if isinstance(error, Exception):
            raise error
        [topic] = body.topic_data
        [part] = topic.partition_data
        return SimpleNamespace(responses=(SimpleNamespace(partition_responses=(SimpleNamespace(index=part.index, error_code=error),)),))


class FakeConfigs:
    def __init__(self, topic: str | None = "dlq.t", copy: bool = False) -> None:
        self.topic, self.copy = topic, copy

    def dlq_topic_name(self, group_id: str) -> str | None:
        return self.topic

    def dlq_copy_record_enable(self, group_id: str) -> bool:
        return self.copy


class FakeCreator:
    def __init__(self) -> None:
        self.created: list[Any] = []

    async def create_topics(self, topics: list[Any]) -> dict[str, int]:
        self.created += topics
        return {t.name: 0 for t in topics}


def dlq_manager(img: Any, network: FakeNetwork, configs: FakeConfigs | None = None, settings: DLQBrokerSettings = DLQBrokerSettings(), creator: FakeCreator | None = None, log: Any = None) -> ShareGroupDLQManager:
    return ShareGroupDLQManager(
        FakeMetadata(img),  # type: ignore[arg-type]
        network,
        configs or FakeConfigs(),
        creator or FakeCreator(),
        log or FakeLog(),
        lambda: settings,
        inter_broker_listener_name="plaintext",
        backoff_ms=1,
        backoff_max_ms=2,
        rng=random.Random(0),
    )


def test_enabled_only_with_share_version_2_and_a_dlq_topic() -> None:
    assert dlq_manager(image(features=2), FakeNetwork()).enabled("g")
    assert not dlq_manager(image(features=1), FakeNetwork()).enabled("g")
    assert not dlq_manager(image(features=2), FakeNetwork(), FakeConfigs(topic=None)).enabled("g")


def test_produces_acks_all_to_the_leader_of_the_dlq_partition() -> None:
    network = FakeNetwork()
    assert run(lambda: dlq_manager(image(), network).dlq(param(0, 1, partition=3))) == ErrorCode.none
    [(destination, body)] = network.sent
    [topic] = body.topic_data
    [part] = topic.partition_data
    # Source partition 3 of 2 DLQ partitions: partition 1, led by node 2.
    assert destination == ("h", 9002) and int(body.acks) == -1 and topic.topic_id == DLQ_TOPIC_ID and int(part.index) == 1
    assert len(records_of([part.records])) == 2


def test_retriable_errors_are_retried_five_times_others_not() -> None:
    network = FakeNetwork(ErrorCode.not_leader_or_follower, RequestTimeoutError("slow"))
    assert run(lambda: dlq_manager(image(), network).dlq(param(0, 0))) == ErrorCode.none
    assert len(network.sent) == 3
    network = FakeNetwork(*[ErrorCode.not_leader_or_follower] * 6)
    assert run(lambda: dlq_manager(image(), network).dlq(param(0, 0))) == ErrorCode.not_leader_or_follower
    assert len(network.sent) == 5
    network = FakeNetwork(ErrorCode.record_list_too_large)
    assert run(lambda: dlq_manager(image(), network).dlq(param(0, 0))) == ErrorCode.record_list_too_large
    assert len(network.sent) == 1


def test_a_refused_topic_is_not_written() -> None:
    network = FakeNetwork()
    assert run(lambda: dlq_manager(image(enabled=False), network).dlq(param(0, 0))) == ErrorCode.invalid_config
    assert run(lambda: dlq_manager(image(exists=False), network).dlq(param(0, 0))) == ErrorCode.invalid_config
    assert network.sent == []


def test_a_missing_topic_is_created_when_the_broker_allows_it() -> None:
    creator, network = FakeCreator(), FakeNetwork()
    m = dlq_manager(image(exists=False), network, settings=DLQBrokerSettings(auto_create_topics_enable=True), creator=creator)
    # Created, but not in this node's metadata yet: the produce finds no leader until attempts run out.
    assert run(lambda: m.dlq(param(0, 0))) == ErrorCode.unknown_topic_or_partition
    [created] = creator.created
    assert (created.name, created.num_partitions, created.replication_factor) == ("dlq.t", -1, -1)
    assert created.configs == {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}


def test_copies_the_original_records_from_the_log() -> None:
    network = FakeNetwork()
    log = FakeLog(3, 2)
    assert run(lambda: dlq_manager(image(), network, FakeConfigs(copy=True), log=log).dlq(param(1, 3))) == ErrorCode.none
    [(_, body)] = network.sent
    assert [(r.key, r.value) for r in records_of([body.topic_data[0].partition_data[0].records])] == [(None, b"v1"), (None, b"v2"), (None, b"v3")]


def test_writes_of_one_share_partition_go_in_order() -> None:
    network = FakeNetwork()

    async def body() -> None:
        m = dlq_manager(image(), network)
        await asyncio.gather(*m.enqueue([param(o, o) for o in range(5)]))

    run(body)
    offsets = [dict(r.headers)["__dlq.errors.offset"] for _, b in network.sent for r in records_of([b.topic_data[0].partition_data[0].records])]
    assert offsets == [b"0", b"1", b"2", b"3", b"4"]


# --- SharePartitionManager's hand-off -------------------------------------------------------------------


class FakeDLQ:
    """Each write done when the test says, with the error it says."""

    def __init__(self, enabled: bool = True) -> None:
        self.on = enabled
        self.params: list[ShareGroupDLQRecordParameter] = []
        self.writes: list[asyncio.Future[int]] = []

    def enabled(self, group_id: str) -> bool:
        return self.on

    def enqueue(self, params: Any) -> list[asyncio.Future[int]]:
        futures = [asyncio.get_running_loop().create_future() for _ in params]
        self.params += params
        self.writes += futures
        return futures

    async def finish(self, index: int, error: int = ErrorCode.none) -> None:
        self.writes[index].set_result(error)
        for _ in range(5):
            await asyncio.sleep(0)


def states_written(persister: FakePersister) -> list[list[tuple[int, int, RecordState, int]]]:
    return [[(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in w.state_batches] for w in persister.writes]


def test_archiving_is_persisted_before_the_dlq_write_and_archived_after() -> None:
    log, persister = FakeLog(4), FakePersister()
    dlq = FakeDLQ()

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST, dlq=dlq)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        acks = [ShareAcknowledgementBatch(0, 3, (ACCEPT, REJECT, RELEASE, GAP))]
        assert await m.acknowledge("g", "a", {TIP: acks}) == {TIP: ErrorCode.none}
        await asyncio.sleep(0)
        assert states_written(persister) == [[(0, 0, ACKNOWLEDGED, 1), (1, 1, ARCHIVING, 1), (2, 2, AVAILABLE, 1), (3, 3, ARCHIVED, 1)]]
        assert dlq.params == [param(1, 1, 1, REJECTED)]
        sp = m.share_partition(KEY)
        assert sp is not None and sp.start_offset == 1
        await dlq.finish(0)
        assert states_written(persister)[1:] == [[(1, 1, ARCHIVED, 1)]] and persister.writes[1].start_offset == 2 == sp.start_offset
        # Offset 2 again, released at the limit of 2 by the member leaving; the DLQ write given up
        # on: archived regardless.
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        await m.release_session("g", "a", [TIP])
        await asyncio.sleep(0)
        assert dlq.params[1:] == [param(2, 2, 2, EXCEEDED)] and states_written(persister)[2] == [(2, 2, ARCHIVING, 2)]
        await dlq.finish(1, ErrorCode.not_enough_replicas)
        assert states_written(persister)[3:] == [[(2, 2, ARCHIVED, 2)]] and sp.start_offset == 4
        await m.shutdown()

    run(body)


def test_nothing_is_handed_over_without_a_dlq_or_when_the_write_fails() -> None:
    for dlq, write_error in ((FakeDLQ(enabled=False), ErrorCode.none), (FakeDLQ(), ErrorCode.coordinator_not_available)):
        log, persister = FakeLog(2), FakePersister(write_error=write_error)

        async def body() -> None:
            m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST, dlq=dlq)
            await m.fetch("g", "a", [(TIP, "t")], PARAMS)
            await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (REJECT,))]})
            await asyncio.sleep(0)
            await m.shutdown()

        run(body)
        assert dlq.params == []


def test_a_new_leader_writes_the_archiving_records_again() -> None:
    state = SharePartitionStateData(1, 1, 0, (PersisterStateBatch(1, 1, ARCHIVING, 1), PersisterStateBatch(2, 2, ARCHIVING, 2)))
    log, persister = FakeLog(4), FakePersister(state=state)
    dlq = FakeDLQ()

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST, dlq=dlq)
        got = (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP]
        assert [(r.first_offset, r.last_offset) for r in got.acquired] == [(3, 3)]
        # Whatever the group's DLQ setting now: the records were promised to the DLQ.
        assert dlq.params == [param(1, 1, 1, REJECTED), param(2, 2, 2, EXCEEDED)]
        await dlq.finish(0)
        await dlq.finish(1)
        assert states_written(persister) == [[(1, 1, ARCHIVED, 1)], [(2, 2, ARCHIVED, 2)]]
        assert [w.start_offset for w in persister.writes] == [2, 3]
        await m.shutdown()

    run(body)


def test_a_dlq_write_done_after_leadership_moved_is_left_to_the_next_leader() -> None:
    log, persister = FakeLog(2), FakePersister()
    dlq = FakeDLQ()

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST, dlq=dlq)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (REJECT,))]})
        await asyncio.sleep(0)
        m.on_metadata_update(None, SimpleNamespace(topics_by_id={}))
        await dlq.finish(0)
        assert states_written(persister) == [[(0, 1, ARCHIVING, 1)]]
        await m.shutdown()

    run(body)
