"""SASL/PLAIN: one broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners, users in each
listener's JAAS config as a Kafka broker's file gives them. Stock clients (confluent-kafka,
kafka-python, kcat and Kafka's console tools over SASL_SSL; every client over every secured
listener in test_secured_client_matrix.py) authenticate and work;
the exchange on the wire (handshake v0 and v1) answers as Kafka's does, refusals included, and a
refused client costs only its own connection (10,000 of them: test_failed_login_flood.py). Every
answer the wire test expects was first taken from Apache Kafka 4.4 configured the same way
(SASL_PLAINTEXT, PLAIN, the same JAAS config): error codes, messages, mechanisms listed, and where
it closes the connection."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v0 import request as handshake_v0
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.static.primitive import i32

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from broker.wire_client import recv_exact
from protocol.schema.api_versions.v5 import request as api_versions_v5
from tests.integration.certificates import TestCA
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_kcat import kcat, run_kcat  # noqa: F401 - kcat is a fixture
from tests.integration.test_sasl_scram import produce_once
from tests.integration.wire import exchange
from tests.ports import free_ports

TIMEOUT_S = 30.0
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
PLAIN_TOKEN = b"\x00alice\x00alice-secret"


class SaslBroker:
    def __init__(self, broker: BrokerProcess, sasl_port: int, sasl_ssl_port: int, ca: Path) -> None:
        self.broker = broker
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.sasl_ssl = f"127.0.0.1:{sasl_ssl_port}"
        self.sasl_port, self.sasl_ssl_port = sasl_port, sasl_ssl_port
        self.ca = ca


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    directory = tmp_path_factory.mktemp("sasl")
    ca = TestCA()
    ca_file = ca.write_ca(directory / "ca.pem")
    keystore = ca.write_pem_keystore(ca.issue("localhost"), directory / "server-keystore.pem")
    broker = BrokerProcess(directory / "data")
    sasl_port, sasl_ssl_port = free_ports(2)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "connection.failed.authentication.delay.ms": "300",
        }
    )
    broker.start()
    try:
        yield SaslBroker(broker, sasl_port, sasl_ssl_port, ca_file)
    finally:
        retire(broker)


def confluent(sasl: SaslBroker, protocol: str, password: str = "alice-secret", **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": sasl.sasl if protocol == "SASL_PLAINTEXT" else sasl.sasl_ssl,
        "security.protocol": protocol,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": password,
        **extra,
    }
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(sasl.ca)
    return config


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_authenticates_with_plain_and_stays_on_its_listener(sasl: SaslBroker, protocol: str) -> None:
    topic = unique_topic("sasl")
    create_topic(sasl.broker.bootstrap, topic)
    producer = Producer(confluent(sasl, protocol))
    for i in range(100):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    port = sasl.sasl_port if protocol == "SASL_PLAINTEXT" else sasl.sasl_ssl_port
    assert [(b.host, b.port) for b in producer.list_topics(topic, timeout=TIMEOUT_S).brokers.values()] == [("127.0.0.1", port)]
    consumer = Consumer(confluent(sasl, protocol, **{"group.id": unique_topic("g"), "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        assert seen == [f"v{i}".encode() for i in range(100)]
    finally:
        consumer.close()


def test_kafka_python_authenticates_with_plain(sasl: SaslBroker) -> None:
    topic = unique_topic("sasl-kp")
    create_topic(sasl.broker.bootstrap, topic)
    options = {"bootstrap_servers": sasl.sasl, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"}
    producer = KafkaProducer(**options)
    try:
        producer.send(topic, b"from kafka-python", partition=0).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(consumer_timeout_ms=int(TIMEOUT_S * 1000), **options)
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek(KafkaTopicPartition(topic, 0), 0)
        assert next(consumer).value == b"from kafka-python"
    finally:
        consumer.close()


def test_a_wrong_password_is_refused_to_the_client_and_logged_without_the_secret(sasl: SaslBroker) -> None:
    errors: list[KafkaError] = []
    producer = Producer(confluent(sasl, "SASL_PLAINTEXT", password="not-the-password", error_cb=errors.append))
    producer.produce(unique_topic("never"), b"x")
    deadline = time.monotonic() + TIMEOUT_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any("Invalid username or password" in e.str() for e in errors), errors
    producer.purge()
    producer.flush(0)
    events = [e for e in sasl.broker.log_events() if e.get("event") == "connection.authentication_failed"]
    assert events and events[-1]["level"] == "warning" and events[-1]["peer"].startswith("127.0.0.1:")
    assert "not-the-password" not in sasl.broker.log_path.read_text()


def connect(sasl: SaslBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", sasl.sasl_port), timeout=10)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_the_exchange_on_the_wire_answers_as_kafka(sasl: SaslBroker) -> None:
    # ApiVersions before authenticating is answered, and names both SASL APIs.
    with connect(sasl) as s:
        versions = exchange(s, api_versions_v3.ApiVersionsRequest(client_software_name="wire", client_software_version="1"))
        keys = {int(k.api_key) for k in versions.api_keys}
        assert {17, 36} <= keys
        handshake = exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 2)
        assert (handshake.error_code, handshake.mechanisms) == (ErrorCode.none, ("PLAIN",))
        ok = exchange(s, authenticate_v2.SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN), 3)
        assert (ok.error_code, ok.error_message) == (ErrorCode.none, "")
        # Authenticated: any request now, and a second handshake is ILLEGAL_SASL_STATE.
        assert exchange(s, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), 4).cluster_id
        assert exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 5).error_code == ErrorCode.illegal_sasl_state
    # A wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection closes.
    with connect(sasl) as s:
        exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
        refused = exchange(s, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong"), 2)
        assert (refused.error_code, refused.error_message) == (ErrorCode.sasl_authentication_failed, "Authentication failed: Invalid username or password")
        assert closed(s)
    # A mechanism not enabled: UNSUPPORTED_SASL_MECHANISM and the enabled ones, then closed.
    with connect(sasl) as s:
        unsupported = exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert (unsupported.error_code, unsupported.mechanisms) == (ErrorCode.unsupported_sasl_mechanism, ("PLAIN",))
        assert closed(s)
    # Any other request before authenticating: closed, unanswered.
    with connect(sasl) as s:
        with pytest.raises(ConnectionError):
            exchange(s, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    # Handshake v0: the token follows bare, and so does the (empty) answer.
    with connect(sasl) as s:
        assert exchange(s, handshake_v0.SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        s.sendall(struct.pack(">i", len(PLAIN_TOKEN)) + PLAIN_TOKEN)
        assert recv_exact(s, 4) == b"\x00\x00\x00\x00"
        assert exchange(s, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), 2).cluster_id
    # A frame above sasl.server.max.receive.size before authenticating: closed before it is read.
    with connect(sasl) as s:
        s.sendall(struct.pack(">i", 600_000) + bytes(1024))
        assert closed(s)
    # None of it disturbed anyone else.
    producer = Producer(confluent(sasl, "SASL_PLAINTEXT"))
    producer.produce(unique_topic("after"), b"still serving")
    assert producer.flush(TIMEOUT_S) == 0


def test_api_versions_v5_names_the_cluster_and_node_only_once_authenticated(sasl: SaslBroker) -> None:
    """Kafka 4.4's SaslServerAuthenticator answers an ApiVersions before authentication itself: a
    request naming one of cluster and node is INVALID_REQUEST, one naming another cluster is
    answered whole; once authenticated, KafkaApis answers it REBOOTSTRAP_REQUIRED (KIP-1242)."""

    def v5(cluster_id: str | None, node_id: int) -> api_versions_v5.ApiVersionsRequest:
        return api_versions_v5.ApiVersionsRequest(client_software_name="wire", client_software_version="1", cluster_id=cluster_id, node_id=i32(node_id))

    with connect(sasl) as s:
        assert exchange(s, v5("XXXXXXXXXXXXXXXXXXXXXX", 1)).error_code == ErrorCode.none
        assert exchange(s, v5("XXXXXXXXXXXXXXXXXXXXXX", -1), 2).error_code == ErrorCode.invalid_request
        assert exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 3).error_code == ErrorCode.none
        assert exchange(s, authenticate_v2.SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN), 4).error_code == ErrorCode.none
        assert exchange(s, v5("XXXXXXXXXXXXXXXXXXXXXX", 1), 5).error_code == ErrorCode.rebootstrap_required


def test_the_plaintext_listener_answers_sasl_requests_illegal_sasl_state(sasl: SaslBroker) -> None:
    with socket.create_connection(("127.0.0.1", sasl.broker.port), timeout=10) as s:
        assert exchange(s, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.illegal_sasl_state
        assert exchange(s, authenticate_v2.SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN), 2).error_code == ErrorCode.illegal_sasl_state


def test_describe_configs_names_the_jaas_configs_and_hides_them(sasl: SaslBroker) -> None:
    admin = AdminClient({"bootstrap.servers": sasl.broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()
    configs = future.result(timeout=TIMEOUT_S)
    jaas = configs["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert (jaas.value, jaas.is_sensitive) == (None, True)
    assert configs["sasl.enabled.mechanisms"].value == "PLAIN"


def test_kcat_over_sasl_ssl(sasl: SaslBroker, kcat: str) -> None:
    topic = unique_topic("sasl-kcat")
    create_topic(sasl.broker.bootstrap, topic)
    secured = ["-b", sasl.sasl_ssl, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={sasl.ca}", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    run_kcat(kcat, *secured, "-P", "-t", topic, "-p", "0", stdin=b"one\ntwo\n")
    assert run_kcat(kcat, *secured, "-C", "-t", topic, "-p", "0", "-e", "-f", "%s\\n") == b"one\ntwo\n"


def test_kafkas_console_producer_and_consumer_over_sasl_ssl(sasl: SaslBroker, kafka_lib: Path, tmp_path: Path) -> None:
    """kafka-console-producer.sh and kafka-console-consumer.sh with --command-config, as a user of
    a secured Kafka cluster runs them: SASL_SSL, PLAIN, a PEM truststore, hostname verification."""
    topic = unique_topic("sasl-java")
    create_topic(sasl.broker.bootstrap, topic)
    client = tmp_path / "client.properties"
    client.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={sasl.ca}\n"
    )

    def tool(main_class: str, *args: str, stdin: str | None = None) -> str:
        command = ["java", *TOOL_JVM_OPTS, "-cp", f"{kafka_lib}/*", main_class, "--bootstrap-server", sasl.sasl_ssl, "--command-config", str(client), *args]
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    tool("org.apache.kafka.tools.ConsoleProducer", "--topic", topic, stdin="first\nsecond\n")
    out = tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", topic, "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000")
    assert out.splitlines() == ["first", "second"]


def test_oauthbearer_with_unsecured_tokens(tmp_path_factory: pytest.TempPathFactory) -> None:
    """OAUTHBEARER as Kafka's out-of-the-box unsecured validator checks it: librdkafka's unsecured
    JWT (sasl.oauthbearer.config) logs in; a token without the required scope gets Kafka's JSON
    challenge and the client reports the failure."""
    broker = BrokerProcess(tmp_path_factory.mktemp("oauth") / "data")
    port = free_ports(1)[0]
    jaas = 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="kafka";'
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas,
        }
    )
    broker.start()
    try:
        topic = unique_topic("oauth")
        create_topic(broker.bootstrap, topic)

        def produce(scope: str) -> list[KafkaError]:
            config = {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": f"principal=alice scope={scope}",
            }
            return produce_once(config, topic)

        assert produce("kafka,other") == []
        errors = produce("other")
        # Kafka 4.4's answer to the same client, compared: the required scope as Java prints a list.
        assert any('{"status":"insufficient_scope", "scope":"[kafka]"}' in e.str() for e in errors), errors
    finally:
        retire(broker)
