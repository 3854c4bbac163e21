"""AlterReplicaLogDirs (API 34) on a real node of two log dirs, and Kafka 4.4's tools that send it.

A replica named to the other dir of its node moves there (a future log filled from the current
one, then swapped in), while producers write and consumers read, and across a SIGKILL in the
middle of the copy. kafka-reassign-partitions --execute/--verify and kafka-log-dirs print what they
print for a Kafka 4.4 node of two log dirs: the comparison test runs the same commands against one
(benchmarks/apache_kafka.py) and compares the outputs, the dirs masked.
"""

from __future__ import annotations

import datetime
import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from kio.schema.alter_replica_log_dirs.v1 import request as alter_v1
from kio.schema.alter_replica_log_dirs.v2 import request as alter_v2
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.static.primitive import i16, i32

from benchmarks.apache_kafka import KafkaReferenceCluster
from tests.integration.conftest import BrokerProcess, StartBroker, retire
from tests.integration.helpers import consume, consumer, produce_acked, wait_for
from tests.integration.test_acls import Secured, sasl_socket, secured  # noqa: F401  (the fixture)
from tests.integration.wire import exchange, request
from tests.kafka_tools import kafka_tool

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION = 0, 3, 17
CLUSTER_AUTHORIZATION_FAILED, INVALID_REPLICA_ASSIGNMENT, LOG_DIR_NOT_FOUND = 31, 39, 57
BROKER_RESOURCE = 4
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
TOPIC = "moved"
RECORDS = 300
# Its future dir `<name>-0.<32 hex>-future` is 256 characters: over Kafka's 255 (KAFKA-4893).
TOO_LONG = "x" * 214
Answer = list[tuple[str, list[tuple[int, int]]]]


def alter(bootstrap: str, dirs: list[tuple[str, list[tuple[str, list[int]]]]], version: int = 2, sock: socket.socket | None = None) -> Answer:
    m = alter_v2 if version == 2 else alter_v1
    body = m.AlterReplicaLogDirsRequest(
        dirs=tuple(m.AlterReplicaLogDir(path=d, topics=tuple(m.AlterReplicaLogDirTopic(name=n, partitions=tuple(i32(p) for p in ps)) for n, ps in ts)) for d, ts in dirs)
    )
    answer = exchange(sock, body) if sock is not None else request(bootstrap, body)
    return [(r.topic_name, [(int(p.partition_index), int(p.error_code)) for p in r.partitions]) for r in answer.results]


def by_topic(answer: Answer) -> dict[str, list[tuple[int, int]]]:
    """Kafka groups the results in a hash map: their order is not part of the answer."""
    return {topic: sorted(parts) for topic, parts in answer}


def create(bootstrap: str, name: str) -> int:
    topic = create_topics_v7.CreatableTopic(name=name, num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=())
    body = create_topics_v7.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    return int(request(bootstrap, body).topics[0].error_code)


def set_cordoned(bootstrap: str, value: str) -> tuple[int, str | None]:
    return set_broker_config(bootstrap, "cordoned.log.dirs", value)


