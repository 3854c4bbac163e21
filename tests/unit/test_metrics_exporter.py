"""broker/metrics/kafka_metrics_exporter.py (the HTTP endpoint on the event loop) and the request
timestamps a Connection (broker/network.py) gives RequestMetrics, over a real socket pair."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any, Iterator

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from broker.config import BrokerConfig
from broker.metrics.kafka_metrics_exporter import KafkaMetricsExporter, parse_metrics_listener
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector
from broker.network import ClientInfo, Connection, Response, Throttle, TransferMetrics
from protocol.headers import RequestHeader


def test_metrics_listener_parsing_and_config() -> None:
    assert parse_metrics_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_metrics_listener("http://:9404/") == ("0.0.0.0", 9404)
    assert parse_metrics_listener("http://[::1]:9404") == ("::1", 9404)
    with pytest.raises(ValueError):
        parse_metrics_listener("127.0.0.1:9404")
    assert BrokerConfig.model_validate({"node.id": 1}).metrics_listener is None
    assert BrokerConfig.model_validate({"node.id": 1, "metrics.listener": "http://127.0.0.1:9404"}).metrics_listener == "http://127.0.0.1:9404"
    with pytest.raises(ValueError):
        BrokerConfig.model_validate({"node.id": 1, "metrics.listener": "tcp://127.0.0.1:9404"})


class Gauge:
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kbroker_test_gauge", "a test gauge", value=7)


class Broken:
    def collect(self) -> Iterator[Metric]:
        raise RuntimeError("a bug in a collector")


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_the_endpoint_serves_every_collector_and_survives_a_broken_one() -> None:
    async def run() -> None:
        exporter = KafkaMetricsExporter("127.0.0.1", 0)
        exporter.register(Gauge())
        exporter.register(Broken())
        await exporter.start()
        await exporter.start()  # a second part of the node: one listener
        port = exporter.port
        status, headers, body = await http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert int(headers["Content-Length"]) == len(body)
        names = {f.name for f in text_string_to_metric_families(body.decode())}
        assert {"kbroker_test_gauge", "process_cpu_seconds", "kafka_log_logflushstats_logflushrateandtimems"} <= names
        assert (await http(port, b"HEAD /metrics HTTP/1.1\r\n\r\n"))[2] == b""
        assert (await http(port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await http(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        await exporter.stop()
        assert (await http(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200  # the other part still runs it
        await exporter.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(run())


def frame(api_key: int, version: int, correlation_id: int) -> bytes:
    # Produce v3 and ApiVersions v0: a fixed header (not flexible), client id "t", no body needed here.
    body = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


def test_a_connection_stamps_each_request_for_request_metrics() -> None:
    """An answer at once (ApiVersions), one that waits 50 ms (a produce with acks=all) with the
    request read behind it held back, and an acks=0 produce with no answer."""

    async def run() -> RequestChannelMetrics:
        server_side, client_side = socket.socketpair()
        server_side.setblocking(False)
        client_side.setblocking(False)
        loop = asyncio.get_running_loop()
        channel = RequestChannelMetrics()

        def dispatch(header: RequestHeader, frame: bytearray, client: ClientInfo) -> Any:
            answer: Response = [struct.pack(">ii", 4, header.correlation_id)]
            if header.correlation_id == 2:
                future = loop.create_future()
                loop.call_later(0.05, future.set_result, answer)
                return future
            if header.correlation_id == 4:
                return None  # acks=0
            if header.correlation_id == 5:
                return [*answer, Throttle(30)]
            return answer

        connection = Connection(server_side, "test", dispatch, 1 << 20, 16, TransferMetrics(), request_metrics=channel)
        task = asyncio.create_task(connection.run())
        await loop.sock_sendall(client_side, frame(18, 0, 1) + frame(0, 3, 2) + frame(18, 0, 3) + frame(0, 3, 4) + frame(18, 0, 5))
        data = b""
        while len(data) < 4 * 8:
            chunk = await asyncio.wait_for(loop.sock_recv(client_side, 4096), 5)
            assert chunk, "the connection closed"
            data += chunk
        await asyncio.sleep(0.01)
        client_side.close()
        await asyncio.wait_for(task, 5)
        return channel

    channel = asyncio.run(run())
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families("".join(_text(channel)))
        for s in f.samples
    }

    def get(name: str, request: str) -> float:
        return samples[(f"kafka_network_requestmetrics_{name}", frozenset({("request", request)}))]

    assert samples[("kafka_network_requestmetrics_requests_total", frozenset({("request", "ApiVersions"), ("version", "0")}))] == 3
    assert samples[("kafka_network_requestmetrics_requests_total", frozenset({("request", "Produce"), ("version", "3")}))] == 2
    assert get("remotetimems_sum", "Produce") >= 45  # the acks=all wait
    # The ApiVersions read behind the waiting produce were held: queue time, then answered at once.
    assert get("requestqueuetimems_sum", "ApiVersions") >= 45
    assert get("remotetimems_sum", "ApiVersions") == 0
    assert get("throttletimems_sum", "ApiVersions") == 30
    assert get("totaltimems_sum", "Produce") >= get("remotetimems_sum", "Produce")


def _text(channel: RequestChannelMetrics) -> list[str]:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RequestMetricsCollector(channel))
    return [generate_latest(registry).decode()]
