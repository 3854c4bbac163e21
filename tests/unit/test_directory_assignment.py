"""The controller's side of KIP-858 for a broker of several log dirs: AssignReplicasToDirs records
which dir holds each replica (PartitionChangeRecord.directories), and a heartbeat's OfflineLogDirs
takes the broker out of the leadership and ISR of the replicas in those dirs, as Kafka 4.4's
ReplicationControlManager.handleAssignReplicasToDirs and handleDirectoriesOffline do; and (not a
Kafka check) AlterPartition may not add such a replica back to the ISR. The broker's side: the
AssignmentsManager's choice of replicas to report, and the dirs asked for explicitly
(on_assignment, Kafka's onAssignment) with their callback run once the controller accepted."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.assignments_manager import AssignmentsManager, pending_assignments
from broker.controller_channel import ControllerUnavailableError
from broker.controller.partition_change_builder import directory_is_online
from broker.metadata.metadata_image import UNASSIGNED_DIR
from broker.metadata.metadata_records import BrokerRegistrationChangeRecord, PartitionChangeRecord
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from storage.meta_properties import MetaProperties, write_meta_properties
from tests.unit.test_cluster_control_manager import Controller

DIR_A, DIR_B = uuid.UUID(int=0xA1A1), uuid.UUID(int=0xB1B1)


def cluster() -> Controller:
    """Brokers 1-3; broker 1 with two dirs. Topic t: partition 0 led by 1, partition 1 led by 3."""
    c = Controller()
    assert c.register(1, log_dirs=(DIR_A, DIR_B))[0] == 0
    assert not c.heartbeat(1).is_fenced
    c.join(2, 3)
    c.create("t", [1, 2, 3], [3, 1, 2])
    return c


def assign(c: Controller, directories: list[tuple[uuid.UUID, list[tuple[uuid.UUID, list[int]]]]], epoch: int | None = None):  # type: ignore[no-untyped-def]
    image = c.log.image
    result = c.replication.assign_replicas_to_dirs(image, 1, image.brokers[1].epoch if epoch is None else epoch, directories)
    c.log.commit(result.records)
    return result


def directory(c: Controller, partition: int, broker: int = 1) -> uuid.UUID:
    registration = c.log.image.topics["t"].partitions[partition]
    return registration.directories[registration.replicas.index(broker)]


def test_a_broker_of_several_dirs_gets_unassigned_replicas_then_assigns_them() -> None:
    c = cluster()
    topic_id = c.log.image.topics["t"].topic_id
    assert directory(c, 0) == directory(c, 1) == UNASSIGNED_DIR
    result = assign(c, [(DIR_A, [(topic_id, [0])]), (DIR_B, [(topic_id, [1])])])
    assert result.response.error_code == ErrorCode.none
    assert [(d, [(t, list(p)) for t, p in ts]) for d, ts in result.response.directories] == [
        (DIR_A, [(topic_id, [(0, ErrorCode.none)])]),
        (DIR_B, [(topic_id, [(1, ErrorCode.none)])]),
    ]
    assert all(isinstance(r, PartitionChangeRecord) and r.directories is not None for r in result.records) and len(result.records) == 2
    assert (directory(c, 0), directory(c, 1)) == (DIR_A, DIR_B)
    # The other brokers' one dir each stays as it was; leaders and ISRs do not move.
    assert directory(c, 0, broker=2) == uuid.UUID(int=0x1002)
    assert (c.leader("t", 0), c.leader("t", 1)) == (1, 3)
    # Assigned again to the same dir: nothing to write.
    assert assign(c, [(DIR_A, [(topic_id, [0])])]).records == []


def test_each_partition_gets_kafkas_error() -> None:
    c = cluster()
    c.create("other", [2])
    topic_id, other = c.log.image.topics["t"].topic_id, c.log.image.topics["other"].topic_id
    unknown = uuid.UUID(int=0xDEAD)
    result = assign(c, [(DIR_A, [(topic_id, [0, 9]), (unknown, [0]), (other, [0])])])
    assert result.response.error_code == ErrorCode.none
    ((_, topics),) = result.response.directories
    assert [(t, list(p)) for t, p in topics] == [
        (topic_id, [(0, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition)]),
        (unknown, [(0, ErrorCode.unknown_topic_id)]),
        (other, [(0, ErrorCode.not_leader_or_follower)]),
    ]
    stale = assign(c, [(DIR_A, [(topic_id, [1])])], epoch=c.log.image.brokers[1].epoch + 7)
    assert (stale.response.error_code, stale.records) == (ErrorCode.stale_broker_epoch, [])
    assert directory(c, 1) == UNASSIGNED_DIR


def test_an_offline_dir_in_a_heartbeat_moves_leadership_and_isr_off_its_replicas_only() -> None:
    c = cluster()
    topic_id = c.log.image.topics["t"].topic_id
    assign(c, [(DIR_A, [(topic_id, [1])]), (DIR_B, [(topic_id, [0])])])
    image = c.log.image
    result = c.cluster.heartbeat(1, image.brokers[1].epoch, image.provenance, False, False, now_ms=c.now, image=image, committed_offset=image.provenance, offline_log_dirs=[DIR_B])
    c.log.commit(result.records)
    assert not result.response.is_fenced
    assert result.records[-1] == BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=image.brokers[1].epoch, log_dirs=(DIR_A,))
    assert c.log.image.brokers[1].directories == (DIR_A,)
    p0, p1 = c.log.image.topics["t"].partitions[0], c.log.image.topics["t"].partitions[1]
    # Partition 0's replica on 1 is in B: 1 loses the leadership and leaves the ISR.
    assert (p0.leader, p0.isr) == (2, (2, 3))
    assert not directory_is_online(directory(c, 0), c.log.image.brokers[1].directories)
    # Partition 1's replica on 1 is in A: nothing changes.
    assert (p1.leader, p1.isr) == (3, (3, 1, 2))
    # Named again in the next heartbeats: already handled, nothing more is written.
    image = c.log.image
    again = c.cluster.heartbeat(1, image.brokers[1].epoch, image.provenance, False, False, now_ms=c.now, image=image, committed_offset=image.provenance, offline_log_dirs=[DIR_B])
    assert again.records == []


def test_a_replica_assigned_to_a_dir_that_is_offline_leaves_leadership_and_isr() -> None:
    c = cluster()
    topic_id = c.log.image.topics["t"].topic_id
    image = c.log.image
    c.log.commit(c.cluster.heartbeat(1, image.brokers[1].epoch, image.provenance, False, False, now_ms=c.now, image=image, committed_offset=image.provenance, offline_log_dirs=[DIR_B]).records)
    assign(c, [(DIR_B, [(topic_id, [0])])])
    p0 = c.log.image.topics["t"].partitions[0]
    assert directory(c, 0) == DIR_B and p0.leader == 2 and 1 not in p0.isr


def test_the_broker_asks_for_the_replicas_whose_dir_the_metadata_does_not_name(tmp_path: Path) -> None:
    """AssignmentsManager's choice (pending_assignments): broker 1's logs, by its dir ids."""
    c = cluster()
    c.create("other", [2])
    topic_id = c.log.image.topics["t"].topic_id
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d, directory_id in zip(dirs, (DIR_A, DIR_B)):
        write_meta_properties(d, MetaProperties(cluster_id="c", node_id=1, directory_id=base64.urlsafe_b64encode(directory_id.bytes).rstrip(b"=").decode()))
    logs = LogManager(dirs, LogConfig())
    logs.startup()
    for name, partition in (("t", 0), ("t", 1), ("other", 0), ("gone", 0)):
        logs.get_or_create_log(name, partition, logs.default_config, None)
    keys = logs.take_new_logs()
    batch, left = pending_assignments(1, c.log.image, logs, keys)
    # t-0 went to a, t-1 to b; "other" has no replica on broker 1; "gone" is in no image yet.
    assert batch == {DIR_A: {topic_id: [("t", 0)]}, DIR_B: {topic_id: [("t", 1)]}} and left == {("gone", 0)}
    assign(c, [(DIR_A, [(topic_id, [0])]), (DIR_B, [(topic_id, [1])])])
    assert pending_assignments(1, c.log.image, logs, keys) == ({}, {("gone", 0)})
    logs.shutdown()


def two_dir_logs(tmp_path: Path) -> tuple[LogManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d, directory_id in zip(dirs, (DIR_A, DIR_B)):
        write_meta_properties(d, MetaProperties(cluster_id="c", node_id=1, directory_id=base64.urlsafe_b64encode(directory_id.bytes).rstrip(b"=").decode()))
    logs = LogManager(dirs, LogConfig())
    logs.startup()
    return logs, dirs


def test_a_requested_dir_is_sent_as_asked_and_a_moving_replica_is_left_to_its_move(tmp_path: Path) -> None:
    c = cluster()
    topic_id = c.log.image.topics["t"].topic_id
    logs, dirs = two_dir_logs(tmp_path)
    for p in (0, 1):
        logs.get_or_create_log("t", p, logs.default_config, None)
    assert logs.get_log("t", 0).parent_dir == dirs[0]  # type: ignore[union-attr]
    assign(c, [(DIR_A, [(topic_id, [0])]), (DIR_B, [(topic_id, [1])])])
    # Asked for: sent even where the metadata names it already; a replica not on broker 1 any more is dropped.
    requested = {("t", 0): DIR_B, ("t", 1): DIR_B, ("other", 0): DIR_A}
    assert pending_assignments(1, c.log.image, logs, set(), requested) == ({DIR_B: {topic_id: [("t", 0), ("t", 1)]}}, set())
    # t-0 moving to b, the metadata naming b already (a restart between the assignment and the
    # swap): its log in a is not reported, the swap will make the metadata right.
    logs.get_or_create_future_log("t", 0, dirs[1])
    assign(c, [(DIR_B, [(topic_id, [0])])])
    assert pending_assignments(1, c.log.image, logs, {("t", 0)}) == ({}, set())
    logs.remove_future_log("t", 0)
    assert pending_assignments(1, c.log.image, logs, {("t", 0)}) == ({DIR_A: {topic_id: [("t", 0)]}}, set())
    logs.shutdown()


class Channel:
    """The controller at the other end: the unit Controller, answering as ControllerApis does;
    the first ``unavailable`` calls find no controller."""

    def __init__(self, c: Controller, unavailable: int = 0) -> None:
        self.c, self.unavailable, self.sent = c, unavailable, 0
        self.manager: AssignmentsManager | None = None

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        self.sent += 1
        if self.unavailable:
            self.unavailable -= 1
            raise ControllerUnavailableError("no controller")
        directories = [(d.id_, [(t.topic_id, [int(p.partition_index) for p in t.partitions]) for t in d.topics]) for d in request.directories]
        result = assign(self.c, directories, int(request.broker_epoch))  # type: ignore[arg-type]
        assert self.manager is not None
        self.manager.on_metadata_update(None, self.c.log.image)  # type: ignore[arg-type]
        schema = response_schema(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0)
        dir_cls, topic_cls, partition_cls = nested(schema, "DirectoryData"), nested(schema, "TopicData"), nested(schema, "PartitionData")
        return build(
            schema,
            throttle_time=0,
            error_code=result.response.error_code,
            directories=tuple(
                build(dir_cls, id_=d, topics=tuple(build(topic_cls, topic_id=t, partitions=tuple(build(partition_cls, partition_index=i, error_code=e) for i, e in ps)) for t, ps in ts))
                for d, ts in result.response.directories
            ),
        )


def test_on_assignment_runs_its_callback_once_the_controller_accepted_after_retries(tmp_path: Path) -> None:
    c = cluster()
    logs, dirs = two_dir_logs(tmp_path)
    logs.get_or_create_log("t", 0, logs.default_config, None)
    channel = Channel(c, unavailable=1)
    manager = AssignmentsManager(1, logs, channel, lambda: c.log.image.brokers[1].epoch)  # type: ignore[arg-type]
    channel.manager = manager
    manager.on_metadata_update(None, c.log.image)  # type: ignore[arg-type]
    accepted: list[uuid.UUID] = []

    async def scenario() -> None:
        manager.start()
        for _ in range(100):  # the logs loaded at start: t-0 in a
            if directory(c, 0) == DIR_A:
                break
            await asyncio.sleep(0.05)
        logs.get_or_create_future_log("t", 0, dirs[1])
        manager.on_assignment(("t", 0), DIR_A, lambda: accepted.append(DIR_A))
        manager.on_assignment(("t", 0), DIR_B, lambda: accepted.append(DIR_B))  # replaces the one not sent
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.05)
        await manager.close()

    asyncio.run(scenario())
    # The first request found no controller and was sent again; the callback ran once, for b.
    assert accepted == [DIR_B] and directory(c, 0) == DIR_B and channel.sent >= 2
    assert logs.get_log("t", 0).parent_dir == dirs[0]  # type: ignore[union-attr]  # not reported back: moving to b
    logs.shutdown()
