"""One Apache Kafka 4.4 node's directory and server.properties, and the kbroker process that serves
the very same ones (issue 36): the takeover and `.lock` tests hand the directory back and forth."""

from __future__ import annotations

from pathlib import Path

from benchmarks.apache_kafka import KafkaNode, KafkaReferenceCluster
from tests.integration.conftest import BrokerProcess, retire


class KafkaNodeDir:
    """A single combined Kafka node, formatted by Kafka's StorageTool, and a kbroker on its config."""

    def __init__(self, root: Path, lib: Path, overrides: dict[str, str]) -> None:
        self.cluster = KafkaReferenceCluster(root, lib, nodes=1, overrides=overrides)
        self.kafka: KafkaNode = self.cluster.nodes[1]
        self.data = self.kafka.data_dir
        self.kbroker = BrokerProcess(self.data)
        assert self.kafka.client_port is not None
        self.kbroker.config_file = self.kafka.config_file
        self.kbroker.port = self.kafka.client_port
        self.cluster.format()

    def close(self) -> None:
        self.cluster.close()
        retire(self.kbroker)
