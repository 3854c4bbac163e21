"""NetworkClient: the one asyncio client for every request a node sends to another node.

Kafka's NetworkClient: Raft (Vote, BeginQuorumEpoch, Fetch, FetchSnapshot), the brokers'
registration and heartbeats, forwarded writes, AlterPartition, WriteTxnMarkers and the replica
fetchers all go through it. One connection per destination, shared by every caller, with any
number of requests in flight on it; a Kafka connection answers in request order, so responses
are matched to the head of the in-flight queue and a correlation id that does not match means
the stream can no longer be trusted.

Failure semantics follow Kafka's: a request that outlives its timeout closes its connection
(whatever was in flight behind it is failed with a DisconnectError, since its answers would be
stuck behind one that may never come); a lost or refused connection fails everything in flight
on it; reconnects to a destination are spaced by an exponential backoff with jitter, reset once
a connection is established.

A secured link (the ClientChannel of the listener it connects to) is set up before any request
goes out: the TLS handshake, then a SASL exchange (SaslHandshake v1, SaslAuthenticate v2 rounds).
When the server gives the session a lifetime (connections.max.reauth.ms), the connection takes
no new request after 85-95% of it, as Kafka's client re-authenticates then; it closes once its
last answer is in and the next request opens and authenticates a new one.

A client made with ``discover_api_versions`` (Kafka's discoverBrokerVersions) asks each new
connection's ApiVersions once it is set up; a request sent with ``downgrade`` then goes out in the
newest version the other node takes, as Kafka's NetworkClient picks it.

Reading is an ``asyncio.BufferedProtocol`` over the sans-IO FrameDecoder: the kernel copies a
large response straight into a buffer of its own size, and the body is decoded by kio's native
reader in the caller's task, only if the caller is still waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import random
import socket
import struct
from collections import deque
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable, Mapping

import structlog
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from broker.channel_builders import PLAINTEXT_CHANNEL, ClientChannel
from broker.security.sasl_client import SaslClientError
from protocol.api_keys import response_schema
from protocol.frame import FrameDecoder, FrameTooLarge
from protocol.headers import skip_tagged_fields
from protocol.length_guard import check_lengths

log = structlog.get_logger(__name__)

DEFAULT_MAX_RESPONSE_SIZE = 100 * 1024 * 1024
# Kafka's reconnect backoff: doubles per failed attempt, +-20% so that nodes which lost the
# same peer at the same moment do not all come back at the same moment.
RECONNECT_BACKOFF_JITTER = 0.2
# The frame decoder's staging buffer; a larger response gets a buffer of its own.
READ_BUFFER = 64 * 1024
# How long wait_closed gives the transports to report that they are gone.
CLOSE_TIMEOUT_S = 5.0

# size, api key, api version, correlation id, client id length
_REQUEST_HEADER = struct.Struct(">ihhih")
_SIZE = struct.Struct(">i")
_CORRELATION_OFFSET = 8
_I32 = struct.Struct(">i")

Destination = tuple[str, int]


class NetworkError(Exception):
    """A request got no usable response; what the caller does next is its own decision."""


class DisconnectError(NetworkError):
    """The connection was refused, lost or closed before the response arrived."""


class ConnectionSetupTimeoutError(DisconnectError):
    """The TCP connection was not established within connection_setup_timeout_ms, or its discovery
    ApiVersions not answered within the request timeout."""


class AuthenticationError(DisconnectError):
    """The other node refused this node's SASL credentials or mechanism, or its answers were wrong."""


class RequestTimeoutError(NetworkError):
    """No response within the request's timeout; its connection has been closed."""


class InvalidResponseError(NetworkError):
    """The response could not be decoded; its connection has been closed."""


class UnsupportedVersionError(NetworkError):
    """The other node takes no version of the request that this node can build (not sent)."""


def exponential_backoff_ms(failed_attempts: int, initial_ms: float, max_ms: float, random_unit: float) -> float:
    """Kafka's reconnect backoff after ``failed_attempts`` in a row, held within [initial, max].

    ``random_unit`` in [0, 1) picks the jitter, so that the rule itself is deterministic.
    """
    term = initial_ms * 2.0 ** min(failed_attempts, 32)
    jittered = term * (1 - RECONNECT_BACKOFF_JITTER + 2 * RECONNECT_BACKOFF_JITTER * random_unit)
    return min(max(jittered, initial_ms), max(max_ms, initial_ms))


