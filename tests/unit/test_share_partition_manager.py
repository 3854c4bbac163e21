"""SharePartitionManager with a fake log and a fake persister: initialization from the persisted
state, acquisition of whole batches, persisting before answering, persister errors as Kafka
answers them, lock expiry, session release, dropping share partitions when leadership moves."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.acquired_records import AcquiredRecords, FetchedBatch
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import RecordState
from broker.share.share_partition import ShareAutoOffsetReset, SharePartitionConfig
from broker.share.share_partition_manager import (
    GroupShareSettings,
    LeaderState,
    LogRead,
    ShareFetchParams,
    SharePartitionKey,
    SharePartitionManager,
    persister_error_for_member,
)
from broker.share.share_session_cache import TopicIdPartition
from protocol.record_batch import iter_headers
from protocol.records import build_batch

T = TypeVar("T")
TOPIC_ID = uuid.uuid4()
TIP = TopicIdPartition(TOPIC_ID, 0)
KEY = SharePartitionKey("g", TOPIC_ID, 0)
EARLIEST = GroupShareSettings(SharePartitionConfig(auto_offset_reset=ShareAutoOffsetReset.EARLIEST, delivery_count_limit=2))
PARAMS = ShareFetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=500)


class FakeLog:
    """A leader's log of batches of ``sizes`` records each."""

    def __init__(self, *sizes: int) -> None:
        self.batches: list[bytes] = []
        self.leader_epoch = 3
        self.leader = True
        for size in sizes:
            self.append(size)

    def append(self, size: int) -> None:
        base = self.end
        self.batches.append(build_batch([(None, b"v%d" % (base + i), (), 0) for i in range(size)], base_offset=base))

    @property
    def end(self) -> int:
        return sum(h.records_count for b in self.batches for h in iter_headers(b))

    def leader_state(self, topic: str, partition: int) -> LeaderState | None:
        return LeaderState(self.leader_epoch, 0, self.end) if self.leader else None

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        if not self.leader:
            return LogRead(ErrorCode.not_leader_or_follower)
        chosen = [b for b in self.batches if next(iter_headers(b)).last_offset >= fetch_offset]
        ends = [sum(map(len, chosen[: i + 1])) for i in range(len(chosen))]
        batches = tuple(FetchedBatch(h.base_offset, h.last_offset) for b in chosen for h in iter_headers(b))
        return LogRead(chunks=tuple(chosen), batches=batches, batch_ends=tuple(ends))


@dataclass
class FakePersister:
    state: SharePartitionStateData | None = None
    read_error: int = ErrorCode.none
    write_error: int = ErrorCode.none
    reads: int = 0
    writes: list[SharePartitionStateData] = field(default_factory=list)
    # Set to hold writes until released, to see that answers wait for them.
    gate: asyncio.Event | None = None

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> Any:
        self.reads += 1
        await asyncio.sleep(0)
        return SimpleNamespace(error=self.read_error, state=self.state)

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state: SharePartitionStateData) -> int:
        if self.gate is not None:
            await self.gate.wait()
        self.writes.append(state)
        return self.write_error


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 10))


def manager(log: FakeLog, persister: FakePersister, settings: GroupShareSettings = EARLIEST) -> SharePartitionManager:
    return SharePartitionManager(1, log, persister, lambda group_id: settings)


def offsets(records: tuple[bytes, ...]) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in iter_headers(b"".join(records))]


def test_a_fetch_initializes_once_and_acquires_whole_batches() -> None:
    log, persister = FakeLog(3, 2), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        first, second = await asyncio.gather(
            m.fetch("g", "a", [(TIP, "t")], PARAMS), m.fetch("g", "b", [(TIP, "t")], PARAMS)
        )
        assert persister.reads == 1
        got = [r for r in (first[TIP], second[TIP]) if r.acquired]
        assert len(got) == 1, "one member acquires, the other finds nothing left"
        assert got[0].acquired == (AcquiredRecords(0, 4, 1),)
        assert offsets(got[0].records) == [(0, 2), (3, 4)]
        await m.shutdown()

    run(body)


