"""Every config Apache Kafka 4.4 describes is described by kbroker too, as Kafka 4.4's own
kafka-configs lists them (`--describe --all`): the broker's 350 and a topic's 37, names recorded
from a real Kafka 4.4 node in tests/kafka_4_4_configs.json. A config kbroker has no
implementation for is accepted in server.properties and described with its value, set while
running when Kafka allows that, and refused with Kafka's message when Kafka does not."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks.kafka_config_facts import FACTS
from tests.integration.conftest import StartBroker
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.test_dynamic_broker_configs import kafka_configs, node_id

RECORDED = json.loads(FACTS.read_text())
TIMEOUT_S = 30


def described(output: str) -> dict[str, str]:
    """kafka-configs' `--describe` lines, `  name=value sensitive=... synonyms={...}`, by name."""
    out = {}
    for line in output.splitlines():
        m = re.match(r"  ([^=\s]+)=(.*) sensitive=(true|false) synonyms=\{(.*)\}$", line)
        if m:
            out[m.group(1)] = line.strip()
    return out


def test_kafka_configs_describe_all_lists_every_kafka_4_4_config(broker_factory: StartBroker, kafka_lib: Path) -> None:
    b = broker_factory({"remote.log.reader.threads": "7", "sasl.kerberos.service.name": "kafka"})
    node = node_id(b.bootstrap)

    every = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--describe", "--all")
    assert every.returncode == 0, every.stderr
    assert every.stdout.splitlines()[0] == f"All configs for broker {node} are:"
    configs = described(every.stdout)
    missing = sorted({c["name"] for c in RECORDED["broker"]} - set(configs))
    assert not missing, f"{len(missing)} of Kafka 4.4's broker configs are not described: {missing}"
    # Given in server.properties, of no effect: described as given; not given: Kafka's default.
    assert configs["remote.log.reader.threads"].startswith("remote.log.reader.threads=7 sensitive=false synonyms={STATIC_BROKER_CONFIG:remote.log.reader.threads=7, DEFAULT_CONFIG:remote.log.reader.threads=10}")
    assert configs["sasl.kerberos.service.name"].startswith("sasl.kerberos.service.name=kafka sensitive=false")
    assert configs["remote.log.manager.thread.pool.size"] == "remote.log.manager.thread.pool.size=2 sensitive=false synonyms={DEFAULT_CONFIG:remote.log.manager.thread.pool.size=2}"
    assert configs["delegation.token.secret.key"].startswith("delegation.token.secret.key=null sensitive=true")

    # What Kafka changes while running is stored and described; what it does not is refused as Kafka refuses it.
    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--alter", "--add-config", "remote.log.reader.threads=5")
    assert done.returncode == 0, done.stderr

    def dynamic_value() -> str:
        out = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--describe")
        return described(out.stdout).get("remote.log.reader.threads", "")

    assert wait_for(lambda: dynamic_value().startswith("remote.log.reader.threads=5 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:remote.log.reader.threads=5, STATIC_BROKER_CONFIG:remote.log.reader.threads=7"), TIMEOUT_S)
    fixed = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "brokers", "--entity-name", node, "--alter", "--add-config", "remote.log.manager.thread.pool.size=4")
    assert fixed.returncode == 1
    assert "InvalidRequestException: Cannot update these configs dynamically: [remote.log.manager.thread.pool.size]" in fixed.stderr

    topic = unique_topic("every-config")
    create_topic(b.bootstrap, topic)
    topic_configs = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "topics", "--entity-name", topic, "--describe", "--all")
    assert topic_configs.returncode == 0, topic_configs.stderr
    names = set(described(topic_configs.stdout))
    assert names == {c["name"] for c in RECORDED["topic"]}, sorted(names ^ {c["name"] for c in RECORDED["topic"]})
