"""socket-server-metrics (broker/metrics/selector_stats.py, socket_server_metrics.py), RequestBytes,
and what a SocketServer (broker/network.py) tells about its connections: counted over a real
loopback socket, and the disconnect listeners that ClientMetricsManager.connection_closed serves."""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.client_metrics_config import ClientAttributes
from broker.client_metrics_manager import ClientMetricsManager
from broker.config import BrokerConfig
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector
from broker.metrics.selector_stats import SelectorStats, WindowedRate
from broker.metrics.socket_server_metrics import SocketServerMetricsCollector
from broker.network import ClientInfo, Response, SocketServer, TransferMetrics
from broker.unimplemented_configs import problem
from protocol.headers import RequestHeader

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
PLAINTEXT = {"listener": "PLAINTEXT", "networkProcessor": "0"}


def scrape(collector: Any) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t" + body
    return struct.pack(">i", len(payload)) + payload


# -- Kafka's Rate --------------------------------------------------------------------------------------


def test_windowed_rate_is_kafkas_rate_over_two_30_s_samples() -> None:
    rate = WindowedRate(now_ms=0)
    for t in range(0, 10_000, 1_000):  # 10 events in the first 10 s
        rate.record(t)
    # Less than samples - 1 whole windows elapsed: a window is added (Rate.windowSize), 10 s + 30 s.
    assert rate.rate(10_000) == pytest.approx(10 / 40)
    for t in range(30_000, 40_000, 500):  # 20 more in a second sample
        rate.record(t)
    assert rate.rate(45_000) == pytest.approx(30 / 45)
    # The first sample expires 60 s after it began; the second 60 s after its start (30 s).
    assert rate.rate(65_000) == pytest.approx(20 / 35)
    assert rate.rate(95_000) == 0.0


# -- the collector ----------------------------------------------------------------------------------


def test_socket_server_metrics_have_kafkas_names_per_listener() -> None:
    plain, ssl = SelectorStats(now_ms=0), SelectorStats(now_ms=0)
    for t in (1_000, 2_000, 3_000):
        plain.connection_created(t)
    plain.connection_closed(4_000)
    plain.bytes_read, plain.bytes_written, plain.requests_read, plain.answers_sent = 100, 250, 4, 3
    servers = [
        type("Server", (), {"listener": "PLAINTEXT", "connections": [], "stats": plain})(),
        type("Server", (), {"listener": "SSL", "connections": [], "stats": ssl})(),
    ]
    s = scrape(SocketServerMetricsCollector(lambda: servers, now_ms=lambda: 6_000))

    def get(name: str, listener: str = "PLAINTEXT") -> float:
        return s[(f"kafka_server_socket_server_metrics_{name}", frozenset({**PLAINTEXT, "listener": listener}.items()))]

    assert get("connection_creation_total") == 3
    assert get("connection_close_total") == 1
    assert get("connection_creation_rate") == pytest.approx(3 / 36)  # 6 s elapsed, and a window added
    assert get("connection_close_rate") == pytest.approx(1 / 36)
    assert get("incoming_byte_total") == 100
    assert get("outgoing_byte_total") == 250
    # Kafka's Selector names from a client's side: on a broker, answers sent are its "requests".
    assert get("request_total") == 3
    assert get("response_total") == 4
    assert get("connection_creation_total", "SSL") == 0
    assert get("connection_count") == 0


def test_request_bytes_is_a_histogram_of_request_sizes_per_api() -> None:
    channel = RequestChannelMetrics()
    for size in (100, 300):
        timing = channel.start(0, 9, read_at=0.0, request_bytes=size)
        channel.dispatched(timing, 0, answered=True)
        timing.dequeued(0)
        timing.finish(timing.dequeued_at)
    s = scrape(RequestMetricsCollector(channel))
    produce = frozenset({("request", "Produce")})
    assert s[("kafka_network_requestmetrics_requestbytes_count", produce)] == 2
    assert s[("kafka_network_requestmetrics_requestbytes_sum", produce)] == 400
    assert s[("kafka_network_requestmetrics_requestbytes", produce | {("quantile", "0.999")})] == 300


# -- a real SocketServer ------------------------------------------------------------------------------


