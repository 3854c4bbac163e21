"""The same Envelope requests to Apache Kafka 4.4's controller listener and to kbroker's (one
combined node each, PLAINTEXT, no authorizer): the Envelope's error code and the inner answer,
side by side. `python -m tests.integration.envelope_against_kafka` (Kafka's jars from
benchmarks/apache_kafka.py's cache); tests/cluster/test_secured_links.py holds kbroker to the same
codes with an authorizer on."""

from __future__ import annotations

import datetime
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from broker.controller.envelope import serialize_principal
from broker.wire_client import encode_request, exchange
from protocol.api_keys import response_header_version, response_schema
from tests.cluster.cluster import KafkaCluster

ALICE = serialize_principal("User:alice")
ADDRESS = bytes([10, 1, 2, 3])
Case = tuple[str, Callable[[], Any], bytes | None, bytes]


def create_topics(name: str) -> CreateTopicsRequest:
    topic = CreatableTopic(name=TopicName(name), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=())
    return CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False)


CASES: list[Case] = [
    ("CreateTopics for User:alice", lambda: create_topics("envelope-a"), ALICE, ADDRESS),
    ("the same again: it exists", lambda: create_topics("envelope-a"), ALICE, ADDRESS),
    ("a principal that does not parse", lambda: create_topics("envelope-b"), b"\x00\x00\xff", ADDRESS),
    ("no principal", lambda: create_topics("envelope-b"), None, ADDRESS),
    ("principal data version 1", lambda: create_topics("envelope-b"), b"\x00\x01" + ALICE[2:], ADDRESS),
    ("a 3-byte address", lambda: create_topics("envelope-b"), ALICE, b"\x01\x02\x03"),
    ("Metadata, never forwarded", lambda: MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), ALICE, ADDRESS),
]


def inner_answer(request: Any, data: bytes) -> list[tuple[str, int, str | None]]:
    key, version = int(request.__api_key__), int(request.__version__)
    offset = 4 + (1 if response_header_version(key, version) >= 1 else 0)
    response, _ = entity_reader(response_schema(key, version))(memoryview(data).toreadonly(), offset)
    return [(t.name, int(t.error_code), t.error_message) for t in response.topics]


def answers(controller_port: int) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for _, inner, principal, address in CASES:
        request = inner()
        envelope = EnvelopeRequest(request_data=encode_request(request, 7, "forwarded")[4:], request_principal=principal, client_host_address=address)
        with socket.create_connection(("127.0.0.1", controller_port), timeout=30) as sock:
            answer = exchange(sock, envelope)
        inner_result = inner_answer(request, answer.response_data) if answer.response_data is not None else None
        out.append((int(answer.error_code), inner_result))
    return out


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="envelope-against-kafka-"))
    kafka = KafkaReferenceCluster(root / "kafka", fetch_jars(), nodes=1).start()
    try:
        from_kafka = answers(kafka.nodes[1].controller_port)
    finally:
        kafka.kill(1)
    internal = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"}
    kbroker = KafkaCluster(root / "kbroker", combined=1, overrides=internal).start()
    try:
        port = kbroker.nodes[1].spec.controller_port
        assert port is not None
        from_kbroker = answers(port)
    finally:
        kbroker.close()
    for (name, *_), theirs, ours in zip(CASES, from_kafka, from_kbroker):
        print(f"{'same' if theirs == ours else 'DIFFERENT'}: {name} | Kafka 4.4 {theirs} | kbroker {ours}")


if __name__ == "__main__":
    main()
