"""Transactions with aiokafka's transactional producer against a real broker process."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from tests.integration.conftest import StartBroker
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.txn_helpers import check_ctp_output, check_open_transaction_aborted, ctp_setup, start_txn_broker, values_of

RUN_TIMEOUT_S = 90


async def started(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5)
    await p.start()
    return p


def test_consume_transform_produce_with_aborts(broker_factory: StartBroker) -> None:
    total = 20
    bs, source, sink, group = ctp_setup(broker_factory, total)
    tp = TopicPartition(source, 0)
    aborted: list[str] = []

    async def run() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False, isolation_level="read_committed", auto_offset_reset="earliest")
        c.assign([tp])
        await c.start()
        p = await started(bs, unique_topic("aio-txn"))
        try:
            done, txn_number = 0, 0
            while done < total:
                msgs = (await c.getmany(tp, timeout_ms=1000, max_records=4)).get(tp, [])
                if not msgs:
                    continue
                outputs = [f"out-{m.value.decode()}" for m in msgs]
                await p.begin_transaction()
                for value in outputs:
                    await p.send_and_wait(sink, value=value.encode(), partition=0)
                await p.send_offsets_to_transaction({tp: msgs[-1].offset + 1}, group)
                if txn_number % 3 == 2:
                    await p.abort_transaction()
                    aborted.extend(outputs)
                    committed = await c.committed(tp) or 0
                    assert committed == done
                    c.seek(tp, committed)
                else:
                    await p.commit_transaction()
                    done += len(msgs)
                    assert await c.committed(tp) == done
                txn_number += 1
        finally:
            await c.stop()
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), RUN_TIMEOUT_S))
    check_ctp_output(bs, sink, total, aborted)


def test_second_producer_fences_the_first(broker_factory: StartBroker) -> None:
    bs = start_txn_broker(broker_factory).bootstrap
    topic, txn_id = unique_topic("aio-fence"), unique_topic("aio-fence-txn")
    create_topic(bs, topic)

    async def run() -> None:
        first = await started(bs, txn_id)
        second = None
        try:
            await first.begin_transaction()
            await first.send_and_wait(topic, value=b"zombie", partition=0)
            second = await started(bs, txn_id)
            async with second.transaction():
                await second.send_and_wait(topic, value=b"winner", partition=0)
            with pytest.raises(KafkaError):
                await first.send_and_wait(topic, value=b"late", partition=0)
                await first.commit_transaction()
        finally:
            await first.stop()
            if second is not None:
                await second.stop()

    asyncio.run(asyncio.wait_for(run(), RUN_TIMEOUT_S))
    assert values_of(bs, topic, "read_committed", 1) == ["winner"]


def test_transaction_past_its_timeout_is_aborted(broker_factory: StartBroker) -> None:
    broker = start_txn_broker(broker_factory)
    topic = unique_topic("aio-timeout")
    create_topic(broker.bootstrap, topic)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique_topic("aio-abandoned"), transaction_timeout_ms=1500)
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic, value=b"never-committed", partition=0)
            await asyncio.get_running_loop().run_in_executor(None, check_open_transaction_aborted, broker, topic)
            with pytest.raises(KafkaError):
                await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), RUN_TIMEOUT_S))
