"""The `kbroker` PySpark data source: Spark's Kafka connector, as a Python data source.

    spark.dataSource.register(KBrokerDataSource)
    spark.readStream.format("kbroker").option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "clicks").load()

Readers and writers are pickled to Spark's executors: they hold options only, and make their
Kafka clients where they run.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_jobs.kafka_client import ConfirmedProducer, OffsetReader, read_range
from spark_jobs.offsets import OffsetMap, OffsetRange, from_json, plan_ranges, rate_limit, resolve, to_json
from spark_jobs.options import DEFAULT_GROUP_ID_PREFIX, SinkOptions, SourceOptions, sink_options, source_options
from spark_jobs.records import arrow_schema, check_sink_columns, sink_rows, source_schema, to_arrow

log = logging.getLogger("spark_jobs.kbroker")


class KBrokerDataSource(DataSource):
    """format("kbroker"): batch and streaming reads and writes, options as in Spark's Kafka connector."""

    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self) -> StructType:
        # Spark calls this in load(): bad read options fail there, before any query starts.
        options = source_options(self.options, streaming=None)
        return source_schema(options.include_headers)

    def reader(self, schema: StructType) -> "KBrokerBatchReader":
        return KBrokerBatchReader(source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> "KBrokerStreamReader":
        return KBrokerStreamReader(source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> "KBrokerBatchWriter":
        return KBrokerBatchWriter(_checked_sink(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> "KBrokerStreamWriter":
        return KBrokerStreamWriter(_checked_sink(self.options, schema))


def _checked_sink(raw: Mapping[str, str], schema: StructType) -> SinkOptions:
    options = sink_options(raw)
    check_sink_columns({f.name: f.dataType.simpleString() for f in schema.fields}, options.topic)
    return options


def _group_id(options: SourceOptions) -> str:
    """Spark's connector names a fresh group per query; it is never joined nor committed to."""
    return dict(options.client_config).get("group.id", f"{DEFAULT_GROUP_ID_PREFIX}-{uuid.uuid4()}")


def _read(options: SourceOptions, rng: OffsetRange, group_id: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for chunk in read_range(options, rng, group_id):
        yield to_arrow(chunk, rng.topic, rng.partition, schema)


def _input_partitions(ranges: list[OffsetRange], losses: list[str]) -> list[InputPartition]:
    for loss in losses:
        log.warning("kbroker source: %s", loss)
    return [InputPartition(rng) for rng in ranges]


class KBrokerBatchReader(DataSourceReader):
    """Batch read: startingOffsets to endingOffsets, resolved when Spark plans the query."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._arrow_schema = arrow_schema(schema)
        self._group_id = _group_id(options)

    def partitions(self) -> Sequence[InputPartition]:
        offsets = OffsetReader(self._options)
        parts = offsets.partitions()
        earliest, latest = offsets.earliest(parts), offsets.latest(parts)
        start = resolve(self._options.starting, earliest, latest, "startingOffsets")
        end = resolve(self._options.ending, earliest, latest, "endingOffsets")
        return _input_partitions(*plan_ranges(start, end, {}, self._options.fail_on_data_loss))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._options, partition.value, self._group_id, self._arrow_schema)


class KBrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of per-partition offset ranges; the offsets live in Spark's checkpoint.

    One input partition per Kafka partition with new records. Partitions that appear while
    the query runs are read from their earliest offset.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._arrow_schema = arrow_schema(schema)
        self._group_id = _group_id(options)
        self._offsets: OffsetReader | None = None
        # Trigger.AvailableNow: the latest offsets when the query started, never passed.
        self._target: OffsetMap | None = None

    def __getstate__(self) -> dict[str, object]:
        # The driver's admin client stays on the driver.
        return {**self.__dict__, "_offsets": None}

    @property
    def _client(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self._options)
        return self._offsets

    def initialOffset(self) -> dict:
        parts = self._client.partitions()
        earliest, latest = self._client.earliest(parts), self._client.latest(parts)
        return to_json(resolve(self._options.starting, earliest, latest, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._client.latest(self._client.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        until = dict(self._target) if self._target is not None else self._client.latest(self._client.partitions())
        if isinstance(limit, ReadMaxRows):
            begin = from_json(start)
            new = [tp for tp in until if tp not in begin]
            until = rate_limit(limit.max_rows, begin, until, self._client.earliest(new))
        return to_json(until)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        ranges, losses = plan_ranges(begin, until, self._client.earliest(new), self._options.fail_on_data_loss)
        return _input_partitions(ranges, losses)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._options, partition.value, self._group_id, self._arrow_schema)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets are Spark's to keep, and no consumer group is involved."""


@dataclass
class KBrokerCommitMessage(WriterCommitMessage):
    records: int


def _produce_confirmed(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> KBrokerCommitMessage:
    """Every row of this task produced and acknowledged (or the task fails, and the batch with it)."""
    producer = ConfirmedProducer(options)
    for batch in batches:
        for row in sink_rows(batch, options.topic):
            producer.send(*row)
    return KBrokerCommitMessage(producer.confirm())


class KBrokerBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KBrokerCommitMessage:
        return _produce_confirmed(self._options, iterator)


class KBrokerStreamWriter(DataSourceStreamArrowWriter):
    """A micro-batch commits only after every task's records were acknowledged by the broker."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KBrokerCommitMessage:
        return _produce_confirmed(self._options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delivery was confirmed in each task: Kafka has no commit step for plain produces."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay in the topic (at-least-once, as with Spark's connector)."""
