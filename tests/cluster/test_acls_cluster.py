"""ACLs on three combined broker+controller nodes, each with Kafka's StandardAuthorizer: an ACL
created through node 1 is a record of the metadata log, so every node's DescribeAcls (answered
from its own image) lists it and every node enforces it, and it is still there once the whole
cluster has been killed and started again.

Each node has the cluster's PLAINTEXT listener (User:ANONYMOUS, a super user: the brokers
themselves and the tests' administrator) and a SASL_PLAINTEXT listener of its own for the
principals under test. Each node is asked directly, over its own listeners, never through a
client that may pick another node.
"""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.describe_acls.v3 import request as describe_acls_v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from tests.cluster.cluster import ClusterNode, KafkaCluster, wait_until
from tests.integration.test_acls import AUTHORIZER, JAAS, Secured, metadata_error, sasl_socket, unique, user
from tests.integration.wire import exchange

TIMEOUT_S = 30.0
# Long enough for a loaded 2-core machine to carry one metadata record to every node.
PROPAGATION_S = 30.0
# Kafka's codes: ResourceType ANY/TOPIC, PatternType ANY/LITERAL, AclOperation ANY, AclPermissionType ANY.
ANY, TOPIC, LITERAL = 1, 2, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("acls"),
        combined=3,
        overrides={
            **AUTHORIZER,
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            # After the whole cluster is killed, the new active controller gives every registered
            # broker a fresh session, and each restarted broker is refused registration
            # (DUPLICATE_BROKER_REGISTRATION, as in Kafka) until its old one runs out: 9 s by default.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        },
    )
    # A SASL_PLAINTEXT listener on each node, on top of the listeners its config file names.
    for node_id, port in c.add_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT").items():
        c.nodes[node_id].sasl_port = port  # type: ignore[attr-defined]
    try:
        yield c.start()
    finally:
        c.close()


def secured(node: ClusterNode) -> Secured:
    """One node's listeners: clients bootstrapped here may go on to the others, sockets may not."""
    return Secured(node.bootstrap, f"127.0.0.1:{node.sasl_port}", node)  # type: ignore[attr-defined]


def acls_of(node: ClusterNode) -> set[tuple[object, ...]]:
    """Every ACL, as this node's DescribeAcls answers (v3, on its PLAINTEXT listener)."""
    request = describe_acls_v3.DescribeAclsRequest(
        resource_type_filter=i8(ANY),
        resource_name_filter=None,
        pattern_type_filter=i8(ANY),
        principal_filter=None,
        host_filter=None,
        operation=i8(ANY),
        permission_type=i8(ANY),
    )
    with socket.create_connection(("127.0.0.1", node.port), timeout=TIMEOUT_S) as sock:
        response = exchange(sock, request)
    assert response.error_code == ErrorCode.none, response
    return {
        (int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host, int(a.operation), int(a.permission_type))
        for r in response.resources
        for a in r.acls
    }


def produce_to(node: ClusterNode, name: str, topic: str, partition: int) -> int | None:
    """One record to one partition as ``name``, bootstrapped from ``node``: None if delivered."""
    outcome: list[KafkaError | None] = []
    producer = Producer(user(secured(node), name, **{"message.timeout.ms": 10_000, "allow.auto.create.topics": False}))
    producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    deadline = time.monotonic() + TIMEOUT_S
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(0)
    assert outcome, f"no delivery report for {topic}[{partition}] as {name}"
    return None if outcome[0] is None else outcome[0].code()


def test_an_acl_created_through_one_node_is_listed_and_enforced_by_all_and_outlives_a_cluster_restart(cluster: KafkaCluster) -> None:
    topic = unique("acl-cluster")
    node1, node2, node3 = (cluster.nodes[i] for i in (1, 2, 3))
    # One partition led by each node, so each node's Produce path decides once.
    client = AdminClient({"bootstrap.servers": node1.bootstrap})
    client.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=[[1], [2], [3]])], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)

    def leaders() -> dict[int, int]:
        asked = AdminClient({"bootstrap.servers": cluster.bootstrap})
        return {p: m.leader for p, m in asked.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions.items()}

    # alice may write; bob may see the topic but not write to it; carol has nothing. AclOperation
    # WRITE 4, DESCRIBE 8; AclPermissionType ALLOW 3. Sent to node 1 itself, which forwards it to
    # the controller, wherever that is.
    expected = {(TOPIC, topic, LITERAL, "User:alice", "*", 4, 3), (TOPIC, topic, LITERAL, "User:bob", "*", 8, 3)}
    creations = tuple(
        create_acls_v3.AclCreation(
            resource_type=i8(r), resource_name=n, resource_pattern_type=i8(p), principal=who, host=host, operation=i8(op), permission_type=i8(perm)
        )
        for r, n, p, who, host, op, perm in sorted(expected)
    )
    with socket.create_connection(("127.0.0.1", node1.port), timeout=TIMEOUT_S) as sock:
        created = exchange(sock, create_acls_v3.CreateAclsRequest(creations=creations))
    assert [(r.error_code, r.error_message) for r in created.results] == [(ErrorCode.none, None)] * 2

    def ours(node: ClusterNode) -> set[tuple[object, ...]]:
        return {a for a in acls_of(node) if a[1] == topic}

    def check_everywhere(when: str) -> None:
        wait_until(f"partition p led by node p + 1 {when}", lambda: leaders() == {0: 1, 1: 2, 2: 3}, TIMEOUT_S)
        wait_until(f"every node listing the ACLs {when}", lambda: all(ours(n) == expected for n in (node1, node2, node3)), PROPAGATION_S)
        for node in (node1, node2, node3):
            # This node's own authorizer: Metadata over its own SASL listener.
            with sasl_socket(secured(node), "alice") as sock:
                wait_until(f"node {node.node_id} letting alice describe {when}", lambda: metadata_error(sock, topic) == ErrorCode.none, PROPAGATION_S)
            with sasl_socket(secured(node), "carol") as sock:
                assert metadata_error(sock, topic) == ErrorCode.topic_authorization_failed, f"node {node.node_id} {when}"
            # Partition node_id - 1 is led by this node: its Produce handler decides.
            partition = node.node_id - 1
            assert produce_to(node, "alice", topic, partition) is None, f"alice to node {node.node_id} {when}"
            assert produce_to(node, "bob", topic, partition) == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"bob to node {node.node_id} {when}"

    check_everywhere("after the create")

    for node in cluster.nodes.values():
        node.kill()
    for node in cluster.nodes.values():
        node.launch()
    for node in cluster.nodes.values():
        node.await_started()

    check_everywhere("after the whole cluster restarted")
