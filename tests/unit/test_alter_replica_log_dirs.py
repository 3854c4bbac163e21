"""AlterReplicaLogDirs on a real ReplicaManager and log dirs: each partition's error as Kafka 4.4's
ReplicaManager.alterReplicaLogDirs decides it, in its order (topic name too long for a future
dir, LogDirNotFound, an offline dir, a cordoned one, a replica not here), the response's
shape (per topic; the unauthorized answer per topic entry of each dir, as getErrorResponse), and
the move itself on a node of two dirs (ReplicaAlterLogDirsManager, stepped by hand): its copy
throttle, and the swap only once the controller has named the new dir (Kafka 4.4's
ReplicaAlterLogDirsThread.maybePromoteFutureReplica), the old dir asked back when the move is given up."""

from __future__ import annotations

import errno
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.alter_replica_log_dirs import AlterReplicaLogDirsHandler, names_log_dir, partition_dirs
from broker.replica_alter_log_dirs_manager import (
    ACCEPTED,
    COPY,
    MAX_COPY_BYTES,
    QUEUED,
    START_AT,
    SWAP,
    TRUNCATE,
    MoveStep,
    ReplicaAlterLogDirsManager,
    next_step,
    throttle_rate,
)
from broker.replica_manager import ReplicaManager
from broker.metadata.metadata_loader import MetadataLoader
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import TopicRecord
from broker.network import ClientInfo
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.meta_properties import MetaProperties, random_directory_id, write_meta_properties
from tests.unit.batch_factory import make_batch
from tests.unit.test_replica_manager_delta import A, ME, Node, partition

OTHER_BROKER = 2


@dataclass
class Metadata:
    node: Node

    @property
    def image(self) -> MetadataImage:
        return self.node.loader.image


class Denied:
    def authorize_cluster(self, ctx: RequestContext, operation: int, log_if_denied: bool = True) -> bool:
        return False


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data")
    # a-0 is hosted here, a-1 only on another broker.
    n.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)), partition(1, (OTHER_BROKER,)))
    yield n
    n.log_manager.shutdown()


def handler_of(node: Node, **kwargs: object) -> AlterReplicaLogDirsHandler:
    return AlterReplicaLogDirsHandler(node.rm, Metadata(node), ReplicaAlterLogDirsManager(node.rm), **kwargs)  # type: ignore[arg-type]


def alter(handler: AlterReplicaLogDirsHandler, dirs: list[tuple[str, list[tuple[str, list[int]]]]], version: int = 2) -> list[tuple[str, list[tuple[int, int]]]]:
    schema = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
    dir_cls, topic_cls = nested(schema, "AlterReplicaLogDir"), nested(schema, "AlterReplicaLogDirTopic")
    body = build(schema, dirs=tuple(build(dir_cls, path=d, topics=tuple(build(topic_cls, name=n, partitions=tuple(ps)) for n, ps in ts)) for d, ts in dirs))
    ctx = RequestContext(RequestHeader(int(ApiKey.ALTER_REPLICA_LOG_DIRS), version, 7, "c", 0), ClientInfo("c1", "c", "127.0.0.1:5000", "PLAINTEXT"))
    answer = handler(ctx, body)
    return [(r.topic_name, [(int(p.partition_index), int(p.error_code)) for p in r.partitions]) for r in answer.results]


def test_a_hosted_replica_is_in_the_one_log_dir_it_names_already(node: Node) -> None:
    handler = handler_of(node)
    log_dir = str(node.log_manager.log_dir.resolve())
    for version in (1, 2):
        assert alter(handler, [(log_dir, [("a", [0])])], version) == [("a", [(0, ErrorCode.none)])]
    assert node.rm.partitions[("a", 0)].log.dir.parent == node.log_manager.log_dir


