"""Three combined nodes whose own links are all SASL_SSL: Raft and the brokers' registrations and
heartbeats over the CONTROLLER listener (PLAIN, the controllers' users from the broker config),
replica fetches and transaction markers over INTERNAL (SCRAM-SHA-512, the bootstrap user that
`storage format --add-scram` wrote into the metadata log), each certificate checked against the
test CA and the host it was dialled at; and the producers and consumers over a SASL_SSL client
listener (SCRAM-SHA-512), so that every link of the cluster is secured. With Kafka's StandardAuthorizer on, the nodes are super
users; anyone else needs CLUSTER_ACTION to speak Raft or heartbeat, and a wrong password or no
TLS at all gets no further than the handshake.

The controller listener's sessions last 2.5 s (connections.max.reauth.ms): each node's connections
to the controllers are replaced with freshly authenticated ones before their session ends, so the
cluster goes on working long after the first sessions have expired.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName
from kio.schema.vote.v1 import request as vote_v1
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i64

from broker.channel_builders import ClientChannel
from broker.controller.envelope import serialize_principal
from broker.network_client import AuthenticationError, DisconnectError, NetworkClient
from broker.wire_client import encode_request
from protocol.api_keys import response_header_version, response_schema
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state, produce, read_all
from tests.integration.certificates import TestCA
from tests.integration.helpers import unique_topic

TIMEOUT_S = 60.0
REAUTH_MS = 2500
SESSION_DUE = "its authenticated session is due to end"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CONTROLLER_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="controller-secret" '
    'user_controller="controller-secret" user_alice="alice-secret";'
)
INTERNAL_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";'
CLIENT_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    ca = TestCA()
    keystore = ca.write_pem_keystore(ca.issue("kbroker-node"), directory / "node.pem")
    return ca, keystore, ca.write_ca(directory / "ca.pem")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tls: tuple[TestCA, Path, Path]) -> Iterator[KafkaCluster]:
    _, keystore, truststore = tls
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL,INTERNAL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
        "listener.name.controller.connections.max.reauth.ms": str(REAUTH_MS),
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": INTERNAL_JAAS,
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.client.scram-sha-512.sasl.jaas.config": CLIENT_JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        # The tests' admin clients come in over PLAINTEXT as User:ANONYMOUS, their producers and
        # consumers over SASL_SSL as User:writer.
        "super.users": "User:controller;User:broker;User:writer;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "6000",
    }
    c = KafkaCluster(
        tmp_path_factory.mktemp("secured-links"),
        combined=3,
        proxy_inter_broker=True,
        overrides=overrides,
        format_args=("--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-secret]", "--add-scram", "SCRAM-SHA-512=[name=writer,password=writer-secret]"),
    )
    # A SASL_SSL listener for clients on each node too: then every link of the cluster is secured.
    for node_id, port in c.add_listener("CLIENT", "SASL_SSL").items():
        c.nodes[node_id].client_port = port  # type: ignore[attr-defined]
    try:
        yield c.start()
    finally:
        c.close()


def controller_port(cluster: KafkaCluster, node_id: int) -> int:
    port = cluster.nodes[node_id].spec.controller_port
    assert port is not None
    return port


def ask_controller(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path], body: Any, username: str, password: str, node_id: int = 1) -> Any:
    """``body`` to a node's controller listener, over TLS and PLAIN as ``username``, with kbroker's own NetworkClient."""
    context = ssl.create_default_context(cafile=str(tls[2]))
    channel = ClientChannel("CONTROLLER", context, "PLAIN", {"username": username, "password": password})

    async def send() -> Any:
        client = NetworkClient("secured-links-test", request_timeout_ms=10000, channel=channel)
        try:
            return await client.send(("127.0.0.1", controller_port(cluster, node_id)), body)
        finally:
            client.close()
            await client.wait_closed()

    return asyncio.run(send())


def client_config(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path], node_ids: Iterable[int]) -> dict[str, str]:
    """A producer's or consumer's settings for the nodes' SASL_SSL client listeners, as User:writer."""
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{cluster.nodes[n].client_port}" for n in node_ids),  # type: ignore[attr-defined]
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(tls[2]),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "writer",
        "sasl.password": "writer-secret",
    }


