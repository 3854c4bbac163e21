"""KRaft node configuration: process.roles, listeners, the quorum, and Kafka's cross-checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import (
    BrokerConfig,
    ConfigError,
    Listener,
    QuorumVoter,
    load_config,
    parse_quorum_voters,
)

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"


PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";'


def combined(node_id: int = 1, **extra: str) -> dict[str, str]:
    port = 9090 + 2 * node_id
    props = {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": VOTERS,
    }
    props.update(extra)
    return props


def broker_only(node_id: int = 4, **extra: str) -> dict[str, str]:
    props = {
        "node.id": str(node_id),
        "process.roles": "broker",
        "listeners": "PLAINTEXT://127.0.0.1:9192",
        "controller.quorum.voters": VOTERS,
    }
    props.update(extra)
    return props


def controller_only(node_id: int = 1, **extra: str) -> dict[str, str]:
    props = {
        "node.id": str(node_id),
        "process.roles": "controller",
        "listeners": "CONTROLLER://127.0.0.1:9093",
        "controller.quorum.voters": VOTERS,
    }
    props.update(extra)
    return props


def refused(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, props)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_the_zero_config_node_is_one_combined_node_on_9092() -> None:
    config = load_config(None, {"log.dirs": "./data"})  # what `make run` passes
    assert config.node_id == 1 and config.roles == {"broker", "controller"} and config.implicit_quorum
    assert config.listener == Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)
    assert config.advertised_listener == config.listener
    assert config.quorum_voters == [QuorumVoter(1, "127.0.0.1", 0)]
    assert config.controller_listeners == [] and config.quorum_bootstrap_servers == []
    assert config.metadata_dir == Path("./data")


def test_the_zero_config_node_takes_a_listener_override_and_a_controller_listener() -> None:
    config = load_config(None, {"listeners": "PLAINTEXT://127.0.0.1:5555", "node.id": "7"})
    assert config.listener.port == 5555 and config.quorum_voters == [QuorumVoter(7, "127.0.0.1", 0)]
    with_controller = load_config(None, {"listeners": "PLAINTEXT://127.0.0.1:5555,CONTROLLER://127.0.0.1:5556"})
    assert with_controller.quorum_voters == [QuorumVoter(1, "127.0.0.1", 5556)]
    assert with_controller.listener.port == 5555


def test_internal_topics_take_kafkas_replication_in_a_cluster_and_one_on_the_zero_config_node() -> None:
    cluster = load_config(None, combined(2))
    assert (cluster.offsets_topic_replication_factor, cluster.transaction_state_log_replication_factor, cluster.transaction_state_log_min_isr) == (3, 3, 2)
    single = load_config(None, {"log.dirs": "./data"})
    assert (single.offsets_topic_replication_factor, single.transaction_state_log_replication_factor, single.transaction_state_log_min_isr) == (1, 1, 1)
    told = load_config(None, {"offsets.topic.replication.factor": "2", "transaction.state.log.min.isr": "2"})
    assert (told.offsets_topic_replication_factor, told.transaction_state_log_replication_factor, told.transaction_state_log_min_isr) == (2, 1, 2)


def test_a_combined_cluster_node() -> None:
    config = load_config(None, combined(2, **{"advertised.listeners": "PLAINTEXT://node2:9094"}))
    assert config.is_broker and config.is_controller and not config.implicit_quorum
    assert config.quorum_voters == [QuorumVoter(1, "127.0.0.1", 9093), QuorumVoter(2, "127.0.0.1", 9095), QuorumVoter(3, "127.0.0.1", 9097)]
    assert config.client_listeners == [Listener(name="PLAINTEXT", host="127.0.0.1", port=9094)]
    assert config.controller_listeners == [Listener(name="CONTROLLER", host="127.0.0.1", port=9095)]
    assert config.advertised_broker_listeners == [Listener(name="PLAINTEXT", host="node2", port=9094)]
    assert config.advertised_controller_listeners == [Listener(name="CONTROLLER", host="127.0.0.1", port=9095)]
    assert config.inter_broker_listener == Listener(name="PLAINTEXT", host="node2", port=9094)
    assert config.advertised_listener == config.inter_broker_listener

def test_a_broker_only_node() -> None:
    config = load_config(None, broker_only())
    assert config.roles == {"broker"} and config.is_broker and not config.is_controller
    assert config.controller_listeners == [] and config.security_protocol_map["CONTROLLER"] == "PLAINTEXT"
    assert config.advertised_broker_listeners == [Listener(name="PLAINTEXT", host="127.0.0.1", port=9192)]

def test_a_controller_only_node() -> None:
    config = load_config(None, controller_only(3, listeners="CONTROLLER://127.0.0.1:9097"))
    assert config.roles == {"controller"} and not config.is_broker
    assert config.client_listeners == [] and config.controller_listeners[0].port == 9097
    with pytest.raises(ConfigError):
        config.inter_broker_listener

def test_a_dynamic_quorum_names_bootstrap_servers() -> None:
    props = combined(1)
    del props["controller.quorum.voters"]
    props["controller.quorum.bootstrap.servers"] = "127.0.0.1:9093,[::1]:9095,ctl-3:9097"
    config = load_config(None, props)
    assert config.quorum_voters == [] and not config.implicit_quorum
    assert config.quorum_bootstrap_servers == [("127.0.0.1", 9093), ("::1", 9095), ("ctl-3", 9097)]


def test_kafka_defaults_of_the_kraft_configs() -> None:
    config = load_config(None, {})
    assert (
        config.controller_quorum_election_timeout_ms,
        config.controller_quorum_fetch_timeout_ms,
        config.controller_quorum_election_backoff_max_ms,
        config.controller_quorum_request_timeout_ms,
        config.controller_quorum_append_linger_ms,
        config.controller_quorum_retry_backoff_ms,
    ) == (1000, 2000, 1000, 2000, 25, 20)
    assert config.metadata_log_max_record_bytes_between_snapshots == 20 * 1024 * 1024
    assert config.metadata_log_max_snapshot_interval_ms == 3600000
    assert (config.broker_heartbeat_interval_ms, config.broker_session_timeout_ms, config.initial_broker_registration_timeout_ms) == (2000, 9000, 60000)
    assert config.controlled_shutdown_enable and config.broker_rack is None
    assert load_config(None, {"metadata.log.dir": "/meta"}).metadata_dir == Path("/meta")


def test_listener_names_are_upper_cased_and_wildcards_advertised_as_loopback() -> None:
    config = load_config(None, {"listeners": "plaintext://:9092"})
    assert config.listener == Listener(name="PLAINTEXT", host="0.0.0.0", port=9092)
    assert config.advertised_listener == Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)


def test_several_client_listeners_each_on_its_own_port() -> None:
    props = combined(
        1,
        listeners="PLAINTEXT://:19092,CONTROLLER://:9093,PLAINTEXT_HOST://:9092",
        **{
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PLAINTEXT_HOST:PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://kbroker-1:19092,PLAINTEXT_HOST://localhost:29092",
        },
    )
    config = load_config(None, props)
    assert [lst.name for lst in config.client_listeners] == ["PLAINTEXT", "PLAINTEXT_HOST"]
    assert [(lst.host, lst.port) for lst in config.advertised_broker_listeners] == [("kbroker-1", 19092), ("localhost", 29092)]
    assert config.listener.port == 19092


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (combined(1, **{"node.id": "5"}), "the node id 5 must be included in the set of voters"),
        ({k: v for k, v in combined(1).items() if k != "node.id"}, "Missing configuration `node.id`"),
        (combined(1, listeners="PLAINTEXT://127.0.0.1:9092"), "controller.listener.names must contain at least one value appearing in the 'listeners'"),
        (combined(1, **{"controller.listener.names": "CONTROLLER,OTHER"}), "must only contain values appearing in the 'listeners'"),
        (broker_only(1), "the node id 1 must not be included in the set of voters"),
        (broker_only(listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"), "must not contain a value appearing in the 'listeners'"),
        (broker_only(**{"controller.listener.names": ""}), "controller.listener.names must contain at least one value"),
        (broker_only(**{"advertised.listeners": "PLAINTEXT://h:9192,CONTROLLER://h:9093"}), "advertised.listeners must not contain the controller listener"),
        (broker_only(**{"controller.quorum.voters": ""}), "either controller.quorum.bootstrap.servers"),
        (controller_only(**{"controller.quorum.voters": ""}), "either controller.quorum.bootstrap.servers"),
        (controller_only(listeners="CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"), "must only contain KRaft controller listeners"),
        (controller_only(4), "the node id 4 must be included in the set of voters"),
        (broker_only(**{"inter.broker.listener.name": "REPLICATION"}), "inter.broker.listener.name must be a listener name defined in advertised.listeners"),
        (broker_only(**{"advertised.listeners": "OTHER://h:1", "listener.security.protocol.map": "OTHER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}), "inter.broker.listener.name"),
        (broker_only(listeners="SSL://127.0.0.1:9192", **{"inter.broker.listener.name": "SSL"}), "an SSL listener needs a keystore"),
        (
            broker_only(
                listeners="SASL_PLAINTEXT://127.0.0.1:9192",
                **{
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                },
            ),
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms of listener SASL_PLAINTEXT",
        ),
        (
            broker_only(
                listeners="SASL_PLAINTEXT://127.0.0.1:9192",
                **{
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.replace('username="broker" password="broker-secret" ', ""),
                },
            ),
            "PLAIN between nodes needs username and password",
        ),
        (broker_only(listeners="PLAINTEXT://127.0.0.1:9192,SASL_PLAINTEXT://127.0.0.1:9193"), "SASL mechanism GSSAPI is not served by kbroker"),
        (
            broker_only(listeners="PLAINTEXT://127.0.0.1:9192,SASL_PLAINTEXT://127.0.0.1:9193", **{"sasl.enabled.mechanisms": "PLAIN"}),
            "SASL mechanism PLAIN needs listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        (broker_only(listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9192"), "an SSL listener needs a keystore"),
        (broker_only(listeners="INTERNAL://127.0.0.1:9192"), "No security protocol defined for listener INTERNAL"),
        (broker_only(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}), "Controller listener with name CONTROLLER defined in controller.listener.names not found"),
        (broker_only(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL"}), "Listener CONTROLLER: SASL mechanism GSSAPI is not served"),
        (
            broker_only(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol": "PLAIN"}),
            "this node's PLAIN credentials for it need listener.name.controller.plain.sasl.jaas.config",
        ),
        (
            broker_only(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL", "ssl.endpoint.identification.algorithm": "ldap"}),
            "ssl.endpoint.identification.algorithm ldap: expected https or empty",
        ),
        (combined(1, **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}), "No security protocol defined for listener CONTROLLER"),
        ({"listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9092"}, "each listener must have a different port"),
        ({"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9094"}, "each listener must have a different name"),
        ({"listeners": "PLAINTEXT://127.0.0.1:99999"}, "is not NAME://HOST:PORT"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "nonroutable meta-address 0.0.0.0"),
        ({"controller.quorum.voters": "1@h"}, "'1@h' is not ID@HOST:PORT"),
        ({"controller.quorum.voters": "1@h:1,1@g:2"}, "voter id 1 appears more than once"),
        ({"controller.quorum.bootstrap.servers": "nohost"}, "'nohost' is not HOST:PORT"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "Invalid security protocol `TLS`"),
        ({"process.roles": "broker,broker"}, "must be broker, controller, or broker,controller"),
        ({"process.roles": "observer"}, "must be broker, controller, or broker,controller"),
        ({"log.dirs": " , "}, "At least one log directory"),
    ],
)
def test_kafka_cross_checks_refuse_with_one_line(props: dict[str, str], message: str) -> None:
    assert message in refused(props)


def test_duplicate_port_zero_is_allowed() -> None:
    config = load_config(None, {"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
    assert [lst.port for lst in config.listener_list] == [0, 0]


def test_an_explicit_protocol_map_is_taken_as_it_is() -> None:
    config = load_config(None, combined(1, **{"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}))
    assert config.security_protocol_map == {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}


def test_broker_config_by_field_names_gets_the_zero_config_node_id() -> None:
    assert BrokerConfig(log_dirs="/x").node_id == 1
    with pytest.raises(ValueError):
        BrokerConfig(controller_quorum_voters="1@h:1", listeners="PLAINTEXT://h:2,CONTROLLER://h:1")


_hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z0-9-]{1,8}){0,2}", fullmatch=True),
    st.builds(lambda *b: ".".join(map(str, b)), *[st.integers(0, 255)] * 4),
)


@given(st.dictionaries(st.integers(0, 2**31 - 1), st.tuples(_hosts, st.integers(0, 65535)), min_size=1, max_size=7))
def test_quorum_voters_parse_what_they_print(voters: dict[int, tuple[str, int]]) -> None:
    text = ",".join(f"{node_id}@{host}:{port}" for node_id, (host, port) in voters.items())
    assert parse_quorum_voters(text) == [QuorumVoter(node_id, host, port) for node_id, (host, port) in voters.items()]