def set_broker_config(bootstrap: str, name: str, value: str | None) -> tuple[int, str | None]:
    """Broker 1's ``name`` set to ``value``, or deleted (None)."""
    config = incremental_alter_configs.AlterableConfig(name=name, config_operation=0 if value is not None else 1, value=value)
    resource = incremental_alter_configs.AlterConfigsResource(resource_type=BROKER_RESOURCE, resource_name="1", configs=(config,))
    (response,) = request(bootstrap, incremental_alter_configs.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    return int(response.error_code), response.error_message


def home_and_away(data_dir: Path, other_dir: Path, topic: str = TOPIC) -> tuple[str, str]:
    """The dir that holds ``topic``-0 on disk, and the other one (the placement picks either). A
    swap renames the old log away before the new one takes the name: waited out."""
    assert wait_for(lambda: (data_dir / f"{topic}-0").is_dir() or (other_dir / f"{topic}-0").is_dir(), timeout_s=10, interval_s=0.05)
    if (data_dir / f"{topic}-0").is_dir():
        return str(data_dir), str(other_dir)
    return str(other_dir), str(data_dir)


def tool_run(kafka_lib: Path, bootstrap: str, home: str, away: str, plans: Path) -> dict[str, tuple[int, str]]:
    """kafka-reassign-partitions --execute then --verify with a plan whose log_dirs names the
    replica's dir, the other dir of the node (--verify again until the move is done), and a path
    that is no log dir; then kafka-log-dirs --describe. Each step's (exit code, stdout with the dirs masked)."""
    plans.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[int, str]] = {}

    def masked(text: str) -> str:
        return text.replace(away, "<other dir>").replace(home, "<log dir>")

    def verify(plan: Path) -> tuple[int, str]:
        verified = kafka_tool(kafka_lib, REASSIGN, "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file", str(plan))
        return verified.returncode, masked(verified.stdout)

    for name, target in (("same", home), ("other", away), ("bogus", "/not/a/log/dir")):
        plan = plans / f"{name}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": [target]}]}))
        executed = kafka_tool(kafka_lib, REASSIGN, "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(plan), "--timeout", "3000")
        out[f"{name} --execute"] = (executed.returncode, masked(executed.stdout))
        if name == "other":
            assert wait_for(lambda: "completed successfully" in verify(plan)[1], timeout_s=60, interval_s=0.5)
        out[f"{name} --verify"] = verify(plan)
    described = kafka_tool(kafka_lib, LOG_DIRS, "--bootstrap-server", bootstrap, "--describe", "--topic-list", TOPIC)
    # The size depends on how the producer batched the records: compared as "size" > 0 instead;
    # and the dirs by name, since which one is "<log dir>" depends on where the replica was placed.
    lines = re.sub(r'"size":[1-9][0-9]*', '"size":"<bytes>"', masked(described.stdout)).splitlines()
    listing = json.loads(lines[-1])
    for b in listing["brokers"]:
        b["logDirs"].sort(key=lambda d: d["logDir"])
    out["kafka-log-dirs --describe"] = (described.returncode, "\n".join([*lines[:-1], json.dumps(listing)]))
    return out


def wire_run(bootstrap: str, home: str, away: str) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """AlterReplicaLogDirs v1 and v2 with each error a node of two dirs answers; it ends with the
    replica asked back to ``home``."""
    return {
        "v1 mixed": by_topic(alter(bootstrap, [(home, [(TOPIC, [0, 7]), ("nope", [0]), (TOO_LONG, [0])])], version=1)),
        "v2 the replica's dir": by_topic(alter(bootstrap, [(home, [(TOPIC, [0])])])),
        "v2 the other dir of log.dirs": by_topic(alter(bootstrap, [(away, [(TOPIC, [0])])])),
        "v2 a relative path": by_topic(alter(bootstrap, [("data", [(TOPIC, [0])])])),
        "v2 no log dir": by_topic(alter(bootstrap, [("/not/a/log/dir", [(TOPIC, [0])])])),
        "v2 named twice, the last wins": by_topic(alter(bootstrap, [(away, [(TOPIC, [0])]), (home, [(TOPIC, [0])])])),
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path, Path]]:
    root = tmp_path_factory.mktemp("jbod")
    data_dir, other_dir = root / "data", root / "data2"
    broker = BrokerProcess(data_dir, {"log.dirs": f"{data_dir},{other_dir}"})
    broker.start()
    try:
        assert create(broker.bootstrap, TOPIC) == NONE
        assert len(produce_acked(broker.bootstrap, TOPIC, [b"r%d" % i for i in range(RECORDS)])) == RECORDS
        yield broker, data_dir, other_dir
    finally:
        retire(broker)


@pytest.fixture(scope="module")
def kbroker_tools(node: tuple[BrokerProcess, Path, Path], kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, tuple[int, str]]]:
    broker, data_dir, other_dir = node
    home, away = home_and_away(data_dir, other_dir)
    return home, away, tool_run(kafka_lib, broker.bootstrap, home, away, tmp_path_factory.mktemp("plans"))


