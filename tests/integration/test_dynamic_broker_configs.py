"""Dynamic broker configs (broker/dynamic_broker_config.py), set as an operator sets them: with
Apache Kafka 4.4's own kafka-configs (org.apache.kafka.tools.ConfigCommand) against a real broker,
and applied live: a produce the old limit refused goes through under the new one, the log cleaner
restarts with its new thread count, a connection limit takes effect for new connections. The
messages of what Kafka refuses are checked against Kafka 4.4's own answers in
tests/unit/test_dynamic_broker_config.py."""

from __future__ import annotations

import socket
import struct
import subprocess
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic, ResourceType

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.kafka_tools import kafka_tool

TIMEOUT_S = 30


def kafka_configs(lib: Path, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafka_tool(lib, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap, *args)


def node_id(bootstrap: str) -> str:
    return str(next(iter(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)))


def produce(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    """One record of ``size`` bytes; the broker's error, or None once it is written."""
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000, "retries": 0, "linger.ms": 0})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    return errors[0]


def topic_config(bootstrap: str, topic: str, key: str) -> tuple[str, ConfigSource]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in: it is the handle
    entry = admin.describe_configs([resource])[resource].result(TIMEOUT_S)[key]
    return entry.value, ConfigSource(entry.source)


def test_kafkas_kafka_configs_sets_broker_configs_that_apply_at_once(broker: BrokerProcess, kafka_lib: Path) -> None:
    b = broker
    node = node_id(b.bootstrap)
    topic = unique_topic("dyn")
    create_topic(b.bootstrap, topic)
    assert produce(b.bootstrap, topic, 200_000) is None

    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config", "message.max.bytes=100000,log.cleaner.threads=2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating default config for brokers in the cluster."
    # Applied when the ConfigRecord reaches the broker, to the topic that was created before.
    assert wait_for(lambda: topic_config(b.bootstrap, topic, "max.message.bytes") == ("100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG), TIMEOUT_S)
    refused = produce(b.bootstrap, topic, 200_000)
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert wait_for(lambda: '"threads": 2' in b.log_path.read_text() and "log_cleaner.reconfigured" in b.log_path.read_text(), TIMEOUT_S)

    # The broker's own value wins over the cluster default.
    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--alter", "--add-config", "message.max.bytes=300000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Completed updating config for broker {node}."
    assert wait_for(lambda: topic_config(b.bootstrap, topic, "max.message.bytes") == ("300000", ConfigSource.DYNAMIC_BROKER_CONFIG), TIMEOUT_S)
    assert produce(b.bootstrap, topic, 200_000) is None

    described = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--describe")
    assert described.stdout.splitlines() == [
        f"Dynamic configs for broker {node} are:",
        "  message.max.bytes=300000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=300000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=100000, DEFAULT_CONFIG:message.max.bytes=1048588}",
    ]
    defaults = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-default", "--describe")
    assert defaults.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}",
        "  message.max.bytes=100000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=100000}",
        # Written at bootstrap with eligible leader replicas on, as Kafka 4.4's is.
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
    ]

    # What cannot change at run time is refused by the broker, as Kafka refuses it.
    fixed = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--alter", "--add-config", "log.dirs=/elsewhere")
    assert fixed.returncode == 1
    assert "org.apache.kafka.common.errors.InvalidRequestException: Cannot update these configs dynamically: [log.dirs]" in fixed.stderr

    # Deleted: back to the default layer, then to server.properties.
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, node, incremental_configs=[ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    assert wait_for(lambda: topic_config(b.bootstrap, topic, "max.message.bytes")[0] == "100000", TIMEOUT_S)
    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-default", "--alter", "--delete-config", "message.max.bytes")
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: topic_config(b.bootstrap, topic, "max.message.bytes") == ("1048588", ConfigSource.DEFAULT_CONFIG), TIMEOUT_S)


def answers(bootstrap: str) -> bool:
    """Whether a new connection is served: ApiVersions v0 answered, not closed."""
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request = struct.pack(">hhih", 18, 0, 7, -1)
        try:
            sock.sendall(struct.pack(">i", len(request)) + request)
            return len(sock.recv(4)) == 4
        except (ConnectionResetError, BrokenPipeError):
            return False


def test_a_connection_limit_set_at_run_time_holds_for_new_connections(broker: BrokerProcess) -> None:
    b = broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    node = node_id(b.bootstrap)
    assert answers(b.bootstrap)

    def alter(op: AlterConfigOpType, value: str | None) -> None:
        resource = ConfigResource(ResourceType.BROKER, node, incremental_configs=[ConfigEntry("max.connections.per.ip", value, incremental_operation=op)])
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)

    # The admin client's own connection counts: one more from 127.0.0.1 is past a limit of 1.
    alter(AlterConfigOpType.SET, "1")
    assert wait_for(lambda: not answers(b.bootstrap), TIMEOUT_S)
    alter(AlterConfigOpType.DELETE, None)
    assert wait_for(lambda: answers(b.bootstrap), TIMEOUT_S)


def test_a_topic_configs_synonyms_are_kafkas(broker_factory: StartBroker, kafka_lib: Path) -> None:
    """The lines Kafka 4.4's kafka-configs printed for the same topic on a Kafka 4.4 node with the
    same server.properties and cluster default (run by hand, 2026-11-29): a topic override, then
    each layer of the broker configs behind the topic config, and none before the first layer that
    sets the first of them (log.retention.hours=48 and log.roll.hours=168 do not show)."""
    b = broker_factory({"log.segment.bytes": "2000000", "log.retention.hours": "48"})
    topic = unique_topic("synonyms")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "1000", "cleanup.policy": "compact"})])[topic].result(TIMEOUT_S)
    assert kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config", "log.cleaner.delete.retention.ms=5000").returncode == 0

    def described() -> dict[str, str]:
        out = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "topics", "--entity-name", topic, "--describe", "--all").stdout
        return {line.split("=", 1)[0].strip(): line.strip() for line in out.splitlines()[1:]}

    seen: list[dict[str, str]] = []
    assert wait_for(lambda: "DYNAMIC_DEFAULT" in (seen.append(described()) or seen[-1])["delete.retention.ms"], TIMEOUT_S)
    lines = seen[-1]
    assert lines["retention.ms"] == "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"
    assert lines["cleanup.policy"] == "cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"
    assert lines["segment.bytes"] == "segment.bytes=2000000 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=2000000, DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    assert lines["delete.retention.ms"] == (
        "delete.retention.ms=5000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.delete.retention.ms=5000, "
        "DEFAULT_CONFIG:log.cleaner.delete.retention.ms=86400000}"
    )
    assert lines["segment.ms"] == "segment.ms=604800000 sensitive=false synonyms={}"
    assert lines["flush.ms"] == "flush.ms=9223372036854775807 sensitive=false synonyms={}"
