"""Every broker and topic config Apache Kafka 4.4 describes is known to kbroker: the table
(broker/kafka_config_defs.py) holds exactly the names Kafka 4.4 answered with (recorded in
tests/kafka_4_4_configs.json by benchmarks/kafka_config_facts.py), each is accepted at its
Kafka default in server.properties, and the values that would switch on a feature kbroker lacks
are refused, at start and dynamically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.kafka_config_facts import FACTS, render
from broker.config import NO_EFFECT_CONFIGS, BrokerConfig, ConfigError, load_config
from broker.dynamic_broker_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    NO_EFFECT_DYNAMIC_CONFIGS,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
    DynamicLayers,
    InvalidDynamicConfigError,
    is_dynamic,
    validate_dynamic_broker_config,
)
from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS, KAFKA_TOPIC_CONFIGS
from broker.controller.quorum_controller import QuorumController
from broker.metadata.metadata_image import MetadataImage
from storage.log_config import InvalidConfigError, LogConfig
from tests.unit.quorum_controller_fakes import controller_config

RECORDED = json.loads(FACTS.read_text())
# Kafka's values that depend on the node that answered, not defaults kbroker could take.
NODE_SPECIFIC = {"broker.id", "log.dir", "security.inter.broker.protocol"}


def config(**props: str) -> BrokerConfig:
    return load_config(None, {"log.dirs": "/tmp/kbroker-unit", **props})


def test_the_table_holds_exactly_kafka_4_4s_broker_and_topic_configs() -> None:
    assert sorted(KAFKA_BROKER_CONFIGS) == sorted(c["name"] for c in RECORDED["broker"])
    assert sorted(KAFKA_TOPIC_CONFIGS) == sorted(c["name"] for c in RECORDED["topic"])
    assert (len(KAFKA_BROKER_CONFIGS), len(KAFKA_TOPIC_CONFIGS)) == (350, 37)
    for c in RECORDED["broker"]:
        d = KAFKA_BROKER_CONFIGS[c["name"]]
        assert (d.type, d.default, d.dynamic, d.sensitive) == (c["type"], c["default"], c["dynamic"], c["sensitive"]), c["name"]


def test_the_table_is_what_the_script_generates_from_the_recorded_answer() -> None:
    table = Path(__file__).resolve().parents[2] / "broker" / "kafka_config_defs.py"
    assert table.read_text() == render(RECORDED)


def test_kbroker_knows_every_topic_config_kafka_describes() -> None:
    assert LogConfig.config_names() == sorted(KAFKA_TOPIC_CONFIGS)
    defaults = LogConfig().to_properties()
    for name, d in KAFKA_TOPIC_CONFIGS.items():
        assert defaults[name] == d.default, name


def test_every_broker_config_is_a_setting_or_accepted_with_no_effect() -> None:
    aliases = {info.alias for info in BrokerConfig.model_fields.values() if info.alias}
    assert set(KAFKA_BROKER_CONFIGS) == (set(KAFKA_BROKER_CONFIGS) & aliases) | NO_EFFECT_CONFIGS
    assert not NO_EFFECT_CONFIGS & aliases


@pytest.mark.parametrize("name", sorted(n for n in NO_EFFECT_CONFIGS if KAFKA_BROKER_CONFIGS[n].default is not None and n not in NODE_SPECIFIC))
def test_kafkas_default_of_a_config_of_no_effect_is_accepted_and_described(name: str) -> None:
    default = KAFKA_BROKER_CONFIGS[name].default
    assert default is not None
    cfg = config(**{name: default})
    dynamic = DynamicBrokerConfig(cfg.node_id, cfg)
    assert (dynamic.value_of(name), dynamic.source_of(name)) == (default, STATIC_BROKER_CONFIG)
    # Round trip through the dynamic layers keeps it.
    assert DynamicLayers({}, {"message.max.bytes": "5000"}).effective(cfg).no_effect == {name: default}


def test_a_config_of_no_effect_not_given_is_described_with_kafkas_default() -> None:
    dynamic = DynamicBrokerConfig(1, config(**{"node.id": "1", "process.roles": "broker,controller"}))
    assert (dynamic.value_of("remote.log.reader.threads"), dynamic.source_of("remote.log.reader.threads")) == ("10", DEFAULT_CONFIG)
    assert (dynamic.value_of("sasl.kerberos.service.name"), dynamic.source_of("sasl.kerberos.service.name")) == (None, DEFAULT_CONFIG)
    assert (dynamic.value_of("broker.id"), dynamic.source_of("broker.id")) == ("1", STATIC_BROKER_CONFIG)
    assert dynamic.value_of("log.cleaner.io.max.bytes.per.second") == "1.7976931348623157E308"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"remote.log.storage.system.enable": "true"}, "remote.log.storage.system.enable=true is refused: kbroker has no tiered storage"),
        ({"transaction.two.phase.commit.enable": "TRUE"}, "transaction.two.phase.commit.enable=TRUE is refused: kbroker has no two-phase commit transactions (KIP-939)"),
        ({"create.topic.policy.class.name": "com.example.Policy"}, "create.topic.policy.class.name=com.example.Policy is refused: kbroker runs no topic creation policy"),
        ({"principal.builder.class": "com.example.Builder"}, "principal.builder.class=com.example.Builder is refused: kbroker names clients as Kafka's DefaultKafkaPrincipalBuilder does, with no other class"),
        ({"delegation.token.secret.key": "s3cret"}, "delegation.token.secret.key=a value is refused: kbroker has no delegation tokens"),
        ({"remote.log.reader.threads": "ten"}, "Invalid value ten for configuration remote.log.reader.threads: Not a number of type INT"),
        ({"sasl.login.refresh.buffer.seconds": "40000"}, "Invalid value 40000 for configuration sasl.login.refresh.buffer.seconds: Not a number of type SHORT"),
        ({"ssl.allow.dn.changes": "yes"}, "Invalid value yes for configuration ssl.allow.dn.changes: Expected value to be either true or false"),
        ({"broker.id": "2", "node.id": "1"}, "You must set `node.id` to the same value as `broker.id`."),
        ({"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "PLAINTEXT"}, "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ],
)
def test_a_value_kbroker_cannot_honour_is_refused_at_start_in_one_line(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(**props)
    assert str(e.value) == message


def test_the_defaults_of_the_refused_configs_are_accepted() -> None:
    cfg = config(
        **{
            "remote.log.storage.system.enable": "false",
            "principal.builder.class": "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
            "create.topic.policy.class.name": "",
            "config.providers": "",
        }
    )
    assert cfg.no_effect["remote.log.storage.system.enable"] == "false"


def test_kafkas_older_names_take_effect() -> None:
    assert config(**{"broker.id": "1"}).node_id == 1
    cfg = config(**{"security.inter.broker.protocol": "PLAINTEXT"})
    assert cfg.inter_broker_listener_name == "PLAINTEXT"


def _validate(props: dict[str, str], per_broker: bool = True) -> None:
    dynamic = DynamicBrokerConfig(1, config())
    validate_dynamic_broker_config(props, per_broker, dynamic.current, dynamic.layers)


def test_kafkas_dynamic_configs_of_no_effect_are_accepted_and_its_others_refused() -> None:
    assert "remote.log.reader.threads" in NO_EFFECT_DYNAMIC_CONFIGS and is_dynamic("metric.reporters")
    _validate({"remote.log.reader.threads": "5", "metric.reporters": "com.example.Reporter"}, per_broker=False)
    _validate({"ssl.provider": "SunJSSE", "sasl.kerberos.service.name": "kafka"})
    with pytest.raises(InvalidDynamicConfigError, match=r"^Cannot update these configs dynamically: \[remote.log.storage.system.enable, request.timeout.ms\]$"):
        _validate({"request.timeout.ms": "5", "remote.log.storage.system.enable": "false"})
    with pytest.raises(InvalidDynamicConfigError, match=r"^Cannot update these configs at default cluster level, broker id must be specified: \[ssl.provider\]$"):
        _validate({"ssl.provider": "SunJSSE"}, per_broker=False)
    with pytest.raises(InvalidDynamicConfigError, match="^Invalid value x for configuration remote.fetch.max.wait.ms: Not a number of type INT$"):
        _validate({"remote.fetch.max.wait.ms": "x"})
    with pytest.raises(InvalidDynamicConfigError, match="^principal.builder.class=com.example.B is refused"):
        _validate({"principal.builder.class": "com.example.B"})


def test_a_dynamic_config_of_no_effect_is_described_from_its_layer() -> None:
    dynamic = DynamicBrokerConfig(1, config())
    dynamic.layers = DynamicLayers({}, {"remote.log.reader.threads": "5"})
    assert (dynamic.value_of("remote.log.reader.threads"), dynamic.source_of("remote.log.reader.threads")) == ("5", DYNAMIC_BROKER_CONFIG)


def test_a_topic_cannot_enable_remote_storage_but_a_stored_config_that_does_still_loads() -> None:
    controller = QuorumController(controller_config(1), raft=None, image=MetadataImage)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError) as e:
        controller._validate_topic_config({"remote.storage.enable": "true"})
    assert (e.value.name, str(e.value)) == ("remote.storage.enable", "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
    assert LogConfig.from_properties({"remote.storage.enable": "true"}).remote_storage_enable
    assert LogConfig.from_properties({"remote.copy.lag.ms": "100", "errors.deadletterqueue.group.enable": "true"}).remote_copy_lag_ms == 100
