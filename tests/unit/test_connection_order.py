"""broker/network.py's Connection over a real socket pair: a produce still waiting for its answer
holds back the requests read after it, as Kafka mutes a connection until its answer is out."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Callable

from broker.network import ClientInfo, Connection, Response, TransferMetrics
from protocol.headers import RequestHeader

PRODUCE, API_VERSIONS = 0, 18


def request(api_key: int, correlation_id: int) -> bytes:
    # Produce v3 (not flexible) and ApiVersions v0: a fixed header, client id "t", no body needed here.
    body = struct.pack(">hhih", api_key, 3 if api_key == PRODUCE else 0, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


async def until(what: str, done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not done():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.005)


async def exchange() -> tuple[list[list[int]], list[int]]:
    server_side, client_side = socket.socketpair()
    server_side.setblocking(False)
    client_side.setblocking(False)
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Response]] = {}
    held: dict[int, Response] = {}
    dispatched: list[int] = []

    def dispatch(header: RequestHeader, frame: bytearray, client: ClientInfo) -> Response | asyncio.Future[Response]:
        dispatched.append(header.correlation_id)
        answer = [struct.pack(">ii", 4, header.correlation_id)]
        if header.correlation_id in (1, 3):  # acks=all produces that wait for their replicas: answered below
            waiting[header.correlation_id] = future = loop.create_future()
            held[header.correlation_id] = answer
            return future
        return answer

    def answer(correlation_id: int) -> None:
        waiting[correlation_id].set_result(held[correlation_id])

    connection = Connection(server_side, "test", dispatch, 1 << 20, 16, TransferMetrics())
    task = asyncio.create_task(connection.run())
    seen: list[list[int]] = []
    # Two produces, an ApiVersions, another produce and an ApiVersions, pipelined in one write.
    await loop.sock_sendall(client_side, request(PRODUCE, 1) + request(PRODUCE, 2) + request(API_VERSIONS, 4) + request(PRODUCE, 3) + request(API_VERSIONS, 5))
    # Each state is waited for, then given time to go wrong: a request dispatched too early would show.
    await until("the first produce dispatched", lambda: 1 in waiting)
    await asyncio.sleep(0.05)
    seen.append(list(dispatched))  # only the first produce: it waits
    answer(1)
    await until("the second waiting produce dispatched", lambda: 3 in waiting)
    await asyncio.sleep(0.05)
    seen.append(list(dispatched))  # its answer released the next ones, up to the produce that waits again
    answer(3)
    await until("the last request dispatched", lambda: 5 in dispatched)
    seen.append(list(dispatched))
    answers = []
    data = b""
    while len(data) < 5 * 8:
        data += await asyncio.wait_for(loop.sock_recv(client_side, 4096), 10)
    for at in range(0, len(data), 8):
        answers.append(struct.unpack_from(">i", data, at + 4)[0])
    client_side.close()
    await asyncio.wait_for(task, 5)
    return seen, answers


def test_requests_behind_a_waiting_produce_are_dispatched_only_once_it_is_answered() -> None:
    seen, answers = asyncio.run(exchange())
    assert seen == [[1], [1, 2, 4, 3], [1, 2, 4, 3, 5]]
    assert answers == [1, 2, 4, 3, 5]