def test_each_partition_gets_kafkas_error_in_kafkas_order(node: Node, tmp_path: Path) -> None:
    cordoned: list[Path] = []
    handler = handler_of(node, cordoned_log_dirs=lambda: cordoned)
    log_dir = str(node.log_manager.log_dir.absolute())
    long_name = "x" * 214  # its future dir `<name>-0.<32 hex>-future` is 256 characters long
    assert alter(handler, [(log_dir, [("a", [1, 7]), ("nope", [0]), ("x" * 213, [0]), (long_name, [0])])]) == [
        ("a", [(1, ErrorCode.replica_not_available), (7, ErrorCode.unknown_topic_or_partition)]),
        ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
        ("x" * 213, [(0, ErrorCode.unknown_topic_or_partition)]),
        (long_name, [(0, ErrorCode.invalid_topic_exception)]),
    ]
    # Not a log dir of this broker: another folder, a relative spelling of this one.
    assert alter(handler, [(str(tmp_path / "elsewhere"), [("a", [0])])]) == [("a", [(0, ErrorCode.log_dir_not_found)])]
    assert alter(handler, [("data", [("a", [0])])]) == [("a", [(0, ErrorCode.log_dir_not_found)])]
    # A partition named under two dirs takes the last, as Kafka's partitionDirs.
    assert alter(handler, [(str(tmp_path / "elsewhere"), [("a", [0])]), (log_dir, [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]

    cordoned.append(node.log_manager.log_dir)
    assert alter(handler, [(log_dir, [("a", [0, 1])])]) == [("a", [(0, ErrorCode.invalid_replica_assignment), (1, ErrorCode.invalid_replica_assignment)])]
    node.log_manager.failure_channel.maybe_add_offline_log_dir(node.log_manager.log_dir, "test", OSError(errno.EIO, "I/O error"))
    assert alter(handler, [(log_dir, [("a", [0])])]) == [("a", [(0, ErrorCode.kafka_storage_error)])]


def test_without_alter_on_the_cluster_every_entry_is_refused_as_sent(node: Node) -> None:
    handler = handler_of(node, auth=Denied())
    log_dir = str(node.log_manager.log_dir)
    denied = ErrorCode.cluster_authorization_failed
    assert alter(handler, [(log_dir, [("a", [0, 1])]), ("/x", [("a", [2]), ("b", [0])])]) == [
        ("a", [(0, denied), (1, denied)]),
        ("a", [(2, denied)]),
        ("b", [(0, denied)]),
    ]


def test_a_log_dir_is_named_by_its_absolute_or_resolved_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    link = tmp_path / "link"
    assert names_log_dir(str(link), link) and names_log_dir(str(real), link)
    assert not names_log_dir("link", link) and not names_log_dir(str(tmp_path), link)


def test_partition_dirs_keeps_the_last_dir_of_a_partition() -> None:
    schema = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    dir_cls, topic_cls = nested(schema, "AlterReplicaLogDir"), nested(schema, "AlterReplicaLogDirTopic")
    body = build(schema, dirs=(build(dir_cls, path="/a", topics=(build(topic_cls, name="t", partitions=(0, 1)),)), build(dir_cls, path="/b", topics=(build(topic_cls, name="t", partitions=(1,)),))))
    assert partition_dirs(body) == {("t", 0): "/a", ("t", 1): "/b"}


# -- the move, on a node of two dirs --------------------------------------------------------------------

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"


class TwoDirNode(Node):
    def __init__(self, dirs: list[Path]) -> None:
        for d in dirs:
            if not (d / "meta.properties").exists():
                write_meta_properties(d, MetaProperties(cluster_id=CLUSTER, node_id=ME, directory_id=random_directory_id()))
        self.log_manager = LogManager(dirs, LogConfig(), lambda: time.time_ns() // 1_000_000)
        self.log_manager.startup()
        self.rm = ReplicaManager(ME, self.log_manager, dict)
        self.loader = MetadataLoader()
        self.loader.install_publisher(self.rm)
        self.offset = 0
        self.mover = ReplicaAlterLogDirsManager(self.rm)
        self.handler = AlterReplicaLogDirsHandler(self.rm, Metadata(self), self.mover)  # type: ignore[arg-type]

    def records(self) -> int:
        plog = self.log_manager.get_log("a", 0)
        assert plog is not None
        return sum(h.records_count for h, _ in plog.batches(0))


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[tuple[TwoDirNode, Path, Path]]:
    a, b = tmp_path / "a", tmp_path / "b"
    n = TwoDirNode([a, b])
    n.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)))
    assert n.rm.partitions[("a", 0)].log.parent_dir == a
    yield n, a, b
    n.log_manager.shutdown()


def test_next_step_follows_the_current_log() -> None:
    assert next_step(0, 10, 4, None) == MoveStep(COPY, 4)
    assert next_step(0, 10, 10, None) == MoveStep(SWAP)
    assert next_step(0, 10, 12, None) == MoveStep(TRUNCATE, 10)
    assert next_step(0, 10, 8, 5) == MoveStep(TRUNCATE, 5)
    assert next_step(0, 10, 4, 5) == MoveStep(COPY, 4)
    assert next_step(6, 10, 4, None) == MoveStep(START_AT, 6)
    assert throttle_rate("9223372036854775807") is None and throttle_rate(None) is None and throttle_rate("1000") == 1000.0


def test_a_replica_moves_with_every_record_while_it_is_written(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    for _ in range(30):
        assert node.produce("a", 0) == ErrorCode.none
    assert alter(node.handler, [(str(b), [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]
    future = node.log_manager.future_logs[("a", 0)]
    assert future.parent_dir == b and future.dir.name.startswith("a-0.") and future.dir.name.endswith("-future")
    node.mover.step_all()
    assert node.produce("a", 0) == ErrorCode.none  # an append between two steps: copied too
    for _ in range(5):
        node.mover.step_all()
    assert ("a", 0) not in node.log_manager.future_logs
    moved = node.rm.partitions[("a", 0)].log
    assert moved.parent_dir == b and moved.dir == b / "a-0" and node.log_manager.get_log("a", 0) is moved
    assert node.records() == 31 and moved.leader_epoch_cache.latest_epoch == 0
    assert not (a / "a-0").exists() and not list(b.glob("*-future"))
    assert node.produce("a", 0) == ErrorCode.none and node.records() == 32
    # The controller is to hear the new dir; a move to the dir it is in now does nothing.
    assert ("a", 0) in node.log_manager.take_new_logs()
    assert alter(node.handler, [(str(b), [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]
    assert not node.log_manager.future_logs


def test_a_new_destination_replaces_the_future_log_and_the_current_dir_cancels(jbod: tuple[TwoDirNode, Path, Path], tmp_path: Path) -> None:
    node, a, b = jbod
    node.produce("a", 0)
    assert alter(node.handler, [(str(b), [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]
    first = node.log_manager.future_logs[("a", 0)].dir
    assert alter(node.handler, [(str(b), [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]
    assert node.log_manager.future_logs[("a", 0)].dir == first  # the same destination: the same future
    assert alter(node.handler, [(str(a), [("a", [0])])]) == [("a", [(0, ErrorCode.none)])]
    assert not node.log_manager.future_logs and not first.exists()
    assert node.rm.partitions[("a", 0)].log.parent_dir == a and node.records() == 1


def test_a_future_log_is_loaded_at_start_up_and_the_move_resumes(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    for _ in range(20):
        node.produce("a", 0)
    node.mover.step_all()
    alter(node.handler, [(str(b), [("a", [0])])])
    node.log_manager.shutdown()
    again = TwoDirNode([a, b])
    assert again.log_manager.future_logs[("a", 0)].parent_dir == b
    again.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)))
    for _ in range(5):
        again.mover.step_all()
    assert not again.log_manager.future_logs and again.log_manager.get_log("a", 0).parent_dir == b  # type: ignore[union-attr]
    assert again.records() == 20
    node.log_manager = again.log_manager  # shut down by the fixture


def test_a_future_log_alone_after_a_crash_in_the_swap_is_the_log(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    for _ in range(7):
        node.produce("a", 0)
    alter(node.handler, [(str(b), [("a", [0])])])
    node.mover.step_all()  # copied: caught up, not swapped yet
    assert ("a", 0) in node.log_manager.future_logs
    node.log_manager.shutdown()
    (a / "a-0").rename(a / f"a-0.{'0' * 32}-delete")  # the first of the swap's two renames
    again = TwoDirNode([a, b])
    assert not again.log_manager.future_logs and again.log_manager.get_log("a", 0).dir == b / "a-0"  # type: ignore[union-attr]
    assert again.records() == 7
    node.log_manager = again.log_manager  # shut down by the fixture


def test_the_destination_of_a_replica_not_here_yet_is_where_its_log_goes(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, _, b = jbod
    assert alter(node.handler, [(str(b), [("a", [3])])]) == [("a", [(3, ErrorCode.unknown_topic_or_partition)])]
    node.commit(partition(1, (OTHER_BROKER,)))
    assert alter(node.handler, [(str(b), [("a", [1])])]) == [("a", [(1, ErrorCode.replica_not_available)])]
    node.commit(partition(2, (1,)))  # would go to b anyway (the fewest): a-1's remembered dir is checked below
    node.commit(partition(1, (1,)))
    assert node.rm.partitions[("a", 1)].log.parent_dir == b
    assert not node.log_manager.preferred_log_dirs


# -- the swap waits for the controller --------------------------------------------------------------------


@dataclass
class Controller:
    """What the AssignmentsManager is asked (on_assignment); ``accept`` plays the controller's answer."""

    asked: list[tuple[tuple[str, int], uuid.UUID]] = field(default_factory=list)
    callbacks: dict[tuple[str, int], Callable[[], None]] = field(default_factory=dict)

    def on_assignment(self, key: tuple[str, int], directory: uuid.UUID, on_accepted: Callable[[], None] | None = None) -> None:
        self.asked.append((key, directory))
        if on_accepted is not None:
            self.callbacks[key] = on_accepted

    def accept(self, key: tuple[str, int]) -> None:
        self.callbacks.pop(key)()


def dir_id(node: TwoDirNode, log_dir: Path) -> uuid.UUID:
    directory = node.log_manager.directory_id(log_dir)
    assert directory is not None
    return directory


def test_the_swap_waits_until_the_controller_names_the_new_dir(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    controller = node.mover.assignments = Controller()
    for _ in range(10):
        node.produce("a", 0)
    alter(node.handler, [(str(b), [("a", [0])])])
    node.mover.step_all()  # copied: caught up
    assert not controller.asked
    node.mover.step_all()  # caught up: the new dir is asked for, no swap
    assert controller.asked == [(("a", 0), dir_id(node, b))]
    assert node.mover._promotions[("a", 0)].state == QUEUED
    node.produce("a", 0)  # copying goes on while the controller has not answered
    for _ in range(3):
        node.mover.step_all()
    assert node.log_manager.future_logs[("a", 0)].log_end_offset == 11
    assert node.rm.partitions[("a", 0)].log.parent_dir == a and len(controller.asked) == 1
    controller.accept(("a", 0))
    assert node.mover._promotions[("a", 0)].state == ACCEPTED
    node.produce("a", 0)  # accepted, behind again: copied first, then swapped
    node.mover.step_all()
    assert node.rm.partitions[("a", 0)].log.parent_dir == a
    node.mover.step_all()
    assert node.rm.partitions[("a", 0)].log.parent_dir == b and node.records() == 12
    assert not node.mover._promotions and not node.log_manager.future_logs


def test_a_move_given_up_after_asking_has_the_old_dir_asked_back(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    controller = node.mover.assignments = Controller()
    node.produce("a", 0)
    alter(node.handler, [(str(b), [("a", [0])])])
    node.mover.step_all()
    node.mover.step_all()
    assert controller.asked == [(("a", 0), dir_id(node, b))]
    # Cancelled (AlterReplicaLogDirs to the current dir): Kafka's "Reverting reassignment for canceled future replica".
    alter(node.handler, [(str(a), [("a", [0])])])
    assert controller.asked[1:] == [(("a", 0), dir_id(node, a))] and not node.mover._promotions
    controller.accept(("a", 0))  # the answer to the first request, too late: no swap
    node.mover.step_all()
    assert node.rm.partitions[("a", 0)].log.parent_dir == a and not node.log_manager.future_logs
    # Moved again, accepted, then sent to a new future log in the same dir: that one asks again.
    alter(node.handler, [(str(b), [("a", [0])])])
    node.mover.step_all()
    node.mover.step_all()
    controller.accept(("a", 0))
    node.log_manager.remove_future_log("a", 0)
    alter(node.handler, [(str(b), [("a", [0])])])
    assert controller.asked[3:] == [(("a", 0), dir_id(node, a))]
    node.mover.step_all()
    node.mover.step_all()
    assert controller.asked[4:] == [(("a", 0), dir_id(node, b))] and node.rm.partitions[("a", 0)].log.parent_dir == a


def test_after_a_restart_between_the_assignment_and_the_swap_the_move_asks_again(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, a, b = jbod
    node.mover.assignments = Controller()
    for _ in range(4):
        node.produce("a", 0)
    alter(node.handler, [(str(b), [("a", [0])])])
    node.mover.step_all()
    node.mover.step_all()
    node.mover.assignments.accept(("a", 0))  # type: ignore[attr-defined]
    node.log_manager.shutdown()  # before the swap
    again = TwoDirNode([a, b])
    controller = again.mover.assignments = Controller()
    again.commit(TopicRecord(name="a", topic_id=A), partition(0, (1,)))
    assert again.rm.partitions[("a", 0)].log.parent_dir == a and again.log_manager.future_logs[("a", 0)].parent_dir == b
    again.mover.step_all()
    assert controller.asked == [(("a", 0), dir_id(again, b))]
    controller.accept(("a", 0))
    again.mover.step_all()
    assert again.rm.partitions[("a", 0)].log.parent_dir == b and again.records() == 4
    node.log_manager = again.log_manager  # shut down by the fixture


def test_the_copy_takes_up_to_1_mib_while_within_the_rate_then_waits(jbod: tuple[TwoDirNode, Path, Path]) -> None:
    node, _, b = jbod
    now = [0]
    node.mover = ReplicaAlterLogDirsManager(node.rm, lambda: 512 * 1024, clock_ms=lambda: now[0])
    node.handler = AlterReplicaLogDirsHandler(node.rm, Metadata(node), node.mover)  # type: ignore[arg-type]
    for _ in range(30):  # 30 batches of 100 KiB
        batch = memoryview(make_batch([bytes(100 * 1024)]))
        assert node.rm.append_records([("a", 0, batch)], node.loader.image)[("a", 0)].error_code == ErrorCode.none
    alter(node.handler, [(str(b), [("a", [0])])])
    first = node.mover.step_all()
    assert 900 * 1024 < first <= MAX_COPY_BYTES  # a burst of whole batches, up to replica.fetch.max.bytes
    assert node.mover.step_all() == 0  # over 512 KiB/s (at least one 1 s window counted)
    now[0] = 1_500
    assert node.mover.step_all() == 0  # still 1 MiB over 1.5 s
    now[0] = 2_000
    assert 0 < node.mover.step_all() <= MAX_COPY_BYTES  # back within the rate: the next burst
    node.mover = ReplicaAlterLogDirsManager(node.rm, lambda: None, clock_ms=lambda: now[0])
    while node.mover.step_all():  # unbounded: a step after a step, then (no AssignmentsManager: Kafka's NOOP handler) the swap
        pass
    assert node.rm.partitions[("a", 0)].log.parent_dir == b and node.records() == 30
