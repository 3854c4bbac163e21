"""A flood of failed logins: 10,000 wrong SASL/PLAIN passwords from 127.0.0.1, hundreds of
connections at a time, each waiting out ``connection.failed.authentication.delay.ms`` before its
answer and its close (one in ten gives up during the wait), and exchanges abandoned after the
handshake. Each costs that connection only: a confluent-kafka producer and consumer on connections
of their own deliver every record all along, clients that know their password log in meanwhile,
and afterwards the broker holds no more sockets than before and has logged one line per refusal
and no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_authenticate.v2 import response as authenticate_v2_response
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.serial import entity_reader

from broker.wire_client import encode_request
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.ports import free_port

FAILED_LOGINS = 10_000
ABANDONED = 500
CONCURRENT = 800
# connection.failed.authentication.delay.ms: short, so 10,000 fit in seconds, yet long beside a
# login on a loaded machine, so that a delay holding up others would show.
DELAY_MS = 400
STEP_TIMEOUT_S = 10.0  # any one read of the flood; generous for a loaded 2-core machine
FLOOD_TIMEOUT_S = 60.0
TIMEOUT_S = 30.0
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
# Both requests of an exchange in one write, as a client in a hurry sends them.
HANDSHAKE = encode_request(handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), 1)
GUESS = HANDSHAKE + encode_request(authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00guess"), 2)
LOGIN = HANDSHAKE + encode_request(authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    broker = BrokerProcess(tmp_path_factory.mktemp("flood") / "data")
    sasl_port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": str(DELAY_MS),
        }
    )
    broker.start()
    try:
        yield broker, sasl_port
    finally:
        retire(broker)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), STEP_TIMEOUT_S))
    return await asyncio.wait_for(reader.readexactly(size), STEP_TIMEOUT_S)


async def guess(port: int, leave_early: bool) -> tuple[bytes, float] | None:
    """One refused login: the SaslAuthenticate answer's frame, once the broker has closed the
    connection, and how long after the guess the answer came; None for a client that leaves
    during the delay."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), STEP_TIMEOUT_S)
    try:
        writer.write(GUESS)
        sent = time.monotonic()
        await read_frame(reader)  # the handshake's answer, at once
        if leave_early:
            return None
        answer = await read_frame(reader)
        waited = time.monotonic() - sent
        assert await asyncio.wait_for(reader.read(1), STEP_TIMEOUT_S) == b"", "still open after its refusal"
        return answer, waited
    finally:
        writer.close()


async def abandon(port: int) -> None:
    """A handshake, and gone before authenticating."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), STEP_TIMEOUT_S)
    try:
        writer.write(HANDSHAKE)
        await read_frame(reader)
    finally:
        writer.close()


async def login(port: int) -> float:
    """How long a client that knows its password takes from connecting to being authenticated."""
    start = time.monotonic()
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), STEP_TIMEOUT_S)
    try:
        writer.write(LOGIN)
        await read_frame(reader)
        answer = decode_authenticate(await read_frame(reader))
        assert answer.error_code == ErrorCode.none
        return time.monotonic() - start
    finally:
        writer.close()


def decode_authenticate(frame: bytes) -> authenticate_v2_response.SaslAuthenticateResponse:
    # Correlation id, then the flexible header's empty tagged fields.
    response, _ = entity_reader(authenticate_v2_response.SaslAuthenticateResponse)(memoryview(frame).toreadonly(), 5)
    return response


async def flood(port: int) -> tuple[list[bytes], list[float], list[float]]:
    """FAILED_LOGINS guesses and ABANDONED exchanges, CONCURRENT at a time, and a correct login
    every 100 ms meanwhile."""
    answers: list[bytes] = []
    waits: list[float] = []
    logins: list[float] = []
    abandon_every = FAILED_LOGINS // ABANDONED
    remaining = iter(range(FAILED_LOGINS))

    async def worker() -> None:
        for i in remaining:
            if i % abandon_every == 0:
                await abandon(port)
            result = await guess(port, leave_early=i % 10 == 0)
            if result is not None:
                answers.append(result[0])
                waits.append(result[1])

    async def well_behaved() -> None:
        while True:
            logins.append(await login(port))
            await asyncio.sleep(0.1)

    beside = asyncio.create_task(well_behaved())
    try:
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONCURRENT))), FLOOD_TIMEOUT_S)
    finally:
        beside.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beside  # a correct login that failed fails the test
    return answers, waits, logins


class Traffic:
    """A confluent-kafka producer sending a record every 10 ms and a consumer reading them, logged in
    as alice on the flooded listener, in threads beside the flood."""

    def __init__(self, sasl_port: int, topic: str) -> None:
        self.topic = topic
        login = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
        self.producer = Producer({**login, "linger.ms": 0})
        self.consumer = Consumer({**login, "group.id": unique_topic("g"), "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.sent: list[bytes] = []
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.seen: list[bytes] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def __enter__(self) -> "Traffic":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT_S)
        self.consumer.close()

    def _produce(self) -> None:
        def delivered(err: object, _msg: object, at: float) -> None:
            if err is None:
                self.latencies.append(time.monotonic() - at)
            else:
                self.failures.append(str(err))

        while not self._stop.is_set():
            value = f"{len(self.sent):06d}".encode()
            at = time.monotonic()
            self.producer.produce(self.topic, value, partition=0, on_delivery=lambda err, msg, at=at: delivered(err, msg, at))
            self.sent.append(value)
            self.producer.poll(0.01)
        self.producer.flush(TIMEOUT_S)

    def _consume(self) -> None:
        deadline = None
        while deadline is None or (len(self.seen) < len(self.sent) and time.monotonic() < deadline):
            if deadline is None and self._stop.is_set():
                deadline = time.monotonic() + TIMEOUT_S
            msg = self.consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                self.seen.append(msg.value())


def open_sockets(pid: int) -> int:
    """The process's socket descriptors (its log files come and go with the topics it makes)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue  # closed while listed
    return count


