"""Loopback ports for the servers the tests start.

A pytest-xdist worker walks its own slice of 20000-27999, below the kernel's ephemeral range
(32768 and up on Linux), skipping any port it cannot bind right now (listening or in TIME_WAIT):
a port found by binding to port 0 comes from the ephemeral range, where two workers choosing at
once could pick the same one, and where a client's outgoing connection may take it before the
broker it was meant for binds it. Any other process (a test run without workers, a campaign run
by hand beside a test run) binds to port 0, as before, and so never walks a worker's slice.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from typing import Iterator

from benchmarks.apache_kafka import free_ports as ephemeral_ports

FIRST_PORT = 20000
SLICE = 4000
SLICES = 2

_lock = threading.Lock()


def _worker_slice() -> Iterator[int] | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return None
    index = int(worker.removeprefix("gw") or 0) % SLICES
    return itertools.cycle(range(FIRST_PORT + index * SLICE, FIRST_PORT + (index + 1) * SLICE))


_next = _worker_slice()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free when chosen."""
    if _next is None:
        return ephemeral_ports(count)
    chosen: list[int] = []
    with _lock:
        for _ in range(SLICE):
            if len(chosen) == count:
                return chosen
            port = next(_next)
            if _bindable(port):
                chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"fewer than {count} free ports in this worker's slice")


def free_port() -> int:
    return free_ports(1)[0]


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were free when chosen, for a program
    that numbers its ports from one (``make cluster``: client ports P..P+2). Outside a worker's
    slice, from 28000-31999, which no worker walks and is below the ephemeral range."""
    ports: Iterator[int] = _next if _next is not None else itertools.cycle(range(28000, 32000))
    if _next is None:
        ports = itertools.islice(ports, random.randrange(4000), None)
    run: list[int] = []
    with _lock:
        for _ in range(SLICE):
            port = next(ports)
            if not _bindable(port):
                run = []
                continue
            run = [*run, port] if run and port == run[-1] + 1 else [port]
            if len(run) == count:
                return run[0]
    raise RuntimeError(f"no {count} consecutive free ports")
