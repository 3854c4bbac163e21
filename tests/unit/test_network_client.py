"""NetworkClient against small real servers on 127.0.0.1, under asyncio's loop and uvloop.

The servers decode each request, let the test's ``answer`` decide what to send (after a delay,
never, or raw bytes), and write the answers in request order as a Kafka broker does.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import socket
import struct
import uuid
from typing import Any, Awaitable, Callable, Coroutine

import pytest
import uvloop
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v2.response import ApiVersion as ApiVersionV2
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_cluster.v0.response import DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.request import FetchRequest, FetchTopic
from kio.schema.fetch.v16.request import FetchPartition as FetchRequestPartition
from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, PartitionData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64

from broker.network_client import (
    ConnectionSetupTimeoutError,
    DisconnectError,
    InvalidResponseError,
    NetworkClient,
    RequestTimeoutError,
    UnsupportedVersionError,
    _codec,
    exponential_backoff_ms,
)
from protocol.api_keys import KNOWN_APIS, is_flexible, request_schema, response_header_version, response_schema
from protocol.entities import build
from protocol.headers import RequestHeader, parse_request_header
from protocol.messages import decode_request, encode_body, encode_response

TEST_TIMEOUT_S = 30.0
ZERO = i32Timedelta.parse(datetime.timedelta(0))

# A kio response entity to encode, raw bytes to send as they are, or None: never answer.
Answer = Callable[[RequestHeader, Any], Awaitable[Any]]


class ScriptedServer:
    """A Kafka-speaking test server whose answers the test scripts."""

    def __init__(self, answer: Answer, port: int = 0) -> None:
        self._answer = answer
        self.port = port
        self.accepted: list[float] = []  # loop time of each accepted connection
        self.requests: list[RequestHeader] = []
        self.closed_by_client = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._stopping = False

    @property
    def destination(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def start(self) -> "ScriptedServer":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._stopping = True
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5)
        await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.accepted.append(asyncio.get_running_loop().time())
        answers: asyncio.Queue[asyncio.Task[bytes | None]] = asyncio.Queue()
        write_task = asyncio.create_task(self._write(answers, writer))
        try:
            while True:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frame = bytearray(await reader.readexactly(size))
                except (asyncio.IncompleteReadError, ConnectionError):
                    if not self._stopping:
                        self.closed_by_client += 1
                    return
                header = parse_request_header(frame)
                self.requests.append(header)
                body = decode_request(header.api_key, header.api_version, frame, header.body_offset)
                answers.put_nowait(asyncio.create_task(self._frame(header, body)))
        finally:
            write_task.cancel()
            writer.close()
            self._writers.discard(writer)
            self._handlers.discard(task)

    async def _frame(self, header: RequestHeader, body: Any) -> bytes | None:
        answer = await self._answer(header, body)
        if answer is None or isinstance(answer, (bytes, bytearray)):
            return answer
        return encode_response(header.api_key, header.api_version, header.correlation_id, answer)

    @staticmethod
    async def _write(answers: asyncio.Queue[asyncio.Task[bytes | None]], writer: asyncio.StreamWriter) -> None:
        while True:
            frame = await (await answers.get())
            if frame is None:
                await asyncio.Event().wait()  # this answer never comes; nor do those behind it
            writer.write(frame)
            await writer.drain()


def versions_request(i: int) -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="test", client_software_version=str(i))


def versions_response(i: int) -> ApiVersionsResponse:
    """An answer that says which request it answers."""
    return ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(ApiVersion(api_key=i16(i), min_version=i16(0), max_version=i16(0)),), throttle_time=ZERO)


def answered(response: ApiVersionsResponse) -> int:
    return int(response.api_keys[0].api_key)


async def echo(header: RequestHeader, body: Any, delays: dict[int, float] | None = None) -> Any:
    i = int(body.client_software_version)
    if delays and i in delays:
        if delays[i] < 0:
            return None
        await asyncio.sleep(delays[i])
    return versions_response(i)


def raw_frame(correlation_id: int, body: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


def refused_port() -> tuple[socket.socket, int]:
    """A bound port nobody listens on: connecting is refused at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(asyncio.wait_for(coro, TEST_TIMEOUT_S))

    return run


