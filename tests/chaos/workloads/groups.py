"""The groups workload: consumers of one group joining, leaving and being killed while committing.

A feeder writes to the topic's partitions throughout. ``members`` slots each run consumer
sessions one after another (group_member processes, so that a session can die without a
LeaveGroup; confluent-kafka's consumer, or kafka-python's for a seeded share of them); each
session lives a seeded random while, then either leaves (SIGTERM: close, LeaveGroup) or is
killed (SIGKILL). Session n is history process ``<name>-<n>``; the parent records
its operations as it writes them, and when it kills a session, the operation it was in as
``info`` followed by a ``kill`` info. The workload never resets the group's offsets. The drain
lists the group's committed offsets and reads the whole topic; checks_groups judges them.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from tests.chaos import checks_groups
from tests.chaos.history import History, Op
from tests.chaos.workload import Verdict, stuck_threads
from tests.chaos.workloads.kafka_io import TIMEOUT_S, Feeder, committed_offsets, create_topic, read_to_end, unique

REPO = Path(__file__).resolve().parents[3]
# Kafka's default group.min.session.timeout.ms; a cluster that allows less may be given less.
SESSION_TIMEOUT_MS = 6000
LEAVE_TIMEOUT_S = 30.0


class GroupsWorkload:
    def __init__(self, *, members: int = 3, partitions: int = 4, rate: int = 100, lifetime_s: tuple[float, float] = (3.0, 10.0), kill_probability: float = 0.4, kafka_python_share: float = 0.3, session_timeout_ms: int = SESSION_TIMEOUT_MS, max_poll: int = 20, seed: int = 0, name: str = "groups", log_dir: Path | None = None) -> None:
        self.name = name
        self.members = members
        self.partitions = partitions
        self.rate = rate
        self.lifetime_s = lifetime_s
        self.kill_probability = kill_probability
        self.kafka_python_share = kafka_python_share
        self.max_poll = max_poll
        # A killed member holds its partitions this long: sessions should live longer than it.
        self.session_timeout_ms = session_timeout_ms
        self.seed = seed
        self.topic = unique(f"{name}-topic")
        self.group = unique(f"{name}-group")
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"{name}-members-"))
        self._feeder: Feeder | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sessions = 0
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []

    def setup(self, admin_bootstrap: str) -> None:
        create_topic(admin_bootstrap, self.topic, self.partitions)

    def start(self, history: History, bootstrap: Callable[[], str]) -> None:
        self._feeder = Feeder(bootstrap(), self.topic, self.partitions, self.name, self.rate)
        self._feeder.start()
        for slot in range(self.members):
            rng = random.Random(self.seed * 1000 + slot)
            thread = threading.Thread(target=self._slot, args=(history, bootstrap, rng), name=f"{self.name}-slot-{slot}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(LEAVE_TIMEOUT_S + 10)
        if self._feeder is not None:
            self._feeder.stop()
        stuck = stuck_threads(self._threads)
        assert not stuck, f"group member slots did not stop:\n{stuck}"

    def failures(self) -> list[str]:
        """The slots that died of an exception: the history after it is incomplete."""
        return [repr(e) for e in self._errors]

    def drain(self, history: History, bootstrap: str) -> None:
        process = f"{self.name}-drain"
        history.invoke(process, "committed-offsets", {"group": self.group})
        offsets = committed_offsets(bootstrap, self.group, self.topic, self.partitions)
        history.ok(process, "committed-offsets", {"group": self.group, "offsets": {str(p): o for p, o in offsets.items()}})
        history.invoke(process, "read", {"topic": self.topic})
        records, ends = read_to_end(bootstrap, self.topic, self.partitions, "read_uncommitted")
        history.ok(process, "read", {"topic": self.topic, "records": records, "ends": {str(p): o for p, o in ends.items()}})

    def check(self, ops: list[Op]) -> list[Verdict]:
        return checks_groups.check(ops, self.name)

    def _slot(self, history: History, bootstrap: Callable[[], str], rng: random.Random) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    self._sessions += 1
                    session = str(self._sessions)
                lifetime = rng.uniform(*self.lifetime_s)
                kill = rng.random() < self.kill_probability
                client = "kafka-python" if rng.random() < self.kafka_python_share else "confluent-kafka"
                _Session(self, session, client, history, bootstrap(), rng.randrange(2**32)).run(lifetime, kill)
        except BaseException as e:
            self._errors.append(e)


class _Session:
    """One group_member process and the thread recording what it writes."""

    def __init__(self, workload: GroupsWorkload, session: str, client: str, history: History, bootstrap: str, seed: int) -> None:
        self.w = workload
        self.session = session
        self.process = f"{workload.name}-{session}"
        self.history = history
        config = {"session": session, "client": client, "topic": workload.topic, "group": workload.group, "bootstrap": bootstrap, "seed": seed, "max_poll": workload.max_poll, "session_timeout_ms": workload.session_timeout_ms}
        self.log = (workload.log_dir / f"member-{session}.log").open("w")
        self.child = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.workloads.group_member", json.dumps(config)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        self.pending: dict[str, Any] | None = None  # the invoke the member has not completed
        self.reader = threading.Thread(target=self._record, name=f"{self.process}-reader", daemon=True)
        self.reader.start()

    def _record(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            op = json.loads(line)
            self.history.record(self.process, op["type"], op["f"], op["value"])
            self.pending = op if op["type"] == "invoke" else None

    def run(self, lifetime_s: float, kill: bool) -> None:
        try:
            self.w._stop.wait(lifetime_s)
            if kill and not self.w._stop.is_set():
                self._kill()
                return
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(LEAVE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                # A close stuck behind a fault: the session ends as a crash would.
                self._kill()
                return
            self.reader.join(TIMEOUT_S)
            if self.pending is not None:
                self.history.info(self.process, self.pending["f"], {**self.pending["value"], "exited": self.child.returncode})
            # -SIGTERM: stopped while its interpreter was still starting, before the member installed
            # its handler (a busy machine, a short session): it never reached the group.
            if self.child.returncode not in (0, -signal.SIGTERM):
                raise AssertionError(f"group member {self.session} exited with {self.child.returncode}; see {self.log.name}")
        finally:
            self.log.close()

    def _kill(self) -> None:
        """SIGKILL: no LeaveGroup, and the operation under way left unknown."""
        self.child.kill()
        self.child.wait(TIMEOUT_S)
        self.reader.join(TIMEOUT_S)
        if self.pending is not None:
            self.history.info(self.process, self.pending["f"], {**self.pending["value"], "killed": True})
        self.history.info(self.process, "kill", {"session": self.session})
