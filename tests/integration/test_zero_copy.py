"""Plain consumer fetches send record bytes with sendfile: none are copied through Python."""

from __future__ import annotations

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import consume, create_topic, produce_acked

RECORDS = 10_000


def test_consumer_fetches_are_zero_copy(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, configs={"segment.bytes": "200000"})
    values = [f"record-{i:06d}-".encode() * 4 for i in range(RECORDS)]
    assert produce_acked(broker.bootstrap, topic_name, values, batch_size=20_000) == list(range(RECORDS))
    got = consume(broker.bootstrap, topic_name, 0, 0, RECORDS, timeout_s=60)
    assert [m.value() for m in got] == values
    broker.stop()
    (event,) = broker.events_named("fetch.bytes")
    assert isinstance(event["sendfile_bytes"], int) and isinstance(event["copied_bytes"], int), event
    assert event["sendfile_bytes"] >= sum(len(v) for v in values), event
    assert event["copied_bytes"] == 0, event
