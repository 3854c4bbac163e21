"""`kbroker storage` (kafka-storage.sh) and the start-up storage check of `kbroker serve`, as processes.

`storage info` on a directory Apache Kafka 4.4 formatted and ran, and on one kbroker formatted and
ran: it prints what Kafka's own `kafka-storage.sh info` prints on it, byte for byte, then what
kbroker found there, and changes no file.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from benchmarks.apache_kafka import KafkaReferenceCluster
from storage.meta_properties import read_meta_properties
from tests.integration.conftest import REPO, BrokerProcess
from tests.integration.forked_cli import ForkedCli
from tests.integration.helpers import create_topic
from tests.kafka_tools import kafka_tool
from tests.ports import free_port

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"
TIMEOUT_S = 60
STORAGE_TOOL = "kafka.tools.StorageTool"
TOPIC = "orders"


def kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m broker ARGS` from a cold start (other modules' tests format their nodes with it)."""
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)


# This module's commands: each a process of its own, forked from an interpreter that imported the
# broker once (tests/integration/forked_cli.py), as two dozen cold starts cost about 20 s.
Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    forks = ForkedCli(REPO, tmp_path_factory.mktemp("cli"))
    try:
        yield lambda *args: forks.run(*args, timeout_s=TIMEOUT_S)
    finally:
        forks.close()


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def write_config(path: Path, props: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def combined_node(tmp_path: Path, client_port: int = 19092, controller_port: int = 19093) -> dict[str, str]:
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "log.dirs": f"{tmp_path / 'data1'},{tmp_path / 'data2'}",
        "metadata.log.dir": str(tmp_path / "meta"),
    }


def test_random_uuid_format_and_info(tmp_path: Path, cli: Cli) -> None:
    uuids = {cli("storage", "random-uuid").stdout.strip() for _ in range(2)}
    assert len(uuids) == 2 and all(len(u) == 22 for u in uuids)
    config = write_config(tmp_path / "server.properties", combined_node(tmp_path))
    before = cli("storage", "info", "--config", str(config))
    assert before.returncode == 1 and f"{tmp_path / 'meta'} does not exist" in before.stdout
    formatted = cli("storage", "format", "--cluster-id", CLUSTER, "--config", str(config))
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'data1'} with cluster.id {CLUSTER}.",
        f"Formatting data directory {tmp_path / 'data2'} with cluster.id {CLUSTER}.",
        f"Formatting metadata directory {tmp_path / 'meta'} with cluster.id {CLUSTER}.",
    ]
    metas = [read_meta_properties(tmp_path / d) for d in ("data1", "data2", "meta")]
    assert {(m.cluster_id, m.node_id) for m in metas if m} == {(CLUSTER, 1)} and len({m.directory_id for m in metas if m}) == 3
    info = cli("storage", "info", "-c", str(config))
    assert info.returncode == 0 and f"cluster.id={CLUSTER}" in info.stdout and "Found log directories:" in info.stdout
    assert f"kbroker found in {tmp_path / 'data1'}:\n  last shutdown: none recorded (no .kafka_cleanshutdown, no partition, no checkpoint)\n" in info.stdout
    again = cli("storage", "format", "-t", CLUSTER, "-c", str(config))
    assert "is already formatted. Use --ignore-formatted" in one_error_line(again)
    ignored = cli("storage", "format", "-t", CLUSTER, "-c", str(config), "--ignore-formatted")
    assert ignored.returncode == 0 and ignored.stdout.strip() == "All of the log directories are already formatted."
    assert "Invalid cluster.id" in one_error_line(cli("storage", "format", "-t", "another", "-c", str(config), "-g"))
    (tmp_path / "data2" / "meta.properties").unlink()
    broken = cli("storage", "info", "-c", str(config))
    assert broken.returncode == 1 and f"{tmp_path / 'data2'} is not formatted." in broken.stdout


