"""KIP-368 re-authentication: with `connections.max.reauth.ms` a SASL session lasts that long;
librdkafka re-authenticates on the same connection before it ends, and a client that does not
is disconnected at its next request after the session has expired."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v1 import request as handshake_v1

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.wire import exchange
from tests.ports import free_ports

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";'
REAUTH_MS = 1000
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    broker = BrokerProcess(tmp_path_factory.mktemp("reauth") / "data")
    (sasl_port,) = free_ports(1)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
        }
    )
    broker.start()
    try:
        yield broker, f"127.0.0.1:{sasl_port}"
    finally:
        retire(broker)


def login(address: str, token: bytes = b"\x00alice\x00alice-secret", correlation_id: int = 1) -> tuple[socket.socket, float]:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    return sock, authenticate(sock, token, correlation_id)


def authenticate(sock: socket.socket, token: bytes, correlation_id: int) -> float:
    assert exchange(sock, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), correlation_id).error_code == ErrorCode.none
    answer = exchange(sock, authenticate_v2.SaslAuthenticateRequest(auth_bytes=token), correlation_id + 1)
    assert answer.error_code == ErrorCode.none, answer
    return answer.session_lifetime.total_seconds()


def metadata(sock: socket.socket, correlation_id: int) -> object:
    return exchange(sock, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), correlation_id)


def test_the_session_lifetime_is_told_and_an_expired_session_loses_its_connection(broker: tuple[BrokerProcess, str]) -> None:
    sock, lifetime = login(broker[1])
    with sock:
        assert lifetime == REAUTH_MS / 1000
        metadata(sock, 3)
        time.sleep(REAUTH_MS / 1000 + 0.5)  # past the session's end: the point of the test
        with pytest.raises(ConnectionError):
            metadata(sock, 4)


def test_a_client_that_re_authenticates_in_time_keeps_its_connection(broker: tuple[BrokerProcess, str]) -> None:
    sock, _ = login(broker[1])
    with sock:
        for round_ in range(3):
            time.sleep(REAUTH_MS / 1000 * 0.6)
            assert authenticate(sock, b"\x00alice\x00alice-secret", 10 + 3 * round_) == REAUTH_MS / 1000
            metadata(sock, 12 + 3 * round_)


def test_re_authenticating_as_someone_else_is_refused(broker: tuple[BrokerProcess, str]) -> None:
    sock, _ = login(broker[1])
    with sock:
        exchange(sock, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 3)
        answer = exchange(sock, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00bob\x00bob-secret"), 4)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals during re-authentication" in (answer.error_message or "")
        with pytest.raises((ConnectionError, OSError)):
            metadata(sock, 5)


def test_librdkafka_re_authenticates_on_one_connection(broker: tuple[BrokerProcess, str]) -> None:
    topic = unique_topic("reauth")
    create_topic(broker[0].bootstrap, topic)
    stats: list[dict] = []  # type: ignore[type-arg]
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": broker[1],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s)),
            "error_cb": errors.append,
        }
    )
    end = time.monotonic() + 3 * REAUTH_MS / 1000
    failed: list[object] = []
    while time.monotonic() < end:
        producer.produce(topic, b"v", on_delivery=lambda err, msg: err is not None and failed.append(err))
        producer.poll(0.05)
    assert producer.flush(TIMEOUT_S) == 0
    assert not failed and not errors
    # Three session lifetimes and still the first connection to each broker: it re-authenticated.
    connects = [b["connects"] for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    assert connects and all(c == 1 for c in connects), connects
