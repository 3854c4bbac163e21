"""The chaos bench's librdkafka debug logs (tests/chaos/client_logs.py)."""

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.chaos.client_logs import CLIENT_LOGS_ENV, LIBRDKAFKA_CONSUMER_DEBUG, librdkafka_debug


def test_without_the_variable_a_client_logs_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLIENT_LOGS_ENV, raising=False)
    assert librdkafka_debug("p") == {}


def test_a_client_writes_its_idempotence_debug_log_into_the_named_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CLIENT_LOGS_ENV, str(tmp_path / "clients"))
    # Nothing listens on port 1 of loopback: the client only starts its threads and logs.
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, **librdkafka_debug("queue.p")})
    producer.poll(0.5)
    producer.flush(0)
    del producer
    log = (tmp_path / "clients" / "queue.p.librdkafka.log").read_text()
    assert "Idempotent producer state change" in log or "IDEMPSTATE" in log, log[:2000]


def test_a_group_member_writes_its_group_debug_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A member's log says which committed offsets it fetched and where it reset a position: the
    groups workload's offset-regression verdicts need it (chaos soak seed 1484106251)."""
    monkeypatch.setenv(CLIENT_LOGS_ENV, str(tmp_path / "clients"))
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **librdkafka_debug("groups.member-1", LIBRDKAFKA_CONSUMER_DEBUG)})
    consumer.subscribe(["t"])
    consumer.poll(0.5)
    consumer.close()
    log = (tmp_path / "clients" / "groups.member-1.librdkafka.log").read_text()
    assert "CGRP" in log, log[:2000]
