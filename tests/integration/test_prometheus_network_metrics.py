"""socket-server-metrics and RequestMetrics' RequestBytes on a real broker's Prometheus endpoint
(docs/metrics.md): a producer's connections, bytes and requests, and the size of its Produce
requests, with confluent-kafka over loopback."""

from __future__ import annotations

from tests.integration.conftest import StartBroker
from tests.integration.helpers import produce_acked, unique_topic, wait_for
from tests.integration.test_prometheus_metrics import scrape, value
from tests.ports import free_ports

RECORDS = 50
PLAINTEXT = {"listener": "PLAINTEXT", "networkProcessor": "0"}


def test_listener_counters_and_request_sizes(broker_factory: StartBroker) -> None:
    (metrics_port,) = free_ports(1)
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    before = scrape(metrics_port)
    payload = b"v" * 1000
    assert len(produce_acked(b.bootstrap, unique_topic("netmetrics"), [payload] * RECORDS)) == RECORDS

    def grown(name: str) -> float:
        return value(scrape(metrics_port), f"kafka_server_socket_server_metrics_{name}", **PLAINTEXT) - (
            value(before, f"kafka_server_socket_server_metrics_{name}", **PLAINTEXT) or 0.0
        )

    assert grown("connection_creation_total") >= 1
    assert value(scrape(metrics_port), "kafka_server_socket_server_metrics_connection_creation_rate", **PLAINTEXT) > 0
    assert grown("incoming_byte_total") > RECORDS * len(payload)
    assert grown("outgoing_byte_total") > 0
    # Kafka's Selector names: the broker's answers are its "requests", the requests it read its "responses".
    assert grown("request_total") >= 2 and grown("response_total") >= 2
    # The producer is gone (produce_acked closed it): its connections were counted out.
    assert wait_for(lambda: grown("connection_close_total") >= 1, timeout_s=10)

    samples = scrape(metrics_port)
    produced = value(samples, "kafka_network_requestmetrics_requestbytes_sum", request="Produce")
    assert value(samples, "kafka_network_requestmetrics_requestbytes_count", request="Produce") >= 1
    assert produced is not None and produced > RECORDS * len(payload)
    assert value(samples, "kafka_network_requestmetrics_requestbytes", request="Metadata", quantile="0.5") > 0