@dataclass(frozen=True, slots=True)
class _Codec:
    """Everything about one request class that does not change from one request to the next."""

    name: str
    api_key: int
    api_version: int
    request_header_version: int
    response_header_version: int
    write_body: Callable[[Any, Any], None]
    response_type: type
    read_response: Callable[[Any, int], tuple[Any, int]]


@cache
def _codec(request_type: type) -> _Codec:
    if getattr(request_type, "__type__", None) is not EntityType.request:
        raise TypeError(f"{request_type.__name__} is not a kio request entity")
    api_key, api_version = int(request_type.__api_key__), int(request_type.__version__)  # type: ignore[attr-defined]
    response_type = response_schema(api_key, api_version)
    # Header versions from kio's classes, which know every API; for the APIs kbroker serves
    # they are the ones protocol.api_keys gives (a unit test holds the two together).
    return _Codec(
        name=request_type.__name__,
        api_key=api_key,
        api_version=api_version,
        request_header_version=int(request_type.__header_schema__.__version__),  # type: ignore[attr-defined]
        response_header_version=int(response_type.__header_schema__.__version__),  # type: ignore[attr-defined]
        write_body=entity_writer(request_type),
        response_type=response_type,
        read_response=entity_reader(response_type),
    )


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    future: asyncio.Future[bytearray]