def test_kafka_tools_move_the_replica_to_the_other_dir(node: tuple[BrokerProcess, Path, Path], kbroker_tools: tuple[str, str, dict[str, tuple[int, str]]]) -> None:
    broker, _, _ = node
    home, away, out = kbroker_tools
    completed = (
        0,
        "Status of partition reassignment:\nReassignment of partition moved-0 is completed.\n"
        "Reassignment of replica moved-0-1 completed successfully.\n"
        "Clearing broker-level throttles on broker 1\nClearing topic-level throttles on topic moved\n",
    )
    for name, target in (("same", "<log dir>"), ("other", "<other dir>")):
        assert out[f"{name} --execute"][0] == 0
        assert f"Successfully started moving log directory to {target} for replica moved-0 with broker 1 \n" in out[f"{name} --execute"][1]
        assert out[f"{name} --verify"] == completed
    code, stdout = out["bogus --execute"]
    assert code == 1
    assert "Error: Failed to alter dir for moved-0-1\n" in stdout
    assert "LogDirNotFoundException: The user-specified log directory is not found in the broker config." in stdout
    assert "Partition moved-0 on broker 1 is not being moved from log dir <other dir> to /not/a/log/dir.\n" in out["bogus --verify"][1]
    code, described = out["kafka-log-dirs --describe"]
    assert code == 0
    (brokers,) = json.loads(described.splitlines()[-1])["brokers"]
    by_dir = {d["logDir"]: d for d in brokers["logDirs"]}
    assert by_dir["<log dir>"]["partitions"] == []
    (moved,) = by_dir["<other dir>"]["partitions"]
    assert moved == {"partition": "moved-0", "size": "<bytes>", "offsetLag": 0, "isFuture": False}
    # Every record is still there, in the other log dir on disk; the old one holds nothing of it.
    assert [m.value() for m in consume(broker.bootstrap, TOPIC, 0, 0, RECORDS)] == [b"r%d" % i for i in range(RECORDS)]
    assert (Path(away) / "moved-0").is_dir() and not list(Path(away).glob("moved-0.*"))
    assert wait_for(lambda: not list(Path(home).glob("moved-0*")))


def test_each_partition_gets_kafkas_error(node: tuple[BrokerProcess, Path, Path]) -> None:
    broker, data_dir, other_dir = node
    home, away = home_and_away(data_dir, other_dir)
    answers = wire_run(broker.bootstrap, home, away)
    assert answers == {
        "v1 mixed": {TOPIC: [(0, NONE), (7, UNKNOWN_TOPIC_OR_PARTITION)], "nope": [(0, UNKNOWN_TOPIC_OR_PARTITION)], TOO_LONG: [(0, INVALID_TOPIC_EXCEPTION)]},
        "v2 the replica's dir": {TOPIC: [(0, NONE)]},
        "v2 the other dir of log.dirs": {TOPIC: [(0, NONE)]},
        "v2 a relative path": {TOPIC: [(0, LOG_DIR_NOT_FOUND)]},
        "v2 no log dir": {TOPIC: [(0, LOG_DIR_NOT_FOUND)]},
        "v2 named twice, the last wins": {TOPIC: [(0, NONE)]},
    }
    # Asked back to its dir last: whether the move to the other had finished or not, it ends there.
    assert wait_for(lambda: home_and_away(data_dir, other_dir)[0] == home and not future_dirs(data_dir, other_dir))
    assert [m.value() for m in consume(broker.bootstrap, TOPIC, 0, 0, RECORDS)] == [b"r%d" % i for i in range(RECORDS)]


def future_dirs(*log_dirs: Path) -> list[Path]:
    return [f for d in log_dirs for f in d.glob("*-future")]


def test_a_cordoned_log_dir_takes_no_replica(node: tuple[BrokerProcess, Path, Path]) -> None:
    """KIP-1066 in Kafka 4.4's alterReplicaLogDirs: before the replica's own dir is looked at."""
    broker, data_dir, _ = node
    assert set_cordoned(broker.bootstrap, str(data_dir)) == (NONE, None)
    try:
        assert wait_for(lambda: alter(broker.bootstrap, [(str(data_dir), [(TOPIC, [0])])]) == [(TOPIC, [(0, INVALID_REPLICA_ASSIGNMENT)])])
    finally:
        assert set_cordoned(broker.bootstrap, "") == (NONE, None)
    assert wait_for(lambda: alter(broker.bootstrap, [(str(data_dir), [(TOPIC, [0])])]) == [(TOPIC, [(0, NONE)])])