def test_kip_853_format_options(tmp_path: Path, cli: Cli) -> None:
    broker = write_config(
        tmp_path / "broker.properties",
        {"node.id": "4", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:19092", "controller.quorum.bootstrap.servers": "127.0.0.1:19093", "log.dirs": str(tmp_path / "b")},
    )
    assert "only use --standalone on a controller" in one_error_line(cli("storage", "format", "-t", CLUSTER, "-c", str(broker), "--standalone"))
    assert cli("storage", "format", "-t", CLUSTER, "-c", str(broker)).returncode == 0
    controller_props = {
        "node.id": "1",
        "process.roles": "controller",
        "listeners": "CONTROLLER://127.0.0.1:19093",
        "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
        "log.dirs": str(tmp_path / "c1"),
    }
    controller = write_config(tmp_path / "c1.properties", controller_props)
    assert "--standalone, --initial-controllers, or --no-initial-controllers" in one_error_line(cli("storage", "format", "-t", CLUSTER, "-c", str(controller)))
    initial = "1@127.0.0.1:19093:MvDxzVmcRsaTz33bUuRU6A,2@127.0.0.1:19095:07R5amHmR32VDA6jHkGbTA"
    ok = cli("storage", "format", "-t", CLUSTER, "-c", str(controller), "--initial-controllers", initial)
    assert ok.returncode == 0 and "dynamic metadata voter directory" in ok.stdout
    assert read_meta_properties(tmp_path / "c1").directory_id == "MvDxzVmcRsaTz33bUuRU6A"  # type: ignore[union-attr]
    assert "more than once" in one_error_line(cli("storage", "format", "-t", CLUSTER, "-c", str(controller), "-I", "1@h:1:MvDxzVmcRsaTz33bUuRU6A,1@h:2:07R5amHmR32VDA6jHkGbTA"))
    alone = write_config(tmp_path / "c3.properties", controller_props | {"node.id": "3", "log.dirs": str(tmp_path / "c3")})
    assert cli("storage", "format", "-t", CLUSTER, "-c", str(alone), "--standalone").returncode == 0
    static = write_config(tmp_path / "static.properties", combined_node(tmp_path / "static"))
    assert "cannot specify controller.quorum.voters" in one_error_line(cli("storage", "format", "-t", CLUSTER, "-c", str(static), "-s"))


def test_serve_refuses_unformatted_or_disagreeing_storage(tmp_path: Path, cli: Cli) -> None:
    config = write_config(tmp_path / "server.properties", combined_node(tmp_path))
    line = one_error_line(cli("serve", "--config", str(config)))
    assert "No meta.properties found in" in line and "kbroker storage format" in line
    assert cli("storage", "format", "-t", CLUSTER, "-c", str(config)).returncode == 0
    moved = cli("serve", "--config", str(config), "--override", "node.id=2", "--override", "controller.quorum.voters=2@127.0.0.1:19093")
    assert "Stored node id 1" in one_error_line(moved)
    assert f"but read {CLUSTER}" in one_error_line(cli("serve", "--config", str(config), "--override", "cluster.id=another"))


def test_a_formatted_node_starts_with_its_cluster_id(kbroker_ran: tuple[BrokerProcess, dict[int, int]]) -> None:
    [started] = kbroker_ran[0].events_named("broker.started")
    assert started["cluster_id"] == CLUSTER and started["node_id"] == 1


def test_the_zero_config_node_formats_itself_once(tmp_path: Path) -> None:
    node = BrokerProcess(tmp_path / "data")
    node.start()
    try:
        meta = read_meta_properties(tmp_path / "data")
        assert meta is not None and meta.node_id == 1 and len(meta.cluster_id) == 22
        node.restart()
        assert read_meta_properties(tmp_path / "data") == meta
        assert {e["cluster_id"] for e in node.events_named("broker.started")} == {meta.cluster_id}
    finally:
        node.stop()


# -- storage info against Kafka 4.4 ------------------------------------------------------------------------


def write_some(bootstrap: str) -> dict[int, int]:
    """An idempotent producer's records, a committed transaction and a group's committed offsets;
    returns each partition's log end offset as the broker answers it."""
    create_topic(bootstrap, TOPIC, partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(9):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"v")
    assert producer.flush(30) == 0
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "storage-info"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(3):
        transactional.produce(TOPIC, key=b"t%d" % i, value=b"txn")
    transactional.commit_transaction(30)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "storage-info", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        group.subscribe([TOPIC])
        read = 0
        deadline = time.monotonic() + TIMEOUT_S
        while read < 12 and time.monotonic() < deadline:
            message = group.poll(0.5)
            read += message is not None and message.error() is None
        assert read == 12
        group.commit(asynchronous=False)
    finally:
        group.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    latest = admin.list_offsets({TopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(3)})
    return {tp.partition: future.result(10).offset for tp, future in latest.items()}


@pytest.fixture(scope="module")
def kafka_ran(kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], dict[int, int]]:
    """One Kafka 4.4 node's config and data dir, after it was formatted, written to and stopped
    (SIGTERM); and its partitions' log end offsets."""
    cluster = KafkaReferenceCluster(tmp_path_factory.mktemp("kafka"), kafka_lib, nodes=1)
    with cluster:
        cluster.start()
        ends = write_some(cluster.bootstrap)
        cluster.nodes[1].stop()
    return cluster.nodes[1].config_file, [cluster.nodes[1].data_dir], ends