def client(**overrides: Any) -> NetworkClient:
    settings: dict[str, Any] = {"request_timeout_ms": 5000}
    settings.update(overrides)
    return NetworkClient("test-client", **settings)


# -- framing ------------------------------------------------------------------------------------------


def test_header_versions_agree_with_api_keys() -> None:
    for api_key, api_range in KNOWN_APIS.items():
        for version in range(api_range.min_version, api_range.max_version + 1):
            codec = _codec(request_schema(api_key, version))
            assert codec.request_header_version == (2 if is_flexible(api_key, version) else 1), (api_key, version)
            assert codec.response_header_version == response_header_version(api_key, version), (api_key, version)


def test_round_trips_flexible_and_classic_headers(run: Any) -> None:
    async def answer(header: RequestHeader, body: Any) -> Any:
        if header.api_key == 18 and header.api_version == 2:
            return ApiVersionsResponseV2(error_code=ErrorCode.none, api_keys=(ApiVersionV2(api_key=i16(7), min_version=i16(1), max_version=i16(2)),), throttle_time=ZERO)
        if header.api_key == 60:
            body_bytes = encode_body(DescribeClusterResponse(
                throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, cluster_id="c-1",
                controller_id=BrokerId(3), brokers=(), cluster_authorized_operations=i32(0),
            ))
            # Response header v1 with a tagged field the client must skip.
            tagged = b"\x01" + b"\x05" + b"\x02" + b"zz"
            return raw_frame(header.correlation_id, tagged + body_bytes)
        return await echo(header, body)

    async def main() -> None:
        server = await ScriptedServer(answer).start()
        net = client()
        try:
            classic = await net.send(server.destination, ApiVersionsRequestV2())
            assert classic.api_keys[0].api_key == 7
            flexible = await net.send(server.destination, versions_request(5), api_version=3)
            assert answered(flexible) == 5
            cluster = await net.send(server.destination, DescribeClusterRequest(include_cluster_authorized_operations=False))
            assert cluster.cluster_id == "c-1" and cluster.controller_id == 3
            assert [(h.api_version, h.client_id) for h in server.requests] == [(2, "test-client"), (3, "test-client"), (0, "test-client")]
            assert len({h.correlation_id for h in server.requests}) == 3
            with pytest.raises(ValueError):
                await net.send(server.destination, versions_request(1), api_version=2)
            with pytest.raises(TypeError):
                await net.send(server.destination, versions_response(1))
            with pytest.raises(RequestTimeoutError, match="no time left"):
                await net.send(server.destination, versions_request(1), timeout_ms=0)
            assert net.is_connected(server.destination)
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def test_a_discovering_client_sends_the_newest_version_the_peer_takes(run: Any) -> None:
    """As Kafka's NetworkClient with discoverBrokerVersions: each new connection asks ApiVersions
    first, and a request with a downgrade goes out in the peer's newest version, or not at all."""
    from functools import partial

    from raft.kafka_raft_client import fetch_request_in_version
    from tests.unit.test_kafka_raft_client import Quorum

    fetch = Quorum([1], observers=[2]).nodes[2].client._fetch_request()

    def peer(fetch_max: int) -> Answer:
        async def answer(header: RequestHeader, body: Any) -> Any:
            if header.api_key == 18:
                return ApiVersionsResponse(
                    error_code=ErrorCode.none, throttle_time=ZERO,
                    api_keys=(ApiVersion(api_key=i16(1), min_version=i16(4), max_version=i16(fetch_max)), ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4))),
                )
            return build(response_schema(1, header.api_version), throttle_time=0, error_code=ErrorCode.none, session_id=0, responses=(), node_endpoints=())

        return answer

    async def main() -> None:
        servers = [await ScriptedServer(peer(m)).start() for m in (18, 17, 14, 12)]
        net = client(discover_api_versions=True)
        plain = client()
        try:
            for server in servers[:3]:
                await net.send(server.destination, fetch, downgrade=partial(fetch_request_in_version, fetch))
            with pytest.raises(UnsupportedVersionError):
                await net.send(servers[3].destination, fetch, downgrade=partial(fetch_request_in_version, fetch))
            await plain.send(servers[1].destination, fetch)  # no discovery: the body's own version
            seen = [[(h.api_key, h.api_version) for h in server.requests] for server in servers]
            assert seen == [[(18, 3), (1, 18)], [(18, 3), (1, 17), (1, 18)], [(18, 3), (1, 14)], [(18, 3)]]
        finally:
            for c in (net, plain):
                c.close()
                await c.wait_closed()
            for server in servers:
                await server.stop()

    run(main())


