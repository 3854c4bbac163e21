"""Client metrics (KIP-714) against a real broker: subscriptions managed with Apache Kafka 4.4's own
kafka-client-metrics (org.apache.kafka.tools.ClientMetricsCommand) and kafka-configs, and real
clients pushing their telemetry: Kafka 4.4's Java producer and librdkafka (confluent-kafka).

The tool's expected outputs are Kafka 4.4's own, printed by the same commands against a one-node
Apache Kafka 4.4 (benchmarks/apache_kafka.py); only ``--list``'s order differs (Kafka lists in its
hash map's order, kbroker by name), so one subscription is listed at a time here.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import wait_for
from tests.integration.test_dynamic_broker_configs import kafka_configs
from tests.kafka_tools import kafka_tool

TIMEOUT_S = 30


def client_metrics(lib: Path, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """kafka-client-metrics.sh, run as test_dynamic_broker_configs runs kafka-configs.sh."""
    return kafka_tool(lib, "org.apache.kafka.tools.ClientMetricsCommand", "--bootstrap-server", bootstrap, *args)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    return next(line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Error while executing"))


def test_kafkas_client_metrics_tool_manages_subscriptions(broker: BrokerProcess, kafka_lib: Path) -> None:
    b, lib = broker, kafka_lib
    done = client_metrics(lib, b.bootstrap, "--alter", "--name", "sub", "--metrics", "org.apache.kafka.producer.", "--interval", "1000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Altered client metrics config for sub."]
    assert client_metrics(lib, b.bootstrap, "--list").stdout.splitlines() == ["sub"]
    assert client_metrics(lib, b.bootstrap, "--describe").stdout.splitlines() == [
        "Client metrics configs for sub are:",
        "  interval.ms=1000",
        "  match=",
        "  metrics=org.apache.kafka.producer.",
    ]

    # Refused by the controller with Kafka's messages; the subscription is left as it was.
    assert error_line(client_metrics(lib, b.bootstrap, "--alter", "--name", "sub", "--interval", "50")) == (
        "Error while executing client metrics command : Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    )
    assert error_line(client_metrics(lib, b.bootstrap, "--alter", "--name", "sub", "--match", "foo=bar")) == (
        "Error while executing client metrics command : Illegal client matching pattern: foo=bar"
    )
    assert error_line(client_metrics(lib, b.bootstrap, "--alter", "--name", "sub", "--match", "client_id=[")) == (
        "Error while executing client metrics command : Illegal client matching pattern: client_id=["
    )

    # A second subscription, and kafka-configs sees the same resource type.
    done = client_metrics(lib, b.bootstrap, "--alter", "--name", "sub2", "--match", "client_id=abc.*,client_software_name=apache-kafka-java")
    assert done.returncode == 0, done.stderr
    assert client_metrics(lib, b.bootstrap, "--describe", "--name", "sub2").stdout.splitlines() == [
        "Client metrics configs for sub2 are:",
        "  interval.ms=300000",
        "  match=client_id=abc.*,client_software_name=apache-kafka-java",
        "  metrics=",
    ]
    described = kafka_configs(lib, b.bootstrap, "--entity-type", "client-metrics", "--entity-name", "sub", "--describe")
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == [
        "Dynamic configs for client-metric sub are:",
        "  interval.ms=1000 sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=1000}",
        "  metrics=org.apache.kafka.producer. sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:metrics=org.apache.kafka.producer.}",
    ]

    for name in ("sub", "sub2"):
        done = client_metrics(lib, b.bootstrap, "--delete", "--name", name)
        assert done.stdout.splitlines() == [f"Deleted client metrics config for {name}."]
    assert client_metrics(lib, b.bootstrap, "--list").stdout.strip() == ""
    assert client_metrics(lib, b.bootstrap, "--describe", "--name", "sub").stdout.splitlines() == [
        "The client metric resource sub doesn't exist and doesn't have dynamic config."
    ]


def pushes_from(b: BrokerProcess, client_id: str) -> list[dict[str, object]]:
    return [e for e in b.events_named("telemetry.pushed") if e.get("client_id") == client_id]


def test_java_and_librdkafka_producers_push_their_metrics(broker: BrokerProcess, kafka_lib: Path) -> None:
    b = broker
    done = client_metrics(kafka_lib, b.bootstrap, "--alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.", "--interval", "1000")
    assert done.returncode == 0, done.stderr

    # librdkafka 2.5+: GetTelemetrySubscriptions once connected, PushTelemetry each interval.
    producer = Producer({"bootstrap.servers": b.bootstrap, "client.id": "rdkafka-telemetry", "linger.ms": 5})
    deadline = time.monotonic() + TIMEOUT_S
    while not pushes_from(b, "rdkafka-telemetry") and time.monotonic() < deadline:
        producer.produce("telemetry-rdkafka", b"x")
        producer.poll(0.2)
    producer.flush(TIMEOUT_S)
    (first, *_) = pushes_from(b, "rdkafka-telemetry")
    assert first["metrics"] and all(str(name).startswith("org.apache.kafka.producer.") for name in first["sample"])  # type: ignore[union-attr]

    # Kafka 4.4's Java producer (enable.metrics.push=true by default), for about five seconds.
    perf = subprocess.run(
        ["java", *TOOL_JVM_OPTS, "-cp", f"{kafka_lib}/*", "org.apache.kafka.tools.ProducerPerformance",
         "--topic", "telemetry-java", "--num-records", "100", "--throughput", "20", "--record-size", "10",
         "--producer-props", f"bootstrap.servers={b.bootstrap}", "client.id=java-telemetry"],
        capture_output=True, text=True, timeout=120,
    )
    assert perf.returncode == 0, perf.stderr
    assert wait_for(lambda: bool(pushes_from(b, "java-telemetry")), TIMEOUT_S)
    (java, *_) = pushes_from(b, "java-telemetry")
    assert int(java["metrics"]) > 10  # type: ignore[call-overload]
    assert all(str(name).startswith("org.apache.kafka.producer.") for name in java["sample"])  # type: ignore[union-attr]
