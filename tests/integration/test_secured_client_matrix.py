"""Every client the project supports over every way a client secures its connection: confluent-kafka,
kafka-python, aiokafka and kcat over SSL without and with a client certificate, and over
SASL_PLAINTEXT and SASL_SSL with PLAIN and with SCRAM-SHA-512, each producing a record and reading
it back on its secured listener. One broker serves them all: an SSL listener that asks for a
certificate (ssl.client.auth=requested), and SASL_PLAINTEXT and SASL_SSL listeners with both
mechanisms; alice's SCRAM credential is made through the PLAINTEXT listener first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.integration.certificates import TestCA
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.test_kcat import kcat, run_kcat  # noqa: F401 - kcat is a fixture
from tests.ports import free_ports

TIMEOUT_S = 30.0
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
MODES = ("SSL", "SSL+certificate", "SASL_PLAINTEXT/PLAIN", "SASL_SSL/PLAIN", "SASL_PLAINTEXT/SCRAM-SHA-512", "SASL_SSL/SCRAM-SHA-512")
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


@dataclass(frozen=True)
class Secured:
    ports: dict[str, int]  # by security protocol
    ca: Path
    cert: Path
    key: Path
    topics: dict[tuple[str, str], str]  # by (client, mode)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("client-matrix")
    ca = TestCA()
    client = ca.issue("matrix-client", server=False)
    (directory / "client.crt").write_text(client.cert_pem())
    (directory / "client.key").write_text(client.key_pem())
    broker = BrokerProcess(directory / "data")
    ssl_port, sasl_port, sasl_ssl_port = free_ports(3)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(ca.write_pem_keystore(ca.issue("localhost"), directory / "server.pem")),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.write_ca(directory / "ca.pem")),
            "listener.name.ssl.ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "offsets.topic.num.partitions": "1",
            **{f"listener.name.{lst}.plain.sasl.jaas.config": PLAIN_JAAS for lst in ("sasl_plaintext", "sasl_ssl")},
            **{f"listener.name.{lst}.scram-sha-512.sasl.jaas.config": SCRAM_JAAS for lst in ("sasl_plaintext", "sasl_ssl")},
        }
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=TIMEOUT_S)
        topics = {(c, m): f"matrix-{c}-{m.replace('/', '-').replace('+', '-')}".lower() for c in CLIENTS for m in MODES}
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()], operation_timeout=TIMEOUT_S).values():
            future.result(timeout=TIMEOUT_S)
        ports = {"SSL": ssl_port, "SASL_PLAINTEXT": sasl_port, "SASL_SSL": sasl_ssl_port}
        yield Secured(ports, directory / "ca.pem", directory / "client.crt", directory / "client.key", topics)
    finally:
        retire(broker)


@dataclass(frozen=True)
class Mode:
    protocol: str
    mechanism: str | None
    certificate: bool

    @classmethod
    def parse(cls, mode: str) -> "Mode":
        protocol, _, mechanism = mode.partition("/")
        return cls(protocol.removesuffix("+certificate"), mechanism or None, mode.endswith("+certificate"))

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def librdkafka_config(s: Secured, mode: Mode) -> dict[str, str]:
    """confluent-kafka's and kcat's settings: librdkafka's names."""
    config = {"bootstrap.servers": f"127.0.0.1:{s.ports[mode.protocol]}", "security.protocol": mode.protocol}
    if mode.tls:
        config["ssl.ca.location"] = str(s.ca)
    if mode.certificate:
        config |= {"ssl.certificate.location": str(s.cert), "ssl.key.location": str(s.key)}
    if mode.mechanism:
        config |= {"sasl.mechanism": mode.mechanism, "sasl.username": "alice", "sasl.password": "alice-secret"}
    return config


def python_client_options(s: Secured, mode: Mode, aio: bool) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings (aiokafka takes an SSLContext)."""
    options: dict[str, Any] = {"bootstrap_servers": f"127.0.0.1:{s.ports[mode.protocol]}", "security_protocol": mode.protocol}
    if mode.tls:
        cert = (str(s.cert), str(s.key)) if mode.certificate else (None, None)
        if aio:
            options["ssl_context"] = create_ssl_context(cafile=str(s.ca), certfile=cert[0], keyfile=cert[1])
        else:
            options |= {"ssl_cafile": str(s.ca), "ssl_certfile": cert[0], "ssl_keyfile": cert[1]}
    if mode.mechanism:
        options |= {"sasl_mechanism": mode.mechanism, "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    return options


def round_trip_confluent(s: Secured, mode: Mode, topic: str, value: bytes, kcat: str) -> list[bytes]:
    config = librdkafka_config(s, mode)
    producer = Producer(config)
    producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**config, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None, message and message.error()
        return [message.value()]
    finally:
        consumer.close()


def round_trip_kafka_python(s: Secured, mode: Mode, topic: str, value: bytes, kcat: str) -> list[bytes]:
    options = python_client_options(s, mode, aio=False)
    producer = KafkaProducer(**options)
    try:
        producer.send(topic, value, partition=0).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(consumer_timeout_ms=int(TIMEOUT_S * 1000), auto_offset_reset="earliest", **options)
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        return [next(iter(consumer)).value]
    finally:
        consumer.close()


def round_trip_aiokafka(s: Secured, mode: Mode, topic: str, value: bytes, kcat: str) -> list[bytes]:
    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**python_client_options(s, mode, aio=True))
        await producer.start()
        try:
            await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", **python_client_options(s, mode, aio=True))
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=int(TIMEOUT_S * 1000), max_records=1), TIMEOUT_S)
            return [m.value for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()

    return asyncio.run(run())


def round_trip_kcat(s: Secured, mode: Mode, topic: str, value: bytes, kcat: str) -> list[bytes]:
    config = librdkafka_config(s, mode)
    args = ["-b", config.pop("bootstrap.servers")]
    for key, setting in config.items():
        args += ["-X", f"{key}={setting}"]
    run_kcat(kcat, *args, "-P", "-t", topic, "-p", "0", stdin=value + b"\n")
    return run_kcat(kcat, *args, "-C", "-t", topic, "-p", "0", "-e", "-f", "%s\\n").splitlines()


ROUND_TRIPS: dict[str, Callable[[Secured, Mode, str, bytes, str], list[bytes]]] = {
    "confluent-kafka": round_trip_confluent,
    "kafka-python": round_trip_kafka_python,
    "aiokafka": round_trip_aiokafka,
    "kcat": round_trip_kcat,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", CLIENTS)
def test_the_client_produces_and_reads_back_on_a_secured_listener(secured: Secured, kcat: str, client: str, mode: str) -> None:
    value = f"{client} over {mode}".encode()
    assert ROUND_TRIPS[client](secured, Mode.parse(mode), secured.topics[(client, mode)], value, kcat) == [value]