def test_an_unanswered_discovery_api_versions_times_out_with_the_request_timeout(run: Any) -> None:
    """A connection whose ApiVersions is lost (a cut link) is given up after the request timeout,
    not the connection setup timeout, and the next request makes a new one: the Raft client's
    requests to that node waited out the whole setup timeout behind it (10 s a partition)."""
    released = asyncio.Event()

    async def answer(header: RequestHeader, body: Any) -> Any:
        if header.api_key == 18 and len(server.accepted) == 1:
            await released.wait()  # the first connection's ApiVersions is never answered
        return await echo(header, body, {})

    async def main() -> None:
        nonlocal server
        server = await ScriptedServer(answer).start()
        net = client(discover_api_versions=True, request_timeout_ms=300, connection_setup_timeout_ms=10000)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(ConnectionSetupTimeoutError):
                await net.send(server.destination, versions_request(1), timeout_ms=5000)
            assert loop.time() - started < 3
            assert answered(await net.send(server.destination, versions_request(2), timeout_ms=5000)) == 2
            assert len(server.accepted) == 2 and loop.time() - started < 5
        finally:
            released.set()
            net.close()
            await net.wait_closed()
            await server.stop()

    server: ScriptedServer
    run(main())


# -- pipelining -------------------------------------------------------------------------------------


def test_pipelined_requests_are_matched_to_their_callers(run: Any) -> None:
    rng = random.Random(7)
    delays = {i: rng.choice([0, 0, 0.001, 0.005, 0.02]) for i in range(300)}

    async def main() -> None:
        server = await ScriptedServer(lambda h, b: echo(h, b, delays)).start()
        net = client()
        try:
            # Every caller starts before the connection exists: they share one attempt.
            results = await asyncio.gather(*(net.send(server.destination, versions_request(i)) for i in range(300)))
            assert [answered(r) for r in results] == list(range(300))
            assert len(server.accepted) == 1
            assert net.is_connected(server.destination)
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def test_send_nowait_and_ready(run: Any) -> None:
    async def main() -> None:
        server = await ScriptedServer(echo).start()
        net = client()
        try:
            assert not net.is_connected(server.destination)
            assert net.ready(server.destination) is False  # starts connecting
            await wait_until(lambda: net.is_connected(server.destination))
            assert net.ready(server.destination) is True
            assert net.connection_delay_ms(server.destination) == 0
            futures = [net.send_nowait(server.destination, versions_request(i)) for i in range(20)]
            assert [answered(await f) for f in futures] == list(range(20))
            assert [int(h.correlation_id) for h in server.requests] == sorted(int(h.correlation_id) for h in server.requests)
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def test_large_responses_arrive_whole(run: Any) -> None:
    """1 MiB Fetch responses, pipelined: each received into a buffer of its own and decoded intact."""
    topic_id = uuid.uuid4()

    async def answer(header: RequestHeader, body: Any) -> Any:
        seed = body.topics[0].partitions[0].fetch_offset
        records = random.Random(seed).randbytes(1 << 20)
        partition = PartitionData(
            partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(seed), last_stable_offset=i64(seed),
            log_start_offset=i64(0), aborted_transactions=None, preferred_read_replica=BrokerId(-1), records=records,
        )
        return FetchResponse(throttle_time=ZERO, error_code=ErrorCode.none, session_id=i32(0),
                             responses=(FetchableTopicResponse(topic_id=topic_id, partitions=(partition,)),), node_endpoints=())

    async def main() -> None:
        server = await ScriptedServer(answer).start()
        net = client()
        try:
            results = await asyncio.gather(*(net.send(server.destination, fetch_request(topic_id, i)) for i in range(16)))
            for i, response in enumerate(results):
                partition = response.responses[0].partitions[0]
                assert partition.high_watermark == i
                assert partition.records == random.Random(i).randbytes(1 << 20)
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def fetch_request(topic_id: uuid.UUID, offset: int) -> FetchRequest:
    partition = FetchRequestPartition(partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(2 << 20))
    return FetchRequest(max_wait=ZERO, min_bytes=i32(1), topics=(FetchTopic(topic_id=topic_id, partitions=(partition,)),), forgotten_topics_data=())


