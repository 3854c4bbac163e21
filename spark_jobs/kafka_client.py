"""confluent-kafka I/O for the `kbroker` source and sink: metadata and offsets on the driver,
reads by explicit assignment and confirmed produces on the executors.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator, cast

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from spark_jobs.offsets import DATA_LOSS_HINT, DataLossError, OffsetMap, OffsetRange
from spark_jobs.options import SinkOptions, SourceOptions, TopicPartition

log = logging.getLogger("spark_jobs.kbroker")

METADATA_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 120.0
# Records handed over per consume() call and per Arrow batch.
READ_CHUNK = 10_000


# Client properties an AdminClient accepts from the kafka.* options (the rest are consumer-only).
_ADMIN_PROPS = {
    "client.id", "socket.timeout.ms", "metadata.max.age.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "retry.backoff.ms", "request.timeout.ms", "client.dns.lookup", "debug", "broker.address.family",
    "bootstrap.servers",
}
_ADMIN_PREFIXES = ("security.", "ssl.", "sasl.")


class KBrokerClientError(RuntimeError):
    """The broker could not serve what a read or write needed (offsets, a topic, acknowledgements)."""


class OffsetReader:
    """Driver side: which partitions the subscription covers and their earliest/latest offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        conf: dict[str, Any] = {"bootstrap.servers": options.bootstrap_servers}
        conf.update(dict(options.client_config))
        # Consumer-only properties would draw librdkafka warnings here; offsets need only the isolation level.
        self._isolation = IsolationLevel.READ_COMMITTED if conf.pop("isolation.level", "") == "read_committed" else IsolationLevel.READ_UNCOMMITTED
        self._admin = AdminClient({k: v for k, v in conf.items() if k in _ADMIN_PROPS or k.startswith(_ADMIN_PREFIXES)})

    def partitions(self) -> list[TopicPartition]:
        sub = self._options.subscription
        if sub.assigned:
            return list(sub.assigned)
        metadata = self._admin.list_topics(timeout=METADATA_TIMEOUT_S)
        return sorted(
            (name, p)
            for name, topic in metadata.topics.items()
            if topic.error is None and sub.matches(name)
            for p in topic.partitions
        )

    def earliest(self, partitions: list[TopicPartition]) -> OffsetMap:
        return self._list_offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: list[TopicPartition]) -> OffsetMap:
        return self._list_offsets(partitions, OffsetSpec.latest())

    def _list_offsets(self, partitions: list[TopicPartition], spec: OffsetSpec) -> OffsetMap:
        if not partitions:
            return {}
        futures = self._admin.list_offsets(
            {KafkaTopicPartition(t, p): spec for t, p in partitions},
            isolation_level=self._isolation, request_timeout=METADATA_TIMEOUT_S,
        )
        try:
            return {(tp.topic, tp.partition): int(f.result(METADATA_TIMEOUT_S).offset) for tp, f in futures.items()}
        except KafkaException as e:
            raise KBrokerClientError(f"ListOffsets failed on {self._options.bootstrap_servers}: {e}") from e


def read_range(options: SourceOptions, rng: OffsetRange, group_id: str) -> Iterator[list[Message]]:
    """Records [start, end) of one partition, in chunks; gaps (compaction, transaction markers) are fine.

    Offsets below the log start are data loss: with failOnDataLoss an error, otherwise the read
    jumps to the earliest offset (librdkafka's auto.offset.reset does the jump).
    """
    conf = options.consumer_config(group_id)
    conf["auto.offset.reset"] = "error" if options.fail_on_data_loss else "earliest"
    consumer = Consumer(conf)
    try:
        consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while next_offset < rng.end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Cannot fetch records in [{next_offset}, {rng.end}) of {rng.topic}-{rng.partition} "
                    f"within kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}"
                )
            chunk: list[Message] = []
            for msg in consumer.consume(min(READ_CHUNK, rng.end - next_offset), timeout=1.0):
                err = msg.error()
                if err is not None:
                    next_offset = _on_read_event(options, rng, next_offset, msg, err)
                    continue
                offset = cast(int, msg.offset())  # set on every record
                if offset >= rng.end:
                    next_offset = rng.end
                    break
                chunk.append(msg)
                next_offset = offset + 1
            if chunk:
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
                yield chunk
    finally:
        consumer.close()


def _on_read_event(options: SourceOptions, rng: OffsetRange, next_offset: int, msg: Message, err: KafkaError) -> int:
    """The next offset to expect after an error event from the consumer."""
    where = f"{rng.topic}-{rng.partition}"
    if err.code() == KafkaError._PARTITION_EOF:
        # The log ends there: below `end` means records this batch planned are gone.
        log_end = cast(int, msg.offset())
        if log_end >= rng.end:
            return rng.end
        _data_loss(options, f"{where} ends at {log_end}, before the planned end {rng.end}.")
        return rng.end
    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
        _data_loss(options, f"Cannot fetch offset {next_offset} of {where}: {err.str()}.")
        return next_offset
    raise KafkaException(err)


def _data_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(message + DATA_LOSS_HINT)
    log.warning(message)


class ConfirmedProducer:
    """Produces a task's rows and returns only once the broker acknowledged every one of them."""

    def __init__(self, options: SinkOptions) -> None:
        self._producer = Producer(options.producer_config())
        self._bootstrap = options.bootstrap_servers
        self._errors: list[str] = []
        self._known_topics: set[str] = set()
        self.sent = 0

    def check_topic(self, topic: str) -> None:
        """Fail at once, naming the topic, rather than after librdkafka's message timeout."""
        if topic in self._known_topics:
            return
        metadata = self._producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        found = metadata.topics.get(topic)
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise KBrokerClientError(
                f"Topic '{topic}' does not exist on {self._bootstrap} (and the broker does not create topics on "
                f"demand: auto.create.topics.enable=false). Create it first, e.g. `kbroker topics create {topic}`."
            )
        self._known_topics.add(topic)

    def send(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None, headers: list[tuple[str, bytes | None]] | None) -> None:
        self.check_topic(topic)
        kwargs: dict[str, Any] = {"value": value, "key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        for _ in range(10_000):
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.05)
        else:
            raise KBrokerClientError(f"librdkafka's queue stayed full for 500 s while producing to {topic}")
        self.sent += 1
        if self.sent % 1000 == 0:
            self._producer.poll(0)

    def confirm(self) -> int:
        """Wait for every acknowledgement; raise on any delivery error. Returns the records sent."""
        left = self._producer.flush(FLUSH_TIMEOUT_S)
        if left:
            raise KBrokerClientError(f"{left} records to {self._bootstrap} still unacknowledged after {FLUSH_TIMEOUT_S:.0f} s")
        if self._errors:
            raise KBrokerClientError(f"{len(self._errors)} of {self.sent} records failed to deliver; first: {self._errors[0]}")
        return self.sent

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
