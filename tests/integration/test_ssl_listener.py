"""SSL listeners: one broker with a PLAINTEXT and an SSL listener (a PEM keystore made by a test CA,
``ssl.client.auth=requested``), stock clients over TLS with and without a client certificate,
Metadata that shows each client the listener it came in on, fetches of more than one TLS record's
worth of segment bytes (read and encrypted, not sendfile), and clients that break TLS."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path
from typing import Iterator

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from tests.integration.certificates import TestCA
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.ports import free_port

TIMEOUT_S = 30.0
OTHER_SUITE = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"


class SslBroker:
    def __init__(self, broker: BrokerProcess, ssl_port: int, directory: Path, other_port: int) -> None:
        self.broker = broker
        self.ssl_port = ssl_port
        self.other_port = other_port
        self.ca = directory / "ca.pem"
        self.client_cert = directory / "client.pem"
        self.client_key = directory / "client.key"

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SslBroker]:
    directory = tmp_path_factory.mktemp("ssl")
    ca = TestCA()
    ca.write_ca(directory / "ca.pem")
    server = ca.issue("localhost")
    keystore = ca.write_pem_keystore(server, directory / "server-keystore.pem", key_password="key-secret")
    client = ca.issue("client-1", server=False)
    (directory / "client.pem").write_text(client.cert_pem())
    (directory / "client.key").write_text(client.key_pem())
    # A second TLS listener with its own certificate (listener.name.<l>.ssl.*).
    other = ca.write_pem_keystore(ca.issue("other.localhost"), directory / "other-keystore.pem")
    broker = BrokerProcess(directory / "data")
    ssl_port, other_port = free_port(), free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port},OTHER://127.0.0.1:{other_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,OTHER:SSL,CONTROLLER:PLAINTEXT",
            "listener.name.other.ssl.keystore.location": str(other),
            "listener.name.other.ssl.client.auth": "none",
            # One TLS 1.2 suite in Java's spelling, which also takes TLS 1.3 off that listener.
            "listener.name.other.ssl.cipher.suites": OTHER_SUITE,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.key.password": "key-secret",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(directory / "ca.pem"),
            "ssl.client.auth": "requested",
        }
    )
    broker.start()
    try:
        yield SslBroker(broker, ssl_port, directory, other_port)
    finally:
        retire(broker)


def confluent_ssl(tls: SslBroker, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": tls.ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(tls.ca), **extra}


def test_confluent_kafka_produces_and_consumes_over_tls_and_metadata_names_the_ssl_listener(tls: SslBroker) -> None:
    topic = unique_topic("ssl")
    create_topic(tls.broker.bootstrap, topic)
    # 4 MB of records: fetches of many TLS records, and answers bigger than the socket takes at once.
    values = [f"{i:08d}".encode() + bytes(4000) for i in range(1000)]
    producer = Producer(confluent_ssl(tls, **{"linger.ms": 5}))
    acked: list[int] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert sorted(acked) == list(range(len(values)))
    metadata = producer.list_topics(topic, timeout=TIMEOUT_S)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", tls.ssl_port)]

    consumer = Consumer(confluent_ssl(tls, **{"group.id": unique_topic("g"), "enable.auto.commit": False, "fetch.max.bytes": 8 * 1024 * 1024}))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        assert seen == values
    finally:
        consumer.close()


def test_kafka_python_over_tls_with_and_without_a_client_certificate(tls: SslBroker) -> None:
    topic = unique_topic("ssl-kp")
    create_topic(tls.broker.bootstrap, topic)
    with_cert = {"ssl_certfile": str(tls.client_cert), "ssl_keyfile": str(tls.client_key)}
    for n, extra in enumerate(({}, with_cert)):
        producer = KafkaProducer(bootstrap_servers=tls.ssl_bootstrap, security_protocol="SSL", ssl_cafile=str(tls.ca), **extra)
        try:
            producer.send(topic, f"value-{n}".encode(), partition=0).get(timeout=TIMEOUT_S)
        finally:
            producer.close()
    consumer = KafkaConsumer(bootstrap_servers=tls.ssl_bootstrap, security_protocol="SSL", ssl_cafile=str(tls.ca), consumer_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek(KafkaTopicPartition(topic, 0), 0)
        got = [next(consumer).value for _ in range(2)]
    finally:
        consumer.close()
    assert got == [b"value-0", b"value-1"]


def test_the_plaintext_listener_still_names_itself(tls: SslBroker) -> None:
    producer = Producer({"bootstrap.servers": tls.broker.bootstrap})
    metadata = producer.list_topics(timeout=TIMEOUT_S)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", tls.broker.port)]


def test_a_client_that_is_not_a_tls_client_or_gives_up_mid_handshake_costs_only_its_own_connection(tls: SslBroker) -> None:
    # A Kafka request in plaintext on the SSL port: not a ClientHello.
    with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00")
        assert s.recv(1024) == b""  # closed, not answered
    # Random bytes, then a handshake abandoned after the ClientHello.
    with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as s:
        s.sendall(bytes(range(256)) * 4)
        assert s.recv(1024) == b""
    context = ssl.create_default_context(cafile=str(tls.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    half = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        half.do_handshake()
    with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as s:
        s.sendall(outgoing.read())
        assert s.recv(65536)  # the server's first flight; the client goes away here
    # A client that trusts another CA fails its handshake; the broker is unmoved.
    other = TestCA("another CA")
    other_ca = other.write_ca(tls.ca.parent / "other-ca.pem")
    with pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context(cafile=str(other_ca)).wrap_socket(socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10), server_hostname="localhost")
    topic = unique_topic("ssl-after")
    create_topic(tls.broker.bootstrap, topic)
    producer = Producer(confluent_ssl(tls))
    producer.produce(topic, b"still serving", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert tls.broker.running
    failures = [e for e in tls.broker.log_events() if e.get("event") == "connection.ssl_failed"]
    assert len(failures) >= 2
    assert all("error" not in (e.get("level") or "") for e in failures)


def test_describe_configs_shows_the_ssl_settings_and_never_a_password(tls: SslBroker) -> None:
    admin = AdminClient({"bootstrap.servers": tls.broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()
    configs = future.result(timeout=TIMEOUT_S)
    assert configs["ssl.keystore.location"].value == str(tls.ca.parent / "server-keystore.pem")
    assert configs["ssl.client.auth"].value == "requested"
    password = configs["ssl.key.password"]
    assert (password.value, password.is_sensitive) == (None, True)


def test_a_listener_with_its_own_ssl_configs_serves_its_own_certificate(tls: SslBroker) -> None:
    """listener.name.other.ssl.keystore.location: OTHER shows its certificate, SSL the broker-wide one."""

    def common_name(port: int) -> str:
        pem = ssl.get_server_certificate(("127.0.0.1", port), ca_certs=str(tls.ca), timeout=TIMEOUT_S)
        certificate = x509.load_pem_x509_certificate(pem.encode())
        return str(certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)

    assert common_name(tls.ssl_port) == "localhost"
    assert common_name(tls.other_port) == "other.localhost"


def test_a_listeners_keystore_is_replaced_at_run_time_and_a_mismatched_one_refused(tls: SslBroker) -> None:
    """kafka-configs.sh --entity-type brokers --alter --add-config listener.name.ssl.ssl.keystore.location=…:
    new connections get the new certificate, an open one keeps working, and a keystore whose
    certificate names another host is refused (INVALID_CONFIG) as Kafka refuses it."""
    def fingerprint() -> bytes:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=TIMEOUT_S) as raw, context.wrap_socket(raw) as sock:
            der = sock.getpeercert(binary_form=True)
            assert der is not None
            return der

    admin = AdminClient(confluent_ssl(tls))
    node = str(admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S).nodes[0].id)
    old = fingerprint()
    producer = Producer(confluent_ssl(tls))
    topic = unique_topic("reload")
    create_topic(tls.broker.bootstrap, topic)
    producer.produce(topic, b"before")
    assert producer.flush(TIMEOUT_S) == 0

    # The clients below keep their connections (and the tool trusts no CA to read the certificate),
    # so the renewed certificate may come from another CA.
    other_ca = TestCA("another CA")
    renewed = other_ca.write_pem_keystore(other_ca.issue("localhost"), tls.ca.parent / "renewed-keystore.pem", key_password="key-secret")
    key = "listener.name.ssl.ssl.keystore.location"

    def alter(path: Path) -> None:
        resource = ConfigResource("BROKER", node, incremental_configs=[ConfigEntry(key, str(path), incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(TIMEOUT_S)

    alter(renewed)
    deadline = time.monotonic() + TIMEOUT_S
    while fingerprint() == old:
        assert time.monotonic() < deadline, "the listener never served the new certificate"
        time.sleep(0.1)
    producer.produce(topic, b"after")  # its connection was made with the old certificate
    assert producer.flush(TIMEOUT_S) == 0

    intruder = other_ca.write_pem_keystore(other_ca.issue("intruder.example"), tls.ca.parent / "intruder-keystore.pem", key_password="key-secret")
    with pytest.raises(KafkaException) as refused:
        alter(intruder)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "DistinguishedName or SubjectAltNames do not match" in refused.value.args[0].str()


def test_a_listeners_cipher_suites_admit_a_client_that_offers_one_of_them_and_no_other(tls: SslBroker) -> None:
    """listener.name.other.ssl.cipher.suites: librdkafka (OpenSSL's spelling on its side) offering
    that suite connects; offering only another one it fails its handshake. Without a TLS 1.3 suite
    in the list, a client that offers TLS 1.3 gets TLS 1.2, as from a Java broker."""
    other = f"127.0.0.1:{tls.other_port}"
    admitted = Producer({**confluent_ssl(tls), "bootstrap.servers": other, "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    assert [b.port for b in admitted.list_topics(timeout=TIMEOUT_S).brokers.values()] == [tls.other_port]
    errors: list[KafkaError] = []
    refused = Producer({**confluent_ssl(tls), "bootstrap.servers": other, "ssl.cipher.suites": "ECDHE-ECDSA-AES256-GCM-SHA384", "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        refused.poll(0.1)
    # As from Kafka, the refusal comes as TLS's handshake_failure alert (40), not a bare close.
    # librdkafka files it under _SSL, or under _TRANSPORT when its socket sees the close first
    # (seen on a loaded machine); the alert in the text is what the broker sent either way.
    assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT), errors
    assert "alert handshake failure" in errors[0].str() and "alert number 40" in errors[0].str(), errors
    offers_another = ssl.create_default_context(cafile=str(tls.ca))
    offers_another.maximum_version = ssl.TLSVersion.TLSv1_2
    offers_another.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
    with socket.create_connection(("127.0.0.1", tls.other_port), timeout=TIMEOUT_S) as raw:
        with pytest.raises(ssl.SSLError, match="SSLV3_ALERT_HANDSHAKE_FAILURE"):
            offers_another.wrap_socket(raw, server_hostname="localhost")
    with socket.create_connection(("127.0.0.1", tls.other_port), timeout=TIMEOUT_S) as raw:
        with ssl.create_default_context(cafile=str(tls.ca)).wrap_socket(raw, server_hostname="localhost") as sock:
            assert sock.cipher()[:2] == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2")
