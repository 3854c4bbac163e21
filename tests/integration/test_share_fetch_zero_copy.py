"""ShareFetch answers send record bytes as Fetch's do: sendfile on a plaintext listener, copied
through Python on a TLS one (the kbroker_network_sendfile_bytes/copied_bytes counters, scraped
around each read). The answers hold whole batches (Kafka's FileRecords slice), so a member that
holds only part of a batch, or a read_committed member reading past an aborted transaction, is
sent more than it holds: confluent-kafka's ShareConsumer must still deliver exactly the records
its AcquiredRecords name, compressed batches included."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from protocol.record_batch import iter_headers
from tests.integration.certificates import TestCA
from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, produce_acked, unique_topic
from tests.integration.test_features import await_finalized
from tests.integration.test_prometheus_metrics import scrape, value
from tests.integration.test_share_fetch_wire import FAST_SHARE_HEARTBEAT, send_in_transaction, set_group_configs, share_poll_until
from tests.ports import free_port

WAIT_S = 30.0
SENDFILE, COPIED = "kbroker_network_sendfile_bytes_total", "kbroker_network_copied_bytes_total"


class TlsShareNode:
    def __init__(self, broker: BrokerProcess, ssl_port: int, metrics_port: int, ca: Path) -> None:
        self.broker = broker
        self.ssl_port = ssl_port
        self.metrics_port = metrics_port
        self.ca = ca

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def counters(self) -> tuple[float, float]:
        samples = scrape(self.metrics_port)
        return value(samples, SENDFILE) or 0.0, value(samples, COPIED) or 0.0

    def consumer(self, group: str, tls: bool = False, **extra: str) -> ShareConsumer:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": group, **extra}
        if tls:
            conf.update({"bootstrap.servers": f"127.0.0.1:{self.ssl_port}", "security.protocol": "SSL", "ssl.ca.location": str(self.ca)})
        return ShareConsumer(conf)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsShareNode]:
    directory = tmp_path_factory.mktemp("share-zero-copy")
    ca = TestCA()
    ca.write_ca(directory / "ca.pem")
    keystore = ca.write_pem_keystore(ca.issue("localhost"), directory / "server-keystore.pem")
    broker = BrokerProcess(directory / "data")
    ssl_port, metrics_port = free_port(), free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "metrics.listener": f"http://127.0.0.1:{metrics_port}",
            **FAST_SHARE_HEARTBEAT,
        }
    )
    broker.start()
    try:
        await_finalized(broker.bootstrap, "share.version", 2)
        yield TlsShareNode(broker, ssl_port, metrics_port, directory / "ca.pem")
    finally:
        retire(broker)


def read_all(consumer: ShareConsumer, topic: str, count: int) -> list[bytes]:
    got: list[bytes] = []
    consumer.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    return got


def test_share_fetch_records_go_out_by_sendfile_on_plaintext_and_copied_on_tls(node: TlsShareNode) -> None:
    topic = unique_topic("share-zc")
    create_topic(node.bootstrap, topic)
    values = [b"%06d-" % i + bytes(500) for i in range(2000)]
    produce_acked(node.bootstrap, topic, values, linger_ms=20)
    total = sum(map(len, values))
    for tls in (False, True):
        group = unique_topic("share-zc-tls" if tls else "share-zc-plain")
        set_group_configs(node.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        sendfile_before, copied_before = node.counters()
        consumer = node.consumer(group, tls=tls)
        try:
            got = read_all(consumer, topic, len(values))
        finally:
            consumer.close()
        sendfile, copied = node.counters()
        assert sorted(got) == values
        # Whole batches: at least the records' bytes, each sent once, by one path alone.
        if tls:
            assert copied - copied_before >= total and sendfile == sendfile_before, (sendfile - sendfile_before, copied - copied_before)
        else:
            assert sendfile - sendfile_before >= total and copied == copied_before, (sendfile - sendfile_before, copied - copied_before)


def batch_sizes(node: TlsShareNode, topic: str) -> list[int]:
    """The record counts of the partition's batches, from its segment file."""
    data = (node.broker.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    return [h.records_count for h in iter_headers(data)]


def poll_acknowledging(consumer: ShareConsumer, count: int, ack_type: Callable[[int], int]) -> list[tuple[int, bytes]]:
    """(offset, value) of ``count`` records, each acknowledged as ``ack_type`` of its offset says
    before the next poll (explicit mode wants every record of a poll acknowledged before the
    next), then committed."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {got}"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            consumer.acknowledge(m, ack_type(m.offset()))
            got.append((m.offset(), m.value()))
    consumer.commit_sync()
    return got


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_a_member_holding_part_of_a_batch_gets_exactly_its_records(node: TlsShareNode, compression: str) -> None:
    """Records 4-6 of a 10-record batch released: the next fetch sends the whole batch again, and
    the member delivers those three alone."""
    topic, group = unique_topic("share-partial"), unique_topic("share-partial-g")
    create_topic(node.bootstrap, topic)
    set_group_configs(node.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    values = [b"r%d" % i for i in range(10)]
    producer = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 1000, "compression.type": compression})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(WAIT_S) == 0
    assert batch_sizes(node, topic) == [10]
    consumer = node.consumer(group, **{"share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([topic])
        first = poll_acknowledging(consumer, len(values), lambda offset: AcknowledgeType.RELEASE if 4 <= offset <= 6 else AcknowledgeType.ACCEPT)
        assert [value for _, value in first] == values
        again = poll_acknowledging(consumer, 3, lambda offset: AcknowledgeType.ACCEPT)
        assert again == [(i, values[i]) for i in (4, 5, 6)]
        # Every record is acknowledged: nothing is left to deliver.
        quiet_until = time.monotonic() + 1.5
        while time.monotonic() < quiet_until:
            assert [m.value() for m in consumer.poll(0.3) if m.error() is None] == []
    finally:
        consumer.close()


def test_read_committed_members_skip_aborted_batches_sent_between_committed_ones(node: TlsShareNode) -> None:
    """One answer's batches span a committed transaction, an aborted one and another committed
    one (lz4, with their markers): the member delivers the committed records only, by sendfile."""
    topic, group = unique_topic("share-rc-zc"), unique_topic("share-rc-zc-g")
    create_topic(node.bootstrap, topic)
    set_group_configs(node.bootstrap, group, {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": unique_topic("share-rc-zc-txn"), "linger.ms": 50, "compression.type": "lz4"})
    producer.init_transactions(WAIT_S)
    committed = [f"c-{i}" for i in range(5)] + [f"d-{i}" for i in range(5)]
    send_in_transaction(producer, topic, committed[:5], commit=True)
    send_in_transaction(producer, topic, [f"a-{i}" for i in range(5)], commit=False)
    send_in_transaction(producer, topic, committed[5:], commit=True)
    sendfile_before, copied_before = node.counters()
    consumer = node.consumer(group)
    got: list[str] = []
    try:
        consumer.subscribe([topic])
        share_poll_until(consumer, got, lambda: len(got) >= len(committed), "read_committed")
        quiet_until = time.monotonic() + 1.5
        while time.monotonic() < quiet_until:
            got += [m.value().decode() for m in consumer.poll(0.3) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(got) == sorted(committed), "an aborted record was delivered, or a record twice"
    sendfile, copied = node.counters()
    assert sendfile > sendfile_before and copied == copied_before
