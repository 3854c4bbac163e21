"""metrics.listener against a real broker: produce, consume and commit with confluent-kafka, then
scrape /metrics over HTTP and read it with prometheus_client's own parser (docs/metrics.md)."""

from __future__ import annotations

import urllib.error
import urllib.request

from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartBroker
from tests.integration.helpers import create_topic, poll_messages, produce_acked, unique_topic, wait_for
from tests.ports import free_ports

TIMEOUT_S = 30
RECORDS = 200
COMMITTED = 120


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the endpoint: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum over the series of ``name`` that carry ``labels`` (whatever their other labels)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def test_prometheus_endpoint_counts_what_clients_did(broker_factory: StartBroker) -> None:
    (metrics_port,) = free_ports(1)
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    before = scrape(metrics_port)
    assert value(before, "kafka_controller_kafkacontroller_activecontrollercount") == 1.0
    assert value(before, "kafka_server_raftmetrics_current_leader") == 1.0

    topic, group = unique_topic("metrics"), "metrics-group"
    create_topic(b.bootstrap, topic, partitions=1)
    payloads = [b"record-%05d" % i for i in range(RECORDS)]
    offsets = produce_acked(b.bootstrap, topic, payloads)
    assert len(offsets) == RECORDS

    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = poll_messages(consumer, RECORDS, timeout_s=TIMEOUT_S)
        assert len(got) == RECORDS
        consumer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)

        samples = scrape(metrics_port)
        # BrokerTopicMetrics, per topic and in total.
        assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
        assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > sum(map(len, payloads))
        assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > sum(map(len, payloads))
        assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total") >= RECORDS
        assert value(samples, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) >= 1
        assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
        # RequestMetrics: Produce and Fetch requests grew since the first scrape, with their times.
        for request in ("Produce", "Fetch", "FetchConsumer", "OffsetCommit"):
            grown = total(samples, "kafka_network_requestmetrics_requests_total", request=request) - total(
                before, "kafka_network_requestmetrics_requests_total", request=request
            )
            assert grown >= 1, request
            assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request=request) >= 1
            assert value(samples, "kafka_network_requestmetrics_totaltimems", request=request, quantile="0.99") >= 0
        assert value(samples, "kafka_network_requestmetrics_localtimems_count", request="Produce") >= 1
        # Consumer lag, on the group's coordinator (this node): produced - committed.
        assert value(samples, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="0") == COMMITTED
        assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == RECORDS - COMMITTED
        # The consumer's connection is open now.
        assert value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT", networkProcessor="0") >= 1
        assert value(samples, "kbroker_network_sendfile_bytes_total") > 0
        # ReplicaManager and the controller's view of the cluster.
        assert value(samples, "kafka_server_replicamanager_leadercount") >= 1
        assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert value(samples, "kafka_controller_kafkacontroller_globaltopiccount") >= 1
        assert value(samples, "kafka_controller_kafkacontroller_activebrokercount") == 1
        assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert value(samples, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Produce") is not None
        assert value(samples, "kafka_server_raftmetrics_high_watermark") > 0
    finally:
        consumer.close()

    # Anything but /metrics is 404; the broker still answers clients after the scrapes.
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nothing", timeout=10)
        raise AssertionError("expected a 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    assert wait_for(lambda: scrape(metrics_port) is not None, timeout_s=TIMEOUT_S)
