"""A node's next process, started ahead of its restart: ``python -m tests.cluster.warm_start``
imports what ``kbroker serve`` imports, then waits for its command line (a JSON list, the same
``python -m broker serve ...`` a cold start runs) on stdin and runs it.

Importing the broker takes about a second of CPU, 1.5-2 s of wall time on a busy 2-core
machine; a fault bench that restarts a node about a hundred times would spend minutes on it
without testing anything more. Nothing of the node's own start-up is done ahead: the process
reads its configuration and data directory, opens its sockets and joins the quorum only once
told to. Closing stdin without a line ends it.
"""

from __future__ import annotations

import json
import sys

sys.modules.setdefault("hypothesis", None)  # as broker/__main__.py: kio's strategies are not needed

import uvloop  # noqa: F401  (imported ahead, as broker.cli's serve imports it)

import broker.config  # noqa: F401
import broker.log_setup  # noqa: F401
import broker.server  # noqa: F401
from broker.cli import main

BROKER_MODULE = ["-m", "broker"]


def run() -> int:
    line = sys.stdin.readline()
    if not line:
        return 0
    command: list[str] = json.loads(line)
    if command[1:3] != BROKER_MODULE:
        raise SystemExit(f"warm_start runs `python -m broker ...` only, not {command}")
    sys.stdin.close()
    return main(command[3:])


if __name__ == "__main__":
    sys.exit(run())
