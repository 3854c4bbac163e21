"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512: credentials made with AlterUserScramCredentials (the
admin client's call, forwarded to the controller, kept as UserScramCredentialRecords in the
metadata log), listed with DescribeUserScramCredentials, used by stock clients, refused with
Kafka's messages, kept across a restart, and gone once deleted; and the bootstrap user of
`kbroker storage format --add-scram`. The answers asserted here were first read from Apache
Kafka 4.4 configured the same way."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaProducer


from tests.integration.conftest import BrokerProcess, retire
from tests.kafka_tools import kafka_tool
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_storage_tool import CLUSTER, combined_node, kbroker, one_error_line, write_config
from tests.ports import free_port

TIMEOUT_S = 30.0
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    b = BrokerProcess(tmp_path_factory.mktemp("scram") / "data")
    port = free_port()
    b.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        }
    )
    b.start()
    try:
        yield b, f"127.0.0.1:{port}"
    finally:
        retire(b)


def alter(admin: AdminClient, alterations: list[object]) -> dict[str, Exception | None]:
    out: dict[str, Exception | None] = {}
    for user, future in admin.alter_user_scram_credentials(alterations).items():
        try:
            future.result(timeout=TIMEOUT_S)
            out[user] = None
        except Exception as e:  # noqa: BLE001 - the test looks at each user's answer
            out[user] = e
    return out


def produce_as(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> list[KafkaError]:
    """Produce one record with SCRAM; the client errors seen (empty when it went through)."""
    return produce_once({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}, topic)


def produce_once(config: dict[str, object], topic: str) -> list[KafkaError]:
    """Produce one record with a confluent-kafka producer so configured: the client errors seen
    (empty when it went through), once it was delivered or refused authentication."""
    errors: list[KafkaError] = []
    delivered: list[bool] = []
    producer = Producer({**config, "error_cb": errors.append})
    producer.produce(topic, b"one", partition=0, on_delivery=lambda err, msg: delivered.append(err is None))
    deadline = time.monotonic() + TIMEOUT_S
    while not delivered and not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(0)
    if delivered == [True]:
        return []
    assert errors, "neither delivered nor refused"
    return errors


def test_credentials_from_the_admin_api_authenticate_stock_clients_and_outlive_a_restart(broker: tuple[BrokerProcess, str]) -> None:
    b, sasl = broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert alter(
        admin,
        [
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"),
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret"),
        ],
    ) == {"alice": None, "bob": None}
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    infos = {user: [(i.mechanism, i.iterations) for i in f.result(timeout=TIMEOUT_S).scram_credential_infos] for user, f in described.items()}
    assert infos == {"alice": [(ScramMechanism.SCRAM_SHA_512, 8192)], "bob": [(ScramMechanism.SCRAM_SHA_256, 4096)]}

    topic = unique_topic("scram")
    create_topic(b.bootstrap, topic)
    assert produce_as(sasl, "SCRAM-SHA-512", "alice", "alice-secret", topic) == []
    assert produce_as(sasl, "SCRAM-SHA-256", "bob", "bob-secret", topic) == []
    kp = KafkaProducer(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob", sasl_plain_password="bob-secret")
    try:
        kp.send(topic, b"kafka-python", partition=0).get(timeout=TIMEOUT_S)
    finally:
        kp.close()

    # The wrong password, and a mechanism the user has no credential for: Kafka's message, which
    # never says whether the user exists.
    for mechanism, user, password in (("SCRAM-SHA-512", "alice", "wrong"), ("SCRAM-SHA-256", "alice", "alice-secret"), ("SCRAM-SHA-512", "nobody", "x")):
        errors = produce_as(sasl, mechanism, user, password, topic)
        assert any(f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}" in e.str() for e in errors), errors

    b.restart()
    assert produce_as(sasl, "SCRAM-SHA-512", "alice", "alice-secret", topic) == []

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert alter(admin, [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]) == {"alice": None}
    errors = produce_as(sasl, "SCRAM-SHA-512", "alice", "alice-secret", topic)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors)


def test_alterations_and_descriptions_kafka_refuses_are_refused_with_its_errors(broker: tuple[BrokerProcess, str]) -> None:
    b, _ = broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    answers = alter(
        admin,
        [
            UserScramCredentialUpsertion("few", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1024), b"pw"),
            UserScramCredentialUpsertion("many", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20000), b"pw"),
            UserScramCredentialDeletion("ghost", ScramMechanism.SCRAM_SHA_512),
        ],
    )
    assert "UNACCEPTABLE_CREDENTIAL" in str(answers["few"]) and "Too few iterations" in str(answers["few"])
    assert "UNACCEPTABLE_CREDENTIAL" in str(answers["many"]) and "Too many iterations" in str(answers["many"])
    assert "RESOURCE_NOT_FOUND" in str(answers["ghost"]) and "Attempt to delete a user credential that does not exist" in str(answers["ghost"])
    [(user, future)] = admin.describe_user_scram_credentials(["ghost"]).items()
    with pytest.raises(Exception, match="Attempt to describe a user credential that does not exist: ghost"):
        future.result(timeout=TIMEOUT_S)


