"""The queue workload: idempotent acks=all producers of the three stock clients writing unique,
keyed values to an RF=3, min.insync.replicas=2 topic, a consumer group with manual commits
reading all through the faults, and a final drain of every partition after healing.

Its checks are tests/chaos/checker.py's queue checks. Every process of this workload is named
``queue.…``, so its checks see only its own operations in the shared history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.checker import check_queue, duplicates, queue_history
from tests.chaos.consumers import SESSION_TIMEOUT_MS, GroupMember, drain
from tests.chaos.duplicate_origins import duplicate_origins
from tests.chaos.history import History, Op
from tests.chaos.producers import PRODUCERS, ChaosProducer
from tests.chaos.workload import Verdict
from tests.integration.helpers import unique_topic

PREFIX = "queue."
CREATE_TIMEOUT_S = 60.0


class QueueWorkload:
    name = "queue"

    def __init__(self, partitions: int = 3, consumers: int = 2, clients: tuple[str, ...] = tuple(PRODUCERS), keys: int = 32, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.topic = unique_topic("queue")
        self.partitions = partitions
        self.consumers = consumers
        self.clients = clients
        self.keys = keys
        self.session_timeout_ms = session_timeout_ms  # the group members'
        self.producers: list[ChaosProducer] = []
        self.members: list[GroupMember] = []

    @property
    def topics(self) -> dict[str, int]:
        """The partitions the nemesis aims at: topic -> partition count."""
        return {self.topic: self.partitions}

    def setup(self, admin_bootstrap: str) -> None:
        topic = NewTopic(self.topic, self.partitions, 3, config={"min.insync.replicas": "2"})
        admin = AdminClient({"bootstrap.servers": admin_bootstrap})
        admin.create_topics([topic], operation_timeout=CREATE_TIMEOUT_S, request_timeout=CREATE_TIMEOUT_S)[self.topic].result(timeout=CREATE_TIMEOUT_S)

    def start(self, history: History, bootstrap: Callable[[], str]) -> None:
        group = unique_topic("queue-group")
        self.producers = [PRODUCERS[client](history, f"{PREFIX}{client}", bootstrap(), self.topic, self.keys) for client in self.clients]
        self.members = [GroupMember(history, f"{PREFIX}c{i}", bootstrap(), self.topic, group, self.session_timeout_ms) for i in range(self.consumers)]
        for client in [*self.producers, *self.members]:
            client.start()

    def progress(self) -> dict[str, int]:
        """Acknowledged sends per producer: the campaign waits for each to move after a fault."""
        return {p.name: p.acknowledged for p in self.producers}

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.failure!r}" for c in [*self.producers, *self.members] if c.failure is not None]

    def stop(self) -> None:
        for client in [*self.producers, *self.members]:
            client.stop()

    def drain(self, history: History, bootstrap: str) -> None:
        drain(history, f"{PREFIX}drain", bootstrap, self.topic, list(range(self.partitions)))

    def check(self, ops: list[Op]) -> list[Verdict]:
        return check_queue(self.name, queue_history(ops, PREFIX))

    def duplicate_origins(self, ops: list[Op], data_dirs: Sequence[Path]) -> dict[str, Any]:
        """Who wrote each copy of the values read twice (tests/chaos/duplicate_origins.py)."""
        history = queue_history(ops, PREFIX)
        return duplicate_origins(self.topic, duplicates(history.polls + history.drained), data_dirs)

    def describe(self) -> str:
        return ", ".join(f"{p.name} {p.acknowledged} acknowledged" + (f" (errors {dict(p.errors)})" if p.errors else "") for p in self.producers) + ", " + ", ".join(
            f"{m.name} {m.polled} polled" for m in self.members
        )
