"""A `kbroker` client command run in the test's own process: the command's code, its exit code,
stdout and stderr, without the interpreter start (and the broker's imports) of `python -m broker`
for each call, which a test polling a command pays many times over."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from broker.cli import main as kbroker_main


def exit_status(e: SystemExit) -> int:
    """The status an interpreter leaving with ``e`` exits with (a message is printed to stderr, then 1)."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


def run_in_process(*argv: str) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = kbroker_main(list(argv))
        except SystemExit as e:  # a command's fail(), or any exit an interpreter would take as its status
            code = exit_status(e)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def quorum_status(controller: str) -> dict[str, str] | None:
    """`kbroker metadata-quorum describe --status` against one controller, as a dict; None if it failed."""
    out = run_in_process("metadata-quorum", "--bootstrap-controller", controller, "describe", "--status")
    if out.returncode != 0:
        return None
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)}
