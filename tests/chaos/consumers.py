"""A consumer group member polling all through the faults, and the final drain, both recording
what they read in the History.

A member (confluent-kafka, manual commits) records each non-empty ``poll`` with the records it
delivered, then commits their next offsets synchronously as a ``commit`` operation (value
``{partition: next offset}``; an error is ``info``, the commit may have landed). A commit
librdkafka has not answered within ``COMMIT_TIMEOUT_S`` is ``info`` too, and the member polls on:
librdkafka's synchronous commit waits without a deadline, and one can be lost for good. A
Metadata response that lists no broker (after a new active controller fenced them all) makes
librdkafka 2.10+ decommission every broker it knows, the coordinator among them: the client then
finds no broker to ask for a coordinator again (seen in a campaign). An OffsetCommit in flight then,
as librdkafka's source reads, fails with _TRANSPORT and is requeued on the coordinator's logical
broker, which has no address any more, where it times out unsent and is requeued for ever (its
retry count moves only for a request actually sent). Such a handle cannot be closed either (its
close waits for the outstanding commit), so it is left open. Its process is
its *session*, ``<name>.<n>``: a rebalance hands it partitions that start over from the committed
offsets, so offsets may only be compared within one assignment, and n moves on at every assign,
revoke or loss. Records a poll returns after a rebalance belong to the new session.

The drain reads each partition from offset 0 to its high watermark with a fresh consumer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.chaos.history import History
from tests.integration.helpers import unique_topic

POLL_TIMEOUT_S = 0.2
POLL_MAX = 200
CLOSE_TIMEOUT_S = 60.0
# Far past librdkafka's own tries of an answered commit: three of socket.timeout.ms (6 s) each.
COMMIT_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 90.0
# Kafka's default group.min.session.timeout.ms; a cluster that allows less may be given less.
SESSION_TIMEOUT_MS = 6000


class GroupMember:
    def __init__(self, history: History, name: str, bootstrap: str, topic: str, group: str, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.history = history
        self.name = name
        self.topic = topic
        self.polled = 0
        self.failure: BaseException | None = None
        self._session = 0
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": session_timeout_ms // 6,
                "socket.timeout.ms": 6000,
                "log_level": 2,
            }
        )
        self._stop = threading.Event()
        # A commit librdkafka never answered: the handle cannot be closed.
        self._commit_lost = False
        self._thread = threading.Thread(target=self._guarded_run, name=name, daemon=True)

    @property
    def process(self) -> str:
        return f"{self.name}.{self._session}"

    def start(self) -> None:
        self._consumer.subscribe([self.topic], on_assign=self._rebalanced, on_revoke=self._rebalanced, on_lost=self._rebalanced)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S)

    def _rebalanced(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._session += 1

    def _guarded_run(self) -> None:
        try:
            while not self._stop.is_set():
                self._poll_and_commit()
        except BaseException as e:  # reported by the campaign
            self.failure = e
        finally:
            if not self._commit_lost:
                self._consumer.close()

    def _poll_and_commit(self) -> None:
        process = self.process
        self.history.invoke(process, "poll")
        messages = [m for m in self._consumer.consume(POLL_MAX, POLL_TIMEOUT_S) if m.error() is None]
        records = [[m.partition(), m.offset(), m.value().decode()] for m in messages]
        if process != self.process:
            # Rebalanced within the poll: what it returned was read in the new session.
            self.history.info(process, "poll")
            process = self.process
            self.history.invoke(process, "poll")
        self.history.ok(process, "poll", records)
        self.polled += len(records)
        if not records:
            return
        offsets = {p: o + 1 for p, o, _ in records}
        self.history.invoke(process, "commit", offsets)
        if self._commit([TopicPartition(self.topic, p, o) for p, o in offsets.items()]):
            self.history.ok(process, "commit", offsets)
        else:
            self.history.info(process, "commit", offsets)

    def _commit(self, offsets: list[TopicPartition]) -> bool:
        """A synchronous commit, given up after COMMIT_TIMEOUT_S: True once acknowledged, False
        when it failed or never answered (its outcome unknown either way). It runs on a thread of
        its own, so that one librdkafka never answers does not stop the member."""
        outcome: list[BaseException | bool] = []
        done = threading.Event()

        def commit() -> None:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
                outcome.append(True)
            except KafkaException:
                outcome.append(False)
            except BaseException as e:  # the member's failure, raised below
                outcome.append(e)
            finally:
                done.set()

        threading.Thread(target=commit, name=f"{self.name}-commit", daemon=True).start()
        if not done.wait(COMMIT_TIMEOUT_S):
            self._commit_lost = True
            return False
        [result] = outcome
        if isinstance(result, BaseException):
            raise result
        return result


def drain(history: History, process: str, bootstrap: str, topic: str, partitions: list[int]) -> None:
    """Read every partition from offset 0 to its high watermark; one ``drain`` op per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("drain"), "enable.auto.commit": False, "log_level": 2})
    try:
        for p in partitions:
            history.invoke(process, "drain", p)
            end = high_watermark(consumer, topic, p)
            consumer.assign([TopicPartition(topic, p, 0)])
            records: list[list[Any]] = []
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while end > 0:
                records.extend([m.partition(), m.offset(), m.value().decode()] for m in consumer.consume(POLL_MAX * 5, 0.5) if m.error() is None)
                [position] = consumer.position([TopicPartition(topic, p)])
                if position.offset >= end:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"the drain of {topic}-{p} did not reach its high watermark {end} in {DRAIN_TIMEOUT_S}s (at {position.offset})")
            history.ok(process, "drain", {"partition": p, "end": end, "records": [r for r in records if r[1] < end]})
    finally:
        consumer.close()


# What a watermark query may meet while the restarted nodes settle: each is answered anew soon.
LEADERSHIP_MOVING = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
    # librdkafka's own answer while its metadata does not list the partition yet: seen against
    # Apache Kafka right after every node was killed and restarted (seed 2 of --target kafka).
    KafkaError._UNKNOWN_PARTITION,
    # A new leader whose high watermark is still below where its epoch began (Kafka's answer too):
    # the end it would give may be below records already acknowledged and read.
    KafkaError.OFFSET_NOT_AVAILABLE,
})


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's high watermark, asked again while the answer is retriable: right after the
    nodes restart, leadership moves back to the preferred replicas under a client's feet."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=DRAIN_TIMEOUT_S)[1])
        except KafkaException as e:
            if e.args[0].code() not in LEADERSHIP_MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
