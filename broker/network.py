"""The socket server: accepts connections, reads frames, writes responses in order.

Requests are dispatched as soon as they are read (many in flight per connection), answers go
out strictly in request order, and record bytes are written with ``os.sendfile`` straight from
the segment files.

Sockets are driven with the loop's add_reader/add_writer callbacks rather than a transport,
because ``sendfile`` needs the raw descriptor and a transport would own it. An SSL listener's
connections read and write through an SslTransportLayer instead of the socket itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import ssl
from collections import deque
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Protocol, Sequence, cast

import structlog

from broker.connection_quotas import INT_MAX, ConnectionLimitReached, ConnectionQuotas, Refusal, TooManyConnections
from broker.metrics.selector_stats import SelectorStats
from broker.security.sasl_server_authenticator import AuthAnswer, SaslServerAuthenticator
from broker.security.ssl_principal_mapper import SslPrincipalMapper
from broker.ssl_transport_layer import SslTransportLayer
from protocol.api_keys import ApiKey
from protocol.fetch_response import Chunk
from protocol.frame import FrameDecoder, FrameTooLarge
from protocol.headers import InvalidRequest, RequestHeader, parse_request_header
from storage.fetch_data_info import FileRegion as StoredRegion

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metrics.request_metrics import RequestChannelMetrics, RequestTiming

log = structlog.get_logger(__name__)

# The frame decoder's staging buffer, per connection and resident (a bytearray is zero-filled):
# 1,000 idle clients cost 64 MiB, not 256 MiB. A request too large for it is received into a
# buffer of its own.
READ_BUFFER = 64 * 1024


# Connections taken from the listen backlog per wake-up of the accept loop; bounded so that a
# flood of connects still lets the loop serve the connections it already has in between (each
# costs ~0.1-0.3 ms to set up here). With 1,000 connects at once, 64 rather than 256 took the
# worst stall other clients saw from ~53 to ~37 ms, and the produce p99.9 from ~41 to ~29 ms.
ACCEPT_BURST = 64
# Out of fds or kernel memory: the backlog keeps the clients while the broker waits a little.
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Buffers per sendmsg (Linux's IOV_MAX is 1024): answers that are ready go out together.
MAX_IOV = 64
# A produce still waiting for its answer (acks=all) holds back the requests read after it, as
# Kafka's network processor mutes a connection until its answer is out: a leader that has lost
# its leadership without knowing it appends at most one request of a client, not every request
# the client has in flight, and that client is told NOT_LEADER_OR_FOLLOWER (librdkafka then takes
# the records as not written) for at most one request's records that the next leader has.
PRODUCE = int(ApiKey.PRODUCE)
API_VERSIONS = int(ApiKey.API_VERSIONS)
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)


class FileRegion(Protocol):
    @property
    def fd(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...


# A chunk on its way out: a partly sent one continues as a view, or as the region's unsent rest.
OutChunk = bytes | bytearray | memoryview | FileRegion


@dataclass(slots=True)
class TransferMetrics:
    """Record bytes sent to clients: zero-copy through sendfile, or copied through Python."""

    sendfile_bytes: int = 0
    copied_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ClientInfo:
    connection_id: str
    client_id: str | None
    address: str
    # The listener the client connected to: Metadata answers with every broker's endpoint on it.
    listener: str = "PLAINTEXT"
    # Who the client authenticated as on a SASL listener, as Kafka's KafkaPrincipal prints.
    principal: str = "User:ANONYMOUS"
    # False while a SASL listener's exchange is under way: an ApiVersions then is the
    # authenticator's, which (as Kafka's SaslServerAuthenticator) checks that the request is valid
    # but not which cluster and node it names (KIP-1242).
    authenticated: bool = True


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What a listener's connections speak: its name (the endpoints Metadata shows its clients),
    for SSL and SASL_SSL the TLS context, and for SASL_* a new authenticator per connection."""

    name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    authenticator: Callable[[], SaslServerAuthenticator] | None = None
    # SSL without SASL: the client's principal from its certificate (ssl.principal.mapping.rules).
    principal_mapper: SslPrincipalMapper | None = None


PLAINTEXT_LISTENER = ListenerSecurity()

@dataclass(frozen=True, slots=True)
class Throttle:
    """Put after a response: the connection reads nothing more from the client for ``ms`` once
    the response is on its way (KIP-219's muted channel, how Kafka holds a client over its quota
    whether or not the client waits by itself)."""

    ms: int