def test_max_records_cuts_on_a_batch_boundary_and_the_rest_goes_next() -> None:
    log, persister = FakeLog(3, 3, 3), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        first = (await m.fetch("g", "a", [(TIP, "t")], ShareFetchParams(0, 1, 1 << 20, max_records=4)))[TIP]
        assert first.acquired == (AcquiredRecords(0, 5, 1),) and offsets(first.records) == [(0, 2), (3, 5)]
        second = (await m.fetch("g", "b", [(TIP, "t")], PARAMS))[TIP]
        assert second.acquired == (AcquiredRecords(6, 8, 1),) and offsets(second.records) == [(6, 8)]
        await m.shutdown()

    run(body)


def test_persisted_state_is_where_the_share_partition_starts() -> None:
    log = FakeLog(5, 5)
    persisted = SharePartitionStateData(3, 1, 0, (PersisterStateBatch(3, 4, RecordState.AVAILABLE, 1), PersisterStateBatch(5, 6, RecordState.ACKNOWLEDGED, 1)))
    persister = FakePersister(state=persisted)

    async def body() -> None:
        m = manager(log, persister)
        got = (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP]
        # 3-4 redelivered (count 2), 5-6 done, 7-9 new; the records start at the batch holding 3.
        assert got.acquired == (AcquiredRecords(3, 4, 2), AcquiredRecords(7, 9, 1))
        assert offsets(got.records) == [(0, 4), (5, 9)]
        await m.shutdown()

    run(body)


def test_an_initialization_error_is_the_partitions_and_is_retried_next_time() -> None:
    log, persister = FakeLog(2), FakePersister(read_error=ErrorCode.fenced_state_epoch)

    async def body() -> None:
        m = manager(log, persister)
        # Kafka's SharePartition.fetchPersisterError: a fenced state epoch is another leader's.
        assert (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP].error == ErrorCode.not_leader_or_follower
        assert len(m) == 0
        persister.read_error = ErrorCode.none
        assert (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP].acquired == (AcquiredRecords(0, 1, 1),)
        assert persister.reads == 2
        await m.shutdown()

    run(body)


@pytest.mark.parametrize(
    ("persisted", "answered"),
    [
        (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available),
        (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available),
        (ErrorCode.group_id_not_found, ErrorCode.group_id_not_found),
        (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_or_partition),
        (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower),
        # The share coordinator's answer to reading a share partition never initialized.
        (ErrorCode.invalid_request, ErrorCode.unknown_server_error),
        (ErrorCode.unsupported_version, ErrorCode.unknown_server_error),
    ],
)
def test_persister_errors_are_answered_as_kafka_names_them(persisted: int, answered: int) -> None:
    """Kafka's SharePartition.fetchPersisterError, for a read at initialization and for a write."""
    assert persister_error_for_member(persisted) == answered
    log, persister = FakeLog(2), FakePersister(read_error=persisted)

    async def body() -> None:
        m = manager(log, persister)
        assert (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP].error == answered
        persister.read_error, persister.write_error = ErrorCode.none, persisted
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        assert await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (1,))]}) == {TIP: answered}
        await m.shutdown()

    run(body)


def test_not_leading_is_not_leader_or_follower() -> None:
    log, persister = FakeLog(2), FakePersister()
    log.leader = False

    async def body() -> None:
        m = manager(log, persister)
        assert (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP].error == ErrorCode.not_leader_or_follower
        assert persister.reads == 0

    run(body)


def test_acknowledgements_are_persisted_before_they_are_answered() -> None:
    log, persister = FakeLog(4), FakePersister(gate=asyncio.Event())

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        ack = asyncio.ensure_future(
            m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (1,)), ShareAcknowledgementBatch(2, 3, (2,))]})
        )
        await asyncio.sleep(0.05)
        assert not ack.done() and persister.writes == []
        assert persister.gate is not None
        persister.gate.set()
        assert await ack == {TIP: ErrorCode.none}
        [write] = persister.writes
        assert write.start_offset == 2
        assert write.state_batches == (PersisterStateBatch(0, 1, RecordState.ACKNOWLEDGED, 1), PersisterStateBatch(2, 3, RecordState.AVAILABLE, 1))
        # The released records go to the next fetch, delivered a second time.
        assert (await m.fetch("g", "b", [(TIP, "t")], PARAMS))[TIP].acquired == (AcquiredRecords(2, 3, 2),)
        await m.shutdown()

    run(body)


