"""A transactions loop's client: a read_committed consumer subscribed in the loop's group and a
transactional producer, behind the few calls a consume-transform-produce loop makes. Errors come
out as ``ClientError``; a client asked to stop while it retries raises ``Stopped``.

Only confluent-kafka's: kafka-python 3.0.12's transactional producer wedges when its transaction
coordinator is killed between FindCoordinator and AddOffsetsToTxn (its network thread stops
sending, and commit_transaction and send_offsets_to_transaction wait without a timeout), so a
loop of it cannot be run through coordinator kills."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.chaos.client_logs import LIBRDKAFKA_CONSUMER_DEBUG, librdkafka_debug

API_TIMEOUT_S = 15.0
# A transaction the loop abandons (its node killed mid-commit) is aborted this soon.
TRANSACTION_TIMEOUT_MS = 10000
Record = tuple[int, int, str]


class ClientError(Exception):
    def __init__(self, description: str, fatal: bool) -> None:
        super().__init__(description)
        self.fatal = fatal


class Stopped(Exception):
    """The workload stopped while the client was still retrying."""


def until_stopped(what: str, attempt: Callable[[], Any], stop: threading.Event, errors: tuple[type[BaseException], ...]) -> Any:
    """``attempt()`` until it returns without one of ``errors``: a cluster failing over answers
    with them for a while. Bounded by the workload's stop, not by a deadline: a campaign's fault
    may outlast any fixed one."""
    while True:
        try:
            return attempt()
        except errors as e:
            if stop.is_set():
                raise Stopped(f"{what}: {e}") from e
            time.sleep(0.2)


class TxnClient(Protocol):
    def consume(self, max_records: int) -> list[Record]: ...

    def send(self, topic: str, values: list[str], offsets: dict[int, int]) -> None:
        """begin_transaction, produce ``values`` to partition 0 of ``topic``, and
        send_offsets_to_transaction with the consumer's group metadata."""

    def commit(self) -> str | None:
        """commit_transaction, retried while retriable; None when it committed, else the error."""

    def abort(self) -> None: ...

    def replace_producer(self) -> None:
        """A new producer of the same transactional.id, initialised: it fences the old one and
        completes or aborts what that one left open."""

    def rewind(self, partitions: list[int]) -> None:
        """Seek ``partitions`` back to the group's committed offsets."""

    def close(self) -> None: ...


class ConfluentClient:
    def __init__(self, bootstrap: str, group: str, topic: str, transactional_id: str, stop: threading.Event) -> None:
        self.bootstrap, self.topic, self.transactional_id, self.stop = bootstrap, topic, transactional_id, stop
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # Its group and fetch log too: the long campaign at seed 1689750076 had these consumers read nothing.
                **librdkafka_debug(f"{transactional_id}.consumer", LIBRDKAFKA_CONSUMER_DEBUG + ",fetch"),
            }
        )
        self.consumer.subscribe([topic])
        self.wedged = False
        self.producer = self._producer()

    def _producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id, "linger.ms": 5, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "socket.timeout.ms": 6000, **librdkafka_debug(self.transactional_id)})
        until_stopped("init_transactions", lambda: producer.init_transactions(API_TIMEOUT_S), self.stop, (KafkaException,))
        return producer

    def consume(self, max_records: int) -> list[Record]:
        return [(m.partition(), m.offset(), m.value().decode()) for m in self.consumer.consume(max_records, 0.5) if m.error() is None]

    def send(self, topic: str, values: list[str], offsets: dict[int, int]) -> None:
        try:
            self.producer.begin_transaction()
            for value in values:
                self.producer.produce(topic, value=value.encode(), partition=0)
        except KafkaException as e:
            error: KafkaError = e.args[0]
            raise ClientError(str(error), error.fatal()) from e
        self._send_offsets([TopicPartition(self.topic, p, o) for p, o in offsets.items()])

    def _send_offsets(self, positions: list[TopicPartition]) -> None:
        """send_offsets_to_transaction, watched: librdkafka's may wait past its timeout for ever
        when the group coordinator's node dies (confluentinc/librdkafka#5456, #5511). A producer
        stuck in it is given up, as fenced: the loop replaces it, and the new one's
        init_transactions fences it for good."""
        outcome: list[KafkaException | None] = []
        metadata = self.consumer.consumer_group_metadata()

        def call() -> None:
            try:
                self.producer.send_offsets_to_transaction(positions, metadata, API_TIMEOUT_S)
                outcome.append(None)
            except KafkaException as e:
                outcome.append(e)

        caller = threading.Thread(target=call, name=f"{self.transactional_id}-send-offsets", daemon=True)
        caller.start()
        caller.join(API_TIMEOUT_S + 5)
        if caller.is_alive():
            self.wedged = True
            raise ClientError(f"send_offsets_to_transaction still waiting after {API_TIMEOUT_S + 5} s", fatal=True)
        if (error := outcome[0]) is not None:
            raise ClientError(str(error.args[0]), error.args[0].fatal()) from error

    def commit(self) -> str | None:
        deadline = time.monotonic() + 2 * API_TIMEOUT_S
        while True:
            try:
                self.producer.commit_transaction(API_TIMEOUT_S)
                return None
            except KafkaException as e:
                error: KafkaError = e.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    return str(error)
                time.sleep(0.1)

    def abort(self) -> None:
        try:
            self.producer.abort_transaction(API_TIMEOUT_S)
        except KafkaException as e:
            raise ClientError(str(e.args[0]), e.args[0].fatal()) from e

    def replace_producer(self) -> None:
        if not self.wedged:
            self.producer.purge()
        # A wedged producer stays with the thread stuck in it; it cannot be destroyed meanwhile.
        self.wedged = False
        self.producer = self._producer()

    def rewind(self, partitions: list[int]) -> None:
        tps = [TopicPartition(self.topic, p) for p in partitions]
        for tp in until_stopped("the committed offsets", lambda: self.consumer.committed(tps, timeout=API_TIMEOUT_S), self.stop, (KafkaException,)):
            if tp.error is not None:
                raise KafkaException(tp.error)
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    def close(self) -> None:
        self.consumer.close()
        if not self.wedged:
            self.producer.flush(API_TIMEOUT_S)
