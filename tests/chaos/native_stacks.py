"""Every native thread's stack of this process, for a client stuck inside librdkafka.

A Python stack ends at ``Producer.flush()`` or ``Consumer.close()``; what the call waits for is in
librdkafka's own threads (``rdk:main``, ``rdk:broker-N``). gdb attaches to the campaign's process
for a moment and prints them, so that a hang can be told apart: a deadlock (threads in
``pthread_mutex_lock``/``cnd_wait`` on each other) from a wait on the cluster (threads polling).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GDB_TIMEOUT_S = 120.0


def dump_native_stacks(path: Path) -> str:
    """Write every thread's native stack to ``path``; return a line saying where, or why not."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "no native stacks: gdb is not installed"
    command = [gdb, "-p", str(os.getpid()), "-batch", "-nx", "-ex", "thread apply all bt"]
    path.parent.mkdir(parents=True, exist_ok=True)
    # Straight into the file: gdb stops this whole process while it writes, so a pipe this
    # process should drain would fill and leave both waiting for each other.
    with path.open("wb") as out:
        try:
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=GDB_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return f"no native stacks: gdb did not answer in {GDB_TIMEOUT_S:.0f} s"
    return f"native stacks of every thread in {path}"
