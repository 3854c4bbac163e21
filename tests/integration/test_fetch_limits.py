"""fetch.max.bytes: the broker's bound on one fetch answer across partitions, below what a client asks."""

from __future__ import annotations

from broker.wire_client import request
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consume, create_topic, produce_acked, unique_topic
from tests.unit.test_fetch_handler import fetch_v12

PARTITIONS = 12
PER_PARTITION = 100  # records of 10 kB: ~1 MB a partition
MiB = 1 << 20


def fill(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, PARTITIONS)
    for p in range(PARTITIONS):
        produce_acked(bootstrap, topic, [bytes([p]) * 10_000] * PER_PARTITION, partition=p, batch_size=64_000)


def fetch_all(bootstrap: str, topic: str, max_bytes: int) -> list[int]:
    """One Fetch v12 from offset 0 of every partition; the record bytes answered per partition."""
    body = fetch_v12(MiB, partitions=tuple(range(PARTITIONS)), max_bytes=max_bytes, max_wait_ms=0, topic=topic)
    response = request(bootstrap, body)
    return [len(p.records or b"") for t in response.responses for p in t.partitions]


def test_default_answer_is_bounded_at_8_mib_and_consumers_still_read_everything(module_broker: BrokerProcess) -> None:
    topic = unique_topic("fetch-limit")
    fill(module_broker.bootstrap, topic)
    sizes = fetch_all(module_broker.bootstrap, topic, max_bytes=50 * MiB)
    assert len(sizes) == PARTITIONS
    assert 7 * MiB <= sum(sizes) <= 8 * MiB, sizes
    assert sizes[-1] == 0 and all(s > 0 for s in sizes[:7]), sizes
    # The client's own smaller limit wins.
    assert sum(fetch_all(module_broker.bootstrap, topic, max_bytes=2 * MiB)) <= 2 * MiB
    for p in (0, PARTITIONS - 1):
        got = consume(module_broker.bootstrap, topic, p, 0, PER_PARTITION)
        assert [m.value() for m in got] == [bytes([p]) * 10_000] * PER_PARTITION


def test_fetch_max_bytes_override(broker_factory: StartBroker) -> None:
    broker = broker_factory({"fetch.max.bytes": str(3 * MiB)})
    topic = unique_topic("fetch-limit")
    fill(broker.bootstrap, topic)
    sizes = fetch_all(broker.bootstrap, topic, max_bytes=50 * MiB)
    assert 2 * MiB <= sum(sizes) <= 3 * MiB, sizes
