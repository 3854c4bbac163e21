"""TCP proxies for the links between cluster nodes, each of which a test can cut and heal.

Every node reaches every other node's controller (and later replication) port through a proxy
of its own, one per ordered pair, so a test can cut exactly the link it means: A→B while B→A
still flows, one node isolated, a majority against a minority. A cut link loses what is sent
into it without closing anything, as a network partition does: the sender sees requests time
out, not a refused connection. All proxies run on one event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

CHUNK = 256 * 1024
CONTROL_TIMEOUT_S = 10.0


@dataclass(eq=False)
class _Link:
    """One accepted connection: the client side and the upstream side."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class LinkProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``; ``forward`` is the direction towards the target."""

    def __init__(self, loop: "ProxyLoop", port: int, target_port: int, name: str) -> None:
        self._loop = loop
        self.port = port
        self.target_port = target_port
        self.name = name
        self.forward_open = True
        self.backward_open = True
        self._server: asyncio.base_events.Server | None = None
        self._links: set[_Link] = set()

    def cut(self, forward: bool = True, backward: bool = True) -> None:
        """Drop what flows in the given directions from now on (nothing is closed)."""
        self._loop.call(lambda: self._set(self.forward_open and not forward, self.backward_open and not backward))

    def heal(self) -> None:
        self._loop.call(lambda: self._set(True, True))

    def reset(self) -> None:
        """Close every connection through this link, as a peer's crash would."""
        self._loop.call(self._close_links)

    @property
    def is_cut(self) -> bool:
        return not (self.forward_open and self.backward_open)

    def _set(self, forward_open: bool, backward_open: bool) -> None:
        self.forward_open = forward_open
        self.backward_open = backward_open

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._close_links()

    def _close_links(self) -> None:
        for link in list(self._links):
            for task in link.tasks:
                task.cancel()
            link.client.close()
            link.upstream.close()
        self._links.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        link = _Link(client_writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(client_reader, up_writer, link, forward=True)),
            asyncio.create_task(self._pump(up_reader, client_writer, link, forward=False)),
        ]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, forward: bool) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if self.forward_open if forward else self.backward_open:
                    writer.write(data)
                    await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            # One side closed: close the other so the peer sees the end as it would directly.
            link.client.close()
            link.upstream.close()
            self._links.discard(link)


class ProxyLoop:
    """The event loop thread every LinkProxy of a test module runs on."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="link-proxies", daemon=True)
        self._thread.start()
        self.proxies: list[LinkProxy] = []

    def call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(CONTROL_TIMEOUT_S)

    def add(self, port: int, target_port: int, name: str) -> LinkProxy:
        proxy = LinkProxy(self, port, target_port, name)
        asyncio.run_coroutine_threadsafe(proxy.start(), self._loop).result(CONTROL_TIMEOUT_S)
        self.proxies.append(proxy)
        return proxy

    def heal_all(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        async def stop_all() -> None:
            for proxy in self.proxies:
                await proxy.stop()

        asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result(CONTROL_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, all held open until every one is chosen."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
