"""Apache Kafka's own Java client on transaction version 2 (KIP-890 part 2), against kbroker.

Kafka's TransactionalMessageCopier (kafka-tools, the consume-transform-produce loop of Kafka's
system tests) copies a partition into another topic in transactions that commit the consumed
offsets with them, aborting some at random. A Kafka 4 client sees transaction.version 2
finalized and speaks it: Produce v12 and TxnOffsetCommit v5 with no AddPartitionsToTxn or
AddOffsetsToTxn, and an epoch bump at every EndTxn v5. The jars come from Maven Central on
first use (the ``kafka_lib`` fixture).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import Producer
from kio.schema.describe_producers.v0 import request as describe_producers_v0

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_transactions_kip890 import offsets
from tests.integration.txn_helpers import values_of
from tests.integration.wire import request

RECORDS = 1000
PER_TRANSACTION = 50
COPY_TIMEOUT_S = 240


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(records):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def copier_command(lib: Path, bootstrap: str, source: str, sink: str, group: str, transactional_id: str, records: int) -> list[str]:
    """Kafka's TransactionalMessageCopier over partition 0 of ``source``, aborting at random; it
    prints a JSON line with its progress after each transaction."""
    return [
        "java", *TOOL_JVM_OPTS, "-cp", f"{lib}/*", "org.apache.kafka.tools.TransactionalMessageCopier",
        "--broker-list", bootstrap, "--input-topic", source, "--input-partition", "0", "--output-topic", sink,
        "--consumer-group", group, "--transactional-id", transactional_id, "--transaction-size", str(PER_TRANSACTION),
        "--max-messages", str(records), "--enable-random-aborts", "--use-group-metadata",
    ]


def copy_transactionally(lib: Path, bootstrap: str, source: str, sink: str, group: str, transactional_id: str, records: int) -> None:
    copier = subprocess.run(copier_command(lib, bootstrap, source, sink, group, transactional_id, records), capture_output=True, text=True, timeout=COPY_TIMEOUT_S)
    assert copier.returncode == 0, copier.stdout[-3000:] + copier.stderr[-3000:]


def sink_producer_epoch(bootstrap: str, sink: str, partition: int = 0) -> int:
    described = request(bootstrap, describe_producers_v0.DescribeProducersRequest(topics=(describe_producers_v0.TopicRequest(name=sink, partition_indexes=(partition,)),)))
    [state] = [s for t in described.topics for p in t.partitions for s in p.active_producers]
    return state.producer_epoch


def test_the_java_client_copies_exactly_once_on_transaction_version_2(module_broker: BrokerProcess, kafka_lib: Path) -> None:
    bs = module_broker.bootstrap
    source, sink, group, txn = unique_topic("java-src"), unique_topic("java-sink"), unique_topic("java-g"), unique_topic("java-tx")
    create_topic(bs, source)
    create_topic(bs, sink)
    fill(bs, source, RECORDS)
    copy_transactionally(kafka_lib, bs, source, sink, group, txn, RECORDS)

    # Exactly once for read_committed readers, aborted copies included in the log but not read.
    assert sorted(values_of(bs, sink, "read_committed", RECORDS), key=lambda v: int(v[1:])) == [f"v{i}" for i in range(RECORDS)]
    last_stable, log_end = offsets(bs, sink)
    assert last_stable == log_end
    # Transaction version 2: every transaction's end bumped the epoch its markers carry, so the
    # sink's producer is at least one epoch on per transaction (a version 1 client stays at 0).
    assert sink_producer_epoch(bs, sink) >= RECORDS // PER_TRANSACTION