# -- timeouts -----------------------------------------------------------------------------------------


def test_a_timed_out_request_closes_its_connection_and_fails_the_others(run: Any) -> None:
    async def main() -> None:
        server = await ScriptedServer(lambda h, b: echo(h, b, {1: -1, 2: 0.01})).start()
        net = client()
        try:
            assert answered(await net.send(server.destination, versions_request(0))) == 0
            loop = asyncio.get_running_loop()
            start = loop.time()
            stuck = asyncio.ensure_future(net.send(server.destination, versions_request(1), timeout_ms=300))
            behind = [asyncio.ensure_future(net.send(server.destination, versions_request(i), timeout_ms=10_000)) for i in (2, 3)]
            with pytest.raises(RequestTimeoutError, match="timed out after 300 ms"):
                await stuck
            assert 0.29 <= loop.time() - start < 3.0
            for future in behind:
                with pytest.raises(DisconnectError, match="timed out"):
                    await future
            assert loop.time() - start < 3.0  # not their own 10 s
            assert not net.is_connected(server.destination)
            await wait_until(lambda: server.closed_by_client == 1)
            # The next request reconnects (after the backoff).
            assert answered(await net.send(server.destination, versions_request(4))) == 4
            assert len(server.accepted) == 2
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def test_connection_setup_timeout(run: Any) -> None:
    # A listener whose accept queue is full drops new SYNs: the connect hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)

    async def main() -> None:
        net = client(connection_setup_timeout_ms=200)
        try:
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(ConnectionSetupTimeoutError):
                await net.send(("127.0.0.1", port), versions_request(0))
            assert 0.19 <= loop.time() - start < 3.0
            # A request timeout shorter than the setup timeout bounds the send, not the attempt.
            net2 = client(connection_setup_timeout_ms=5000)
            start = loop.time()
            with pytest.raises(RequestTimeoutError):
                await net2.send(("127.0.0.1", port), versions_request(0), timeout_ms=150)
            assert loop.time() - start < 3.0
            net2.close()
            await net2.wait_closed()
        finally:
            net.close()
            await net.wait_closed()

    try:
        run(main())
    finally:
        for sock in fillers + [listener]:
            sock.close()


# -- connection loss, reconnects and backoff ----------------------------------------------------------


