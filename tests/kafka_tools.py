"""Apache Kafka 4.4's command-line tools, run from the cached jars in one JVM per test process.

A tool run in a JVM of its own costs one to three seconds of start-up on this kind of machine,
more than most tools take to do their work; the suite runs many. tests/ToolRunner.java runs the
tools' mains one after another in one JVM (Kafka's exit procedure and the tools' shutdown hooks
handled as `java` would), and ``kafka_tool`` hands it each command. A tool that reads its standard
input gets ``stdin``. The answer is a CompletedProcess, as ``subprocess.run`` gives.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO

from benchmarks.apache_kafka import CACHE_DIR, TOOL_JVM_OPTS, short_lived_jvm_opts

RUNNER_SOURCE = Path(__file__).with_name("ToolRunner.java")
TOOL_TIMEOUT_S = 90.0
# The tools' logging as `java` with Kafka's jars and no configuration gives it (log4j2's default:
# ERROR and above on standard output), following the runner's per-command streams.
FRESH_JVM_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.follow = true
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} [%t] %-5level %logger{36} - %msg%n
rootLogger.level = ERROR
rootLogger.appenderRef.out.ref = OUT
"""
# Or kept apart from what the tools print: WARN and above on the runner's own stderr (a file).
SEPARATE_LOG4J2 = """status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""


class ToolJvm:
    """One ToolRunner JVM: ``run`` sends it a command and waits for that command's output."""

    def __init__(self, lib: Path, stderr_path: Path, log4j2: str = FRESH_JVM_LOG4J2) -> None:
        classes = compile_runner(lib)
        log4j = Path(tempfile.mkdtemp()) / "tools-log4j2.properties"
        log4j.write_text(log4j2)
        self._stderr: IO[bytes] = open(stderr_path, "ab")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen(
            ["java", *TOOL_JVM_OPTS, *short_lived_jvm_opts(), f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{classes}:{lib}/*", "ToolRunner"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
        )  # fmt: skip
        self._lock = threading.Lock()

    def run(self, main_class: str, *args: str, stdin: str = "") -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``main_class``'s main(args): the code `java` would exit
        with (0 when main returns without calling Exit.exit)."""
        request = {"class": main_class, "args": list(args), "stdin": stdin, "timeout_ms": int(TOOL_TIMEOUT_S * 1000)}
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the tool runner exited ({self.proc.poll()}); its stderr: {self.stderr_path}")
        answer = json.loads(line)
        rc = 0 if answer["rc"] == -1 else answer["rc"]
        assert rc != -2, f"{main_class} {' '.join(args)} still running after {TOOL_TIMEOUT_S}s:\n{answer['out']}{answer['err']}"
        return rc, answer["out"], answer["err"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def compile_runner(lib: Path) -> Path:
    """ToolRunner's classes, compiled once per version of its source into the jars' cache."""
    digest = hashlib.sha256(RUNNER_SOURCE.read_bytes() + str(lib).encode()).hexdigest()[:16]
    into = CACHE_DIR / "tool-runner" / digest
    if (into / "ToolRunner.class").exists():
        return into
    into.parent.mkdir(parents=True, exist_ok=True)
    # Compiled beside, then renamed into place: test processes may compile it at the same time.
    work = Path(tempfile.mkdtemp(dir=into.parent))
    out = subprocess.run(["javac", "-d", str(work), "-cp", f"{lib}/*", str(RUNNER_SOURCE)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"javac {RUNNER_SOURCE.name} failed:\n{out.stdout}{out.stderr}"
    try:
        os.rename(work, into)
    except OSError:  # another process was first
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return into


_shared: ToolJvm | None = None
_shared_lock = threading.Lock()


def kafka_tool(lib: Path, main_class: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``main_class`` (e.g. org.apache.kafka.tools.ConfigCommand) run with ``args`` in this
    process's tool JVM, started on first use and stopped when the process exits."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.proc.poll() is not None:
            _shared = ToolJvm(lib, Path(tempfile.gettempdir()) / f"kbroker-tools-{os.getpid()}.stderr")
            atexit.register(_shared.close)
        jvm = _shared
    rc, out, err = jvm.run(main_class, *args, stdin=stdin)
    return subprocess.CompletedProcess([main_class, *args], rc, out, err)


__all__ = ["FRESH_JVM_LOG4J2", "SEPARATE_LOG4J2", "ToolJvm", "compile_runner", "kafka_tool"]
