"""Batch job: a generated click stream (user_id key, JSON value) written to `user_clicks`.

    python -m spark_jobs.produce_events --bootstrap 127.0.0.1:9092 [--events 10000 --users 20]

Event i is user `user-{(i * 7) % users:03d}` at `start + i * spacing_ms` on one of five pages:
deterministic, so the windowed counts of stream_counts can be checked by hand.
"""

from __future__ import annotations

import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.job_args import CLICKS_TOPIC, ensure_topic, parser
from spark_jobs.session import local_session

PAGES = ["home", "search", "product", "cart", "checkout"]


def click_events(spark: SparkSession, events: int, users: int, start_ms: int, spacing_ms: int) -> DataFrame:
    """Columns user_id, page, event_time (timestamp): the rows the job writes, as a DataFrame."""
    i = F.col("id")
    return spark.range(events).select(
        F.format_string("user-%03d", (i * 7) % users).alias("user_id"),
        F.element_at(F.array(*[F.lit(p) for p in PAGES]), (i % len(PAGES) + 1).cast("int")).alias("page"),
        F.timestamp_millis(F.lit(start_ms) + i * spacing_ms).alias("event_time"),
    )


def as_records(events: DataFrame) -> DataFrame:
    """key = user_id, value = the event as JSON: what the kbroker sink takes."""
    return events.select(
        F.col("user_id").alias("key"),
        F.to_json(F.struct(F.col("user_id"), F.col("page"), F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("event_time"))).alias("value"),
    )


def write_events(events: DataFrame, bootstrap: str, topic: str) -> None:
    as_records(events).write.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode("append").save()


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--topic", default=CLICKS_TOPIC)
    p.add_argument("--partitions", type=int, default=3, help="when the topic is created (default %(default)s)")
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--start-ms", type=int, default=None, help="time of the first event (default: now, to the minute)")
    p.add_argument("--spacing-ms", type=int, default=100, help="event time between two events (default %(default)s)")
    args = p.parse_args(argv)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() // 60 * 60_000)
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    spark = local_session("produce_events")
    try:
        write_events(click_events(spark, args.events, args.users, start_ms, args.spacing_ms), args.bootstrap, args.topic)
        print(f"produce_events: wrote {args.events} click events of {args.users} users to {args.topic} (first event at {start_ms} ms)")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
