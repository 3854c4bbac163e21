"""Three combined nodes of Apache Kafka 4.4 and three of kbroker, given the same security
properties: every listener SASL_SSL (the client and inter-broker listener and the controllers'),
PLAIN to the controllers and between brokers from one JAAS entry, PEM stores, hostname
verification on. Each cluster then serves the same SASL_SSL client: a topic of three replicas
whose ISR fills, 1,000 records produced with acks=all and read back.

`python -m tests.cluster.secured_links_against_kafka [kafka] [kbroker]` (Kafka's jars from
benchmarks/apache_kafka.py's cache). tests/cluster/test_secured_links.py is the CI test.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from tests.cluster.cluster import KafkaCluster
from tests.integration.certificates import TestCA

RECORDS = 1000
TIMEOUT_S = 60.0
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="node" password="node-secret" '
    'user_node="node-secret" user_alice="alice-secret";'
)


def properties(keystore: Path, truststore: Path) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,PLAINTEXT:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
    }


def exercise(bootstrap: str, truststore: Path) -> str:
    config = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(truststore), "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    admin = AdminClient(config)
    admin.create_topics([NewTopic("secured", 1, 3, config={"min.insync.replicas": "2"})])["secured"].result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    isr: list[int] = []
    while len(isr) < 3 and time.monotonic() < deadline:
        isr = sorted(admin.list_topics("secured", timeout=10).topics["secured"].partitions[0].isrs)
        time.sleep(0.5)
    producer = Producer({**config, "acks": "all"})
    acked: list[int] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked.append(msg.offset())

    for i in range(RECORDS):
        producer.produce("secured", b"v%d" % i, on_delivery=delivered)
    producer.flush(TIMEOUT_S)
    consumer = Consumer({**config, "group.id": "secured", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("secured", 0, 0)])
    read: list[Any] = []
    while len(read) < RECORDS and time.monotonic() < deadline + TIMEOUT_S:
        read += [m for m in consumer.consume(500, 1) if m.error() is None]
    consumer.close()
    return f"ISR {isr}, {len(acked)} acknowledged, {len(read)} read"


def main(which: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="secured-links-against-kafka-"))
    ca = TestCA()
    keystore = ca.write_pem_keystore(ca.issue("node"), root / "node.pem")
    truststore = ca.write_ca(root / "ca.pem")
    props = properties(keystore, truststore)
    if "kafka" in which:
        kafka = KafkaReferenceCluster(root / "kafka", fetch_jars(), nodes=3, overrides=props).start()
        try:
            print("Apache Kafka 4.4:", exercise(kafka.bootstrap, truststore), flush=True)
        finally:
            for node_id in kafka.nodes:
                kafka.kill(node_id)
    if "kbroker" in which:
        kbroker = KafkaCluster(root / "kbroker", combined=3, overrides=props).start()
        try:
            print("kbroker:", exercise(kbroker.bootstrap, truststore), flush=True)
        finally:
            kbroker.close()


if __name__ == "__main__":
    main(sys.argv[1:] or ["kafka", "kbroker"])
