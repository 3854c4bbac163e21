"""Kafka records <-> Arrow: the rows the `kbroker` source yields and the rows its sink takes.

The source schema is Spark's Kafka connector's. Rows cross to Spark as Arrow record batches,
one per consumed chunk, so Spark does no per-row Python conversion.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from confluent_kafka import Message
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from spark_jobs.options import KBrokerOptionError

_SOURCE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS_FIELD = StructField("headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])))


def source_schema(include_headers: bool) -> StructType:
    return StructType(_SOURCE_FIELDS + [_HEADERS_FIELD] if include_headers else _SOURCE_FIELDS)


def arrow_schema(schema: StructType) -> pa.Schema:
    """What Spark checks the batches of a Python source against (its own mapping, UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def to_arrow(chunk: Sequence[Message], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One partition's consecutive records as a record batch of `schema` (with or without headers).

    librdkafka numbers timestamp types 0 none, 1 CreateTime, 2 LogAppendTime; Spark shows
    Java's TimestampType ids: -1, 0, 1.
    """
    n = len(chunk)
    keys: list[bytes | None] = [None] * n
    values: list[bytes | None] = [None] * n
    offsets: list[int | None] = [None] * n
    stamps = [0] * n
    kinds = [0] * n
    for i, m in enumerate(chunk):
        keys[i] = m.key()
        values[i] = m.value()
        offsets[i] = m.offset()
        kind, stamps[i] = m.timestamp()
        kinds[i] = kind - 1
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(schema.field("timestamp").type),
        pa.array(kinds, pa.int32()),
    ]
    if "headers" in schema.names:
        # As Spark's connector: null, not an empty array, for a record without headers.
        headers = [[{"key": h[0], "value": h[1]} for h in hs] if (hs := m.headers()) else None for m in chunk]
        columns.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


SinkRow = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]] | None]

_SINK_COLUMNS = {
    "topic": ("string",),
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
}


def check_sink_columns(columns: dict[str, str], default_topic: str | None) -> None:
    """Spark's KafkaWriter.validateQuery: column names and Spark SQL type names (simpleString)."""
    if "value" not in columns:
        raise KBrokerOptionError("Required attribute 'value' not found: the DataFrame to write needs a value column (string or binary)")
    if default_topic is None and "topic" not in columns:
        raise KBrokerOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
        )
    for name, allowed in _SINK_COLUMNS.items():
        if name in columns and columns[name] not in allowed:
            raise KBrokerOptionError(f"{name} attribute type must be {' or '.join(allowed)}, got {columns[name]}")


def sink_rows(batch: pa.RecordBatch, default_topic: str | None) -> Iterator[SinkRow]:
    """(topic, value, key, partition, headers) per row; the topic option wins over a topic column."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> list[object]:
        return batch.column(names.index(name)).to_pylist() if name in names else [None] * n

    values, keys, partitions, headers = column("value"), column("key"), column("partition"), column("headers")
    topics = [default_topic] * n if default_topic is not None else column("topic")
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise KBrokerOptionError("Null topic present in the data. Use the topic option for setting a default topic.")
        hdrs = headers[i]
        yield (
            str(topic),
            _as_bytes(values[i]),
            _as_bytes(keys[i]),
            partitions[i],  # type: ignore[misc]
            [(h["key"], h["value"]) for h in hdrs] if hdrs else None,  # type: ignore[attr-defined, index]
        )


def _as_bytes(v: object) -> bytes | None:
    return v.encode() if isinstance(v, str) else v  # type: ignore[return-value]
