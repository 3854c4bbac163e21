"""Followers fetch in incremental fetch sessions (KIP-227): three combined nodes with metrics.listener,
one RF=3 topic of PARTITIONS partitions and no traffic, as Kafka 4.4's FetchSessionCache shows it.

On a node that is not the active controller (so that no Raft fetch is counted with the replicas'),
its FetchSessionCache holds one session per follower, both privileged and never evicted, caching
every partition it leads once per follower (NumIncrementalFetchSessions,
NumIncrementalFetchPartitionsCached); and once the partitions are idle the followers' fetches
(RequestMetrics RequestBytes of FetchFollower) name no partition: each is a fraction of the size
of a fetch naming the partitions it follows from that node.
benchmarks/idle_followers.py measures the same on Kafka 4.4 (docs/design/replication.md).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_cluster_metrics import Samples, scrape
from tests.integration.helpers import unique_topic
from tests.ports import free_ports

TIMEOUT_S = 60.0
PARTITIONS = 45
# What each partition of a Fetch request (v12+) adds at least: its index, current leader epoch,
# fetch offset, last fetched epoch, log start offset, max bytes and tagged fields (4+4+8+4+8+4+1).
PARTITION_BYTES = 33
IDLE_FETCHES = 12
FETCH_SESSION_CACHE = "kafka_server_fetchsessioncache_"
FOLLOWER_REQUEST_BYTES = ("kafka_network_requestmetrics_requestbytes", frozenset({("request", "FetchFollower")}))

def value(samples: Samples, name: str, labels: frozenset[tuple[str, str]] = frozenset()) -> float:
    return samples.get((name, labels), 0.0)


def follower_fetches(samples: Samples) -> tuple[float, float]:
    """(count, total bytes) of the follower fetches this node has answered."""
    name, labels = FOLLOWER_REQUEST_BYTES
    return value(samples, name + "_count", labels), value(samples, name + "_sum", labels)


def test_idle_followers_fetch_incrementally_in_sessions_their_leader_caches(tmp_path: Path) -> None:
    listeners = {i + 1: f"http://127.0.0.1:{port}" for i, port in enumerate(free_ports(3))}
    cluster = KafkaCluster(tmp_path, node_overrides={n: {"metrics.listener": url} for n, url in listeners.items()}).start()
    try:
        topic = unique_topic("idle")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S)

        def led_by_node() -> dict[int, int] | None:
            partitions = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions.values()
            if len(partitions) != PARTITIONS or any(len(p.isrs) != 3 for p in partitions):
                return None
            return {n: sum(p.leader == n for p in partitions) for n in cluster.nodes}

        led = wait_until("every ISR full", led_by_node, TIMEOUT_S)
        nodes = [n for n in cluster.nodes if value(scrape(cluster, n), "kafka_controller_kafkacontroller_activecontrollercount") == 0]
        assert len(nodes) == 2, "one active controller among three"

        for node_id in nodes:

            def sessions_whole(n: int = node_id) -> bool:
                samples = scrape(cluster, n)
                sessions = value(samples, FETCH_SESSION_CACHE + "numincrementalfetchsessions")
                cached = value(samples, FETCH_SESSION_CACHE + "numincrementalfetchpartitionscached")
                return (sessions, cached) == (2, 2 * led[n])

            wait_until(f"node {node_id} caching one session per follower, each with the {led[node_id]} partitions it leads", sessions_whole, TIMEOUT_S)
        # The followers take the leaders' high watermarks after the ISR is whole; then nothing moves.
        time.sleep(1.0)
        before = {n: follower_fetches(scrape(cluster, n)) for n in nodes}
        for node_id in nodes:

            def idle_fetches(n: int = node_id) -> tuple[Samples, float, float] | None:
                samples = scrape(cluster, n)
                count, total = (a - b for a, b in zip(follower_fetches(samples), before[n]))
                return (samples, count, total) if count >= IDLE_FETCHES else None

            # Two followers long-polling for replica.fetch.wait.max.ms (500 ms) each: about 4 a second.
            samples, count, total = wait_until(f"{IDLE_FETCHES} idle follower fetches answered by node {node_id}", idle_fetches, TIMEOUT_S)
            full = PARTITION_BYTES * led[node_id]
            mean = total / count
            print(f"node {node_id}: {count:.0f} idle follower fetches of {mean:.1f} bytes on average; a full one is over {full} bytes")
            assert mean < full / 4, f"node {node_id}'s idle follower fetches are {mean:.0f} bytes on average, a full fetch at least {full}"
            assert value(samples, FETCH_SESSION_CACHE + "numincrementalfetchsessions") == 2
            assert value(samples, FETCH_SESSION_CACHE + "incrementalfetchsessionevictions_total") == 0
    finally:
        cluster.close()
