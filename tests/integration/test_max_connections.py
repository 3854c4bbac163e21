"""Kafka's connection limits on a real broker: max.connections.per.ip closes a connection past the
limit at once, its overrides raise it for one address, a connection that fails its TLS handshake
or its SASL authentication gives its slot back, and max.connections leaves the next client
waiting in the listen backlog (served once a connection closes) while the inter-broker listener
still gets in, at the cost of another listener's least recently used connection."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Iterator

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v1 import request as handshake_v1

from broker.wire_client import recv_exact
from tests.integration.certificates import TestCA
from tests.integration.conftest import BrokerProcess, StartBroker, retire
from tests.integration.helpers import produce_acked, unique_topic, wait_for
from tests.integration.wire import exchange
from tests.ports import free_port, free_ports

# Per socket operation; generous for a loaded 2-core machine.
TIMEOUT_S = 10.0
# How long a connection at max.connections is watched for an answer it must not get yet.
NOT_YET_S = 1.0


def api_versions(sock: socket.socket, correlation_id: int) -> None:
    """ApiVersions v0 (request header v1, client id "limits", empty body); its answer must come."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 6) + b"limits"
    sock.sendall(struct.pack(">i", len(body)) + body)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    (answered,) = struct.unpack_from(">i", recv_exact(sock, size))
    assert answered == correlation_id


def served(port: int, correlation_id: int = 1) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    api_versions(sock, correlation_id)
    return sock


def closed_by_broker(sock: socket.socket) -> bool:
    """The broker closed its end: the next read ends the stream (or, if the broker left bytes
    unread, finds the connection reset)."""
    sock.settimeout(TIMEOUT_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def close_and_wait(sock: socket.socket) -> None:
    """Close, and return once the broker has closed its end too: its slot is free by then."""
    sock.shutdown(socket.SHUT_WR)
    assert closed_by_broker(sock)
    sock.close()


def first_served(port: int) -> socket.socket:
    """A first connection that is served. The start-up check (conftest's connect and close) may
    still hold a slot until the broker reads its close: a connection refused meanwhile is retried."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        try:
            api_versions(sock, 7)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # a pause between tries, not a wait for anything


@pytest.fixture
def two_listener_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    """PLAINTEXT for clients and INTERNAL for brokers, at most 3 connections in all."""
    broker = BrokerProcess(tmp_path / "data")
    internal_port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections": "3",
        }
    )
    try:
        yield broker.start(), internal_port
    finally:
        retire(broker)


def test_the_connection_past_the_per_ip_limit_is_closed(broker_factory: StartBroker) -> None:
    broker = broker_factory({"max.connections.per.ip": "5"})
    held = [first_served(broker.port)] + [served(broker.port, i) for i in range(4)]
    try:
        sixth = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
        assert closed_by_broker(sixth)
        sixth.close()
        assert wait_for(lambda: bool(broker.events_named("connection.rejected")), TIMEOUT_S)
        rejected = broker.events_named("connection.rejected")[0]
        assert rejected["limit"] == 5 and rejected["peer"].startswith("127.0.0.1:") and rejected["level"] == "info"

        close_and_wait(held.pop())
        held.append(served(broker.port))
    finally:
        for sock in held:
            sock.close()
    # Under the limit again, a real client connects (librdkafka opens two connections) and produces.
    assert produce_acked(broker.bootstrap, unique_topic("limits"), [b"under the limit"], timeout_s=TIMEOUT_S * 2) == [0]


def test_an_override_raises_the_limit_of_its_address(broker_factory: StartBroker) -> None:
    broker = broker_factory({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:3"})
    held = [first_served(broker.port)] + [served(broker.port, i) for i in range(2)]
    try:
        fourth = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
        assert closed_by_broker(fourth)
        fourth.close()
    finally:
        for sock in held:
            sock.close()


def test_a_failed_tls_handshake_or_sasl_login_gives_its_slot_back(tmp_path: Path) -> None:
    ca = TestCA()
    keystore = ca.write_pem_keystore(ca.issue("localhost"), tmp_path / "server-keystore.pem")
    broker = BrokerProcess(tmp_path / "data")
    ssl_port, sasl_port = free_ports(2)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
            ),
            "max.connections.per.ip": "1",
        }
    )
    broker.start()
    try:
        close_and_wait(first_served(broker.port))
        # Random bytes where a ClientHello belongs: the handshake fails and the broker closes.
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=TIMEOUT_S) as tls:
            tls.sendall(bytes(range(256)) * 4)
            assert closed_by_broker(tls)
        close_and_wait(served(broker.port))

        # A wrong password: answered SASL_AUTHENTICATION_FAILED, then closed.
        with served(sasl_port) as sasl:
            assert exchange(sasl, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 2).error_code == ErrorCode.none
            refused = exchange(sasl, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong"), 3)
            assert refused.error_code == ErrorCode.sasl_authentication_failed
            assert closed_by_broker(sasl)
        served(broker.port).close()
        assert [e["event"] for e in broker.log_events() if e.get("event") in ("connection.ssl_failed", "connection.authentication_failed")] == [
            "connection.ssl_failed",
            "connection.authentication_failed",
        ]
    finally:
        retire(broker)


def test_past_max_connections_a_client_waits_and_the_inter_broker_listener_gets_in(two_listener_broker: tuple[BrokerProcess, int]) -> None:
    broker, internal_port = two_listener_broker
    held = [served(broker.port, i) for i in range(3)]
    try:
        # The fourth is not refused: it waits (its request unanswered) until a connection closes.
        waiting = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
        held.append(waiting)
        waiting.sendall(struct.pack(">i", 16) + struct.pack(">hhih", 18, 0, 42, 6) + b"limits")
        waiting.settimeout(NOT_YET_S)
        with pytest.raises(TimeoutError):
            waiting.recv(1)
        held.pop(0).close()
        waiting.settimeout(TIMEOUT_S)
        (size,) = struct.unpack(">i", recv_exact(waiting, 4))
        assert struct.unpack_from(">i", recv_exact(waiting, size)) == (42,)

        # Three connections again, the broker's maximum: a broker still gets in on INTERNAL, and
        # the least recently used client connection (the first of those left) makes room.
        held.append(served(internal_port, 50))
        assert closed_by_broker(held[0])
        api_versions(held[1], 51)
        api_versions(waiting, 52)
        assert wait_for(lambda: bool(broker.events_named("connection.closed_over_max_connections")), TIMEOUT_S)
    finally:
        for sock in held:
            sock.close()
