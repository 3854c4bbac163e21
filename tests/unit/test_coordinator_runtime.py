"""The coordinator runtime over a fake replica manager whose high watermark the test moves by hand:
loading and unloading as leadership moves (and races with itself), writes completed in log order
once replicated, and failed writes (append refused, timeout, leadership lost) reverting memory."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine

from kio.schema.errors import ErrorCode

from broker.coordinator.coordinator_partitioner import partition_for
from broker.coordinator.coordinator_runtime import CoordinatorRuntime
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from protocol.record_batch import BatchHeader, read_header, set_base_offset
from protocol.records import Record, build_batch
from storage.errors import StorageError
from tests.unit.test_group_coordinator_routing import NODE, broker_records, leader_change, publish, topic_records

TOPIC = "__consumer_offsets"


class NotEnoughReplicas(StorageError):
    error_code = ErrorCode.not_enough_replicas


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int


class FakeLog:
    """Batches of one record each, with their offsets."""

    def __init__(self) -> None:
        self.batches_: list[bytearray] = []
        self.log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.batches_)

    def append(self, batch: bytes) -> int:
        buf = bytearray(batch)
        set_base_offset(buf, read_header(buf), len(self.batches_))
        self.batches_.append(buf)
        return len(self.batches_) - 1

    def batches(self, start: int, end: int | None = None) -> list[tuple[BatchHeader, memoryview]]:
        return [(read_header(b), memoryview(bytes(b))) for b in self.batches_[start:end]]


class FakePartition:
    def __init__(self) -> None:
        self.log = FakeLog()
        self.high_watermark = 0
        self.refuse: StorageError | None = None

    def append_records_to_leader(self, batch: memoryview, origin: Any, acks: int, verification_guard: Any = None) -> AppendInfo:
        if self.refuse is not None:
            raise self.refuse
        offset = self.log.append(bytes(batch))
        return AppendInfo(offset, offset)


class FakeReplicaManager:
    """Partitions this node leads; the test moves their high watermarks and drops them."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], FakePartition] = {}
        self.fetch_purgatory = type("Purgatory", (), {"touch": staticmethod(lambda key: None)})()
        self._changed = asyncio.Condition()

    def get_partition(self, topic: str, index: int) -> FakePartition | None:
        return self.partitions.get((topic, index))

    def replicated(self, key: tuple[str, int], required: int) -> int | None:
        partition = self.partitions.get(key)
        if partition is None:
            return ErrorCode.not_leader_or_follower
        return 0 if partition.high_watermark >= required else None

    async def wait_replicated(self, key: tuple[str, int], required: int, timeout_ms: int) -> int:
        try:
            async with asyncio.timeout(timeout_ms / 1000), self._changed:
                while (code := self.replicated(key, required)) is None:
                    await self._changed.wait()
                return code
        except TimeoutError:
            return ErrorCode.request_timed_out

    async def advance(self, index: int, high_watermark: int) -> None:
        self.partitions[(TOPIC, index)].high_watermark = high_watermark
        await self._notify()

    async def drop(self, index: int) -> None:
        del self.partitions[(TOPIC, index)]
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        await settle()


@dataclass
class Shard:
    index: int
    leader_epoch: int
    value: int = 0


@dataclass
class Loader:
    """Each record replayed adds one to the shard's value."""

    loaded: list[tuple[int, int, int]] = field(default_factory=list)  # (index, leader epoch, value)
    unloaded: list[int] = field(default_factory=list)

    def new_shard(self, index: int, leader_epoch: int) -> Shard:
        return Shard(index, leader_epoch)

    def replay(self, shard: Shard, header: BatchHeader, batch: memoryview, records: list[Record]) -> int:
        shard.value += len(records)
        return len(records)

    def on_loaded(self, index: int, shard: Shard) -> None:
        self.loaded.append((index, shard.leader_epoch, shard.value))

    def on_unloaded(self, index: int, shard: Shard) -> None:
        self.unloaded.append(index)


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def one_record() -> bytes:
    return build_batch([(b"k", b"v", (), 0)])


