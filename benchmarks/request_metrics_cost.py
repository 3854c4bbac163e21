"""Per-request cost of RequestMetrics in broker/network.py's Connection."""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import time

import uvloop

from broker.metrics.request_metrics import RequestChannelMetrics
from broker.network import Connection, TransferMetrics

BATCH = 16


def frame(cid: int) -> bytes:  # ApiVersions v0
    body = struct.pack(">hhih", 18, 0, cid, 1) + b"t"
    return struct.pack(">i", len(body)) + body


async def run(metrics: bool, n: int) -> float:
    s, c = socket.socketpair()
    s.setblocking(False)
    c.setblocking(False)
    loop = asyncio.get_running_loop()
    answer = [struct.pack(">ii", 4, 0)]
    conn = Connection(s, "bench", lambda h, f, cl: answer, 1 << 20, 64, TransferMetrics(),
                      request_metrics=RequestChannelMetrics() if metrics else None)
    task = asyncio.create_task(conn.run())
    chunk = b"".join(frame(i) for i in range(BATCH))
    t0 = time.process_time()
    for _ in range(n // BATCH):
        await loop.sock_sendall(c, chunk)
        need = BATCH * 8
        while need:
            need -= len(await loop.sock_recv(c, 65536))
    cpu = time.process_time() - t0
    c.close()
    await asyncio.wait_for(task, 5)
    return cpu / n * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("requests", type=int, nargs="?", default=64_000, help="requests per run (default 64,000)")
    args = parser.parse_args(argv)
    res: dict[bool, list[float]] = {False: [], True: []}
    for i in range(7):
        for m in ((False, True) if i % 2 == 0 else (True, False)):
            res[m].append(uvloop.run(run(m, args.requests)))
    for m in (False, True):
        print(f"metrics {'on' if m else 'off'}: {statistics.median(res[m]):.2f} us/request ({min(res[m]):.2f}-{max(res[m]):.2f})")


if __name__ == "__main__":
    main()
