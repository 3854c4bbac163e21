"""aiokafka against a real broker: admin, produce, consume, offsets.

Producers run with enable_idempotence=False: idempotence (InitProducerId) is a later issue.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import BIG_TOPIC_CONFIG, ONE_MB, Rec, sample_records

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
TEST_TIMEOUT_S = 60

T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro_fn(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


async def create(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()


async def send_all(bootstrap: str, topic: str, records: list[Rec], partition: int = 0, **extra: Any) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all", **extra)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=r.key, value=r.value, headers=r.headers, timestamp_ms=r.timestamp, partition=partition)
            for r in records
        ]
        return [(await f).offset for f in futures]
    finally:
        await producer.stop()


async def read(consumer: AIOKafkaConsumer, count: int, timeout_s: float = 20) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.2) + count + 1):
        if len(out) >= count or time.monotonic() > deadline:
            break
        for msgs in (await consumer.getmany(timeout_ms=200)).values():
            out.extend(msgs)
    return sorted(out, key=lambda m: (m.partition, m.offset))


def new_consumer(bootstrap: str, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **extra)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_values_headers_timestamps(module_broker: BrokerProcess, topic_name: str, codec: str | None) -> None:
    b = module_broker.bootstrap
    records = sample_records(200, int(time.time() * 1000) - 60_000)

    async def scenario() -> None:
        await create(b, topic_name)
        assert await send_all(b, topic_name, records, compression_type=codec, linger_ms=5) == list(range(200))
        consumer = new_consumer(b)
        await consumer.start()
        try:
            tp = TopicPartition(topic_name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = await read(consumer, len(records))
        finally:
            await consumer.stop()
        assert [m.offset for m in got] == list(range(len(records)))
        for msg, r in zip(got, records):
            assert (msg.key, msg.value, list(msg.headers), msg.timestamp, msg.timestamp_type) == (r.key, r.value, r.headers, r.timestamp, 0)

    run(scenario)


def test_one_megabyte_record(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    big = os.urandom(ONE_MB)
    now = int(time.time() * 1000)

    async def scenario() -> None:
        await create(b, topic_name, configs=BIG_TOPIC_CONFIG)
        assert await send_all(b, topic_name, [Rec(b"big", big, [], now), Rec(None, b"after", [], now)], max_request_size=2_000_000) == [0, 1]
        consumer = new_consumer(b)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic_name, 0)])
            await consumer.seek_to_beginning()
            got = await read(consumer, 2)
        finally:
            await consumer.stop()
        assert [(m.offset, m.key) for m in got] == [(0, b"big"), (1, None)]
        assert got[0].value == big and got[1].value == b"after"

    run(scenario)


def test_hundred_partitions(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap

    async def scenario() -> None:
        await create(b, topic_name, 100)
        producer = AIOKafkaProducer(bootstrap_servers=b, enable_idempotence=False, linger_ms=20)
        await producer.start()
        try:
            futures = [await producer.send(topic_name, value=f"{p}-{i}".encode(), partition=p) for p in range(100) for i in range(3)]
            assert sorted({(await f).offset for f in futures}) == [0, 1, 2]
        finally:
            await producer.stop()
        consumer = new_consumer(b)
        await consumer.start()
        try:
            assert topic_name in await consumer.topics()
            consumer.assign([TopicPartition(topic_name, p) for p in range(100)])
            await consumer.seek_to_beginning()
            got = await read(consumer, 300, timeout_s=40)
            assert consumer.partitions_for_topic(topic_name) == set(range(100))
        finally:
            await consumer.stop()
        assert [(m.partition, m.offset, m.value) for m in got] == [(p, i, f"{p}-{i}".encode()) for p in range(100) for i in range(3)]

    run(scenario)


def test_offsets_for_times_beginning_end(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    base = int(time.time() * 1000) - 100_000

    async def scenario() -> None:
        await create(b, topic_name, 2)
        producer = AIOKafkaProducer(bootstrap_servers=b, enable_idempotence=False)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic_name, value=f"v{i}".encode(), timestamp_ms=base + 1000 * i, partition=0)
        finally:
            await producer.stop()
        consumer = new_consumer(b)
        await consumer.start()
        try:
            tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
            assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
            assert await consumer.end_offsets([tp0, tp1]) == {tp0: 20, tp1: 0}
            found = (await consumer.offsets_for_times({tp0: base + 7000}))[tp0]
            assert (found.offset, found.timestamp) == (7, base + 7000)
            assert (await consumer.offsets_for_times({tp0: base + 7001}))[tp0].offset == 8
            assert (await consumer.offsets_for_times({tp0: base + 100_000}))[tp0] is None
            assert (await consumer.offsets_for_times({tp1: base}))[tp1] is None
        finally:
            await consumer.stop()

    run(scenario)


def test_seek_and_replay_from_the_middle(module_broker: BrokerProcess, topic_name: str) -> None:
    b = module_broker.bootstrap
    records = sample_records(100, int(time.time() * 1000) - 10_000)

    async def scenario() -> None:
        await create(b, topic_name)
        await send_all(b, topic_name, records, max_batch_size=300)
        consumer = new_consumer(b)
        await consumer.start()
        try:
            tp = TopicPartition(topic_name, 0)
            consumer.assign([tp])
            consumer.seek(tp, 50)
            first = await consumer.getone()
            assert (first.offset, first.value) == (50, records[50].value)
            consumer.seek(tp, 13)
            replay = await read(consumer, 87)
        finally:
            await consumer.stop()
        assert [m.offset for m in replay] == list(range(13, 100))
        assert [m.value for m in replay] == [r.value for r in records[13:]]

    run(scenario)
