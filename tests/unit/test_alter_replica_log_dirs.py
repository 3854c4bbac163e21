"""AlterReplicaLogDirs on a real ReplicaManager and log dirs: each partition's error as Kafka 4.4's
ReplicaManager.alterReplicaLogDirs decides it, in its order (topic name too long for a future
dir, LogDirNotFound, an offline dir, a cordoned one, a replica not here), the response's
shape (per topic; the unauthorized answer per topic entry of each dir, as getErrorResponse), and
the move itself on a node of two dirs (ReplicaAlterLogDirsManager, stepped by hand)."""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.alter_replica_log_dirs import AlterReplicaLogDirsHandler, names_log_dir, partition_dirs
from broker.replica_alter_log_dirs_manager import COPY, START_AT, SWAP, TRUNCATE, MoveStep, ReplicaAlterLogDirsManager, next_step, throttle_rate
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
