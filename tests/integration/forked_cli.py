"""`python -m broker ARGS` as a process of its own, forked from one interpreter that imported the
broker once: ``python -m tests.integration.forked_cli`` reads one JSON request a line on stdin
(the arguments, and the files the command's stdout and stderr go to), forks, and answers the
child's pid, then its exit code, a line each.

Each command still runs in a fresh process, with its own exit code, stdout and stderr, from the
same ``broker.cli.main`` that ``broker/__main__.py`` calls; only the import of the broker (about a
second of wall time per command on a busy 2-core machine, most of a `storage` command's run) is
done once. Closing stdin ends the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from select import select
from signal import SIGKILL
from typing import IO


def _child(main: Callable[[list[str]], int], exit_status: Callable[[SystemExit], int], args: list[str], out: str, err: str) -> None:
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    code = 1
    try:
        code = main(args)
    except SystemExit as e:
        code = exit_status(e)
    except BaseException:  # noqa: BLE001 - printed as an interpreter would print it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve_forks() -> None:
    # Imported by the server only, not by the tests that import ForkedCli.
    sys.modules.setdefault("hypothesis", None)  # as broker/__main__.py: kio's strategies are not needed
    import uvloop  # noqa: F401  (what a `storage` or a refused `serve` command imports)

    import broker.config  # noqa: F401
    import broker.log_setup  # noqa: F401
    import broker.server  # noqa: F401  (serve imports it before it reads meta.properties)
    import broker.storage_tool  # noqa: F401
    from broker.cli import main
    from tests.cluster.kbroker_command import exit_status

    while line := sys.stdin.readline():
        args, out, err = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(main, exit_status, args, out, err)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


class ForkedCli:
    """The client: ``run(*args)`` answers as ``subprocess.run([python, -m, broker, *args],
    capture_output=True, text=True, timeout=...)`` would."""

    def __init__(self, cwd: Path, scratch: Path) -> None:
        self.scratch = scratch
        self._runs = 0
        self._server = subprocess.Popen([sys.executable, "-m", "tests.integration.forked_cli"], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def _answer(self, timeout_s: float) -> int | None:
        out = self._server.stdout
        assert out is not None
        if not select([out], [], [], timeout_s)[0]:
            return None
        line = out.readline()
        assert line, f"the fork server ended ({self._server.poll()})"
        return int(line)

    def run(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        self._runs += 1
        out, err = self.scratch / f"{self._runs}.out", self.scratch / f"{self._runs}.err"
        stdin: IO[bytes] | None = self._server.stdin
        assert stdin is not None
        stdin.write(json.dumps([list(args), str(out), str(err)]).encode() + b"\n")
        pid = self._answer(timeout_s)
        code = self._answer(timeout_s)
        if pid is None or code is None:
            if pid is not None:
                os.kill(pid, SIGKILL)
            raise subprocess.TimeoutExpired(["-m", "broker", *args], timeout_s)
        return subprocess.CompletedProcess(["-m", "broker", *args], code, out.read_text(), err.read_text())

    def close(self) -> None:
        assert self._server.stdin is not None
        self._server.stdin.close()
        try:
            self._server.wait(10)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()


if __name__ == "__main__":
    serve_forks()
