"""Transaction scenarios shared by the per-client transaction test modules."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer, TopicPartition

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consumer, create_topic, poll_messages, produce_acked, unique_topic

TXN_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
API_TIMEOUT_S = 20


def start_txn_broker(broker_factory: StartBroker) -> BrokerProcess:
    """A broker that checks transaction timeouts every half second and starts groups at once."""
    return broker_factory(TXN_OVERRIDES)


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    """A confluent-kafka producer with its transactions initialised."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    producer = Producer(conf)
    producer.init_transactions(API_TIMEOUT_S)
    return producer


def values_of(bootstrap: str, topic: str, isolation: str, expected: int, timeout_s: float = 20) -> list[str]:
    """Every value in partition 0 from the start, read with ``isolation``; waits for ``expected`` then a moment more."""
    c = consumer(bootstrap, isolation_level=isolation, group_id=unique_topic("reader"))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = poll_messages(c, expected, timeout_s)
        got += poll_messages(c, 1, 1.0)  # nothing beyond what was expected
        return [m.value().decode() for m in got]
    finally:
        c.close()


def ctp_setup(broker_factory: StartBroker, total: int) -> tuple[str, str, str, str]:
    """(bootstrap, source, sink, group) for a consume-transform-produce loop on a new broker;
    the source holds v0..v{total-1}."""
    bootstrap = start_txn_broker(broker_factory).bootstrap
    source, sink, group = unique_topic("in"), unique_topic("out"), unique_topic("ctp")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    produce_acked(bootstrap, source, [f"v{i}".encode() for i in range(total)])
    return bootstrap, source, sink, group


def check_ctp_output(bootstrap: str, sink: str, total: int, aborted: list[str]) -> None:
    """read_committed sees each input's output once, in order; read_uncommitted sees the aborted outputs too."""
    assert aborted, "no transaction was aborted"
    expected = [f"out-v{i}" for i in range(total)]
    assert values_of(bootstrap, sink, "read_committed", total) == expected
    assert sorted(values_of(bootstrap, sink, "read_uncommitted", total + len(aborted))) == sorted(expected + aborted)


def check_open_transaction_aborted(broker: BrokerProcess, topic: str) -> None:
    """A transaction left open in ``topic`` is aborted at its timeout: a record written after
    it becomes readable with read_committed (the LSO moves past the aborted transaction)."""
    produce_acked(broker.bootstrap, topic, [b"after"])
    assert values_of(broker.bootstrap, topic, "read_committed", 1, timeout_s=30) == ["after"]
    assert broker.events_named("txn.timed_out")