def produce_secured(config: dict[str, str], name: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 30000})
    acked: list[tuple[int, int, bytes]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for value in values:
        producer.produce(name, value, on_delivery=delivered)
    producer.flush(TIMEOUT_S)
    return acked


def test_the_cluster_replicates_and_fails_over_over_sasl_ssl_links(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path]) -> None:
    name = unique_topic("secured")
    create(cluster.bootstrap, name, min_isr=2)
    # The ISR fills only if each follower's fetches were authenticated (SCRAM) and authorized (CLUSTER_ACTION).
    leader, isr = wait_until("a full ISR", lambda: (s := partition_state(cluster.bootstrap, name)) and len(s[1]) == 3 and s, TIMEOUT_S)
    assert isr == (1, 2, 3)
    # The client's own link is SASL_SSL as well: acks=all over secured links end to end.
    acked = produce_secured(client_config(cluster, tls, cluster.nodes), name, [b"s%d" % i for i in range(300)])
    assert len(acked) == 300

    # Past two controller sessions: heartbeats and Raft go on over re-authenticated connections.
    time.sleep(2 * REAUTH_MS / 1000)
    assert all(n.running for n in cluster.nodes.values())
    # The Raft followers' fetches to the leader, at least, outlive several sessions.
    retired = [e for n in cluster.nodes.values() for e in n.events_named("network_client.disconnected") if e.get("reason") == SESSION_DUE]
    assert len(retired) >= 2, "no node replaced a connection whose session was ending"

    cluster.nodes[leader].kill()
    survivor = next(n for n in cluster.brokers if n.node_id != leader)
    wait_until("a new leader", lambda: partition_state(survivor.bootstrap, name)[0] not in (leader, -1) or None, TIMEOUT_S)
    more = produce(survivor.bootstrap, name, [b"t%d" % i for i in range(100)])
    assert len(more) == 100
    cluster.nodes[leader].launch()
    cluster.nodes[leader].await_started()
    # The restarted node registers, catches up and is taken back: every link authenticated anew.
    wait_until("the restarted node back in the ISR", lambda: leader in partition_state(survivor.bootstrap, name)[1] or None, TIMEOUT_S)
    survivors = [n for n in cluster.nodes if n != leader]
    assert sorted(read_all(survivor.bootstrap, name, 1, 400, client_config(cluster, tls, survivors))) == sorted(acked + more)


def test_a_principal_without_cluster_action_is_refused_raft_and_heartbeats(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path]) -> None:
    heartbeat = BrokerHeartbeatRequest(broker_id=i32(1), broker_epoch=i64(1), current_metadata_offset=i64(0), want_fence=False, want_shut_down=False)
    assert ask_controller(cluster, tls, heartbeat, "alice", "alice-secret").error_code == ErrorCode.cluster_authorization_failed
    quorum = DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=i32(0)),)),))
    assert ask_controller(cluster, tls, quorum, "alice", "alice-secret").error_code == ErrorCode.cluster_authorization_failed
    vote = vote_v1.VoteRequest(cluster_id=cluster.cluster_id, voter_id=i32(1), topics=())
    assert ask_controller(cluster, tls, vote, "alice", "alice-secret").error_code == ErrorCode.cluster_authorization_failed
    # The nodes' own principal is a super user.
    assert ask_controller(cluster, tls, quorum, "controller", "controller-secret").error_code == ErrorCode.none


