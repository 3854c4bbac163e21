"""Issue 36 M1: one node's data directory handed between Apache Kafka 4.4 and kbroker, both ways.

One combined broker+controller node, one ``server.properties`` (as benchmarks/apache_kafka.py writes
it for Kafka: node.id, log.dirs, listeners, a static controller.quorum.voters), one data directory
formatted by Kafka's StorageTool, owned in turn by

    Kafka (write A) -SIGKILL-> kbroker (verify A, write B) -SIGTERM-> Kafka (verify A+B, write C)
    -SIGTERM-> kbroker (verify A+B+C, write D) -SIGKILL-> Kafka (verify A+B+C+D)

so each broker reads a directory the other left after a crash and after a clean stop. Each owner
verifies everything written before it and adds its own: a topic with non-default configs
(describe-configs answers the same values), keyed records with headers and CreateTimes read back
at their exact offsets (a compacted topic's tombstones included), a group's committed offsets
(OffsetFetch, and a consumer of the group resuming there), an idempotent producer's state (raw
Produce requests with a fixed producer id: a retry of its last batch is answered as a duplicate
at its original offset and not appended, a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, the next
sequence is accepted), and transactions: committed ones read_committed, aborted ones filtered, and
one left open at every stop, which holds the new owner's last stable offset at its first offset
until a producer of the same transactional.id aborts it with InitProducerId. Both brokers must
give the same answers in the same spots: the expectations below are one list, checked on both.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kio.schema.describe_quorum.v2 import request as describe_quorum_v2
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5 import request as init_producer_id_v5
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.produce.v11 import request as produce_v11

from protocol.records import build_batch, iter_batches, iter_records
from tests.integration.helpers import poll_messages
from tests.integration.kafka_node_dir import KafkaNodeDir
from tests.integration.wire import request

API_TIMEOUT_S = 30
TXN_ID = "takeover-txn"
GROUP = "takeover-group"
PLAIN = "takeover-plain"  # three partitions, every owner appends to each
IDEMPOTENT = "takeover-idempotent"  # one partition, raw batches of the fixed producer id
TXN = "takeover-txn-topic"  # one partition, the transactions' records
# Non-default values of every kind the issue names; each owner creates a topic with them.
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "86400000",
    "max.message.bytes": "2000000",
    "min.insync.replicas": "1",
    "segment.ms": "3600000",
    "delete.retention.ms": "7200000",
}
CREATE_TIME = 1
READ_COMMITTED, READ_UNCOMMITTED = 1, 0
LATEST = -1
RETRIABLE_COMMIT = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass
class Ledger:
    """What the owners wrote so far: what every later owner must find."""

    records: dict[tuple[str, int], list[Rec]] = field(default_factory=dict)
    compacted_topics: list[str] = field(default_factory=list)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    # The fixed idempotent producer: its id and epoch, the last batch's sequence, offset and bytes.
    producer_id: int = -1
    producer_epoch: int = -1
    last_sequence: int = -1
    last_batch: bytes = b""
    last_offset: int = -1
    txn_committed: list[bytes] = field(default_factory=list)
    txn_aborted: list[bytes] = field(default_factory=list)
    # The transaction left open at the last stop: its producer (kept alive, never used again) and first offset.
    open_txn: Producer | None = None
    open_first_offset: int = -1
    open_values: list[bytes] = field(default_factory=list)
    # What each owner answered, to compare: (owner, check) -> answer.
    answers: dict[tuple[str, str], Any] = field(default_factory=dict)


# --- Talking to whichever broker owns the directory ------------------------------------------------


def admin(bs: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bs})


def produce_records(bs: str, topic: str, partition: int, recs: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]]) -> list[Rec]:
    """acks=all, one record at a time in order; each with its acknowledged offset."""
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0, "enable.idempotence": False, "max.in.flight": 1})
    offsets: list[int] = []

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for key, value, headers, ts in recs:
        producer.produce(topic, key=key, value=value, headers=list(headers), partition=partition, timestamp=ts, on_delivery=on_delivery)
    assert producer.flush(API_TIMEOUT_S) == 0
    return [Rec(o, k, v, h, ts) for o, (k, v, h, ts) in zip(offsets, recs, strict=True)]


def read(bs: str, topic: str, partition: int, count: int, isolation: str = "read_uncommitted") -> list[Rec]:
    """The partition's first ``count`` records from offset 0, as a consumer with ``isolation`` gets them."""
    c = Consumer({
        "bootstrap.servers": bs, "group.id": "takeover-reader", "enable.auto.commit": False, "isolation.level": isolation,
        "fetch.queue.backoff.ms": 0, "fetch.wait.max.ms": 100,
    })  # fmt: skip
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        msgs = poll_messages(c, count, API_TIMEOUT_S)
        out = []
        for m in msgs:
            ts_type, ts = m.timestamp()
            assert ts_type == CREATE_TIME, (topic, m.offset(), ts_type)
            out.append(Rec(m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts))
        return out
    finally:
        c.close()


