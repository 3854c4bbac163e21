"""The queue workload's group member when librdkafka never answers a synchronous commit: the
commit is recorded as unknown (``info``), the member polls on, and stopping it does not wait on
the lost commit (nor try to close the handle, whose close would wait on it too)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.chaos import consumers
from tests.chaos.consumers import GroupMember
from tests.chaos.history import History


class FakeMessage:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return f"v{self._offset}".encode()


class FakeConsumer:
    """Delivers offsets 0, 1, 2... of partition 0, one per poll; ``answer`` decides each commit."""

    def __init__(self, answer: Any) -> None:
        self._answer = answer
        self._next = 0
        self.commits = 0
        self.closed = False
        self.never = threading.Event()  # what a lost commit waits on

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        time.sleep(0.01)
        self._next += 1
        return [FakeMessage(0, self._next - 1)]

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        assert not asynchronous
        self.commits += 1
        self._answer(self, self.commits)

    def close(self) -> None:
        self.closed = True


def member(fake: FakeConsumer) -> tuple[GroupMember, History]:
    history = History()
    m = GroupMember(history, "queue.c0", "127.0.0.1:1", "t", "g")
    m._consumer.close()
    m._consumer = fake  # type: ignore[assignment]
    return m, history


def run_until(m: GroupMember, done: Any, timeout_s: float = 10.0) -> None:
    m._thread.start()
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    m.stop()
    assert time.monotonic() - started < 2.0, "stop waited on the member"
    assert m.failure is None


def commit_outcomes(history: History) -> list[tuple[str, Any]]:
    return [(op.type, op.value) for op in history.ops if op.f == "commit"]


def test_a_commit_never_answered_is_unknown_and_the_member_polls_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "COMMIT_TIMEOUT_S", 0.2)

    def second_is_lost(fake: FakeConsumer, n: int) -> None:
        if n == 2:
            fake.never.wait()

    fake = FakeConsumer(second_is_lost)
    m, history = member(fake)
    try:
        run_until(m, lambda: fake.commits >= 4)
    finally:
        fake.never.set()
    outcomes = commit_outcomes(history)
    assert outcomes[:6] == [("invoke", {0: 1}), ("ok", {0: 1}), ("invoke", {0: 2}), ("info", {0: 2}), ("invoke", {0: 3}), ("ok", {0: 3})]
    assert not fake.closed, "closing a handle with a lost commit would wait on it"


def test_a_failed_commit_is_unknown_and_the_handle_is_closed() -> None:
    from confluent_kafka import KafkaError, KafkaException

    def first_fails(fake: FakeConsumer, n: int) -> None:
        if n == 1:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))

    fake = FakeConsumer(first_fails)
    m, history = member(fake)
    run_until(m, lambda: fake.commits >= 2)
    assert commit_outcomes(history)[:4] == [("invoke", {0: 1}), ("info", {0: 1}), ("invoke", {0: 2}), ("ok", {0: 2})]
    assert fake.closed
