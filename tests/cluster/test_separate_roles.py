"""Five controller-only processes and two broker-only processes: the quorum outlives two lost
controllers, says so clearly when it loses a majority, and comes back when one returns."""

from __future__ import annotations

import re
import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.static.primitive import i32

from broker import wire_client

from tests.cluster.cluster import KafkaCluster, leader_id, wait_until
from tests.cluster.kbroker_command import quorum_status
from tests.integration.helpers import unique_topic

TIMEOUT_S = 30.0
# The CreateTopics that cannot commit without a majority: its timeout is all the test waits for it.
NO_QUORUM_TIMEOUT_S = 3.0
CONTROLLERS = (1, 2, 3, 4, 5)
BROKERS = (6, 7)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Two brokers: internal topics at RF 2, as an operator of a two-broker Kafka sets them (Kafka's 3
    # could not be placed, and the first consumer group would wait for a third broker forever).
    overrides = {
        "offsets.topic.replication.factor": "2",
        "transaction.state.log.replication.factor": "2",
        # A controlled shutdown completes once the other broker's heartbeat shows it has read the
        # leaderships moved off the leaving one: a heartbeat round or two, 2 s each by default.
        "broker.heartbeat.interval.ms": "500",
        # The quorum leader is killed: the voters left elect another within a couple of seconds
        # rather than after 2 s of silence plus a 1-2 s election backoff.
        "controller.quorum.fetch.timeout.ms": "1000",
        "controller.quorum.election.timeout.ms": "500",
    }
    c = KafkaCluster(tmp_path_factory.mktemp("separate"), combined=0, controllers=5, brokers=2, overrides=overrides)
    try:
        yield c.start()
    finally:
        c.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1, timeout_s: float = TIMEOUT_S) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor)], operation_timeout=timeout_s, request_timeout=timeout_s)
    futures[name].result(timeout=timeout_s + 10)


def replica_ids(described: str) -> list[int]:
    return sorted(int(i) for i in re.findall(r'"id": (\d+)', described))


def leads_known(bootstrap: str, topic: str) -> bool:
    """The broker's own metadata has the topic with a leader for every partition: asked of this
    broker alone (a client bootstrapped from it may ask another)."""
    request = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    [found] = wire_client.request(bootstrap, request, client_id="separate-roles-test").topics
    return found.error_code == ErrorCode.none and bool(found.partitions) and all(p.leader_id >= 0 for p in found.partitions)


