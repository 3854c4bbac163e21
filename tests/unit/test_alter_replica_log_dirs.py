"""AlterReplicaLogDirs on a real ReplicaManager and log dir: each partition's error as Kafka 4.4's
ReplicaManager.alterReplicaLogDirs decides it, in its order (topic name too long for a future
dir, LogDirNotFound, an offline dir, a cordoned one, a replica not here), and the response's
shape (per topic; the unauthorized answer per topic entry of each dir, as getErrorResponse)."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.alter_replica_log_dirs import AlterReplicaLogDirsHandler, names_log_dir, partition_dirs
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import TopicRecord
from broker.network import ClientInfo
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from tests.unit.test_replica_manager_delta import A, Node, partition

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


def alter(handler: AlterReplicaLogDirsHandler, dirs: list[tuple[str, list[tuple[str, list[int]]]]], version: int = 2) -> list[tuple[str, list[tuple[int, int]]]]:
    schema = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
    dir_cls, topic_cls = nested(schema, "AlterReplicaLogDir"), nested(schema, "AlterReplicaLogDirTopic")
    body = build(schema, dirs=tuple(build(dir_cls, path=d, topics=tuple(build(topic_cls, name=n, partitions=tuple(ps)) for n, ps in ts)) for d, ts in dirs))
    ctx = RequestContext(RequestHeader(int(ApiKey.ALTER_REPLICA_LOG_DIRS), version, 7, "c", 0), ClientInfo("c1", "c", "127.0.0.1:5000", "PLAINTEXT"))
    answer = handler(ctx, body)
    return [(r.topic_name, [(int(p.partition_index), int(p.error_code)) for p in r.partitions]) for r in answer.results]


def test_a_hosted_replica_is_in_the_one_log_dir_it_names_already(node: Node) -> None:
    handler = AlterReplicaLogDirsHandler(node.rm, Metadata(node))  # type: ignore[arg-type]
    log_dir = str(node.log_manager.log_dir.resolve())
    for version in (1, 2):
        assert alter(handler, [(log_dir, [("a", [0])])], version) == [("a", [(0, ErrorCode.none)])]
    assert node.rm.partitions[("a", 0)].log.dir.parent == node.log_manager.log_dir


def test_each_partition_gets_kafkas_error_in_kafkas_order(node: Node, tmp_path: Path) -> None:
    cordoned: list[Path] = []
    handler = AlterReplicaLogDirsHandler(node.rm, Metadata(node), cordoned_log_dirs=lambda: cordoned)  # type: ignore[arg-type]
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
    handler = AlterReplicaLogDirsHandler(node.rm, Metadata(node), Denied())  # type: ignore[arg-type]
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