def list_offset(bs: str, topic: str, partition: int, isolation: int) -> int:
    r = request(bs, list_offsets_v7.ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation,
        topics=(list_offsets_v7.ListOffsetsTopic(name=topic, partitions=(list_offsets_v7.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=LATEST),)),),
    ))  # fmt: skip
    [p] = [p for t in r.topics for p in t.partitions]
    assert p.error_code == ErrorCode.none, p
    return int(p.offset)


def raw_produce(bs: str, pid: int, epoch: int, sequence: int, values: list[bytes], ts: int) -> tuple[bytes, tuple[ErrorCode, int]]:
    """One idempotent batch of ``values`` to IDEMPOTENT-0: the batch and (error code, base offset)."""
    batch = build_batch([(b"k", v, (("h", b"x"),), ts) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
    return batch, send_batch(bs, batch)


def send_batch(bs: str, batch: bytes) -> tuple[ErrorCode, int]:
    r = request(bs, produce_v11.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(produce_v11.TopicProduceData(name=IDEMPOTENT, partition_data=(produce_v11.PartitionProduceData(index=0, records=batch),)),),
    ))  # fmt: skip
    [p] = [p for t in r.responses for p in t.partition_responses]
    return p.error_code, int(p.base_offset)


def txn_producer(bs: str) -> Producer:
    # Critical lines only: the producer left with its transaction open retries every owner's restart.
    producer = Producer({"bootstrap.servers": bs, "transactional.id": TXN_ID, "linger.ms": 0, "acks": "all", "log_level": 2})
    producer.init_transactions(API_TIMEOUT_S)
    return producer


def txn_send(producer: Producer, values: list[bytes]) -> list[int]:
    offsets: list[int] = []

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for v in values:
        producer.produce(TXN, value=v, partition=0, on_delivery=on_delivery)
    assert producer.flush(API_TIMEOUT_S) == 0
    return offsets


def create_topics(bs: str, topics: list[NewTopic]) -> None:
    client = admin(bs)
    for future in client.create_topics(topics).values():
        future.result(API_TIMEOUT_S)


def topic_configs(bs: str, topic: str) -> dict[str, tuple[str, int]]:
    client = admin(bs)
    [(_, future)] = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).items()
    return {name: (entry.value, entry.source) for name, entry in future.result(API_TIMEOUT_S).items()}


# --- The write sets and their checks -------------------------------------------------------------------


