"""The console's HTTP side: a handful of GET routes on asyncio's streams, no framework.

    /                     the page (static/index.html, app.js, style.css)
    /api/state            everything below in one object (what the page polls every second)
    /api/state?after=N    the same, once the console's picture is newer than version N (long poll, 10 s at most)
    /api/brokers /api/quorum /api/topics /api/groups /api/transactions /api/events   one section each
    /api/messages?topic=T&partition=P[&offset=O][&limit=N][&isolation=read_committed]   the message browser
    /healthz              "ok"
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from broker.console.collector import MAX_BROWSE_RECORDS, Collector, parse_bootstrap

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
SECTIONS = ("brokers", "quorum", "topics", "groups", "transactions", "events", "errors")
LONG_POLL_S = 10.0
MAX_REQUEST_LINE = 8192
IDLE_TIMEOUT_S = 60.0


def _static(name: str) -> bytes | None:
    if "/" in name or name.startswith("."):
        return None
    item = resources.files("broker.console").joinpath("static", name)
    return item.read_bytes() if item.is_file() else None


class ConsoleServer:
    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    async def route(self, method: str, target: str) -> tuple[int, str, bytes]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path.rstrip("/") or "/"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"GET only\n"
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path in ("/", "/index.html"):
            path = "/static/index.html"
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            body = _static(name)
            if body is None:
                return 404, "text/plain", b"not found\n"
            return 200, STATIC_TYPES.get(name[name.rfind(".") :], "application/octet-stream"), body
        if path == "/api/state":
            if "after" in query:
                await self.collector.wait_update(_int(query["after"], 0), LONG_POLL_S)
            return self._json(self.collector.state)
        if path.startswith("/api/") and path.removeprefix("/api/") in SECTIONS:
            return self._json(self.collector.state.get(path.removeprefix("/api/")))
        if path == "/api/messages":
            return await self._messages(query)
        return 404, "text/plain", b"not found\n"

    async def _messages(self, query: dict[str, str]) -> tuple[int, str, bytes]:
        topic = query.get("topic")
        if not topic:
            return self._json({"error": "topic is required"}, 400)
        try:
            partition = int(query.get("partition", "0"))
            offset = int(query["offset"]) if query.get("offset", "") != "" else None
            limit = int(query.get("limit", "20"))
        except ValueError:
            return self._json({"error": "partition, offset and limit are integers"}, 400)
        if not 1 <= limit <= MAX_BROWSE_RECORDS:
            return self._json({"error": f"limit is 1 to {MAX_BROWSE_RECORDS}"}, 400)
        try:
            result = await self.collector.browse(topic, partition, offset, limit, query.get("isolation") == "read_committed")
        except LookupError as e:
            return self._json({"error": str(e)}, 404)
        except Exception as e:  # the leader died under the fetch, a timeout: the page shows it
            return self._json({"error": f"{type(e).__name__}: {e}"}, 502)
        return self._json(result)

    @staticmethod
    def _json(value: Any, status: int = 200) -> tuple[int, str, bytes]:
        return status, "application/json", json.dumps(value, separators=(",", ":")).encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
                except (TimeoutError, ValueError):
                    return
                if not line:
                    return
                if len(line) > MAX_REQUEST_LINE:
                    return
                parts = line.decode("latin-1").split()
                headers: dict[str, str] = {}
                while True:
                    header = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
                    if header in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                if len(parts) != 3:
                    await self._write(writer, 400, "text/plain", b"bad request\n", False, False)
                    return
                method, target, version = parts
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(min(length, 1 << 20))
                keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                try:
                    status, content_type, body = await self.route(method, target)
                except Exception as e:
                    status, content_type, body = 500, "text/plain", f"{type(e).__name__}: {e}\n".encode()
                await self._write(writer, status, content_type, body, keep_alive, method == "HEAD")
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            writer.close()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes, keep_alive: bool, head: bool) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error", 502: "Bad Gateway"}.get(status, "")
        head_lines = [
            f"HTTP/1.1 {status} {reason}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            f"Connection: {'keep-alive' if keep_alive else 'close'}",
        ]
        writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode() + (b"" if head else body))
        await writer.drain()


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


async def serve_console(bootstrap: str, host: str = "127.0.0.1", port: int = 8080, interval_s: float = 1.0) -> None:
    collector = Collector(parse_bootstrap(bootstrap), interval_s=interval_s)
    server = ConsoleServer(collector)
    http = await asyncio.start_server(server.handle, host, port)
    bound = http.sockets[0].getsockname()
    shown_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"kbroker console on http://{shown_host}:{bound[1]}/ (cluster: {bootstrap})", flush=True)
    poller = asyncio.create_task(collector.run())
    try:
        async with http:
            await asyncio.gather(http.serve_forever(), poller)
    finally:
        collector.stop()
        poller.cancel()


def main(bootstrap: str, host: str, port: int, interval_s: float) -> int:
    try:
        parse_bootstrap(bootstrap)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from broker.log_setup import setup_logging

    # The network client's connects and reconnects are the page's business, not the terminal's.
    setup_logging(os.environ.get("KBROKER_LOG_LEVEL", "ERROR"))
    try:
        asyncio.run(serve_console(bootstrap, host, port, interval_s))
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
