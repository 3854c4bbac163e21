"""Apache Kafka 4.4 under the chaos campaign: ``--target kafka`` runs the same workloads, faults and
checkers against combined KRaft nodes of Kafka itself (benchmarks/apache_kafka.py), as a control.
Where Kafka shows an anomaly under the same faults, the checker or a client is at fault; where only
kbroker does, kbroker is.

``KafkaChaosCluster`` offers the nemesis what tests/cluster/cluster.py's KafkaCluster does: nodes to
kill, pause, stop and launch, and every node-to-node link behind a proxy it can cut.

How the links are proxied. A Kafka node advertises one address per listener to all its peers, so a
port per peer is not possible; as for kbroker, each node's CONTROLLER and INTERNAL (inter-broker)
listeners sit behind a demultiplexing proxy (tests/cluster/link_proxy.py) that reads the client id
of a connection's first request and hands the connection to the link of the node that opened it.
Kafka's node-to-node clients all name themselves after their node (``KAFKA_CLIENT_ID``). The
voters in ``controller.quorum.voters`` and the advertised CONTROLLER listener (which a Raft leader
announces to its followers, and brokers then send heartbeats and AlterPartition to) are the
controller's proxy port; the advertised INTERNAL listener (replica fetches, transaction markers)
is the broker's. Clients keep the PLAINTEXT listener, direct.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.apache_kafka import (
    LOG4J2_PROPERTIES, KafkaNode, KafkaReferenceCluster, format_storage, free_ports, kill_nodes, random_cluster_id, start_nodes,
)
from tests.cluster.cluster import CuttableLinks, KafkaCluster
from tests.cluster.link_proxy import LinkProxy, ProxyLoop

# What Kafka 4.4's node-to-node clients call themselves (seen on the proxies): raft-client-<id> (the
# Raft client), <id> alone (the broker's channels to the active controller: heartbeats,
# AlterPartition, forwarding), broker-<id>-fetcher-<n> and broker-<id>-txn-marker-sender (replica
# fetchers, transaction markers), AddPartitionsManager-client-<id> (a leader verifying a
# transaction with its coordinator, KIP-890).
KAFKA_CLIENT_ID = re.compile(r"(?:raft-client-|broker-|AddPartitionsManager-client-)?(\d+)(?:-|$)")
# How long a Kafka 4.4 broker waits for the controller to approve its controlled shutdown
# (KafkaBroker.shutdown(): Duration.ofMinutes(5)); kbroker's broker stops once its heartbeats have
# gone unanswered for a broker session.
CONTROLLED_SHUTDOWN_S = 300.0
# Client port, controller port, the controller's proxy, the INTERNAL listener and its proxy.
PORTS_PER_NODE = 5


class ChaosKafkaNode(KafkaNode):
    def stop(self, timeout_s: float = CONTROLLED_SHUTDOWN_S + 30.0) -> None:
        """SIGTERM, waiting as long as Kafka may take over it: a node cut off from the controller
        (a clean restart inside a partition) waits out its whole controlled-shutdown timeout."""
        super().stop(timeout_s)

    def warm_up(self) -> None:
        """Nothing: a kbroker node's next interpreter is started ahead of a restart, but a JVM
        cannot be, so a Kafka node's restart includes its JVM's start."""


class KafkaChaosCluster(CuttableLinks):
    """``size`` combined broker+controller nodes of Apache Kafka with a static quorum, every
    node-to-node link cuttable: ``links[(a, b)]`` (node a to controller b) and ``broker_links[(a, b)]``
    (broker a to broker b's INTERNAL listener)."""

    def __init__(self, root: Path, lib: Path, *, size: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.root = root
        self.cluster_id = random_cluster_id()
        root.mkdir(parents=True, exist_ok=True)
        log4j_config = root / "log4j2.properties"
        log4j_config.write_text(LOG4J2_PROPERTIES)
        ports = iter(free_ports(PORTS_PER_NODE * size))
        ids = list(range(1, size + 1))
        self.nodes = {i: ChaosKafkaNode(i, next(ports), next(ports), root / f"node{i}", lib, log4j_config) for i in ids}
        self.controller_proxy_ports = {i: next(ports) for i in ids}
        self.internal_ports = {i: (next(ports), next(ports)) for i in ids}  # listened on, advertised (its proxy)
        self.proxies = ProxyLoop()
        self.links: dict[tuple[int, int], LinkProxy] = {}
        self.broker_links: dict[tuple[int, int], LinkProxy] = {}
        for b, node in self.nodes.items():
            peers = [a for a in ids if a != b]
            for a, link in self.proxies.add_demux(self.controller_proxy_ports[b], node.controller_port, str(b), peers, KAFKA_CLIENT_ID).items():
                self.links[(a, b)] = link
            listen, advertised = self.internal_ports[b]
            for a, link in self.proxies.add_demux(advertised, listen, f"{b}-internal", peers, KAFKA_CLIENT_ID).items():
                self.broker_links[(a, b)] = link
        for node in self.nodes.values():
            node.node_dir.mkdir(parents=True, exist_ok=True)
            props = self.properties(node) | (overrides or {})
            node.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def properties(self, node: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in self.controller_proxy_ports.items())
        listen, advertised = self.internal_ports[node.node_id]
        return KafkaReferenceCluster.properties(node, voters, len(self.nodes)) | {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{node.controller_port},INTERNAL://127.0.0.1:{listen}",
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{self.controller_proxy_ports[node.node_id]},"
                f"INTERNAL://127.0.0.1:{advertised}"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        }

    def start(self) -> "KafkaChaosCluster":
        format_storage(self.nodes.values(), self.cluster_id)
        start_nodes(self.nodes.values())
        return self

    def close(self) -> None:
        kill_nodes(self.nodes.values())
        self.proxies.close()

    @property
    def brokers(self) -> list[ChaosKafkaNode]:
        return list(self.nodes.values())

    @property
    def controllers(self) -> list[ChaosKafkaNode]:
        return list(self.nodes.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.running)

    def controller_bootstrap(self, node_id: int) -> str:
        return self.nodes[node_id].controller_bootstrap

    def unproxied_clients(self) -> set[str]:
        """Client ids of node-to-node connections that no link carries, so that no fault cuts them;
        a node's connections to itself aside, anything here means ``KAFKA_CLIENT_ID`` missed one
        of Kafka's clients."""
        return {
            name
            for demux in self.proxies.demuxes
            for name in list(demux.unmatched)
            if not ((match := KAFKA_CLIENT_ID.match(name)) and int(match.group(1)) in self.nodes)
        }


# What the nemesis and the probes act on: kbroker's cluster or Kafka's.
ChaosCluster = KafkaCluster | KafkaChaosCluster
