"""Real kbroker processes on loopback for the integration tests.

Each broker is a child process (`python -m broker serve`) on a free port with its own data
directory, logging JSON lines to a file next to that directory. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping

import pytest

from broker.server import CONTROLLED_SHUTDOWN_TIMEOUT_S
from tests.integration.helpers import unique_topic
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
# Generous: a cluster test starts up to seven Python processes at once on a 2-core machine.
START_TIMEOUT_S = 60.0
# Past the broker's own wait for the controller to approve its controlled shutdown (30 s, as
# Kafka's broker waits): a node restarted while cut off from the controller waits it out whole.
STOP_TIMEOUT_S = CONTROLLED_SHUTDOWN_TIMEOUT_S + 30.0
POLL_INTERVAL_S = 0.05
TAIL_LINES = 60

# Every broker made in this session, in creation order, so a failing test can show the logs
# of the brokers it used (fixture teardowns run after the failure is reported).
_REGISTRY: list["BrokerProcess"] = []


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


SINGLE_NODE_SESSION = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500"}


class BrokerProcess:
    """One `kbroker serve` child process; restarts keep its port and data directory."""

    def __init__(self, data_dir: Path, overrides: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        # A server.properties to start from instead of the listener and log.dirs overrides.
        self.config_file: Path | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.retired = False
        self._log_file: IO[bytes] | None = None
        self._run_log_start = 0
        # The log event that says this process is ready: a controller-only node never logs broker.started.
        self.ready_event = "broker.started"
        _REGISTRY.append(self)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        if self.config_file is not None:
            args = [sys.executable, "-m", "broker", "serve", "--config", str(self.config_file)]
        else:
            args = [
                sys.executable, "-m", "broker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}",
            ]
            # A node restarted after SIGKILL is refused registration until its previous life's
            # session ends (DUPLICATE_BROKER_REGISTRATION, as in Kafka): 9 s by default, spent
            # by every crash test. Its heartbeats go to its own controller, in process.
            for key, value in SINGLE_NODE_SESSION.items():
                if key not in self.overrides:
                    args += ["--override", f"{key}={value}"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self) -> "BrokerProcess":
        self.launch()
        return self.await_started()

    def launch(self) -> None:
        """Start the process without waiting: a cluster launches every node before awaiting any."""
        assert not self.running, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._run_log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log_file = open(self.log_path, "ab")
        self.proc = self.popen(self.command(), self._log_file, stdin=subprocess.DEVNULL)

    def popen(self, args: list[str], log_file: IO[bytes], stdin: int) -> "subprocess.Popen[bytes]":
        """A process of this broker's: its environment and directory, its output in ``log_file``."""
        env = dict(os.environ, KBROKER_LOG_FORMAT="json", PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
        return subprocess.Popen(args, cwd=self.data_dir.parent, env=env, stdin=stdin, stdout=log_file, stderr=log_file)

    def await_started(self, timeout_s: float = START_TIMEOUT_S) -> "BrokerProcess":
        assert self.proc is not None, "broker never launched"
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                self._close_log()
                raise RuntimeError(f"broker exited with {self.proc.returncode} during start-up:\n{self.tail()}")
            if self._started_logged() and _connects(self.port):
                return self
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_INTERVAL_S)
        self.kill()
        raise RuntimeError(f"broker did not start within {timeout_s}s:\n{self.tail()}")

    def stop(self) -> int:
        """SIGTERM and wait: a graceful shutdown must exit 0."""
        assert self.proc is not None, "broker never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"broker ignored SIGTERM for {STOP_TIMEOUT_S}s:\n{self.tail()}") from None
        self._close_log()
        code = self.proc.returncode
        assert code == 0, f"broker exited with {code} after SIGTERM:\n{self.tail()}"
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed by the broker itself."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT_S)
        self._close_log()

    def restart(self) -> "BrokerProcess":
        """Start again on the same port and data directory (stopping gracefully if running)."""
        if self.running:
            self.stop()
        return self.start()

    def log_events(self, current_run: bool = False) -> list[dict[str, Any]]:
        """The broker's log lines parsed as JSON; other lines come back as {"event": "raw"}."""
        if not self.log_path.exists():
            return []
        with open(self.log_path, "rb") as f:
            if current_run:
                f.seek(self._run_log_start)
            text = f.read().decode(errors="replace")
        events: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = None
            events.append(parsed if isinstance(parsed, dict) else {"event": "raw", "line": line})
        return events

    def events_named(self, name: str, current_run: bool = False) -> list[dict[str, Any]]:
        return [e for e in self.log_events(current_run) if e.get("event") == name]

    def tail(self, lines: int = TAIL_LINES) -> str:
        if not self.log_path.exists():
            return "(no broker log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _started_logged(self) -> bool:
        return any(e.get("event") == self.ready_event for e in self.log_events(current_run=True))

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def retire(broker: BrokerProcess) -> None:
    broker.kill()
    broker.retired = True


StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[StartBroker]:
    """start_broker({"log.segment.bytes": "1024"}) or start_broker(log_segment_bytes="1024")."""
    started: list[BrokerProcess] = []

    def start_broker(overrides: Mapping[str, str] | None = None, **kw: str) -> BrokerProcess:
        props = dict(overrides or {})
        props.update({k.replace("_", "."): v for k, v in kw.items()})
        b = BrokerProcess(tmp_path / f"broker{len(started)}" / "data", props)
        started.append(b)
        return b.start()

    yield start_broker
    for b in started:
        retire(b)


@pytest.fixture
def broker(broker_factory: StartBroker) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module whose tests each use their own topics."""
    b = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "data").start()
    yield b
    retire(b)


@pytest.fixture(scope="module")
def shared_broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The name test_cli.py uses for module_broker."""
    return module_broker


@pytest.fixture
def topic_name() -> str:
    return unique_topic()


@pytest.fixture(autouse=True)
def _broker_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    before = len(_REGISTRY)
    in_use = [b for b in _REGISTRY if not b.retired]
    yield
    failed = any(getattr(request.node, f"rep_{when}", None) is not None and getattr(request.node, f"rep_{when}").failed for when in ("setup", "call"))
    if failed:
        for b in in_use + _REGISTRY[before:]:
            print(f"\n----- broker {b.bootstrap} ({'running' if b.running else 'not running'}) log tail: {b.log_path} -----")
            print(b.tail())
