"""Produce and consume over TLS beside plaintext, on kbroker and on Apache Kafka 4.4, in one run.

    python -m benchmarks.tls [--records 200000] [--size 1000] [--broker kbroker|kafka|both]

Each broker runs one node with a PLAINTEXT and an SSL listener (the same PKCS12 keystore, made
fresh by tests/integration/certificates.py); confluent-kafka produces ``--records`` records of
``--size`` bytes to a one-partition topic (acks=1, linger.ms=5, no compression), then a consumer
reads them back, once per listener. It prints MB/s and the broker's CPU seconds for each, as a
markdown table. TLS cannot use sendfile: kbroker reads and encrypts what it serves over TLS.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from benchmarks.harness import BrokerUnderTest, free_port, proc_cpu_seconds
from tests.integration.certificates import TestCA

TIMEOUT_S = 120.0


def client_config(bootstrap: str, tls: bool, ca: Path) -> dict[str, object]:
    if not tls:
        return {"bootstrap.servers": bootstrap}
    return {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(ca), "ssl.endpoint.identification.algorithm": "none"}


def produce(config: dict[str, object], topic: str, records: int, value: bytes) -> float:
    producer = Producer({**config, "acks": 1, "linger.ms": 5, "queue.buffering.max.messages": 200000})
    start = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return time.monotonic() - start


def consume(config: dict[str, object], topic: str, records: int) -> float:
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    start = 0.0
    deadline = time.monotonic() + TIMEOUT_S
    while seen < records and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                if not seen:
                    start = time.monotonic()
                seen += 1
    elapsed = time.monotonic() - start
    consumer.close()
    assert seen >= records, f"read {seen} of {records}"
    return elapsed


def measure(name: str, pid: int, plain: str, tls: str, ca: Path, records: int, size: int) -> list[tuple[str, str, str, float, float]]:
    rows = []
    value = b"x" * size
    admin = AdminClient({"bootstrap.servers": plain})
    for label, bootstrap, secure in (("PLAINTEXT", plain, False), ("SSL", tls, True)):
        topic = f"bench-{label.lower()}-{int(time.time() * 1000)}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
        time.sleep(1)
        config = client_config(bootstrap, secure, ca)
        cpu = proc_cpu_seconds(pid)
        seconds = produce(config, topic, records, value)
        rows.append((name, label, "produce", records * size / seconds / 1e6, proc_cpu_seconds(pid) - cpu))
        cpu = proc_cpu_seconds(pid)
        seconds = consume(config, topic, records)
        rows.append((name, label, "consume", records * size / seconds / 1e6, proc_cpu_seconds(pid) - cpu))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--broker", choices=("kbroker", "kafka", "both"), default="both")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-tls-bench-") as tmp:
        directory = Path(tmp)
        ca = TestCA()
        ca_file = ca.write_ca(directory / "ca.pem")
        keystore = ca.write_pkcs12_keystore(ca.issue("localhost"), directory / "server.p12", "store-pw")
        stores = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore), "ssl.keystore.password": "store-pw"}
        if args.broker in ("kbroker", "both"):
            ssl_port = free_port()
            broker = BrokerUnderTest("kbroker")
            broker.start({**stores, "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}"})
            try:
                rows += measure("kbroker", broker.pid, broker.bootstrap, f"127.0.0.1:{ssl_port}", ca_file, args.records, args.size)
            finally:
                broker.close()
        if args.broker in ("kafka", "both"):
            cluster, ssl_port = KafkaReferenceCluster.one_node_with_listener(directory / "kafka", fetch_jars(), "SSL", stores)
            node = cluster.nodes[1]
            cluster.start()
            try:
                assert node.proc is not None
                rows += measure("Apache Kafka 4.4", node.proc.pid, node.bootstrap, f"127.0.0.1:{ssl_port}", ca_file, args.records, args.size)
            finally:
                cluster.close()
    print(f"{args.records} records of {args.size} B, one partition, confluent-kafka, acks=1")
    print("| broker | listener | direction | MB/s | broker CPU s |")
    print("|---|---|---|---|---|")
    for name, listener, direction, rate, cpu in rows:
        print(f"| {name} | {listener} | {direction} | {rate:.1f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
