"""A `kbroker` client command run in the test's own process: the command's code, its exit code,
stdout and stderr, without the interpreter start (and the broker's imports) of `python -m broker`
for each call, which a test polling a command pays many times over."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from broker.cli import main as kbroker_main


def run_in_process(*argv: str) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = kbroker_main(list(argv))
        except SystemExit as e:  # a command's fail(), or any exit an interpreter would take as its status
            if isinstance(e.code, int) or e.code is None:
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())
