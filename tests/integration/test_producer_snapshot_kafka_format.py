"""Producer state snapshots a kbroker broker wrote are read by Apache Kafka's own DumpLogSegments."""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from storage.producer_state_snapshot import decode_snapshot
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.txn_helpers import API_TIMEOUT_S, start_txn_broker, txn_producer


def produce_one_batch_each(producer: Producer, topic: str, values: list[bytes]) -> None:
    for value in values:
        producer.produce(topic, value=value, partition=0)
        assert producer.flush(API_TIMEOUT_S) == 0


def test_kafkas_dump_log_segments_prints_the_producers_of_a_kbroker_snapshot(broker_factory: StartBroker, kafka_lib: Path) -> None:
    broker: BrokerProcess = start_txn_broker(broker_factory)
    topic = unique_topic("snap")
    create_topic(broker.bootstrap, topic)
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    produce_one_batch_each(idempotent, topic, [b"i%d" % i for i in range(7)])  # offsets 0-6
    transactional = txn_producer(broker.bootstrap, unique_topic("snap-txn"), linger_ms=0)
    transactional.begin_transaction()
    produce_one_batch_each(transactional, topic, [b"t0", b"t1", b"t2"])  # offsets 7-9
    transactional.commit_transaction(API_TIMEOUT_S)  # its marker at 10
    transactional.begin_transaction()
    produce_one_batch_each(transactional, topic, [b"open"])  # offset 11, left open
    broker.stop()  # a clean shutdown snapshots every partition at its log end

    snapshot = broker.data_dir / f"{topic}-0" / f"{12:020d}.snapshot"
    entries = {pid: (epoch, coordinator_epoch, txn_first, batches) for pid, epoch, coordinator_epoch, txn_first, _, batches in decode_snapshot(snapshot.read_bytes())}
    assert len(entries) == 2
    # kbroker's trailer keeps the idempotent producer's last five batches for duplicate detection.
    [idempotent_pid] = [pid for pid, (_, _, txn_first, _) in entries.items() if txn_first == -1]
    [txn_pid] = [pid for pid in entries if pid != idempotent_pid]
    assert [(seq, offset) for seq, offset, _, _ in entries[idempotent_pid][3]] == [(2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]
    assert entries[txn_pid][2] == 11

    dump = subprocess.run(
        ["java", *TOOL_JVM_OPTS, "-XX:TieredStopAtLevel=1", "-cp", f"{kafka_lib}/*", "org.apache.kafka.tools.DumpLogSegments", "--files", str(snapshot)],
        capture_output=True, text=True, timeout=120,
    )
    assert dump.returncode == 0, dump.stderr
    lines = {line.split()[1]: line for line in dump.stdout.splitlines() if line.startswith("producerId: ")}
    assert "corrupt" not in dump.stdout.lower() and set(lines) == {str(idempotent_pid), str(txn_pid)}, dump.stdout
    idempotent_epoch = entries[idempotent_pid][0]
    assert f"producerEpoch: {idempotent_epoch} coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty" in lines[str(idempotent_pid)]
    assert "firstSequence: 6 lastSequence: 6 lastOffset: 6 offsetDelta: 0" in lines[str(idempotent_pid)]
    txn_epoch, txn_coordinator_epoch = entries[txn_pid][:2]
    assert f"producerEpoch: {txn_epoch} coordinatorEpoch: {txn_coordinator_epoch} currentTxnFirstOffset: OptionalLong[11]" in lines[str(txn_pid)]
    assert "lastSequence: 3 lastOffset: 11 offsetDelta: 0" in lines[str(txn_pid)]