def test_without_alter_on_the_cluster_every_entry_is_refused(secured: Secured) -> None:  # noqa: F811
    denied = CLUSTER_AUTHORIZATION_FAILED
    with sasl_socket(secured, "alice") as sock:
        assert alter(secured.sasl, [("/a", [("t", [0, 1])]), ("/b", [("t", [2]), ("u", [0])])], sock=sock) == [
            ("t", [(0, denied), (1, denied)]),
            ("t", [(2, denied)]),
            ("u", [(0, denied)]),
        ]
    # A super user passes the check: the path is then no log dir of the node.
    assert alter(secured.plain, [("/a", [("t", [0])])]) == [("t", [(0, LOG_DIR_NOT_FOUND)])]


def test_the_same_as_kafka_44_with_two_log_dirs(
    node: tuple[BrokerProcess, Path, Path], kbroker_tools: tuple[str, str, dict[str, tuple[int, str]]], kafka_lib: Path, tmp_path: Path
) -> None:
    """The tools' outputs and the wire answers above, from a Kafka 4.4 node whose log.dirs is two
    dirs: identical once the dirs are masked."""
    broker, data_dir, other_dir = node
    root = tmp_path / "kafka"
    kafka_dir, kafka_other = root / "node1" / "data", root / "node1" / "data2"
    kafka = KafkaReferenceCluster(root, kafka_lib, nodes=1, overrides={"log.dirs": f"{kafka_dir},{kafka_other}"})
    theirs: dict[str, Any] = {}
    with kafka:
        kafka.start()
        assert create(kafka.bootstrap, TOPIC) == NONE
        assert len(produce_acked(kafka.bootstrap, TOPIC, [b"r%d" % i for i in range(RECORDS)])) == RECORDS
        home, away = home_and_away(kafka_dir, kafka_other)
        theirs["tools"] = tool_run(kafka_lib, kafka.bootstrap, home, away, tmp_path / "plans")
        home, away = home_and_away(kafka_dir, kafka_other)
        theirs["wire"] = wire_run(kafka.bootstrap, home, away)
    assert kbroker_tools[2] == theirs["tools"]
    assert wire_run(broker.bootstrap, *home_and_away(data_dir, other_dir)) == theirs["wire"]


# -- moves under load and across a crash -----------------------------------------------------------------

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
VALUE = b"x" * 1000


def replica_dirs(bootstrap: str, topic: str) -> list[tuple[str, bool, int, int]]:
    """DescribeLogDirs: each replica of ``topic``-0 as (dir, isFuture, size, offset lag)."""
    answer = request(bootstrap, describe_log_dirs_v4.DescribeLogDirsRequest(topics=None))
    return [
        (r.log_dir, bool(p.is_future_key), int(p.partition_size), int(p.offset_lag))
        for r in answer.results
        for t in r.topics
        if t.name == topic
        for p in t.partitions
        if int(p.partition_index) == 0
    ]


def moved_to(bootstrap: str, topic: str, log_dir: Path) -> bool:
    """The replica is in ``log_dir`` with no future replica left, as DescribeLogDirs and the disk say."""
    dirs = replica_dirs(bootstrap, topic)
    return len(dirs) == 1 and dirs[0][0] == str(log_dir.resolve()) and not dirs[0][1] and (log_dir / f"{topic}-0").is_dir()


def two_dir_node(broker_factory: StartBroker, tmp_path: Path, topic: str) -> tuple[BrokerProcess, Path, Path]:
    """A node of two dirs with ``topic``; returns it, the dir the replica is in and the other."""
    data_dir, other_dir = tmp_path / "broker0" / "data", tmp_path / "broker0" / "data2"
    broker = broker_factory({"log.dirs": f"{data_dir},{other_dir}"})
    assert create(broker.bootstrap, topic) == NONE
    assert wait_for(lambda: len(replica_dirs(broker.bootstrap, topic)) == 1)
    home, away = home_and_away(data_dir, other_dir, topic)
    return broker, Path(home), Path(away)