def broker_ids(bootstrap: str) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def round_trip(bootstrap: str, topic: str, count: int, *, idempotent: bool = True, group: bool = True) -> set[bytes]:
    """Produce ``count`` records with acks=all and read them back, through a consumer group or by
    assigning every partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest", "enable.auto.commit": False})
    if group:
        consumer.subscribe([topic])
    else:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
    finally:
        consumer.close()
    return seen


def test_only_the_brokers_serve_clients_and_only_the_controllers_vote(cluster: KafkaCluster) -> None:
    for node_id in BROKERS:
        assert wait_until(f"broker {node_id} listing both brokers", lambda: broker_ids(cluster.nodes[node_id].bootstrap) == list(BROKERS) or None, TIMEOUT_S)
    status = wait_until("a quorum leader", lambda: quorum_status(cluster.controller_bootstrap(1)), TIMEOUT_S)
    assert int(status["LeaderId"]) in CONTROLLERS
    assert replica_ids(status["CurrentVoters"]) == list(CONTROLLERS)
    assert replica_ids(status["CurrentObservers"]) == list(BROKERS)
    topic = unique_topic("sep")
    create_topic(cluster.nodes[6].bootstrap, topic, partitions=4, replication_factor=2)
    assert round_trip(cluster.nodes[7].bootstrap, topic, 200) == {b"v%d" % i for i in range(200)}


def test_two_controllers_down_the_quorum_goes_on_three_down_it_says_so_then_recovers(cluster: KafkaCluster) -> None:
    bootstrap = cluster.bootstrap
    leader = wait_until("a quorum leader", lambda: leader_id(cluster, 1), TIMEOUT_S)
    # The leader and another voter first: the three left elect a new leader and carry on.
    down = [leader, next(c for c in CONTROLLERS if c != leader)]
    for node_id in down:
        cluster.nodes[node_id].kill()
    create_topic(bootstrap, unique_topic("two-down"))

    existing = unique_topic("before-loss")
    create_topic(bootstrap, existing)
    # A created topic is committed, not yet known to every broker: each learns it from the
    # metadata log, which it cannot read once the quorum is lost.
    for broker in cluster.brokers:
        wait_until(f"broker {broker.node_id} knowing {existing}", lambda b=broker: leads_known(b.bootstrap, existing) or None, TIMEOUT_S)
    third = next(c for c in CONTROLLERS if c not in down)
    cluster.nodes[third].kill()
    down.append(third)
    try:
        # No majority: a metadata change cannot commit, and the client is told so within its timeout.
        started = time.monotonic()
        with pytest.raises(KafkaException) as failure:
            create_topic(bootstrap, unique_topic("no-quorum"), timeout_s=NO_QUORUM_TIMEOUT_S)
        assert failure.value.args[0].name() in ("REQUEST_TIMED_OUT", "_TIMED_OUT"), failure.value
        assert time.monotonic() - started < NO_QUORUM_TIMEOUT_S + 20
        # The data plane does not need the quorum: topics that exist go on taking and serving
        # records. Not an idempotent producer: its producer id would come from a block the
        # controller commits, which a broker that has none cannot get now (as in Kafka).
        assert round_trip(bootstrap, existing, 50, idempotent=False, group=False) == {b"v%d" % i for i in range(50)}

        cluster.nodes[third].launch()
        cluster.nodes[third].await_started()
        wait_until("CreateTopics once a majority is back", lambda: create_topic(bootstrap, unique_topic("recovered"), timeout_s=5) or True, 60)
    finally:
        for node_id in down:
            if not cluster.nodes[node_id].running:
                cluster.nodes[node_id].launch()
        for node_id in down:
            cluster.nodes[node_id].await_started()
    status = wait_until("all five voters caught up", lambda: quorum_status(cluster.controller_bootstrap(1)), TIMEOUT_S)
    assert int(status["LeaderId"]) in CONTROLLERS


def test_a_broker_shut_down_with_sigterm_hands_its_leaderships_over_first(cluster: KafkaCluster) -> None:
    topic = unique_topic("controlled")
    create_topic(cluster.nodes[6].bootstrap, topic, partitions=6, replication_factor=2)
    leaving = cluster.nodes[7]

    def leaders() -> dict[int, int]:
        md = AdminClient({"bootstrap.servers": cluster.nodes[6].bootstrap}).list_topics(topic, timeout=10)
        return {p.id: p.leader for p in md.topics[topic].partitions.values()}

    assert 7 in wait_until("broker 7 leading some partitions", lambda: leaders() if len(leaders()) == 6 else None, TIMEOUT_S).values()
    assert leaving.stop() == 0
    events = [e["event"] for e in leaving.log_events(current_run=True)]
    assert "broker.controlled_shutdown_complete" in events, events[-20:]
    # The controller moved every leadership off broker 7 before it exited, so its partitions
    # have a live leader at once rather than after the session timeout.
    assert set(leaders().values()) == {6}
    # UnregisterBroker through the other broker (forwarded to the controller, as kafka-cluster.sh
    # unregister does): broker 7 leaves the cluster until it starts and registers again.
    answer = wire_client.request(cluster.nodes[6].bootstrap, UnregisterBrokerRequest(broker_id=i32(7)))
    assert answer.error_code == ErrorCode.none, answer
    again = wire_client.request(cluster.nodes[6].bootstrap, UnregisterBrokerRequest(broker_id=i32(7)))
    assert again.error_code == ErrorCode.broker_id_not_registered, again
    leaving.launch()
    leaving.await_started()
    wait_until("broker 7 back", lambda: broker_ids(cluster.nodes[6].bootstrap) == list(BROKERS) or None, TIMEOUT_S)
