"""What the example jobs share: `--bootstrap HOST:PORT` and creating the topics they use."""

from __future__ import annotations

import argparse
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrameReader
from pyspark.sql.streaming import DataStreamReader

CLICKS_TOPIC = "user_clicks"
COUNTS_TOPIC = "user_click_counts"
TOPIC_TIMEOUT_S = 30.0

Reader = TypeVar("Reader", DataFrameReader, DataStreamReader)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="kbroker's HOST:PORT (default %(default)s)")
    return p


def ensure_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create the topic unless it exists (brokers need not create topics on demand)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TOPIC_TIMEOUT_S)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def kbroker_reader(reader: Reader, bootstrap: str, **options: str) -> Reader:
    """spark.read or spark.readStream, set to format("kbroker") on this broker with these options."""
    return reader.format("kbroker").option("kafka.bootstrap.servers", bootstrap).options(**options)
