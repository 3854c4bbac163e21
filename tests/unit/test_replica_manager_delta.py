"""ReplicaManager as a metadata publisher, on real logs: leader and follower replicas, leadership
moves that keep the data, replica removal and topic deletion that delete it, config changes."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import TOPIC_RESOURCE, MetadataImage
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import ConfigRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from broker.partition import NotLeaderOrFollowerError
from broker.replica_manager import CREATE_SLICE, ReplicaManager
from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from tests.unit.batch_factory import make_batch

ME = 1
A = uuid.UUID(int=0xA)


class Node:
    def __init__(self, data_dir: Path, create_slice: int = CREATE_SLICE) -> None:
        self.log_manager = LogManager(data_dir, LogConfig(), lambda: time.time_ns() // 1_000_000)
        self.log_manager.startup()
        self.rm = ReplicaManager(ME, self.log_manager, dict, create_slice=create_slice)
        self.loader = MetadataLoader()
        self.loader.install_publisher(self.rm)
        self.offset = 0

    def commit(self, *records: MetadataRecord) -> MetadataImage:
        entries = [(self.offset + i, r) for i, r in enumerate(records)]
        self.offset += len(records)
        return self.loader.handle_commit(entries)

    def produce(self, topic: str, index: int) -> int:
        batch = memoryview(bytearray(make_batch([b"v"])))
        return self.rm.append_records([(topic, index, batch)], self.loader.image)[(topic, index)].error_code

    def fetch(self, topic: str, index: int) -> int:
        return self.rm.read(topic, index, 0, 1 << 20, 0, True, self.loader.image).error_code


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.log_manager.shutdown()


def partition(index: int, replicas: tuple[int, ...], topic_id: uuid.UUID = A) -> PartitionRecord:
    return PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)


def change(index: int, **kw: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=index, topic_id=A, **kw)  # type: ignore[arg-type]


def test_leads_follows_and_hosts_nothing_it_is_not_a_replica_of(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)), partition(2, (2, 3)))
    assert set(node.rm.partitions) == {("a", 0), ("a", 1)}
    led, followed = node.rm.partitions[("a", 0)], node.rm.partitions[("a", 1)]
    assert (led.is_leader, led.leader_id, led.leader_epoch) == (True, 1, 0)
    assert (followed.is_leader, followed.leader_id, followed.leader_epoch) == (False, 2, 0)
    assert node.rm.get_partition("a", 1) is None and node.rm.get_replica("a", 1) is followed
    assert node.produce("a", 0) == 0 and node.fetch("a", 0) == 0
    for index in (1, 2):
        assert node.produce("a", index) == ErrorCode.not_leader_or_follower
        assert node.fetch("a", index) == ErrorCode.not_leader_or_follower
    assert node.produce("b", 0) == ErrorCode.unknown_topic_or_partition
    with pytest.raises(NotLeaderOrFollowerError):
        followed.append_records_to_leader(memoryview(bytearray(make_batch([b"v"]))))


def test_a_leadership_move_keeps_the_replica_and_its_data(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)))
    assert node.produce("a", 0) == 0
    replica = node.rm.partitions[("a", 0)]
    node.commit(change(0, leader=2))
    assert node.rm.partitions[("a", 0)] is replica and not replica.is_leader and replica.leader_id == 2 and replica.leader_epoch == 1
    assert node.produce("a", 0) == ErrorCode.not_leader_or_follower
    assert replica.log.log_end_offset == 1 and node.log_manager.get_log("a", 0) is replica.log
    node.commit(change(0, leader=1))
    assert replica.is_leader and replica.leader_epoch == 2
    assert node.produce("a", 0) == 0 and replica.log.log_end_offset == 2


def test_replica_removal_and_topic_deletion_delete_the_logs(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)))
    dirs = {key: p.log.dir for key, p in node.rm.partitions.items()}
    node.commit(change(1, replicas=(2, 3), isr=(2, 3)))
    assert set(node.rm.partitions) == {("a", 0)} and not dirs[("a", 1)].exists() and node.log_manager.get_log("a", 1) is None
    node.commit(RemoveTopicRecord(topic_id=A))
    assert node.rm.partitions == {} and not dirs[("a", 0)].exists()


def test_a_topic_recreated_under_its_name_gets_a_fresh_log(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)))
    assert node.produce("a", 0) == 0
    other = uuid.UUID(int=0xB)
    node.commit(RemoveTopicRecord(topic_id=A), TopicRecord(name="a", topic_id=other), partition(0, (1,), topic_id=other))
    replica = node.rm.partitions[("a", 0)]
    assert replica.topic_id == other and replica.log.log_end_offset == 0 and replica.is_leader


def test_topic_config_changes_reach_the_logs(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)))
    node.commit(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value="1234"))
    assert {p.log.config.retention_ms for p in node.rm.partitions.values()} == {1234}
    node.commit(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value=None))
    assert {p.log.config.retention_ms for p in node.rm.partitions.values()} == {LogConfig().retention_ms}


def test_a_metadata_change_elsewhere_touches_no_replica(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)), partition(1, (2, 3)))
    replica = node.rm.partitions[("a", 0)]
    epoch = replica.partition_epoch
    node.commit(change(1, leader=3))
    assert node.rm.partitions == {("a", 0): replica} and replica.partition_epoch == epoch


def test_a_request_to_a_follower_names_the_leader_and_its_epoch(node: Node) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER comes with the leader the image knows, so a client can go
    there at once; a partition with no leader names none."""
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (2, 1)), change(0, leader=2), partition(1, (3, 1)), change(1, leader=-1))
    batch = memoryview(bytearray(make_batch([b"v"])))
    produced = node.rm.append_records([("a", 0, batch), ("a", 1, batch)], node.loader.image)
    assert (produced[("a", 0)].error_code, produced[("a", 0)].current_leader) == (ErrorCode.not_leader_or_follower, (2, 1))
    assert (produced[("a", 1)].error_code, produced[("a", 1)].current_leader) == (ErrorCode.not_leader_or_follower, None)
    read = node.rm.read("a", 0, 0, 1 << 20, 0, True, node.loader.image)
    assert (read.error_code, read.current_leader) == (ErrorCode.not_leader_or_follower, (2, 1))


