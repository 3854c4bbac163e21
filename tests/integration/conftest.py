"""Real broker processes on loopback for the integration tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.overrides = overrides or {}
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "BrokerProcess":
        args = [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}", "--override", f"log.dirs={self.data_dir}"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ, KBROKER_LOG_FORMAT="json", PYTHONPATH=str(REPO))
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self._log_file, stderr=self._log_file)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.tail()}")
            if any(e.get("event") == "broker.started" for e in self.log_events()[-50:]):
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start in {START_TIMEOUT_S}s:\n{self.tail()}")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self._log_file.close()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if hasattr(self, "_log_file"):
            self._log_file.close()

    def restart(self) -> "BrokerProcess":
        if self.proc is not None and self.proc.poll() is None:
            assert self.stop() == 0
        return self.start()

    def log_events(self) -> list[dict]:
        events = []
        if self.log_path.exists():
            for line in self.log_path.read_text(errors="replace").splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    events.append({"event": "raw", "line": line})
        return events

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"data{len(started)}", {k.replace("_", "."): v for k, v in overrides.items()})
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:  # type: ignore[no-untyped-def]
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield b
    b.kill()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
