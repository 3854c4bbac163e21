"""The Apache Kafka reference cluster's files, without Kafka: no JVM is started and nothing is downloaded."""

from __future__ import annotations

import base64
from pathlib import Path

from benchmarks.apache_kafka import KafkaReferenceCluster, cached_lib, random_cluster_id


def read_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_three_nodes_share_one_static_quorum_on_distinct_loopback_ports(tmp_path: Path) -> None:
    cluster = KafkaReferenceCluster(tmp_path, tmp_path / "lib", nodes=3, overrides={"num.io.threads": "4"})
    props = {n: read_properties(node.config_file) for n, node in cluster.nodes.items()}
    ports = [p for node in cluster.nodes.values() for p in (node.client_port, node.controller_port)]
    assert len(set(ports)) == 6
    voters = {p["controller.quorum.voters"] for p in props.values()}
    assert voters == {",".join(f"{n}@127.0.0.1:{node.controller_port}" for n, node in cluster.nodes.items())}
    for n, p in props.items():
        assert p["node.id"] == str(n)
        assert p["process.roles"] == "broker,controller"
        assert p["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{cluster.nodes[n].client_port}"
        assert p["num.io.threads"] == "4"
        assert not any(key.startswith("controller.quorum.") and key != "controller.quorum.voters" for key in p)
    assert cluster.controller_bootstrap(2) == f"127.0.0.1:{cluster.nodes[2].controller_port}"
    assert cluster.bootstrap == ""  # nothing launched


def test_one_node_gets_internal_topics_it_can_host(tmp_path: Path) -> None:
    cluster = KafkaReferenceCluster(tmp_path, tmp_path / "lib", nodes=1)
    p = read_properties(cluster.nodes[1].config_file)
    assert p["offsets.topic.replication.factor"] == "1"
    assert p["transaction.state.log.min.isr"] == "1"


def test_cluster_id_is_a_kafka_uuid() -> None:
    for _ in range(200):
        text = random_cluster_id()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_an_unfinished_download_is_not_cached(tmp_path: Path) -> None:
    (tmp_path / "lib.partial").mkdir()
    assert cached_lib(tmp_path) is None
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "kafka_2.13-4.4.0.jar").write_bytes(b"")
    assert cached_lib(tmp_path) == tmp_path / "lib"