class Node:
    def __init__(self) -> None:
        self.metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "host1", 9091), image=apply_records(MetadataImage(), broker_records()))
        self.rm = FakeReplicaManager()
        self.loader = Loader()
        self.runtime: CoordinatorRuntime[Shard] = CoordinatorRuntime(TOPIC, 2, self.metadata, self.rm, self.loader)  # type: ignore[arg-type]
        self.outcomes: list[tuple[str, int]] = []

    def lead(self, *indexes: int) -> None:
        for index in indexes:
            self.rm.partitions.setdefault((TOPIC, index), FakePartition())

    async def load_partition_0(self) -> None:
        self.lead(0)
        self.publish(topic_records(TOPIC, {0: NODE}))
        await settle()

    def publish(self, records: list[Any]) -> None:
        publish(self.metadata, [self.runtime], records)

    def write(self, index: int, name: str, delta: int, timeout_ms: int = 5000) -> int | asyncio.Future[int]:
        """An operation that adds ``delta`` to the shard's value and writes one record."""
        shard = self.runtime.shards[index]
        before = shard.value
        shard.value += delta

        def revert(error: int) -> None:
            shard.value = before

        def answer(error: int) -> int:
            self.outcomes.append((name, error))
            return error

        return self.runtime.write(index, one_record(), timeout_ms, answer, revert)


