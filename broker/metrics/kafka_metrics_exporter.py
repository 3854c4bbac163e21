"""The Prometheus endpoint of a node: ``metrics.listener=http://HOST:PORT`` serves ``GET /metrics``.

One exporter per node (per SharedServer), shared by its broker and controller parts: each
registers the collectors of what it runs, and the first to start opens the HTTP listener. The
server is asyncio's, on the node's event loop: a scrape runs the collectors there, between two
requests of the clients, reading the node's state as it is at that moment (nothing to lock;
it costs the loop about as long as the scrape takes to build, O(partitions + groups' offsets)).
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterator

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from broker.metrics.log_metrics import LogFlushStatsCollector
from broker.metrics.raft_metrics import RaftMetricsCollector
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector

if TYPE_CHECKING:
    from broker.shared_server import SharedServer

log = structlog.get_logger(__name__)

MAX_REQUEST_HEAD = 16 * 1024
READ_TIMEOUT_S = 10.0
_LISTENER = re.compile(r"http://(\[[^\]]*\]|[^:/\[\]\s]*):(\d{1,5})/?")


def parse_metrics_listener(value: str) -> tuple[str, int]:
    """``http://HOST:PORT`` -> (host, port); an empty host binds every interface."""
    m = _LISTENER.fullmatch(value.strip())
    if not m or int(m.group(2)) > 65535:
        raise ValueError(f"metrics.listener '{value}' is not http://HOST:PORT")
    return m.group(1).strip("[]") or "0.0.0.0", int(m.group(2))


class _Guarded:
    """A collector whose failure costs its own metrics only, not the whole scrape."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self._failures = 0

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self.collector.collect())
        except Exception:
            self._failures += 1
            if self._failures == 1 or self._failures % 100 == 0:
                log.exception("metrics.collector_failed", collector=type(self.collector).__name__, failures=self._failures)
            return iter(())
        return iter(families)


class KafkaMetricsExporter:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.requested_port = port
        self.registry = CollectorRegistry(auto_describe=False)
        # RequestMetrics of every listener of the node (client and controller), filled by their connections.
        self.request_metrics = RequestChannelMetrics()
        self._guards: dict[int, _Guarded] = {}
        self._server: asyncio.Server | None = None
        self._users = 0
        self.scrapes = 0
        # The process's own: process_cpu_seconds_total, process_resident_memory_bytes, python_gc_*, python_info.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.register(RequestMetricsCollector(self.request_metrics))
        self.register(LogFlushStatsCollector())

    # -- one per node ---------------------------------------------------------------------------------

    @classmethod
    def for_node(cls, shared: SharedServer) -> KafkaMetricsExporter | None:
        """The node's exporter (made on first use), or None when metrics.listener is not set."""
        listener = shared.config.metrics_listener
        if not listener:
            return None
        exporter = _BY_NODE.get(shared)
        if exporter is None:
            exporter = cls(*parse_metrics_listener(listener))
            if shared.raft_manager is not None:
                exporter.register(RaftMetricsCollector(shared.raft_manager))
            _BY_NODE[shared] = exporter
        return exporter

    # -- collectors --------------------------------------------------------------------------------------

    def register(self, collector: Any) -> None:
        guard = _Guarded(collector)
        self._guards[id(collector)] = guard
        self.registry.register(guard)

    def unregister(self, collector: Any) -> None:
        guard = self._guards.pop(id(collector), None)
        if guard is not None:
            self.registry.unregister(guard)

    def scrape(self) -> bytes:
        """The exposition text of every registered collector, now."""
        self.scrapes += 1
        return generate_latest(self.registry)

    # -- the HTTP listener --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Open the listener if no part of the node has yet; each start() is matched by a stop()."""
        self._users += 1
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, self.host, self.requested_port, reuse_address=True)
            log.info("metrics.listening", listener=f"http://{self.host}:{self.port}/metrics")

    async def stop(self) -> None:
        self._users = max(self._users - 1, 0)
        if self._users > 0 or self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        try:
            await asyncio.wait_for(server.wait_closed(), 2.0)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a scrape in flight goes with the process
            pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            if len(head) > MAX_REQUEST_HEAD:
                await self._answer(writer, 431, b"request header too large\n")
                return
            parts = head.split(b"\r\n", 1)[0].split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
            path = target.split(b"?", 1)[0]
            if method not in (b"GET", b"HEAD"):
                await self._answer(writer, 405, b"only GET\n")
            elif path in (b"/metrics", b"/"):
                started = time.perf_counter()
                body = self.scrape()
                log.debug("metrics.scraped", bytes=len(body), ms=round((time.perf_counter() - started) * 1000, 2))
                await self._answer(writer, 200, body if method == b"GET" else b"", CONTENT_TYPE_LATEST, len(body))
            else:
                await self._answer(writer, 404, b"metrics are at /metrics\n")
        except (ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", length: int | None = None) -> None:
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large"}[status]
        head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
        writer.write(head.encode("ascii") + body)
        await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)


_BY_NODE: weakref.WeakKeyDictionary[Any, KafkaMetricsExporter] = weakref.WeakKeyDictionary()

__all__ = ["KafkaMetricsExporter", "parse_metrics_listener"]
