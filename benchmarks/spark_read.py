"""Rows per second of a Structured Streaming read through the `kbroker` PySpark source.

    python -m benchmarks.spark_read [--records 1000000] [--partitions 2] [--value-bytes 100] [--bootstrap HOST:PORT]

Produces the records with confluent-kafka (not timed), then times one query from start() to
its end: readStream.format("kbroker") from earliest, Trigger.AvailableNow, Spark's `noop`
sink, so the figure is the source (broker fetch, librdkafka, Arrow batches into Spark) and
not a sink. local[2] on this machine: two tasks read two partitions at once. Without
--bootstrap a kbroker node is started in a temporary folder and stopped afterwards.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import BrokerUnderTest


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000, "acks": 1})
    value = b"x" * value_bytes
    for i in range(records):
        key = b"%08d" % i
        for _ in range(10_000):
            try:
                producer.produce(topic, key=key, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("records still unacknowledged after 120 s")


def timed_read(bootstrap: str, topic: str, max_per_trigger: int | None) -> tuple[float, float, int, int]:
    """(seconds from start() to the end, seconds inside micro-batches, rows read, micro-batches)
    for one availableNow query into the noop sink. The difference is the query's start-up:
    Spark asks the source for its offsets and plans through short-lived Python workers."""
    from spark_jobs.session import local_session

    spark = local_session("spark_read benchmark")
    try:
        reader = spark.readStream.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).option("startingOffsets", "earliest")
        if max_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
        started = time.monotonic()
        query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
        query.awaitTermination()
        seconds = time.monotonic() - started
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        for p in progress:
            print(f"  micro-batch {p['batchId']}: {p['numInputRows']:,} rows, {p['durationMs']}", flush=True)
        in_batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        return seconds, in_batches, sum(p["numInputRows"] for p in progress), len(progress)
    finally:
        spark.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--bootstrap", default=None)
    args = p.parse_args()
    topic = f"spark-read-{time.time_ns()}"
    broker = None if args.bootstrap else BrokerUnderTest("kbroker")
    try:
        if broker is not None:
            broker.start()
        bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
        t0 = time.monotonic()
        produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        print(f"produced {args.records:,} records of {args.value_bytes} B to {args.partitions} partitions in {time.monotonic() - t0:.1f} s", flush=True)
        seconds, in_batches, rows, batches = timed_read(bootstrap, topic, args.max_offsets_per_trigger)
        print(
            f"streaming read: {rows:,} rows in {seconds:.1f} s from start() over {batches} micro-batch(es): "
            f"{rows / seconds:,.0f} rows/s; inside the micro-batches ({in_batches:.1f} s): {rows / in_batches:,.0f} rows/s"
        )
    finally:
        if broker is not None:
            broker.close()


if __name__ == "__main__":
    main()