def test_a_wrong_password_or_no_tls_gets_no_answer_from_a_controller(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path]) -> None:
    quorum = DescribeQuorumRequest(topics=())
    with pytest.raises(AuthenticationError, match="Invalid username or password"):
        ask_controller(cluster, tls, quorum, "controller", "wrong")
    # Plain TCP: the listener's TLS handshake never completes, and nothing is answered.
    with socket.create_connection(("127.0.0.1", controller_port(cluster, 1)), timeout=10) as sock:
        sock.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x02ab")
        sock.settimeout(10)
        try:
            answer = sock.recv(4096)
        except (ConnectionResetError, TimeoutError):
            answer = b""
        assert not answer.startswith(b"\x00\x00\x00"), answer
    # A client that does not trust the test CA refuses the controller's certificate.
    untrusted = ClientChannel("CONTROLLER", ssl.create_default_context(), "PLAIN", {"username": "controller", "password": "controller-secret"})

    async def send() -> None:
        client = NetworkClient("untrusting", request_timeout_ms=10000, channel=untrusted)
        try:
            await client.send(("127.0.0.1", controller_port(cluster, 1)), quorum)
        finally:
            client.close()
            await client.wait_closed()

    with pytest.raises(DisconnectError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(send())
    assert all(n.running for n in cluster.nodes.values())
    # Nothing of this disturbed the cluster: a new topic is still created and replicated.
    name = unique_topic("after")
    create(cluster.bootstrap, name)
    assert len(produce(cluster.bootstrap, name, [uuid.uuid4().bytes])) == 1


def envelope(inner: Any, principal: bytes | None, address: bytes = bytes([10, 1, 2, 3]), client_id: str = "forwarded-client") -> EnvelopeRequest:
    """What a broker forwards: ``inner``'s header and body (no size), the client's principal and address."""
    return EnvelopeRequest(request_data=encode_request(inner, 7, client_id)[4:], request_principal=principal, client_host_address=address)


def create_topics(name: str) -> CreateTopicsRequest:
    topic = CreatableTopic(name=TopicName(name), num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=())
    return CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False)


def decode_response(request: Any, data: bytes | None, correlation_id: int) -> Any:
    """The inner answer an EnvelopeResponse carries: its header, then its body."""
    assert data is not None
    api_key, version = int(request.__api_key__), int(request.__version__)
    assert int.from_bytes(data[:4], "big") == correlation_id
    offset = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
    response, _ = entity_reader(response_schema(api_key, version))(memoryview(data).toreadonly(), offset)
    return response


def test_an_envelope_is_answered_for_the_principal_it_carries(cluster: KafkaCluster, tls: tuple[TestCA, Path, Path]) -> None:
    """Kafka's brokers forward admin requests in an Envelope: the controller authorizes the
    client's principal, not the broker's, and only a broker may send one."""
    denied, allowed = unique_topic("alice"), unique_topic("anonymous")
    quorum = ask_controller(cluster, tls, DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=i32(0)),)),)), "controller", "controller-secret")
    active = int(quorum.topics[0].partitions[0].leader_id)

    def forward(request: EnvelopeRequest, username: str = "controller") -> Any:
        return ask_controller(cluster, tls, request, username, f"{username}-secret", active)

    answer = forward(envelope(create_topics(denied), serialize_principal("User:alice")))
    assert answer.error_code == ErrorCode.none
    [topic] = decode_response(create_topics(denied), answer.response_data, 7).topics
    assert (topic.name, topic.error_code) == (denied, ErrorCode.topic_authorization_failed)

    answer = forward(envelope(create_topics(allowed), serialize_principal("User:ANONYMOUS")))
    [topic] = decode_response(create_topics(allowed), answer.response_data, 7).topics
    assert (topic.name, topic.error_code) == (allowed, ErrorCode.none)

    # Sent straight to the controller, alice's request is authorized for her in the same way.
    [topic] = ask_controller(cluster, tls, create_topics(denied), "alice", "alice-secret", active).topics
    assert (topic.name, topic.error_code) == (denied, ErrorCode.topic_authorization_failed)

    # Only a principal with CLUSTER_ACTION may forward, and only a forwardable API with a readable principal.
    refused = forward(envelope(create_topics(denied), serialize_principal("User:ANONYMOUS")), "alice")
    assert (refused.error_code, refused.response_data) == (ErrorCode.cluster_authorization_failed, None)
    garbled = forward(envelope(create_topics(denied), b"\x00\x00\xff"))
    assert garbled.error_code == ErrorCode.principal_deserialization_failure
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert forward(envelope(metadata, serialize_principal("User:ANONYMOUS"))).error_code == ErrorCode.invalid_request
    assert forward(envelope(create_topics(denied), serialize_principal("User:ANONYMOUS"), address=b"\x01\x02\x03")).error_code == ErrorCode.invalid_request