def test_writes_carry_the_delivery_complete_count() -> None:
    log, persister = FakeLog(4), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        # 2-3 finish behind 0-1, still acquired: the group's lag is 2 records, not 4.
        assert await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(2, 3, (1,))]}) == {TIP: ErrorCode.none}
        assert await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (1,))]}) == {TIP: ErrorCode.none}
        assert [(w.start_offset, w.delivery_complete_count) for w in persister.writes] == [(0, 2), (4, 0)]
        await m.shutdown()

    run(body)


def test_acknowledging_what_another_member_holds_or_an_unknown_partition() -> None:
    log, persister = FakeLog(2), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        answer = await m.acknowledge("g", "b", {TIP: [ShareAcknowledgementBatch(0, 1, (1,))]})
        assert answer == {TIP: ErrorCode.invalid_record_state}
        other = TopicIdPartition(uuid.uuid4(), 0)
        assert await m.acknowledge("g", "a", {other: [ShareAcknowledgementBatch(0, 0, (1,))]}) == {other: ErrorCode.unknown_topic_or_partition}
        assert persister.writes == []
        await m.shutdown()

    run(body)


def test_a_failed_write_drops_the_share_partition() -> None:
    log, persister = FakeLog(2), FakePersister(write_error=ErrorCode.fenced_state_epoch)

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        assert await m.acknowledge("g", "a", {TIP: [ShareAcknowledgementBatch(0, 1, (1,))]}) == {TIP: ErrorCode.not_leader_or_follower}
        assert m.share_partition(KEY) is None
        await m.shutdown()

    run(body)


def test_closing_a_session_releases_what_the_member_holds() -> None:
    log, persister = FakeLog(3), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        assert await m.release_session("g", "a", [TIP]) == {TIP: ErrorCode.none}
        [write] = persister.writes
        assert write.state_batches == (PersisterStateBatch(0, 2, RecordState.AVAILABLE, 1),)
        assert (await m.fetch("g", "b", [(TIP, "t")], PARAMS))[TIP].acquired == (AcquiredRecords(0, 2, 2),)
        await m.shutdown()

    run(body)


def test_expired_locks_make_records_available_and_wake_a_waiting_fetch() -> None:
    log, persister = FakeLog(2), FakePersister()
    short = GroupShareSettings(SharePartitionConfig(auto_offset_reset=ShareAutoOffsetReset.EARLIEST, record_lock_duration_ms=100))

    async def body() -> None:
        m = manager(log, persister, short)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        waiting = ShareFetchParams(max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20, max_records=500)
        loop = asyncio.get_running_loop()
        started = loop.time()
        got = (await m.fetch("g", "b", [(TIP, "t")], waiting))[TIP]
        assert got.acquired == (AcquiredRecords(0, 1, 2),)
        assert 0.05 <= loop.time() - started < 2.5
        assert persister.writes[0].state_batches == (PersisterStateBatch(0, 1, RecordState.AVAILABLE, 1),)
        await m.shutdown()

    run(body)


def test_a_waiting_fetch_is_answered_when_the_log_grows() -> None:
    log, persister = FakeLog(1), FakePersister()

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        waiting = ShareFetchParams(max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20, max_records=500)
        pending = asyncio.ensure_future(m.fetch("g", "b", [(TIP, "t")], waiting))
        await asyncio.sleep(0.05)
        assert not pending.done()
        log.append(2)
        m._waiters.touch(("t", 0))
        assert (await pending)[TIP].acquired == (AcquiredRecords(1, 2, 1),)
        await m.shutdown()

    run(body)


def test_share_partitions_go_when_leadership_moves_or_the_topic_is_deleted() -> None:
    log, persister = FakeLog(2), FakePersister()

    def image(leader: int, epoch: int, present: bool = True) -> Any:
        partitions = {0: SimpleNamespace(leader=leader, leader_epoch=epoch)}
        return SimpleNamespace(topics_by_id={TOPIC_ID: SimpleNamespace(partitions=partitions)} if present else {})

    async def body() -> None:
        m = manager(log, persister)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        m.on_metadata_update(None, image(1, 3))
        assert m.share_partition(KEY) is not None
        m.on_metadata_update(None, image(1, 4))
        assert m.share_partition(KEY) is None
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        m.on_metadata_update(None, image(2, 3))
        assert m.share_partition(KEY) is None
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        m.on_metadata_update(None, image(1, 3, present=False))
        assert len(m) == 0
        await m.shutdown()

    run(body)