@pytest.fixture(scope="module")
def kbroker_ran(tmp_path_factory: pytest.TempPathFactory, cli: Cli) -> tuple[BrokerProcess, dict[int, int]]:
    """A kbroker node formatted by `kbroker storage format` (two log dirs and a metadata log dir),
    written to as write_some does and stopped; and its partitions' log end offsets."""
    root = tmp_path_factory.mktemp("kbroker")
    node = BrokerProcess(root / "data1")
    one_node = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0"}
    node.config_file = write_config(root / "server.properties", combined_node(root, client_port=node.port, controller_port=free_port()) | one_node)
    assert cli("storage", "format", "-t", CLUSTER, "-c", str(node.config_file)).returncode == 0
    node.start()
    try:
        ends = write_some(node.bootstrap)
    finally:
        node.stop()
    return node, ends


def files_and_times(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def directory_blocks(text: str) -> dict[str, list[str]]:
    """What `storage info` found, by directory: the lines of each "kbroker found in DIR:" block."""
    blocks: dict[str, list[str]] = {}
    for block in text.split("\n\n"):
        head, _, rest = block.partition("\n")
        if head.startswith("kbroker found in "):
            blocks[head.removeprefix("kbroker found in ").removesuffix(":")] = rest.splitlines()
    return blocks


@pytest.mark.parametrize("written_by", ["Apache Kafka", "kbroker"])
def test_storage_info_prints_what_kafka_prints_then_what_kbroker_found(
    written_by: str, kafka_ran: tuple[Path, list[Path], dict[int, int]], kbroker_ran: tuple[BrokerProcess, dict[int, int]], kafka_lib: Path, cli: Cli
) -> None:
    if written_by == "Apache Kafka":
        config, dirs, ends = kafka_ran
    else:
        node, ends = kbroker_ran
        assert node.config_file is not None
        config, dirs = node.config_file, [node.data_dir.parent / d for d in ("data1", "data2", "meta")]
    theirs = kafka_tool(kafka_lib, STORAGE_TOOL, "info", "-c", str(config))
    before = {d: files_and_times(d) for d in dirs}
    ours = cli("storage", "info", "-c", str(config))
    verbose = cli("storage", "info", "--verbose", "-c", str(config))
    assert {d: files_and_times(d) for d in dirs} == before
    assert theirs.returncode == ours.returncode == verbose.returncode == 0, (theirs, ours, verbose)
    assert theirs.stdout.startswith("Found log director") and ours.stdout.startswith(theirs.stdout) and verbose.stdout.startswith(theirs.stdout)
    found = directory_blocks(ours.stdout[len(theirs.stdout) :])
    assert list(found) == [str(d) for d in dirs]
    log_dirs = [d for d in dirs if (d / ".kafka_cleanshutdown").exists()]
    assert len(log_dirs) == len(dirs) - (written_by == "kbroker")  # kbroker's metadata.log.dir is no log dir
    for d in log_dirs:
        epoch = json.loads((d / ".kafka_cleanshutdown").read_text())["brokerEpoch"]
        assert found[str(d)][0] == f"  last shutdown: clean (.kafka_cleanshutdown, brokerEpoch {epoch})"
    trailer = "without kbroker's trailer" if written_by == "Apache Kafka" else "with kbroker's trailer"
    writers = [line for d in log_dirs for line in found[str(d)] if line.startswith(f"  written by: {written_by}: ")]
    assert writers and all(trailer in line for line in writers)
    # Each log dir's line for the topic: "topic orders: N partitions, log start..end offsets: 0: 0..4, 2: 0..6".
    shown = [line.split("offsets: ", 1)[1] for d in log_dirs for line in found[str(d)] if line.startswith(f"  topic {TOPIC}: ")]
    assert dict(entry.split(": ") for line in shown for entry in line.split(", ")) == {str(p): f"0..{end}" for p, end in ends.items()}
    internal = [line for d in dirs for line in found[str(d)] if line.startswith("  internal topics: ")]
    counts = [(topic, int(n)) for line in internal for topic, n in re.findall(r"(__\w+) \((\d+) partitions?\)", line)]
    assert {topic: sum(n for t, n in counts if t == topic) for topic, _ in counts} == {"__consumer_offsets": 50, "__transaction_state": 50}
    metadata = next(lines for lines in found.values() if any(line.startswith("  metadata log: log start..end offsets 0..") for line in lines))
    quorum = next(line for line in metadata if line.startswith("  quorum-state: "))
    assert ("data_version 0" if written_by == "Apache Kafka" else "data_version 1") in quorum and "leader 1" in quorum
    assert all(lines[-1] == "  at start, kbroker would recover nothing" for lines in found.values())
