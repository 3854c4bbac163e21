"""A real node with two log dirs (log.dirs=a,b), as Kafka 4.4 runs one (JBOD, KIP-858).

What Kafka 4.4 does with log.dirs=a,b, run here with benchmarks/apache_kafka.py: a topic of 5
partitions goes 3 to a and 2 to b, and a topic of one partition made next to b (the dir with the
fewest logs; which partition goes where follows the order its broker applies them in); each dir
holds its own recovery-point, log-start-offset, replication-offset and cleaner-offset checkpoints;
kafka-log-dirs --describe lists both dirs. A dir whose meta.properties cannot be read at start-up
is offline, listed with KafkaStorageException and no partition, and the node serves from the other;
a dir whose meta.properties is missing (the dir removed) stops the start: "No `meta.properties`
found in <dir> (have you run `kafka-storage.sh` to format the directory?)".
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.primitive import i16, i32

from tests.integration.conftest import START_TIMEOUT_S, BrokerProcess, StartBroker
from tests.integration.helpers import consume, produce_acked, wait_for
from tests.integration.wire import request
from tests.integration.test_storage_tool import CLUSTER, combined_node, kbroker, write_config
from tests.kafka_tools import kafka_tool
from tests.ports import free_port

NONE, KAFKA_STORAGE_ERROR = 0, 56
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
PARTITIONS = 4
RECORDS = 20


def two_dirs(broker_factory: StartBroker, tmp_path: Path, **extra: str) -> tuple[BrokerProcess, Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    return broker_factory({"log.dirs": f"{a},{b}", **extra}), a, b


def create(bootstrap: str, name: str, partitions: int) -> int:
    topic = create_topics_v7.CreatableTopic(name=name, num_partitions=i32(partitions), replication_factor=i16(1), assignments=(), configs=())
    body = create_topics_v7.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    return int(request(bootstrap, body).topics[0].error_code)


def on_disk(log_dir: Path, topic: str) -> set[int]:
    return {int(d.name.rsplit("-", 1)[1]) for d in log_dir.glob(f"{topic}-*") if d.is_dir() and not d.name.endswith("-delete")}


def described(bootstrap: str) -> dict[str, tuple[int, dict[str, list[int]]]]:
    """DescribeLogDirs: per dir its error and its partitions by topic."""
    answer = request(bootstrap, describe_log_dirs_v4.DescribeLogDirsRequest(topics=None))
    return {
        r.log_dir: (int(r.error_code), {t.name: sorted(int(p.partition_index) for p in t.partitions) for t in r.topics}) for r in answer.results
    }


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    body = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    (answer,) = request(bootstrap, body).topics
    return {int(p.partition_index): int(p.leader_id) for p in answer.partitions}


def test_partitions_spread_over_both_dirs_and_survive_a_restart(broker_factory: StartBroker, tmp_path: Path, kafka_lib: Path) -> None:
    broker, a, b = two_dirs(broker_factory, tmp_path)
    assert create(broker.bootstrap, "spread", PARTITIONS) == NONE
    assert wait_for(lambda: len(on_disk(a, "spread")) + len(on_disk(b, "spread")) == PARTITIONS)
    # Kafka's nextLogDirs: the dir with the fewest logs each time, so two and two.
    in_a, in_b = on_disk(a, "spread"), on_disk(b, "spread")
    assert len(in_a) == len(in_b) == PARTITIONS // 2 and not in_a & in_b
    for p in range(PARTITIONS):
        assert len(produce_acked(broker.bootstrap, "spread", [b"%d-%d" % (p, i) for i in range(RECORDS)], partition=p)) == RECORDS
    # The next topic's one partition goes to either (a tie), the one after that to the other.
    assert create(broker.bootstrap, "next", 1) == NONE
    assert create(broker.bootstrap, "after", 1) == NONE
    assert wait_for(lambda: len(on_disk(a, "next") | on_disk(b, "next")) == 1 and len(on_disk(a, "after") | on_disk(b, "after")) == 1)
    assert bool(on_disk(a, "next")) != bool(on_disk(a, "after"))

    dirs = described(broker.bootstrap)
    assert dirs[str(a.resolve())] == (NONE, {"spread": sorted(in_a), **{t: [0] for t in ("next", "after") if on_disk(a, t)}})
    assert dirs[str(b.resolve())] == (NONE, {"spread": sorted(in_b), **{t: [0] for t in ("next", "after") if on_disk(b, t)}})
    tool = kafka_tool(kafka_lib, LOG_DIRS, "--bootstrap-server", broker.bootstrap, "--describe", "--topic-list", "spread")
    assert tool.returncode == 0, tool.stderr
    (listed,) = json.loads(tool.stdout.splitlines()[-1])["brokers"]
    by_dir = {d["logDir"]: d for d in listed["logDirs"]}
    assert set(by_dir) == {str(a.resolve()), str(b.resolve())}
    for log_dir, held in ((a, in_a), (b, in_b)):
        entry = by_dir[str(log_dir.resolve())]
        assert entry["error"] is None
        assert sorted(p["partition"] for p in entry["partitions"]) == sorted(f"spread-{p}" for p in held)
        assert all(p["size"] > 0 and p["offsetLag"] == 0 and not p["isFuture"] for p in entry["partitions"])

    assert broker.stop() == 0
    for log_dir in (a, b):
        # Each dir its own checkpoints and clean-shutdown marker, of the logs it holds.
        assert (log_dir / ".kafka_cleanshutdown").exists()
        recovery = (log_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert {line.split()[0] for line in recovery[2:]} == {line.split()[0] for line in recovery[2:] if (log_dir / f"{line.split()[0]}-{line.split()[1]}").is_dir()}
    assert {ln.split()[1] for ln in (a / "recovery-point-offset-checkpoint").read_text().splitlines()[2:] if ln.startswith("spread ")} == {str(p) for p in in_a}
    broker.start()
    assert on_disk(a, "spread") == in_a and on_disk(b, "spread") == in_b
    for p in range(PARTITIONS):
        assert [m.value() for m in consume(broker.bootstrap, "spread", p, 0, RECORDS)] == [b"%d-%d" % (p, i) for i in range(RECORDS)]


def unreadable_meta_properties(log_dir: Path) -> None:
    """A meta.properties that cannot be read (EISDIR): the tests run as root, whom no mode stops."""
    (log_dir / "meta.properties").unlink()
    (log_dir / "meta.properties").mkdir()


def test_a_dir_whose_meta_properties_cannot_be_read_is_offline_and_the_node_serves_from_the_other(broker_factory: StartBroker, tmp_path: Path) -> None:
    broker, a, b = two_dirs(broker_factory, tmp_path)
    assert create(broker.bootstrap, "half", PARTITIONS) == NONE
    assert wait_for(lambda: len(on_disk(a, "half")) + len(on_disk(b, "half")) == PARTITIONS)
    in_a, in_b = on_disk(a, "half"), on_disk(b, "half")
    for p in range(PARTITIONS):
        assert len(produce_acked(broker.bootstrap, "half", [b"v%d" % p], partition=p)) == 1
    assert broker.stop() == 0
    unreadable_meta_properties(b)

    broker.start()
    events = broker.log_events(current_run=True)
    assert [e["dir"] for e in events if e["event"] == "log_dir.offline"] == [str(b)], broker.tail()
    dirs = described(broker.bootstrap)
    assert dirs[str(b.resolve())] == (KAFKA_STORAGE_ERROR, {})
    assert dirs[str(a.resolve())] == (NONE, {"half": sorted(in_a)})
    # The replicas in a lead and serve; those in b have no leader (their dir is not registered).
    assert wait_for(lambda: {p for p, leader in leaders(broker.bootstrap, "half").items() if leader == 1} == in_a)
    for p in in_a:
        assert [m.value() for m in consume(broker.bootstrap, "half", p, 0, 1)] == [b"v%d" % p]
    assert not on_disk(a, "half") & in_b  # no empty stand-in log in a for b's replicas


def test_a_removed_dir_stops_the_start_of_a_formatted_node_as_in_kafka(tmp_path: Path) -> None:
    """A node formatted with `kbroker storage format` (the zero-config node formats what it finds
    unformatted, a removed dir too, with a new directory id)."""
    node = BrokerProcess(tmp_path / "data1")
    node.config_file = write_config(tmp_path / "server.properties", combined_node(tmp_path, client_port=node.port, controller_port=free_port()))
    formatted = kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file))
    assert formatted.returncode == 0, formatted.stderr
    try:
        node.start()
        assert node.stop() == 0
        shutil.rmtree(tmp_path / "data2")
        node.launch()
        assert node.proc is not None and node.proc.wait(START_TIMEOUT_S) == 1, node.tail()
    finally:
        node.kill()
    lines = [e.get("line", "") for e in node.log_events(current_run=True) if e["event"] == "raw"]
    assert any(f"No meta.properties found in {tmp_path / 'data2'}" in line for line in lines), node.tail()


def test_a_dir_that_fails_at_run_time_goes_offline_and_its_replicas_lose_their_leader(broker_factory: StartBroker, tmp_path: Path) -> None:
    broker, a, b = two_dirs(broker_factory, tmp_path, **{"replica.high.watermark.checkpoint.interval.ms": "300"})
    assert create(broker.bootstrap, "failing", PARTITIONS) == NONE
    assert wait_for(lambda: len(on_disk(a, "failing")) + len(on_disk(b, "failing")) == PARTITIONS)
    in_a, in_b = on_disk(a, "failing"), on_disk(b, "failing")
    assert in_a and in_b
    assert wait_for(lambda: set(leaders(broker.bootstrap, "failing").values()) == {1})
    # The controller must know which dir holds each replica before it can act on b failing.
    assert wait_for(lambda: broker_assigned(broker))
    shutil.rmtree(b)
    append_to_a_removed_dir(broker.bootstrap, "failing", min(in_b))

    assert wait_for(lambda: described(broker.bootstrap)[str(b.resolve())][0] == KAFKA_STORAGE_ERROR)
    # The replicas in b have no leader left (their only replica's dir is offline); those in a lead on.
    assert wait_for(lambda: {p for p, leader in leaders(broker.bootstrap, "failing").items() if leader == 1} == in_a)
    assert broker.running
    for p in in_a:
        assert len(produce_acked(broker.bootstrap, "failing", [b"after"], partition=p)) == 1


def append_to_a_removed_dir(bootstrap: str, topic: str, partition: int) -> None:
    """A record appended to an open segment of the removed dir moves the partition's high watermark:
    the dir's next replication-offset-checkpoint fails (ENOENT) and takes it offline. Not acknowledged
    when another write to the dir failed first (the partition has no leader then)."""
    try:
        produce_acked(bootstrap, topic, [b"into a removed dir"], partition=partition, timeout_s=5)
    except AssertionError:
        pass


def broker_assigned(broker: BrokerProcess) -> bool:
    return any(e["event"] == "broker.replicas_assigned_to_dirs" for e in broker.log_events(current_run=True))
