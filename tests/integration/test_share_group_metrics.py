"""KIP-932's share-group metrics against a real broker (docs/metrics.md): a confluent-kafka
ShareConsumer in explicit acknowledgement mode accepts, releases and rejects records, a second one
holds records until their acquisition locks time out, and /metrics is scraped over HTTP and read
with prometheus_client's parser. The counts asserted are those Kafka 4.4 gives for the same run
(ShareGroupMetrics counts each acknowledged record by its type, SharePartitionMetrics each record
whose lock timed out); the request meters only move, as a client's request count is its own.
The second test runs the same against an Apache Kafka 4.4 node with remote JMX, reads its share
MBeans with Kafka's JmxTool and checks that kbroker shows each of them (those it builds) under the
JMX exporter's name, with the same labels, and the same counts where the run fixes them.

Every wait is bounded; a lock is only asserted to have expired, never when."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from benchmarks.apache_kafka import SERVER_JVM_OPTS, KafkaReferenceCluster
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic, produce_acked
from tests.integration.test_prometheus_metrics import scrape, value
from tests.integration.test_share_fetch_wire import FAST_SHARE_HEARTBEAT, WAIT_S, set_group_configs, share_node_with
from tests.ports import free_ports

T = TypeVar("T")
RECORDS = 40
HELD = 5
LOCK_MS = 2000


def share_metrics_node(start: StartBroker) -> tuple[BrokerProcess, int]:
    (port,) = free_ports(1)
    node = share_node_with(
        start,
        {
            "metrics.listener": f"http://127.0.0.1:{port}",
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.min.record.lock.duration.ms": "1000",
        },
    )
    return node, port


def acknowledge_all(bs: str, group: str, topic: str) -> dict[str, int]:
    """Every record of the topic's first RECORDS offsets acknowledged: offsets 4n+1 released on
    their first delivery (then accepted), 4n+2 rejected, the others accepted. Returns the counts."""
    counts = {"accept": 0, "release": 0, "reject": 0}
    seen: set[int] = set()
    done: set[int] = set()
    consumer = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(done) < RECORDS:
            assert time.monotonic() < deadline, f"acknowledged {len(done)} of {RECORDS}: {counts}"
            for m in consumer.poll(0.5):
                assert m.error() is None, m.error()
                offset = m.offset()
                if offset % 4 == 1 and offset not in seen:
                    consumer.acknowledge(m, AcknowledgeType.RELEASE)
                    counts["release"] += 1
                elif offset % 4 == 2:
                    consumer.acknowledge(m, AcknowledgeType.REJECT)
                    counts["reject"] += 1
                    done.add(offset)
                else:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    counts["accept"] += 1
                    done.add(offset)
                seen.add(offset)
            consumer.commit_sync()
    finally:
        consumer.close()
    return counts


@contextmanager
def holding(bs: str, group: str, topic: str) -> Iterator[list[int]]:
    """HELD new records, acquired by a member that never acknowledges them (nor polls again)."""
    produce_acked(bs, topic, [b"late%d" % i for i in range(HELD)], linger_ms=0)
    holder = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    try:
        holder.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        held: list[int] = []
        while not held:
            assert time.monotonic() < deadline, "the holder got no records"
            held = [m.offset() for m in holder.poll(0.5) if m.error() is None]
        yield held
    finally:
        holder.close()


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_share_group_metrics_move_as_kafkas(broker_factory: StartBroker) -> None:
    node, port = share_metrics_node(broker_factory)
    bs = node.bootstrap
    group, topic = "metrics-share-g", "metrics-share-t"
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    produce_acked(bs, topic, [b"v%d" % i for i in range(RECORDS)], linger_ms=0)
    before = scrape(port)
    for name in ("totalsharefetchrequests", "failedsharefetchrequests", "totalshareacknowledgementrequests", "failedshareacknowledgementrequests"):
        assert value(before, f"kafka_server_brokertopicmetrics_{name}_total") == 0, name
        assert value(before, f"kafka_server_brokertopicmetrics_{name}_total", topic=topic) is None, name
    assert value(before, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == 0

    counts = acknowledge_all(bs, group, topic)
    assert counts == {"accept": 30, "release": 10, "reject": 10}
    s = scrape(port)
    acks = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
    assert {t: value(s, acks, ackType=t) for t in ("Accept", "Release", "Reject", "Renew")} == {"Accept": 30, "Release": 10, "Reject": 10, "Renew": 0}
    assert value(s, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", topic=topic) >= 1
    assert value(s, "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", topic=topic) >= 1
    assert value(s, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total") >= value(s, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", topic=topic)
    assert value(s, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total") == 0
    assert value(s, "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total") == 0
    assert value(s, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
    assert value(s, "kafka_server_sharegroupmetrics_requesttopicpartitionsfetchratio_count", group=group) >= 1
    assert value(s, "kafka_server_sharegroupmetrics_requesttopicpartitionsfetchratio", group=group, quantile="0.5") == 100
    assert value(s, "kafka_server_sharegroupmetrics_topicpartitionsacquiretimems_count", group=group) >= 1
    # Joining, and the share partition's initialization after it, bumped the group's epoch; leaving is no rebalance.
    assert value(s, "kafka_server_group_coordinator_metrics_share_group_rebalance_count") == 2
    assert value(s, "kafka_server_group_coordinator_metrics_share_group_count", state="Empty") == 1  # the consumer left
    assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1
    # The acknowledgements were written to the share coordinator before they were answered.
    assert value(s, "kafka_server_share_coordinator_metrics_write_total") >= 1
    assert value(s, "kafka_server_share_coordinator_metrics_write_latency_max") >= value(s, "kafka_server_share_coordinator_metrics_write_latency_avg") >= 0
    assert value(s, "kafka_server_share_coordinator_metrics_num_partitions", state="active") >= 1
    labels = {"group": group, "topic": topic, "partition": "0"}
    assert value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 0
    assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 0

    with holding(bs, group, topic) as held:
        assert held == list(range(RECORDS, RECORDS + HELD))
        s = scrape(port)
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == HELD
        assert value(s, "kafka_server_sharepartitionmetrics_inflightbatchcount", **labels) >= 1
        assert value(s, "kafka_server_group_coordinator_metrics_share_group_count", state="Stable") == 1
        assert value(s, "kafka_server_sharesessioncache_sharesessionscount") >= 1
        assert value(s, "kafka_server_sharesessioncache_sharepartitionscount") >= 1
        wait_until(lambda: value(scrape(port), "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) >= HELD, "the held records' locks timing out")
    s = scrape(port)
    assert value(s, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", topic=topic) is None


# -- the same names as Kafka 4.4's JMX ------------------------------------------------------------------

SHARE_MBEANS = (
    "kafka.server:type=ShareGroupMetrics,*",
    "kafka.server:type=SharePartitionMetrics,*",
    "kafka.server:type=ShareSessionCache,*",
    "kafka.server:type=BrokerTopicMetrics,name=*Share*,*",
    "kafka.server:type=group-coordinator-metrics,*",
    "kafka.server:type=share-coordinator-metrics,*",
)
# Of group-coordinator-metrics and share-coordinator-metrics, the attributes kbroker builds (the
# others are the coordinator runtimes' event loop metrics, or the other group protocols').
BUILT_ATTRIBUTES = frozenset(
    {"share-group-count", "group-count", "share-group-rebalance-count", "share-group-rebalance-rate", "write-total", "write-rate", "write-latency-avg", "write-latency-max", "num-partitions", "last-pruned-offset"}
)
# Yammer metrics of these types kbroker does not build (docs/metrics.md says why).
NOT_BUILT = frozenset({"FetchLockTimeMs", "FetchLockRatio", "InFlightBatchMessageCount", "ShareSessionEvictionsPerSec"})


def jmx_values(lib: Path, jmx_port: int) -> dict[str, float]:
    """Every attribute of SHARE_MBEANS, read once with Kafka's JmxTool: ``mbean:attribute`` -> value."""
    objects = [arg for mbean in SHARE_MBEANS for arg in ("--object-name", mbean)]
    url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{jmx_port}/jmxrmi"
    out = subprocess.run(
        ["java", "-Xmx256M", "-cp", f"{lib}/*", "org.apache.kafka.tools.JmxTool", "--jmx-url", url, "--one-time", "true", "--report-format", "properties", *objects],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    values = {}
    for line in out.splitlines():
        key, _, number = line.rpartition("=")
        if key.startswith("kafka.") and ":" in key.split(",")[-1]:
            try:
                values[key] = float(number)
            except ValueError:
                continue
    return values


def prometheus_series(key: str) -> tuple[str, frozenset[tuple[str, str]]] | None:
    """The series kbroker shows for Kafka's ``mbean:attribute`` (None: not one kbroker builds)."""
    mbean, _, attribute = key.rpartition(":")
    properties = dict(p.split("=", 1) for p in mbean.split(":", 1)[1].split(","))
    kind = properties.pop("type")
    if "name" not in properties:  # a Kafka metric: its attribute is its name
        if attribute not in BUILT_ATTRIBUTES or properties.get("protocol", "share") != "share":
            return None
        if kind == "group-coordinator-metrics" and attribute == "num-partitions":
            return None  # the group coordinator runtime's, not a share metric
        return f"kafka_server_{kind.replace('-', '_')}_{attribute.replace('-', '_')}", frozenset(properties.items())
    name = properties.pop("name")
    if name in NOT_BUILT or attribute not in ("Count", "Value"):
        return None
    base = f"kafka_server_{kind.lower()}_{name.removesuffix('PerSec').lower()}"
    if name.endswith("PerSec"):
        return base + "_total", frozenset(properties.items())
    return base + ("_count" if attribute == "Count" else ""), frozenset(properties.items())


def kafka_with_jmx(root: Path, lib: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[KafkaReferenceCluster, int]:
    (jmx_port,) = free_ports(1)
    cluster = KafkaReferenceCluster(
        root, lib, nodes=1, overrides={"group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000", **FAST_SHARE_HEARTBEAT}
    )
    node = cluster.nodes[1]
    jmx = (
        f"-Dcom.sun.management.jmxremote.port={jmx_port}", f"-Dcom.sun.management.jmxremote.rmi.port={jmx_port}",
        "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
        "-Dcom.sun.management.jmxremote.local.only=true", "-Djava.rmi.server.hostname=127.0.0.1",
    )
    java = node.java

    def with_jmx(main: str, *args: str, jvm_opts: tuple[str, ...] = SERVER_JVM_OPTS) -> list[str]:
        return java(main, *args, jvm_opts=jvm_opts + jmx if main == "kafka.Kafka" else jvm_opts)

    monkeypatch.setattr(node, "java", with_jmx)
    return cluster, jmx_port


def locks_timed_out_on(bs: str, group: str, topic: str, read: Callable[[], T], timed_out: Callable[[T], bool]) -> T:
    """The run of both tests on one broker: what ``read`` gives once the holder's locks timed out
    (read while the holder is still a member, so that its share partition is still held)."""
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    produce_acked(bs, topic, [b"v%d" % i for i in range(RECORDS)], linger_ms=0)
    assert acknowledge_all(bs, group, topic) == {"accept": 30, "release": 10, "reject": 10}
    with holding(bs, group, topic):
        deadline = time.monotonic() + WAIT_S
        while not timed_out(got := read()):
            assert time.monotonic() < deadline, "the held records' locks did not time out"
            time.sleep(0.5)
        return got


def test_share_group_metric_names_are_kafkas_jmx_names(broker_factory: StartBroker, kafka_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run against kbroker and Kafka 4.4: every share metric Kafka's JMX shows (of those
    kbroker builds) is a kbroker series with the same labels, and the counts the run fixes agree."""
    group, topic = "names-share-g", "names-share-t"
    lock_timeouts = f"kafka.server:type=SharePartitionMetrics,name=AcquisitionLockTimeoutPerSec,group={group},topic={topic},partition=0:Count"
    node, port = share_metrics_node(broker_factory)
    labels = {"group": group, "topic": topic, "partition": "0"}
    ours = locks_timed_out_on(
        node.bootstrap, group, topic, lambda: scrape(port), lambda s: (value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) or 0) >= HELD
    )
    cluster, jmx_port = kafka_with_jmx(tmp_path / "kafka", kafka_lib, monkeypatch)
    with cluster:
        cluster.start()
        cluster.await_started(1)
        theirs = locks_timed_out_on(cluster.bootstrap, group, topic, lambda: jmx_values(kafka_lib, jmx_port), lambda v: v.get(lock_timeouts, 0) >= HELD)
    mapped = {key: series for key in theirs if (series := prometheus_series(key)) is not None}
    missing = sorted(f"{key} -> {series[0]}{dict(series[1])}" for key, series in mapped.items() if series not in ours)
    assert not missing, "Kafka's share metrics kbroker does not show:\n" + "\n".join(missing)
    kinds = {key.split(",")[0].split("=")[1] for key in mapped}
    assert {"ShareGroupMetrics", "SharePartitionMetrics", "ShareSessionCache", "BrokerTopicMetrics", "group-coordinator-metrics", "share-coordinator-metrics"} <= kinds
    for ack_type in ("Accept", "Release", "Reject", "Renew"):
        key = f"kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,ackType={ack_type}:Count"
        assert theirs[key] == value(ours, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType=ack_type), ack_type
    # Kafka 4.4 loaded the share partition again for the holder (its SharePartitionMetrics were gone
    # once the first consumer left); kbroker keeps it while it leads the partition.
    assert theirs["kafka.server:type=ShareGroupMetrics,name=PartitionLoadTimeMs:Count"] >= value(ours, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
    in_flight = f"kafka.server:type=SharePartitionMetrics,name=InFlightMessageCount,group={group},topic={topic},partition=0:Value"
    assert theirs[in_flight] == value(ours, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == HELD
    assert theirs[lock_timeouts] >= HELD
    # Joining, the share partition's initialization, the holder joining: a leave is not counted.
    rebalances = "kafka.server:type=group-coordinator-metrics:share-group-rebalance-count"
    assert theirs[rebalances] == value(ours, "kafka_server_group_coordinator_metrics_share_group_rebalance_count") == 3
