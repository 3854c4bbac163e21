"""One consumer session of the groups workload, in a process of its own so that it can be killed
(SIGKILL: no LeaveGroup, no last commit) as a crashed application would be.

``python -m tests.chaos.workloads.group_member '<json config>'`` subscribes to the topic with the
configured ``client`` (confluent-kafka or kafka-python), then polls and commits what each poll
delivered (synchronously, manual commits) until SIGTERM, when it closes the consumer (LeaveGroup)
and exits. It writes its operations to stdout, one JSON object a line (``type``, ``f``,
``value``), for the parent to record in the history in order. Rebalance callbacks run inside the
poll and the close: their ``assign``/``revoke`` events are written after the operation they
happened in completes, and each poll is written when it returns, preceded by the assignment its
records came from.
"""

from __future__ import annotations

import signal
import threading

# Set by SIGTERM, installed before the clients' imports: on a busy machine the parent's SIGTERM
# can come while they load, and the default action would end the session without its LeaveGroup.
STOPPING = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: STOPPING.set())

import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import kafka  # noqa: E402
import kafka.errors  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

from tests.chaos.client_logs import LIBRDKAFKA_CONSUMER_DEBUG, librdkafka_debug  # noqa: E402

Record = list[Any]  # [partition, offset, value]
# Errors by which the coordinator refuses a commit: it certainly did not happen.
REFUSED = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID}
KAFKA_PYTHON_REFUSED = (kafka.errors.CommitFailedError, kafka.errors.IllegalGenerationError, kafka.errors.UnknownMemberIdError, kafka.errors.RebalanceInProgressError)


class Refused(Exception):
    """The coordinator refused the commit."""


class Member:
    """The session's protocol; a subclass is one client's consumer."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.session: str = config["session"]
        self.topic: str = config["topic"]
        self.rng = random.Random(config["seed"])
        self.max_poll: int = config["max_poll"]
        self.client: str = config["client"]
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.stopping = STOPPING

    def emit(self, type: str, f: str, value: dict[str, Any] | None = None) -> None:
        print(json.dumps({"type": type, "f": f, "value": {"session": self.session, **(value or {})}}), flush=True)

    def flush_events(self) -> None:
        for f, value in self.events:
            self.emit("invoke", f)
            self.emit("ok", f, value)
        self.events.clear()

    def assigned(self, partitions: list[int]) -> None:
        self.events.append(("assign", {"partitions": sorted(partitions)}))

    def revoked(self, partitions: list[int]) -> None:
        self.events.append(("revoke", {"partitions": sorted(partitions)}))

    def run(self) -> None:
        self.emit("invoke", "join", {"client": self.client})
        self.subscribe()
        self.emit("ok", "join", {"client": self.client})
        while not self.stopping.is_set():
            records = self.poll(self.rng.randint(1, self.max_poll))
            self.flush_events()
            if not records:
                continue
            self.emit("invoke", "poll")
            self.emit("ok", "poll", {"records": records})
            nexts: dict[int, int] = {}
            for p, o, _ in records:
                nexts[p] = o + 1
            self.commit(nexts)
            time.sleep(self.rng.uniform(0, 0.05))
        self.emit("invoke", "leave")
        self.close()
        self.emit("ok", "leave")
        self.flush_events()

    def commit(self, offsets: dict[int, int]) -> None:
        # CLOCK_MONOTONIC is the machine's: the checker orders every session's commits by it.
        value = {"offsets": {str(p): o for p, o in offsets.items()}, "at": time.monotonic()}
        self.emit("invoke", "commit", value)
        try:
            self.commit_sync(offsets)
        except Refused as e:
            self.emit("fail", "commit", {**value, "error": str(e)})
        except Exception as e:
            self.emit("info", "commit", {**value, "error": repr(e)})
        else:
            self.emit("ok", "commit", value)

    def subscribe(self) -> None:
        raise NotImplementedError

    def poll(self, max_records: int) -> list[Record]:
        raise NotImplementedError

    def commit_sync(self, offsets: dict[int, int]) -> None:
        """Raises Refused when the coordinator refused it, anything else when the outcome is unknown."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.consumer = Consumer({
            "bootstrap.servers": config["bootstrap"],
            "group.id": config["group"],
            "client.id": f"member-{self.session}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": config["session_timeout_ms"],
            "heartbeat.interval.ms": config["session_timeout_ms"] // 6,
            "socket.timeout.ms": 6000,
            **librdkafka_debug(f"groups.member-{self.session}", LIBRDKAFKA_CONSUMER_DEBUG),
        })

    def subscribe(self) -> None:
        self.consumer.subscribe(
            [self.topic],
            on_assign=lambda _c, tps: self.assigned([tp.partition for tp in tps]),
            on_revoke=lambda _c, tps: self.revoked([tp.partition for tp in tps]),
        )

    def poll(self, max_records: int) -> list[Record]:
        return [[m.partition(), m.offset(), m.value().decode()] for m in self.consumer.consume(max_records, 0.5) if m.error() is None]

    def commit_sync(self, offsets: dict[int, int]) -> None:
        try:
            answer = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() in REFUSED:
                raise Refused(str(e.args[0])) from e
            raise
        errors = [tp.error for tp in answer or [] if tp.error is not None]
        if errors and all(e.code() in REFUSED for e in errors):
            raise Refused(str(errors[0]))
        if errors:
            raise KafkaException(errors[0])

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember(Member, kafka.ConsumerRebalanceListener):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.consumer = kafka.KafkaConsumer(
            bootstrap_servers=config["bootstrap"],
            group_id=config["group"],
            client_id=f"member-{self.session}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=config["session_timeout_ms"],
            heartbeat_interval_ms=config["session_timeout_ms"] // 6,
        )

    def on_partitions_assigned(self, assigned: list[kafka.TopicPartition]) -> None:
        self.assigned([tp.partition for tp in assigned])

    def on_partitions_revoked(self, revoked: list[kafka.TopicPartition]) -> None:
        self.revoked([tp.partition for tp in revoked])

    def subscribe(self) -> None:
        self.consumer.subscribe([self.topic], listener=self)

    def poll(self, max_records: int) -> list[Record]:
        try:
            batches = self.consumer.poll(timeout_ms=500, max_records=max_records)
        except kafka.errors.KafkaError as e:
            # kafka-python raises a refused connection to a dead coordinator out of poll; an
            # application polls again, as librdkafka does by itself.
            if not e.retriable:
                raise
            return []
        return [[r.partition, r.offset, r.value.decode()] for records in batches.values() for r in records]

    def commit_sync(self, offsets: dict[int, int]) -> None:
        try:
            self.consumer.commit({kafka.TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
        except KAFKA_PYTHON_REFUSED as e:
            raise Refused(repr(e)) from e

    def close(self) -> None:
        self.consumer.close(autocommit=False)


def main() -> None:
    config = json.loads(sys.argv[1])
    member = KafkaPythonMember(config) if config["client"] == "kafka-python" else ConfluentMember(config)
    member.run()


if __name__ == "__main__":
    main()