class _Connection(asyncio.BufferedProtocol):
    """One TCP connection to a destination: writes requests, hands back response frames in order."""

    def __init__(self, label: str, max_response_size: int, on_closed: Callable[["_Connection", str, bool], None]) -> None:
        self.label = label
        self._decoder = FrameDecoder(max_response_size, READ_BUFFER)
        self._on_closed = on_closed
        self._transport: asyncio.Transport | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._closed_reason: str | None = None
        self._write_paused = False
        self._writable_waiters: list[asyncio.Future[None]] = []
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Loop time after which no new request goes out on this connection (its SASL session's end).
        self.expires_at = float("inf")
        # api key: (min, max) version the other node takes, when the client discovers them.
        self.api_versions: Mapping[int, tuple[int, int]] | None = None
        self._retiring = False

    @property
    def is_open(self) -> bool:
        return self._transport is not None and self._closed_reason is None

    def usable(self, now: float) -> bool:
        return self.is_open and now < self.expires_at

    def retire(self) -> None:
        """No new request: close once the answers in flight are in."""
        self._retiring = True
        if not self._in_flight:
            self.close("its authenticated session is due to end")

    # -- asyncio callbacks ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.received(nbytes)
        except FrameTooLarge as e:
            self.close(f"bad response frame: {e}", ordinary=False)
            return
        in_flight = self._in_flight
        for frame in frames:
            if self._closed_reason is not None:
                return
            if len(frame) < 4:
                self.close(f"response frame of {len(frame)} bytes has no correlation id", ordinary=False)
                return
            (correlation_id,) = _I32.unpack_from(frame, 0)
            if not in_flight:
                self.close(f"response with correlation id {correlation_id} while nothing is in flight", ordinary=False)
                return
            if in_flight[0].correlation_id != correlation_id:
                expected = in_flight[0].correlation_id
                self.close(f"response with correlation id {correlation_id}, expected {expected}", ordinary=False)
                return
            future = in_flight.popleft().future
            if not future.done():  # the caller may have been cancelled; the stream stays in step
                future.set_result(frame)
        if self._retiring and not in_flight:
            self.close("its authenticated session is due to end")

    def eof_received(self) -> bool:
        return False  # a half-closed Kafka connection is a closed one

    def connection_lost(self, exc: Exception | None) -> None:
        self._shut(f"connection lost: {exc}" if exc is not None else "connection closed by the peer", ordinary=True)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    # -- used by the client --------------------------------------------------------------------------

    def send(self, correlation_id: int, request: memoryview) -> asyncio.Future[bytearray]:
        assert self._transport is not None and self._closed_reason is None
        future: asyncio.Future[bytearray] = asyncio.get_running_loop().create_future()
        self._in_flight.append(_InFlight(correlation_id, future))
        self._transport.write(request)
        return future

    async def wait_writable(self) -> None:
        """Until the transport's buffer is below its high-water mark: a peer that stops reading
        costs its callers' timeouts, not this process's memory."""
        while self._write_paused and self._closed_reason is None:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._writable_waiters.append(waiter)
            await waiter
        if self._closed_reason is not None:
            raise DisconnectError(f"{self.label}: {self._closed_reason}")

    def close(self, reason: str, *, ordinary: bool = True) -> None:
        """Fail everything in flight now and drop the connection (its buffered writes with it)."""
        if self._closed_reason is not None:
            return
        self._shut(reason, ordinary)
        if self._transport is not None:
            self._transport.abort()

    def _shut(self, reason: str, ordinary: bool) -> None:
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        in_flight, self._in_flight = self._in_flight, deque()
        for item in in_flight:
            if not item.future.done():
                item.future.set_exception(DisconnectError(f"{self.label}: {reason}"))
        self._wake_writers()
        self._on_closed(self, reason, ordinary)

    def _wake_writers(self) -> None:
        waiters, self._writable_waiters = self._writable_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class _Node:
    """Connection state for one destination (Kafka's ClusterConnectionStates entry)."""

    __slots__ = ("destination", "label", "log", "connection", "connecting", "failed_attempts", "blackout_until")

    def __init__(self, destination: Destination, client_id: str) -> None:
        self.destination = destination
        self.label = f"{destination[0]}:{destination[1]}"
        self.log = log.bind(client_id=client_id, destination=self.label)
        self.connection: _Connection | None = None
        self.connecting: asyncio.Task[_Connection] | None = None
        self.failed_attempts = 0
        self.blackout_until = 0.0  # loop time before which no new connection is attempted


class NetworkClient:
    """Sends kio request entities to other nodes and returns their kio response entities."""

    def __init__(
        self,
        client_id: str,
        *,
        request_timeout_ms: int,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        connection_setup_timeout_ms: int = 10000,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        rng: random.Random | None = None,
        channel: ClientChannel = PLAINTEXT_CHANNEL,
        discover_api_versions: bool = False,
    ) -> None:
        self.client_id = client_id
        self._discover_api_versions = discover_api_versions
        self._channel = channel
        self._request_timeout_ms = request_timeout_ms
        self._reconnect_backoff_ms = reconnect_backoff_ms
        self._reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self._connection_setup_timeout_s = connection_setup_timeout_ms / 1000
        self._max_response_size = max_response_size
        self._rng = rng or random.Random()
        self._client_id_bytes = client_id.encode()
        self._correlation_ids = itertools.count()
        self._nodes: dict[Destination, _Node] = {}
        self._closed = False
        # Wakes sends sleeping through a reconnect backoff when the client closes.
        self._closing = asyncio.Event()

    # -- public API ----------------------------------------------------------------------------------

    async def send(
        self, destination: Destination, body: Any, timeout_ms: int | None = None, api_version: int | None = None,
        downgrade: Callable[[int], Any] | None = None,
    ) -> Any:
        """Send ``body`` and return the decoded response.

        ``timeout_ms`` (default request_timeout_ms) bounds everything: waiting out a reconnect
        backoff, connecting, and the response. ``api_version``, if given, must be the body
        class's version (a kio entity is encoded in its own version only). ``downgrade``: when the
        connection's discovered ApiVersions stop below the body's version, the body is replaced by
        ``downgrade(their newest)``, None if it has no such version.
        Raises RequestTimeoutError, DisconnectError (ConnectionSetupTimeoutError), InvalidResponseError,
        UnsupportedVersionError.
        """
        loop = asyncio.get_running_loop()
        codec = _codec(type(body))
        if api_version is not None and api_version != codec.api_version:
            raise ValueError(f"{codec.name} is version {codec.api_version}, not {api_version}")
        timeout_ms = self._request_timeout_ms if timeout_ms is None else timeout_ms
        if timeout_ms <= 0:
            raise RequestTimeoutError(f"{codec.name} to {destination[0]}:{destination[1]}: no time left ({timeout_ms} ms)")
        deadline = loop.time() + timeout_ms / 1000
        request = self._encode(codec, body)
        node = self._node(destination)
        connection = await self._connection(node, deadline, codec, timeout_ms)
        if downgrade is not None and connection.api_versions is not None:
            codec, request = self._in_usable_version(connection, codec, request, downgrade)
        try:
            async with asyncio.timeout_at(deadline):
                await connection.wait_writable()
        except TimeoutError:
            raise RequestTimeoutError(f"{codec.name} to {node.label}: not sent within {timeout_ms} ms, the connection is not draining") from None
        correlation_id = self._next_correlation_id()
        _I32.pack_into(request, _CORRELATION_OFFSET, correlation_id)
        future = connection.send(correlation_id, request)
        try:
            async with asyncio.timeout_at(deadline):
                frame = await future
        except TimeoutError:
            message = f"{codec.name} (correlation id {correlation_id}) to {node.label} timed out after {timeout_ms} ms"
            # As Kafka: the answers behind this one may be stuck with it, so the connection goes.
            connection.close(f"closed after {message}")
            raise RequestTimeoutError(message) from None
        return self._decode(codec, frame, connection)

    def send_nowait(self, destination: Destination, body: Any, timeout_ms: int | None = None) -> asyncio.Task[Any]:
        """``send`` as a task, for a caller that gathers answers later."""
        return asyncio.get_running_loop().create_task(self.send(destination, body, timeout_ms))

    def is_connected(self, destination: Destination) -> bool:
        node = self._nodes.get(destination)
        return node is not None and self._live_connection(node) is not None

    def ready(self, destination: Destination) -> bool:
        """True if a request would go out now; otherwise start connecting unless in backoff (Kafka's ready())."""
        if self.is_connected(destination):
            return True
        if self._closed:
            return False
        node = self._node(destination)
        if node.connecting is None and asyncio.get_running_loop().time() >= node.blackout_until:
            self._start_connecting(node)
        return False

    def connection_delay_ms(self, destination: Destination) -> float:
        """How long before a connection attempt to ``destination`` may start (0: now or connected)."""
        node = self._nodes.get(destination)
        if node is None or node.connecting is not None or self.is_connected(destination):
            return 0.0
        return max(node.blackout_until - asyncio.get_running_loop().time(), 0.0) * 1000

    def disconnect(self, destination: Destination) -> None:
        """Close the connection to ``destination``, failing what is in flight on it."""
        node = self._nodes.get(destination)
        if node is not None and node.connection is not None:
            node.connection.close("disconnected by this node")

    def close(self) -> None:
        """Fail every request in flight or waiting to connect, and refuse new ones."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        for node in self._nodes.values():
            if node.connecting is not None:
                node.connecting.cancel()
            if node.connection is not None:
                node.connection.close("network client closed")

    async def wait_closed(self) -> None:
        """After close(): until every socket is released (bounded by CLOSE_TIMEOUT_S)."""
        pending: list[asyncio.Future[Any]] = []
        for node in self._nodes.values():
            if node.connecting is not None:
                pending.append(node.connecting)
            if node.connection is not None:
                pending.append(node.connection.lost)
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S)

    # -- requests ------------------------------------------------------------------------------------

    def _encode(self, codec: _Codec, body: Any) -> memoryview:
        """The whole frame, its correlation id left as zero until the request is written."""
        out = io.BytesIO()
        out.write(_REQUEST_HEADER.pack(0, codec.api_key, codec.api_version, 0, len(self._client_id_bytes)))
        out.write(self._client_id_bytes)
        if codec.request_header_version >= 2:
            out.write(b"\x00")  # no tagged fields
        codec.write_body(out, body)
        frame = out.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - _SIZE.size)
        return frame

    def _in_usable_version(self, connection: _Connection, codec: _Codec, request: memoryview, downgrade: Callable[[int], Any]) -> tuple[_Codec, memoryview]:
        assert connection.api_versions is not None
        theirs = connection.api_versions.get(codec.api_key)
        if theirs is not None and theirs[0] <= codec.api_version <= theirs[1]:
            return codec, request
        older = downgrade(theirs[1]) if theirs is not None and theirs[1] < codec.api_version else None
        if older is None:
            raise UnsupportedVersionError(f"{codec.name} v{codec.api_version}: {connection.label} takes {theirs or 'no version'}")
        older_codec = _codec(type(older))
        return older_codec, self._encode(older_codec, older)

    def _next_correlation_id(self) -> int:
        return next(self._correlation_ids) & 0x7FFFFFFF

    def _decode(self, codec: _Codec, frame: bytearray, connection: _Connection) -> Any:
        view = memoryview(frame).toreadonly()
        try:
            offset = 4 if codec.response_header_version == 0 else skip_tagged_fields(view, 4)
            # kio reserves memory for an array's declared count before reading it, and a failed
            # allocation aborts the process: every length is checked against the frame first.
            check_lengths(codec.response_type, view, offset)
            response, _ = codec.read_response(view, offset)
        except Exception as e:  # InvalidRequest, LengthError, and the several types kio raises
            message = f"cannot decode {codec.response_type.__name__} v{codec.api_version} from {connection.label}: {e}"
            connection.close(message, ordinary=False)
            raise InvalidResponseError(message) from e
        return response

    # -- connections ---------------------------------------------------------------------------------

    def _node(self, destination: Destination) -> _Node:
        node = self._nodes.get(destination)
        if node is None:
            node = self._nodes[destination] = _Node(destination, self.client_id)
        return node

    def _live_connection(self, node: _Node) -> _Connection | None:
        """The connection a request may go out on now; one whose session is due to end is retired."""
        connection = node.connection
        if connection is None or not connection.is_open:
            return None
        if connection.usable(asyncio.get_running_loop().time()):
            return connection
        node.connection = None
        connection.retire()
        return None

    async def _connection(self, node: _Node, deadline: float, codec: _Codec, timeout_ms: int) -> _Connection:
        """The open connection to ``node``, connecting (after any backoff) if there is none."""
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise DisconnectError("network client closed")
            connection = self._live_connection(node)
            if connection is not None:
                return connection
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimeoutError(f"{codec.name} to {node.label}: not connected within {timeout_ms} ms (reconnect backoff)")
            task = node.connecting
            if task is None:
                backoff = node.blackout_until - loop.time()
                if backoff > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(backoff, remaining)):
                            await self._closing.wait()
                    continue
                task = self._start_connecting(node)
            done, _ = await asyncio.wait((task,), timeout=remaining)
            if not done:
                raise RequestTimeoutError(f"{codec.name} to {node.label}: not connected within {timeout_ms} ms")
            if task.cancelled():
                raise DisconnectError("network client closed")
            return task.result()  # or the DisconnectError / ConnectionSetupTimeoutError it failed with

    def _start_connecting(self, node: _Node) -> asyncio.Task[_Connection]:
        task = asyncio.get_running_loop().create_task(self._connect(node))
        node.connecting = task
        # The failure is every waiter's to raise; with none left, it has been logged already.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def _connect(self, node: _Node) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = node.destination
        node.log.debug("network_client.connecting", attempt=node.failed_attempts + 1)
        tls = self._channel.ssl_context
        connection: _Connection | None = None
        try:
            try:
                async with asyncio.timeout(self._connection_setup_timeout_s):
                    _, connection = await loop.create_connection(
                        lambda: _Connection(node.label, self._max_response_size, self._on_connection_closed(node)),
                        host,
                        port,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    )
                    if self._channel.sasl_mechanism is not None:
                        await self._authenticate(connection)
                    if self._discover_api_versions:
                        # An in-flight request like any other (Kafka's NetworkClient): unanswered
                        # after the request timeout, the connection is given up and made again.
                        async with asyncio.timeout(self._request_timeout_ms / 1000):
                            connection.api_versions = await self._api_versions(connection)
            except TimeoutError:
                if connection is not None:
                    connection.close("not set up in time")
                self._connect_failed(node, "not set up in time")
                raise ConnectionSetupTimeoutError(
                    f"connection to {node.label} not set up in time (connected within {self._connection_setup_timeout_s * 1000:.0f} ms,"
                    f" ApiVersions answered within {self._request_timeout_ms} ms)"
                ) from None
            except OSError as e:  # refused, reset, and TLS failures (ssl.SSLError)
                self._connect_failed(node, str(e))
                raise DisconnectError(f"connection to {node.label} failed: {e}") from None
            except (AuthenticationError, SaslClientError) as e:
                assert connection is not None
                connection.close(f"authentication failed: {e}", ordinary=False)
                node.log.warning("network_client.authentication_failed", mechanism=self._channel.sasl_mechanism, reason=str(e))
                self._back_off(node)
                raise AuthenticationError(f"authentication to {node.label} failed: {e}") from None
            except NetworkError as e:  # the connection went during the exchange
                self._connect_failed(node, str(e))
                raise DisconnectError(f"connection to {node.label} lost while it was set up: {e}") from None
        finally:
            node.connecting = None
        if not connection.is_open:  # lost between connection_made and this task resuming
            self._connect_failed(node, "lost as it was established")
            raise DisconnectError(f"connection to {node.label} lost as it was established")
        node.connection = connection
        node.failed_attempts = 0
        node.log.info("network_client.connected")
        return connection

    async def _authenticate(self, connection: _Connection) -> None:
        """The SASL exchange of the link's mechanism, on a connection no request has used yet."""
        client = self._channel.new_sasl_client()
        assert client is not None
        handshake = await self._exchange(connection, SaslHandshakeRequest(mechanism=client.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise AuthenticationError(f"mechanism {client.mechanism} is not enabled there (it offers {', '.join(handshake.mechanisms) or 'none'})")
        message: bytes | None = client.initial_response()
        while message is not None:
            answer = await self._exchange(connection, SaslAuthenticateRequest(auth_bytes=message))
            if answer.error_code != ErrorCode.none:
                raise AuthenticationError(answer.error_message or f"error {int(answer.error_code)}")
            message = client.evaluate_challenge(answer.auth_bytes)
        lifetime_s = answer.session_lifetime.total_seconds()
        if lifetime_s > 0:
            connection.expires_at = asyncio.get_running_loop().time() + lifetime_s * (0.85 + 0.1 * self._rng.random())

    async def _api_versions(self, connection: _Connection) -> Mapping[int, tuple[int, int]] | None:
        """The versions the other node takes, per api key; None (not known) if it refused to say."""
        answer = await self._exchange(connection, ApiVersionsRequest(client_software_name="kbroker", client_software_version="1"))
        if answer.error_code != ErrorCode.none:
            return None
        return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in answer.api_keys}

    async def _exchange(self, connection: _Connection, body: Any) -> Any:
        codec = _codec(type(body))
        request = self._encode(codec, body)
        correlation_id = self._next_correlation_id()
        _I32.pack_into(request, _CORRELATION_OFFSET, correlation_id)
        return self._decode(codec, await connection.send(correlation_id, request), connection)

    def _connect_failed(self, node: _Node, reason: str) -> None:
        # The first failure after a working connection is news; the retries that follow are not.
        log_event = node.log.info if node.failed_attempts == 0 else node.log.debug
        log_event("network_client.connect_failed", reason=reason, attempt=node.failed_attempts + 1)
        self._back_off(node)

    def _on_connection_closed(self, node: _Node) -> Callable[[_Connection, str, bool], None]:
        def closed(connection: _Connection, reason: str, ordinary: bool) -> None:
            if node.connection is connection:
                node.connection = None
                self._back_off(node)
            if self._closed:
                node.log.debug("network_client.disconnected", reason=reason)
            elif ordinary:
                node.log.info("network_client.disconnected", reason=reason)
            else:
                node.log.warning("network_client.disconnected", reason=reason)

        return closed

    def _back_off(self, node: _Node) -> None:
        """Kafka's rule: every disconnect and failed attempt blacks the destination out for a
        while, growing with the failures in a row since the last established connection."""
        delay_ms = exponential_backoff_ms(node.failed_attempts, self._reconnect_backoff_ms, self._reconnect_backoff_max_ms, self._rng.random())
        node.blackout_until = asyncio.get_running_loop().time() + delay_ms / 1000
        node.failed_attempts += 1