def test_refused_connection_fails_fast_then_backs_off_exponentially(run: Any) -> None:
    sock, port = refused_port()

    async def main() -> None:
        net = client(reconnect_backoff_ms=100, reconnect_backoff_max_ms=400, rng=random.Random(1))
        destination = ("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        try:
            elapsed = []
            for _ in range(4):
                start = loop.time()
                with pytest.raises(DisconnectError, match="failed"):
                    await net.send(destination, versions_request(0), timeout_ms=10_000)
                elapsed.append(loop.time() - start)
            assert elapsed[0] < 1.0  # refused: no waiting for any timeout
            # Each try waits out the backoff left by the failure before it: 100, 200, 400 ms (+jitter, capped).
            assert 0.095 <= elapsed[1] < 1.0
            assert 0.19 <= elapsed[2] < 1.5
            assert 0.38 <= elapsed[3] < 1.5
            assert 0 < net.connection_delay_ms(destination) <= 400 + 1e-6  # loop time is a float
            # A send whose timeout ends inside the backoff gives up at its timeout.
            start = loop.time()
            with pytest.raises(RequestTimeoutError, match="backoff"):
                await net.send(destination, versions_request(0), timeout_ms=50)
            assert loop.time() - start < 0.35
        finally:
            net.close()
            await net.wait_closed()

    try:
        run(main())
    finally:
        sock.close()


def test_reconnects_after_a_server_restart_respecting_the_backoff(run: Any) -> None:
    async def main() -> None:
        server = await ScriptedServer(lambda h, b: echo(h, b, {1: -1})).start()
        net = client(reconnect_backoff_ms=200, reconnect_backoff_max_ms=200)
        destination = server.destination
        loop = asyncio.get_running_loop()
        try:
            assert answered(await net.send(destination, versions_request(0))) == 0
            in_flight = asyncio.ensure_future(net.send(destination, versions_request(1), timeout_ms=10_000))
            await wait_until(lambda: len(server.requests) == 2)
            await server.stop()
            with pytest.raises(DisconnectError):
                await in_flight
            assert not net.is_connected(destination)
            delay_ms = net.connection_delay_ms(destination)
            # Timed from here: starting the new server may take part of the backoff on a busy machine.
            start = loop.time()
            assert 100 < delay_ms <= 201
            restarted = await ScriptedServer(echo, port=server.port).start()
            try:
                assert answered(await net.send(destination, versions_request(2))) == 2
                assert restarted.accepted[0] - start >= delay_ms / 1000 - 0.01
                assert net.is_connected(destination)
            finally:
                net.close()
                await net.wait_closed()
                await restarted.stop()
        finally:
            net.close()

    run(main())


def test_close_fails_in_flight_and_waiting_requests(run: Any) -> None:
    sock, port = refused_port()

    async def main() -> None:
        server = await ScriptedServer(lambda h, b: echo(h, b, {i: -1 for i in range(5)})).start()
        net = client(reconnect_backoff_ms=5000, reconnect_backoff_max_ms=5000)
        loop = asyncio.get_running_loop()
        try:
            in_flight = [asyncio.ensure_future(net.send(server.destination, versions_request(i), timeout_ms=10_000)) for i in range(5)]
            await wait_until(lambda: len(server.requests) == 5)
            refused = ("127.0.0.1", port)
            with pytest.raises(DisconnectError):
                await net.send(refused, versions_request(0))
            in_backoff = asyncio.ensure_future(net.send(refused, versions_request(0), timeout_ms=10_000))
            await asyncio.sleep(0.05)
            start = loop.time()
            net.close()
            for future in in_flight + [in_backoff]:
                with pytest.raises(DisconnectError, match="closed"):
                    await future
            assert loop.time() - start < 1.0
            with pytest.raises(DisconnectError, match="closed"):
                await net.send(server.destination, versions_request(9))
            await net.wait_closed()
            await wait_until(lambda: server.closed_by_client == 1)
        finally:
            net.close()
            await server.stop()

    try:
        run(main())
    finally:
        sock.close()


def test_disconnect_fails_in_flight_requests(run: Any) -> None:
    async def main() -> None:
        server = await ScriptedServer(lambda h, b: echo(h, b, {0: -1})).start()
        net = client()
        try:
            in_flight = asyncio.ensure_future(net.send(server.destination, versions_request(0)))
            await wait_until(lambda: len(server.requests) == 1)
            net.disconnect(server.destination)
            with pytest.raises(DisconnectError, match="disconnected"):
                await in_flight
            assert not net.is_connected(server.destination)
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


# -- broken responses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda cid: struct.pack(">i", 2048) + b"\0" * 8, id="oversized"),
        pytest.param(lambda cid: struct.pack(">i", -7), id="negative-size"),
        pytest.param(lambda cid: struct.pack(">i", 2) + b"\0\0", id="no-correlation-id"),
        pytest.param(lambda cid: raw_frame(cid + 1, encode_body(versions_response(0))), id="correlation-mismatch"),
    ],
)
def test_a_broken_frame_breaks_the_connection_cleanly(run: Any, bad: Callable[[int], bytes]) -> None:
    async def answer(header: RequestHeader, body: Any) -> Any:
        i = int(body.client_software_version)
        if i == 1:
            return bad(header.correlation_id)
        await asyncio.sleep(0.01 if i == 2 else 0)
        return versions_response(i)

    async def main() -> None:
        server = await ScriptedServer(answer).start()
        net = client(max_response_size=1024)
        try:
            assert answered(await net.send(server.destination, versions_request(0))) == 0
            broken = [asyncio.ensure_future(net.send(server.destination, versions_request(i))) for i in (1, 2)]
            for future in broken:
                with pytest.raises(DisconnectError):
                    await future
            assert not net.is_connected(server.destination)
            await wait_until(lambda: server.closed_by_client == 1)
            assert answered(await net.send(server.destination, versions_request(3))) == 3
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xff" * 3, id="truncated"),
        # error code, then an api_keys array claiming ~2^32 entries: refused before kio allocates.
        pytest.param(b"\x00\x00\xff\xff\xff\xff\x0f", id="huge-array"),
    ],
)
def test_an_undecodable_body_fails_its_request_and_the_connection(run: Any, body: bytes) -> None:
    async def answer(header: RequestHeader, request: Any) -> Any:
        if request.client_software_version == "1":
            return raw_frame(header.correlation_id, body)
        return versions_response(int(request.client_software_version))

    async def main() -> None:
        server = await ScriptedServer(answer).start()
        net = client()
        try:
            with pytest.raises(InvalidResponseError, match="cannot decode ApiVersionsResponse"):
                await net.send(server.destination, versions_request(1))
            assert not net.is_connected(server.destination)
            assert answered(await net.send(server.destination, versions_request(2))) == 2
        finally:
            net.close()
            await net.wait_closed()
            await server.stop()

    run(main())


