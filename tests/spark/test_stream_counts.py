"""stream_counts end to end: produce_events' click stream in, final windowed counts out (topic and Parquet)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.produce_events import click_events, write_events
from spark_jobs.stream_counts import start_queries
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic

EVENTS, USERS, SPACING_MS = 600, 5, 500
START_MS = 1_700_000_040_000  # on a minute boundary
WINDOW_MS, WATERMARK_MS = 60_000, 30_000


def expected_final_counts() -> Counter[tuple[str, int]]:
    """(user, window start) -> clicks, for the windows the watermark closed (append mode emits only those)."""
    times = [START_MS + i * SPACING_MS for i in range(EVENTS)]
    watermark = max(times) - WATERMARK_MS
    counts: Counter[tuple[str, int]] = Counter()
    for i, t in enumerate(times):
        start = t - t % WINDOW_MS
        if start + WINDOW_MS <= watermark:
            counts[(f"user-{(i * 7) % USERS:03d}", start)] += 1
    return counts


def test_stream_counts_gives_the_right_counts(spark: SparkSession, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    clicks_topic, counts_topic = unique_topic("clicks"), unique_topic("click-counts")
    create_topic(spark_broker.bootstrap, clicks_topic, partitions=2)
    create_topic(spark_broker.bootstrap, counts_topic, partitions=1)
    write_events(click_events(spark, EVENTS, USERS, START_MS, SPACING_MS), spark_broker.bootstrap, clicks_topic)

    clicks = (
        spark.readStream.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", clicks_topic).option("startingOffsets", "earliest").load()
    )
    queries = start_queries(clicks, spark_broker.bootstrap, counts_topic, tmp_path, "1 minute", "30 seconds", processing_time=None)
    for q in queries:
        assert q.awaitTermination(180), "stream_counts did not finish"
        assert q.exception() is None

    expected = expected_final_counts()
    assert len(expected) == 4 * USERS  # windows 0-3 closed, window 4 still open
    parquet = spark.read.parquet(str(tmp_path / "counts")).select("user_id", F.unix_millis("window_start").alias("start"), "clicks").collect()
    assert sorted((r.user_id, r.start, r.clicks) for r in parquet) == sorted((u, s, n) for (u, s), n in expected.items())

    topic = (
        spark.read.format("kbroker").option("kafka.bootstrap.servers", spark_broker.bootstrap).option("subscribe", counts_topic).load()
        .select(F.col("key").cast("string").alias("key"), F.from_json(F.col("value").cast("string"), "user_id string, window_start timestamp, clicks long").alias("v"))
        .select("key", "v.user_id", F.unix_millis("v.window_start").alias("start"), "v.clicks")
        .collect()
    )
    assert all(r.key == r.user_id for r in topic)
    assert sorted((r.user_id, r.start, r.clicks) for r in topic) == sorted((u, s, n) for (u, s), n in expected.items())
