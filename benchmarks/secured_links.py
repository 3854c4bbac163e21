"""What secured links between nodes cost: acks=all produce throughput on three combined kbroker
nodes (one partition, RF 3) with PLAINTEXT links, then with SASL_SSL links (PLAIN to the
controllers, SCRAM-SHA-512 between brokers, as tests/cluster/test_secured_links.py configures
them). The client's own link is PLAINTEXT in both, so only the nodes' links differ.

    python -m benchmarks.secured_links [--records 200000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import create, partition_state
from tests.cluster.test_secured_links import CONTROLLER_JAAS, INTERNAL_JAAS
from tests.integration.certificates import TestCA

VALUE = b"x" * 1000
WARM_UP = 2000


def secured_overrides(root: Path) -> dict[str, str]:
    ca = TestCA()
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL,INTERNAL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca.write_pem_keystore(ca.issue("node"), root / "node.pem")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.write_ca(root / "ca.pem")),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": INTERNAL_JAAS,
    }


def produce_rate(records: int, secured: bool) -> float:
    """MB/s of record values acknowledged with acks=all."""
    root = Path(tempfile.mkdtemp(prefix="bench-secured-links-"))
    overrides = secured_overrides(root) if secured else {}
    scram = ("--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-secret]") if secured else ()
    cluster = KafkaCluster(root, combined=3, proxy_inter_broker=True, overrides=overrides, format_args=scram).start()
    try:
        create(cluster.bootstrap, "bench", min_isr=2)
        wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, "bench")[1]) == 3 or None, 60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "enable.idempotence": True})
        for _ in range(WARM_UP):
            producer.produce("bench", VALUE)
        producer.flush(60)
        started = time.perf_counter()
        for _ in range(records):
            while True:
                try:
                    producer.produce("bench", VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)
        return records * len(VALUE) / (time.perf_counter() - started) / 1e6
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    for secured in (False, True):
        links = "SASL_SSL" if secured else "PLAINTEXT"
        print(f"{links} links: {produce_rate(args.records, secured):.1f} MB/s, acks=all, RF 3", flush=True)


if __name__ == "__main__":
    main()