def test_storage_format_add_scram_starts_the_cluster_with_a_user(tmp_path: Path) -> None:
    """kafka-storage.sh's bootstrap user: `format --add-scram` writes it into bootstrap.checkpoint,
    and the first active controller puts it in the metadata log."""
    node = BrokerProcess(tmp_path / "data1")
    sasl_port, controller_port = free_port(), free_port()
    props = combined_node(tmp_path, client_port=node.port, controller_port=controller_port)
    props.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},CONTROLLER://127.0.0.1:{controller_port}",
            # Kafka maps CONTROLLER itself only when no listener is secured.
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        }
    )
    node.config_file = write_config(tmp_path / "server.properties", props)
    bad = kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file), "--add-scram", "SCRAM-SHA-512=[name=admin,password=x,iterations=100]")
    assert "The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-512" in one_error_line(bad)
    formatted = kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file), "--add-scram", 'SCRAM-SHA-512=[name=admin,password="admin-secret"]')
    assert formatted.returncode == 0, formatted.stderr
    node.start()
    try:
        topic = unique_topic("bootstrap-user")
        create_topic(node.bootstrap, topic)
        assert produce_as(f"127.0.0.1:{sasl_port}", "SCRAM-SHA-512", "admin", "admin-secret", topic) == []
    finally:
        node.stop()



def test_kafkas_own_kafka_configs_manages_scram_users(broker: tuple[BrokerProcess, str], kafka_lib: Path) -> None:
    """kafka-configs.sh --entity-type users and clients, unchanged: SCRAM credentials and quotas
    (AlterUserScramCredentials, AlterClientQuotas and their Describe twins), printed as it prints
    them against Kafka."""
    b, sasl = broker

    def configs(*args: str) -> str:
        done = kafka_tool(kafka_lib, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b.bootstrap, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # Five JVM runs (each costs seconds): deletions are the admin API test's.
    added = configs("--alter", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-secret]", "--entity-type", "users", "--entity-name", "carol")
    assert "Completed updating config for user carol." in added
    topic = unique_topic("configs-user")
    create_topic(b.bootstrap, topic)
    assert produce_as(sasl, "SCRAM-SHA-512", "carol", "carol-secret", topic) == []
    # Quotas: kept in the metadata log (ClientQuotaRecord) and described, as Kafka prints them.
    configs("--alter", "--add-config", "producer_byte_rate=1048576,request_percentage=50", "--entity-type", "users", "--entity-name", "carol")
    configs("--alter", "--add-config", "consumer_byte_rate=2048", "--entity-type", "clients", "--entity-default")
    described = configs("--describe", "--entity-type", "users", "--entity-name", "carol")
    # Quotas in Kafka's order (its quotas are a Java HashMap), then the SCRAM line.
    assert "Quota configs for user-principal 'carol' are request_percentage=50.0, producer_byte_rate=1048576.0" in described
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=8192" in described
    assert "Quota configs for the default client-id are consumer_byte_rate=2048.0" in configs("--describe", "--entity-type", "clients", "--entity-default")