def test_a_replica_fetch_from_a_stranger_or_with_a_stale_epoch_is_refused(node: Node) -> None:
    """Bad input on the follower path: only the partition's own replicas fetch as followers, at
    the current leader epoch, and a refused fetch moves nothing."""
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), change(0, leader=1))
    assert node.produce("a", 0) == 0
    image = node.loader.image

    def follower_fetch(replica: int, leader_epoch: int) -> int:
        return node.rm.read_for_follower(replica, 0, "a", 0, 0, -1, 0, leader_epoch, 1 << 20, image).error_code

    assert follower_fetch(3, 1) == ErrorCode.not_leader_or_follower  # not a replica
    assert follower_fetch(2, 0) == ErrorCode.fenced_leader_epoch  # the epoch before the leader change
    assert follower_fetch(2, 5) == ErrorCode.unknown_leader_epoch  # an epoch this node has not seen
    assert node.rm.partitions[("a", 0)].high_watermark == 0
    assert follower_fetch(2, 1) == 0


def test_logs_removed_while_the_broker_was_down_are_deleted_once_it_has_caught_up(tmp_path: Path) -> None:
    before = Node(tmp_path)
    b = uuid.UUID(int=0xB)
    before.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)), TopicRecord(name="b", topic_id=b), partition(0, (1,), topic_id=b))
    dirs = {key: p.log.dir for key, p in before.rm.partitions.items()}
    before.log_manager.shutdown()
    # Meanwhile a-1 was reassigned to 2 and 3, and b deleted: the restarted broker's metadata never names them.
    after = Node(tmp_path)
    try:
        after.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 3)))
        assert all(d.exists() for d in dirs.values())
        assert sorted(after.rm.delete_stray_logs()) == [("a", 1), ("b", 0)]
        assert dirs[("a", 0)].exists() and not dirs[("a", 1)].exists() and not dirs[("b", 0)].exists()
        assert set(after.rm.partitions) == {("a", 0)} and after.rm.delete_stray_logs() == []
    finally:
        after.log_manager.shutdown()


def test_a_log_without_its_topic_id_is_stray_unless_this_broker_hosts_it(tmp_path: Path) -> None:
    # A broker killed before the flush job wrote partition.metadata leaves data with no topic id;
    # found in the suite under load, where a reassigned replica's copy was then never deleted.
    before = Node(tmp_path)
    before.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)))
    dirs = {key: p.log.dir for key, p in before.rm.partitions.items()}
    before.log_manager.shutdown()
    for d in dirs.values():
        (d / "partition.metadata").unlink(missing_ok=True)
    after = Node(tmp_path)
    try:
        after.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 3)))
        assert after.rm.delete_stray_logs() == [("a", 1)]
        assert dirs[("a", 0)].exists() and not dirs[("a", 1)].exists()
    finally:
        after.log_manager.shutdown()


