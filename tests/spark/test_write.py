"""The `kbroker` sink (batch write, read back with confluent-kafka) and batch reads between offsets."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import consumer, create_topic, poll_messages, unique_topic

ROWS = 2_000
PARTITIONS = 4


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the Java client's default partitioner for keyed records), unsigned 32-bit."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_matches_kafka() -> None:
    # Vectors from Kafka's UtilsTest.testMurmur2 (Java ints).
    for text, expected in [("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536), ("a-little-bit-longer-string", -1486304829)]:
        assert murmur2(text.encode()) - (1 << 32 if murmur2(text.encode()) >= 1 << 31 else 0) == expected


def test_batch_write_lands_on_java_partitions_and_reads_back(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    topic = unique_topic("spark-write")
    create_topic(spark_broker.bootstrap, topic, partitions=PARTITIONS)
    df = spark.range(ROWS).select(
        F.concat(F.lit("user-"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.array(F.struct(F.lit("idx").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))).alias("headers"),
    )
    df.write.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", topic).mode("append").save()

    c = consumer(spark_broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        messages = poll_messages(c, ROWS, timeout_s=60)
    finally:
        c.close()
    assert len(messages) == ROWS
    by_id = {int((m.key() or b"").decode().removeprefix("user-")): m for m in messages}
    assert sorted(by_id) == list(range(ROWS))
    for i, m in by_id.items():
        assert m.partition() == java_partition(f"user-{i}".encode(), PARTITIONS), i
        assert m.value() == f"value-{i}".encode()
        assert m.headers() == [("idx", str(i).encode())]

    # Batch read between offsets: partition 0 from 5 to 15, partition 1 from earliest to latest,
    # the partitions the JSON leaves out from earliest (the default) to latest.
    counts = {p: sum(1 for m in messages if m.partition() == p) for p in range(PARTITIONS)}
    assert counts[0] >= 15
    read = (
        spark.read.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("subscribe", topic)
        .option("startingOffsets", f'{{"{topic}": {{"0": 5, "1": -2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": 15, "1": -1}}}}')
        .option("includeHeaders", "true")
        .load()
    )
    rows = read.collect()
    got = sorted((r.partition, r.offset) for r in rows)
    expected = sorted([(0, o) for o in range(5, 15)] + [(p, o) for p in range(1, PARTITIONS) for o in range(counts[p])])
    assert got == expected
    for r in rows:
        i = int(r.key.decode().removeprefix("user-"))
        assert (r.topic, bytes(r.value), r.timestampType) == (topic, f"value-{i}".encode(), 0)
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("idx", str(i).encode())]


def test_write_errors_are_clear(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    writer = spark.range(3).selectExpr("cast(id as string) AS key")
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        writer.write.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", "x").mode("append").save()
    missing = unique_topic("spark-missing")
    rows = spark.range(3).selectExpr("cast(id as string) AS value")
    with pytest.raises(Exception, match=f"Topic '{missing}' does not exist"):
        rows.write.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", missing).mode("append").save()
    with pytest.raises(Exception, match="topic option required when no 'topic' attribute is present"):
        rows.write.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).mode("append").save()