def rss_mb(pid: int) -> float:
    fields = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()
    return int(fields[0]) / 1024


def test_ten_thousand_failed_logins_from_one_address_cost_only_their_own_connections(broker: tuple[BrokerProcess, int]) -> None:
    process, sasl_port = broker
    assert process.proc is not None
    pid = process.proc.pid
    topic = unique_topic("flood")
    create_topic(process.bootstrap, topic)
    with Traffic(sasl_port, topic) as traffic:
        # The producer and consumer are connected and working before the flood begins.
        deadline = time.monotonic() + TIMEOUT_S
        while not (traffic.latencies and traffic.seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert traffic.latencies and traffic.seen
        sockets_before, rss_before = open_sockets(pid), rss_mb(pid)
        log_lines_before = len(process.log_events())
        started = time.monotonic()
        answers, waits, logins = uvloop.run(flood(sasl_port))
        flood_s = time.monotonic() - started
    # Every guess was refused with Kafka's answer, the same bytes each time, after the delay.
    assert len(answers) == FAILED_LOGINS - FAILED_LOGINS // 10
    refused = decode_authenticate(answers[0])
    assert (refused.error_code, refused.error_message) == (ErrorCode.sasl_authentication_failed, "Authentication failed: Invalid username or password")
    assert set(answers) == {answers[0]}
    assert min(waits) >= DELAY_MS / 1000 * 0.9
    # The delay holds up only the connection it punishes: the refusals' delays (over an hour end to end)
    # overlapped, hundreds at a time, and clients that knew their password logged in meanwhile,
    # some of them sooner than any refusal was answered.
    assert flood_s < FAILED_LOGINS * DELAY_MS / 1000 / 100
    assert logins and min(logins) < DELAY_MS / 1000, logins
    # The producer and consumer kept working: every record delivered and read, none slowly.
    assert not traffic.failures
    assert len(traffic.latencies) == len(traffic.sent) > 0
    assert traffic.seen == traffic.sent
    assert max(traffic.latencies) < 5.0, max(traffic.latencies)
    # Afterwards: the broker's sockets are back where they were, its memory grew with the connections
    # open at once (each holds a 64 KiB read buffer; the allocator keeps the high-water mark), not
    # with the number of logins, and its log has one warning per refusal and nothing worse.
    deadline = time.monotonic() + TIMEOUT_S
    while open_sockets(pid) > sockets_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_sockets(pid) <= sockets_before
    assert rss_mb(pid) < rss_before + CONCURRENT * 0.15, (rss_before, rss_mb(pid))
    events = process.log_events()[log_lines_before:]
    failures = [e for e in events if e.get("event") == "connection.authentication_failed"]
    assert len(failures) == FAILED_LOGINS
    assert {(e["level"], e["reason"]) for e in failures} == {("warning", "Authentication failed: Invalid username or password")}
    # The flood adds no other warning: what else is logged meanwhile is the producer's and the
    # consumer's own business (its group, the offsets topic's fifty partitions created).
    other_warnings = [e for e in events if e.get("level") == "warning" and e.get("event") != "connection.authentication_failed"]
    assert len(other_warnings) < 20, other_warnings[:5]
    assert not [e for e in events if e.get("level") in ("error", "critical") or e.get("event") == "raw" or "exception" in e]
    assert "Traceback" not in process.log_path.read_text()
    assert process.running
    print(
        f"{FAILED_LOGINS} failed logins in {flood_s:.1f}s; {len(logins)} correct logins meanwhile, median {sorted(logins)[len(logins) // 2] * 1000:.0f} ms;"
        f" {len(traffic.sent)} records, slowest delivery {max(traffic.latencies) * 1000:.0f} ms; broker RSS {rss_before:.0f} -> {rss_mb(pid):.0f} MB"
    )