Response = list["Chunk | Throttle"] | None
Dispatch = Callable[[RequestHeader, bytearray, ClientInfo], "Awaitable[Response] | Response"]


class CloseConnection(Exception):
    """Raised by a handler when the only sane answer is to drop the client."""


class Connection:
    """One client: requests are read and dispatched from the loop's reader callback, answers are
    written from it as soon as they are ready and in request order.

    Callbacks rather than a reader and a writer task: a small fetch cost the broker about 200 µs
    of CPU, most of it in the loop itself (each ``sock_recv_into`` added and removed the fd from
    epoll, and every request passed from one task to the other through a queue). Now the fd stays
    registered, a handler that answers at once (most do) is written from the same callback, and
    only an answer that has to wait (acks=all, a long-polling fetch) goes through a future.
    """

    def __init__(
        self,
        sock: socket.socket,
        address: str,
        dispatch: Dispatch,
        max_request_size: int,
        max_in_flight: int,
        metrics: TransferMetrics,
        security: ListenerSecurity = PLAINTEXT_LISTENER,
        on_close: Callable[[Connection], None] | None = None,
        request_metrics: RequestChannelMetrics | None = None,
        stats: SelectorStats | None = None,
    ) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._address = address
        self._listener = security.name
        self._tls = None if security.ssl_context is None else SslTransportLayer(sock, security.ssl_context)
        # The socket's own calls in plaintext (no wrapper on the hot path), the TLS layer's otherwise.
        self._recv_into = sock.recv_into if self._tls is None else self._tls.recv_into
        self._sendmsg = sock.sendmsg if self._tls is None else self._tls.sendmsg
        self._auth = None if security.authenticator is None else security.authenticator()
        self._principal = "User:ANONYMOUS"
        self._principal_mapper = security.principal_mapper
        self._max_request_size = max_request_size
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_request_size if self._auth is None else min(max_request_size, self._auth.max_receive_size), READ_BUFFER)
        self._max_in_flight = max_in_flight
        self._metrics = metrics
        self._loop = asyncio.get_running_loop()
        # Answers in request order: chunks ready to go, or a future of them (None: nothing to send).
        self._pending: deque[Response | asyncio.Future[Response]] = deque()
        # The request behind each answer still awaited: named in the log if it fails.
        self._awaited: dict[asyncio.Future[Response], RequestHeader] = {}
        # The answer of the produce still waiting, and the requests read after it, not dispatched yet.
        self._barrier: asyncio.Future[Response] | None = None
        self._held: deque[tuple[bytearray, float]] = deque()  # with the time each was read (metrics)
        # metrics.listener: each request's timestamps (broker/metrics/request_metrics.py), one per
        # pending answer (None for a SASL step), and those of the answers being sent.
        self._request_metrics = request_metrics
        self._timings: deque[RequestTiming | None] = deque()
        self._sending: list[RequestTiming] = []
        # The listener's socket-server-metrics (always kept: a few additions per read and write).
        self._stats = stats if stats is not None else SelectorStats()
        self._answers_out = 0  # answers taken for sending whose last byte the socket has not taken yet
        # What is being written now: the rest of one or more answers' chunks.
        self._out: deque[OutChunk] = deque()
        self._reading = False
        self._muted_until = 0.0  # loop time until which a client over its quota is not read
        self._writing = False  # waiting for the socket to take more
        self._draining = False  # no more requests: close once every answer is out
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._on_close = on_close
        # When the socket last read or wrote: past max.connections the least recently used goes first.
        self.last_active = self._loop.time()
        self._client: ClientInfo | None = None
        self.id = f"{address}-{self._fd}"
        self._log = log.bind(connection=self.id, peer=address)

    async def run(self) -> None:
        self._resume_reading()
        try:
            await asyncio.shield(self._closed)
        except asyncio.CancelledError:
            self._close()
            raise

    def stop_reading(self) -> None:
        """Take no new requests; those already read are still answered."""
        self._pause_reading()
        self._draining = True
        self._write()

    # -- reading ------------------------------------------------------------------------------------

    def _mute(self, ms: int) -> None:
        until = self._loop.time() + ms / 1000
        if until > self._muted_until:
            self._muted_until = until
            self._pause_reading()
            self._loop.call_at(until, self._unmute)

    def _muted(self) -> bool:
        return self._muted_until > 0.0 and self._loop.time() < self._muted_until

    def _unmute(self) -> None:
        if self._closed.done():
            return
        if self._muted():
            # The loop may run a timer up to its clock resolution early; a longer mute has its own timer.
            self._loop.call_at(self._muted_until, self._unmute)
            return
        self._release_held()
        if not self._writing:
            self._write()

    def _resume_reading(self) -> None:
        if self._muted():
            return
        if not self._reading and not self._draining and not self._held and not self._closed.done():
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True
            if self._tls is not None and self._tls.has_buffered:
                self._loop.call_soon(self._on_buffered)

    def _on_buffered(self) -> None:
        """TLS records read from the socket earlier and not decrypted yet: no readable event comes for them."""
        if self._reading:
            self._on_readable()

    def _pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _on_readable(self) -> None:
        self.last_active = self._loop.time()
        decoder = self._decoder
        read_at = perf_counter() if self._request_metrics is not None else 0.0
        try:
            n = self._recv_into(decoder.buffer())
        except (BlockingIOError, InterruptedError):
            if self._tls is not None and self._tls.wants_write:
                self._write()  # the handshake's answer, which the socket did not take at once
            return
        except ssl.SSLError as e:
            self._log.warning("connection.ssl_failed", reason=str(e))
            if self._tls is not None:
                # The alert OpenSSL wrote (handshake_failure, bad_certificate…) tells the client
                # why, as Kafka's engine does; a socket that cannot take it now goes without.
                with contextlib.suppress(OSError):
                    self._tls.flush()
            self._close()
            return
        except OSError as e:
            self._log.debug("connection.read_error", error=str(e))
            self._close()
            return
        if n == 0:
            self.stop_reading()
            return
        stats = self._stats
        stats.bytes_read += n
        refused: FrameTooLarge | None = None
        try:
            frames = decoder.received(n)
        except FrameTooLarge as e:
            refused, frames = e, e.complete
        stats.requests_read += len(frames)
        for frame in frames:
            if self._barrier is not None or self._muted():
                self._held.append((frame, read_at))
                self._pause_reading()
            elif not self._handle(frame, read_at):
                return
        if refused is not None:
            self._refuse("connection.closed_bad_request", refused)
            return
        if len(self._pending) >= self._max_in_flight:
            self._pause_reading()  # queued.max.requests: the client waits for its answers
        self._write()
        if self._tls is not None and self._reading and self._tls.has_buffered:
            self._loop.call_soon(self._on_buffered)

    def _handle(self, frame: bytearray, read_at: float = 0.0) -> bool:
        """Dispatch one request; False when it cost the connection."""
        auth = self._auth
        if auth is not None and auth.expects_raw_token:
            return self._authenticated(auth.raw_token(frame))
        try:
            header = parse_request_header(frame)
        except InvalidRequest as e:
            self._refuse("connection.closed_bad_request", e)
            return False
        if auth is not None and auth.complete:
            if auth.session_expired():
                # KIP-368: a client that did not re-authenticate in time loses the connection.
                self._log.info("connection.session_expired", principal=self._principal)
                self.stop_reading()
                return False
            if header.api_key == SASL_HANDSHAKE and (reauthentication := auth.begin_reauthentication(header, frame)) is not None:
                return self._authenticated(reauthentication)
        if auth is not None and not auth.complete and header.api_key != API_VERSIONS:
            try:
                answer = auth.request(header, frame)
            except Exception as e:  # noqa: BLE001 - a request that does not decode: Kafka drops the client too
                self._refuse("connection.closed_bad_request", e, header)
                return False
            return self._authenticated(answer)
        if self._principal_mapper is not None and self._tls is not None and self._tls.handshaken:
            try:
                self._principal = self._principal_mapper.principal(self._tls.peer_certificate())
            except ValueError as e:  # no mapping rule applies: Kafka fails the connection too
                self._refuse("connection.authentication_failed", e, header)
                return False
            self._principal_mapper = None
            self._client = None
            self._log.debug("connection.authenticated", principal=self._principal)
        client = self._client
        if client is None or client.client_id != header.client_id:
            client = self._client = ClientInfo(self.id, header.client_id, self._address, self._listener, self._principal, auth is None or auth.complete)
        metrics = self._request_metrics
        timing = None if metrics is None else metrics.start(header.api_key, header.api_version, read_at, len(frame) - header.body_offset)
        try:
            result = self._dispatch(header, frame, client)
        except (InvalidRequest, CloseConnection) as e:
            self._refuse("connection.closed_bad_request", e, header)
            return False
        except Exception as e:
            self._refuse("connection.handler_failed", e, header)
            return False
        if timing is not None:
            assert metrics is not None
            metrics.dispatched(timing, header.api_key, isinstance(result, list))
            if result is None:
                timing.finish(timing.local_done_at)
            else:
                self._timings.append(timing)
        if result is None:
            return True  # acks=0: no answer at all
        if isinstance(result, list):
            if result and isinstance(result[-1], Throttle):
                # As Kafka, which reads a client's requests one at a time: none of those it
                # sent behind this one is taken before the throttle time is over.
                self._mute(result[-1].ms)
            self._pending.append(result)
            return True
        future = asyncio.ensure_future(result)
        if timing is not None:
            future.add_done_callback(timing.ready)  # before the write that takes the answer
        future.add_done_callback(self._on_answer_ready)
        self._awaited[future] = header
        self._pending.append(future)
        if header.api_key == PRODUCE:
            self._barrier = future
        return True

    def _authenticated(self, answer: AuthAnswer) -> bool:
        """Queue a step of the SASL exchange; False when it ends the connection."""
        auth = self._auth
        assert auth is not None
        if auth.complete and auth.principal is not None:
            self._principal = auth.principal
            self._client = None
            self._decoder.max_frame_size = self._max_request_size
            self._log.debug("connection.authenticated", principal=auth.principal)
        response: Response = None if answer.frame is None else [answer.frame]
        if answer.delay_s:
            # connection.failed.authentication.delay.ms: a client that guesses passwords waits for each answer.
            delayed: asyncio.Future[Response] = self._loop.create_future()
            self._loop.call_later(answer.delay_s, lambda: delayed.done() or delayed.set_result(response))
            delayed.add_done_callback(self._on_answer_ready)
            self._pending.append(delayed)
            if self._request_metrics is not None:
                self._timings.append(None)
        elif response is not None:
            self._pending.append(response)
            if self._request_metrics is not None:
                self._timings.append(None)
        if answer.close:
            self._log.warning("connection.authentication_failed", reason=answer.reason)
            self.stop_reading()
            return False
        return True

    def _on_answer_ready(self, future: asyncio.Future[Response]) -> None:
        if future is self._barrier:
            self._barrier = None
            self._release_held()
        if not self._writing:
            self._write()

    def _release_held(self) -> None:
        """Dispatch the requests read behind a produce, in order, until another produce waits."""
        held = self._held
        if self._draining:
            held.clear()  # read after the connection stopped taking requests: Kafka never reads them
            return
        while held and self._barrier is None and not self._muted() and not self._closed.done():
            if not self._handle(*held.popleft()):
                held.clear()
                return

    # -- writing ------------------------------------------------------------------------------------

    def _write(self) -> None:
        """Send what is ready, in order, until done or the socket is full."""
        if self._closed.done():
            return
        pending, out, timings = self._pending, self._out, self._timings
        try:
            while True:
                while pending:
                    head = pending[0]
                    if isinstance(head, asyncio.Future):
                        if not head.done():
                            break
                        pending.popleft()
                        chunks = self._answer(head)
                    else:
                        chunks = head
                        pending.popleft()
                    if timings:
                        self._dequeued(timings.popleft(), chunks)
                    if chunks:
                        if isinstance(chunks[-1], Throttle):
                            self._mute(chunks[-1].ms)
                            chunks = chunks[:-1]
                        out.extend(cast("list[OutChunk]", chunks))
                        self._answers_out += 1
                if not out and (self._tls is None or self._tls.flush()):
                    if self._sending:
                        self._sent()
                    self._stats.answers_sent += self._answers_out
                    self._answers_out = 0
                    break
                if not out or not self._send(out):
                    if not self._writing:
                        self._loop.add_writer(self._fd, self._on_writable)
                        self._writing = True
                    return
        except (ConnectionError, OSError) as e:
            self._log.debug("connection.write_error", error=str(e))
            self._close()
            return
        except Exception as e:
            self._log_drop("connection.write_failed", e)
            self._close()
            return
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        if not pending and self._draining:
            self._close()
        elif len(pending) < self._max_in_flight:
            self._resume_reading()

    def _answer(self, future: asyncio.Future[Response]) -> Response:
        """A finished handler's answer. One that raised ends the connection: the answers before it
        still go out, the requests after it are dropped unanswered (Kafka would not have read them)."""
        request = self._awaited.pop(future, None)
        try:
            return future.result()
        except CloseConnection as e:
            self._log_drop("connection.closed_by_handler", e, request)
        except Exception as e:
            self._log_drop("connection.handler_failed", e, request)
        for item in self._pending:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self._pending.clear()
        self._awaited.clear()
        self._held.clear()
        self._timings.clear()
        self._pause_reading()
        self._draining = True
        return None

    def _dequeued(self, timing: RequestTiming | None, chunks: Response) -> None:
        """An answer was taken for sending (metrics.listener)."""
        if timing is None:
            return
        timing.dequeued(chunks[-1].ms if chunks and isinstance(chunks[-1], Throttle) else 0)
        if chunks:
            self._sending.append(timing)
        else:
            timing.finish(timing.dequeued_at)

    def _sent(self) -> None:
        """Every answer taken for sending is out (metrics.listener)."""
        now = perf_counter()
        for timing in self._sending:
            timing.finish(now)
        self._sending.clear()

    def _on_writable(self) -> None:
        self.last_active = self._loop.time()
        self._write()

    def _send(self, out: deque[OutChunk]) -> bool:
        """Write the head of ``out``: the bytes up to the next file region in one sendmsg, or that
        region with sendfile. False when the socket took less than offered."""
        head = out[0]
        if not isinstance(head, (bytes, bytearray, memoryview)):
            return self._sendfile(out, head) if self._tls is None else self._send_region_tls(out, head)
        buffers: list[bytes | bytearray | memoryview] = []
        flags = 0
        for chunk in out:
            if not isinstance(chunk, (bytes, bytearray, memoryview)):
                # A file region follows: the kernel holds these bytes back to send them in the
                # same segment as its first bytes (one wake-up of the client, not two).
                flags = socket.MSG_MORE
                break
            if len(buffers) == MAX_IOV:
                break
            buffers.append(chunk)
        try:
            sent = self._sendmsg(buffers, (), flags)
        except (BlockingIOError, InterruptedError):
            return False
        self._stats.bytes_written += sent
        for chunk in buffers:
            size = chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
            if sent >= size:
                out.popleft()
                sent -= size
                continue
            out[0] = memoryview(chunk).cast("B")[sent:]
            return False
        return True

    def _sendfile(self, out: deque[OutChunk], region: FileRegion) -> bool:
        position, remaining = region.position, region.length
        try:
            while remaining > 0:
                sent = os.sendfile(self._fd, region.fd, position, remaining)
                if sent == 0:
                    # The file shrank under us: the frame size is already promised, so the
                    # only honest move is to drop the connection rather than send garbage.
                    raise ConnectionError("segment file shorter than the region being sent")
                position += sent
                remaining -= sent
                self._metrics.sendfile_bytes += sent
                self._stats.bytes_written += sent
        except (BlockingIOError, InterruptedError):
            out[0] = StoredRegion(region.fd, position, remaining)  # the unsent rest
            return False
        out.popleft()
        return True

    def _send_region_tls(self, out: deque[OutChunk], region: FileRegion) -> bool:
        assert self._tls is not None
        position, remaining = region.position, region.length
        try:
            while remaining > 0:
                sent = self._tls.send_region(region.fd, position, remaining)
                position += sent
                remaining -= sent
                self._metrics.copied_bytes += sent
                self._stats.bytes_written += sent
        except (BlockingIOError, InterruptedError):
            out[0] = StoredRegion(region.fd, position, remaining)
            return False
        out.popleft()
        return True

    # -- closing ------------------------------------------------------------------------------------

    def _refuse(self, event: str, error: Exception, request: RequestHeader | None = None) -> None:
        """Take no more requests and close once the answers already owed are out: Kafka reads one
        request at a time per connection, so its clients get those answers before the close."""
        self._log_drop(event, error, request)
        self.stop_reading()

    def _log_drop(self, event: str, error: Exception, request: RequestHeader | None = None) -> None:
        """Why the connection goes, logged once."""
        context = {} if request is None else {"api_key": request.api_key, "api_version": request.api_version, "correlation_id": request.correlation_id}
        if isinstance(error, (FrameTooLarge, InvalidRequest, CloseConnection)):
            # The client's fault: a warning with the reason, never a traceback.
            self._log.warning(event, reason=str(error), **context)
        else:
            # A handler bug must not take the broker down; this client reconnects.
            self._log.error(event, exc_info=error, **context)

    def close(self) -> None:
        """Drop the connection now, answers owed or not."""
        self._close()

    @property
    def closed(self) -> bool:
        return self._closed.done()

    @property
    def unanswered(self) -> int:
        """Answers of handlers that had to wait (acks=all, a long poll) not taken for sending yet."""
        return len(self._awaited)

    def _close(self) -> None:
        if self._closed.done():
            return
        self._pause_reading()
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        for item in self._pending:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self._pending.clear()
        self._awaited.clear()
        self._held.clear()
        self._out.clear()
        self._timings.clear()
        self._sending.clear()
        self._sock.close()
        self._closed.set_result(None)
        self._stats.connection_closed()
        if self._on_close is not None:
            self._on_close(self)


