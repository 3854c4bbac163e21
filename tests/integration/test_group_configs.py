"""Group configs (resource type 32, broker/group/group_config.py), set as an operator sets them:
with Apache Kafka 4.4's own kafka-configs (`--entity-type groups`) against a real broker, and
applied to a KIP-848 consumer group: a confluent-kafka consumer (group.protocol=consumer)
heartbeats at the interval its group's config gives, and at the new one once it changes.

The expected outputs are Kafka 4.4.0's own to the same commands (a one-node
benchmarks/apache_kafka.py cluster); the refusals' messages are checked one by one against
Kafka's in tests/unit/test_group_configs.py."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from tests.integration.conftest import StartBroker
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_dynamic_broker_configs import TIMEOUT_S, kafka_configs


def groups(lib: Path, bootstrap: str, *args: str) -> tuple[int, list[str], str]:
    done = kafka_configs(lib, bootstrap, "--entity-type", "groups", *args)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_kafkas_kafka_configs_sets_describes_and_deletes_group_configs(broker_factory: StartBroker, kafka_lib: Path) -> None:
    b = broker_factory()
    # A group that does not exist may have configs (Kafka keeps them for the group to come).
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--describe")[:2] == (0, ["The group 'g' doesn't exist and doesn't have dynamic config."])
    done = groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--alter", "--add-config", "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    assert done[:2] == (0, ["Completed updating config for group g."]), done[2]
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--describe")[1] == [
        "Dynamic configs for group g are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000, "
        "DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, "
        "DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
    ]
    every = groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--describe", "--all")[1]
    assert every[:4] == [
        "All configs for group g are:",
        "  consumer.assignment.interval.ms=1000 sensitive=false synonyms={DEFAULT_CONFIG:group.consumer.assignment.interval.ms=1000}",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000, "
        "DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, "
        "DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
    ]
    assert len(every) == 22
    assert "  streams.assignor.name=sticky sensitive=false synonyms={DEFAULT_CONFIG:group.streams.assignors=sticky}" in every

    # The same through the AdminClient: sources as Kafka gives them.
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "g")
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert (entries["consumer.session.timeout.ms"].value, ConfigSource(entries["consumer.session.timeout.ms"].source)) == ("50000", ConfigSource.GROUP_CONFIG)
    assert (entries["share.session.timeout.ms"].value, ConfigSource(entries["share.session.timeout.ms"].source)) == ("45000", ConfigSource.DEFAULT_CONFIG)

    # Refused by the controller with Kafka's error and message.
    unknown = groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--alter", "--add-config", "foo.bar=1")
    assert unknown[0] == 1
    assert "org.apache.kafka.common.errors.InvalidConfigurationException: Unknown group config name: foo.bar" in unknown[2]
    too_long = groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--alter", "--add-config", "consumer.session.timeout.ms=70000")
    assert too_long[0] == 1
    assert "InvalidConfigurationException: consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive." in too_long[2]

    # Deleting a config removes it; the last one gone, the group has none.
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--alter", "--delete-config", "consumer.session.timeout.ms")[:2] == (0, ["Completed updating config for group g."])
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--describe")[1] == [
        "Dynamic configs for group g are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000, "
        "DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}",
    ]
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--alter", "--delete-config", "consumer.heartbeat.interval.ms")[0] == 0
    assert groups(kafka_lib, b.bootstrap, "--entity-name", "g", "--describe")[1] == ["The group 'g' doesn't exist and doesn't have dynamic config."]


class HeartbeatLog(logging.Handler):
    """When librdkafka sent each ConsumerGroupHeartbeat (its `protocol` debug lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[float] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if "Sent ConsumerGroupHeartbeatRequest" in record.getMessage():
            with self._lock:
                self.sent.append(time.monotonic())

    def gaps_since(self, start: float) -> list[float]:
        with self._lock:
            times = [t for t in self.sent if t >= start]
        return [b - a for a, b in zip(times, times[1:])]


def test_a_kip848_consumer_heartbeats_at_its_groups_configured_interval(broker_factory: StartBroker, kafka_lib: Path) -> None:
    # Intervals of a second or two keep the test short; the broker's lower bound is lowered to allow them.
    b = broker_factory({"group.consumer.min.heartbeat.interval.ms": "500"})
    topic, group = unique_topic("gcfg"), unique_topic("group")
    create_topic(b.bootstrap, topic)
    assert groups(kafka_lib, b.bootstrap, "--entity-name", group, "--alter", "--add-config", "consumer.heartbeat.interval.ms=1000")[0] == 0

    log = HeartbeatLog()
    logger = logging.getLogger(f"librdkafka.{group}")
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer", "debug": "protocol"}, logger=logger)
    try:
        consumer.subscribe([topic])

        def poll_until(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                consumer.poll(0.1)
                if predicate():
                    return True
            return False

        # The default (group.consumer.heartbeat.interval.ms, 5000) would allow one heartbeat in 5 s.
        start = time.monotonic()
        assert poll_until(lambda: len([g for g in log.gaps_since(start) if 0.7 < g < 1.6]) >= 3, TIMEOUT_S), log.gaps_since(start)

        # Changed while the member is in the group: the next heartbeat's answer carries the new interval.
        assert groups(kafka_lib, b.bootstrap, "--entity-name", group, "--alter", "--add-config", "consumer.heartbeat.interval.ms=2500")[0] == 0
        changed = time.monotonic()
        assert poll_until(lambda: len([g for g in log.gaps_since(changed) if 2.2 < g < 3.5]) >= 2, TIMEOUT_S), log.gaps_since(changed)
    finally:
        consumer.close()