def test_an_added_replica_follows_and_a_completed_move_deletes_the_removed_one(node: Node) -> None:
    node.commit(TopicRecord(name="a", topic_id=A), partition(0, (2, 3)))
    assert node.rm.partitions == {}
    node.commit(change(0, replicas=(2, 3, 1), adding_replicas=(1,)))
    follower = node.rm.partitions[("a", 0)]
    assert not follower.is_leader and follower.leader_id == 2 and follower.log.log_end_offset == 0
    node.commit(change(0, replicas=(1, 2, 3), isr=(2, 3, 1), adding_replicas=()))
    assert node.rm.partitions[("a", 0)] is follower
    node.commit(change(0, replicas=(1, 2, 3, 4), removing_replicas=(1,), adding_replicas=(4,)))
    assert node.rm.partitions[("a", 0)] is follower
    node.commit(change(0, replicas=(2, 3, 4), isr=(2, 3, 4), leader=2, removing_replicas=(), adding_replicas=()))
    assert node.rm.partitions == {} and not follower.log.dir.exists()


# A delta of thousands of new partitions, created in one go, held the event loop for seconds.
SLICE = 2


async def created(node: Node) -> None:
    while node.rm.pending_replicas:
        await asyncio.sleep(0.001)


def test_past_a_slice_new_logs_are_created_later_and_not_served_before(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, create_slice=SLICE)
        node.commit(TopicRecord(name="a", topic_id=A), *(partition(i, (1,)) for i in range(5)))
        assert set(node.rm.partitions) == {("a", 0), ("a", 1)} and node.rm.pending_replicas == 3
        assert not (tmp_path / "a-4").exists()
        assert node.produce("a", 4) == ErrorCode.not_leader_or_follower and node.fetch("a", 4) == ErrorCode.not_leader_or_follower
        await created(node)
        assert len(node.rm.partitions) == 5 and all(p.is_leader for p in node.rm.partitions.values())
        assert node.produce("a", 4) == 0
        node.log_manager.shutdown()

    asyncio.run(scenario())


def test_later_deltas_change_or_drop_what_is_pending(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, create_slice=SLICE)
        b, c = uuid.UUID(int=0xB), uuid.UUID(int=0xC)
        node.commit(TopicRecord(name="a", topic_id=A), *(partition(i, (1, 2)) for i in range(4)))
        node.commit(TopicRecord(name="b", topic_id=b), *(partition(i, (1,), topic_id=b) for i in range(3)))
        node.commit(change(3, leader=2))  # pending a-3 now follows 2
        node.commit(RemoveTopicRecord(topic_id=b), TopicRecord(name="b", topic_id=c), partition(0, (1,), topic_id=c))
        await created(node)
        assert set(node.rm.partitions) == {("a", i) for i in range(4)} | {("b", 0)}
        follower = node.rm.partitions[("a", 3)]
        assert not follower.is_leader and follower.leader_id == 2
        assert node.rm.partitions[("b", 0)].topic_id == c and node.rm.partitions[("b", 0)].is_leader
        assert not (tmp_path / "b-1").exists() and not (tmp_path / "b-2").exists()
        node.log_manager.shutdown()

    asyncio.run(scenario())


def test_shutdown_stops_between_slices(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, create_slice=SLICE)
        node.commit(TopicRecord(name="a", topic_id=A), *(partition(i, (1,)) for i in range(50)))
        await node.rm.shutdown()
        hosted = len(node.rm.partitions)
        assert hosted < 50 and hosted % SLICE == 0 and hosted + node.rm.pending_replicas == 50
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(f"a-{i}" for i in range(hosted))
        node.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_failed_slice_leaves_the_rest_for_the_next_delta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, create_slice=SLICE)
        real = node.log_manager.get_or_create_log

        def failing(topic: str, index: int, *args: object) -> object:
            if index == 2:
                raise KafkaStorageError("disk gone")
            return real(topic, index, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(node.log_manager, "get_or_create_log", failing)
        node.commit(TopicRecord(name="a", topic_id=A), *(partition(i, (1,)) for i in range(6)))
        while node.rm.pending_replicas != 2:  # the second slice, a-2 and a-3, failed
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        assert set(node.rm.partitions) == {("a", 0), ("a", 1)} and node.rm.pending_replicas == 2
        monkeypatch.setattr(node.log_manager, "get_or_create_log", real)
        node.commit(TopicRecord(name="b", topic_id=uuid.UUID(int=0xB)))
        await created(node)
        assert set(node.rm.partitions) == {("a", i) for i in (0, 1, 4, 5)}
        node.log_manager.shutdown()

    asyncio.run(scenario())