def test_a_socket_server_counts_its_connections_and_tells_who_closed() -> None:
    """Two ApiVersions over one connection, another connection opened and dropped: the listener's
    counters, RequestBytes (the body after the header) and the disconnect listener's ids."""

    async def run() -> tuple[SocketServer, RequestChannelMetrics, list[str], list[str]]:
        seen: list[str] = []
        closed: list[str] = []

        def dispatch(header: RequestHeader, frame_: bytearray, client: ClientInfo) -> Response:
            seen.append(client.connection_id)
            return [struct.pack(">ii", 4, header.correlation_id)]

        channel = RequestChannelMetrics()
        server = SocketServer(
            "127.0.0.1", 0, dispatch, max_request_size=1 << 20, max_in_flight=16, metrics=TransferMetrics(),
            request_metrics=channel, disconnect_listeners=(closed.append,),
        )
        await server.start()
        loop = asyncio.get_running_loop()
        clients = []
        for _ in range(2):
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", server.port))
            clients.append(sock)
        await loop.sock_sendall(clients[0], frame(18, 0, 1, b"abc") + frame(18, 0, 2, b"abcdefg"))
        got = b""
        while len(got) < 16:
            got += await asyncio.wait_for(loop.sock_recv(clients[0], 64), 5)
        for sock in clients:
            sock.close()
        for _ in range(100):
            if len(closed) == 2:
                break
            await asyncio.sleep(0.01)
        await server.stop_accepting()
        return server, channel, seen, closed

    server, channel, seen, closed = asyncio.run(run())
    stats = server.stats
    assert (stats.connections_created, stats.connections_closed) == (2, 2)
    assert stats.requests_read == 2 and stats.answers_sent == 2
    assert stats.bytes_read == len(frame(18, 0, 1, b"abc") + frame(18, 0, 2, b"abcdefg"))
    assert stats.bytes_written == 16
    assert set(seen) < set(closed) and len(set(closed)) == 2  # each connection once, by its ClientInfo id
    s = scrape(RequestMetricsCollector(channel))
    assert s[("kafka_network_requestmetrics_requestbytes_sum", frozenset({("request", "ApiVersions")}))] == 3 + 7


# -- client metrics: the disconnect listener, telemetry.max.bytes ------------------------------------------

ID = uuid.UUID("6a1ff2a9-3a40-4c33-8b0e-8de3ed8e1b5f")
CLIENT = ClientAttributes("app-1", "librdkafka", "2.5.0", "127.0.0.1", "50123")


def test_a_client_instance_goes_when_the_connection_it_was_made_on_closes() -> None:
    m = ClientMetricsManager(new_uuid=lambda: ID)
    m.update_subscriptions({"s": {"metrics": "org.", "interval.ms": "1000"}})
    m.record_client_software("conn-a", "librdkafka", "2.5.0")
    m.get_telemetry_subscriptions(None, CLIENT, 0, "conn-a")
    # Another connection of the same instance (a reconnect) does not take it: Kafka maps the
    # connection the instance was made on.
    m.get_telemetry_subscriptions(ID, CLIENT, 1_000, "conn-b")
    m.connection_closed("conn-b")
    assert m.instance(ID) is not None
    m.connection_closed("conn-a")
    assert m.instance(ID) is None and m.client_software("conn-a") is None
    m.connection_closed("conn-a")  # twice, or an unknown connection: nothing

    # Remade for new subscriptions: the connection it was remade on takes it from then on.
    m.get_telemetry_subscriptions(ID, CLIENT, 2_000, "conn-c")
    m.update_subscriptions({"s": {"metrics": "org.", "interval.ms": "2000"}})
    m.get_telemetry_subscriptions(ID, CLIENT, 3_000, "conn-d")
    m.connection_closed("conn-d")
    assert m.instance(ID) is None


def test_an_expired_instance_releases_its_connection() -> None:
    m = ClientMetricsManager(new_uuid=lambda: ID, cache_expiry_ms=60_000)  # no subscription: 5 min interval, 15 min expiry
    m.get_telemetry_subscriptions(None, CLIENT, 0, "conn-a")
    assert m.latest_pushes(now_ms=1_000_000) == [] and m.instance(ID) is None
    # A new instance with the same id on another connection is not taken by the old one's close.
    m.get_telemetry_subscriptions(ID, CLIENT, 1_000_000, "conn-b")
    m.connection_closed("conn-a")
    assert m.instance(ID) is not None


def test_telemetry_max_bytes_is_a_static_broker_config() -> None:
    assert BrokerConfig.model_validate({"node.id": 1}).telemetry_max_bytes == 1_048_576
    assert BrokerConfig.model_validate({"node.id": 1, "telemetry.max.bytes": "2048"}).telemetry_max_bytes == 2048
    with pytest.raises(ValueError):
        BrokerConfig.model_validate({"node.id": 1, "telemetry.max.bytes": "0"})  # Kafka: atLeast(1)
    assert problem("telemetry.max.bytes", "2048") is None
    m = ClientMetricsManager(2048, new_uuid=lambda: ID)
    assert m.get_telemetry_subscriptions(None, CLIENT, 0).telemetry_max_bytes == 2048
