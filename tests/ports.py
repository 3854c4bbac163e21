"""Loopback ports for the servers the tests start, from a slice of ports below the ephemeral range.

A port found by binding to port 0 comes from the kernel's ephemeral range, which is also where
outgoing connections get their local ports: between the test choosing it and the broker binding
it, a client's connection may take it. And two pytest-xdist workers choosing at once could pick
the same one. So each worker walks its own slice of 20000-31999 (never ephemeral on Linux, whose
range starts at 32768), skipping any port it cannot bind right now (listening or in TIME_WAIT).
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

FIRST_PORT = 20000
SLICE = 4000
SLICES = 3

_lock = threading.Lock()
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % SLICES
_next = itertools.cycle(range(FIRST_PORT + _worker * SLICE, FIRST_PORT + (_worker + 1) * SLICE))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free when chosen, none handed out recently."""
    chosen: list[int] = []
    with _lock:
        for _ in range(SLICE):
            if len(chosen) == count:
                return chosen
            port = next(_next)
            if _bindable(port):
                chosen.append(port)
    raise RuntimeError(f"fewer than {count} free ports in this worker's slice")


def free_port() -> int:
    return free_ports(1)[0]
