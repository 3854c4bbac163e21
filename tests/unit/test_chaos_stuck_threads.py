"""A workload whose client threads do not stop says where each is blocked (stuck_threads), and the
campaign can add every thread's native stack (dump_native_stacks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

from tests.chaos.workload import stuck_threads

ROOT = Path(__file__).resolve().parents[2]


def blocked_in_a_client_call(release: threading.Event) -> None:
    release.wait(30)


def test_a_thread_that_does_not_stop_is_named_with_the_call_it_is_blocked_in() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=blocked_in_a_client_call, args=(release,), name="transactions-1", daemon=True)
    done = threading.Thread(target=lambda: None, name="transactions-0")
    stuck.start()
    done.start()
    done.join()
    try:
        report = stuck_threads([done, stuck])
        assert report.startswith("transactions-1:\n")
        assert "blocked_in_a_client_call" in report and "release.wait(30)" in report
        assert "transactions-0" not in report
    finally:
        release.set()
        stuck.join(5)
    assert stuck_threads([done, stuck]) == ""


# A child process with many deep threads: more stack text than a pipe holds (64 KiB), which is
# where a dump read through a pipe by the very process gdb has stopped waits forever.
DEEP_THREADS = """
import sys, threading
from pathlib import Path
from tests.chaos.native_stacks import dump_native_stacks
release = threading.Event()
def deep(n):
    release.wait(60) if n == 0 else deep(n - 1)
for _ in range(20):
    threading.Thread(target=deep, args=(150,), daemon=True).start()
print(dump_native_stacks(Path(sys.argv[1])))
release.set()
"""


def test_native_stacks_name_every_thread_or_say_why_not(tmp_path: Path) -> None:
    path = tmp_path / "native-stacks.txt"
    done = subprocess.run([sys.executable, "-c", DEEP_THREADS, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=180, check=True)
    said = done.stdout.strip()
    if shutil.which("gdb") is None:
        assert said == "no native stacks: gdb is not installed" and not path.exists()
    else:
        assert said == f"native stacks of every thread in {path}"
        stacks = path.read_text()
        assert "Thread 1 " in stacks and "Thread 21 " in stacks and len(stacks) > 64 * 1024, stacks[-2000:]
