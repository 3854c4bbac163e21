"""A client's pushed telemetry (KIP-714) on the Prometheus endpoint (docs/metrics.md): a
CLIENT_METRICS subscription is written with IncrementalAlterConfigs, librdkafka (confluent-kafka)
pushes its producer metrics each second, a scrape shows them as kafka_client_* gauges labelled
with the client; once the producer closes its connection they leave the endpoint at once (Kafka's
ClientConnectionDisconnectListener), not at the instance's expiry a minute later."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs

from broker.wire_client import request
from tests.integration.conftest import StartBroker
from tests.integration.helpers import wait_for
from tests.integration.test_prometheus_metrics import scrape
from tests.ports import free_ports

TIMEOUT_S = 20
CLIENT_METRICS = 16  # ConfigResource.Type.CLIENT_METRICS
CLIENT_ID = "telemetry-to-prometheus"


def subscribe(bootstrap: str, name: str, metrics: str, interval_ms: int) -> None:
    configs = tuple(
        incremental_alter_configs.AlterableConfig(name=key, config_operation=0, value=value)
        for key, value in (("metrics", metrics), ("interval.ms", str(interval_ms)))
    )
    resource = incremental_alter_configs.AlterConfigsResource(resource_type=CLIENT_METRICS, resource_name=name, configs=configs)
    answer = request(bootstrap, incremental_alter_configs.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False))
    assert [r.error_code for r in answer.responses] == [0], answer


def client_series(port: int) -> dict[str, dict[str, str]]:
    """The producer's kafka_client_* samples: name -> labels (of one of its series)."""
    return {name: dict(labels) for (name, labels), _ in scrape(port).items() if name.startswith("kafka_client_") and ("client_id", CLIENT_ID) in labels}


def test_pushed_client_metrics_are_gauges_on_the_endpoint_until_the_client_disconnects(broker_factory: StartBroker) -> None:
    (metrics_port,) = free_ports(1)
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    subscribe(b.bootstrap, "producers", "org.apache.kafka.producer.", 1000)

    producer = Producer({"bootstrap.servers": b.bootstrap, "client.id": CLIENT_ID, "linger.ms": 5})
    try:
        deadline = time.monotonic() + TIMEOUT_S
        series: dict[str, dict[str, str]] = {}
        while not series and time.monotonic() < deadline:
            producer.produce("telemetry-prometheus", b"x")
            producer.poll(0.3)
            series = client_series(metrics_port)
        assert series, "no pushed client metric reached the endpoint"
        assert all(name.startswith("kafka_client_producer_") for name in series), sorted(series)
        labels = next(iter(series.values()))
        assert labels["client_software_name"] == "confluent-kafka-python"
        assert labels["client_instance_id"] and labels["client_software_version"]
    finally:
        producer.flush(TIMEOUT_S)
    del producer  # closes its connections (after a last, terminating push)
    assert wait_for(lambda: not client_series(metrics_port), timeout_s=10), "the closed client's metrics stayed"