def write(bs: str, step: int, ledger: Ledger, first: bool) -> None:
    # Recent CreateTimes: older than retention.ms (7 days) or producer.id.expiration.ms (1 day),
    # they would be deleted or their producer forgotten by whichever broker looks first.
    base_ts = int(time.time() * 1000) - 60_000
    if first:
        create_topics(bs, [NewTopic(PLAIN, 3, 1), NewTopic(IDEMPOTENT, 1, 1), NewTopic(TXN, 1, 1)])
    for partition in range(3):
        recs = [
            (None if i % 3 == 0 else f"key-{i}".encode(), None if i % 7 == 0 else f"{step}-{partition}-{i}".encode() * (1 + i % 4),
             (("idx", str(i).encode()), ("p", b"\x00\xff")) if i % 2 else (), base_ts + 10 * i)
            for i in range(40 + partition)
        ]  # fmt: skip
        ledger.records.setdefault((PLAIN, partition), []).extend(produce_records(bs, PLAIN, partition, recs))

    # The group commits a different position in each partition each time.
    offsets = {(PLAIN, p): len(ledger.records[(PLAIN, p)]) - 5 - p for p in range(3)}
    c = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "enable.auto.commit": False})
    try:
        # The first commit creates __consumer_offsets: NOT_COORDINATOR until its partition is loaded.
        deadline = time.monotonic() + API_TIMEOUT_S
        while True:
            try:
                c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
                break
            except KafkaException as e:
                if e.args[0].code() not in RETRIABLE_COMMIT or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()
    ledger.committed = offsets

    # The idempotent producer: the next sequence is accepted at the log end.
    if first:
        # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of producer ids arrives.
        deadline = time.monotonic() + API_TIMEOUT_S
        while True:
            r = request(bs, init_producer_id_v5.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
            if r.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.error_code == ErrorCode.none, r
        ledger.producer_id, ledger.producer_epoch = int(r.producer_id), int(r.producer_epoch)
    for n in (2, 3):  # two batches, so the last one is not the producer's only one
        values = [f"idem-{step}-{ledger.last_sequence + 1 + i}".encode() for i in range(n)]
        log_end = len(ledger.records.get((IDEMPOTENT, 0), []))
        batch, answer = raw_produce(bs, ledger.producer_id, ledger.producer_epoch, ledger.last_sequence + 1, values, base_ts)
        assert answer == (ErrorCode.none, log_end), answer
        ledger.records.setdefault((IDEMPOTENT, 0), []).extend(Rec(log_end + i, b"k", v, (("h", b"x"),), base_ts) for i, v in enumerate(values))
        ledger.last_sequence += n
        ledger.last_batch, ledger.last_offset = batch, log_end

    # Transactions: one committed, one aborted, one left open for the next owner.
    producer = txn_producer(bs)
    for commit in (True, False):
        values = [f"txn-{step}-{'commit' if commit else 'abort'}-{i}".encode() for i in range(3)]
        producer.begin_transaction()
        txn_send(producer, values)
        if commit:
            producer.commit_transaction(API_TIMEOUT_S)
            ledger.txn_committed += values
        else:
            producer.abort_transaction(API_TIMEOUT_S)
            ledger.txn_aborted += values
    ledger.open_values = [f"txn-{step}-open-{i}".encode() for i in range(2)]
    producer.begin_transaction()
    ledger.open_first_offset = txn_send(producer, ledger.open_values)[0]
    ledger.open_txn = producer

    # Last, right before the stop: a topic with non-default configs, created and written to. Keys
    # written twice, one the second time a tombstone: the log keeps all of it (nothing is cleaned
    # in an active segment). A SIGKILL follows within a second, before kbroker's log-flush job.
    new_topic = f"takeover-compacted-{step}"
    create_topics(bs, [NewTopic(new_topic, 1, 1, config=TOPIC_CONFIGS)])
    ledger.compacted_topics.append(new_topic)
    keyed = [(f"k{i % 4}".encode(), None if i == 6 else f"{step}-v{i}".encode(), (("step", str(step).encode()),), base_ts + i) for i in range(8)]
    ledger.records[(new_topic, 0)] = produce_records(bs, new_topic, 0, keyed)


def verify(bs: str, owner: str, ledger: Ledger) -> None:
    # Topics and their configs.
    for topic in ledger.compacted_topics:
        configs = topic_configs(bs, topic)
        dynamic = {k: v for k, (v, source) in configs.items() if source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
        assert dynamic == TOPIC_CONFIGS, (owner, topic, dynamic)
        ledger.answers[(owner, f"configs {topic}")] = {k: v for k, (v, _) in configs.items()}
        # Every record, the tombstone included, at the offset it was written at.
        expected = ledger.records[(topic, 0)]
        assert read(bs, topic, 0, len(expected)) == expected, (owner, topic)

    # Every record at its offset.
    for (topic, partition), expected in ledger.records.items():
        if topic in ledger.compacted_topics:
            continue
        assert read(bs, topic, partition, len(expected)) == expected, (owner, topic, partition)

    # The group's committed offsets, and a consumer of the group starting there.
    c = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        tps = [TopicPartition(t, p) for t, p in ledger.committed]
        got = {(tp.topic, tp.partition): tp.offset for tp in c.committed(tps, timeout=API_TIMEOUT_S)}
        assert got == ledger.committed, (owner, got)
        c.assign(tps)  # no offset given: the committed ones
        first: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + API_TIMEOUT_S
        while len(first) < len(tps) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                first.setdefault((m.topic(), m.partition()), m.offset())
        assert first == ledger.committed, (owner, first)
    finally:
        c.close()

    # The idempotent producer: the last batch again is a duplicate at its first offset, a gap in
    # the sequence is refused, and neither appends.
    log_end = len(ledger.records[(IDEMPOTENT, 0)])
    duplicate = send_batch(bs, ledger.last_batch)
    _, gap = raw_produce(bs, ledger.producer_id, ledger.producer_epoch, ledger.last_sequence + 2, [b"gap"], 0)
    ledger.answers[(owner, "idempotent")] = (duplicate[0], duplicate[1] - ledger.last_offset, gap)
    assert duplicate == (ErrorCode.none, ledger.last_offset), (owner, duplicate)
    assert gap[0] == ErrorCode.out_of_order_sequence_number, (owner, gap)
    assert list_offset(bs, IDEMPOTENT, 0, READ_UNCOMMITTED) == log_end

    # The transaction left open holds the last stable offset at its first offset until a producer
    # of the same transactional.id aborts it.
    log_end = list_offset(bs, TXN, 0, READ_UNCOMMITTED)
    assert list_offset(bs, TXN, 0, READ_COMMITTED) == ledger.open_first_offset, owner
    assert ledger.open_txn is not None
    txn_producer(bs)
    ledger.txn_aborted += ledger.open_values
    ledger.open_txn = None  # fenced: never used again
    assert list_offset(bs, TXN, 0, READ_COMMITTED) == list_offset(bs, TXN, 0, READ_UNCOMMITTED) == log_end + 1  # its ABORT marker
    committed = [r.value for r in read(bs, TXN, 0, len(ledger.txn_committed), "read_committed")]
    assert committed == ledger.txn_committed, (owner, committed)
    everything = [r.value for r in read(bs, TXN, 0, len(ledger.txn_committed) + len(ledger.txn_aborted))]
    assert sorted(everything) == sorted(ledger.txn_committed + ledger.txn_aborted), owner

    # The metadata quorum answers: one voter, this node, leading.
    r = request(bs, describe_quorum_v2.DescribeQuorumRequest(topics=(describe_quorum_v2.TopicData(topic_name="__cluster_metadata", partitions=(describe_quorum_v2.PartitionData(partition_index=0),)),)))
    [p] = [p for t in r.topics for p in t.partitions]
    assert (r.error_code, p.error_code, p.leader_id, [v.replica_id for v in p.current_voters]) == (ErrorCode.none, ErrorCode.none, 1, [1]), (owner, r)


# --- The owners ------------------------------------------------------------------------------------------

# Read by both brokers from the one server.properties. A node restarted after SIGKILL waits out its
# previous life's broker session (DUPLICATE_BROKER_REGISTRATION, Kafka and kbroker alike): 4 s, not 9.
# Metadata snapshots every few kilobytes of records, so each owner writes some and loads the other's.
OVERRIDES = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500", "metadata.log.max.record.bytes.between.snapshots": "8192"}
# Log lines that would say a broker misread what the other left: ERROR/WARN lines (Kafka) or error and
# warning events (kbroker) that name a file kind or its damage.
SUSPECT = re.compile(r"corrupt|unknown|unreadable|checkpoint|snapshot|malformed|invalid|failed to (load|read)|recover", re.IGNORECASE)


class Owners(KafkaNodeDir):
    """The Kafka node and the kbroker process sharing one node directory, never both running."""

    def __init__(self, root: Path, lib: Path) -> None:
        super().__init__(root, lib, OVERRIDES)
        self.metadata_dir = self.data / "__cluster_metadata-0"
        self._kafka_log_start = 0  # where this run of Kafka's server.log begins

    def start(self, owner: str) -> str:
        if owner == "kafka":
            self._kafka_log_start = self.kafka.log_path.stat().st_size if self.kafka.log_path.exists() else 0
            self.kafka.launch()
            self.kafka.await_started()
        else:
            self.kbroker.start()
        return self.kafka.bootstrap

    def stop(self, owner: str, how: str) -> None:
        if owner == "kafka":
            self.kafka.kill() if how == "kill" else self.kafka.stop()
        else:
            self.kbroker.kill() if how == "kill" else self.kbroker.stop()

    def suspect_lines(self, owner: str) -> list[str]:
        """What this run of ``owner`` logged that looks like a misread file."""
        if owner == "kafka":
            with open(self.kafka.log_path, "rb") as f:
                f.seek(self._kafka_log_start)
                lines = f.read().decode(errors="replace").splitlines()
            return [line for line in lines if re.search(r"\] (ERROR|WARN) ", line) and SUSPECT.search(line)]
        events = self.kbroker.log_events(current_run=True)
        return [str(e) for e in events if e.get("level") in ("error", "critical") or e.get("level") == "warning" and SUSPECT.search(str(e)) and not preallocated_index(e)]

    def metadata_batches_kafka_refuses(self) -> list[int]:
        """Base offsets of metadata log batches whose records' timestamps differ: Kafka's
        RecordsIterator wants a timestamp delta of 0 in every record, and will not start otherwise."""
        refused = []
        for segment in sorted(self.metadata_dir.glob("*.log")):
            for header, batch in iter_batches(segment.read_bytes()):
                if len({r.timestamp for r in iter_records(batch, header)}) > 1:
                    refused.append(header.base_offset)
        return refused

    def metadata_snapshots(self) -> set[str]:
        return {p.name for p in self.metadata_dir.glob("*.checkpoint")}


def preallocated_index(event: dict[str, Any]) -> bool:
    """kbroker rebuilds an index Kafka preallocated and never trimmed (it was killed) and says so; Kafka
    itself recovers the same segment (no clean shutdown) and rebuilds it too."""
    return event.get("event") == "log.index_rebuilt" and "last entry OffsetPosition(offset=0, position=0)" in str(event.get("reason"))


@pytest.fixture(scope="module")
def owners(kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Owners]:
    o = Owners(tmp_path_factory.mktemp("takeover"), kafka_lib)
    yield o
    o.close()


CHAIN = [("kafka", "kill"), ("kbroker", "stop"), ("kafka", "stop"), ("kbroker", "kill"), ("kafka", "stop")]


def test_one_data_directory_owned_by_kafka_and_kbroker_in_turn(owners: Owners) -> None:
    ledger = Ledger()
    written_by: dict[str, str] = {}  # metadata snapshot file -> the owner that wrote it
    started_from: list[tuple[str, str]] = []  # (owner, who wrote the newest snapshot it found)
    for step, (owner, how) in enumerate(CHAIN):
        before = owners.metadata_snapshots()
        started_from.append((owner, written_by.get(max(before), "kafka-storage format")))
        bs = owners.start(owner)
        if step:
            verify(bs, f"{owner}#{step}", ledger)
        if step < len(CHAIN) - 1:
            write(bs, step, ledger, first=step == 0)
        owners.stop(owner, how)
        assert owners.suspect_lines(owner) == [], f"{owner}#{step}"
        assert owners.metadata_batches_kafka_refuses() == [], f"{owner}#{step}"
        written_by |= dict.fromkeys(owners.metadata_snapshots() - before, owner)
    # Each loaded a metadata snapshot the other wrote (a node starts from the newest).
    assert {("kafka", "kbroker"), ("kbroker", "kafka")} <= set(started_from), started_from

    # The same answers in the same spots.
    for check in ["idempotent", *(f"configs {t}" for t in ledger.compacted_topics)]:
        answers = {owner: answer for (owner, name), answer in ledger.answers.items() if name == check}
        first = next(iter(answers.values()))
        assert all(a == first for a in answers.values()), (check, answers)
