"""A follower's Fetch version follows the finalized metadata.version at run time, as Kafka's
replica fetchers do: v17 in a cluster formatted at 4.0 (4.0-IV3), v18 once `kbroker features
upgrade --metadata 4.4` finalizes 4.4-IV2, with no restart. The leaders' request metrics
(`FetchFollower`, per version: fetches with a replica id, so never a client's) say what arrived."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_metadata_snapshots import metadata_version
from tests.cluster.test_replication import produce
from tests.integration.helpers import unique_topic
from tests.integration.test_cli import kbroker
from tests.integration.test_prometheus_metrics import scrape
from tests.ports import free_ports

TIMEOUT_S = 30.0
BROKERS = (2, 3)  # node 1 is the controller alone: brokers get no Raft Fetch, only followers' fetches


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, dict[int, int]]]:
    ports = dict(zip(BROKERS, free_ports(len(BROKERS))))
    c = KafkaCluster(
        tmp_path_factory.mktemp("fetcher-versions"),
        combined=0,
        controllers=1,
        brokers=len(BROKERS),
        node_overrides={b: {"metrics.listener": f"http://127.0.0.1:{port}"} for b, port in ports.items()},
        format_args=("--release-version", "4.0"),
    )
    try:
        yield c.start(), ports
    finally:
        c.close()


def follower_fetches(ports: dict[int, int]) -> dict[int, float]:
    """Follower Fetch requests the brokers answered so far, per version (summed over the brokers)."""
    counts: dict[int, float] = {}
    for port in ports.values():
        for (name, labels), value in scrape(port).items():
            tags = dict(labels)
            if name == "kafka_network_requestmetrics_requests_total" and tags.get("request") == "FetchFollower" and value:
                counts[int(tags["version"])] = counts.get(int(tags["version"]), 0) + value
    return counts


def test_follower_fetch_version_follows_a_metadata_version_upgrade(cluster: tuple[KafkaCluster, dict[int, int]]) -> None:
    c, ports = cluster
    assert {b: metadata_version(c.nodes[b].bootstrap) for b in BROKERS} == {2: 25, 3: 25}
    name = unique_topic("fetcher-versions")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, 2, 2)], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)
    assert len(produce(c.bootstrap, name, [b"before-%d" % i for i in range(20)])) == 20

    before = wait_until("follower fetches at 4.0-IV3", lambda: (f := follower_fetches(ports)).get(17, 0) >= 4 and f, TIMEOUT_S)
    assert set(before) == {17}, before

    up = kbroker("features", "--bootstrap-server", c.nodes[2].bootstrap, "upgrade", "--metadata", "4.4")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 33.\n"), up.stderr
    wait_until("every broker at 4.4-IV2", lambda: all(metadata_version(c.nodes[b].bootstrap) == 33 for b in BROKERS) or None, TIMEOUT_S)

    # A fetch already out when the image changed may still land as v17: wait for v18, then check
    # that v17 has stopped.
    switched = wait_until("follower fetches at 4.4-IV2", lambda: (f := follower_fetches(ports)).get(18, 0) >= 4 and f, TIMEOUT_S)
    assert len(produce(c.bootstrap, name, [b"after-%d" % i for i in range(20)])) == 20  # acks=all: the followers took them
    later = wait_until("more v18 fetches", lambda: (f := follower_fetches(ports)).get(18, 0) >= switched[18] + 4 and f, TIMEOUT_S)
    assert later.get(17, 0) == switched.get(17, 0), (switched, later)
    assert set(later) == {17, 18}, later
