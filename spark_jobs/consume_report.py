"""Batch job: read a range of a topic and print a summary of what it holds.

    python -m spark_jobs.consume_report --bootstrap 127.0.0.1:9092 [--topic user_click_counts]
        [--starting-offsets earliest] [--ending-offsets latest] [--show 10]

Per partition: records, first and last offset, first and last timestamp; then the distinct
keys and the first rows with key and value as text.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.job_args import COUNTS_TOPIC, kbroker_reader, parser
from spark_jobs.session import local_session


def partition_summary(records: DataFrame) -> DataFrame:
    return (
        records.groupBy("topic", "partition")
        .agg(
            F.count("*").alias("records"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
            F.countDistinct("key").alias("distinct_keys"),
        )
        .orderBy("topic", "partition")
    )


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--topic", default=COUNTS_TOPIC)
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument("--show", type=int, default=10, help="rows to print as text (default %(default)s)")
    args = p.parse_args(argv)
    spark = local_session("consume_report")
    try:
        records = kbroker_reader(
            spark.read, args.bootstrap, subscribe=args.topic, startingOffsets=args.starting_offsets, endingOffsets=args.ending_offsets
        ).load().cache()
        total = records.count()
        print(f"consume_report: {total} records in {args.topic} [{args.starting_offsets} .. {args.ending_offsets})")
        partition_summary(records).show(truncate=False)
        if args.show:
            records.orderBy("partition", "offset").select(
                "partition", "offset", F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value")
            ).show(args.show, truncate=False)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
