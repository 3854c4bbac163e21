"""librdkafka's own authorization tests, 0115-producer_auth.cpp and 0119-consumer_auth.cpp, step
for step with confluent-kafka (librdkafka's Python binding) against a kbroker with the authorizer.

librdkafka runs them against a cluster with an authorizer that lets everyone do what no ACL
forbids (`allow.everyone.if.no.acl.found=true`) and adds its ACLs with kafka-acls.sh; here the
admin client adds the same ACLs (tests/integration/test_acls.py runs kafka-acls.sh itself)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("rdkafka-auth") / "data")
    broker.overrides.update(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    broker.start()
    try:
        yield broker
    finally:
        retire(broker)


def add_acls(bootstrap: str, *bindings: AclBinding) -> None:
    """kafka-acls.sh --add, then wait until the broker lists them (librdkafka sleeps 1 s)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        future.result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type) for b in bindings]
    while not all(admin.describe_acls(f).result(TIMEOUT_S) for f in filters):
        assert time.monotonic() < deadline, "the ACLs never showed"
        time.sleep(0.1)


def topic_acl(topic: str, operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*", operation, permission)


@pytest.mark.parametrize("topic_known", [True, False], ids=["topic-known", "topic-not-known"])
def test_0115_producer_auth(broker: BrokerProcess, topic_known: bool) -> None:
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000, "on_delivery": lambda err, msg: reports.append(err)})
    topic = unique_topic("0115-unauthorized")
    create_topic(broker.bootstrap, topic, partitions=3)
    expected = 0
    if topic_known:
        # A seeding message makes sure the producer knows the topic's metadata.
        producer.produce(topic, b"0")
        assert producer.flush(TIMEOUT_S) == 0
        assert reports == [None]
        reports.clear()
    add_acls(broker.bootstrap, topic_acl(topic, AclOperation.ALL, AclPermissionType.DENY))

    producer.produce(topic, b"1")
    producer.produce(topic, b"2", partition=0)
    expected += 2
    assert producer.flush(TIMEOUT_S) == 0
    assert [e.code() if e else None for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2

    # Now the producer knows: both produce() calls fail at once.
    for partition in (None, 0):
        with pytest.raises(KafkaException) as refused:
            producer.produce(topic, b"3", **({} if partition is None else {"partition": partition}))
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert producer.flush(TIMEOUT_S) == 0
    assert len(reports) == expected


def test_0119_consumer_auth(broker: BrokerProcess) -> None:
    topic = unique_topic("0119-fetch_unauth")
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions=partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(1000):
        producer.produce(topic, str(i).encode())
    assert producer.flush(TIMEOUT_S) == 0
    # Describe (Metadata) allowed, Read (Fetch) denied.
    add_acls(
        broker.bootstrap,
        topic_acl(topic, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        topic_acl(topic, AclOperation.READ, AclPermissionType.DENY),
    )
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    auth_errors = 0
    try:
        # librdkafka's loop: 30 polls of 0.5 s, one auth error per partition and no message.
        for _ in range(30):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is not None, "did not expect a valid message"
            assert msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"unexpected consumer error: {msg.error()}"
            auth_errors += 1
            assert auth_errors <= partitions, "too many auth errors: expected one per partition"
    finally:
        consumer.close()
    assert auth_errors == partitions
