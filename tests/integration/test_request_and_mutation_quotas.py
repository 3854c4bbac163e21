"""request_percentage and controller_mutation_rate enforced, over the wire against a broker process.

What the broker guarantees, never how fast the machine is: a strict CreateTopics (v6+) takes a
topic while the client's token bucket is not below zero and answers THROTTLING_QUOTA_EXCEEDED for
the topics after, with a throttle time no longer than the bucket needs; an older version (and
librdkafka's, which stops at v4) creates everything and the client pays after; the connection of
a throttled client is not read before its throttle time is (about) over, so an immediate retry
on it is taken once the bucket has refilled. A client over a tiny request_percentage is throttled
at most one window (quota.window.size.seconds) per answer. Clients without a quota never wait.

The broker runs with `quota.window.num=3` and `controller.quota.window.num=3` so that a mutation quota of q lets a
burst of 3 q partitions through; the rules are Kafka's either way (tests/unit/test_request_and_mutation_quotas.py).
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_topics.v5 import request as create_v5
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.metadata.v12 import request as metadata

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import unique_topic
from tests.integration.test_client_quotas_enforced import set_quota
from tests.integration.wire import exchange, request

THROTTLING_QUOTA_EXCEEDED = 89


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("mutation-quotas") / "data", {"quota.window.num": "3", "controller.quota.window.num": "3"})
    broker.start()
    try:
        yield broker
    finally:
        retire(broker)


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def create(module: type, topics: dict[str, int]) -> object:
    creatable = tuple(module.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=(), configs=()) for n, p in topics.items())  # type: ignore[attr-defined]
    return module.CreateTopicsRequest(topics=creatable, timeout=datetime.timedelta(seconds=10), validate_only=False)  # type: ignore[attr-defined]


def throttle_ms(response: object) -> int:
    return round(response.throttle_time.total_seconds() * 1000)  # type: ignore[attr-defined]


def test_strict_create_topics_refuses_what_comes_after_the_quota_and_holds_the_client(broker: BrokerProcess) -> None:
    set_quota(broker.bootstrap, "strict", "controller_mutation_rate", 1.0)  # a bucket of 3 partitions
    a, b = unique_topic("strict-a"), unique_topic("strict-b")
    with connect(broker.bootstrap) as sock:
        # The bucket is full: the 4 partitions of a are taken though that leaves it one below
        # zero, and b is refused until it has refilled (one second at most).
        answer = exchange(sock, create(create_v7, {a: 4, b: 1}), 1, "strict")
        assert [(t.name, t.error_code) for t in answer.topics] == [(a, 0), (b, THROTTLING_QUOTA_EXCEEDED)]
        assert answer.topics[1].error_message is None  # as Kafka answers
        waited = throttle_ms(answer)
        assert 0 < waited <= 1000
        # Retried at once on the same connection: not read before the throttle time is over, by
        # when the bucket is back to zero (plus a margin against the millisecond rounding).
        time.sleep(0.1)
        sent = time.monotonic()
        retry = exchange(sock, create(create_v7, {b: 1}), 2, "strict")
        assert time.monotonic() - sent >= (waited - 100) / 2000, "the throttled connection was read at once"
        assert [(t.name, t.error_code) for t in retry.topics] == [(b, 0)]
    # Without a quota: never refused, never throttled.
    free = request(broker.bootstrap, create(create_v7, {unique_topic("free"): 10}), client_id="unlimited")
    assert [t.error_code for t in free.topics] == [0] and throttle_ms(free) == 0


def test_older_versions_and_librdkafka_create_everything_and_are_throttled_after(broker: BrokerProcess) -> None:
    set_quota(broker.bootstrap, "legacy", "controller_mutation_rate", 0.5)  # a bucket of 1.5 partitions
    # CreateTopics v5 has no THROTTLING_QUOTA_EXCEEDED: 4 partitions are created, 2.5 below zero.
    answer = request(broker.bootstrap, create(create_v5, {unique_topic("legacy-a"): 4}), client_id="legacy")
    assert [t.error_code for t in answer.topics] == [0]
    assert 0 < throttle_ms(answer) <= 5000
    # The same client's strict request, on a connection of its own, finds the bucket below zero.
    strict = request(broker.bootstrap, create(create_v7, {unique_topic("legacy-b"): 1}), client_id="legacy")
    assert [t.error_code for t in strict.topics] == [THROTTLING_QUOTA_EXCEEDED]
    assert 0 < throttle_ms(strict) <= 5000
    set_quota(broker.bootstrap, "rdkafka-admin", "controller_mutation_rate", 1.0)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "rdkafka-admin"})
    topics = [unique_topic("rdkafka") for _ in range(2)]
    for future in admin.create_topics([NewTopic(t, num_partitions=3, replication_factor=1) for t in topics], operation_timeout=10).values():
        future.result(timeout=30)  # all 6 partitions made from a bucket of 3: permissive
    strict = request(broker.bootstrap, create(create_v7, {unique_topic("rdkafka-b"): 1}), client_id="rdkafka-admin")
    assert [t.error_code for t in strict.topics] == [THROTTLING_QUOTA_EXCEEDED]


def test_a_client_over_its_request_percentage_is_throttled_at_most_a_window(broker: BrokerProcess) -> None:
    # A millionth of the loop: any request is far more, so every answer is throttled, and by
    # Kafka's bound for request quotas by no more than one window of a second.
    set_quota(broker.bootstrap, "busy", "request_percentage", 0.0001)
    body = metadata.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with connect(broker.bootstrap) as sock:
        first = exchange(sock, body, 1, "busy")
        assert 0 < throttle_ms(first) <= 1000
        sent = time.monotonic()
        second = exchange(sock, body, 2, "busy")
        assert time.monotonic() - sent >= throttle_ms(first) / 2000, "the throttled connection was read at once"
        assert 0 < throttle_ms(second) <= 1000
    assert throttle_ms(request(broker.bootstrap, body, client_id="idle")) == 0
