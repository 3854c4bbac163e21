"""A TCP proxy between a client and a broker that loses Produce responses on purpose.

It reads Kafka frames both ways. Every ``every``-th Produce response (up to ``max_faults``)
never reaches the client: the proxy cuts both connections instead, after the broker has
appended the batch. The client sees its request time out on a dead connection and sends the
batch again on a new one: exactly the retry an idempotent producer must not turn into a
duplicate. The broker advertises the proxy's address so every client connection goes
through it. Threads only; every socket has a timeout.
"""

from __future__ import annotations

import socket
import struct
import threading

PRODUCE = 0
SOCKET_TIMEOUT_S = 60.0


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    body = _recv_exact(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


class FaultProxy:
    def __init__(self, upstream_port: int, *, every: int = 5, max_faults: int = 4) -> None:
        self.upstream_port = upstream_port
        self.every = every
        self.max_faults = max_faults
        self.faults = 0
        self.produce_responses = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def start(self) -> FaultProxy:
        self._spawn(self._accept_loop)
        return self

    def _spawn(self, target, *args) -> None:  # type: ignore[no-untyped-def]
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=SOCKET_TIMEOUT_S)
            except OSError:
                client.close()
                continue
            client.settimeout(SOCKET_TIMEOUT_S)
            self._sockets += [client, upstream]
            produce_ids: set[int] = set()
            self._spawn(self._requests, client, upstream, produce_ids)
            self._spawn(self._responses, upstream, client, produce_ids)

    def _requests(self, client: socket.socket, upstream: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                if api_key == PRODUCE:
                    produce_ids.add(correlation_id)
                upstream.sendall(frame)
        except OSError:
            pass
        _close(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                if correlation_id in produce_ids and self._should_fail():
                    break
                client.sendall(frame)
        except OSError:
            pass
        _close(client, upstream)

    def _should_fail(self) -> bool:
        with self._lock:
            self.produce_responses += 1
            if self.faults < self.max_faults and self.produce_responses % self.every == 0:
                self.faults += 1
                return True
            return False

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for sock in self._sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(5)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
