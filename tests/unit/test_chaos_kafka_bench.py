"""The chaos campaign's Apache Kafka cluster, without Kafka: its nodes' properties and proxy wiring.
No JVM is started and nothing is downloaded (the proxies listen on loopback, idle)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.chaos.campaign import CLUSTER_OVERRIDES, Topology, make_cluster
from tests.chaos.kafka_bench import KAFKA_CLIENT_ID, KafkaChaosCluster
from tests.chaos.profile import PROFILES


def read_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaChaosCluster]:
    c = KafkaChaosCluster(tmp_path, tmp_path / "lib", size=3, overrides={**CLUSTER_OVERRIDES, **PROFILES["fast"].overrides()})
    try:
        yield c
    finally:
        c.close()


def test_every_node_reaches_every_controller_and_broker_through_the_proxies(cluster: KafkaChaosCluster) -> None:
    props = {n: read_properties(node.config_file) for n, node in cluster.nodes.items()}
    proxy = cluster.controller_proxy_ports
    for n, p in props.items():
        node = cluster.nodes[n]
        listen, advertised = cluster.internal_ports[n]
        assert p["controller.quorum.voters"] == ",".join(f"{i}@127.0.0.1:{proxy[i]}" for i in (1, 2, 3))
        assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{node.controller_port},INTERNAL://127.0.0.1:{listen}"
        # What a Raft leader announces and what peers replicate from: the proxies; clients stay direct.
        assert p["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{proxy[n]},INTERNAL://127.0.0.1:{advertised}"
        assert p["inter.broker.listener.name"] == "INTERNAL"
        assert "INTERNAL:PLAINTEXT" in p["listener.security.protocol.map"].split(",")
    ports = [p for n in cluster.nodes.values() for p in (n.client_port, n.controller_port)]
    ports += [*proxy.values(), *(p for pair in cluster.internal_ports.values() for p in pair)]
    assert len(set(ports)) == 15
    pairs = {(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b}
    assert set(cluster.links) == pairs and set(cluster.broker_links) == pairs
    assert all(cluster.links[(a, b)].target_port == cluster.nodes[b].controller_port for a, b in pairs)
    assert all(cluster.broker_links[(a, b)].target_port == cluster.internal_ports[b][0] for a, b in pairs)


def test_the_profile_and_the_campaign_overrides_reach_kafka_under_the_same_names(cluster: KafkaChaosCluster) -> None:
    p = read_properties(cluster.nodes[2].config_file)
    fast = PROFILES["fast"]
    assert p["broker.session.timeout.ms"] == str(fast.session_ms)
    assert p["broker.heartbeat.interval.ms"] == str(fast.heartbeat_ms)
    assert p["replica.lag.time.max.ms"] == str(fast.replica_lag_ms)
    assert p["controller.quorum.fetch.timeout.ms"] == str(fast.quorum_fetch_timeout_ms)
    assert p["group.min.session.timeout.ms"] == str(fast.member_session_ms)
    assert p["transaction.state.log.min.isr"] == "2"
    assert p["log.segment.bytes"] == CLUSTER_OVERRIDES["log.segment.bytes"]
    # Kafka's own, from benchmarks/apache_kafka.py: thread pools for a shared 2-core machine.
    assert p["num.io.threads"] == "2"


@pytest.mark.parametrize(
    "client_id, node",
    [
        ("raft-client-3", 3),
        ("2", 2),
        ("broker-1-fetcher-0", 1),
        ("broker-12-txn-marker-sender", 12),
        ("AddPartitionsManager-client-2", 2),
        ("chaos-nemesis", None),
        ("rdkafka", None),
        ("broker-x", None),
        ("2x", None),
    ],
)
def test_the_client_id_names_the_kafka_node_that_connects(client_id: str, node: int | None) -> None:
    match = KAFKA_CLIENT_ID.match(client_id)
    assert (int(match.group(1)) if match else None) == node


def test_a_nodes_connections_to_itself_are_not_reported_as_uncut(cluster: KafkaChaosCluster) -> None:
    demux = cluster.proxies.demuxes[0]
    demux.unmatched.update({"1", "raft-client-1", "kafka-shiny-new-client"})
    assert cluster.unproxied_clients() == {"kafka-shiny-new-client"}


def test_kafka_runs_combined_nodes_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="combined-N"):
        make_cluster(tmp_path, Topology.parse("separate-3+2"), PROFILES["fast"], "kafka")
