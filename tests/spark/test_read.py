"""The `kbroker` source in Structured Streaming: every record once, across micro-batches and restarts."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic, wait_for, watermarks

QUERY_TIMEOUT_S = 120
BASE_TS = 1_700_000_000_000
# Per record: partition, offset, key, value, timestamp (ms), timestampType.
Seen = tuple[int, int, bytes | None, bytes | None, int, int]


def produce(bootstrap: str, topic: str, first: int, count: int, partitions: int) -> list[Seen]:
    """Records first..first+count-1 (CreateTime BASE_TS + i) spread over the partitions; acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: list[Seen] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), msg.timestamp()[1], 0))

    for i in range(first, first + count):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        producer.produce(topic, key=key, value=f"value-{i}".encode(), partition=i % partitions, timestamp=BASE_TS + i, on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    assert len(acked) == count
    return acked


def kbroker_stream(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType")


def as_seen(df: DataFrame) -> list[Seen]:
    return [(r.partition, r.offset, r.key, r.value, r.ts, r.timestampType) for r in df.collect()]


def data_batches(query: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def reached(query: StreamingQuery, offsets: dict[str, dict[str, int]]) -> bool:
    """The query committed a micro-batch that ends at these source offsets."""
    progress = query.lastProgress
    if not progress:
        return False
    end = progress["sources"][0]["endOffset"]
    return (json.loads(end) if isinstance(end, str) else end) == offsets


def test_streaming_read_every_record_once(spark: SparkSession, spark_broker: BrokerProcess, checkpoint: Path) -> None:
    topic = unique_topic("spark-read")
    create_topic(spark_broker.bootstrap, topic, partitions=3)
    produced = produce(spark_broker.bootstrap, topic, 0, 10_000, partitions=3)
    name = topic.replace("-", "_")
    query = (
        kbroker_stream(spark, spark_broker.bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="4000")
        .writeStream.format("memory").queryName(name)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    assert query.exception() is None
    batches = data_batches(query)
    assert len(batches) >= 2 and sum(batches) == 10_000, batches
    seen = as_seen(spark.table(name))
    assert len(seen) == 10_000
    assert sorted(seen) == sorted(produced)


def test_restart_from_checkpoint_neither_skips_nor_repeats(spark: SparkSession, spark_broker: BrokerProcess, checkpoint: Path, tmp_path: Path) -> None:
    """Stop mid-stream and restart while records keep arriving (and a partition is added); every
    micro-batch lands in its own folder.

    A replayed batch overwrites its own folder (the idempotent-sink pattern), so a record seen
    twice can only come from two different batches planning overlapping offsets.
    """
    topic = unique_topic("spark-restart")
    create_topic(spark_broker.bootstrap, topic, partitions=2)
    out = tmp_path / "out"
    produced = produce(spark_broker.bootstrap, topic, 0, 2_000, partitions=2)

    def start() -> StreamingQuery:
        def write_batch(df: DataFrame, batch_id: int) -> None:
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        return (
            kbroker_stream(spark, spark_broker.bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="700")
            .writeStream.foreachBatch(write_batch).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds").start()
        )

    late: list[Seen] = []

    def keep_producing() -> None:
        for burst in range(40):
            late.extend(produce(spark_broker.bootstrap, topic, 10_000 + burst * 50, 50, partitions=2))
            time.sleep(0.1)

    first = start()
    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        assert wait_for(lambda: len(data_batches(first)) >= 2, timeout_s=QUERY_TIMEOUT_S), "first query made no progress"
    finally:
        first.stop()
    # While no query runs: a new partition, and records on all three (the new one is read from its start).
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(15)
    produced += produce(spark_broker.bootstrap, topic, 20_000, 600, partitions=3)
    second = start()
    try:
        producer.join(60)
        assert not producer.is_alive()
        log_ends = {topic: {str(p): watermarks(spark_broker.bootstrap, topic, p)[1] for p in range(3)}}
        assert wait_for(lambda: reached(second, log_ends), timeout_s=QUERY_TIMEOUT_S, interval_s=1.0), (second.lastProgress, log_ends)
    finally:
        second.stop()
    assert second.exception() is None
    seen = as_seen(spark.read.parquet(str(out)))
    assert sorted(seen) == sorted(produced + late)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "clicks"}, "Option 'kafka.bootstrap.servers' must be specified"),
        ({"kafka.bootstrap.servers": "127.0.0.1:9"}, "One of the following options must be specified for Kafka source: subscribe, subscribePattern, assign"),
        ({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "clicks", "startingOffsets": '{"clicks": {"0": 5'}, "Invalid JSON in option 'startingOffsets'"),
        ({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "a", "assign": '{"a": [0]}'}, "Only one of the following options"),
    ],
)
def test_bad_options_fail_at_load(spark: SparkSession, options: dict[str, str], message: str) -> None:
    for reader in (spark.read, spark.readStream):
        with pytest.raises(Exception, match=message):
            reader.format("kbroker").options(**options).load()


def test_records_gone_before_they_are_read_fail_or_are_skipped(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    """DeleteRecords moves the log start past offsets the query asks for: failOnDataLoss decides."""
    topic = unique_topic("spark-loss")
    create_topic(spark_broker.bootstrap, topic, partitions=1)
    produce(spark_broker.bootstrap, topic, 0, 20, partitions=1)
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(15)

    def read(fail_on_data_loss: str) -> list[int]:
        df = (
            spark.read.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("subscribe", topic)
            .option("startingOffsets", f'{{"{topic}": {{"0": 0}}}}').option("failOnDataLoss", fail_on_data_loss).load()
        )
        return sorted(r.offset for r in df.collect())

    with pytest.raises(Exception, match="failOnDataLoss"):
        read("true")
    assert read("false") == list(range(5, 20))
