"""TCP proxies for the links between cluster nodes, each of which a test can cut and heal.

Every node reaches every other node's controller port through a proxy of its own, one per
ordered pair, so a test can cut exactly the link it means: A→B while B→A still flows, one node
isolated, a majority against a minority. A cut link loses what is sent into it without closing
anything, as a network partition does: the sender sees requests time out, not a refused
connection. All proxies run on one event loop in a daemon thread.

A broker's inter-broker listener is advertised once to every peer, so it cannot have a port per
peer: a SourceDemux listens in front of it and hands each connection to the link of the node
that opened it, known from the client id of its first request (a pattern whose first group is
the node id: kbroker's by default, Apache Kafka's for tests/chaos/kafka_bench.py). A TLS
connection shows no client id: it goes through the demux's link for any other client, which
no fault cuts.
"""

from __future__ import annotations

import asyncio
import re
import struct
import threading
from dataclasses import dataclass, field

CHUNK = 256 * 1024
CONTROL_TIMEOUT_S = 10.0
# A request's size, api key, api version and correlation id, then its client id's length.
_HEAD = struct.Struct(">ihhih")
# A TLS connection's first byte; a Kafka request's is the top byte of its size, never this large.
TLS_HANDSHAKE_RECORD = b"\x16"
# What a node's NetworkClient calls itself: kbroker-<node id>, kbroker-<node id>-replica-fetcher-…
KBROKER_CLIENT_ID = re.compile(r"kbroker-(\d+)(?:-|$)")


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
        await self.attach(client_reader, client_writer, b"")

    async def attach(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter, prefix: bytes) -> None:
        """Forward an accepted connection, of which ``prefix`` was read already."""
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        if prefix and self.forward_open:
            up_writer.write(prefix)
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


class SourceDemux:
    """Listens on ``port`` for ``target_port`` and forwards each connection through the link of
    the node that opened it (``links`` by node id), or through ``other`` for any other client.
    ``unmatched`` keeps the client ids that went through ``other``: a node's client among them
    is a link no fault can cut."""

    def __init__(self, port: int, links: dict[int, LinkProxy], other: LinkProxy, client_id: re.Pattern[str]) -> None:
        self.port = port
        self.links = links
        self.other = other
        self.client_id = client_id
        self.unmatched: set[str] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await reader.readexactly(1)
            if first == TLS_HANDSHAKE_RECORD:
                self.unmatched.add("(TLS)")
                await self.other.attach(reader, writer, first)
                return
            head = first + await reader.readexactly(_HEAD.size - 1)
            length = _HEAD.unpack(head)[4]
            client_id = await reader.readexactly(max(length, 0))
        except (asyncio.IncompleteReadError, OSError):
            writer.close()
            return
        name = client_id.decode(errors="replace")
        match = self.client_id.match(name)
        link = self.links.get(int(match.group(1)), self.other) if match else self.other
        if link is self.other:
            self.unmatched.add(name)
        await link.attach(reader, writer, head + client_id)


class ProxyLoop:
    """The event loop thread every LinkProxy of a test module runs on."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="link-proxies", daemon=True)
        self._thread.start()
        self.proxies: list[LinkProxy] = []
        self.demuxes: list[SourceDemux] = []

    def call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(CONTROL_TIMEOUT_S)

    def add(self, port: int, target_port: int, name: str) -> LinkProxy:
        proxy = LinkProxy(self, port, target_port, name)
        asyncio.run_coroutine_threadsafe(proxy.start(), self._loop).result(CONTROL_TIMEOUT_S)
        self.proxies.append(proxy)
        return proxy

    def add_demux(
        self, port: int, target_port: int, name: str, sources: list[int], client_id: re.Pattern[str] = KBROKER_CLIENT_ID
    ) -> dict[int, LinkProxy]:
        """A SourceDemux on ``port``: the link from each of ``sources`` to ``target_port``, by source,
        the source read from the first request's client id with ``client_id``."""
        links = {source: LinkProxy(self, port, target_port, f"{source}->{name}") for source in sources}
        other = LinkProxy(self, port, target_port, f"?->{name}")
        demux = SourceDemux(port, links, other, client_id)
        asyncio.run_coroutine_threadsafe(demux.start(), self._loop).result(CONTROL_TIMEOUT_S)
        self.proxies.extend([*links.values(), other])
        self.demuxes.append(demux)
        return links

    def heal_all(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        async def stop_all() -> None:
            for demux in self.demuxes:
                await demux.stop()
            for proxy in self.proxies:
                await proxy.stop()

        asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result(CONTROL_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
