"""Spark against three kbroker processes: a batch write and a Structured Streaming read of a topic
whose partitions are led by different nodes, bootstrapping from one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.integration.helpers import unique_topic

QUERY_TIMEOUT_S = 120
ROWS = 6000
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("spark-cluster"), combined=3, overrides={"auto.create.topics.enable": "false"})
    try:
        yield c.start()
    finally:
        c.close()


def test_spark_writes_and_streams_a_topic_spread_over_three_nodes(spark: SparkSession, cluster: KafkaCluster, checkpoint: Path) -> None:
    topic = unique_topic("spark3")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30, request_timeout=30)[topic].result(timeout=30)

    def leaders() -> set[int] | None:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        found = {p.leader for p in parts}
        return found if len(parts) == PARTITIONS and -1 not in found else None

    assert wait_until("leaders on every node", leaders, 30) == {1, 2, 3}

    # Written through one node, read through another: each needs the leaders on all three.
    df = spark.range(ROWS).select(
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("v-"), F.col("id").cast("string")).alias("value"),
    )
    df.write.format("kbroker").option("kafka.bootstrap.servers", cluster.nodes[1].bootstrap).option("topic", topic).mode("append").save()

    name = topic.replace("-", "_")
    query = (
        spark.readStream.format("kbroker").option("kafka.bootstrap.servers", cluster.nodes[3].bootstrap).option("subscribe", topic)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2500").load()
        .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
        .writeStream.format("memory").queryName(name)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    assert query.exception() is None
    rows = spark.table(name).collect()
    assert sorted(int(r.key.removeprefix("k-")) for r in rows) == list(range(ROWS))
    assert all(r.value == "v-" + r.key.removeprefix("k-") for r in rows)
    assert {r.partition for r in rows} == set(range(PARTITIONS))