def test_a_partition_moves_while_a_producer_writes_and_a_consumer_reads(broker_factory: StartBroker, tmp_path: Path) -> None:
    topic = "busy"
    broker, home, away = two_dir_node(broker_factory, tmp_path, topic)
    assert len(produce_acked(broker.bootstrap, topic, [VALUE] * 1500)) == 1500
    # Throttled, so that the copy takes a few seconds of the producer's writes.
    assert set_broker_config(broker.bootstrap, THROTTLE, "500000") == (NONE, None)
    stop, flushed = threading.Event(), threading.Event()
    acked: list[int] = []
    errors: list[object] = []
    read: list[tuple[int, bytes | None]] = []

    def write() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=b"live%d" % i, partition=0, on_delivery=lambda err, msg: errors.append(err) if err else acked.append(msg.offset()))
            producer.poll(0.002)
            i += 1
        assert producer.flush(30) == 0
        flushed.set()

    def consume_all() -> None:
        c = consumer(broker.bootstrap)
        c.assign([TopicPartition(topic, 0, 0)])
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not (flushed.is_set() and acked and read and read[-1][0] >= max(acked)):
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    read.append((m.offset(), m.value()))
        finally:
            c.close()

    threads = [threading.Thread(target=write), threading.Thread(target=consume_all)]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: len(acked) > 100)
        assert alter(broker.bootstrap, [(str(away), [(topic, [0])])]) == [(topic, [(0, NONE)])]
        # The future replica shows in the other dir while it copies, behind the current one.
        assert wait_for(lambda: any(f for _, f, _, _ in replica_dirs(broker.bootstrap, topic)), interval_s=0.05)
        assert wait_for(lambda: moved_to(broker.bootstrap, topic, away), timeout_s=60)
        moved_at = len(acked)
        assert wait_for(lambda: len(acked) > moved_at + 100)  # and the writes go on into the moved log
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not errors
    # Every acknowledged record is there, read by the consumer across the move and read again after it.
    end = max(acked) + 1
    assert [o for o, _ in read] == list(range(end))
    again = consume(broker.bootstrap, topic, 0, 0, end, timeout_s=60)
    assert [m.value() for m in again] == [v for _, v in read]
    assert (away / f"{topic}-0").is_dir() and not list(away.glob(f"{topic}-0.*"))
    assert wait_for(lambda: not list(home.glob(f"{topic}-0*")))


def test_a_move_killed_midway_completes_after_the_restart(broker_factory: StartBroker, tmp_path: Path) -> None:
    topic = "crashy"
    broker, home, away = two_dir_node(broker_factory, tmp_path, topic)
    values = [b"%d-" % i + VALUE for i in range(3000)]
    assert len(produce_acked(broker.bootstrap, topic, values)) == len(values)
    # About 3 MB at 300 kB/s: the copy is under way for seconds.
    assert set_broker_config(broker.bootstrap, THROTTLE, "300000") == (NONE, None)
    assert alter(broker.bootstrap, [(str(away), [(topic, [0])])]) == [(topic, [(0, NONE)])]
    assert wait_for(lambda: any(f and size > 0 and lag > 0 for _, f, size, lag in replica_dirs(broker.bootstrap, topic)), interval_s=0.05)
    broker.kill()
    (future,) = away.glob(f"{topic}-0.*-future")
    assert (home / f"{topic}-0").is_dir()
    broker.start()
    assert set_broker_config(broker.bootstrap, THROTTLE, None) == (NONE, None)
    assert wait_for(lambda: moved_to(broker.bootstrap, topic, away), timeout_s=60)
    assert not future.exists() and not list(away.glob("*-future"))
    assert [m.value() for m in consume(broker.bootstrap, topic, 0, 0, len(values), timeout_s=60)] == values
    assert wait_for(lambda: not list(home.glob(f"{topic}-0*")))
    assert any(e.get("event") == "log_manager.future_log_loaded" for e in broker.log_events(current_run=True))
