"""The link proxy itself: bytes flow, a cut direction loses bytes without closing, heal restores;
the demux hands each connection to the link of the node that opened it."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Iterator

import pytest

from tests.cluster.link_proxy import ProxyLoop
from tests.ports import free_ports

TIMEOUT_S = 5.0


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(TIMEOUT_S)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


@pytest.fixture
def proxies() -> Iterator[ProxyLoop]:
    loop = ProxyLoop()
    yield loop
    loop.close()


def _roundtrip(sock: socket.socket, payload: bytes) -> bytes | None:
    """The echo of ``payload``, read whole (a demux forwards a request's head before its rest, so
    on a busy machine it can come back in two pieces); None if nothing came back in time."""
    sock.sendall(payload)
    got = b""
    try:
        while len(got) < len(payload) and (chunk := sock.recv(4096)):
            got += chunk
    except socket.timeout:
        pass
    return got or None


def test_forwards_then_cut_loses_then_heal(echo_port: int, proxies: ProxyLoop) -> None:
    (port,) = free_ports(1)
    link = proxies.add(port, echo_port, "a->b")
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        assert _roundtrip(sock, b"one") == b"one"
        link.cut(forward=False, backward=True)
        sock.settimeout(0.3)
        assert _roundtrip(sock, b"lost") is None, "the answer crossed a cut backward direction"
        link.heal()
        sock.settimeout(TIMEOUT_S)
        # The echo of "lost" was dropped on the way back; only the new payload returns.
        assert _roundtrip(sock, b"two") == b"two"


def test_forward_cut_drops_requests(echo_port: int, proxies: ProxyLoop) -> None:
    (port,) = free_ports(1)
    link = proxies.add(port, echo_port, "a->b")
    link.cut(forward=True, backward=False)
    assert link.is_cut
    with socket.create_connection(("127.0.0.1", port), timeout=0.3) as sock:
        assert _roundtrip(sock, b"lost") is None
        link.heal()
        sock.settimeout(TIMEOUT_S)
        assert _roundtrip(sock, b"back") == b"back"


def test_reset_closes_connections(echo_port: int, proxies: ProxyLoop) -> None:
    (port,) = free_ports(1)
    link = proxies.add(port, echo_port, "a->b")
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        assert _roundtrip(sock, b"x") == b"x"
        link.reset()
        assert sock.recv(16) == b""


def _request(client_id: bytes) -> bytes:
    """A request frame as a node's NetworkClient opens a connection with (size, key, version, correlation, client id)."""
    body = struct.pack(">hhih", 1, 17, 7, len(client_id)) + client_id + b"body"
    return struct.pack(">i", len(body)) + body


def test_demux_cuts_only_the_source_whose_link_is_cut(echo_port: int, proxies: ProxyLoop) -> None:
    (port,) = free_ports(1)
    links = proxies.add_demux(port, echo_port, "1", [2, 3])
    links[2].cut()
    for client_id, flows in [(b"kbroker-2-replica-fetcher-1-0", False), (b"kbroker-3", True), (b"rdkafka", True), (b"kbroker-23", True)]:
        first = _request(client_id)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
            sock.settimeout(TIMEOUT_S if flows else 0.3)
            sock.sendall(first)
            got = b""
            try:
                while len(got) < len(first):
                    got += sock.recv(4096)
            except socket.timeout:
                pass
            assert got == (first if flows else b""), client_id
    links[2].heal()
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        assert _roundtrip(sock, _request(b"kbroker-2")) == _request(b"kbroker-2")
