"""One consumer session of the groups workload, in a process of its own so that it can be killed
(SIGKILL: no LeaveGroup, no last commit) as a crashed application would be.

``python -m tests.chaos.workloads.group_member '<json config>'`` subscribes to the topic, then
polls and commits what each poll delivered (synchronously, manual commits) until SIGTERM, when it
closes the consumer (LeaveGroup) and exits. It writes its operations to stdout, one JSON object a
line (``type``, ``f``, ``value``), for the parent to record in the history in order. Rebalance
callbacks run inside consume() and close(): their ``assign``/``revoke`` events are written after
the operation they happened in completes, and each poll is written when it returns, preceded by
the assignment its records came from.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# Errors by which the coordinator refuses a commit: it certainly did not happen.
REFUSED = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID}


class Member:
    def __init__(self, config: dict[str, Any]) -> None:
        self.session: str = config["session"]
        self.topic: str = config["topic"]
        self.rng = random.Random(config["seed"])
        self.max_poll: int = config["max_poll"]
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.stopping = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": config["bootstrap"],
            "group.id": config["group"],
            "client.id": f"member-{self.session}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": config["session_timeout_ms"],
            "heartbeat.interval.ms": config["session_timeout_ms"] // 6,
            "socket.timeout.ms": 6000,
        })

    def emit(self, type: str, f: str, value: dict[str, Any] | None = None) -> None:
        print(json.dumps({"type": type, "f": f, "value": {"session": self.session, **(value or {})}}), flush=True)

    def flush_events(self) -> None:
        for f, value in self.events:
            self.emit("invoke", f)
            self.emit("ok", f, value)
        self.events.clear()

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", {"partitions": sorted(tp.partition for tp in partitions)}))

    def on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", {"partitions": sorted(tp.partition for tp in partitions)}))

    def run(self) -> None:
        self.emit("invoke", "join")
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.emit("ok", "join")
        while not self.stopping.is_set():
            messages = [m for m in self.consumer.consume(self.rng.randint(1, self.max_poll), 0.5) if m.error() is None]
            self.flush_events()
            if not messages:
                continue
            self.emit("invoke", "poll")
            self.emit("ok", "poll", {"records": [[m.partition(), m.offset(), m.value().decode()] for m in messages]})
            nexts: dict[int, int] = {}
            for m in messages:
                nexts[m.partition()] = m.offset() + 1
            self.commit(nexts)
            time.sleep(self.rng.uniform(0, 0.05))
        self.emit("invoke", "leave")
        self.consumer.close()
        self.emit("ok", "leave")
        self.flush_events()

    def commit(self, offsets: dict[int, int]) -> None:
        value = {"offsets": {str(p): o for p, o in offsets.items()}}
        self.emit("invoke", "commit", value)
        try:
            answer = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as e:
            error: KafkaError = e.args[0]
            self.emit("fail" if error.code() in REFUSED else "info", "commit", {**value, "error": str(error)})
            return
        errors = [tp.error for tp in answer or [] if tp.error is not None]
        if not errors:
            self.emit("ok", "commit", value)
        else:
            self.emit("fail" if all(e.code() in REFUSED for e in errors) else "info", "commit", {**value, "error": str(errors[0])})


def main() -> None:
    member = Member(json.loads(sys.argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: member.stopping.set())
    member.run()


if __name__ == "__main__":
    main()
