"""Thousands of partitions on one node: one fd each, data served, and a restart loads them all."""

from __future__ import annotations

import os
import time

from confluent_kafka import Producer

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import consume, create_topic

PARTITIONS = 1000


def open_fds(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def test_a_partition_holds_one_fd_and_its_indexes_survive_a_restart(broker: BrokerProcess, topic_name: str) -> None:
    idle = open_fds(broker)
    create_topic(broker.bootstrap, topic_name, PARTITIONS, timeout_s=60)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    # 40 KB per partition crosses index.interval.bytes (4096), so every index gets entries.
    value = b"v" * 1000
    for partition in range(PARTITIONS):
        for _ in range(40):
            producer.produce(topic_name, value, partition=partition)
        producer.poll(0)
    assert producer.flush(120) == 0
    # Kafka's LazyIndex: index files are opened when used, not held. Indexes used to be
    # memory-mapped, and each map kept a dup() of its fd: 3 fds a partition.
    assert open_fds(broker) - idle < PARTITIONS * 1.2

    broker.stop()
    broker.start()
    deadline = time.monotonic() + 60
    last = PARTITIONS - 1
    got = []
    while not got and time.monotonic() < deadline:
        got = consume(broker.bootstrap, topic_name, last, 20, 20, timeout_s=10)
    assert [m.offset() for m in got] == list(range(20, 40))
    assert all(m.value() == value for m in got)