class SharedConnectionQuotas:
    """One broker's ConnectionQuotas, shared by its listeners' SocketServers as Kafka's acceptors
    share theirs, and what the counting cannot do itself: wake the acceptors that wait for a slot
    when a connection closes on any listener (Kafka's notifyAll), and close the least recently
    used connections of the other listeners when the inter-broker listener takes the broker past
    max.connections (Kafka's processors do it one per poll)."""

    def __init__(self, quotas: ConnectionQuotas) -> None:
        self.quotas = quotas
        self._servers: list[SocketServer] = []
        self._waiters: list[asyncio.Future[None]] = []

    def add_server(self, server: SocketServer) -> None:
        self._servers.append(server)

    def inc(self, listener: str, ip: str) -> Refusal | None:
        refusal = self.quotas.inc(listener, ip)
        if refusal is None and self.quotas.total > self.quotas.max_connections:
            self._close_excess()
        return refusal

    def dec(self, listener: str, ip: str) -> None:
        self.quotas.dec(listener, ip)
        self._wake_acceptors()

    def reconfigure(self, config: BrokerConfig) -> None:
        """New connection limits: acceptors waiting for a slot look again, as a raised limit may have made one."""
        self.quotas.reconfigure(config)
        self._wake_acceptors()

    def _wake_acceptors(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def connection_closed(self) -> None:
        """Return once any connection closes."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _close_excess(self) -> None:
        quotas = self.quotas
        while True:
            candidates = [
                conn for server in self._servers if quotas.max_connections_exceeded(server.listener) for conn in server.connections if not conn.closed
            ]
            if not candidates:
                return
            oldest = min(candidates, key=lambda conn: conn.last_active)
            log.info("connection.closed_over_max_connections", connection=oldest.id, max_connections=quotas.max_connections)
            oldest.close()  # its dec counts it out: the loop ends


class SocketServer:
    def __init__(
        self,
        host: str,
        port: int,
        dispatch: Dispatch,
        *,
        max_request_size: int,
        max_in_flight: int,
        metrics: TransferMetrics,
        security: ListenerSecurity = PLAINTEXT_LISTENER,
        quotas: SharedConnectionQuotas | None = None,
        request_metrics: RequestChannelMetrics | None = None,
        disconnect_listeners: Sequence[Callable[[str], None]] = (),
    ) -> None:
        self._host = host
        self._port = port
        self._security = security
        self.listener = security.name
        # Without a broker's quotas (controller listeners), connections are counted but never limited.
        self._quotas = quotas or SharedConnectionQuotas(ConnectionQuotas({self.listener: INT_MAX}))
        self._quotas.add_server(self)
        self._dispatch = dispatch
        self._max_request_size = max_request_size
        self._max_in_flight = max_in_flight
        self._metrics = metrics
        self._request_metrics = request_metrics
        # Kafka's ConnectionDisconnectListeners: told the id (ClientInfo.connection_id) of each connection that closes.
        self._disconnect_listeners = tuple(disconnect_listeners)
        self.stats = SelectorStats()  # socket-server-metrics (broker/metrics/socket_server_metrics.py)
        self._server_sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Task[None], Connection] = {}

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        sock.listen(1024)
        sock.setblocking(False)
        self._server_sock = sock
        self._accept_task = asyncio.create_task(self._accept_loop())

    @property
    def security(self) -> ListenerSecurity:
        return self._security

    def reconfigure(self, security: ListenerSecurity) -> None:
        """New connections are made with ``security`` (a listener's new certificate); open ones keep theirs."""
        self._security = security

    @property
    def port(self) -> int:
        assert self._server_sock is not None
        return self._server_sock.getsockname()[1]

    @property
    def connections(self) -> Iterable[Connection]:
        return self._connections.values()

    async def _accept_loop(self) -> None:
        server = self._server_sock
        assert server is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._take(*await loop.sock_accept(server))
                # sock_accept takes one connection per loop iteration, and each iteration also
                # serves every connection already open: 1,000 clients connecting at once sat
                # up to a second in the kernel's backlog, their first requests with them.
                # The rest of the backlog is taken now, like asyncio's own servers do.
                for _ in range(ACCEPT_BURST - 1):
                    await self._take(*server.accept())
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                # Backlog drained, or a client gave up before it was accepted.
                continue
            except OSError as e:
                if e.errno in ACCEPT_RESOURCE_ERRORS:
                    log.error("socket_server.accept_failed", error=str(e))
                    await asyncio.sleep(0.1)
                    continue
                raise

    async def _take(self, sock: socket.socket, addr: tuple[str, int] | tuple[str, int, int, int]) -> None:
        """Serve a connection taken from the backlog. At max.connections, as Kafka's acceptor, hold
        it until another connection closes: the next clients wait in the listen backlog."""
        while not self._start_connection(sock, addr):
            try:
                await self._quotas.connection_closed()
            except asyncio.CancelledError:
                sock.close()
                raise

    def _start_connection(self, sock: socket.socket, addr: tuple[str, int] | tuple[str, int, int, int]) -> bool:
        """Serve a connection taken from the backlog, or close it if its address is at its limit;
        False when it has to wait for a slot."""
        ip, address = addr[0], f"{addr[0]}:{addr[1]}"
        refusal = self._quotas.inc(self.listener, ip)
        if isinstance(refusal, ConnectionLimitReached):
            log.debug("socket_server.accept_blocked", listener=self.listener, peer=address, limit=refusal.limit, limited_listener=refusal.listener)
            return False
        if isinstance(refusal, TooManyConnections):
            # Kafka logs each of these at info: "Rejected connection from /ip, address already has the configured maximum of N connections."
            log.info("connection.rejected", peer=address, listener=self.listener, limit=refusal.limit)
            sock.close()
            return True
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(
                sock,
                address,
                self._dispatch,
                self._max_request_size,
                self._max_in_flight,
                self._metrics,
                self._security,
                partial(self._connection_closed, ip),
                self._request_metrics,
                self.stats,
            )
        except BaseException:
            self._quotas.dec(self.listener, ip)
            sock.close()
            raise
        self.stats.connection_created()
        task = asyncio.create_task(conn.run())
        self._connections[task] = conn
        task.add_done_callback(lambda t: self._connections.pop(t, None))
        return True

    def _connection_closed(self, ip: str, conn: Connection) -> None:
        self._quotas.dec(self.listener, ip)
        for listener in self._disconnect_listeners:
            try:
                listener(conn.id)
            except Exception:  # noqa: BLE001 - a listener's bug must not keep the quota slot or skip the others
                log.exception("socket_server.disconnect_listener_failed", connection=conn.id)

    async def stop_accepting(self) -> None:
        if self._accept_task:
            self._accept_task.cancel()
            try:
                await self._accept_task
            except asyncio.CancelledError:
                pass
        if self._server_sock:
            self._server_sock.close()

    async def close_connections(self) -> None:
        """Take no more requests and close every connection at once, as Kafka's
        SocketServer.stopProcessingRequests: the answers already made go out as far as the socket
        takes them, those still awaited are dropped (a produce waiting for acks=all, a long-polling
        fetch), and their clients retry elsewhere."""
        for conn in self._connections.values():
            conn.stop_reading()
        tasks = set(self._connections)
        if not tasks:
            return
        unanswered = sum(conn.unanswered for conn in self._connections.values())
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=1.0)
        log.info("socket_server.connections_closed", listener=self.listener, connections=len(tasks), unanswered=unanswered)
