"""broker/network.py's Connection over a real socket pair: a produce still waiting for its answer
holds back the requests read after it, as Kafka mutes a connection until its answer is out."""

from __future__ import annotations

import asyncio
import socket
import struct

from broker.network import ClientInfo, Connection, Response, TransferMetrics
from protocol.headers import RequestHeader

PRODUCE, API_VERSIONS = 0, 18


def request(api_key: int, correlation_id: int) -> bytes:
    # Produce v3 (not flexible) and ApiVersions v0: a fixed header, client id "t", no body needed here.
    body = struct.pack(">hhih", api_key, 3 if api_key == PRODUCE else 0, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


async def exchange() -> tuple[list[list[int]], list[int]]:
    server_side, client_side = socket.socketpair()
    server_side.setblocking(False)
    client_side.setblocking(False)
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Response]] = {}
    dispatched: list[int] = []

    def dispatch(header: RequestHeader, frame: bytearray, client: ClientInfo) -> Response | asyncio.Future[Response]:
        dispatched.append(header.correlation_id)
        answer = [struct.pack(">ii", 4, header.correlation_id)]
        if header.correlation_id in (1, 3):  # acks=all produces that wait for their replicas
            waiting[header.correlation_id] = future = loop.create_future()
            loop.call_later(0.05, future.set_result, answer)
            return future
        return answer

    connection = Connection(server_side, "test", dispatch, 1 << 20, 16, TransferMetrics())
    task = asyncio.create_task(connection.run())
    seen: list[list[int]] = []
    # Two produces, an ApiVersions, another produce and an ApiVersions, pipelined in one write.
    await loop.sock_sendall(client_side, request(PRODUCE, 1) + request(PRODUCE, 2) + request(API_VERSIONS, 4) + request(PRODUCE, 3) + request(API_VERSIONS, 5))
    await asyncio.sleep(0.02)
    seen.append(list(dispatched))  # only the first produce: it waits
    await asyncio.sleep(0.06)
    seen.append(list(dispatched))  # its answer released the next ones, up to the produce that waits again
    await asyncio.sleep(0.1)
    seen.append(list(dispatched))
    answers = []
    data = b""
    while len(data) < 5 * 8:
        data += await loop.sock_recv(client_side, 4096)
    for at in range(0, len(data), 8):
        answers.append(struct.unpack_from(">i", data, at + 4)[0])
    client_side.close()
    await asyncio.wait_for(task, 5)
    return seen, answers


def test_requests_behind_a_waiting_produce_are_dispatched_only_once_it_is_answered() -> None:
    seen, answers = asyncio.run(exchange())
    assert seen == [[1], [1, 2, 4, 3], [1, 2, 4, 3, 5]]
    assert answers == [1, 2, 4, 3, 5]
