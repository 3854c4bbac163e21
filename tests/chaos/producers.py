"""Idempotent acks=all producers of the three stock clients, each writing unique values in a thread
of its own and recording every send in the History.

Moved here from tests/cluster/test_failover_campaign.py (its ConfluentLoad, KafkaPythonLoad and
AIOKafkaLoad) and taught to record. Each send is one operation of its own process,
``<name>#<n>``, since a producer has many sends in flight at once and Jepsen's processes do one
thing at a time. ``invoke`` carries ``[null, null, value]``; ``ok`` ``[partition, offset, value]``
as acknowledged; any error is ``info``: with retries exhausted or a request timed out, the record
may still have been written.

Values are ``<name>-<n>``, keyed ``k<n mod keys>`` so the client's partitioner spreads them over
the topic's partitions. Each producer sends rounds of ``ROUND`` records every ``INTERVAL_S`` and
never has more than ``MAX_IN_FLIGHT`` unanswered, so a stalled cluster is not buried in retries.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer

from tests.chaos.client_logs import librdkafka_debug
from tests.chaos.history import History

ROUND = 10
INTERVAL_S = 0.1
MAX_IN_FLIGHT = 200
CLOSE_TIMEOUT_S = 60.0
# A request lost in a cut link or to a stopped broker is given up after this, and retried, so a
# producer moves to a new leader within seconds (the default, 30-60 s, outlasts most faults).
REQUEST_TIMEOUT_MS = 5000
DELIVERY_TIMEOUT_MS = 120000
class ChaosProducer:
    """One client's producer in a thread; ``acknowledged`` counts its ok sends."""

    client = ""

    def __init__(self, history: History, name: str, bootstrap: str, topic: str, keys: int) -> None:
        self.history = history
        self.name = name
        self.bootstrap = bootstrap
        self.topic = topic
        self.keys = keys
        self.acknowledged = 0
        self.errors: Counter[str] = Counter()
        self.failure: BaseException | None = None
        self._sent = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded_run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sending, wait (bounded) for the sends in flight, close the client."""
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S + 30)

    def _guarded_run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the campaign: a producer that died sends nothing more
            self.failure = e

    def _run(self) -> None:
        raise NotImplementedError

    def _next_round(self) -> list[tuple[str, str, str]]:
        """The next (process, key, value) to send, each already invoked; none while too many are unanswered."""
        with self._lock:
            if self._in_flight >= MAX_IN_FLIGHT:
                return []
            first, self._sent = self._sent, self._sent + ROUND
            self._in_flight += ROUND
        out = []
        for n in range(first, first + ROUND):
            process, value = f"{self.name}#{n}", f"{self.name}-{n}"
            self.history.invoke(process, "send", [None, None, value])
            out.append((process, f"k{n % self.keys}", value))
        return out

    def _acked(self, process: str, partition: int, offset: int, value: str) -> None:
        self.history.ok(process, "send", [partition, offset, value])
        with self._lock:
            self._in_flight -= 1
            self.acknowledged += 1

    def _indeterminate(self, process: str, value: str, error: Any) -> None:
        self.history.info(process, "send", [None, None, value])
        with self._lock:
            self._in_flight -= 1
            self.errors[type(error).__name__ if not isinstance(error, KafkaError) else error.name()] += 1


class ConfluentProducer(ChaosProducer):
    client = "confluent-kafka"

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                # An idempotent producer moves a partition to its new leader only once the requests
                # in flight to the old one are answered or given up: a stopped leader answers none.
                "socket.timeout.ms": REQUEST_TIMEOUT_MS + 1000,
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                # Every fault makes librdkafka log connection failures: the history says it all.
                "log_level": 2,
                **librdkafka_debug(self.name),
            }
        )
        while not self._stop.is_set():
            for process, key, value in self._next_round():
                producer.produce(self.topic, key=key, value=value, on_delivery=lambda err, msg, p=process, v=value: self._done(p, v, err, msg))
            # poll returns as soon as it has served a delivery report: wait out the interval.
            until = time.monotonic() + INTERVAL_S
            while (left := until - time.monotonic()) > 0:
                producer.poll(left)
        producer.flush(CLOSE_TIMEOUT_S)

    def _done(self, process: str, value: str, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self._acked(process, msg.partition(), msg.offset(), value)
        else:
            self._indeterminate(process, value, err)


class KafkaPythonProducer(ChaosProducer):
    client = "kafka-python"

    def _run(self) -> None:
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        )
        try:
            while not self._stop.is_set():
                for process, key, value in self._next_round():
                    future = producer.send(self.topic, key=key.encode(), value=value.encode())
                    future.add_callback(lambda md, p=process, v=value: self._acked(p, md.partition, md.offset, v))
                    future.add_errback(lambda e, p=process, v=value: self._indeterminate(p, v, e))
                time.sleep(INTERVAL_S)
            producer.flush(CLOSE_TIMEOUT_S)
        finally:
            producer.close(CLOSE_TIMEOUT_S)


class AiokafkaProducer(ChaosProducer):
    client = "aiokafka"

    def _run(self) -> None:
        asyncio.run(self._produce())

    async def _produce(self) -> None:
        # aiokafka gives a batch up after request_timeout_ms without a leader to take it: that is
        # an indeterminate send, recorded as such.
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5, request_timeout_ms=2 * REQUEST_TIMEOUT_MS)
        await producer.start()
        try:
            while not self._stop.is_set():
                for process, key, value in self._next_round():
                    delivery = await producer.send(self.topic, key=key.encode(), value=value.encode())
                    delivery.add_done_callback(lambda f, p=process, v=value: self._delivered(f, p, v))
                await asyncio.sleep(INTERVAL_S)
            await asyncio.wait_for(producer.flush(), CLOSE_TIMEOUT_S)
        finally:
            await producer.stop()

    def _delivered(self, delivery: asyncio.Future[Any], process: str, value: str) -> None:
        if delivery.cancelled():
            self._indeterminate(process, value, asyncio.CancelledError())
        elif (error := delivery.exception()) is not None:
            self._indeterminate(process, value, error)
        else:
            self._acked(process, delivery.result().partition, delivery.result().offset, value)


PRODUCERS: dict[str, type[ChaosProducer]] = {cls.client: cls for cls in (ConfluentProducer, KafkaPythonProducer, AiokafkaProducer)}