def test_a_peer_that_stops_reading_costs_only_the_timeout(run: Any) -> None:
    """The transport's buffer fills; the next send waits for it to drain, bounded by its timeout."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    big = CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName("t"), num_partitions=i32(1), replication_factor=i16(1), assignments=(),
        configs=(CreatableTopicConfig(name="x", value="v" * (1 << 20)),),
    ),))

    async def main() -> None:
        net = client()
        destination = ("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        # More than the kernel's socket buffers can hold, so the rest stays in the transport.
        pending = [asyncio.ensure_future(net.send(destination, big, timeout_ms=20_000)) for _ in range(send_buffer_max() // (1 << 20) + 4)]
        try:
            await asyncio.sleep(0.2)
            start = loop.time()
            with pytest.raises(RequestTimeoutError, match="not draining"):
                await net.send(destination, versions_request(0), timeout_ms=200)
            assert loop.time() - start < 1.5
            assert net.is_connected(destination)  # nothing sent, nothing closed
        finally:
            net.close()
            for future in pending:
                with pytest.raises(DisconnectError):
                    await future
            await net.wait_closed()

    try:
        run(main())
    finally:
        listener.close()


def send_buffer_max() -> int:
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


# -- the backoff rule ---------------------------------------------------------------------------------


@given(
    attempts=st.integers(min_value=0, max_value=100),
    initial=st.integers(min_value=1, max_value=10_000),
    maximum=st.integers(min_value=1, max_value=100_000),
    unit=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_backoff_stays_within_bounds_and_grows(attempts: int, initial: int, maximum: int, unit: float) -> None:
    backoff = exponential_backoff_ms(attempts, initial, maximum, unit)
    assert initial <= backoff <= max(initial, maximum)
    assert exponential_backoff_ms(attempts + 1, initial, maximum, unit) >= backoff
    if maximum >= initial * 2 ** (attempts + 1):
        assert backoff >= initial * 2**attempts * (1 - 0.2) - 1e-9