def run(test: Callable[[Node], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        node = Node()
        try:
            await test(node)
        finally:
            node.runtime.shutdown()

    asyncio.run(asyncio.wait_for(main(), 20))


# -- loading and unloading -------------------------------------------------------------------------


def test_a_partition_loads_its_log_when_led_here_and_unloads_when_it_moves() -> None:
    async def test(node: Node) -> None:
        node.lead(0, 1)
        for _ in range(3):
            node.rm.partitions[(TOPIC, 0)].log.append(one_record())
        key = next(k for k in (f"key-{i}" for i in range(100)) if partition_for(k, 2) == 0)
        assert node.runtime.coordinator_error(key) == ErrorCode.coordinator_not_available  # no topic yet
        node.publish(topic_records(TOPIC, {0: NODE, 1: 2}))
        assert node.runtime.coordinator_error(key) == ErrorCode.coordinator_load_in_progress
        await settle()
        assert node.loader.loaded == [(0, 0, 3)] and node.runtime.coordinator_error(key) == 0
        node.publish([leader_change(TOPIC, 0, 2)])
        assert node.runtime.shards == {} and node.loader.unloaded == [0]
        assert node.runtime.coordinator_error(key) == ErrorCode.not_coordinator

    run(test)


def test_losing_leadership_while_loading_never_installs_the_shard() -> None:
    async def test(node: Node) -> None:
        node.lead(0)
        node.publish(topic_records(TOPIC, {0: NODE}))
        assert node.runtime.loading
        node.publish([leader_change(TOPIC, 0, 2)])  # before the load task ran at all
        await settle()
        assert node.runtime.shards == {} and node.loader.loaded == [] and not node.runtime.loading

    run(test)


def test_a_new_leader_epoch_while_loading_loads_once_at_the_new_epoch() -> None:
    async def test(node: Node) -> None:
        node.lead(0)
        node.publish(topic_records(TOPIC, {0: NODE}))
        node.publish([leader_change(TOPIC, 0, 2)])
        node.publish([leader_change(TOPIC, 0, NODE)])  # back, under a new leader epoch, before the first load ran
        await settle()
        epoch = node.metadata.image.topics[TOPIC].partitions[0].leader_epoch
        assert epoch > 0
        assert node.loader.loaded == [(0, epoch, 0)]

    run(test)


# -- writes --------------------------------------------------------------------------------------------


def test_a_write_to_a_partition_not_loaded_is_not_coordinator() -> None:
    async def test(node: Node) -> None:
        assert node.runtime.write(0, one_record(), 5000, lambda error: error) == ErrorCode.not_coordinator

    run(test)


def test_writes_complete_in_log_order_when_the_high_watermark_passes_them() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        first, second = node.write(0, "first", 1), node.write(0, "second", 10)
        assert isinstance(first, asyncio.Future) and isinstance(second, asyncio.Future)
        await node.rm.advance(0, 1)
        assert node.outcomes == [("first", 0)] and not second.done()
        await node.rm.advance(0, 2)
        assert node.outcomes == [("first", 0), ("second", 0)]
        assert await first == 0 and await second == 0
        assert node.runtime.shards[0].value == 11

    run(test)


def test_a_write_already_replicated_settles_at_once() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        node.rm.partitions[(TOPIC, 0)].high_watermark = 10**9  # a partition with no follower to wait for
        assert node.write(0, "w", 1) == 0

    run(test)


def test_a_refused_append_reverts_at_once() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        node.rm.partitions[(TOPIC, 0)].refuse = NotEnoughReplicas("below min.insync.replicas")
        assert node.write(0, "w", 5) == ErrorCode.not_enough_replicas
        assert node.runtime.shards[0].value == 0

    run(test)


def test_a_timed_out_write_reverts_itself_and_the_writes_after_it() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        first = node.write(0, "first", 1, timeout_ms=100)
        second = node.write(0, "second", 10, timeout_ms=60000)
        assert await first == ErrorCode.request_timed_out  # type: ignore[misc]
        assert await second == ErrorCode.request_timed_out  # type: ignore[misc]
        assert node.outcomes == [("first", ErrorCode.request_timed_out), ("second", ErrorCode.request_timed_out)]
        assert node.runtime.shards[0].value == 0
        # The next write builds on the reverted state, and the high watermark later passing the
        # failed records changes nothing for them.
        third = node.write(0, "third", 100)
        await node.rm.advance(0, 3)
        assert await third == 0  # type: ignore[misc]
        assert node.outcomes[-1] == ("third", 0) and len(node.outcomes) == 3
        assert node.runtime.shards[0].value == 100

    run(test)


def test_leadership_lost_under_waiting_writes_fails_them_not_coordinator() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        shard = node.runtime.shards[0]
        node.write(0, "replicated", 1)
        await node.rm.advance(0, 1)
        waiting = node.write(0, "waiting", 10)
        node.publish([leader_change(TOPIC, 0, 2)])
        assert await waiting == ErrorCode.not_coordinator  # type: ignore[misc]
        assert shard.value == 1
        assert node.outcomes == [("replicated", 0), ("waiting", ErrorCode.not_coordinator)]

    run(test)


def test_a_waiter_of_the_old_epoch_never_settles_a_write_of_the_new_one() -> None:
    async def test(node: Node) -> None:
        await node.load_partition_0()
        old = node.write(0, "old", 1)
        node.publish([leader_change(TOPIC, 0, 2)])
        node.publish([leader_change(TOPIC, 0, NODE)])
        await settle()
        assert await old == ErrorCode.not_coordinator  # type: ignore[misc]
        new = node.write(0, "new", 10)
        await node.rm.advance(0, 1)  # passes the old write's record only
        assert isinstance(new, asyncio.Future) and not new.done()
        assert node.outcomes == [("old", ErrorCode.not_coordinator)]
        await node.rm.advance(0, 2)
        assert await new == 0
        assert node.runtime.shards[0].value == 11  # reloaded from the log (1), then the new write

    run(test)


def test_an_operation_that_writes_nothing_settles_with_the_writes_before_it() -> None:
    """Kafka's CoordinatorRuntime: an answer that rests on state an earlier write put in memory
    (a member's SyncGroup after its leader's) waits for that write, and shares its fate."""

    async def test(node: Node) -> None:
        await node.load_partition_0()
        assert node.runtime.write(0, None, 5000, lambda error: ("nothing pending", error)) == ("nothing pending", 0)
        first = node.write(0, "first", 1)
        empty = node.runtime.write(0, None, 5000, lambda error: ("empty", error))
        assert isinstance(empty, asyncio.Future) and not empty.done()
        await node.rm.advance(0, 1)
        assert await empty == ("empty", 0) and await first == 0  # type: ignore[misc]
        failing = node.write(0, "failing", 10, timeout_ms=100)
        empty = node.runtime.write(0, None, 60000, lambda error: ("empty", error))
        assert await failing == ErrorCode.request_timed_out  # type: ignore[misc]
        assert await empty == ("empty", ErrorCode.request_timed_out)  # type: ignore[misc]
        assert node.runtime.shards[0].value == 1

    run(test)
