"""AlterReplicaLogDirs (API 34) on a real node, and Kafka 4.4's tools that send it.

A kbroker node keeps one log dir, the first of `log.dirs` (docs/configuration.md), so its
replicas are always in the dir a request can name, and no replica moves: the node here is given
a second entry of `log.dirs`, which it does not use and which is LOG_DIR_NOT_FOUND, as for a
Kafka 4.4 node whose log.dirs lacks it. kafka-reassign-partitions --execute/--verify and
kafka-log-dirs print what they print for a Kafka 4.4 node with one log dir: the last test runs
the same commands against one (benchmarks/apache_kafka.py) and compares the outputs.
"""

from __future__ import annotations

import datetime
import json
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest
from kio.schema.alter_replica_log_dirs.v1 import request as alter_v1
from kio.schema.alter_replica_log_dirs.v2 import request as alter_v2
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.static.primitive import i16, i32

from benchmarks.apache_kafka import KafkaReferenceCluster
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import consume, produce_acked, wait_for
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
    config = incremental_alter_configs.AlterableConfig(name="cordoned.log.dirs", config_operation=0, value=value)
    resource = incremental_alter_configs.AlterConfigsResource(resource_type=BROKER_RESOURCE, resource_name="1", configs=(config,))
    (response,) = request(bootstrap, incremental_alter_configs.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    return int(response.error_code), response.error_message


def tool_run(kafka_lib: Path, bootstrap: str, data_dir: str, other_dir: str, plans: Path) -> dict[str, tuple[int, str]]:
    """kafka-reassign-partitions --execute then --verify with a plan whose log_dirs names the
    replica's dir, another dir of the node's config, and a path that is no log dir; then
    kafka-log-dirs --describe. Each step's (exit code, stdout with the dirs masked)."""
    plans.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[int, str]] = {}

    def masked(text: str) -> str:
        return text.replace(other_dir, "<other dir>").replace(data_dir, "<log dir>")

    for name, target in (("same", data_dir), ("other", other_dir), ("bogus", "/not/a/log/dir")):
        plan = plans / f"{name}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": [target]}]}))
        executed = kafka_tool(kafka_lib, REASSIGN, "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(plan), "--timeout", "3000")
        out[f"{name} --execute"] = (executed.returncode, masked(executed.stdout))
        verified = kafka_tool(kafka_lib, REASSIGN, "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file", str(plan))
        out[f"{name} --verify"] = (verified.returncode, masked(verified.stdout))
    described = kafka_tool(kafka_lib, LOG_DIRS, "--bootstrap-server", bootstrap, "--describe", "--topic-list", TOPIC)
    out["kafka-log-dirs --describe"] = (described.returncode, masked(described.stdout))
    return out


def wire_run(bootstrap: str, data_dir: str, other_dir: str) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """AlterReplicaLogDirs v1 and v2 with each error a one-dir node answers."""
    return {
        "v1 mixed": by_topic(alter(bootstrap, [(data_dir, [(TOPIC, [0, 7]), ("nope", [0]), (TOO_LONG, [0])])], version=1)),
        "v2 the replica's dir": by_topic(alter(bootstrap, [(data_dir, [(TOPIC, [0])])])),
        "v2 another dir of log.dirs": by_topic(alter(bootstrap, [(other_dir, [(TOPIC, [0])])])),
        "v2 a relative path": by_topic(alter(bootstrap, [("data", [(TOPIC, [0])])])),
        "v2 named twice, the last wins": by_topic(alter(bootstrap, [(other_dir, [(TOPIC, [0])]), (data_dir, [(TOPIC, [0])])])),
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
def kbroker_tools(node: tuple[BrokerProcess, Path, Path], kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    broker, data_dir, other_dir = node
    return tool_run(kafka_lib, broker.bootstrap, str(data_dir), str(other_dir), tmp_path_factory.mktemp("plans"))


def test_kafka_tools_name_the_one_log_dir(node: tuple[BrokerProcess, Path, Path], kbroker_tools: dict[str, tuple[int, str]]) -> None:
    broker, data_dir, _ = node
    out = kbroker_tools
    assert out["same --execute"][0] == 0
    assert "Successfully started moving log directory to <log dir> for replica moved-0 with broker 1 \n" in out["same --execute"][1]
    assert out["same --verify"] == (
        0,
        "Status of partition reassignment:\nReassignment of partition moved-0 is completed.\n"
        "Reassignment of replica moved-0-1 completed successfully.\n"
        "Clearing broker-level throttles on broker 1\nClearing topic-level throttles on topic moved\n",
    )
    for name, target in (("other", "<other dir>"), ("bogus", "/not/a/log/dir")):
        code, stdout = out[f"{name} --execute"]
        assert code == 1
        assert "Error: Failed to alter dir for moved-0-1\n" in stdout
        assert "LogDirNotFoundException: The user-specified log directory is not found in the broker config." in stdout
        assert f"Partition moved-0 on broker 1 is not being moved from log dir <log dir> to {target}.\n" in out[f"{name} --verify"][1]
    code, described = out["kafka-log-dirs --describe"]
    assert code == 0
    (brokers,) = json.loads(described.splitlines()[-1])["brokers"]
    assert brokers["logDirs"] == [
        {"partitions": [{"partition": "moved-0", "size": brokers["logDirs"][0]["partitions"][0]["size"], "offsetLag": 0, "isFuture": False}], "error": None, "logDir": "<log dir>"}
    ]
    # Every record is still there, in the one log dir on disk.
    assert [m.value() for m in consume(broker.bootstrap, TOPIC, 0, 0, RECORDS)] == [b"r%d" % i for i in range(RECORDS)]
    assert (data_dir / "moved-0").is_dir() and not any(data_dir.glob("moved-0.*-future"))


def test_each_partition_gets_kafkas_error(node: tuple[BrokerProcess, Path, Path]) -> None:
    broker, data_dir, other_dir = node
    answers = wire_run(broker.bootstrap, str(data_dir), str(other_dir))
    assert answers == {
        "v1 mixed": {TOPIC: [(0, NONE), (7, UNKNOWN_TOPIC_OR_PARTITION)], "nope": [(0, UNKNOWN_TOPIC_OR_PARTITION)], TOO_LONG: [(0, INVALID_TOPIC_EXCEPTION)]},
        "v2 the replica's dir": {TOPIC: [(0, NONE)]},
        "v2 another dir of log.dirs": {TOPIC: [(0, LOG_DIR_NOT_FOUND)]},
        "v2 a relative path": {TOPIC: [(0, LOG_DIR_NOT_FOUND)]},
        "v2 named twice, the last wins": {TOPIC: [(0, NONE)]},
    }


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


def test_the_same_as_kafka_44_with_one_log_dir(node: tuple[BrokerProcess, Path, Path], kbroker_tools: dict[str, tuple[int, str]], kafka_lib: Path, tmp_path: Path) -> None:
    """The tools' outputs and the wire answers above, from a Kafka 4.4 node whose log.dirs is its
    one dir: identical once the dirs are masked."""
    broker, data_dir, other_dir = node
    kafka = KafkaReferenceCluster(tmp_path / "kafka", kafka_lib, nodes=1)
    theirs: dict[str, Any] = {}
    with kafka:
        kafka.start()
        kafka_node = kafka.nodes[1]
        kafka_dir, kafka_other = str(kafka_node.data_dir), str(kafka_node.node_dir / "data2")
        assert create(kafka.bootstrap, TOPIC) == NONE
        assert len(produce_acked(kafka.bootstrap, TOPIC, [b"r%d" % i for i in range(RECORDS)])) == RECORDS
        theirs["tools"] = tool_run(kafka_lib, kafka.bootstrap, kafka_dir, kafka_other, tmp_path / "plans")
        theirs["wire"] = wire_run(kafka.bootstrap, kafka_dir, kafka_other)
    assert kbroker_tools == theirs["tools"]
    assert wire_run(broker.bootstrap, str(data_dir), str(other_dir)) == theirs["wire"]
