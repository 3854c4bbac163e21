"""Structured Streaming job: clicks per user per event-time window, with a watermark.

    python -m spark_jobs.stream_counts --bootstrap 127.0.0.1:9092 [--output ./spark-output]

Reads `user_clicks` (JSON values from produce_events), counts clicks per user in tumbling
windows, and writes each window once it is final (append mode: the watermark has passed its
end) to the topic `user_click_counts` (key user_id, JSON value) and to Parquet files. By
default it processes what the topic holds and stops (Trigger.AvailableNow); `--keep-running`
polls every `--trigger` until interrupted. A window closes only when a later event moves the
watermark past its end, so the newest windows wait for more events.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from spark_jobs.job_args import CLICKS_TOPIC, COUNTS_TOPIC, ensure_topic, kbroker_reader, parser
from spark_jobs.session import local_session

EVENT_SCHEMA = "user_id string, page string, event_time timestamp"


def windowed_counts(clicks: DataFrame, window: str, watermark: str) -> DataFrame:
    """user_id, window_start, window_end, clicks from the kbroker source's rows."""
    events = clicks.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    return (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window), "user_id")
        .count()
        .select(
            "user_id",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.col("count").alias("clicks"),
        )
    )


def as_records(counts: DataFrame) -> DataFrame:
    return counts.select(F.col("user_id").alias("key"), F.to_json(F.struct(*counts.columns)).alias("value"))


def start_queries(clicks: DataFrame, bootstrap: str, counts_topic: str, output: Path, window: str, watermark: str, processing_time: str | None) -> list[StreamingQuery]:
    """Two queries on the same counts, each with its own checkpoint: the topic, and Parquet.

    With no `processing_time` they run as Trigger.AvailableNow: catch up, then stop.
    """
    counts = windowed_counts(clicks, window, watermark)
    writers = [
        as_records(counts).writeStream.format("kbroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", counts_topic)
        .option("checkpointLocation", str(output / "checkpoints" / "kafka")),
        counts.writeStream.format("parquet")
        .option("path", str(output / "counts"))
        .option("checkpointLocation", str(output / "checkpoints" / "parquet")),
    ]
    return [
        (w.trigger(processingTime=processing_time) if processing_time else w.trigger(availableNow=True)).outputMode("append").start()
        for w in writers
    ]


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--source-topic", default=CLICKS_TOPIC)
    p.add_argument("--counts-topic", default=COUNTS_TOPIC)
    p.add_argument("--output", default="spark-output", help="folder for the Parquet files and the checkpoints")
    p.add_argument("--window", default="1 minute")
    p.add_argument("--watermark", default="30 seconds")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-offsets-per-trigger", type=int, default=5_000)
    p.add_argument("--keep-running", action="store_true", help="poll for new clicks instead of stopping when caught up")
    p.add_argument("--trigger", default="5 seconds", help="micro-batch interval with --keep-running")
    args = p.parse_args(argv)
    out = Path(args.output).resolve()
    ensure_topic(args.bootstrap, args.counts_topic, 1)
    spark = local_session("stream_counts")
    try:
        clicks = kbroker_reader(
            spark.readStream, args.bootstrap, subscribe=args.source_topic,
            startingOffsets=args.starting_offsets, maxOffsetsPerTrigger=str(args.max_offsets_per_trigger),
        ).load()
        processing_time = args.trigger if args.keep_running else None
        for q in start_queries(clicks, args.bootstrap, args.counts_topic, out, args.window, args.watermark, processing_time):
            q.awaitTermination()
        written = spark.read.parquet(str(out / "counts")).count() if (out / "counts").exists() else 0
        print(f"stream_counts: {written} final (user, window) counts in {out / 'counts'} and topic {args.counts_topic}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
